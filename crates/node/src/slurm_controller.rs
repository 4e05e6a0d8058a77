//! [`Controller`] through Slurm's own commands (`slurmctl`: absolute paths, argv, timeouts, retries).

use crate::slurmctl::SlurmTools;
use gmq_core::config::Action;
use gmq_core::controller::{AdminComment, ControlError, Controller, SlurmJob};
use gmq_core::slurm_text::CtlError;

/// The job's record and actions through squeue/scontrol/scancel.
pub struct SlurmController {
    pub job_id: u32,
    pub tools: SlurmTools,
}

impl SlurmController {
    /// For `job_id`, with the commands found where Slurm installs them and `SLURM_CONF` from this
    /// process's environment (the watchdog's: the plugin's clean one, never the job's).
    pub fn from_env(job_id: u32) -> SlurmController {
        SlurmController {
            job_id,
            tools: SlurmTools::find_configured().with_json_job_reads_detected(),
        }
    }
}

impl Controller for SlurmController {
    fn job(&mut self) -> Result<SlurmJob, ControlError> {
        let record = self.tools.job_record(self.job_id)?;
        SlurmJob::of_record(&record)
    }

    fn admin_comment(&mut self) -> Result<AdminComment, ControlError> {
        match self.tools.admin_comment(self.job_id) {
            Ok(text) => Ok(AdminComment::Read(text)),
            Err(CtlError::Garbage { message, .. }) => Ok(AdminComment::Unreadable(message)),
            Err(e) => Err(e.into()),
        }
    }

    fn set_admin_comment(&mut self, text: &str) -> Result<(), ControlError> {
        Ok(self.tools.set_admin_comment(self.job_id, text)?)
    }

    fn perform(&mut self, action: Action) -> Result<(), ControlError> {
        let done = match action {
            Action::Requeue => self.tools.requeue(self.job_id),
            Action::RequeueHold => self.tools.requeue_hold(self.job_id),
            Action::Cancel => self.tools.cancel(self.job_id),
            Action::WarnOnly => return Ok(()),
        };
        Ok(done?)
    }

    fn ending(&mut self) -> Result<Option<gmq_core::slurm_text::JobEnd>, ControlError> {
        Ok(self.tools.job_record(self.job_id)?.end)
    }

    fn requeue_ended(&mut self) -> Result<(), ControlError> {
        Ok(self.tools.requeue_ended(self.job_id)?)
    }
}
