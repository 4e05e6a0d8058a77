//! What `squeue` says about a job, read from fields chosen to hold no user-written text. Pure.
//!
//! `scontrol show job` prints a job's fields as unquoted `Key=value` text, mixed with text users
//! write (job name, comment, command, paths), which can imitate fields: a record that cannot be read
//! unambiguously would let a job escape its watchdog. So the fields the watchdog decides with are
//! asked of `squeue --Format`, one `|`-terminated value each ([`SQUEUE_FORMAT`]). None of them is
//! written by the user: names of users, accounts, QOS, partitions and nodes are the admin's, the rest
//! are numbers, states and times. A `|` inside a value would change the count and is refused.
//! (squeue 22.05 cannot print AdminComment; that one is read from scontrol, see
//! [`super::admin_comment`].)

use std::fmt;

/// The fields the watchdog needs from one job's record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobInfo {
    pub job_id: u32,
    pub job_state: JobState,
    /// How many times the job was requeued (also `SLURM_RESTART_COUNT` in its next run).
    pub restarts: u32,
    /// The job may be requeued (not submitted with `--no-requeue`).
    pub requeue: bool,
    /// 0 for `srun`/`salloc` jobs, 1 for `sbatch` jobs, more after a batch launch
    /// was retried. Only batch jobs can be requeued.
    pub batch_flag: u16,
    pub user_id: u32,
    /// The uid's name, as the host running squeue resolves it.
    pub user_name: String,
    pub account: String,
    pub partition: String,
    pub qos: String,
    pub priority: u32,
    /// As squeue prints it: `2026-11-30T05:48:02`, or `N/A` while the job has none.
    pub start_time: String,
    /// A hostlist expression (`gpu[01-04]`); empty while the job is pending.
    pub node_list: String,
    /// Nodes allocated (the minimum asked for, while pending).
    pub node_count: u32,
}

impl JobInfo {
    /// Whether `scontrol requeue` can work at all: a batch job that allows requeue.
    pub fn is_requeueable(&self) -> bool {
        self.requeue && self.batch_flag > 0
    }
}

/// The state as `job_state_string` prints it: a flag state (COMPLETING, CONFIGURING, ...) when
/// one is set, else the base state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobState {
    Pending,
    Running,
    Suspended,
    Completed,
    Cancelled,
    Failed,
    Timeout,
    NodeFail,
    Preempted,
    BootFail,
    Deadline,
    OutOfMemory,
    Completing,
    StageOut,
    Configuring,
    Resizing,
    Requeued,
    RequeueFed,
    RequeueHold,
    SpecialExit,
    Stopped,
    Revoked,
    ResvDelHold,
    Signaling,
    /// A state this code does not know (a newer Slurm), verbatim.
    Other(String),
}

/// Each known state and its spelling in Slurm's output.
const STATE_NAMES: &[(JobState, &str)] = &[
    (JobState::Pending, "PENDING"),
    (JobState::Running, "RUNNING"),
    (JobState::Suspended, "SUSPENDED"),
    (JobState::Completed, "COMPLETED"),
    (JobState::Cancelled, "CANCELLED"),
    (JobState::Failed, "FAILED"),
    (JobState::Timeout, "TIMEOUT"),
    (JobState::NodeFail, "NODE_FAIL"),
    (JobState::Preempted, "PREEMPTED"),
    (JobState::BootFail, "BOOT_FAIL"),
    (JobState::Deadline, "DEADLINE"),
    (JobState::OutOfMemory, "OUT_OF_MEMORY"),
    (JobState::Completing, "COMPLETING"),
    (JobState::StageOut, "STAGE_OUT"),
    (JobState::Configuring, "CONFIGURING"),
    (JobState::Resizing, "RESIZING"),
    (JobState::Requeued, "REQUEUED"),
    (JobState::RequeueFed, "REQUEUE_FED"),
    (JobState::RequeueHold, "REQUEUE_HOLD"),
    (JobState::SpecialExit, "SPECIAL_EXIT"),
    (JobState::Stopped, "STOPPED"),
    (JobState::Revoked, "REVOKED"),
    (JobState::ResvDelHold, "RESV_DEL_HOLD"),
    (JobState::Signaling, "SIGNALING"),
];

