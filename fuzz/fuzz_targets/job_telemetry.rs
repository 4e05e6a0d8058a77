//! The job's own allocator telemetry file (`gpu-mem-quota-telemetry.<job>.<task>.json`, written in
//! the job's working directory by python's `TelemetryWriter`, read by the watchdog as root).
//!
//! Never panics. A file read has the known version and numbers within the bounds
//! (`MAX_BYTES`, `MAX_COUNT`, a fragmentation from 0 to 1), allocated within reserved and peaks at
//! least the present, and strings within `MAX_TEXT_CHARS` without control characters; an error
//! names the file. What is read, as the status file's `job_reported` entry, renders to JSON that
//! reads back equal; and the file name the task writes reads back as its task for its job only.
#![no_main]

use gmq_core::job_telemetry::{self, ReportedTask, MAX_BYTES, MAX_COUNT, MAX_TEXT_CHARS, SOURCE};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|bytes: &[u8]| {
    let telemetry = match job_telemetry::parse("t.json", bytes) {
        Ok(telemetry) => telemetry,
        Err(e) => {
            assert!(e.to_string().starts_with("t.json: "), "{e}");
            return;
        }
    };
    let a = &telemetry.allocator;
    assert!(a.allocated_bytes <= a.reserved_bytes && a.reserved_bytes <= MAX_BYTES);
    assert!(a.peak_allocated_bytes >= a.allocated_bytes && a.peak_reserved_bytes >= a.reserved_bytes);
    assert!(a.num_alloc_retries <= MAX_COUNT && a.num_ooms <= MAX_COUNT);
    assert!(a.fragmentation <= 10_000);
    if let Some(decision) = telemetry
        .controller
        .as_ref()
        .and_then(|c| c.last_decision.as_ref())
    {
        assert!(decision.chars().count() <= MAX_TEXT_CHARS && !decision.chars().any(char::is_control));
    }

    let task = (telemetry.pid % 1024, telemetry.job_id.unwrap_or(1));
    let reported = ReportedTask::new(task.0, telemetry);
    assert_eq!(reported.source, SOURCE);
    let text = serde_json::to_string(&reported).expect("a reported task always renders");
    let again: ReportedTask = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{text}: {e}"));
    assert_eq!(again, reported, "{text}");

    let name = job_telemetry::file_name(task.1, task.0);
    assert_eq!(job_telemetry::task_of_file_name(&name, task.1), Some(task.0));
    assert_eq!(
        job_telemetry::task_of_file_name(&name, task.1.wrapping_add(1)),
        None
    );
});
