//! Prometheus metrics for node_exporter's textfile collector: one file per job on each node.
//!
//! Pure: figures in, exposition text out. The watchdog writes the text with
//! gmq-node's `textfile::write_atomically` under [`file_name`] and removes the file when the job ends.
//! The node is not a label: node_exporter adds its own `instance`.
//!
//! Every job series also carries the label names other exporters give the same facts, so that a
//! site joins our series with theirs without relabelling (docs/ACCOUNTING.md, "Joining"):
//! `jobid` (jobstats' cgroup and GPU exporters), `hpc_job` (DCGM exporter's HPC job mapping) and,
//! where slurmd gave the watchdog one (26.05), `sluid`, the value jobstats' cgroup_exporter puts
//! in its `jobid` label there; GPU series carry the UUID as `uuid` (jobstats' GPU exporter) and
//! `UUID` (DCGM exporter). Our own `job_id` and `gpu_uuid` stay, unchanged. GPUs are joined on
//! the UUID: our `gpu` is the device's minor number (NVML's index where there is none), which
//! jobstats calls `minor_number` and DCGM's `gpu` (its own GPU id) need not equal. Help texts are the same in every
//! file, as the collector requires when it merges files, and no sample carries a timestamp (the
//! collector refuses them). Every metric is listed in docs/ACCOUNTING.md.
//!
//! One more file per node, [`NODE_EVENTS_FILE`], holds the node's event counters by user
//! ([`NodeEvents`]): a job's file goes when the job ends, most often right after its last event
//! (a requeue, a cancel), which no scrape would then see.
//!
//! The `gpu_mem_quota_job_reported_*` families are the job's own word (its allocator telemetry,
//! `crate::job_telemetry`), not a measurement: their help texts say so, and they appear only
//! while a task of the job reports. At most `job_telemetry::MAX_TASKS_SHOWN` tasks get series
//! (8 families each); the rest are one sample, `gpu_mem_quota_job_reported_tasks_not_shown`, so a
//! job's file stays a few tens of KiB however many files it writes (review K3).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::job_telemetry::{AllocatorTelemetry, ReportedTask, MAX_TASKS_SHOWN};
use crate::record::{EventCounts, EventKind};

/// What one job looks like on this node at one sample.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobMetrics {
    pub job_id: u32,
    /// The job's SLUID (Slurm 26.05), as slurmd gave it to the watchdog; `None` before 26.05.
    pub sluid: Option<String>,
    pub user: String,
    pub gpus: Vec<GpuMetrics>,
    /// Events of the job on this node since its watchdog started.
    pub events: EventCounts,
    /// What the job's tasks here say of their allocators: the job's word, by task (at most
    /// [`MAX_TASKS_SHOWN`] are written; the watchdog keeps no more).
    pub job_reported: Vec<ReportedTask>,
    /// Tasks that wrote telemetry here and are not in `job_reported`: one sample, never a series
    /// each.
    pub job_reported_not_shown: u64,
}

/// One GPU the job uses on this node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuMetrics {
    /// The index as the job sees it (its position in `CUDA_VISIBLE_DEVICES`).
    pub index: u32,
    /// NVML's UUID of the GPU (`GPU-...` or `MIG-...`).
    pub uuid: String,
    pub used_bytes: u64,
    pub quota_bytes: u64,
    pub peak_bytes: u64,
}

/// A metric family: its name, type and help text. Names follow Prometheus conventions:
/// the `gpu_mem_quota_` namespace, base units (`_bytes`), counters ending in `_total`.
struct Family {
    name: &'static str,
    kind: &'static str,
    help: &'static str,
}

const USED: Family = Family {
    name: "gpu_mem_quota_used_bytes",
    kind: "gauge",
    help: "GPU memory used by the job's processes on this GPU at the last sample.",
};
const LIMIT: Family = Family {
    name: "gpu_mem_quota_limit_bytes",
    kind: "gauge",
    help: "The job's GPU-memory quota on this GPU.",
};
const PEAK: Family = Family {
    name: "gpu_mem_quota_peak_bytes",
    kind: "gauge",
    help: "The most GPU memory the job's processes used on this GPU since the job started here.",
};
const EVENTS: Family = Family {
    name: "gpu_mem_quota_events_total",
    kind: "counter",
    help: "Quota events of the job on this node, by kind (warn, over_quota, preempted, requeued, cancelled, held, oom, node_fail).",
};

