//! A job's record from `squeue --json` (Slurm 24.11 on, where `--jobs=ID` loads that job alone),
//! where every field is its own JSON value: text a user wrote (job name, comment, paths) stays
//! inside its own string and cannot pose as the AdminComment, an account or a GPU list, as it can in
//! `scontrol show job`'s `Key=value` text. Pure.
//!
//! Slurm 22.05's `squeue --json` ignores its filters and prints every job slurmctld knows, which any
//! user can make too big to read (G1): there the same record comes from single-job squeue columns
//! (`super::job_info::parse_squeue_record`). The job is picked by its exact id all the same. Only
//! the fields read below are kept; everything else is skipped while parsing.

use serde::Deserialize;
use serde_json::Value;

use super::hostlist;
use super::{JobInfo, JobState};

/// What the watchdog and the plugin take from slurmctld's JSON record of one job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobRecord {
    pub job_id: u32,
    /// Verbatim; empty when the job has none. Only root, SlurmUser and admins can set it.
    pub admin_comment: String,
    pub account: String,
    pub partition: String,
    pub qos: String,
    pub user_id: u32,
    /// slurmctld's priority of the job (its rank for preemption).
    pub priority: u32,
    /// The job's nodes, expanded, in the order of [`JobRecord::shards_by_node`].
    pub nodes: Vec<String>,
    /// Per node, how many `gres/shard` the job holds there (0 where it holds none).
    pub shards_by_node: Vec<u64>,
    /// Whether Slurm gave the job a GPU (`gres/gpu`) or shards of one (`gres/shard`) on any of its
    /// nodes. A job given none that has memory on a GPU reaches it only because cgroup.conf does not
    /// constrain devices (review G9). Where the allocation cannot be read, true: such a job is
    /// never taken for one that was given none.
    pub given_gpus: bool,
    /// Its state and, once it ended, how; `None` where slurmctld printed no `job_state`.
    pub end: Option<JobEnd>,
    /// The leader of the heterogeneous job this is a later component of (`HetJobId`, when it is
    /// not this job's own id): slurmctld requeues a heterogeneous job only through its leader.
    pub het_leader: Option<u32>,
}

/// The job's state and how it ended, as slurmctld recorded it: all numbers, states and the admin's
/// node names, none of it written by the user. What self-healing (`watchdog::heal`) decides with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobEnd {
    pub state: JobState,
    /// The batch script's exit code (`ExitCode=3:0` → 3); `None` where slurmctld gave none.
    pub exit_code: Option<u32>,
    /// The signal that ended the batch script (`ExitCode=0:9` → 9); 0 for none.
    pub signal: u32,
    /// The node the batch script ran on (`batch_host`); empty for srun/salloc jobs.
    pub batch_host: String,
    /// An sbatch job (`batch_flag`): only these can be requeued.
    pub batch: bool,
    /// The job may be requeued (not `--no-requeue`).
    pub requeue: bool,
    /// How many times it was requeued (`restart_cnt`): which run ended.
    pub restarts: u32,
    /// How many nodes it ran on.
    pub node_count: u32,
}

impl JobRecord {
    /// The `gres/shard` count the job holds on `node`; `None` when slurmctld gave no per-node
    /// details. A node not among the job's (a name that is not its NodeName) gets the fewest any of
    /// its nodes holds: never more than the job may have here (G6).
    pub fn shards_on(&self, node: &str) -> Option<u64> {
        match self.nodes.iter().position(|n| n == node) {
            Some(at) => self.shards_by_node.get(at).copied(),
            None => self.shards_by_node.iter().copied().filter(|&n| n > 0).min(),
        }
    }
}

#[derive(Deserialize)]
struct Response {
    jobs: Vec<SqueueJob>,
}

/// One job of `squeue --json` (or `scontrol show job --json`): only the fields read here.
#[derive(Deserialize)]
struct SqueueJob {
    job_id: u32,
    #[serde(default)]
    admin_comment: Option<String>,
    #[serde(default)]
    account: Option<String>,
    #[serde(default)]
    partition: Option<String>,
    #[serde(default)]
    qos: Option<String>,
    user_id: u32,
    #[serde(default)]
    nodes: Option<String>,
    #[serde(default)]
    gres_detail: Vec<String>,
    #[serde(default)]
    job_state: Option<Value>,
    #[serde(default)]
    exit_code: Option<Value>,
    #[serde(default)]
    batch_host: Option<String>,
    #[serde(default)]
    batch_flag: Option<Value>,
    #[serde(default)]
    requeue: Option<Value>,
    #[serde(default)]
    restart_cnt: Option<Value>,
    #[serde(default)]
    user_name: Option<String>,
    #[serde(default)]
    priority: Option<Value>,
    #[serde(default)]
    node_count: Option<Value>,
    #[serde(default)]
    start_time: Option<Value>,
    #[serde(default)]
    het_job_id: Option<Value>,
}

