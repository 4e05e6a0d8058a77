//! The `squeue --Format` column readers against each other (`squeue_job` checks each alone):
//! `parse_squeue` (SQUEUE_FORMAT's 14 columns) and `parse_squeue_record` (RECORD_FORMAT's 14 + 5,
//! then the AdminComment, the one column that may hold a `|`).
//!
//! Never panics, for the job id the text starts with and for 4242. Where the record reads, its
//! first 14 columns alone read as the same job; where the 14 columns read, the same line with
//! the record's 5 columns and an AdminComment added reads as a record of the same job (unless its
//! NodeList is no hostlist), with that AdminComment verbatim. The first line of the input is also
//! tried as an AdminComment in a real record line: it reads back verbatim.
#![no_main]

mod common;

use gmq_core::slurm_text::hostlist;
use gmq_core::slurm_text::{parse_squeue, parse_squeue_record};
use libfuzzer_sys::fuzz_target;

/// The dev cluster's 22.05.8 record of a running shard job (src/slurmctl/job_info.rs's tests),
/// without its AdminComment column.
const RECORD_LINE: &str = "7|gmq-user|2001|4294901753|physics|normal|RUNNING|1|0|1|\
2026-12-01T21:50:02|gpu|vm|1|0|vm|gres:shard:8|cpu=1,node=1,billing=9,gres/shard=8|N/A|";

fuzz_target!(|output: &str| {
    let named = output
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .and_then(|digits| digits.parse::<u32>().ok());
    for job_id in named.into_iter().chain([4242]) {
        columns_agree(output, job_id);
    }
    let comment = output.lines().next().unwrap_or("");
    if !comment.contains('\r') {
        let line = format!("{RECORD_LINE}{comment}|\n");
        let record = parse_squeue_record(&line, 7).unwrap_or_else(|e| panic!("{line:?}: {e}"));
        let want = if comment == "(null)" { "" } else { comment };
        assert_eq!(record.admin_comment, want, "{line:?}");
        assert_eq!(record.shards_on("vm"), Some(8));
    }
});

/// The line of `job_id`, as the readers pick it.
fn line_of(output: &str, job_id: u32) -> &str {
    let id = job_id.to_string();
    let mut lines = output
        .lines()
        .filter(|l| l.split('|').next() == Some(id.as_str()));
    let line = lines.next().expect("a job was read from its line");
    assert!(
        lines.next().is_none(),
        "{output:?}: two lines of job {job_id} were read as one"
    );
    line
}

fn columns_agree(output: &str, job_id: u32) {
    if let Ok(record) = parse_squeue_record(output, job_id) {
        assert_eq!(record.job_id, job_id);
        let line = line_of(output, job_id);
        let fourteen: String = line.split_inclusive('|').take(14).collect();
        let info = parse_squeue(&fourteen, job_id)
            .unwrap_or_else(|e| panic!("{output:?} read as a record, its 14 columns {fourteen:?} not: {e}"));
        common::same_job_identity(&record, &info, output);
        let end = record.end.expect("a record from columns says how the job stands");
        assert_eq!(
            (&end.state, end.restarts, end.requeue, end.batch, end.node_count),
            (
                &info.job_state,
                info.restarts,
                info.requeue,
                info.batch_flag > 0,
                info.node_count
            ),
            "{output:?}"
        );
        assert_eq!((end.exit_code.unwrap_or(0) & !0xff, end.signal & !0x7f), (0, 0));
    }
    if let Ok(info) = parse_squeue(output, job_id) {
        assert_eq!(info.job_id, job_id);
        let line = line_of(output, job_id);
        let fourteen: String = line.split_inclusive('|').take(14).collect();
        let comment = "a|b (null)";
        let extended = format!("{fourteen}768|vm|N/A|N/A|N/A|{comment}|\n");
        let expands =
            matches!(info.node_list.as_str(), "" | "(null)") || hostlist::expand(&info.node_list).is_ok();
        match parse_squeue_record(&extended, job_id) {
            Ok(record) => {
                assert!(
                    expands,
                    "{extended:?}: NodeList {:?} does not expand, yet was read",
                    info.node_list
                );
                assert_eq!(record.admin_comment, comment);
                assert_eq!(
                    (record.account, record.user_id, record.priority),
                    (info.account, info.user_id, info.priority)
                );
                let end = record.end.expect("a record from columns says how the job stands");
                assert_eq!(
                    (end.state, end.exit_code, end.signal),
                    (info.job_state, Some(3), 0)
                );
                assert_eq!(end.batch_host, "vm");
            }
            Err(e) => assert!(
                !expands,
                "{output:?} read, but not as the record {extended:?}: {e}"
            ),
        }
    }
}