const NODE_EVENTS: Family = Family {
    name: "gpu_mem_quota_node_events_total",
    kind: "counter",
    help: "Quota events on this node by the job's user and kind, kept after the jobs end.",
};

const REPORTED_ALLOCATED: Family = Family {
    name: "gpu_mem_quota_job_reported_allocated_bytes",
    kind: "gauge",
    help:
        "GPU memory the task's allocator says is allocated to tensors, as reported by the job, not measured.",
};
const REPORTED_RESERVED: Family = Family {
    name: "gpu_mem_quota_job_reported_reserved_bytes",
    kind: "gauge",
    help: "GPU memory the task's allocator says it holds (reserved), as reported by the job, not measured.",
};
const REPORTED_PEAK_ALLOCATED: Family = Family {
    name: "gpu_mem_quota_job_reported_peak_allocated_bytes",
    kind: "gauge",
    help:
        "The most GPU memory the task's allocator says was allocated, as reported by the job, not measured.",
};
const REPORTED_PEAK_RESERVED: Family = Family {
    name: "gpu_mem_quota_job_reported_peak_reserved_bytes",
    kind: "gauge",
    help: "The most GPU memory the task's allocator says it held, as reported by the job, not measured.",
};
const REPORTED_FRAGMENTATION: Family = Family {
    name: "gpu_mem_quota_job_reported_fragmentation_ratio",
    kind: "gauge",
    help: "1 - allocated/reserved of the task's allocator, as reported by the job, not measured.",
};
const REPORTED_RETRIES: Family = Family {
    name: "gpu_mem_quota_job_reported_alloc_retries_total",
    kind: "counter",
    help: "Times the task's allocator freed its cache and retried an allocation, as reported by the job, not measured.",
};
const REPORTED_OOMS: Family = Family {
    name: "gpu_mem_quota_job_reported_ooms_total",
    kind: "counter",
    help: "Out-of-memory errors the task's allocator raised, as reported by the job, not measured.",
};
const REPORTED_UPDATED: Family = Family {
    name: "gpu_mem_quota_job_reported_updated_timestamp_seconds",
    kind: "gauge",
    help: "When the task last wrote its telemetry (Unix time), as reported by the job, not measured.",
};

const REPORTED_NOT_SHOWN: Family = Family {
    name: "gpu_mem_quota_job_reported_tasks_not_shown",
    kind: "gauge",
    help: "Tasks of the job on this node whose telemetry was read and not exported as series (at most 32 tasks are, one per process and task number).",
};

/// A job-reported sample's value, as written.
type ReportedValue = fn(&ReportedTask) -> String;

/// The job-reported families, each with its value, in the order they are written.
const REPORTED: [(&Family, ReportedValue); 8] = [
    (&REPORTED_ALLOCATED, |t| t.allocator.allocated_bytes.to_string()),
    (&REPORTED_RESERVED, |t| t.allocator.reserved_bytes.to_string()),
    (&REPORTED_PEAK_ALLOCATED, |t| {
        t.allocator.peak_allocated_bytes.to_string()
    }),
    (&REPORTED_PEAK_RESERVED, |t| {
        t.allocator.peak_reserved_bytes.to_string()
    }),
    (&REPORTED_FRAGMENTATION, |t| fragmentation_ratio(&t.allocator)),
    (&REPORTED_RETRIES, |t| t.allocator.num_alloc_retries.to_string()),
    (&REPORTED_OOMS, |t| t.allocator.num_ooms.to_string()),
    (&REPORTED_UPDATED, |t| t.updated_at.to_string()),
];

const FILE_PREFIX: &str = "gpu_mem_quota_job_";
const FILE_SUFFIX: &str = ".prom";

/// The textfile-collector file of a job: `gpu_mem_quota_job_<id>.prom`.
pub fn file_name(job_id: u32) -> String {
    format!("{FILE_PREFIX}{job_id}{FILE_SUFFIX}")
}

