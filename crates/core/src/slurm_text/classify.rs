//! Reading a failed command's words: is the controller unreachable for now (retry), or did it
//! answer no (do not)? Pure: text in, verdict out.
//!
//! The texts are Slurm 22.05's `slurm_strerror` strings (src/common/slurm_errno.c). The commands
//! print them as `slurm_load_jobs error: TEXT` (show job), `TEXT for job N` (update, requeue,
//! requeuehold) and `scancel: error: Kill job error on job id N: TEXT` (scancel). With the
//! controller down, `requeue` and `update` print "Unexpected message received for job N" and
//! `show job` prints "Unable to contact slurm controller (connect failure)", both after the
//! client's own retries (about 9 s and 18 s on the dev cluster).

use super::error::Refusal;

/// A failure's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The controller could not be reached or asked us to come back: worth another attempt.
    Transient,
    /// The controller answered; the same request would get the same answer.
    Refused(Refusal),
}

/// slurmctld's answer to an update of a job that has ended (`ESLURM_JOB_FINISHED`): a cancelled
/// job is past updates before its batch script's end.
const JOB_FINISHED: &str = "Job has already finished";

/// Answers from the controller. Checked first: when one is present the controller was reached,
/// whatever else the output says.
const REFUSALS: &[(&str, Refusal)] = &[
    ("Invalid job id specified", Refusal::InvalidJobId),
    ("Job/step already completing or completed", Refusal::AlreadyDone),
    (JOB_FINISHED, Refusal::AlreadyDone),
    (
        "Requested operation is presently disabled",
        Refusal::NotRequeueable,
    ),
    ("Only batch jobs are accepted or processed", Refusal::BatchOnly),
    ("Access/permission denied", Refusal::AccessDenied),
    ("Job is pending execution", Refusal::JobPending),
];

/// Signs of a controller that is down, restarting, failing over or busy.
const TRANSIENT: &[&str] = &[
    "Unable to contact slurm controller",
    "Socket timed out on send/recv operation",
    "Connection refused",
    "Communication connection failure",
    "Message send failure",
    "Message receive failure",
    "Communication shutdown failure",
    "Zero Bytes were transmitted or received",
    "Unexpected message received",
    "Job can not be altered now, try again later",
    "Slurm backup controller in standby mode",
    "Controller is in standby mode",
    "the DB index is being set, try again",
    "Resource temporarily unavailable",
];

/// The verdict on a command that exited non-zero with `text` (its stderr, then its stdout).
/// Unknown text is a refusal: retrying what we do not understand only delays the caller.
pub fn classify(text: &str) -> Verdict {
    if let Some((_, refusal)) = REFUSALS.iter().find(|(words, _)| text.contains(words)) {
        return Verdict::Refused(*refusal);
    }
    if TRANSIENT.iter().any(|words| text.contains(words)) {
        return Verdict::Transient;
    }
    Verdict::Refused(Refusal::Other)
}
