//! What `squeue` says about a job, read from fields chosen to hold no user-written text. Pure.
//!
//! `scontrol show job` prints a job's fields as unquoted `Key=value` text, mixed with text users
//! write (job name, comment, command, paths), which can imitate fields: a record that cannot be read
//! unambiguously would let a job escape its watchdog. So the fields the watchdog decides with are
//! asked of `squeue --Format`, one `|`-terminated value each ([`SQUEUE_FORMAT`]). None of them is
//! written by the user: names of users, accounts, QOS, partitions and nodes are the admin's, the rest
//! are numbers, states and times. A `|` inside a value would change the count and is refused; the
//! one exception is the AdminComment, written by root alone and asked for last
//! ([`parse_squeue_record`]).

use std::fmt;

use super::hostlist;
use super::job_json::{JobEnd, JobRecord};

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
    let line = job_line(output, job_id)?;
    let values: Vec<&str> = line.split('|').collect();
    let Some((fields, [rest])) = values.split_first_chunk::<SQUEUE_FIELDS>() else {
        return Err(format!(
            "job {job_id}: {} value(s) where {SQUEUE_FIELDS} were asked for: `{line}`",
            values.len().saturating_sub(1)
        ));
    };
    if !rest.trim().is_empty() {
        return Err(format!("job {job_id}: `{rest}` after the last field"));
    }
    info_of(job_id, fields)
}

/// squeue's `--Format` for [`parse_squeue_record`]: [`SQUEUE_FORMAT`]'s fields, then how the job
/// ended, the GRES it asked per node, its heterogeneous-job leader, and its AdminComment last.
/// The AdminComment is the only field that may hold a `|` (only root, SlurmUser and operators write
/// it): everything after the fixed fields, less the final `|`, is it.
pub const RECORD_FORMAT: &str = "JobID:|,UserName:|,UserID:|,PriorityLong:|,Account:|,QOS:|,State:|,\
Requeue:|,RestartCnt:|,BatchFlag:|,StartTime:|,Partition:|,NodeList:|,NumNodes:|,\
exit_code:|,BatchHost:|,tres-per-node:|,tres-alloc:|,HetJobId:|,admin_comment:|";

/// How many values [`RECORD_FORMAT`] asks for before the AdminComment.
const RECORD_FIELDS: usize = SQUEUE_FIELDS + 5;

/// What squeue 22.05 prints for a string field the job does not have (`printf("%s", NULL)`).
const NULL_FIELD: &str = "(null)";

/// Job `job_id`'s whole record (identity, how it ended, shards per node, AdminComment) from
/// `squeue --noheader --Format=RECORD_FORMAT` output: one job alone, asked of slurmctld by id (a
/// single-job request; squeue 22.05 loads one job when `--jobs` names one), every value in its own
/// `|`-terminated column. No field holds text the user wrote. The GPUs per node are not among
/// them: the node has those from the job credential (`SLURM_JOB_GPUS`).
pub fn parse_squeue_record(output: &str, job_id: u32) -> Result<JobRecord, String> {
    let line = job_line(output, job_id)?;
    let values: Vec<&str> = line.splitn(RECORD_FIELDS + 1, '|').collect();
    let Some((fields, [admin_comment])) = values.split_first_chunk::<RECORD_FIELDS>() else {
        return Err(format!(
            "job {job_id}: {} value(s) where {} were asked for: `{line}`",
            values.len(),
            RECORD_FIELDS + 1
        ));
    };
    let Some(admin_comment) = admin_comment.strip_suffix('|') else {
        return Err(format!(
            "job {job_id}: the AdminComment column is not closed: `{line}`"
        ));
    };
    let (info, [exit_code, batch_host, tres_per_node, tres_alloc, het_job_id]) =
        fields.split_at(SQUEUE_FIELDS)
    else {
        unreachable!("RECORD_FIELDS is SQUEUE_FIELDS + 5")
    };
    let info = info_of(job_id, info.try_into().expect("SQUEUE_FIELDS values"))?;
    let nodes = match info.node_list.as_str() {
        "" | "(null)" => Vec::new(),
        list => hostlist::expand(list).map_err(|e| format!("job {job_id}: NodeList: {e}"))?,
    };
    let shards =
        shards_per_node(tres_per_node, tres_alloc, nodes.len()).map_err(|e| format!("job {job_id}: {e}"))?;
    let status: u32 = number(job_id, "ExitCode", exit_code)?;
    let end = JobEnd {
        state: info.job_state.clone(),
        exit_code: Some((status >> 8) & 0xff),
        signal: status & 0x7f,
        batch_host: known(batch_host),
        batch: info.batch_flag > 0,
        requeue: info.requeue,
        restarts: info.restarts,
        node_count: info.node_count,
    };
    let het_leader = match het_job_id.trim() {
        "N/A" | "" | "0" => None,
        id => Some(number::<u32>(job_id, "HetJobId", id)?).filter(|&leader| leader != job_id),
    };
    Ok(JobRecord {
        job_id,
        admin_comment: match admin_comment {
            NULL_FIELD => String::new(),
            text => text.to_string(),
        },
        account: info.account,
        partition: info.partition,
        qos: info.qos,
        user_id: info.user_id,
        priority: info.priority,
        shards_by_node: vec![shards; nodes.len()],
        given_gpus: allocates_gpus(tres_alloc),
        nodes,
        end: Some(end),
        het_leader,
    })
}