/// The job a file in the collector directory belongs to, if it is one of ours. For sweeping files
/// left by a watchdog that could not clean up.
pub fn job_of_file_name(name: &str) -> Option<u32> {
    let id = name.strip_prefix(FILE_PREFIX)?.strip_suffix(FILE_SUFFIX)?;
    if id.is_empty() || !id.bytes().all(|b| b.is_ascii_digit()) || (id.len() > 1 && id.starts_with('0')) {
        return None;
    }
    id.parse().ok()
}

/// The exposition text for one job. GPUs are listed by index; every event kind is listed, zeros
/// included, so that `increase()` sees the first event.
pub fn render(job: &JobMetrics) -> String {
    let mut gpus: Vec<&GpuMetrics> = job.gpus.iter().collect();
    gpus.sort_by_key(|g| g.index);
    let job_labels = job_labels(job);
    let gpu_labels = |gpu: &GpuMetrics| {
        let uuid = escape_label_value(&gpu.uuid);
        format!(
            "{job_labels},gpu=\"{}\",gpu_uuid=\"{uuid}\",uuid=\"{uuid}\",UUID=\"{uuid}\"",
            gpu.index,
        )
    };

    let mut out = String::new();
    for (family, value) in [
        (&USED, (|g: &GpuMetrics| g.used_bytes) as fn(&GpuMetrics) -> u64),
        (&LIMIT, |g| g.quota_bytes),
        (&PEAK, |g| g.peak_bytes),
    ] {
        header(&mut out, family);
        for gpu in &gpus {
            let _ = writeln!(out, "{}{{{}}} {}", family.name, gpu_labels(gpu), value(gpu));
        }
    }
    header(&mut out, &EVENTS);
    for kind in EventKind::ALL {
        let _ = writeln!(
            out,
            "{}{{{job_labels},kind=\"{kind}\"}} {}",
            EVENTS.name,
            job.events.get(kind)
        );
    }
    render_job_reported(
        &mut out,
        &job_labels,
        &job.job_reported,
        job.job_reported_not_shown,
    );
    out
}

/// The labels of every series of a job: ours (`job_id`, `user`), then the job id under the names
/// jobstats' exporters (`jobid`) and DCGM exporter (`hpc_job`) use, and the SLUID when known.
fn job_labels(job: &JobMetrics) -> String {
    let id = job.job_id;
    let mut labels = format!(
        "job_id=\"{id}\",user=\"{}\",jobid=\"{id}\",hpc_job=\"{id}\"",
        escape_label_value(&job.user)
    );
    if let Some(sluid) = &job.sluid {
        let _ = write!(labels, ",sluid=\"{}\"", escape_label_value(sluid));
    }
    labels
}

/// The job-reported families, by task, at most [`MAX_TASKS_SHOWN`] tasks (a longer list is cut
/// here too, so the file stays bounded whatever it is given), and the count of those not shown;
/// nothing while no task reports.
fn render_job_reported(out: &mut String, job_labels: &str, tasks: &[ReportedTask], not_shown: u64) {
    if tasks.is_empty() && not_shown == 0 {
        return;
    }
    let given = tasks.len();
    let mut tasks: Vec<&ReportedTask> = tasks.iter().collect();
    tasks.sort_by_key(|t| (t.task, t.pid));
    // Two files of one task (two processes here writing the same task number) would be two samples
    // with the same labels, which the collector refuses: the first is kept.
    tasks.dedup_by_key(|t| t.task);
    tasks.truncate(MAX_TASKS_SHOWN);
    let cut = (given - tasks.len()) as u64;
    if !tasks.is_empty() {
        for (family, value) in REPORTED {
            header(out, family);
            for task in &tasks {
                let _ = writeln!(
                    out,
                    "{}{{{job_labels},task=\"{}\"}} {}",
                    family.name,
                    task.task,
                    value(task)
                );
            }
        }
    }
    header(out, &REPORTED_NOT_SHOWN);
    let _ = writeln!(
        out,
        "{}{{{job_labels}}} {}",
        REPORTED_NOT_SHOWN.name,
        not_shown.saturating_add(cut)
    );
}

/// Ten-thousandths as a decimal ratio: `0.25`, `0`, `1`, `0.0001`.
fn ratio(ten_thousandths: u64) -> String {
    let (whole, rest) = (ten_thousandths / 10_000, ten_thousandths % 10_000);
    if rest == 0 {
        return whole.to_string();
    }
    let digits = format!("{rest:04}");
    format!("{whole}.{}", digits.trim_end_matches('0'))
}

