//! A fake slurmctld and a reporter that keeps its lines, for driving a `Watchdog` without Slurm:
//! shared by watchdog_tick and watchdog_heal here, by gmq-node's watchdog_attribution, by
//! gpu-mem-quota's real_gpu and its watchdog_sample bench.
#![allow(dead_code)] // each user takes what it needs

use gmq_core::config::Action;
use gmq_core::controller::{AdminComment, ControlError, Controller, SlurmJob};
use gmq_core::slurm_text as slurmctl;
use gmq_core::watchdog::status::Status;
use gmq_core::watchdog::Reporter;

/// A slurmctld with one running job; every write and action is listed in `calls`.
#[derive(Default)]
pub(crate) struct FakeSlurm {
    pub admin_comment: String,
    /// Why the AdminComment cannot be read (an imitation in the job's text), if it cannot.
    pub unreadable_comment: Option<String>,
    pub restarts: u32,
    pub node_count: u32,
    pub requeueable: bool,
    pub fail_job_reads: u32,
    /// slurmctld no longer knows the job (every read of it says so).
    pub job_gone: bool,
    /// The job's state in slurmctld's record; `None`: running.
    pub state: Option<slurmctl::JobState>,
    pub fail_comment_writes: u32,
    /// Writes that another node's write replaces right after (a lost read-merge-write race).
    pub lost_comment_writes: u32,
    /// Another node's write from an older read, landing after ours was read back: at this read of
    /// the AdminComment (1 = the first), the text has become this.
    pub stale_write_at_read: Option<(u32, String)>,
    /// What `ending` answers, one per call (the last one stays); empty: no state printed.
    pub endings: Vec<slurmctl::JobEnd>,
    pub calls: Vec<String>,
    /// How many times the AdminComment was read.
    pub comment_reads: u32,
    /// What slurmctld answers every requeue (`requeue`, `requeue-hold`) with, if it refuses them.
    pub refuse_requeues: Option<String>,
    /// Actions that fail as a slurmctld that does not answer makes them fail, before any works.
    pub fail_actions: u32,
}

impl Controller for FakeSlurm {
    fn job(&mut self) -> Result<SlurmJob, ControlError> {
        if self.job_gone {
            return Err(ControlError::JobGone(
                "`squeue --jobs=7` refused: Invalid job id specified".into(),
            ));
        }
        if self.fail_job_reads > 0 {
            self.fail_job_reads -= 1;
            return Err(ControlError::Unavailable(
                "Unable to contact slurm controller".into(),
            ));
        }
        Ok(SlurmJob {
            state: self.state.clone().unwrap_or(slurmctl::JobState::Running),
            restarts: self.restarts,
            requeueable: self.requeueable,
            qos: "normal".into(),
            partition: "gpu".into(),
            account: "physics".into(),
            priority: 1,
            node_count: self.node_count.max(1),
        })
    }

    fn admin_comment(&mut self) -> Result<AdminComment, ControlError> {
        self.comment_reads += 1;
        if let Some((at, text)) = &self.stale_write_at_read {
            if *at == self.comment_reads {
                self.admin_comment = text.clone();
            }
        }
        Ok(match &self.unreadable_comment {
            Some(why) => AdminComment::Unreadable(why.clone()),
            None => AdminComment::Read(self.admin_comment.clone()),
        })
    }

    fn set_admin_comment(&mut self, text: &str) -> Result<(), ControlError> {
        if self.job_gone {
            return Err(ControlError::JobGone(
                "refused: Job has already finished for job 7".into(),
            ));
        }
        if self.fail_comment_writes > 0 {
            self.fail_comment_writes -= 1;
            return Err(ControlError::Unavailable("Socket timed out".into()));
        }
        self.calls.push("comment".into());
        if self.lost_comment_writes > 0 {
            self.lost_comment_writes -= 1;
            return Ok(());
        }
        self.admin_comment = text.to_string();
        Ok(())
    }

    fn perform(&mut self, action: Action) -> Result<(), ControlError> {
        self.calls.push(action.name().to_string());
        if self.fail_actions > 0 {
            self.fail_actions -= 1;
            return Err(ControlError::Unavailable("Socket timed out".into()));
        }
        match &self.refuse_requeues {
            Some(why) if matches!(action, Action::Requeue | Action::RequeueHold) => {
                Err(ControlError::Refused(why.clone()))
            }
            _ => Ok(()),
        }
    }

    fn ending(&mut self) -> Result<Option<slurmctl::JobEnd>, ControlError> {
        if self.endings.len() > 1 {
            return Ok(Some(self.endings.remove(0)));
        }
        Ok(self.endings.first().cloned())
    }

    fn requeue_ended(&mut self) -> Result<(), ControlError> {
        self.calls.push("requeue-ended".into());
        if self.fail_actions > 0 {
            self.fail_actions -= 1;
            return Err(ControlError::Refused("Job is pending execution".into()));
        }
        Ok(())
    }
}

#[derive(Default)]
pub(crate) struct Lines {
    pub lines: Vec<String>,
    pub status: Option<Status>,
}

impl Reporter for Lines {
    fn info(&mut self, m: &str) {
        self.lines.push(format!("info: {m}"));
    }
    fn warning(&mut self, m: &str) {
        self.lines.push(format!("warning: {m}"));
    }
    fn error(&mut self, m: &str) {
        self.lines.push(format!("error: {m}"));
    }
    fn status(&mut self, s: &Status) {
        self.status = Some(s.clone());
    }
}
