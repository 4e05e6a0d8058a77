//! Reports for people: `gpu-mem-quota report` (a job's runs and GPU-memory efficiency from
//! accounting, `sacct` rows and our AdminComment record) and `gpu-mem-quota status` (the jobs
//! watched on this node, from their watchdogs' status files).
//!
//! Pure but for [`node::read_node`], [`node::read_jobs`] and [`node::jobs_of_user`], which read
//! the node's runtime directory and /proc; running `sacct` is
//! [`gmq_node::slurmctl::SlurmTools::sacct`]'s job.

pub(crate) mod format;
pub(crate) mod job;
pub mod jobstats;
pub(crate) mod node;
pub mod render;
pub(crate) mod sacct;
pub mod slurm_gpumem;

pub use job::{efficiency, job_reports, RecordState, Run};
pub(crate) use node::{jobs_of_user, read_jobs};
pub use node::{node_json, node_text, parse_status, read_node};
pub use render::{job_text, jobs_json, jobs_list_text};
pub use sacct::{explain_failure, parse_rows, Query};
