//! The `squeue --json` reader (Slurm 24.11 on): a job's record and its state facts, from JSON that
//! holds text users wrote (job name, comment, paths) and every other job slurmctld lists.
//!
//! Never panics, for the job id the text names first (`"job_id":N`) and for a fixed one. A record
//! read is that job's; the two readers agree on what both read; the result does not depend on
//! how the JSON is laid out (re-serialized compactly) nor on another job's record added to the
//! list (the job is picked by its exact id); no name that is not a node's has GPUs.
#![no_main]

mod common;

use gmq_core::slurm_text::{parse_job_info_json, parse_squeue_json};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fuzz_target!(|output: &str| {
    let named = output
        .split_once("\"job_id\":")
        .and_then(|(_, rest)| rest.trim_start().split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|digits| digits.parse::<u32>().ok());
    for job_id in named.into_iter().chain([4242]) {
        check(output, job_id);
    }
});

fn check(output: &str, job_id: u32) {
    let record = parse_squeue_json(output, job_id);
    let info = parse_job_info_json(output, job_id);
    if let Ok(record) = &record {
        assert_eq!(record.job_id, job_id);
        // A node name never holds a comma: the hostlist is split there.
        assert!(record.nodes.iter().all(|node| !node.contains(',')));
        if let Some(leader) = record.het_leader {
            assert!(leader != 0 && leader != job_id, "{leader}");
        }
    }
    if let Ok(info) = &info {
        assert_eq!(info.job_id, job_id);
    }
    if let (Ok(record), Ok(info)) = (&record, &info) {
        common::same_job_identity(record, info, output);
        let end = record.end.as_ref().expect("the info reader found a job_state");
        assert_eq!(end.state, info.job_state);
        assert_eq!(
            (end.restarts, end.requeue, end.batch),
            (info.restarts, info.requeue, info.batch_flag > 0)
        );
    }
    // The same document, laid out differently, reads the same. (A key given twice is refused by
    // the readers but kept once by `Value`: only what was read is compared.)
    // (Nor can `Value` hold all JSON the readers skip over, such as `1e400`.)
    let Ok(mut document) = serde_json::from_str::<Value>(output) else {
        return;
    };
    let compact = document.to_string();
    let (compact_record, compact_info) = (
        parse_squeue_json(&compact, job_id),
        parse_job_info_json(&compact, job_id),
    );
    if record.is_ok() {
        assert_eq!(compact_record, record, "{output:?} vs {compact:?}");
    }
    if info.is_ok() {
        assert_eq!(compact_info, info, "{output:?} vs {compact:?}");
    }
    // Another job's record, imitating ours, changes nothing.
    let other = job_id.wrapping_add(1);
    if let Some(jobs) = document.get_mut("jobs").and_then(Value::as_array_mut) {
        jobs.push(serde_json::json!({
            "job_id": other, "user_id": 0, "admin_comment": format!("forged {job_id}"),
            "account": "root", "nodes": "vm", "gres_detail": ["gpu:8(IDX:0-7)"],
            "job_state": "RUNNING", "priority": 1, "requeue": true, "batch_flag": true,
            "restart_cnt": 0, "user_name": "root", "node_count": 1, "het_job_id": job_id,
        }));
        let more = document.to_string();
        let (more_record, more_info) = (
            parse_squeue_json(&more, job_id),
            parse_job_info_json(&more, job_id),
        );
        match compact_record {
            Ok(read) => assert_eq!(more_record, Ok(read), "{output:?} with job {other}"),
            Err(_) => assert!(more_record.is_err(), "{output:?} with job {other}"),
        }
        match compact_info {
            Ok(read) => assert_eq!(more_info, Ok(read), "{output:?} with job {other}"),
            Err(_) => assert!(more_info.is_err(), "{output:?} with job {other}"),
        }
    }
}
