//! The job readers: `scontrol --oneliner show job N` output, which holds user-controlled text (job
//! names, comments, paths, the AdminComment) between scontrol's own fields, read for the
//! AdminComment; and `squeue --Format` lines, read for the job's fields.
//!
//! Never panics, for the job id the text names first and for a fixed one.
#![no_main]

use gpu_mem_quota::slurmctl::{parse_admin_comment, parse_squeue};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|output: &str| {
    let named = output
        .trim_start_matches("JobId=")
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .and_then(|digits| digits.parse::<u32>().ok());
    for job_id in named.into_iter().chain([4242]) {
        let _ = parse_admin_comment(output, job_id);
        if let Ok(info) = parse_squeue(output, job_id) {
            assert_eq!(info.job_id, job_id);
        }
    }
});
