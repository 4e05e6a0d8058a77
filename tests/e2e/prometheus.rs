//! The Grafana dashboard against a real Prometheus (issue 44): Debian's `prometheus` scrapes Debian's
//! `prometheus-node-exporter`, whose textfile collector reads the lab's metrics directory, while a
//! job of the test user runs; every query of etc/grafana-dashboard.json, and its template
//! variables' `label_values`, is evaluated through Prometheus' HTTP API (`/api/v1/query`) and must
//! return data with the labels its legend names, and every series of the job must carry the labels
//! a site joins on (`jobid`, `hpc_job`, `uuid`, `UUID`, and `sluid` where Slurm gave the job one).
//!
//! Both servers are this test's own: on loopback, on free ports, with storage in a temporary
//! directory, started here (no systemd unit) and killed when the test ends, passed or not.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::support::*;

const PROMETHEUS: &str = "/usr/bin/prometheus";
const NODE_EXPORTER: &str = "/usr/bin/prometheus-node-exporter";
const FAKE_PROCS: &str = "/var/lib/fake-nvml/procs";
const GIB: u64 = 1 << 30;
/// How often Prometheus scrapes here: often, so that a query sees the job within seconds.
const SCRAPE_SECONDS: u64 = 1;
/// `$__rate_interval` as Grafana computes it for a 15 s panel interval and our scrape interval:
/// max(15 s + 1 s, 4 × 1 s).
const RATE_INTERVAL: &str = "16s";

/// One telemetry file as python's `TelemetryWriter` writes it (job id and pid for the two `%s`).
const TELEMETRY_PRINTF: &str = r#"{"version":1,"source":"job-reported","job_id":%s,"pid":%s,"updated_at":"2026-12-07T00:00:00Z","allocator":{"allocated_bytes":1,"reserved_bytes":2,"peak_allocated_bytes":1,"peak_reserved_bytes":2,"num_alloc_retries":0,"num_ooms":0,"fragmentation":0.5},"controller":{"micro_batch":1,"grad_accum":1,"effective_batch":1,"activation_checkpointing":false,"capacity_bytes":null,"last_decision":"a decision of the job"}}"#;

/// A server this test started: killed and waited for when dropped.
struct Server {
    name: &'static str,
    child: Child,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        eprintln!("{} stopped", self.name);
    }
}

/// A scratch directory of this test, removed when dropped (after the servers: declared first).
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A loopback port free now (the kernel's pick; the server binds it a moment later).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port()
}

fn start(name: &'static str, program: &str, args: &[String], log: &Path) -> Server {
    assert!(
        Path::new(program).exists(),
        "{program} is missing: slurm/dev-cluster install puts it there (Debian's {})",
        if name == "prometheus" {
            "prometheus"
        } else {
            "prometheus-node-exporter"
        }
    );
    let log = std::fs::File::create(log).unwrap();
    let child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {program}: {e}"));
    Server { name, child }
}

/// `GET path` on 127.0.0.1:`port` (HTTP/1.0: the server closes, no chunks): status and body.
fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    let status = head.split(' ').nth(1)?.parse().ok()?;
    Some((status, body.to_string()))
}

