//! Prometheus metrics for node_exporter's textfile collector: one file per job on each node.
//!
//! Pure: figures in, exposition text out. The watchdog writes the text with
//! gmq-node's `textfile::write_atomically` under [`file_name`] and removes the file when the job ends.
//! The node is not a label: node_exporter adds its own `instance`. Help texts are the same in every
//! file, as the collector requires when it merges files, and no sample carries a timestamp (the
//! collector refuses them). Every metric is listed in docs/ACCOUNTING.md.
//!
//! The `gpu_mem_quota_job_reported_*` families are the job's own word (its allocator telemetry,
//! `crate::job_telemetry`), not a measurement: their help texts say so, and they appear only
//! while a task of the job reports.

use std::fmt::Write as _;

use crate::job_telemetry::{AllocatorTelemetry, ReportedTask};
use crate::record::{EventCounts, EventKind};

/// What one job looks like on this node at one sample.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobMetrics {
    pub job_id: u32,
    pub user: String,
    pub gpus: Vec<GpuMetrics>,
    /// Events of the job on this node since its watchdog started.
    pub events: EventCounts,
    /// What the job's tasks here say of their allocators: the job's word, by task.
    pub job_reported: Vec<ReportedTask>,
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
    help: "Quota events of the job on this node, by kind (warn, over_quota, preempted, requeued, cancelled, held, oom).",
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
    let job_labels = format!(
        "job_id=\"{}\",user=\"{}\"",
        job.job_id,
        escape_label_value(&job.user)
    );
    let gpu_labels = |gpu: &GpuMetrics| {
        format!(
            "{job_labels},gpu=\"{}\",gpu_uuid=\"{}\"",
            gpu.index,
            escape_label_value(&gpu.uuid)
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
    render_job_reported(&mut out, &job_labels, &job.job_reported);
    out
}

/// The job-reported families, by task; nothing while no task reports.
fn render_job_reported(out: &mut String, job_labels: &str, tasks: &[ReportedTask]) {
    if tasks.is_empty() {
        return;
    }
    let mut tasks: Vec<&ReportedTask> = tasks.iter().collect();
    tasks.sort_by_key(|t| (t.task, t.pid));
    // Two files of one task (two processes here writing the same task number) would be two samples
    // with the same labels, which the collector refuses: the first is kept.
    tasks.dedup_by_key(|t| t.task);
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
        for family in [&USED, &LIMIT, &PEAK, &EVENTS].into_iter().chain(reported) {
            assert!(!family.help.contains(['\\', '\n']), "{}", family.name);
        }
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
