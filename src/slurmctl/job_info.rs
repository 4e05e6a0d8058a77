//! What `scontrol --oneliner show job N` says about a job, read from its text. Pure.
//!
//! Slurm 22.05 prints a record as `Key=value` pairs separated by single spaces, in a fixed order
//! (src/api/job_info.c, `slurm_sprint_job_info`): `JobId` first, then `JobName`, `UserId`,
//! `Priority`, `Account`, `QOS`, `JobState`, `Requeue`, `Restarts`, `BatchFlag`, `StartTime`,
//! `Partition`, `NodeList`, ... `Command`, `WorkDir`, then `AdminComment`, `SystemComment` and
//! `Comment` when set, each followed by two spaces, then the rest. One line per job; a job array's
//! meta job prints one line per task, so the record is picked by its exact `JobId`.
//!
//! Values are not quoted. The fields read here are Slurm-formatted and hold no spaces, except
//! AdminComment, which ends where Slurm's two spaces meet the next `Key=`. But users write free text
//! that lands in the same line (JobName before these fields; Command, WorkDir, Comment, output paths
//! after), and that text may imitate fields, including with newlines. So every field read here must
//! appear exactly once, in Slurm's order, and exactly one record must carry the job id; anything
//! else is refused as ambiguous rather than guessed. A side effect: a job whose name or comment
//! contains, say, ` JobState=` cannot be read (the caller is told why). One imitation cannot be told
//! apart: when a job has no AdminComment, text ending WorkDir, Comment or a path such as
//! ` AdminComment=x  Key=` reads as one.

use std::fmt;

/// The fields the watchdog needs from one job's record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobInfo {
    pub job_id: u32,
    pub job_state: JobState,
    /// `Restarts=`: how many times the job was requeued (also `SLURM_RESTART_COUNT` in its next run).
    pub restarts: u32,
    /// `Requeue=1`: the job may be requeued (not submitted with `--no-requeue`).
    pub requeue: bool,
    /// `BatchFlag=`: 0 for `srun`/`salloc` jobs, 1 for `sbatch` jobs, more after a batch launch
    /// was retried. Only batch jobs can be requeued.
    pub batch_flag: u16,
    /// The numeric uid of `UserId=name(uid)`.
    pub user_id: u32,
    /// The name of `UserId=name(uid)`, as slurmctld's host resolves it.
    pub user_name: String,
    pub account: String,
    pub partition: String,
    pub qos: String,
    pub priority: u32,
    /// As Slurm prints it: `2026-11-30T05:48:02`, or `Unknown`/`None` before the job has one.
    pub start_time: String,
    /// A hostlist expression (`gpu[01-04]`); empty while the job is pending.
    pub node_list: String,
    /// Verbatim; empty when the job has none (Slurm then prints no `AdminComment=`).
    pub admin_comment: String,
}

impl JobInfo {
    /// Whether `scontrol requeue` can work at all: a batch job that allows requeue.
    pub fn is_requeueable(&self) -> bool {
        self.requeue && self.batch_flag > 0
    }
}

/// `JobState=` as `job_state_string` prints it: a flag state (COMPLETING, CONFIGURING, ...) when
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

/// The keys read here, in the order Slurm prints them.
const FIELDS_IN_ORDER: [&str; 13] = [
    "JobId",
    "UserId",
    "Priority",
    "Account",
    "QOS",
    "JobState",
    "Requeue",
    "Restarts",
    "BatchFlag",
    "StartTime",
    "Partition",
    "NodeList",
    "AdminComment",
];

/// Reads job `job_id`'s record from `scontrol --oneliner show job` output. The error names the
/// field or line at fault.
pub fn parse_show_job(output: &str, job_id: u32) -> Result<JobInfo, String> {
    let wanted = format!("JobId={job_id}");
    let records = split_records(output);
    let mut ours = records
        .iter()
        .filter(|r| r.split(' ').next() == Some(wanted.as_str()));
    let record = match (ours.next(), ours.next()) {
        (Some(record), None) => record,
        (None, _) => {
            return Err(format!(
                "no record for job {job_id} among {} record(s)",
                records.len()
            ))
        }
        (Some(_), Some(_)) => return Err(format!("ambiguous: more than one record starts with `{wanted}`")),
    };
    let fields = Fields::locate(record)?;
    let (user_name, user_id) = parse_user(fields.word("UserId"))?;
    Ok(JobInfo {
        job_id,
        job_state: match fields.word("JobState") {
            "" => return Err("empty `JobState=`".to_string()),
            name => JobState::from_slurm(name),
        },
        restarts: parse_number(&fields, "Restarts")?,
        requeue: parse_flag(&fields, "Requeue")?,
        batch_flag: parse_number(&fields, "BatchFlag")?,
        user_id,
        user_name: user_name.to_string(),
        account: fields.word("Account").to_string(),
        partition: fields.word("Partition").to_string(),
        qos: fields.word("QOS").to_string(),
        priority: parse_number(&fields, "Priority")?,
        start_time: fields.word("StartTime").to_string(),
        node_list: fields.word("NodeList").to_string(),
        admin_comment: fields.admin_comment().to_string(),
    })
}