/// An allocator's fragmentation as a ratio (for the CLI).
pub fn fragmentation_ratio(allocator: &AllocatorTelemetry) -> String {
    ratio(u64::from(allocator.fragmentation))
}

fn header(out: &mut String, family: &Family) {
    let _ = writeln!(out, "# HELP {} {}", family.name, family.help);
    let _ = writeln!(out, "# TYPE {} {}", family.name, family.kind);
}

/// The node's file of event counters ([`NodeEvents`]), beside the jobs' files.
pub const NODE_EVENTS_FILE: &str = "gpu_mem_quota_node_events.prom";

/// The node's quota events by job user and kind, since the file began: each job's watchdog adds
/// its events as they happen ([`new_events`]), and the file stays when the jobs end, so that
/// `increase(gpu_mem_quota_node_events_total{kind="requeued"}[1d])` counts every requeue. A
/// counter that starts again (the file removed) is what Prometheus expects of counters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeEvents {
    by_user: BTreeMap<String, EventCounts>,
}

impl NodeEvents {
    /// The counters as [`NodeEvents::render`] wrote them. A line of another shape is left out (its
    /// counter starts again), as are help and type lines.
    pub fn parse(text: &str) -> NodeEvents {
        let mut events = NodeEvents::default();
        for line in text.lines() {
            if let Some((user, kind, count)) = parse_node_event_line(line) {
                let counts = events.by_user.entry(user).or_default();
                counts.set(kind, counts.get(kind).max(count));
            }
        }
        events
    }

    pub fn add(&mut self, user: &str, events: &EventCounts) {
        let counts = self.by_user.entry(user.to_string()).or_default();
        for (kind, count) in events.iter() {
            counts.add(kind, count);
        }
    }

    #[cfg(test)]
    fn get(&self, user: &str, kind: EventKind) -> u32 {
        self.by_user.get(user).map_or(0, |counts| counts.get(kind))
    }

    /// The exposition text: every kind of every user, zeros included, by user.
    pub fn render(&self) -> String {
        let mut out = String::new();
        header(&mut out, &NODE_EVENTS);
        for (user, counts) in &self.by_user {
            for (kind, count) in counts.iter() {
                let user = escape_label_value(user);
                let _ = writeln!(
                    out,
                    "{}{{user=\"{user}\",kind=\"{kind}\"}} {count}",
                    NODE_EVENTS.name
                );
            }
        }
        out
    }
}

/// The events in `now` that `counted` (what was added to the node's counters before) does not
/// hold; `None` when there are none.
pub fn new_events(now: &EventCounts, counted: &EventCounts) -> Option<EventCounts> {
    let mut new = EventCounts::default();
    for (kind, count) in now.iter() {
        new.set(kind, count.saturating_sub(counted.get(kind)));
    }
    let any = new.iter().any(|(_, count)| count > 0);
    any.then_some(new)
}

/// `gpu_mem_quota_node_events_total{user="U",kind="K"} N`: (U unescaped, K, N).
fn parse_node_event_line(line: &str) -> Option<(String, EventKind, u32)> {
    let rest = line.strip_prefix(NODE_EVENTS.name)?.strip_prefix("{user=\"")?;
    let (user, rest) = unescape_label_value(rest)?;
    let rest = rest.strip_prefix(",kind=\"")?;
    let (kind, rest) = rest.split_once("\"} ")?;
    let count = rest.parse().ok()?;
    Some((user, EventKind::from_name(kind)?, count))
}

/// An escaped label value up to its closing quote: the value, and what follows the quote.
fn unescape_label_value(text: &str) -> Option<(String, &str)> {
    let mut value = String::new();
    let mut chars = text.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return Some((value, &text[i + 1..])),
            '\\' => match chars.next()?.1 {
                '\\' => value.push('\\'),
                '"' => value.push('"'),
                'n' => value.push('\n'),
                _ => return None,
            },
            c => value.push(c),
        }
    }
    None
}

