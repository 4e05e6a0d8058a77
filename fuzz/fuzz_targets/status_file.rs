//! The watchdog's status file (`<runtime_dir>/jobs/<id>/status.json`, JSON a training loop polls
//! and `gpu-mem-quota status` reads).
//!
//! Never panics. A file read renders (`Status::to_json`, the watchdog's writer) to one line that
//! reads back equal and renders the same again; `report::parse_status` takes it for its own job
//! only, and gives each GPU the job's quota and state where the GPU has none.
#![no_main]

use gmq_commands::report::parse_status;
use gmq_core::watchdog::status::Status;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    let Ok(status) = Status::from_json(text) else {
        return;
    };
    let rendered = status.to_json();
    assert!(
        rendered.ends_with('\n') && rendered.matches('\n').count() == 1,
        "{rendered:?}"
    );
    let again =
        Status::from_json(&rendered).unwrap_or_else(|e| panic!("{text:?} rendered to {rendered:?}: {e}"));
    assert_eq!(again, status, "{text:?} rendered to {rendered:?}");
    assert_eq!(again.to_json(), rendered);

    let job_id = status.job_id;
    let read = parse_status(job_id, text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
    assert!(parse_status(job_id.wrapping_add(1), text).is_err());
    assert_eq!(read.gpus.len(), status.gpus.len());
    for (filled, own) in read.gpus.iter().zip(&status.gpus) {
        assert_eq!(
            filled.quota_bytes,
            own.quota_bytes.or(status.quota_bytes),
            "{text:?}"
        );
        assert_eq!(filled.health, own.health.or(status.health), "{text:?}");
        assert_eq!(
            (filled.index, filled.used_bytes, filled.peak_bytes),
            (own.index, own.used_bytes, own.peak_bytes)
        );
    }
    // What it read is a status file too.
    assert_eq!(parse_status(job_id, &read.to_json()).as_ref(), Ok(&read));
});
