//! `scontrol --oneliner show job N` output, which holds user-controlled text (job names, comments,
//! paths, the AdminComment) between scontrol's own fields.
//!
//! Never panics, for the job id the text names first and for a fixed one.
#![no_main]

use gpu_mem_quota::slurmctl::parse_show_job;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|output: &str| {
    let named = output
        .strip_prefix("JobId=")
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|digits| digits.parse::<u32>().ok());
    for job_id in named.into_iter().chain([4242]) {
        if let Ok(info) = parse_show_job(output, job_id) {
            assert_eq!(info.job_id, job_id);
        }
    }
});
