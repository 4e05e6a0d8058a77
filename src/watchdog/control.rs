//! The real edges of the watchdog: Slurm through `slurmctl`, process ownership through `attribute`.

use std::collections::HashMap;
use std::path::PathBuf;

use super::{Attributor, Controller, JobState};
use crate::attribute::{self, Owner};
use crate::config::Action;
use crate::slurmctl::SlurmTools;

/// The job's record and actions through scontrol/scancel (absolute paths, argv, timeouts, retries).
pub struct SlurmController {
    pub job_id: u32,
    pub tools: SlurmTools,
}

impl Controller for SlurmController {
    fn job(&mut self) -> Result<JobState, String> {
        let info = self.tools.show_job(self.job_id).map_err(|e| e.to_string())?;
        Ok(JobState {
            state: info.job_state.as_str().to_string(),
            restarts: info.restarts,
            requeueable: info.is_requeueable(),
            admin_comment: info.admin_comment,
        })
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

/// Which NVML pids are the job's, by cgroup (or slurmstepd ancestry), remembered per process
/// (pid and start time, so a reused pid is looked at afresh).
pub struct ProcAttributor {
    pub job_id: u32,
    pub proc_root: PathBuf,
    seen: HashMap<u32, (u64, bool)>,
}

impl ProcAttributor {
    pub fn new(job_id: u32, proc_root: PathBuf) -> ProcAttributor {
        ProcAttributor {
            job_id,
            proc_root,
            seen: HashMap::new(),
        }
    }
}

impl Attributor for ProcAttributor {
    fn is_ours(&mut self, pid: u32) -> Option<bool> {
        let start_time = attribute::identify(&self.proc_root, pid)?.start_time;
        if let Some(&(known_start, ours)) = self.seen.get(&pid) {
            if known_start == start_time {
                return Some(ours);
            }
        }
        let ours = match attribute::owner_of(&self.proc_root, pid) {
            Owner::Job { job_id, .. } => job_id == self.job_id,
            Owner::NotAJob => false,
            Owner::Gone => return None,
        };
        if self.seen.len() > 4096 {
            self.seen.clear();
        }
        self.seen.insert(pid, (start_time, ours));
        Some(ours)
    }
}