/// Job `job_id`'s state, requeue facts and rank from `squeue --json` or `scontrol show job --json`
/// output (24.11 on: gmq-node's `SlurmTools::job`), the same [`JobInfo`] `squeue --Format` gives.
/// The error names what is missing.
pub fn parse_job_info_json(output: &str, job_id: u32) -> Result<JobInfo, String> {
    let job = the_job(output, job_id)?;
    let missing = |field: &str| format!("job {job_id}: no `{field}`");
    let state = job
        .job_state
        .as_ref()
        .and_then(state_of)
        .ok_or_else(|| missing("job_state"))?;
    let number_of = |value: &Option<Value>, field: &str| {
        value
            .as_ref()
            .and_then(whole_number)
            .ok_or_else(|| missing(field))
    };
    let start_time = match job.start_time.as_ref().and_then(whole_number) {
        None | Some(0) => "N/A".to_string(),
        // squeue's own column is local time; this is UTC, in the same shape.
        Some(unix) => time::OffsetDateTime::from_unix_timestamp(unix.into()).map_or_else(
            |_| "N/A".to_string(),
            |t| {
                format!(
                    "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}",
                    t.year(),
                    u8::from(t.month()),
                    t.day(),
                    t.hour(),
                    t.minute(),
                    t.second()
                )
            },
        ),
    };
    Ok(JobInfo {
        job_id,
        job_state: state,
        restarts: number_of(&job.restart_cnt, "restart_cnt")?,
        requeue: job
            .requeue
            .as_ref()
            .map(truthy)
            .ok_or_else(|| missing("requeue"))?,
        batch_flag: job
            .batch_flag
            .as_ref()
            .map(truthy)
            .ok_or_else(|| missing("batch_flag"))? as u16,
        user_id: job.user_id,
        user_name: job.user_name.ok_or_else(|| missing("user_name"))?,
        account: job.account.unwrap_or_default(),
        partition: job.partition.unwrap_or_default(),
        qos: job.qos.unwrap_or_default(),
        priority: number_of(&job.priority, "priority")?,
        start_time,
        node_list: job.nodes.unwrap_or_default(),
        node_count: number_of(&job.node_count, "node_count")?,
    })
}

/// The one record of job `job_id` in the output (22.05 lists every job whatever was asked).
fn the_job(output: &str, job_id: u32) -> Result<SqueueJob, String> {
    let response: Response =
        serde_json::from_str(output).map_err(|e| format!("not the JSON squeue --json prints: {e}"))?;
    let count = response.jobs.len();
    let mut ours = response.jobs.into_iter().filter(|j| j.job_id == job_id);
    match (ours.next(), ours.next()) {
        (Some(job), None) => Ok(job),
        (None, _) => Err(format!("no record for job {job_id} among {count} job(s)")),
        (Some(_), Some(_)) => Err(format!("more than one record for job {job_id}")),
    }
}

