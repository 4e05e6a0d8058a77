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
