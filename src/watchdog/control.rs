//! The real edges of the watchdog: Slurm through `slurmctl`, process ownership through `attribute`.

use std::collections::HashMap;
use std::path::PathBuf;

use super::{AdminComment, Attributor, Controller, JobState};
use crate::attribute::{self, Owner};
use crate::config::Action;
use crate::slurmctl::{CtlError, SlurmTools};

/// The job's record and actions through scontrol/scancel (absolute paths, argv, timeouts, retries).
pub struct SlurmController {
    pub job_id: u32,
    pub tools: SlurmTools,
}

impl Controller for SlurmController {
    fn job(&mut self) -> Result<JobState, String> {
        let info = self.tools.job(self.job_id).map_err(|e| e.to_string())?;
        Ok(JobState {
            state: info.job_state.as_str().to_string(),
            restarts: info.restarts,
            requeueable: info.is_requeueable(),
            qos: info.qos,
            partition: info.partition,
            account: info.account,
            priority: info.priority,
            node_count: info.node_count,
        })
    }

    fn admin_comment(&mut self) -> Result<AdminComment, String> {
        match self.tools.admin_comment(self.job_id) {
            Ok(text) => Ok(AdminComment::Read(text)),
            Err(CtlError::Garbage { message, .. }) => Ok(AdminComment::Unreadable(message)),
            Err(e) => Err(e.to_string()),
        }
    }

    fn set_admin_comment(&mut self, text: &str) -> Result<(), String> {
        self.tools
            .set_admin_comment(self.job_id, text)
            .map_err(|e| e.to_string())
    }

    fn perform(&mut self, action: Action) -> Result<(), String> {
        let done = match action {
            Action::Requeue => self.tools.requeue(self.job_id),
            Action::RequeueHold => self.tools.requeue_hold(self.job_id),
            Action::Cancel => self.tools.cancel(self.job_id),
            Action::WarnOnly => return Ok(()),
        };
        done.map_err(|e| e.to_string())
    }
}

/// Which NVML pids are the job's, by cgroup (or slurmstepd ancestry).
///
/// Cost matters (every sample, every process of every GPU): a pid is looked at once per sample
/// however many GPUs list it; a pid the previous sample established is trusted without a /proc read
/// (NVML lists live processes, and a pid reused between two samples would have to be reused by a
/// process that also holds GPU memory); a pid seen for the first time is identified fully (cgroup or
/// ancestry, with its start time). Before acting, a strict sample re-reads every start time.
pub struct ProcAttributor {
    pub job_id: u32,
    pub proc_root: PathBuf,
    /// pid -> (start time, ours, the sample it was last listed in)
    known: HashMap<u32, (u64, bool, u64)>,
    sample: u64,
    strict: bool,
}

impl ProcAttributor {
    pub fn new(job_id: u32, proc_root: PathBuf) -> ProcAttributor {
        ProcAttributor {
            job_id,
            proc_root,
            known: HashMap::new(),
            sample: 0,
            strict: true,
        }
    }
}

impl Attributor for ProcAttributor {
    fn new_sample(&mut self, strict: bool) {
        self.sample += 1;
        self.strict = strict;
        // Forget processes not listed for a while, so the map stays the size of the GPU's process list.
        let sample = self.sample;
        self.known.retain(|_, &mut (_, _, seen)| sample - seen <= 2);
    }

    fn is_ours(&mut self, pid: u32) -> Option<bool> {
        if let Some(&(start_time, ours, seen)) = self.known.get(&pid) {
            if seen == self.sample {
                return Some(ours); // already looked at in this sample (listed by another GPU)
            }
            if !self.strict && seen + 1 == self.sample {
                self.known.insert(pid, (start_time, ours, self.sample));
                return Some(ours);
            }
            match attribute::identify(&self.proc_root, pid) {
                Some(now) if now.start_time == start_time => {
                    self.known.insert(pid, (start_time, ours, self.sample));
                    return Some(ours);
                }
                None => return None,
                Some(_) => {} // a reused pid: a new process, looked at afresh below
            }
        }
        let (start_time, ours) = match attribute::owner_of(&self.proc_root, pid) {
            Owner::Job { job_id, process, .. } => (process.start_time, job_id == self.job_id),
            Owner::NotAJob => (attribute::identify(&self.proc_root, pid)?.start_time, false),
            Owner::Gone => return None,
        };
        self.known.insert(pid, (start_time, ours, self.sample));
        Some(ours)
    }
}
