//! What a job leaves in its cgroups after its end on a node, and stopping it (review G7).
//!
//! On cgroup v1 the job's step directories belong to its user, who may move a process into a
//! sub-cgroup of their own. proctrack/cgroup signals only the step's own `cgroup.procs`, so that
//! process outlives the job, keeps its GPU memory, and Slurm hands the GPU's shards out again. By
//! the job epilog every step has ended: whatever is still below the job's directories is left over.

use std::path::Path;

use super::identity::{identify, signal};
use super::job_cgroup::{leftover_processes, JobOnNode};
use super::procfs::read_real_uid;

/// What was found and done about one leftover process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leftover {
    pub pid: u32,
    pub outcome: LeftoverOutcome,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeftoverOutcome {
    Killed,
    /// `kill = false`: left running, only reported.
    Reported,
    /// Not the job's user's (root's, say, or a pid reused since it was listed): left alone.
    NotTheUsers(Option<u32>),
    /// Gone before it could be signalled.
    Gone,
    /// The kill failed.
    Failed(String),
}

/// Finds the processes still in the job's cgroups (`job_<id>` or, on 26.05's cgroup/v2, its
/// SLUID) and, with `kill`, SIGKILLs those of the job's user, each through a pidfd of the very
/// process checked.
pub fn sweep_leftovers(proc_root: &Path, cgroup_root: &Path, job: &JobOnNode, kill: bool) -> Vec<Leftover> {
    let uid = job.uid;
    leftover_processes(cgroup_root, job)
        .into_iter()
        .map(|pid| {
            let outcome = match (identify(proc_root, pid), read_real_uid(proc_root, pid)) {
                (None, _) => LeftoverOutcome::Gone,
                (Some(_), owner) if owner != Some(uid) => LeftoverOutcome::NotTheUsers(owner),
                (Some(_), _) if !kill => LeftoverOutcome::Reported,
                (Some(process), _) => match signal(proc_root, &process, libc::SIGKILL) {
                    Ok(()) => LeftoverOutcome::Killed,
                    Err(e) if e.raw_os_error() == Some(libc::ESRCH) => LeftoverOutcome::Gone,
                    Err(e) => LeftoverOutcome::Failed(e.to_string()),
                },
            };
            Leftover { pid, outcome }
        })
        .collect()
}