/// A query string's value, percent-encoded (RFC 3986's unreserved characters kept).
fn url_encoded(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Prometheus' answer to `path` (its `data`), or what went wrong.
fn api(port: u16, path: &str) -> Result<Value, String> {
    let (status, body) = http_get(port, path).ok_or_else(|| format!("no answer to {path}"))?;
    let json: Value = serde_json::from_str(&body).map_err(|e| format!("{path}: {e}: {body}"))?;
    if status != 200 || json["status"] != "success" {
        return Err(format!("{path}: HTTP {status}: {body}"));
    }
    Ok(json["data"].clone())
}

/// A series' labels, `__name__` included where the query keeps it.
type Labels = BTreeMap<String, String>;

/// An instant vector: each series' labels and value.
fn query(port: u16, expr: &str) -> Result<Vec<(Labels, f64)>, String> {
    let data = api(port, &format!("/api/v1/query?query={}", url_encoded(expr)))?;
    if data["resultType"] != "vector" {
        return Err(format!("{expr}: not a vector: {data}"));
    }
    let series = data["result"].as_array().cloned().unwrap_or_default();
    Ok(series
        .iter()
        .map(|s| {
            let labels = s["metric"]
                .as_object()
                .map(|m| {
                    m.iter()
                        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                        .collect()
                })
                .unwrap_or_default();
            let value = s["value"][1]
                .as_str()
                .and_then(|v| v.parse().ok())
                .unwrap_or(f64::NAN);
            (labels, value)
        })
        .collect())
}

/// A dashboard query, its legend, and the panel it is in.
struct Target {
    panel: String,
    expr: String,
    legend: String,
}

fn dashboard() -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../etc/grafana-dashboard.json");
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

/// Every target of every panel, rows' panels included.
fn targets(panels: &Value, out: &mut Vec<Target>) {
    for panel in panels.as_array().into_iter().flatten() {
        let title = panel["title"].as_str().unwrap_or_default();
        for target in panel["targets"].as_array().into_iter().flatten() {
            out.push(Target {
                panel: title.to_string(),
                expr: target["expr"].as_str().unwrap_or_default().to_string(),
                legend: target["legendFormat"].as_str().unwrap_or_default().to_string(),
            });
        }
        targets(&panel["panels"], out);
    }
}

/// The query as Grafana sends it for this job: every node (the `instance` variable's "All", its
/// `allValue`), the job picked in the `job_id` variable, and Grafana's `$__rate_interval`.
fn substituted(expr: &str, job: u32) -> String {
    let expr = expr
        .replace("$__rate_interval", RATE_INTERVAL)
        .replace("$instance", ".+")
        .replace("$job_id", &job.to_string());
    assert!(!expr.contains('$'), "a variable this test does not know: {expr}");
    expr
}

/// The labels a legend names (`{{instance}} gpu {{gpu}}`: instance, gpu).
fn legend_labels(legend: &str) -> Vec<String> {
    legend
        .split("{{")
        .skip(1)
        .filter_map(|rest| rest.split_once("}}").map(|(name, _)| name.trim().to_string()))
        .collect()
}

/// What a series of our job must carry besides what its query asks for: the job id under
/// jobstats' and DCGM exporter's names, the SLUID where the job had one, and for a GPU series the
/// UUID under both exporters' names.
fn join_label_faults(labels: &Labels, job: u32, sluid: Option<&str>) -> Vec<String> {
    let mut faults = Vec::new();
    let id = job.to_string();
    for name in ["jobid", "hpc_job"] {
        if labels.get(name) != Some(&id) {
            faults.push(format!("{name} is {:?}, not {id}", labels.get(name)));
        }
    }
    if labels.get("sluid").map(String::as_str) != sluid {
        faults.push(format!("sluid is {:?}, not {sluid:?}", labels.get("sluid")));
    }
    if let Some(uuid) = labels.get("gpu_uuid") {
        for name in ["uuid", "UUID"] {
            if labels.get(name) != Some(uuid) {
                faults.push(format!("{name} is {:?}, not {uuid}", labels.get(name)));
            }
        }
    }
    faults
}

/// Every query of the dashboard, during a live job at 38G of a 40G quota on one GPU (95 %, over
/// the warn threshold: a warn event, so the node's event counters file is there too) whose task
/// reports its allocator telemetry.
#[test]
#[ignore = "needs the dev cluster: slurm/dev-cluster test"]
fn every_dashboard_query_returns_the_live_jobs_series_with_join_labels() {
    let _policy = install_policy(OPEN_POLICY);
    fresh_gpus();
    let metrics_dir = nodes()
        .first()
        .map_or_else(|| lab().join("gmq/metrics"), |node| node.metrics_dir());
    let scratch = Scratch(std::env::temp_dir().join(format!("gmq-e2e-prometheus-{}", std::process::id())));
    let _ = std::fs::remove_dir_all(&scratch.0);
    std::fs::create_dir_all(scratch.0.join("tsdb")).unwrap();

    let (exporter_port, prometheus_port) = (free_port(), free_port());
    let _exporter = start(
        "node_exporter",
        NODE_EXPORTER,
        &[
            format!("--web.listen-address=127.0.0.1:{exporter_port}"),
            "--collector.disable-defaults".into(),
            "--collector.textfile".into(),
            format!("--collector.textfile.directory={}", metrics_dir.display()),
        ],
        &scratch.0.join("node_exporter.log"),
    );
    let config = scratch.0.join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: {SCRAPE_SECONDS}s\n  evaluation_interval: {SCRAPE_SECONDS}s\n\
             scrape_configs:\n  - job_name: node\n    static_configs:\n      - targets: ['127.0.0.1:{exporter_port}']\n"
        ),
    )
    .unwrap();
    let _prometheus = start(
        "prometheus",
        PROMETHEUS,
        &[
            format!("--config.file={}", config.display()),
            format!("--storage.tsdb.path={}", scratch.0.join("tsdb").display()),
            format!("--web.listen-address=127.0.0.1:{prometheus_port}"),
        ],
        &scratch.0.join("prometheus.log"),
    );
    let logs = || {
        ["prometheus.log", "node_exporter.log"]
            .map(|f| {
                let text = std::fs::read_to_string(scratch.0.join(f)).unwrap_or_default();
                format!(
                    "--- {f} (last 2000 bytes):\n{}",
                    &text[text.len().saturating_sub(2000)..]
                )
            })
            .join("\n")
    };
    let ready = wait_until(Duration::from_secs(60), || {
        http_get(prometheus_port, "/-/ready").is_some_and(|(s, _)| s == 200)
            && http_get(exporter_port, "/metrics").is_some_and(|(s, _)| s == 200)
    });
    assert!(ready, "the servers did not come up:\n{}", logs());

    let dir = user_dir("prometheus");
    let stop = dir.join("stop");
    let script = format!(
        "echo sluid=${{SLURM_JOB_SLUID:-none}}; f={FAKE_PROCS}/${{SLURM_JOB_GPUS%%,*}}/$$; echo 38G > $f; \
         printf '{TELEMETRY_PRINTF}' $SLURM_JOB_ID $$ > gpu-mem-quota-telemetry.$SLURM_JOB_ID.0.json; \
         n=0; while [ ! -e {stop} ] && [ $n -lt 900 ]; do sleep 0.2; n=$((n+1)); done; rm -f $f",
        stop = stop.display()
    );
    let chdir = dir.display().to_string();
    let job = sbatch(
        &dir,
        &["--gres=gpu:1", "--gpu-mem-quota=40G", "--chdir", &chdir],
        &script,
    );
    let output = || std::fs::read_to_string(dir.join(format!("job-{job}.out"))).unwrap_or_default();
    // Ends the job however the test ends.
    struct EndJob(PathBuf);
    impl Drop for EndJob {
        fn drop(&mut self) {
            let _ = as_user("touch", &[self.0.to_str().unwrap()], &[]);
        }
    }
    let _end_job = EndJob(stop.clone());
    assert!(
        wait_until(Duration::from_secs(60), || output().contains("sluid=")),
        "job {job} did not start: {}",
        output()
    );
    let out = output();
    let sluid = out
        .lines()
        .find_map(|l| l.strip_prefix("sluid="))
        .filter(|s| *s != "none")
        .map(str::to_string);
    eprintln!("job {job}, SLUID {sluid:?}");

    // The collector read our files without complaint (one bad file fails them all).
    let scraped_clean = wait_until(Duration::from_secs(30), || {
        query(prometheus_port, "node_textfile_scrape_error").is_ok_and(|r| r.len() == 1 && r[0].1 == 0.0)
    });
    assert!(
        scraped_clean,
        "node_textfile_scrape_error: {:?}\n{}",
        query(prometheus_port, "node_textfile_scrape_error"),
        logs()
    );

    let board = dashboard();
    // The template variables: `label_values(METRIC{...}, LABEL)` is Prometheus' label values API.
    for var in board["templating"]["list"].as_array().unwrap() {
        let Some(q) = var["query"]["query"].as_str() else {
            continue;
        };
        let Some(inner) = q.strip_prefix("label_values(").and_then(|r| r.strip_suffix(')')) else {
            continue;
        };
        let (selector, label) = inner.rsplit_once(',').unwrap();
        let selector = substituted(selector.trim(), job);
        let path = format!(
            "/api/v1/label/{}/values?match[]={}",
            label.trim(),
            url_encoded(&selector)
        );
        let mut values = Value::Null;
        let found = wait_until(Duration::from_secs(30), || {
            values = api(prometheus_port, &path).unwrap_or(Value::Null);
            let want = match label.trim() {
                "job_id" => job.to_string(),
                _ => format!("127.0.0.1:{exporter_port}"),
            };
            values
                .as_array()
                .is_some_and(|v| v.iter().any(|x| x == &Value::String(want.clone())))
        });
        assert!(found, "variable {}: {q}: {values}", var["name"]);
    }

    let mut all = Vec::new();
    targets(&board["panels"], &mut all);
    assert!(all.len() >= 15, "{} queries", all.len());
    let mut summary = Vec::new();
    for target in &all {
        let expr = substituted(&target.expr, job);
        let want_labels = legend_labels(&target.legend);
        let mut last = Err(String::from("not asked yet"));
        let mut faults = Vec::new();
        let good = wait_until(Duration::from_secs(30), || {
            last = query(prometheus_port, &expr);
            faults.clear();
            let Ok(result) = &last else { return false };
            if result.is_empty() {
                faults.push("no data".to_string());
            }
            for (labels, value) in result {
                for name in &want_labels {
                    if !labels.contains_key(name) {
                        faults.push(format!("no {name} label (the legend names it)"));
                    }
                }
                if target.expr.contains("$job_id")
                    && labels.get("job_id").is_some_and(|j| *j != job.to_string())
                {
                    faults.push(format!("another job's series: {labels:?}"));
                }
                if labels.get("job_id") == Some(&job.to_string()) {
                    faults.extend(join_label_faults(labels, job, sluid.as_deref()));
                }
                if value.is_nan() {
                    faults.push("NaN".into());
                }
            }
            // The job's figures, where the query is one of the bare families.
            let ours = |(l, _): &&(Labels, f64)| l.get("job_id") == Some(&job.to_string());
            let value_of_ours = result.iter().find(ours).map(|(_, v)| *v);
            // A bare selector, `name{...}`: no operator after it.
            let bare = expr
                .split_once('{')
                .filter(|(_, rest)| rest.find('}') == Some(rest.len() - 1))
                .map(|(name, _)| name);
            let want_value = match bare.unwrap_or_default() {
                "gpu_mem_quota_used_bytes" | "gpu_mem_quota_peak_bytes" => Some((38 * GIB) as f64),
                "gpu_mem_quota_limit_bytes" => Some((40 * GIB) as f64),
                _ => None,
            };
            if let Some(want) = want_value {
                if value_of_ours != Some(want) {
                    faults.push(format!("job {job}'s value is {value_of_ours:?}, not {want}"));
                }
            }
            if target.panel.starts_with("Jobs over 90%") {
                let counted = if expr.starts_with("count(") {
                    result.first().map(|(_, v)| *v)
                } else {
                    value_of_ours
                };
                if !counted.is_some_and(|v| v >= 0.9) {
                    faults.push(format!("job {job} at 95% is not in it: {counted:?}"));
                }
            }
            faults.is_empty()
        });
        assert!(
            good,
            "panel {:?}: {expr}\nfaults: {faults:?}\nresult: {last:?}\njob output: {}",
            target.panel,
            output()
        );
        let series = last.as_ref().map_or(0, Vec::len);
        summary.push(format!("{series} series: {expr}"));
    }
    eprintln!(
        "{} dashboard queries returned data:\n{}",
        all.len(),
        summary.join("\n")
    );

    // A site's join, as docs/ACCOUNTING.md writes it: our quota next to another exporter's
    // measured use of the same GPU. No jobstats or DCGM exporter runs here, so the right side is our
    // own used bytes renamed to theirs by the same UUID label; the unit test
    // `dashboard_metrics::joins_with_jobstats_and_dcgm_series` joins their real label sets.
    let joined = query(
        prometheus_port,
        &format!(
            "gpu_mem_quota_limit_bytes{{jobid=\"{job}\"}} - on (jobid, uuid) gpu_mem_quota_used_bytes{{hpc_job=\"{job}\"}}"
        ),
    )
    .unwrap();
    assert_eq!(joined.len(), 1, "{joined:?}");
    assert_eq!(joined[0].1, (2 * GIB) as f64, "{joined:?}");
}
