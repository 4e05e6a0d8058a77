//! The Prometheus textfile for a job: exact text, and `promtool check metrics` when installed.

use std::io::Write;
use std::process::{Command, Stdio};

use gmq_core::job_telemetry::{AllocatorTelemetry, ReportedTask, SOURCE};
use gmq_core::metrics::{render, GpuMetrics, JobMetrics, NodeEvents};
use gmq_core::record::{EventCounts, EventKind};

const GIB: u64 = 1 << 30;

fn two_gpu_job() -> JobMetrics {
    let mut events = EventCounts::default();
    events.add(EventKind::Warn, 2);
    events.add(EventKind::OverQuota, 1);
    JobMetrics {
        job_id: 4242,
        sluid: None,
        user: "alice".into(),
        // Out of order on purpose: the output lists GPUs by index.
        gpus: vec![
            GpuMetrics {
                index: 1,
                uuid: "GPU-5e6f7a8b-0000-1111-2222-333344445555".into(),
                used_bytes: 12 * GIB,
                quota_bytes: 40 * GIB,
                peak_bytes: 13 * GIB,
            },
            GpuMetrics {
                index: 0,
                uuid: "GPU-1a2b3c4d-0000-1111-2222-333344445555".into(),
                used_bytes: 30 * GIB,
                quota_bytes: 40 * GIB,
                peak_bytes: 31 * GIB,
            },
        ],
        events,
        job_reported: Vec::new(),
        job_reported_not_shown: 0,
    }
}

#[test]
fn renders_every_family_with_help_type_and_labels() {
    let want = r#"# HELP gpu_mem_quota_used_bytes GPU memory used by the job's processes on this GPU at the last sample.
# TYPE gpu_mem_quota_used_bytes gauge
gpu_mem_quota_used_bytes{job_id="4242",user="alice",jobid="4242",hpc_job="4242",gpu="0",gpu_uuid="GPU-1a2b3c4d-0000-1111-2222-333344445555",uuid="GPU-1a2b3c4d-0000-1111-2222-333344445555",UUID="GPU-1a2b3c4d-0000-1111-2222-333344445555"} 32212254720
gpu_mem_quota_used_bytes{job_id="4242",user="alice",jobid="4242",hpc_job="4242",gpu="1",gpu_uuid="GPU-5e6f7a8b-0000-1111-2222-333344445555",uuid="GPU-5e6f7a8b-0000-1111-2222-333344445555",UUID="GPU-5e6f7a8b-0000-1111-2222-333344445555"} 12884901888
# HELP gpu_mem_quota_limit_bytes The job's GPU-memory quota on this GPU.
# TYPE gpu_mem_quota_limit_bytes gauge
gpu_mem_quota_limit_bytes{job_id="4242",user="alice",jobid="4242",hpc_job="4242",gpu="0",gpu_uuid="GPU-1a2b3c4d-0000-1111-2222-333344445555",uuid="GPU-1a2b3c4d-0000-1111-2222-333344445555",UUID="GPU-1a2b3c4d-0000-1111-2222-333344445555"} 42949672960
gpu_mem_quota_limit_bytes{job_id="4242",user="alice",jobid="4242",hpc_job="4242",gpu="1",gpu_uuid="GPU-5e6f7a8b-0000-1111-2222-333344445555",uuid="GPU-5e6f7a8b-0000-1111-2222-333344445555",UUID="GPU-5e6f7a8b-0000-1111-2222-333344445555"} 42949672960
# HELP gpu_mem_quota_peak_bytes The most GPU memory the job's processes used on this GPU since the job started here.
# TYPE gpu_mem_quota_peak_bytes gauge
gpu_mem_quota_peak_bytes{job_id="4242",user="alice",jobid="4242",hpc_job="4242",gpu="0",gpu_uuid="GPU-1a2b3c4d-0000-1111-2222-333344445555",uuid="GPU-1a2b3c4d-0000-1111-2222-333344445555",UUID="GPU-1a2b3c4d-0000-1111-2222-333344445555"} 33285996544
gpu_mem_quota_peak_bytes{job_id="4242",user="alice",jobid="4242",hpc_job="4242",gpu="1",gpu_uuid="GPU-5e6f7a8b-0000-1111-2222-333344445555",uuid="GPU-5e6f7a8b-0000-1111-2222-333344445555",UUID="GPU-5e6f7a8b-0000-1111-2222-333344445555"} 13958643712
# HELP gpu_mem_quota_events_total Quota events of the job on this node, by kind (warn, over_quota, preempted, requeued, cancelled, held, oom, node_fail).
# TYPE gpu_mem_quota_events_total counter
gpu_mem_quota_events_total{job_id="4242",user="alice",jobid="4242",hpc_job="4242",kind="warn"} 2
gpu_mem_quota_events_total{job_id="4242",user="alice",jobid="4242",hpc_job="4242",kind="over_quota"} 1
gpu_mem_quota_events_total{job_id="4242",user="alice",jobid="4242",hpc_job="4242",kind="preempted"} 0
gpu_mem_quota_events_total{job_id="4242",user="alice",jobid="4242",hpc_job="4242",kind="requeued"} 0
gpu_mem_quota_events_total{job_id="4242",user="alice",jobid="4242",hpc_job="4242",kind="cancelled"} 0
gpu_mem_quota_events_total{job_id="4242",user="alice",jobid="4242",hpc_job="4242",kind="held"} 0
gpu_mem_quota_events_total{job_id="4242",user="alice",jobid="4242",hpc_job="4242",kind="oom"} 0
gpu_mem_quota_events_total{job_id="4242",user="alice",jobid="4242",hpc_job="4242",kind="node_fail"} 0
"#;
    assert_eq!(render(&two_gpu_job()), want);
}

