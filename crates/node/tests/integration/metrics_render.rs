//! The Prometheus textfile for a job: exact text, and `promtool check metrics` when installed.

use std::io::Write;
use std::process::{Command, Stdio};

use gmq_core::metrics::{render, GpuMetrics, JobMetrics};
use gmq_core::record::{EventCounts, EventKind};

const GIB: u64 = 1 << 30;

fn two_gpu_job() -> JobMetrics {
    let mut events = EventCounts::default();
    events.add(EventKind::Warn, 2);
    events.add(EventKind::OverQuota, 1);
    JobMetrics {
        job_id: 4242,
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
    }
}

#[test]
fn renders_every_family_with_help_type_and_labels() {
    let want = r#"# HELP gpu_mem_quota_used_bytes GPU memory used by the job's processes on this GPU at the last sample.
# TYPE gpu_mem_quota_used_bytes gauge
gpu_mem_quota_used_bytes{job_id="4242",user="alice",gpu="0",gpu_uuid="GPU-1a2b3c4d-0000-1111-2222-333344445555"} 32212254720
gpu_mem_quota_used_bytes{job_id="4242",user="alice",gpu="1",gpu_uuid="GPU-5e6f7a8b-0000-1111-2222-333344445555"} 12884901888
# HELP gpu_mem_quota_limit_bytes The job's GPU-memory quota on this GPU.
# TYPE gpu_mem_quota_limit_bytes gauge
gpu_mem_quota_limit_bytes{job_id="4242",user="alice",gpu="0",gpu_uuid="GPU-1a2b3c4d-0000-1111-2222-333344445555"} 42949672960
gpu_mem_quota_limit_bytes{job_id="4242",user="alice",gpu="1",gpu_uuid="GPU-5e6f7a8b-0000-1111-2222-333344445555"} 42949672960
# HELP gpu_mem_quota_peak_bytes The most GPU memory the job's processes used on this GPU since the job started here.
# TYPE gpu_mem_quota_peak_bytes gauge
gpu_mem_quota_peak_bytes{job_id="4242",user="alice",gpu="0",gpu_uuid="GPU-1a2b3c4d-0000-1111-2222-333344445555"} 33285996544
gpu_mem_quota_peak_bytes{job_id="4242",user="alice",gpu="1",gpu_uuid="GPU-5e6f7a8b-0000-1111-2222-333344445555"} 13958643712
# HELP gpu_mem_quota_events_total Quota events of the job on this node, by kind (warn, over_quota, preempted, requeued, cancelled, held, oom).
# TYPE gpu_mem_quota_events_total counter
gpu_mem_quota_events_total{job_id="4242",user="alice",kind="warn"} 2
gpu_mem_quota_events_total{job_id="4242",user="alice",kind="over_quota"} 1
gpu_mem_quota_events_total{job_id="4242",user="alice",kind="preempted"} 0
gpu_mem_quota_events_total{job_id="4242",user="alice",kind="requeued"} 0
gpu_mem_quota_events_total{job_id="4242",user="alice",kind="cancelled"} 0
gpu_mem_quota_events_total{job_id="4242",user="alice",kind="held"} 0
gpu_mem_quota_events_total{job_id="4242",user="alice",kind="oom"} 0
"#;
    assert_eq!(render(&two_gpu_job()), want);
}

#[test]
fn odd_user_names_are_escaped() {
    let mut job = two_gpu_job();
    job.user = "ev\"il\\\nuser".into();
    let text = render(&job);
    assert!(text.contains(r#"user="ev\"il\\\nuser""#), "{text}");
    // Every sample stays on one line.
    assert_eq!(text.lines().count(), 2 * 4 + 2 * 3 + 7);
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