/// A string column, empty for squeue's `(null)` and `N/A`.
fn known(value: &str) -> String {
    match value.trim() {
        NULL_FIELD | "N/A" => String::new(),
        text => text.to_string(),
    }
}

/// Whether `tres-alloc` (`cpu=1,node=1,billing=81,gres/gpu=1,gres/gpu:fake=1`) gives the job a GPU
/// or shards of one: a `gres/gpu` or `gres/shard` item, typed or not, whose count is not 0 (one
/// without a readable count counts).
fn allocates_gpus(tres_alloc: &str) -> bool {
    tres_alloc.split(',').any(|item| {
        let Some((name, count)) = item.trim().split_once('=') else {
            return false;
        };
        let gres = name.split(':').next().unwrap_or("");
        matches!(gres, "gres/gpu" | "gres/shard") && super::gres_count(count) != Some(0)
    })
}

/// The `gres/shard` count on each of the job's nodes. What it asked per node (`tres-per-node`,
/// `gres:shard:40` in 22.05, `gres/shard:40` in 24.11; what job_submit.lua writes) is what each
/// node holds. Without a per-node request, shards allocated otherwise (`tres-alloc`) are known per
/// node only on one node; on more the count is the least any node can hold, one shard, so that a
/// step is never told more than its node may justify.
fn shards_per_node(tres_per_node: &str, tres_alloc: &str, nodes: usize) -> Result<u64, String> {
    let asked = tres_per_node
        .split(',')
        .filter_map(|item| item.strip_prefix("gres:").or_else(|| item.strip_prefix("gres/")))
        .filter(|gres| gres.split(':').next() == Some("shard"))
        .map(|gres| {
            let count = gres.rsplit(':').next().unwrap_or("");
            super::gres_count(count)
                .ok_or_else(|| format!("tres-per-node `{tres_per_node}` has no shard count"))
        })
        .next();
    if let Some(count) = asked {
        return count;
    }
    let allocated = tres_alloc
        .split(',')
        .find_map(|item| item.strip_prefix("gres/shard="))
        .map(|count| {
            super::gres_count(count).ok_or_else(|| format!("tres-alloc `{tres_alloc}` has no shard count"))
        })
        .transpose()?
        .unwrap_or(0);
    Ok(match nodes {
        _ if allocated == 0 => 0,
        0 | 1 => allocated,
        _ => 1,
    })
}

/// The one line of job `job_id` in squeue's `|`-separated output, picked by its exact job id.
fn job_line(output: &str, job_id: u32) -> Result<&str, String> {
    let wanted = job_id.to_string();
    let lines: Vec<&str> = output.lines().filter(|l| !l.trim().is_empty()).collect();
    let mut ours = lines
        .iter()
        .filter(|line| line.split('|').next() == Some(wanted.as_str()));
    match (ours.next(), ours.next()) {
        (Some(line), None) => Ok(line),
        (None, _) => Err(format!("no line for job {job_id} among {} line(s)", lines.len())),
        (Some(_), Some(_)) => Err(format!("more than one line for job {job_id}")),
    }
}