/// Task `task`'s telemetry as the job reports it.
fn reported(task: u32, pid: u32, allocated_gib: u64, fragmentation: u32) -> ReportedTask {
    ReportedTask {
        source: SOURCE.into(),
        task,
        pid,
        updated_at: 1_796_018_400,
        allocator: AllocatorTelemetry {
            allocated_bytes: allocated_gib * GIB,
            reserved_bytes: 32 * GIB,
            peak_allocated_bytes: 31 * GIB,
            peak_reserved_bytes: 32 * GIB,
            num_alloc_retries: 3,
            num_ooms: 1,
            fragmentation,
        },
        controller: None,
    }
}

#[test]
fn the_jobs_telemetry_follows_marked_as_reported_by_the_job() {
    let mut job = two_gpu_job();
    let without = render(&job);
    // Out of order, and task 1 twice (two processes writing the same task): one sample per task.
    job.job_reported = vec![
        reported(1, 51, 16, 5000),
        reported(0, 50, 24, 2500),
        reported(1, 52, 8, 7500),
    ];
    let text = render(&job);
    // Only an addition: what was there is unchanged, first.
    let added = text
        .strip_prefix(&without)
        .expect("the measured families come first, unchanged");
    let want = r#"# HELP gpu_mem_quota_job_reported_allocated_bytes GPU memory the task's allocator says is allocated to tensors, as reported by the job, not measured.
# TYPE gpu_mem_quota_job_reported_allocated_bytes gauge
gpu_mem_quota_job_reported_allocated_bytes{job_id="4242",user="alice",jobid="4242",hpc_job="4242",task="0"} 25769803776
gpu_mem_quota_job_reported_allocated_bytes{job_id="4242",user="alice",jobid="4242",hpc_job="4242",task="1"} 17179869184
# HELP gpu_mem_quota_job_reported_reserved_bytes GPU memory the task's allocator says it holds (reserved), as reported by the job, not measured.
# TYPE gpu_mem_quota_job_reported_reserved_bytes gauge
gpu_mem_quota_job_reported_reserved_bytes{job_id="4242",user="alice",jobid="4242",hpc_job="4242",task="0"} 34359738368
gpu_mem_quota_job_reported_reserved_bytes{job_id="4242",user="alice",jobid="4242",hpc_job="4242",task="1"} 34359738368
# HELP gpu_mem_quota_job_reported_peak_allocated_bytes The most GPU memory the task's allocator says was allocated, as reported by the job, not measured.
# TYPE gpu_mem_quota_job_reported_peak_allocated_bytes gauge
gpu_mem_quota_job_reported_peak_allocated_bytes{job_id="4242",user="alice",jobid="4242",hpc_job="4242",task="0"} 33285996544
gpu_mem_quota_job_reported_peak_allocated_bytes{job_id="4242",user="alice",jobid="4242",hpc_job="4242",task="1"} 33285996544
# HELP gpu_mem_quota_job_reported_peak_reserved_bytes The most GPU memory the task's allocator says it held, as reported by the job, not measured.
# TYPE gpu_mem_quota_job_reported_peak_reserved_bytes gauge
gpu_mem_quota_job_reported_peak_reserved_bytes{job_id="4242",user="alice",jobid="4242",hpc_job="4242",task="0"} 34359738368
gpu_mem_quota_job_reported_peak_reserved_bytes{job_id="4242",user="alice",jobid="4242",hpc_job="4242",task="1"} 34359738368
# HELP gpu_mem_quota_job_reported_fragmentation_ratio 1 - allocated/reserved of the task's allocator, as reported by the job, not measured.
# TYPE gpu_mem_quota_job_reported_fragmentation_ratio gauge
gpu_mem_quota_job_reported_fragmentation_ratio{job_id="4242",user="alice",jobid="4242",hpc_job="4242",task="0"} 0.25
gpu_mem_quota_job_reported_fragmentation_ratio{job_id="4242",user="alice",jobid="4242",hpc_job="4242",task="1"} 0.5
# HELP gpu_mem_quota_job_reported_alloc_retries_total Times the task's allocator freed its cache and retried an allocation, as reported by the job, not measured.
# TYPE gpu_mem_quota_job_reported_alloc_retries_total counter
gpu_mem_quota_job_reported_alloc_retries_total{job_id="4242",user="alice",jobid="4242",hpc_job="4242",task="0"} 3
gpu_mem_quota_job_reported_alloc_retries_total{job_id="4242",user="alice",jobid="4242",hpc_job="4242",task="1"} 3
# HELP gpu_mem_quota_job_reported_ooms_total Out-of-memory errors the task's allocator raised, as reported by the job, not measured.
# TYPE gpu_mem_quota_job_reported_ooms_total counter
gpu_mem_quota_job_reported_ooms_total{job_id="4242",user="alice",jobid="4242",hpc_job="4242",task="0"} 1
gpu_mem_quota_job_reported_ooms_total{job_id="4242",user="alice",jobid="4242",hpc_job="4242",task="1"} 1
# HELP gpu_mem_quota_job_reported_updated_timestamp_seconds When the task last wrote its telemetry (Unix time), as reported by the job, not measured.
# TYPE gpu_mem_quota_job_reported_updated_timestamp_seconds gauge
gpu_mem_quota_job_reported_updated_timestamp_seconds{job_id="4242",user="alice",jobid="4242",hpc_job="4242",task="0"} 1796018400
gpu_mem_quota_job_reported_updated_timestamp_seconds{job_id="4242",user="alice",jobid="4242",hpc_job="4242",task="1"} 1796018400
# HELP gpu_mem_quota_job_reported_tasks_not_shown Tasks of the job on this node whose telemetry was read and not exported as series (at most 32 tasks are, one per process and task number).
# TYPE gpu_mem_quota_job_reported_tasks_not_shown gauge
gpu_mem_quota_job_reported_tasks_not_shown{job_id="4242",user="alice",jobid="4242",hpc_job="4242"} 1
"#;
    assert_eq!(added, want);
    match promtool_check(&text) {
        None => promtool_missing("check metrics"),
        Some((clean, said)) => assert!(clean, "promtool check metrics:\n{said}\n{text}"),
    }
}

