//! The watchdog's hands on Slurm: reading a job's state and requeueing, holding or cancelling it
//! through Slurm's own commands (`scontrol`, `scancel`), safely from a root process.
//!
//! Commands run by absolute path with an argv, never through a shell, with a cleared environment
//! (PATH fixed, `SLURM_CONF` passed when given), stdin from /dev/null, in their own process group,
//! under a deadline, output bounded ([`run`]). Failures are sorted by Slurm's own words into
//! retry-worthy (controller unreachable) and final refusals ([`classify`]). A job's fields are read
//! from one job's `squeue` columns, none of them text the user wrote ([`parse_squeue`]), or from its
//! JSON record where squeue prints one job alone; never from `scontrol show job`'s text, where a
//! job name or comment can imitate a field. Never the whole cluster for one job. No threads.
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

mod classify;
mod error;
pub mod hostlist;
mod job_info;
mod job_json;
mod run;
mod tools;

pub use classify::{classify, Verdict};
pub use error::{CtlError, Refusal};
pub(crate) use job_info::JobInfo;
pub use job_info::{parse_squeue, parse_squeue_record, JobState, RECORD_FORMAT, SQUEUE_FORMAT};
pub use job_json::JobEnd;
pub use job_json::JobRecord;
pub use job_json::{parse_job_info_json, parse_squeue_json};
pub use run::SAFE_PATH;
pub use tools::{Backoff, SlurmTools, JSON_JOB_READS_FROM};

/// This node's name as slurmctld names it: its NodeName. slurmd and slurmstepd put it in their
/// own environment (`SLURMD_NODENAME`, slurmstepd.c), and the prolog's, and the plugin passes it to
/// the watchdog; elsewhere (an admin's shell) the short host name (`gpu01` of `gpu01.cluster`),
/// Slurm's default NodeName. A NodeName that is not the host name (`slurmd -N`, NodeHostname) is
/// found all the same (G6).
pub(crate) fn this_node() -> String {
    if let Some(name) = std::env::var("SLURMD_NODENAME").ok().filter(|n| !n.is_empty()) {
        return name;
    }
    match nix::unistd::gethostname() {
        Ok(name) => name.to_string_lossy().split('.').next().unwrap_or("").to_string(),
        Err(_) => "unknown".into(),
    }
}
