//! What Slurm's commands print, read: one job's `squeue` columns and JSON record, one node's state
//! (`sinfo`), hostlists, and
//! Slurm's error messages sorted into retry-worthy and final ([`classify()`]). Pure: gmq-node's
//! `slurmctl` runs the commands and hands their output here. Nothing read here is text the user
//! wrote posing as a field: each value is its own column or JSON field.

mod classify;
mod error;
pub mod hostlist;
mod job_info;
mod job_json;
mod node_state;

pub use classify::{classify, Verdict};
pub use error::{CtlError, Refusal};
pub use job_info::{parse_squeue, parse_squeue_record, JobInfo, JobState, RECORD_FORMAT, SQUEUE_FORMAT};
pub use job_json::{parse_job_info_json, parse_squeue_json, JobEnd, JobRecord};
pub use node_state::{parse_node_down, NODE_FORMAT};

/// A GRES count as squeue, scontrol and sinfo print one: a whole number, or `-`. Slurm 26.05 prints
/// `-` for the shards used on a GPU that a job took whole (sinfo's `GresUsed`, `shard:-/80(...)`:
/// Slurm commit f895b97376): none of its shards are allocated, so it reads as 0 here. `None` for
/// anything else.
pub(crate) fn gres_count(text: &str) -> Option<u64> {
    match text.trim() {
        "-" => Some(0),
        digits => digits.parse().ok(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_gres_count_is_a_number_or_26_05s_dash() {
        assert_eq!(super::gres_count("40"), Some(40));
        assert_eq!(super::gres_count("-"), Some(0));
        assert_eq!(super::gres_count(""), None);
        assert_eq!(super::gres_count("--"), None);
        assert_eq!(super::gres_count("-1"), None);
        assert_eq!(super::gres_count("x"), None);
    }
}