/// A label value as the text format requires: backslash, double quote and newline escaped.
fn escape_label_value(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_escaped() {
        let table = [
            ("alice", "alice"),
            ("a\\b", "a\\\\b"),
            ("say \"hi\"", "say \\\"hi\\\""),
            ("two\nlines", "two\\nlines"),
            ("ünï", "ünï"),
        ];
        for (raw, want) in table {
            assert_eq!(escape_label_value(raw), want);
        }
    }

    #[test]
    fn help_texts_need_no_escaping() {
        let reported = REPORTED.map(|(family, _)| family);
        for family in [&USED, &LIMIT, &PEAK, &EVENTS, &NODE_EVENTS, &REPORTED_NOT_SHOWN]
            .into_iter()
            .chain(reported)
        {
            assert!(!family.help.contains(['\\', '\n']), "{}", family.name);
        }
    }

    #[test]
    fn node_events_are_read_back_as_written() {
        let mut events = NodeEvents::default();
        let mut job = EventCounts::default();
        job.set(EventKind::Requeued, 1);
        job.set(EventKind::OverQuota, 2);
        events.add("alice", &job);
        events.add("say \"hi\"\\\n", &job);
        events.add("alice", &job);
        let text = events.render();
        assert!(
            text.contains("gpu_mem_quota_node_events_total{user=\"alice\",kind=\"requeued\"} 2\n"),
            "{text}"
        );
        assert!(text.contains("{user=\"alice\",kind=\"warn\"} 0\n"), "{text}");
        assert_eq!(NodeEvents::parse(&text), events);
        assert_eq!(events.get("alice", EventKind::OverQuota), 4);
        assert_eq!(events.get("say \"hi\"\\\n", EventKind::Requeued), 1);
        assert_eq!(events.get("bob", EventKind::Requeued), 0);
    }

    #[test]
    fn damaged_node_event_lines_are_left_out() {
        let text = "gpu_mem_quota_node_events_total{user=\"alice\",kind=\"requeued\"} 3\n\
                    gpu_mem_quota_node_events_total{user=\"bob\",kind=\"exploded\"} 1\n\
                    gpu_mem_quota_node_events_total{user=\"carol,kind=\"requeued\"} 1\n\
                    gpu_mem_quota_node_events_total{user=\"dave\\q\",kind=\"requeued\"} 1\n\
                    gpu_mem_quota_node_events_total{user=\"erin\",kind=\"requeued\"} -1\n\
                    gpu_mem_quota_events_total{job_id=\"1\",user=\"fay\",kind=\"requeued\"} 1\n";
        let events = NodeEvents::parse(text);
        let mut alice = NodeEvents::default();
        let mut three = EventCounts::default();
        three.set(EventKind::Requeued, 3);
        alice.add("alice", &three);
        assert_eq!(events, alice);
    }

    #[test]
    fn new_events_are_what_was_not_counted() {
        let mut counted = EventCounts::default();
        counted.set(EventKind::Warn, 1);
        let mut now = counted;
        assert_eq!(new_events(&now, &counted), None);
        now.set(EventKind::Requeued, 1);
        now.set(EventKind::Warn, 2);
        let new = new_events(&now, &counted).expect("new events");
        assert_eq!((new.get(EventKind::Warn), new.get(EventKind::Requeued)), (1, 1));
        assert_eq!(new.get(EventKind::OverQuota), 0);
    }

    #[test]
    fn job_reported_families_say_whose_word_they_are() {
        for (family, _) in REPORTED {
            assert!(
                family.name.starts_with("gpu_mem_quota_job_reported_"),
                "{}",
                family.name
            );
            assert!(
                family.help.ends_with("as reported by the job, not measured."),
                "{}",
                family.name
            );
        }
    }

    use crate::job_telemetry::worst_case_task as worst_task;

    fn job_with(tasks: Vec<ReportedTask>, not_shown: u64) -> JobMetrics {
        JobMetrics {
            job_id: u32::MAX,
            sluid: Some("s0K2Q6ZC8M4T00".into()),
            user: "a-user-name-of-thirty-two-chars".into(),
            gpus: Vec::new(),
            events: EventCounts::default(),
            job_reported: tasks,
            job_reported_not_shown: not_shown,
        }
    }

    /// The job-reported samples of `text`: (family, task label or "", value).
    fn reported_samples(text: &str) -> Vec<(String, String, String)> {
        text.lines()
            .filter(|l| l.starts_with("gpu_mem_quota_job_reported_"))
            .map(|l| {
                let (name, rest) = l.split_once('{').unwrap();
                let task = rest
                    .split_once("task=\"")
                    .map_or("", |(_, t)| t.split('"').next().unwrap());
                let value = l.rsplit(' ').next().unwrap();
                (name.to_string(), task.to_string(), value.to_string())
            })
            .collect()
    }

    #[test]
    fn job_reported_series_are_capped_and_the_rest_one_count() {
        let not_shown = |text: &str| {
            reported_samples(text)
                .into_iter()
                .filter(|(name, _, _)| name == REPORTED_NOT_SHOWN.name)
                .map(|(_, _, v)| v)
                .collect::<Vec<_>>()
        };
        let tasks_of = |text: &str| {
            let mut tasks: Vec<String> = reported_samples(text)
                .into_iter()
                .filter(|(name, _, _)| name == REPORTED_ALLOCATED.name)
                .map(|(_, t, _)| t)
                .collect();
            tasks.dedup();
            tasks
        };
        // (tasks given, not shown before, tasks written, count written)
        let many = (0..MAX_TASKS_SHOWN as u32 + 5).rev().collect::<Vec<_>>();
        type Case = (Vec<u32>, u64, Vec<u32>, Option<u64>);
        let table: Vec<Case> = vec![
            (vec![], 0, vec![], None),
            (vec![1, 0], 0, vec![0, 1], Some(0)),
            (vec![], 1968, vec![], Some(1968)),
            (vec![0], 1968, vec![0], Some(1968)),
            // Handed more than the cap: the lowest written, the rest counted.
            (many.clone(), 10, (0..MAX_TASKS_SHOWN as u32).collect(), Some(15)),
        ];
        for (given, before, want_tasks, want_count) in table {
            let job = job_with(given.iter().map(|&t| worst_task(t)).collect(), before);
            let text = render(&job);
            let want: Vec<String> = want_tasks.iter().map(u32::to_string).collect();
            assert_eq!(tasks_of(&text), want, "{given:?}");
            assert_eq!(
                not_shown(&text),
                want_count.map(|c| c.to_string()).into_iter().collect::<Vec<_>>(),
                "{given:?}"
            );
        }
    }

    #[test]
    fn the_not_shown_help_names_the_cap() {
        assert!(REPORTED_NOT_SHOWN
            .help
            .contains(&format!("at most {MAX_TASKS_SHOWN} tasks")));
    }

    /// The most a job's file holds of its telemetry, however many files the job wrote (K3: one
    /// process's 100 000 files made 72 MB and 800 000 series). 53 386 bytes at worst since the
    /// join labels (`jobid`, `hpc_job`, `sluid`) came, against 36 691 before (63 bytes more on each of 265 lines).
    #[test]
    fn a_jobs_reported_metrics_stay_small() {
        let flood: Vec<ReportedTask> = (0..10_000).map(worst_task).collect();
        let text = render(&job_with(flood, u64::MAX - 1));
        let series = reported_samples(&text).len();
        assert_eq!(series, 8 * MAX_TASKS_SHOWN + 1, "{text}");
        assert!(text.len() <= 56 * 1024, "{} bytes", text.len());
        assert!(text.contains(&format!("}} {}\n", u64::MAX)), "{text}");
    }

    #[test]
    fn ratios() {
        for (n, want) in [
            (0, "0"),
            (10_000, "1"),
            (2500, "0.25"),
            (1, "0.0001"),
            (1234, "0.1234"),
            (9990, "0.999"),
        ] {
            assert_eq!(ratio(n), want);
        }
    }

    #[test]
    fn file_names() {
        assert_eq!(file_name(4242), "gpu_mem_quota_job_4242.prom");
        assert_eq!(job_of_file_name("gpu_mem_quota_job_4242.prom"), Some(4242));
        for other in [
            "gpu_mem_quota_job_.prom",
            "gpu_mem_quota_job_042.prom",
            "gpu_mem_quota_job_1.prom.tmp",
            ".gpu_mem_quota_job_1.prom.tmp",
            "gpu_mem_quota_job_99999999999.prom",
            "gpu_mem_quota_job_+1.prom",
            "node.prom",
        ] {
            assert_eq!(job_of_file_name(other), None, "{other}");
        }
    }
}
