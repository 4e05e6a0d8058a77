//! `gpu-mem-quota status` on a temporary runtime directory: two jobs with status files (one as the
//! watchdog writes it today, one as docs/HINTS.md describes it), a job without one, a broken file,
//! a stray entry; the table, the JSON, and the command itself.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use gmq_commands::report::{node_json, node_text, parse_status, read_node};
use gmq_core::job_telemetry::{AllocatorTelemetry, ReportedTask, SOURCE};
use gmq_core::watchdog::status::{GpuStatus, JobHealth, Status, VERSION};
use serde_json::Value;

const GIB: u64 = 1 << 30;

/// A fresh directory for a test, removed when dropped (even when the test fails).
fn scratch_dir(test: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("gmq-status-{test}-"))
        .tempdir()
        .unwrap()
}

fn job_dir(runtime: &Path, job: &str) -> PathBuf {
    let dir = runtime.join("jobs").join(job);
    fs::create_dir_all(&dir).unwrap();
    dir
}

/// Job 101 as the watchdog writes it (job-level state and quota); job 102 as docs/HINTS.md shows
/// (per-GPU quota and state, a prediction, an RFC 3339 time); 103 without a file; 104 broken.
/// Job 101's task 0 reports its allocator's telemetry.
fn fake_node(runtime: &Path) {
    let status = Status {
        version: VERSION,
        job_id: 101,
        updated_at: Some(1_000),
        health: Some(JobHealth::Warn),
        quota_bytes: Some(40 * GIB),
        action: None,
        gpus: vec![
            GpuStatus {
                index: 0,
                uuid: "GPU-aaaa".into(),
                used_bytes: 36 * GIB,
                peak_bytes: 38 * GIB,
                quota_bytes: Some(40 * GIB),
                total_bytes: Some(80 * GIB),
                health: Some(JobHealth::Warn),
                hard_limit_bytes: Some(40 * GIB),
            },
            GpuStatus {
                index: 1,
                uuid: "GPU-bbbb".into(),
                used_bytes: 10 * GIB,
                peak_bytes: 12 * GIB,
                quota_bytes: Some(40 * GIB),
                total_bytes: Some(80 * GIB),
                health: Some(JobHealth::Warn),
                hard_limit_bytes: None,
            },
        ],
        prediction: None,
        job_reported: vec![ReportedTask {
            source: SOURCE.into(),
            task: 0,
            pid: 4242,
            updated_at: 940,
            allocator: AllocatorTelemetry {
                allocated_bytes: 30 * GIB,
                reserved_bytes: 40 * GIB,
                peak_allocated_bytes: 35 * GIB,
                peak_reserved_bytes: 40 * GIB,
                num_alloc_retries: 2,
                num_ooms: 0,
                fragmentation: 2500,
            },
            controller: None,
        }],
        job_reported_not_shown: 1968,
    };
    fs::write(job_dir(runtime, "101").join("status.json"), status.to_json()).unwrap();
    let documented = r#"{
  "version": 1, "job_id": 102, "updated_at": "2025-06-01T12:00:00Z",
  "gpus": [ { "index": 3, "uuid": "GPU-cccc", "used_bytes": 21474836480, "peak_bytes": 21474836480,
              "quota_bytes": 21474836480, "state": "over-quota", "future_field": [1, {"x": null}] } ],
  "prediction": { "gpu_index": 3, "seconds_to_quota": 0, "suggested_batch_scale": 0.62 }
}"#;
    fs::write(job_dir(runtime, "102").join("status.json"), documented).unwrap();
    job_dir(runtime, "103");
    fs::write(job_dir(runtime, "104").join("status.json"), "{\"job_id\":104,").unwrap();
    job_dir(runtime, "not-a-job");
}

