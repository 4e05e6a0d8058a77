//! Reports for people: `gpu-mem-quota report` (a job's runs and GPU-memory efficiency from
//! accounting, `sacct` rows and our AdminComment record) and `gpu-mem-quota status` (the jobs
//! watched on this node, from their watchdogs' status files).
//!
//! Pure but for [`node::read_node`], [`node::read_jobs`] and [`node::jobs_of_user`], which read
//! the node's runtime directory and /proc; running `sacct` is
//! [`crate::slurmctl::SlurmTools::sacct`]'s job.

pub mod format;
pub mod job;
pub mod node;
pub mod render;
pub mod sacct;

pub use job::{efficiency, job_reports, JobReport, RecordState, Run};
pub use node::{jobs_of_user, node_json, node_text, parse_status, read_jobs, read_node, NodeStatus};
pub use render::{job_text, jobs_json, jobs_list_text};
pub use sacct::{explain_failure, parse_rows, Query, SacctError, SacctRow};