/// Job `job_id`'s record from `squeue --json` output. The error says what is missing or malformed.
pub fn parse_squeue_json(output: &str, job_id: u32) -> Result<JobRecord, String> {
    let job = the_job(output, job_id)?;
    let nodes = match job.nodes.as_deref().unwrap_or("") {
        "" => Vec::new(),
        list => hostlist::expand(list).map_err(|e| format!("job {job_id}: nodes: {e}"))?,
    };
    let shards_by_node = job
        .gres_detail
        .iter()
        .map(|detail| shard_count(detail).map_err(|e| format!("job {job_id}: gres_detail `{detail}`: {e}")))
        .collect::<Result<Vec<_>, _>>()?;
    let end = job.job_state.as_ref().and_then(state_of).map(|state| {
        let (exit_code, signal) = job.exit_code.as_ref().map_or((None, 0), exit_of);
        JobEnd {
            state,
            exit_code,
            signal,
            batch_host: job.batch_host.clone().unwrap_or_default(),
            batch: job.batch_flag.as_ref().is_some_and(truthy),
            requeue: job.requeue.as_ref().is_some_and(truthy),
            restarts: job.restart_cnt.as_ref().and_then(whole_number).unwrap_or(0),
            node_count: nodes.len() as u32,
        }
    });
    Ok(JobRecord {
        end,
        job_id,
        admin_comment: job.admin_comment.unwrap_or_default(),
        account: job.account.unwrap_or_default(),
        partition: job.partition.unwrap_or_default(),
        qos: job.qos.unwrap_or_default(),
        user_id: job.user_id,
        priority: job.priority.as_ref().and_then(whole_number).unwrap_or(0),
        nodes,
        shards_by_node,
        given_gpus: job.gres_detail.iter().any(|detail| names_gpus(detail)),
        het_leader: job
            .het_job_id
            .as_ref()
            .and_then(whole_number)
            .filter(|&leader| leader != 0 && leader != job_id),
    })
}

/// Whether one node's GRES detail (`gpu:fake:1(IDX:0)`, `shard:40(IDX:0)`) holds a GPU or shards
/// of one: a `gpu` or `shard` item whose count is not 0 (one without a readable count counts).
fn names_gpus(detail: &str) -> bool {
    split_items(detail).into_iter().any(|item| {
        let head = item.split('(').next().unwrap_or("");
        matches!(head.split(':').next(), Some("gpu" | "shard"))
            && head.rsplit(':').next().and_then(super::gres_count) != Some(0)
    })
}

/// The `gres/shard` count in one node's GRES detail: `shard:40(IDX:0)` (22.05; `NAME[:TYPE]:COUNT`
/// then the details in parentheses, as 24.11 writes it too). 0 when the job has no shards there.
fn shard_count(detail: &str) -> Result<u64, String> {
    let mut total = 0u64;
    for item in split_items(detail) {
        let head = item.split('(').next().unwrap_or("");
        if head.split(':').next() != Some("shard") {
            continue;
        }
        let count = head.rsplit(':').next().unwrap_or("");
        let count = super::gres_count(count).ok_or_else(|| format!("`{item}` has no shard count"))?;
        total = total.saturating_add(count);
    }
    Ok(total)
}

/// `job_state`: `"FAILED"` (22.05), or a list of the base state and its flags (`["FAILED",
/// "COMPLETING"]`, 23.11 on), where a flag state wins as in `job_state_string`.
fn state_of(value: &Value) -> Option<JobState> {
    match value {
        Value::String(name) => Some(JobState::from_slurm(name)),
        Value::Array(names) => {
            let names: Vec<&str> = names.iter().filter_map(Value::as_str).collect();
            let flag = [
                "COMPLETING",
                "CONFIGURING",
                "STAGE_OUT",
                "REQUEUED",
                "RESIZING",
                "SIGNALING",
            ]
            .into_iter()
            .find(|flag| names.contains(flag));
            flag.or(names.first().copied()).map(JobState::from_slurm)
        }
        _ => None,
    }
}

/// `exit_code`: the wait status as a number (22.05: 768 = exit 3, 9 = killed by signal 9), or an
/// object with `return_code` and `signal` (23.11 on). `(None, 0)` where it is neither.
fn exit_of(value: &Value) -> (Option<u32>, u32) {
    let number = |v: Option<&Value>| -> Option<u64> {
        let v = v?;
        v.as_u64().or_else(|| v.get("number").and_then(Value::as_u64))
    };
    if let Some(status) = value.as_u64() {
        let status = status as u32;
        return (Some((status >> 8) & 0xff), status & 0x7f);
    }
    let code = number(value.get("return_code")).map(|c| c as u32);
    let signal = number(value.get("signal").and_then(|s| s.get("id").or(Some(s)))).unwrap_or(0);
    (code, signal as u32)
}

/// A count printed as a number, or as `{"number": N}` (23.11 on).
fn whole_number(value: &Value) -> Option<u32> {
    let n = value
        .as_u64()
        .or_else(|| value.get("number").and_then(Value::as_u64))?;
    u32::try_from(n).ok()
}

/// A JSON boolean, or a number (non-zero is true), as `batch_flag` and `requeue` are printed.
fn truthy(value: &Value) -> bool {
    value
        .as_bool()
        .unwrap_or_else(|| value.as_u64().is_some_and(|n| n > 0))
}

