//! etc/grafana-dashboard.json asks only for what the watchdog writes: every metric name, label and
//! event kind in its queries is one `metrics::render` produces (or node_exporter's `instance`), and
//! every metric family is shown somewhere. Where `promtool` is installed, every query also parses,
//! and the "over 90% of quota" queries pick the right jobs from rendered samples.

use std::collections::BTreeSet;
use std::fs;
use std::path::PathBuf;
use std::process::Command;

use gmq_core::job_telemetry::{AllocatorTelemetry, JobTelemetry, ReportedTask};
use gmq_core::metrics::{render, GpuMetrics, JobMetrics, NodeEvents};
use gmq_core::record::{EventCounts, EventKind};
use serde_json::Value;

const GIB: u64 = 1 << 30;
const NAMESPACE: &str = "gpu_mem_quota_";
/// The label node_exporter adds to every sample it exports.
const NODE_LABEL: &str = "instance";

fn job(job_id: u32, user: &str, gpus: &[(u64, u64)]) -> JobMetrics {
    let mut events = EventCounts::default();
    events.add(EventKind::Warn, 1);
    JobMetrics {
        job_id,
        sluid: None,
        user: user.into(),
        gpus: gpus
            .iter()
            .enumerate()
            .map(|(index, &(used_gib, quota_gib))| GpuMetrics {
                index: index as u32,
                uuid: format!("GPU-{job_id}-{index}"),
                used_bytes: used_gib * GIB,
                quota_bytes: quota_gib * GIB,
                peak_bytes: used_gib * GIB,
            })
            .collect(),
        events,
        job_reported: Vec::new(),
        job_reported_not_shown: 0,
    }
}

/// Three jobs on one node: 7 has GPU 0 at 95% of its quota and GPU 1 at 25%; 8 sits at 50%;
/// 9 is exactly at 90%, which is not over it.
/// Job 7's task 0 also reports its allocator's telemetry (the job's word).
fn sample_jobs() -> Vec<JobMetrics> {
    let mut seven = job(7, "alice", &[(38, 40), (10, 40)]);
    seven.job_reported.push(ReportedTask::new(
        0,
        JobTelemetry {
            job_id: Some(7),
            pid: 4242,
            updated_at: 1_796_000_000,
            allocator: AllocatorTelemetry {
                allocated_bytes: 30 * GIB,
                reserved_bytes: 36 * GIB,
                peak_allocated_bytes: 34 * GIB,
                peak_reserved_bytes: 37 * GIB,
                num_alloc_retries: 2,
                num_ooms: 1,
                fragmentation: 1667,
            },
            controller: None,
        },
    ));
    vec![seven, job(8, "bob", &[(20, 40)]), job(9, "carol", &[(36, 40)])]
}

/// The samples of the exposition text: (`name`, `{labels}`, value), comments skipped.
fn samples(text: &str) -> Vec<(String, String, String)> {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .map(|line| {
            let open = line.find('{').expect("every sample has labels");
            let close = line.rfind('}').expect("labels close");
            (
                line[..open].to_string(),
                line[open..=close].to_string(),
                line[close + 1..].trim().to_string(),
            )
        })
        .collect()
}

/// Metric names, label names and `kind` values the watchdog writes.
struct Vocabulary {
    metrics: BTreeSet<String>,
    labels: BTreeSet<String>,
    kinds: BTreeSet<String>,
}

fn vocabulary() -> Vocabulary {
    let mut vocabulary = Vocabulary {
        metrics: BTreeSet::new(),
        labels: BTreeSet::new(),
        kinds: BTreeSet::new(),
    };
    vocabulary.labels.insert(NODE_LABEL.to_string());
    // The jobs' files and the node's event counters, which outlive them.
    let mut node_events = NodeEvents::default();
    let texts: Vec<String> = sample_jobs()
        .iter()
        .map(|job| {
            node_events.add(&job.user, &job.events);
            render(job)
        })
        .collect();
    for text in texts.iter().chain([&node_events.render()]) {
        for (name, labels, _) in samples(text) {
            vocabulary.metrics.insert(name);
            // The sample's label values are plain (no commas or quotes inside), so splitting is safe.
            for pair in labels.trim_matches(['{', '}']).split(',') {
                let (label, value) = pair.split_once('=').expect("label=value");
                if label == "kind" {
                    vocabulary.kinds.insert(value.trim_matches('"').to_string());
                }
                vocabulary.labels.insert(label.to_string());
            }
        }
    }
    vocabulary
}

fn dashboard() -> Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../etc/grafana-dashboard.json");
    let text = fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every PromQL text in the dashboard: panel targets and annotations (`expr`), template variables