#[test]
fn the_nodes_event_counters_pass_promtool() {
    let mut events = NodeEvents::default();
    let mut job = EventCounts::default();
    job.set(EventKind::Requeued, 1);
    events.add("alice", &job);
    events.add("ev\"il\\\nuser", &job);
    let text = events.render();
    assert_eq!(text.lines().count(), 2 + 2 * EventKind::ALL.len(), "{text}");
    match promtool_check(&text) {
        None => promtool_missing("check metrics"),
        Some((clean, said)) => assert!(clean, "promtool check metrics:\n{said}\n{text}"),
    }
}

#[test]
fn odd_user_names_are_escaped() {
    let mut job = two_gpu_job();
    job.user = "ev\"il\\\nuser".into();
    let text = render(&job);
    assert!(text.contains(r#"user="ev\"il\\\nuser""#), "{text}");
    // Every sample stays on one line.
    assert_eq!(text.lines().count(), 2 * 4 + 2 * 3 + EventKind::ALL.len());
}

/// `promtool check metrics` reads the exposition text on stdin and lints names, types and help.
/// Skipped (with a note) where promtool is not installed; Debian's `prometheus` package has it.
fn promtool_check(text: &str) -> Option<(bool, String)> {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .ok()?;
    child.stdin.take()?.write_all(text.as_bytes()).ok()?;
    let out = child.wait_with_output().ok()?;
    let said = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    Some((out.status.success() && said.trim().is_empty(), said))
}

#[test]
fn promtool_accepts_the_output() {
    let mut evil = two_gpu_job();
    evil.user = "ev\"il\\\nuser".into();
    let mut no_gpu = two_gpu_job();
    no_gpu.gpus.clear();
    for job in [two_gpu_job(), evil, no_gpu] {
        let text = render(&job);
        match promtool_check(&text) {
            None => {
                promtool_missing("check metrics");
                return;
            }
            Some((clean, said)) => assert!(clean, "promtool check metrics:\n{said}\n{text}"),
        }
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