/// Splits at commas outside parentheses.
fn split_items(detail: &str) -> Vec<&str> {
    let mut items = Vec::new();
    let (mut depth, mut start) = (0i32, 0usize);
    for (i, c) in detail.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&detail[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(&detail[start..]);
    items
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Trimmed from the dev cluster's `squeue --json` (Slurm 22.05.8): a user-written comment that
    /// imitates scontrol's text stays in its own field.
    const TWO_JOBS: &str = r#"{"meta":{"plugin":{"type":"openapi/v0.0.38"}},"errors":[],"jobs":[
      {"account":"physics","admin_comment":"","comment":"x AdminComment=forged","job_id":1,
       "gres_detail":[],"nodes":"","partition":"gpu","qos":"normal","user_id":2001,"name":"AdminComment=y"},
      {"account":"physics","admin_comment":"ticket=7 gpu-mem-quota:v1{vm/0:q=40G}","comment":"",
       "job_id":12,"gres_detail":["gpu:fake:1(IDX:0)","gpu:fake:2(IDX:1,3)"],"nodes":"vm,n[1]",
       "partition":"gpu","qos":"normal","user_id":2001,"job_state":"RUNNING"}]}"#;

    #[test]
    fn the_job_is_picked_by_id_and_user_text_stays_where_it_is() {
        let job = parse_squeue_json(TWO_JOBS, 1).unwrap();
        assert_eq!(job.admin_comment, "");
        assert!(job.shards_by_node.is_empty() && job.nodes.is_empty());
        assert!(!job.given_gpus);
        let job = parse_squeue_json(TWO_JOBS, 12).unwrap();
        assert!(job.given_gpus);
        assert_eq!(job.admin_comment, "ticket=7 gpu-mem-quota:v1{vm/0:q=40G}");
        assert_eq!(job.account, "physics");
        assert_eq!(job.nodes, ["vm", "n1"]);
        assert_eq!(job.shards_on("n1"), Some(0));
        assert!(parse_squeue_json(TWO_JOBS, 3)
            .unwrap_err()
            .contains("no record for job 3 among 2"));
        assert!(parse_squeue_json("{\"jobs\":[", 3).is_err());
    }

    /// The real output of Slurm 24.11.5 (data_parser v0.0.42: numbers as `{set, infinite, number}`,
    /// job_state a list) on the 24.11 dev cluster, for a running job whose name and comment imitate
    /// an AdminComment: `squeue --json --states=all --jobs=ID` and `scontrol show job --json ID`
    /// print the same record.
    #[test]
    fn slurm_24_11_records_read_the_same_through_squeue_and_scontrol() {
        for output in [
            include_str!("../../tests/fixtures/slurm-24.11/squeue-json-running.json"),
            include_str!("../../tests/fixtures/slurm-24.11/scontrol-show-job-json-running.json"),
        ] {
            let job = parse_squeue_json(output, 500001).unwrap();
            assert_eq!(job.admin_comment, "ticket=7");
            assert_eq!(
                (job.account.as_str(), job.partition.as_str(), job.qos.as_str()),
                ("physics", "gpu", "normal")
            );
            assert_eq!(job.user_id, 2001);
            assert_eq!(job.nodes, ["vm"]);
            assert!(parse_squeue_json(output, 500000)
                .unwrap_err()
                .contains("no record for job 500000 among 1"));
        }
    }

    /// G9: whether Slurm gave the job a GPU, from the real records of a GPU job and of shard jobs
    /// (24.11.5, 26.05); a CPU-only job's `gres_detail` is empty.
    #[test]
    fn a_job_given_gpus_or_shards_is_told_from_one_given_none() {
        for (output, job_id) in [
            (
                include_str!("../../tests/fixtures/slurm-24.11/squeue-json-running.json"),
                500001,
            ),
            (
                include_str!("../../tests/fixtures/slurm-24.11/squeue-json-shard.json"),
                0,
            ),
            (
                include_str!("../../tests/fixtures/slurm-26.05/squeue-json-shard.json"),
                0,
            ),
        ] {
            let job_id = if job_id == 0 { first_job_id(output) } else { job_id };
            assert!(
                parse_squeue_json(output, job_id).unwrap().given_gpus,
                "job {job_id}"
            );
        }
        for (detail, given) in [
            ("gpu:fake:1(IDX:0)", true),
            ("shard:40(IDX:0)", true),
            ("gpu(IDX:0)", true),
            ("gpu:fake:0(IDX:N/A)", false),
            ("shard:0(0/80)", false),
            ("", false),
        ] {
            assert_eq!(names_gpus(detail), given, "{detail}");
        }
    }

    fn first_job_id(output: &str) -> u32 {
        let doc: Value = serde_json::from_str(output).unwrap();
        whole_number(&doc["jobs"][0]["job_id"]).unwrap()
    }

    /// What `SlurmTools::job` reads on 24.11: the same facts `squeue --Format` gives, from the
    /// real 24.11.5 records of both commands.
    #[test]
    fn slurm_24_11_job_info_from_json() {
        for output in [
            include_str!("../../tests/fixtures/slurm-24.11/squeue-json-running.json"),
            include_str!("../../tests/fixtures/slurm-24.11/scontrol-show-job-json-running.json"),
        ] {
            let info = parse_job_info_json(output, 500001).unwrap();
            assert_eq!(info.job_state, JobState::Running);
            assert_eq!((info.restarts, info.requeue, info.batch_flag), (0, true, 1));
            assert!(info.is_requeueable());
            assert_eq!((info.user_id, info.user_name.as_str()), (2001, "gmq-user"));
            assert_eq!(
                (info.account.as_str(), info.partition.as_str(), info.qos.as_str()),
                ("physics", "gpu", "normal")
            );
            assert_eq!((info.priority, info.node_count), (1, 1));
            assert_eq!(info.node_list, "vm");
            assert_eq!(info.start_time.len(), "2026-11-30T05:48:02".len());
            assert!(parse_job_info_json(output, 500000).is_err());
        }
        // A record without the state (or the other facts) is refused, not defaulted.
        let bare = r#"{"jobs":[{"job_id":7,"user_id":2001}]}"#;
        assert!(parse_job_info_json(bare, 7).unwrap_err().contains("job_state"));
    }

    /// Real 24.11.5 output for a `--gres=shard:1` job that got a shard of GPU 1
    /// (`shard:1(0/2,1/2,...)`: per GPU of the node, shards held/total).
    #[test]
    fn slurm_24_11_shard_jobs_count_their_shards() {
        let output = include_str!("../../tests/fixtures/slurm-24.11/squeue-json-shard.json");
        let job = parse_squeue_json(output, 500026).unwrap();
        assert_eq!(job.shards_on("vm"), Some(1));
    }

    /// The real output of Slurm 26.05.5 (data_parser v0.0.45: the same shapes as v0.0.42, a
    /// `sluid` beside `job_id`, `/` written `\/` in every string) on the 26.05 dev cluster, for a
    /// running job on GPUs 0 and 1 whose name and comment imitate our record.
    #[test]
    fn slurm_26_05_records_read_the_same_through_squeue_and_scontrol() {
        for output in [
            include_str!("../../tests/fixtures/slurm-26.05/squeue-json-running.json"),
            include_str!("../../tests/fixtures/slurm-26.05/scontrol-show-job-json-running.json"),
        ] {
            assert!(output.contains(r#""data_parser": "data_parser\/v0.0.45""#));
            assert!(output.contains(r#""name": "gpu-mem-quota:v1{vm\/0:q=1G}""#));
            let job = parse_squeue_json(output, 900181).unwrap();
            assert_eq!(
                job.admin_comment, "ticket=7",
                "the job's name and comment are not it"
            );
            assert_eq!(
                (job.account.as_str(), job.partition.as_str(), job.qos.as_str()),
                ("physics", "gpu", "normal")
            );
            assert_eq!(job.user_id, 2001);
            assert_eq!(job.nodes, ["vm"]);
            let info = parse_job_info_json(output, 900181).unwrap();
            assert_eq!(info.job_state, JobState::Running);
            assert_eq!((info.restarts, info.requeue, info.batch_flag), (0, true, 1));
            assert_eq!((info.user_id, info.user_name.as_str()), (2001, "gmq-user"));
            assert_eq!((info.priority, info.node_count), (1, 1));
            assert_eq!(info.node_list, "vm");
            assert!(parse_squeue_json(output, 900180)
                .unwrap_err()
                .contains("no record for job 900180 among 1"));
        }
    }

    /// Real 26.05.5 output for a `--gres=shard:1` job that got a shard of GPU 2 (per GPU of the
    /// node, shards held/total, with 26.05's escaped slashes).
    #[test]
    fn slurm_26_05_shard_jobs_count_their_shards() {
        let output = include_str!("../../tests/fixtures/slurm-26.05/squeue-json-shard.json");
        assert!(output.contains(r"shard:1(0\/80,0\/80,1\/80,0\/80)"));
        let job = parse_squeue_json(output, 900182).unwrap();
        assert_eq!(job.shards_on("vm"), Some(1));
    }

    /// A batch job that ended `exit 3`, as the dev cluster's squeue --json (22.05.8) printed it
    /// within MinJobAge (trimmed); and the same in 23.11's shape.
    const FAILED_2205: &str = r#"{"jobs":[{"job_id":1,"user_id":2001,"job_state":"FAILED","nodes":"vm",
      "exit_code":768,"batch_host":"vm","batch_flag":true,"requeue":true,"restart_cnt":0,
      "derived_exit_code":0,"state_reason":"NonZeroExitCode","comment":"exit_code 0"}]}"#;
    const FAILED_2311: &str = r#"{"jobs":[{"job_id":1,"user_id":2001,"job_state":["FAILED"],
      "exit_code":{"status":["EXITED"],"return_code":{"set":true,"infinite":false,"number":3},
      "signal":{"id":{"set":false,"infinite":false,"number":0},"name":""}},
      "batch_host":"vm","batch_flag":true,"requeue":true,"nodes":"vm",
      "restart_cnt":0}]}"#;

    #[test]
    fn how_a_job_ended() {
        let want = JobEnd {
            state: JobState::Failed,
            exit_code: Some(3),
            signal: 0,
            batch_host: "vm".into(),
            batch: true,
            requeue: true,
            restarts: 0,
            node_count: 1,
        };
        assert_eq!(parse_squeue_json(FAILED_2205, 1).unwrap().end, Some(want.clone()));
        assert_eq!(parse_squeue_json(FAILED_2311, 1).unwrap().end, Some(want));
        // Killed by a signal: the low bits of the wait status.
        let killed = FAILED_2205.replace("768", "9");
        let end = parse_squeue_json(&killed, 1).unwrap().end.unwrap();
        assert_eq!((end.exit_code, end.signal), (Some(0), 9));
        let completing = FAILED_2311.replace(r#"["FAILED"]"#, r#"["FAILED","COMPLETING"]"#);
        let end = parse_squeue_json(&completing, 1).unwrap().end.unwrap();
        assert_eq!(end.state, JobState::Completing);
        // No state printed: nothing to tell; the running job of TWO_JOBS has no exit code yet.
        assert_eq!(parse_squeue_json(TWO_JOBS, 1).unwrap().end, None);
        let running = parse_squeue_json(TWO_JOBS, 12).unwrap().end.unwrap();
        assert_eq!(
            (running.state, running.exit_code, running.batch),
            (JobState::Running, None, false)
        );
    }

    #[test]
    fn shard_counts() {
        assert_eq!(shard_count("shard:40(IDX:0)").unwrap(), 40);
        assert_eq!(shard_count("gpu:fake:1(IDX:0)").unwrap(), 0);
        assert_eq!(shard_count("nic:1,shard:20(IDX:1)").unwrap(), 20);
        // 24.11's shared-GRES details, after the count.
        assert_eq!(shard_count("shard:20(20/80:1)").unwrap(), 20);
        assert_eq!(shard_count("").unwrap(), 0);
        assert!(shard_count("shard:x(IDX:0)").is_err());
        // 26.05 writes `-` for the shards of a GPU taken whole (GresUsed): none.
        assert_eq!(shard_count("gpu:fake:1(IDX:0),shard:-(IDX:0)").unwrap(), 0);
        assert!(names_gpus("gpu:fake:1(IDX:0),shard:-(IDX:0)"));
        assert!(!names_gpus("shard:-(IDX:0)"));
        let json = TWO_JOBS.replace(r#""gpu:fake:1(IDX:0)""#, r#""shard:40(IDX:0)""#);
        let job = parse_squeue_json(&json, 12).unwrap();
        assert_eq!(job.shards_on("vm"), Some(40));
        assert_eq!(job.shards_on("n1"), Some(0));
    }
}
