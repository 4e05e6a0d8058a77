//! The job as slurmctld keeps it: read its state, keep its record in the AdminComment, act on it.
//!
//! The watchdog decides through the [`Controller`] trait (tests drive it with a fake); the plugin
//! writes a batch step's final record through the same code ([`record_entry`] over
//! gmq-node's `SlurmController`), so that both write the record one way. [`ControlError`] says what a failure
//! means for the caller: the job is gone (stop), slurmctld gave no usable answer (try again later),
//! or slurmctld refused (log it).

use std::fmt;

use crate::config::Action;
use crate::record;
use crate::slurm_text;
use crate::slurm_text::{CtlError, Refusal};

/// The watchdog's only way to Slurm: read its job, write its record, act on it.
pub trait Controller {
    fn job(&mut self) -> Result<SlurmJob, ControlError>;
    /// Err: slurmctld could not be asked (try again later).
    fn admin_comment(&mut self) -> Result<AdminComment, ControlError>;
    fn set_admin_comment(&mut self, text: &str) -> Result<(), ControlError>;
    fn perform(&mut self, action: Action) -> Result<(), ControlError>;
    /// The job's state and how it ended (slurmctld's JSON record); `Ok(None)`: no state printed.
    fn ending(&mut self) -> Result<Option<slurm_text::JobEnd>, ControlError>;
    /// Requeues the job after it ended (self-healing: `watchdog::heal`).
    fn requeue_ended(&mut self) -> Result<(), ControlError>;
}

/// Why slurmctld did not do what was asked, sorted by what the caller should do next. Each carries
/// the failure's description as logged (its `Display` is that text, unchanged).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ControlError {
    /// The job is gone: slurmctld no longer knows it, or it is completing or has completed.
    /// Nothing is left to watch or act on.
    JobGone(String),
    /// No usable answer: slurmctld down, unreachable or too slow, or its command could not run or
    /// printed something unusable. The same request may work later.
    Unavailable(String),
    /// slurmctld answered no (access denied, not requeueable, a batch-only operation, ...):
    /// retrying at once would get the same answer.
    Refused(String),
}

impl ControlError {
    /// Whether the job is gone from slurmctld (see [`ControlError::JobGone`]).
    pub fn job_gone(&self) -> bool {
        matches!(self, ControlError::JobGone(_))
    }

    /// The same failure, with `note` appended to its description.
    pub fn noting(self, note: &str) -> ControlError {
        match self {
            ControlError::JobGone(m) => ControlError::JobGone(m + note),
            ControlError::Unavailable(m) => ControlError::Unavailable(m + note),
            ControlError::Refused(m) => ControlError::Refused(m + note),
        }
    }
}

impl fmt::Display for ControlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ControlError::JobGone(m) | ControlError::Unavailable(m) | ControlError::Refused(m) => {
                f.write_str(m)
            }
        }
    }
}

impl std::error::Error for ControlError {}

impl From<CtlError> for ControlError {
    fn from(e: CtlError) -> ControlError {
        let message = e.to_string();
        match e {
            CtlError::Refused {
                refusal: Refusal::InvalidJobId | Refusal::AlreadyDone,
                ..
            } => ControlError::JobGone(message),
            CtlError::Refused { .. } => ControlError::Refused(message),
            CtlError::NotFound { .. }
            | CtlError::Timeout { .. }
            | CtlError::Transient { .. }
            | CtlError::Garbage { .. }
            | CtlError::InvalidArgument(_) => ControlError::Unavailable(message),
        }
    }
}

/// The job as slurmctld knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlurmJob {
    pub state: slurm_text::JobState,
    pub restarts: u32,
    pub requeueable: bool,
    pub qos: String,
    pub partition: String,
    pub account: String,
    pub priority: u32,
    /// Nodes the job runs on: more than one, and this node's entry is recorded while it runs.
    pub node_count: u32,
}

