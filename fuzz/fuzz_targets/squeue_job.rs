//! The job readers: `squeue --Format` lines (the job's fields, and its whole record with the
//! AdminComment last, which may hold anything) and `scontrol -d --oneliner show job N` output,
//! which holds user-controlled text (job names, comments, paths) between scontrol's own fields,
//! read for the GPUs per node.
//!
//! Never panics, for the job id the text names first and for a fixed one.
#![no_main]

use gpu_mem_quota::slurmctl::{parse_gres_detail, parse_squeue, parse_squeue_record};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|output: &str| {
    let named = output
        .trim_start_matches("JobId=")
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .and_then(|digits| digits.parse::<u32>().ok());
    for job_id in named.into_iter().chain([4242]) {
        if let Ok(detail) = parse_gres_detail(output, job_id) {
            assert_eq!(detail.nodes.len(), detail.gpus.len());
        }
        if let Ok(info) = parse_squeue(output, job_id) {
            assert_eq!(info.job_id, job_id);
        }
        if let Ok(record) = parse_squeue_record(output, job_id) {
            assert_eq!(record.job_id, job_id);
        }
    }
});