impl JobState {
    /// The state Slurm spells `name`; unknown names are kept as [`JobState::Other`].
    pub fn from_slurm(name: &str) -> JobState {
        STATE_NAMES
            .iter()
            .find(|(_, spelling)| *spelling == name)
            .map(|(state, _)| state.clone())
            .unwrap_or_else(|| JobState::Other(name.to_string()))
    }

    /// The spelling in Slurm's output.
    pub fn as_str(&self) -> &str {
        match self {
            JobState::Other(name) => name,
            known => STATE_NAMES
                .iter()
                .find(|(s, _)| s == known)
                .map_or("", |(_, spelling)| spelling),
        }
    }

    /// The job's processes have ended or are ending on its nodes: a final state, or COMPLETING /
    /// STAGE_OUT, which Slurm shows only after the job's end. Nothing left to watch.
    pub fn has_ended(&self) -> bool {
        matches!(
            self,
            JobState::Completed
                | JobState::Cancelled
                | JobState::Failed
                | JobState::Timeout
                | JobState::NodeFail
                | JobState::Preempted
                | JobState::BootFail
                | JobState::Deadline
                | JobState::OutOfMemory
                | JobState::Completing
                | JobState::StageOut
                | JobState::Revoked
        )
    }
}

impl fmt::Display for JobState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// squeue's `--Format` for [`parse_squeue`]: each field followed by `|`, without padding or
/// truncation (no width given). `PriorityLong` is the integer priority (`Priority` is normalised).
pub const SQUEUE_FORMAT: &str = "JobID:|,UserName:|,UserID:|,PriorityLong:|,Account:|,QOS:|,State:|,\
Requeue:|,RestartCnt:|,BatchFlag:|,StartTime:|,Partition:|,NodeList:|,NumNodes:|";

/// How many values [`SQUEUE_FORMAT`] asks for.
const SQUEUE_FIELDS: usize = 14;

/// Reads job `job_id`'s line from `squeue --noheader --Format=SQUEUE_FORMAT` output. squeue lists
/// every task of an array when asked for the array's id, so the line is picked by its exact job id.
/// The error names the field or line at fault.
pub fn parse_squeue(output: &str, job_id: u32) -> Result<JobInfo, String> {
    let wanted = job_id.to_string();
    let lines: Vec<&str> = output.lines().filter(|l| !l.trim().is_empty()).collect();
    let mut ours = lines
        .iter()
        .filter(|line| line.split('|').next() == Some(wanted.as_str()));
    let line = match (ours.next(), ours.next()) {
        (Some(line), None) => line,
        (None, _) => return Err(format!("no line for job {job_id} among {} line(s)", lines.len())),
        (Some(_), Some(_)) => return Err(format!("more than one line for job {job_id}")),
    };
    let values: Vec<&str> = line.split('|').collect();
    let [_id, user_name, user_id, priority, account, qos, state, requeue, restarts, batch_flag, start_time, partition, node_list, node_count, rest] =
        values.as_slice()
    else {
        return Err(format!(
            "job {job_id}: {} value(s) where {SQUEUE_FIELDS} were asked for: `{line}`",
            values.len().saturating_sub(1)
        ));
    };
    if !rest.trim().is_empty() {
        return Err(format!("job {job_id}: `{rest}` after the last field"));
    }
    Ok(JobInfo {
        job_id,
        job_state: match state.trim() {
            "" => return Err(format!("job {job_id}: empty State")),
            name => JobState::from_slurm(name),
        },
        restarts: number(job_id, "RestartCnt", restarts)?,
        requeue: match requeue.trim() {
            "0" => false,
            "1" => true,
            other => return Err(format!("job {job_id}: Requeue `{other}` is neither 0 nor 1")),
        },
        batch_flag: number(job_id, "BatchFlag", batch_flag)?,
        user_id: number(job_id, "UserID", user_id)?,
        user_name: user_name.trim().to_string(),
        account: account.trim().to_string(),
        partition: partition.trim().to_string(),
        qos: qos.trim().to_string(),
        priority: number(job_id, "PriorityLong", priority)?,
        start_time: start_time.trim().to_string(),
        node_list: node_list.trim().to_string(),
        node_count: number(job_id, "NumNodes", node_count)?,
    })
}

fn number<T: std::str::FromStr>(job_id: u32, name: &str, value: &str) -> Result<T, String> {
    value
        .trim()
        .parse()
        .map_err(|_| format!("job {job_id}: {name} `{value}` is not a number (or out of range)"))
}