impl SlurmJob {
    /// The state part of the job's record. A record without a state (slurmctld printed none) is
    /// no answer.
    pub fn of_record(record: &slurm_text::JobRecord) -> Result<SlurmJob, ControlError> {
        let end = record.end.as_ref().ok_or_else(|| {
            ControlError::from(slurm_text::CtlError::Garbage {
                command: "squeue".to_string(),
                message: format!("job {}: no state in its record", record.job_id),
            })
        })?;
        Ok(SlurmJob {
            state: end.state.clone(),
            restarts: end.restarts,
            // A heterogeneous job's later component: slurmctld requeues only through the leader
            // (`_job_requeue`: ESLURM_NOT_HET_JOB_LEADER), so it is not requeueable by itself, and
            // a requeue is never recorded for it (G5, G12).
            requeueable: end.requeue && end.batch && record.het_leader.is_none(),
            qos: record.qos.clone(),
            partition: record.partition.clone(),
            account: record.account.clone(),
            priority: record.priority,
            node_count: end.node_count,
        })
    }

    /// Whether the job is still running (suspended and configuring count: it will go on).
    pub(crate) fn is_running(&self) -> bool {
        matches!(
            self.state,
            slurm_text::JobState::Running
                | slurm_text::JobState::Suspended
                | slurm_text::JobState::Configuring
        )
    }
}

/// The job's AdminComment, where its record lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AdminComment {
    /// Verbatim; empty when the job has none.
    Read(String),
    /// The job's record could not be read (slurmctld's answer did not parse), or its text could
    /// not be written back whole: the job's history is unknown. It is never written over (an admin's text and the job's history would go with
    /// it), and never a reason not to enforce.
    Unreadable(String),
}

impl AdminComment {
    /// The text, when it could be read.
    pub fn readable(&self) -> Option<&str> {
        match self {
            AdminComment::Read(text) => Some(text),
            AdminComment::Unreadable(_) => None,
        }
    }

    /// The job's record in it, if one can be read.
    pub fn record(&self) -> Option<record::Record> {
        record::parse(self.readable()?).ok().flatten()
    }
}

/// Writes after which a record that keeps losing to other writers is given up for now.
pub const RECORD_ATTEMPTS: u32 = 3;

/// Merges `entry` into the job's AdminComment (`existing`, as read). For a job on more than one
/// node (`shared`), whose other nodes write the same text, reads it back and writes again when
/// another node's write, based on an older read, replaced ours (see docs/ACCOUNTING.md, "Who
/// writes, and when"); a single-node job has no other writer while it runs, and its actions do not
/// wait for the read. `Ok(false)`: still not there after [`RECORD_ATTEMPTS`]. Text that cannot be
/// read back (a job name imitating an AdminComment: it was written afresh over it) counts as
/// written.
pub fn record_entry(
    control: &mut dyn Controller,
    existing: &str,
    entry: &record::Entry,
    shared: bool,
) -> Result<bool, ControlError> {
    let mut existing = existing.to_string();
    for _ in 0..RECORD_ATTEMPTS {
        if !record::is_recorded(&existing, entry) {
            control.set_admin_comment(&record::merge(&existing, entry).admin_comment)?;
        }
        if !shared {
            return Ok(true);
        }
        match control.admin_comment()? {
            AdminComment::Read(text) if record::is_recorded(&text, entry) => return Ok(true),
            AdminComment::Read(text) => existing = text,
            AdminComment::Unreadable(_) => return Ok(true),
        }
    }
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_failure_says_what_to_do_next() {
        let refused = |refusal| CtlError::Refused {
            command: "scontrol requeue 7".into(),
            refusal,
            message: "no".into(),
        };
        assert!(ControlError::from(refused(Refusal::InvalidJobId)).job_gone());
        assert!(ControlError::from(refused(Refusal::AlreadyDone)).job_gone());
        for refusal in [
            Refusal::NotRequeueable,
            Refusal::BatchOnly,
            Refusal::AccessDenied,
            Refusal::JobPending,
            Refusal::Other,
        ] {
            assert!(matches!(
                ControlError::from(refused(refusal)),
                ControlError::Refused(_)
            ));
        }
        let down = CtlError::Transient {
            command: "squeue".into(),
            attempts: 4,
            message: "Unable to contact slurm controller".into(),
        };
        let text = down.to_string();
        assert_eq!(ControlError::from(down), ControlError::Unavailable(text.clone()));
        assert_eq!(ControlError::Unavailable(text.clone()).to_string(), text);
        let slow = CtlError::Timeout {
            command: "squeue".into(),
            after: Duration::from_secs(2),
        };
        assert!(matches!(ControlError::from(slow), ControlError::Unavailable(_)));
    }
}