/// One string per record: a line starting `JobId=` begins one, other lines continue the previous
/// (free text with newlines in it). Lines before the first record are dropped.
fn split_records(output: &str) -> Vec<String> {
    let mut records: Vec<String> = Vec::new();
    for line in output.lines() {
        if line.starts_with("JobId=") {
            records.push(line.to_string());
        } else if let Some(last) = records.last_mut() {
            last.push('\n');
            last.push_str(line);
        }
    }
    records
}

/// Where each of [`FIELDS_IN_ORDER`]'s values starts in one record.
struct Fields<'a> {
    record: &'a str,
    /// Byte offset of each value, same order as [`FIELDS_IN_ORDER`]; `None` only for AdminComment.
    starts: [Option<usize>; FIELDS_IN_ORDER.len()],
}

impl<'a> Fields<'a> {
    fn locate(record: &'a str) -> Result<Self, String> {
        let mut starts = [None; FIELDS_IN_ORDER.len()];
        for (slot, key) in starts.iter_mut().zip(FIELDS_IN_ORDER) {
            let found = key_positions(record, key);
            match found.as_slice() {
                [] if key == "AdminComment" => {}
                [] => return Err(format!("no `{key}=` in the record")),
                [at] => *slot = Some(at + key.len() + 1),
                more => {
                    return Err(format!(
                        "ambiguous: `{key}=` appears {} times (a job name, comment or path \
                         imitating scontrol's fields?)",
                        more.len()
                    ))
                }
            }
        }
        let present: Vec<(usize, &str)> = starts
            .iter()
            .zip(FIELDS_IN_ORDER)
            .filter_map(|(s, k)| s.map(|s| (s, k)))
            .collect();
        if let Some(pair) = present.windows(2).find(|pair| pair[0].0 > pair[1].0) {
            return Err(format!(
                "ambiguous: `{}=` comes after `{}=`",
                pair[0].1, pair[1].1
            ));
        }
        Ok(Fields { record, starts })
    }

    fn start(&self, key: &str) -> Option<usize> {
        FIELDS_IN_ORDER
            .iter()
            .position(|k| *k == key)
            .and_then(|i| self.starts[i])
    }

    /// A space-free value: up to the next space or the end of the line.
    fn word(&self, key: &str) -> &'a str {
        let Some(start) = self.start(key) else { return "" };
        let rest = &self.record[start..];
        &rest[..rest.find([' ', '\n']).unwrap_or(rest.len())]
    }

    /// AdminComment, verbatim (see [`admin_comment_end`]).
    fn admin_comment(&self) -> &'a str {
        let Some(start) = self.start("AdminComment") else {
            return "";
        };
        let rest = &self.record[start..];
        &rest[..admin_comment_end(rest)]
    }
}

/// The length of the AdminComment text at the start of `rest` (what follows `AdminComment=`).
/// Slurm prints `AdminComment=TEXT`, a space, then the field separator (another space), so the text
/// ends at the first two spaces followed by `Key=`; at the end of the record when none follow (the
/// two spaces then trail).
pub(super) fn admin_comment_end(rest: &str) -> usize {
    let mut from = 0;
    while let Some(at) = rest[from..].find("  ").map(|i| from + i) {
        if starts_with_key(&rest[at + 2..]) {
            return at;
        }
        from = at + 1;
    }
    rest.strip_suffix("  ").unwrap_or(rest).len()
}

/// Byte offsets where `key=` begins a field: at the start of the record or after a space.
fn key_positions(record: &str, key: &str) -> Vec<usize> {
    let pattern = format!("{key}=");
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(at) = record[from..].find(&pattern).map(|i| from + i) {
        if at == 0 || record.as_bytes()[at - 1] == b' ' {
            found.push(at);
        }
        from = at + 1;
    }
    found
}

/// Does `text` start with `Key=`, Key being an identifier as Slurm writes its keys
/// (`StdErr`, `CPUs/Task`, `AllocNode:Sid`, `MCS_label`)?
fn starts_with_key(text: &str) -> bool {
    let key_len = text
        .bytes()
        .take_while(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'/' | b':'))
        .count();
    key_len > 0 && text.as_bytes()[0].is_ascii_alphabetic() && text[key_len..].starts_with('=')
}

/// `name(uid)` → (name, uid).
fn parse_user(value: &str) -> Result<(&str, u32), String> {
    let parsed = value
        .strip_suffix(')')
        .and_then(|v| v.rsplit_once('('))
        .and_then(|(name, uid)| uid.parse().ok().map(|uid| (name, uid)));
    parsed.ok_or_else(|| format!("`UserId={value}` is not name(uid)"))
}

fn parse_number<T: std::str::FromStr>(fields: &Fields, key: &str) -> Result<T, String> {
    let value = fields.word(key);
    value
        .parse()
        .map_err(|_| format!("`{key}={value}` is not a number"))
}

fn parse_flag(fields: &Fields, key: &str) -> Result<bool, String> {
    match fields.word(key) {
        "0" => Ok(false),
        "1" => Ok(true),
        other => Err(format!("`{key}={other}` is neither 0 nor 1")),
    }
}
