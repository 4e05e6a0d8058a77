//! The watchdog's `Attributor` on a node: the rule of this module's docs over `/proc` and the
//! cgroup mount (its edge to Slurm is `crate::slurm_controller::SlurmController`).

use std::collections::HashMap;
use std::path::PathBuf;

use crate::attribute::{self, Owner};
use gmq_core::watchdog::Attributor;

/// Which NVML pids count against the job: [`attribute::counts_for_job`] over the facts
/// [`attribute::owner_of`] found (the rule is in `attribute`'s module docs):
/// - a process some cgroup of the job claims counts, even when cgroups of other jobs claim it too
///   (a user who moves a process between their jobs makes it count for each, not for none);
/// - a process no Slurm-made level claims for another job (in no job, e.g. daemonized out of its
///   step under linuxproc, or only in cgroups a user made below another job's step on v1) counts
///   when its real uid is the job's `uid` and it is listed on one of the job's GPUs;
/// - a process a Slurm-made level claims only for other jobs, or a slurmstepd, does not.
///
/// Cost matters (every sample, every process of every GPU): a pid is looked at once per sample
/// however many GPUs list it (the GPU only changes the decision, not the facts). Each sample
/// re-reads the start time of every listed pid (one `/proc/PID/stat` read): the same start time
/// means the same process, whose facts were established before; another start time means the pid
/// was reused by a new process, attributed afresh (cgroups or ancestry, uid). A strict sample,
/// taken before acting, re-reads everything.
pub struct ProcAttributor {
    pub job_id: u32,
    /// The job's user: the owner a process in no job must have to count.
    pub uid: u32,
    pub proc_root: PathBuf,
    /// Where cgroups are mounted (`/sys/fs/cgroup`), for the v1 ownership check.
    pub cgroup_root: PathBuf,
    known: HashMap<u32, Known>,
    sample: u64,
    strict: bool,
}

/// What was established for a pid, and when.
struct Known {
    /// Never `Owner::Gone`: it carries the process (pid, start time) it is about.
    owner: Owner,
    /// The last sample that listed the pid and found the same process.
    seen: u64,
}

impl ProcAttributor {
    pub fn new(job_id: u32, uid: u32, proc_root: PathBuf, cgroup_root: PathBuf) -> ProcAttributor {
        ProcAttributor {
            job_id,
            uid,
            proc_root,
            cgroup_root,
            known: HashMap::new(),
            sample: 0,
            strict: true,
        }
    }

    /// The facts about the process that has `pid` now: from this sample, from an earlier one when
    /// its start time did not change, or read afresh. `None`: gone.
    fn owner(&mut self, pid: u32) -> Option<&Owner> {
        let sample = self.sample;
        let reuse = match self.known.get(&pid) {
            Some(known) if known.seen == sample => true,
            Some(known) if !self.strict => {
                let then = known.owner.process().map(|p| p.start_time);
                match attribute::identify(&self.proc_root, pid) {
                    None => {
                        self.known.remove(&pid);
                        return None;
                    }
                    Some(now) => Some(now.start_time) == then,
                }
            }
            _ => false,
        };
        if !reuse {
            let owner = attribute::owner_of(&self.proc_root, &self.cgroup_root, pid);
            if owner == Owner::Gone {
                self.known.remove(&pid);
                return None;
            }
            self.known.insert(pid, Known { owner, seen: sample });
        }
        let known = self.known.get_mut(&pid)?;
        known.seen = sample;
        Some(&known.owner)
    }
}

impl Attributor for ProcAttributor {
    fn new_sample(&mut self, strict: bool) {
        self.sample += 1;
        self.strict = strict;
        // Forget processes not listed for a while, so the map stays the size of the GPU's process list.
        let sample = self.sample;
        self.known.retain(|_, known| sample - known.seen <= 2);
    }

    fn is_ours(&mut self, pid: u32, on_job_gpu: bool) -> Option<bool> {
        let (job_id, uid) = (self.job_id, self.uid);
        let owner = self.owner(pid)?;
        Some(attribute::counts_for_job(owner, job_id, uid, on_job_gpu))
    }
}