#[test]
fn lists_the_jobs_of_the_node() {
    let scratch = scratch_dir("list");
    let runtime = scratch.path();
    fake_node(runtime);
    let node = read_node(runtime, true).unwrap();
    assert!(node.present);
    assert_eq!(node.jobs.iter().map(|j| j.job_id).collect::<Vec<_>>(), [101, 102]);
    assert_eq!(node.without_status, [103]);
    assert_eq!(node.broken.len(), 1);
    assert_eq!(node.broken[0].0, 104);
    assert_eq!(node.unreadable, 0);

    let expected = "\
JOBID  STATE       GPU  UUID      USED  QUOTA  PEAK  USED/QUOTA  PEAK/QUOTA  UPDATED
101    warn        0    GPU-aaaa  36G   40G    38G   90.0%       95.0%       5s ago
101    warn        1    GPU-bbbb  10G   40G    12G   25.0%       30.0%       5s ago
102    over-quota  3    GPU-cccc  20G   20G    20G   100.0%      100.0%      0s ago
Job 101: the driver's hard limit is in force (GPU 0 at 40G).
Job 101 task 0 (pid 4242), as the job reports it 65s ago: allocated 30G of 40G reserved, fragmentation 0.25, 2 alloc retries, 0 OOMs.
Job 101: 1968 more task(s) wrote telemetry, not shown (at most 32, one per process).
Job 103: no status file (no quota, or its watchdog is starting).
Job 104: status file unreadable: EOF while parsing a value at line 1 column 14
";
    assert_eq!(node_text(&node, 1_005), expected);

    let doc: Value = serde_json::from_str(&node_json(&node)).unwrap();
    let jobs = doc["jobs"].as_array().unwrap();
    assert_eq!(jobs.len(), 2);
    assert_eq!(jobs[0]["state"], "warn");
    assert_eq!(jobs[0]["updated_at"].as_u64(), Some(1_000));
    let gpu = &jobs[0]["gpus"][0];
    for (key, want) in [
        ("index", 0),
        ("used_bytes", 36 * GIB),
        ("quota_bytes", 40 * GIB),
        ("peak_bytes", 38 * GIB),
        ("total_bytes", 80 * GIB),
    ] {
        assert_eq!(gpu[key].as_u64(), Some(want), "{key}");
    }
    assert_eq!(gpu["state"], "warn");
    assert_eq!(gpu["hard_limit_bytes"].as_u64(), Some(40 * GIB));
    assert!(
        jobs[0]["gpus"][1].get("hard_limit_bytes").is_none(),
        "absent where none is in force"
    );
    // The documented schema's RFC 3339 time (2025-06-01T12:00:00Z) is read as unix seconds.
    assert_eq!(jobs[1]["updated_at"], 1_748_779_200);
    // The job's word, marked as such; absent where the job reported nothing.
    let reported = &jobs[0]["job_reported"][0];
    assert_eq!(reported["source"], "job-reported");
    assert_eq!(reported["allocator"]["fragmentation"], 0.25);
    assert!(jobs[1].get("job_reported").is_none());
    assert_eq!(jobs[0]["job_reported_not_shown"], 1968);
    assert!(jobs[1].get("job_reported_not_shown").is_none());
    assert_eq!(doc["without_status"], serde_json::json!([103]));
    assert_eq!(doc["unreadable"].as_u64(), Some(0));
}

#[test]
fn a_node_without_a_runtime_dir_watches_nothing() {
    let scratch = scratch_dir("none");
    let runtime = scratch.path().join("absent");
    let node = read_node(&runtime, true).unwrap();
    assert!(!node.present);
    assert_eq!(node_text(&node, 0), "No jobs watched on this node.\n");
    assert_eq!(
        node_json(&node),
        r#"{"jobs":[],"without_status":[],"broken":[],"unreadable":0}"#
    );
}

#[test]
fn status_files_that_do_not_fit_are_refused_by_name() {
    let table = [
        ("{\"job_id\":7,\"gpus\":[]}", "job_id is 7, the directory says 5"),
        (
            "{\"job_id\":5,\"gpus\":[{\"index\":0}]}",
            "missing field `used_bytes` at line 1 column 31",
        ),
        (
            "{\"job_id\":5,\"gpus\":[{\"index\":-1,\"used_bytes\":1,\"peak_bytes\":1}]}",
            "invalid value: integer `-1`, expected u32 at line 1 column 31",
        ),
        (
            "[]",
            "invalid length 1, expected struct Status with 10 elements at line 1 column 2",
        ),
        ("not json", "expected ident at line 1 column 2"),
    ];
    for (text, want) in table {
        assert_eq!(parse_status(5, text).unwrap_err(), want, "{text}");
    }
    let acted = parse_status(
        5,
        "{\"job_id\":5,\"state\":\"acted\",\"action\":\"requeue\",\"gpus\":[]}",
    )
    .unwrap();
    assert_eq!(acted.action.as_deref(), Some("requeue"));
    assert!(acted.gpus.is_empty());
}

#[test]
fn the_command_reads_the_runtime_dir_of_the_policy() {
    let scratch = scratch_dir("cli");
    let runtime = scratch.path();
    fake_node(runtime);
    let policy = runtime.join("policy.toml");
    fs::write(
        &policy,
        format!("[enforcement]\nruntime_dir = \"{}\"\n", runtime.display()),
    )
    .unwrap();
    let run = |extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_gpu-mem-quota"))
            .arg("status")
            .arg("--config")
            .arg(&policy)
            .args(extra)
            .output()
            .unwrap()
    };
    let text = run(&[]);
    assert!(text.status.success());
    let stdout = String::from_utf8(text.stdout).unwrap();
    assert!(stdout.starts_with("JOBID  STATE"), "{stdout}");
    assert!(stdout.contains("102    over-quota  3    GPU-cccc"), "{stdout}");
    let json = run(&["--json"]);
    assert!(json.status.success());
    let doc: Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(doc["jobs"].as_array().map(Vec::len), Some(2));
    let bad = run(&["--bogus"]);
    assert_eq!(bad.status.code(), Some(2));
}
