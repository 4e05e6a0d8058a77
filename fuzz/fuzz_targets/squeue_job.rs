//! The job readers: `squeue --Format` lines (the job's fields, and its whole record with the
//! AdminComment last, which may hold anything).
//!
//! Never panics, for the job id the text names first and for a fixed one.
#![no_main]

use gmq_core::slurm_text::{parse_squeue, parse_squeue_record};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|output: &str| {
    let named = output
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .and_then(|digits| digits.parse::<u32>().ok());
    for job_id in named.into_iter().chain([4242]) {
        if let Ok(info) = parse_squeue(output, job_id) {
            assert_eq!(info.job_id, job_id);
        }
        if let Ok(record) = parse_squeue_record(output, job_id) {
            assert_eq!(record.job_id, job_id);
        }
    }
});
