//! The watchdog's hands on Slurm: reading a job's state and requeueing, holding or cancelling it
//! through Slurm's own commands (`scontrol`, `scancel`), safely from a root process.
//!
//! Commands run by absolute path with an argv, never through a shell, with a cleared environment
//! (PATH fixed, `SLURM_CONF` passed when given), stdin from /dev/null, in their own process group,
//! under a deadline, output bounded ([`run`]). Failures are sorted by Slurm's own words into
//! retry-worthy (controller unreachable) and final refusals ([`classify`]). A job's fields are read
//! from `squeue` columns that hold no user-written text ([`parse_squeue`]); its AdminComment from
//! `scontrol show job` ([`parse_admin_comment`]), which refuses ambiguous records rather than guess.
//! No threads.
//!
//! ```no_run
//! use gpu_mem_quota::slurmctl::SlurmTools;
//! let slurm = SlurmTools::find().with_slurm_conf("/etc/slurm/slurm.conf");
//! let job = slurm.job(4242)?;
//! if job.is_requeueable() {
//!     slurm.requeue(4242)?;
//! }
//! # Ok::<(), gpu_mem_quota::slurmctl::CtlError>(())
//! ```

mod admin_comment;
mod classify;
mod error;
pub(crate) mod hostlist;
mod job_info;
mod job_json;
mod run;
mod tools;

pub use admin_comment::parse_admin_comment;
pub use classify::{classify, Verdict};
pub use error::{CtlError, Refusal};
pub(crate) use job_info::JobInfo;
pub use job_info::{parse_squeue, JobState, SQUEUE_FORMAT};
pub use job_json::JobEnd;
pub(crate) use job_json::JobRecord;
pub use run::SAFE_PATH;
pub use tools::{Backoff, SlurmTools, JSON_JOB_READS_FROM};

/// This node's name as Slurm's per-node job details name it: the short host name (`gpu01` of
/// `gpu01.cluster`), Slurm's default NodeName.
pub(crate) fn this_node() -> String {
    match nix::unistd::gethostname() {
        Ok(name) => name.to_string_lossy().split('.').next().unwrap_or("").to_string(),
        Err(_) => "unknown".into(),
    }
}
