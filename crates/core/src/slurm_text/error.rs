//! Why a Slurm command did not do what was asked.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

/// A refusal Slurm states in words; each is a fixed `slurm_strerror` text of Slurm 22.05
/// (src/common/slurm_errno.c), matched in the command's stderr by [`super::classify()`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// "Invalid job id specified": no such job, or it has left slurmctld's memory (MinJobAge).
    InvalidJobId,
    /// "Job/step already completing or completed", or "Job has already finished".
    AlreadyDone,
    /// "Requested operation is presently disabled": a requeue of a job submitted with
    /// `--no-requeue` (or whose partition is gone).
    NotRequeueable,
    /// "Only batch jobs are accepted or processed": a requeue of an `srun`/`salloc` job.
    BatchOnly,
    /// "Access/permission denied": e.g. AdminComment written by someone who is not SlurmUser/root.
    AccessDenied,
    /// "Job is pending execution": a requeue of a job that is already pending.
    JobPending,
    /// Any other failure that is not a known sign of an unreachable controller.
    Other,
}

/// What went wrong running `scontrol` or `scancel`. `command` is the command line as logged
/// (program and arguments joined by spaces, long arguments shortened): for people, not for a shell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CtlError {
    /// The program could not be started: absent, not executable, or not a program.
    NotFound { program: PathBuf, error: String },
    /// The command ran past the time limit; it and its process group were killed.
    Timeout { command: String, after: Duration },
    /// The controller stayed unreachable (or busy) through every attempt.
    Transient {
        command: String,
        attempts: u32,
        message: String,
    },
    /// Slurm answered no; retrying would not change the answer.
    Refused {
        command: String,
        refusal: Refusal,
        message: String,
    },
    /// The command succeeded but its output is not what Slurm prints, or is ambiguous.
    Garbage { command: String, message: String },
    /// The request itself is unusable (a relative program path, text that cannot be one argument).
    InvalidArgument(String),
}

impl fmt::Display for CtlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CtlError::NotFound { program, error } => {
                write!(f, "cannot run {}: {error}", program.display())
            }
            CtlError::Timeout { command, after } => {
                write!(
                    f,
                    "`{command}` did not finish within {} ms and was killed",
                    after.as_millis()
                )
            }
            CtlError::Transient {
                command,
                attempts,
                message,
            } => write!(
                f,
                "`{command}` failed {attempts} time(s), the controller looks unreachable: {message}"
            ),
            CtlError::Refused { command, message, .. } => write!(f, "`{command}` refused: {message}"),
            CtlError::Garbage { command, message } => {
                write!(f, "`{command}` printed something unusable: {message}")
            }
            CtlError::InvalidArgument(why) => f.write_str(why),
        }
    }
}

impl std::error::Error for CtlError {}