/// [`SQUEUE_FORMAT`]'s values, in its order.
fn info_of(job_id: u32, values: &[&str; SQUEUE_FIELDS]) -> Result<JobInfo, String> {
    let [_id, user_name, user_id, priority, account, qos, state, requeue, restarts, batch_flag, start_time, partition, node_list, node_count] =
        values;
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The shape of 22.05.8's `squeue --noheader --states=all --jobs=N --Format=RECORD_FORMAT`, as
    /// the dev cluster prints it: a running shard job without AdminComment.
    const RUNNING_SHARDS: &str = "7|gmq-user|2001|4294901753|physics|normal|RUNNING|1|0|1|\
2026-12-01T21:50:02|gpu|vm|1|0|vm|gres:shard:8|cpu=1,node=1,billing=9,gres/shard=8|N/A|(null)|\n";

    #[test]
    fn a_record_from_columns() {
        let record = parse_squeue_record(RUNNING_SHARDS, 7).unwrap();
        assert_eq!(record.admin_comment, "");
        assert_eq!(
            (record.account.as_str(), record.qos.as_str()),
            ("physics", "normal")
        );
        assert_eq!(record.shards_on("vm"), Some(8));
        assert_eq!(record.het_leader, None);
        let end = record.end.unwrap();
        assert_eq!(
            (end.state, end.batch, end.requeue),
            (JobState::Running, true, true)
        );
        assert_eq!(end.batch_host, "vm");
    }

    #[test]
    fn the_admin_comment_is_everything_after_the_fixed_columns() {
        for comment in ["a b|c", "gpu-mem-quota:v1{vm/0:q=8G}", "x|", "|"] {
            let line = RUNNING_SHARDS.replace("|(null)|", &format!("|{comment}|"));
            assert_eq!(parse_squeue_record(&line, 7).unwrap().admin_comment, comment);
        }
        let open = RUNNING_SHARDS.replace("|(null)|\n", "|text\n");
        assert!(parse_squeue_record(&open, 7).unwrap_err().contains("not closed"));
        let short = "7|gmq-user|2001|\n";
        assert!(parse_squeue_record(short, 7).unwrap_err().contains("value(s)"));
    }

    #[test]
    fn how_a_job_ended_from_its_wait_status() {
        let failed = RUNNING_SHARDS
            .replace("|RUNNING|", "|FAILED|")
            .replace("|1|0|vm|", "|1|768|vm|");
        let end = parse_squeue_record(&failed, 7).unwrap().end.unwrap();
        assert_eq!(
            (end.state, end.exit_code, end.signal),
            (JobState::Failed, Some(3), 0)
        );
        let killed = RUNNING_SHARDS.replace("|1|0|vm|", "|1|9|vm|");
        let end = parse_squeue_record(&killed, 7).unwrap().end.unwrap();
        assert_eq!((end.exit_code, end.signal), (Some(0), 9));
    }

    #[test]
    fn shards_per_node() {
        // (tres-per-node, tres-alloc, nodes) -> shards on each node
        let table = [
            ("gres:shard:8", "gres/shard=8", 1, 8),
            ("gres/shard:40", "gres/shard=80", 2, 40),
            ("gres:gpu:1,gres:shard:3", "gres/gpu=1,gres/shard=3", 1, 3),
            ("N/A", "cpu=1,node=1", 1, 0),
            // Shards not asked per node: known on one node, the least on more.
            ("N/A", "cpu=2,gres/shard=12", 1, 12),
            ("N/A", "cpu=2,gres/shard=12", 3, 1),
            // 26.05's `-` for no shards (sinfo's GresUsed): read as none, never as unreadable.
            ("gres/gpu:1,gres/shard:-", "gres/gpu=1", 1, 0),
            ("N/A", "cpu=1,gres/shard=-", 1, 0),
        ];
        for (per_node, alloc, nodes, want) in table {
            assert_eq!(
                super::shards_per_node(per_node, alloc, nodes),
                Ok(want),
                "{per_node} {alloc}"
            );
        }
        assert!(super::shards_per_node("gres:shard:x", "", 1).is_err());
    }

    /// G9: whether Slurm gave the job a GPU or shards of one, from `tres-alloc`.
    #[test]
    fn a_job_given_gpus_or_shards_is_told_from_one_given_none() {
        assert!(parse_squeue_record(RUNNING_SHARDS, 7).unwrap().given_gpus);
        let cpu_only = RUNNING_SHARDS.replace("|gres:shard:8|", "|N/A|").replace(
            "cpu=1,node=1,billing=9,gres/shard=8",
            "cpu=1,mem=100M,node=1,billing=1",
        );
        assert!(!parse_squeue_record(&cpu_only, 7).unwrap().given_gpus);
        for (alloc, given) in [
            ("cpu=1,node=1,billing=81,gres/gpu=1,gres/gpu:fake=1", true),
            ("cpu=1,gres/gpu:fake=2", true),
            ("cpu=1,gres/shard=3", true),
            ("cpu=1,gres/gpu=0", false),
            ("cpu=1,gres/shard=-", false),
            ("cpu=1,gres/gpu=1,gres/shard=-", true),
            ("cpu=1,node=1", false),
            ("", false),
        ] {
            assert_eq!(allocates_gpus(alloc), given, "{alloc}");
        }
    }

    #[test]
    fn a_heterogeneous_component_names_its_leader() {
        let component = RUNNING_SHARDS.replace("|N/A|(null)|", "|5|(null)|");
        assert_eq!(parse_squeue_record(&component, 7).unwrap().het_leader, Some(5));
        let leader = RUNNING_SHARDS.replace("|N/A|(null)|", "|7|(null)|");
        assert_eq!(parse_squeue_record(&leader, 7).unwrap().het_leader, None);
    }
}