/// (`query` as text or as an object with its own `query`, and `definition`).
fn queries(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Object(members) => {
            for (key, member) in members {
                match (key.as_str(), member) {
                    ("expr" | "query" | "definition", Value::String(text)) if text.contains(NAMESPACE) => {
                        out.push(text.clone())
                    }
                    _ => queries(member, out),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|item| queries(item, out)),
        _ => {}
    }
}

fn all_queries() -> Vec<String> {
    let mut out = Vec::new();
    queries(&dashboard(), &mut out);
    out
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The `gpu_mem_quota_*` names a query mentions.
fn metric_names(query: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = query;
    while let Some(at) = rest.find(NAMESPACE) {
        let starts_a_name = !rest[..at].ends_with(is_name_char);
        let tail = &rest[at..];
        let end = tail.find(|c: char| !is_name_char(c)).unwrap_or(tail.len());
        if starts_a_name {
            names.push(tail[..end].to_string());
        }
        rest = &tail[end..];
    }
    names
}

/// The labels a query names: in selectors (`{label="v", ...}`) and in `by (...)` / `without (...)`;
/// and the values it compares `kind` with.
fn labels_and_kinds(query: &str) -> (Vec<String>, Vec<String>) {
    let mut labels = Vec::new();
    let mut kinds = Vec::new();
    let mut rest = query;
    while let Some(open) = rest.find('{') {
        let close = rest[open..].find('}').expect("selector closes") + open;
        for matcher in rest[open + 1..close].split(',') {
            let op = matcher.find(['=', '!']).expect("label matcher");
            let label = matcher[..op].trim();
            let value = matcher[op..]
                .trim_start_matches(['=', '!', '~'])
                .trim()
                .trim_matches('"');
            if label == "kind" {
                kinds.extend(value.split('|').map(str::to_string));
            }
            labels.push(label.to_string());
        }
        rest = &rest[close + 1..];
    }
    for clause in ["by (", "without ("] {
        let mut rest = query;
        while let Some(at) = rest.find(clause) {
            let list = &rest[at + clause.len()..];
            let close = list.find(')').expect("grouping closes");
            labels.extend(list[..close].split(',').map(|l| l.trim().to_string()));
            rest = &list[close..];
        }
    }
    (labels, kinds)
}

#[test]
fn the_name_scanner_finds_whole_names_only() {
    let table: [(&str, &[&str]); 4] = [
        ("gpu_mem_quota_used_bytes", &["gpu_mem_quota_used_bytes"]),
        (
            "a / (gpu_mem_quota_limit_bytes{x=\"1\"} > 0)",
            &["gpu_mem_quota_limit_bytes"],
        ),
        ("my_gpu_mem_quota_used_bytes", &[]),
        (
            "rate(gpu_mem_quota_events_total[1m]) + gpu_mem_quota_x",
            &["gpu_mem_quota_events_total", "gpu_mem_quota_x"],
        ),
    ];
    for (query, want) in table {
        assert_eq!(metric_names(query), want, "{query}");
    }
}

#[test]
fn every_query_names_metrics_the_watchdog_writes() {
    let vocabulary = vocabulary();
    let queries = all_queries();
    assert!(
        queries.len() >= 10,
        "found only {} queries: is the scan broken?",
        queries.len()
    );
    let mut used = BTreeSet::new();
    for query in &queries {
        let names = metric_names(query);
        assert!(!names.is_empty(), "{query}");
        for name in names {
            assert!(
                vocabulary.metrics.contains(&name),
                "{name} is not rendered by metrics.rs, in: {query}"
            );
            used.insert(name);
        }
    }
    assert_eq!(
        used, vocabulary.metrics,
        "every metric family appears on the dashboard"
    );
}

#[test]
fn every_query_names_labels_and_kinds_the_watchdog_writes() {
    let vocabulary = vocabulary();
    for query in all_queries() {
        let (labels, kinds) = labels_and_kinds(&query);
        for label in labels {
            assert!(
                vocabulary.labels.contains(&label),
                "label {label:?} is never exported, in: {query}"
            );
        }
        for kind in kinds {
            assert!(
                vocabulary.kinds.contains(&kind),
                "kind {kind:?} is never exported, in: {query}"
            );
        }
    }
}

/// A query as Prometheus sees it once Grafana has filled in the variables: every node, job 7.
fn as_prometheus_sees_it(query: &str) -> String {
    query
        .replace("$__rate_interval", "2m")
        .replace("$instance", ".+")
        .replace("$job_id", "7")
}

/// A scratch directory for promtool's files, removed when dropped (even when the test fails).
fn scratch_dir(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("gmq-dashboard-{name}-"))
        .tempdir()
        .unwrap()
}

/// Runs promtool; `None` where it is not installed (Debian's `prometheus` package has it).
fn promtool(args: &[&str]) -> Option<(bool, String)> {
    let out = Command::new("promtool").args(args).output().ok()?;
    let said = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    Some((out.status.success(), said))
}

/// YAML's single-quoted scalar: only `'` needs escaping.
fn yaml_quoted(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

#[test]
fn promtool_parses_every_query() {
    let scratch = scratch_dir("parse");
    let mut rules = String::from("groups:\n  - name: dashboard\n    rules:\n");
    for (n, query) in all_queries().iter().enumerate() {
        // A template-variable query is a Grafana function; its inner selector is the PromQL.
        let promql = match query.strip_prefix("label_values(") {
            Some(args) => args
                .rsplit_once(',')
                .expect("label_values(selector, label)")
                .0
                .to_string(),
            None => query.clone(),
        };
        rules += &format!(
            "      - record: dashboard_query_{n}\n        expr: {}\n",
            yaml_quoted(&as_prometheus_sees_it(&promql))
        );
    }
    let file = scratch.path().join("rules.yml");
    fs::write(&file, &rules).unwrap();
    match promtool(&["check", "rules", file.to_str().unwrap()]) {
        None => promtool_missing("check rules"),
        Some((ok, said)) => assert!(ok, "promtool check rules:\n{said}\n{rules}"),
    }
}

/// The node panels' "over 90% of quota" queries, evaluated by `promtool test rules` on the
/// rendered samples of three jobs, as node_exporter would export them.
#[test]
fn over_ninety_percent_queries_pick_the_right_jobs() {
    let over = |q: &String| q.contains("> 0.9");
    let queries: Vec<String> = all_queries().into_iter().filter(over).collect();
    let (counts, tables): (Vec<&String>, Vec<&String>) =
        queries.iter().partition(|q| q.starts_with("count("));
    assert_eq!((counts.len(), tables.len()), (1, 1), "{queries:?}");

    let mut series = String::new();
    for job in sample_jobs() {
        for (name, labels, value) in samples(&render(&job)) {
            let labels = labels.replacen('{', &format!("{{{NODE_LABEL}=\"node1\","), 1);
            series += &format!(
                "      - series: {}\n        values: '{value}x3'\n",
                yaml_quoted(&(name + &labels))
            );
        }
    }
    let expect = |query: &str, samples: &str| {
        format!(
            "      - expr: {}\n        eval_time: 2m\n        exp_samples:\n{samples}",
            yaml_quoted(&as_prometheus_sees_it(query))
        )
    };
    let job_7_gpu_0 = r#"{instance="node1",job_id="7",user="alice",jobid="7",hpc_job="7",gpu="0",gpu_uuid="GPU-7-0",uuid="GPU-7-0",UUID="GPU-7-0"}"#;
    let tests = format!(
        "tests:\n  - interval: 1m\n    input_series:\n{series}    promql_expr_test:\n{}{}",
        expect(counts[0], "          - labels: '{}'\n            value: 1\n"),
        expect(
            tables[0],
            &format!(
                "          - labels: {}\n            value: 0.95\n",
                yaml_quoted(job_7_gpu_0)
            )
        ),
    );
    let scratch = scratch_dir("eval");
    let file = scratch.path().join("test.yml");
    fs::write(&file, &tests).unwrap();
    match promtool(&["test", "rules", file.to_str().unwrap()]) {
        None => promtool_missing("test rules"),
        Some((ok, said)) => assert!(ok, "promtool test rules:\n{said}\n{tests}"),
    }
}

/// promtool is not installed: skipped, but never where the test run requires it
/// (`GMQ_REQUIRE_PROMTOOL`, set by `slurm/dev-cluster test`, which installs it).
fn promtool_missing(what: &str) {
    assert!(
        std::env::var_os("GMQ_REQUIRE_PROMTOOL").is_none(),
        "promtool is not installed, and this run requires it (`promtool {what}`)"
    );
    eprintln!("promtool not installed: skipping `promtool {what}`");
}

/// The ```promql blocks of docs/ACCOUNTING.md's "Joining with jobstats and DCGM exporter".
fn documented_joins() -> Vec<String> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/ACCOUNTING.md");
    let text = fs::read_to_string(path).unwrap();
    let section = text
        .split("### Joining with jobstats and DCGM exporter")
        .nth(1)
        .and_then(|rest| rest.split("\n### ").next())
        .expect("the joining section");
    section
        .split("```promql\n")
        .skip(1)
        .map(|block| block.split("```").next().unwrap().trim().to_string())
        .collect()
}

/// The documented joins, by `promtool test rules`, on our rendered series of a 26.05 job (with a
/// SLUID) and of a 22.05 job (none) beside series with the label sets of jobstats' GPU and cgroup
/// exporters and DCGM exporter (from their source: plazonic/nvidia_gpu_prometheus_exporter's
/// `labelsJobInfo`, plazonic/cgroup_exporter's `jobid, step, task`, dcgm-exporter's `hpc_job`).
#[test]
fn joins_with_jobstats_and_dcgm_series() {
    let joins = documented_joins();
    assert_eq!(joins.len(), 3, "{joins:?}");
    const SLUID: &str = "s0K2Q6ZC8M4T00";
    let mut newer = job(7, "alice", &[(38, 40), (10, 40)]);
    newer.sluid = Some(SLUID.into());
    let older = job(8, "bob", &[(20, 20)]);

    let mut series = String::new();
    let mut add = |name_and_labels: &str, value: &str| {
        series += &format!(
            "      - series: {}\n        values: '{value}x3'\n",
            yaml_quoted(name_and_labels)
        );
    };
    for job in [&newer, &older] {
        for (name, labels, value) in samples(&render(job)) {
            let labels = labels.replacen('{', "{instance=\"node1:9100\",", 1);
            add(&(name + &labels), &value);
        }
    }
    let gpu_exporter = |uuid: &str, job: u32, minor: u32| {
        format!(
            "{{instance=\"node1:9445\",ordinal=\"{minor}\",minor_number=\"{minor}\",uuid=\"{uuid}\",name=\"NVIDIA A100-SXM4-80GB\",GPU_I_ID=\"\",jobid=\"{job}\",userid=\"1000\"}}"
        )
    };
    let dcgm = |uuid: &str, job: u32, gpu: u32| {
        format!(
            "{{instance=\"node1:9400\",gpu=\"{gpu}\",UUID=\"{uuid}\",device=\"nvidia{gpu}\",modelName=\"NVIDIA A100-SXM4-80GB\",Hostname=\"node1\",hpc_job=\"{job}\"}}"
        )
    };
    // Job 7's first GPU measured at 30G (of its 40G quota); another job's GPU matches nothing.
    add(
        &format!("nvidia_gpu_memory_used_bytes{}", gpu_exporter("GPU-7-0", 7, 2)),
        &(30 * GIB).to_string(),
    );
    add(
        &format!("nvidia_gpu_memory_used_bytes{}", gpu_exporter("GPU-99-0", 99, 3)),
        &GIB.to_string(),
    );
    add(&format!("DCGM_FI_DEV_FB_USED{}", dcgm("GPU-7-0", 7, 0)), "30720");
    add(&format!("DCGM_FI_DEV_FB_USED{}", dcgm("GPU-99-0", 99, 1)), "1024");
    // cgroup_exporter: job 7's cgroup is named by its SLUID (26.05), job 8's by its id.
    let cgroup = |jobid: &str| {
        format!("cgroup_memory_rss_bytes{{instance=\"node1:9306\",jobid=\"{jobid}\",step=\"\",task=\"\"}}")
    };
    add(&cgroup(SLUID), &(8 * GIB).to_string());
    add(&cgroup("8"), &(4 * GIB).to_string());
    add(&cgroup("99"), &GIB.to_string());

    let expect = |query: &str, samples: &[(String, String)]| {
        let mut out = format!(
            "      - expr: {}\n        eval_time: 2m\n        exp_samples:\n",
            yaml_quoted(query)
        );
        for (labels, value) in samples {
            out += &format!(
                "          - labels: {}\n            value: {value}\n",
                yaml_quoted(labels)
            );
        }
        out
    };
    let tests = format!(
        "tests:\n  - interval: 1m\n    input_series:\n{series}    promql_expr_test:\n{}{}{}",
        // An empty label (a GPU not split by MIG) is no label to Prometheus.
        expect(
            &joins[0],
            &[(
                gpu_exporter("GPU-7-0", 7, 2).replace(",GPU_I_ID=\"\"", ""),
                "0.75".into()
            )]
        ),
        expect(&joins[1], &[(dcgm("GPU-7-0", 7, 0), "0.75".into())]),
        expect(
            &joins[2],
            &[
                (
                    format!("{{jobid=\"{SLUID}\",job_id=\"7\"}}"),
                    (40 * GIB).to_string()
                ),
                ("{jobid=\"8\",job_id=\"8\"}".into(), (20 * GIB).to_string()),
            ]
        ),
    );
    let scratch = scratch_dir("joins");
    let file = scratch.path().join("test.yml");
    fs::write(&file, &tests).unwrap();
    match promtool(&["test", "rules", file.to_str().unwrap()]) {
        None => promtool_missing("test rules"),
        Some((ok, said)) => assert!(ok, "promtool test rules:\n{said}\n{tests}"),
    }
}
