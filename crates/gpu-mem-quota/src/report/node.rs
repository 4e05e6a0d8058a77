//! `gpu-mem-quota status`: the jobs watched on this node, from their watchdogs' status files
//! (`<runtime_dir>/jobs/<id>/status.json`, see crates/node/src/runtime.rs and crates/core/src/watchdog/status.rs).
//!
//! [`read_node`], [`read_jobs`] and [`jobs_of_user`] do the reading; everything else is pure.
//! `jobs/` and each job's directory are root 0711 and a status file is root's, 0440, readable by its job's user through an ACL entry: root
//! lists `jobs/` ([`read_node`]); a user cannot, so their jobs come from their own processes
//! ([`jobs_of_user`]) and only those status files are opened ([`read_jobs`]). A user never sees
//! another user's job: its file cannot be opened, and it is skipped as if absent.
//! A file is read as the watchdog's [`Status`] (one type for the writer and this reader): the
//! fields the watchdog writes (job-level `state` and `quota_bytes`) and the per-GPU
//! `quota_bytes`/`state` that docs/HINTS.md describes, other fields ignored.

use std::io::{self, Read};
use std::path::Path;

use serde::Serialize;

use super::format::{human_size, percent, table};
use gmq_core::job_telemetry::{ReportedTask, MAX_TASKS_SHOWN};
use gmq_core::metrics::fragmentation_ratio;
use gmq_core::node_files;
use gmq_core::watchdog::status::{GpuStatus, JobHealth, Status};

/// The most bytes read from a status file: a real one is well under 4 KiB per GPU.
const MAX_STATUS_BYTES: u64 = 1 << 20;

/// What a node's runtime directory shows to the caller.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeStatus {
    /// False when the runtime directory (or its `jobs/`) does not exist: no job was ever watched.
    pub present: bool,
    /// Jobs with a readable status file, by job id; each GPU's `quota_bytes` and `state` are the
    /// job's where the file gives none per GPU.
    pub jobs: Vec<Status>,
    /// Readable job directories without a status file yet (or without a quota: no file then).
    pub without_status: Vec<u32>,
    /// Job directories the caller may not read (only counted when the caller asked, i.e. root).
    pub unreadable: usize,
    /// Status files that could not be parsed: `(job, why)`.
    pub broken: Vec<(u32, String)>,
}

/// Parses one status file of job `job_id` (the directory name, which the file must agree with).
/// A GPU without its own `quota_bytes` or `state` takes the job's.
pub fn parse_status(job_id: u32, text: &str) -> Result<Status, String> {
    let mut status = Status::from_json(text)?;
    if status.job_id != job_id {
        return Err(format!(
            "job_id is {}, the directory says {job_id}",
            status.job_id
        ));
    }
    for gpu in &mut status.gpus {
        gpu.quota_bytes = gpu.quota_bytes.or(status.quota_bytes);
        gpu.health = gpu.health.or(status.health);
    }
    Ok(status)
}

/// Reads every job directory under `runtime_dir/jobs` the caller can read. `count_unreadable`:
/// report directories that could not be read (for root, to whom that is a fault).
pub fn read_node(runtime_dir: &Path, count_unreadable: bool) -> io::Result<NodeStatus> {
    let mut node = NodeStatus::default();
    let listing = match std::fs::read_dir(node_files::jobs_dir(runtime_dir)) {
        Ok(listing) => listing,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(node),
        Err(e) => return Err(e),
    };
    node.present = true;
    for item in listing {
        let item = item?;
        let Some(job_id) = item.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        if !read_status_into(&mut node, runtime_dir, job_id) {
            node.unreadable += usize::from(count_unreadable);
        }
    }
    node.jobs.sort_by_key(|j| j.job_id);
    node.without_status.sort_unstable();
    node.broken.sort();
    Ok(node)
}

/// Reads the status files of `jobs` (for a caller who may not list `jobs/`: a user, with the jobs
/// of [`jobs_of_user`]). A job without a directory here is not watched on this node and left out;
/// a file the caller may not read is left out too.
pub(crate) fn read_jobs(runtime_dir: &Path, jobs: &[u32]) -> io::Result<NodeStatus> {
    let mut node = NodeStatus::default();
    match std::fs::metadata(node_files::jobs_dir(runtime_dir)) {
        Ok(_) => node.present = true,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(node),
        Err(e) => return Err(e),
    }
    let mut jobs = jobs.to_vec();
    jobs.sort_unstable();
    jobs.dedup();
    for job_id in jobs {
        if !node_files::job_dir(runtime_dir, job_id).is_dir() {
            continue;
        }
        // Not the caller's to read: left out.
        read_status_into(&mut node, runtime_dir, job_id);
    }
    Ok(node)
}

/// The jobs that the processes of `uid` on this node belong to (every job that claims one, by
/// cgroup, else by ancestry, as the watchdog attributes them), read from `proc_root` and
/// `cgroup_root`.
pub(crate) fn jobs_of_user(proc_root: &Path, cgroup_root: &Path, uid: u32) -> Vec<u32> {
    use std::os::unix::fs::MetadataExt;
    let Ok(listing) = std::fs::read_dir(proc_root) else {
        return Vec::new();
    };
    let mut jobs: Vec<u32> = listing
        .filter_map(Result::ok)
        .filter_map(|item| {
            let pid = item.file_name().to_str()?.parse::<u32>().ok()?;
            (item.metadata().ok()?.uid() == uid).then_some(pid)
        })
        .flat_map(|pid| {
            let owner = gmq_node::attribute::owner_of(proc_root, cgroup_root, pid);
            owner.claims().iter().map(|c| c.job_id).collect::<Vec<_>>()
        })
        .collect();
    jobs.sort_unstable();
    jobs.dedup();
    jobs
}

/// Adds job `job_id`'s status (or why it has none) to `node`; false when the caller may not read it.
fn read_status_into(node: &mut NodeStatus, runtime_dir: &Path, job_id: u32) -> bool {
    match read_capped(&node_files::status_file(runtime_dir, job_id)) {
        Ok(text) => match parse_status(job_id, &text) {
            Ok(status) => node.jobs.push(status),
            Err(why) => node.broken.push((job_id, why)),
        },
        Err(e) if e.kind() == io::ErrorKind::NotFound => node.without_status.push(job_id),
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => return false,
        Err(e) => node.broken.push((job_id, e.to_string())),
    }
    true
}

fn read_capped(path: &Path) -> io::Result<String> {
    let mut text = String::new();
    std::fs::File::open(path)?
        .take(MAX_STATUS_BYTES)
        .read_to_string(&mut text)?;
    Ok(text)
}

const HEADER: [&str; 10] = [
    "JOBID",
    "STATE",
    "GPU",
    "UUID",
    "USED",
    "QUOTA",
    "PEAK",
    "USED/QUOTA",
    "PEAK/QUOTA",
    "UPDATED",
];

/// The node's jobs as a table, a row per job and GPU; `now` in Unix seconds, for the ages.
pub fn node_text(node: &NodeStatus, now: u64) -> String {
    if !node.present || node.jobs.is_empty() && node.without_status.is_empty() && node.broken.is_empty() {
        let mut out = "No jobs watched on this node.\n".to_string();
        if node.unreadable > 0 {
            out = format!(
                "No readable job status on this node ({} unreadable).\n",
                node.unreadable
            );
        }
        return out;
    }
    let mut rows = Vec::new();
    for job in &node.jobs {
        let state = match (job.health, &job.action) {
            (Some(s), Some(a)) => format!("{} ({a})", s.name()),
            (Some(s), None) => s.name().to_string(),
            (None, _) => "-".into(),
        };
        let updated = job
            .updated_at
            .map_or("-".into(), |at| format!("{}s ago", now.saturating_sub(at)));
        if job.gpus.is_empty() {
            let mut row = vec![job.job_id.to_string(), state.clone()];
            row.extend(["-", "-", "-", "-", "-", "-", "-"].map(String::from));
            row.push(updated.clone());
            rows.push(row);
        }
        for gpu in &job.gpus {
            let gpu_state = gpu.health.filter(|s| Some(*s) != job.health).map(JobHealth::name);
            let share = |bytes: u64| {
                percent(
                    gpu.quota_bytes
                        .filter(|q| *q > 0)
                        .map(|q| bytes as f64 * 100.0 / q as f64),
                )
            };
            rows.push(vec![
                job.job_id.to_string(),
                gpu_state.map_or(state.clone(), str::to_string),
                gpu.index.to_string(),
                gpu.uuid.clone(),
                human_size(gpu.used_bytes),
                gpu.quota_bytes.map_or("-".into(), human_size),
                human_size(gpu.peak_bytes),
                share(gpu.used_bytes),
                share(gpu.peak_bytes),
                updated.clone(),
            ]);
        }
    }
    let mut out = table(&HEADER, &rows);
    for job in &node.jobs {
        let limited: Vec<String> = job
            .gpus
            .iter()
            .filter_map(|g| {
                g.hard_limit_bytes
                    .map(|b| format!("GPU {} at {}", g.index, human_size(b)))
            })
            .collect();
        if !limited.is_empty() {
            out.push_str(&format!(
                "Job {}: the driver's hard limit is in force ({}).\n",
                job.job_id,
                limited.join(", ")
            ));
        }
    }
    for job in &node.jobs {
        for task in &job.job_reported {
            out.push_str(&job_reported_line(job.job_id, task, now));
        }
        if job.job_reported_not_shown > 0 {
            out.push_str(&format!(
                "Job {}: {} more task(s) wrote telemetry, not shown (at most {MAX_TASKS_SHOWN}, one per process).\n",
                job.job_id, job.job_reported_not_shown
            ));
        }
    }
    for job in &node.without_status {
        out.push_str(&format!(
            "Job {job}: no status file (no quota, or its watchdog is starting).\n"
        ));
    }
    for (job, why) in &node.broken {
        out.push_str(&format!("Job {job}: status file unreadable: {why}\n"));
    }
    if node.unreadable > 0 {
        out.push_str(&format!(
            "{} job director(ies) could not be read.\n",
            node.unreadable
        ));
    }
    out
}

/// One task's telemetry, said to be the job's word: `now` in Unix seconds, for its age.
fn job_reported_line(job_id: u32, task: &ReportedTask, now: u64) -> String {
    let a = &task.allocator;
    format!(
        "Job {job_id} task {} (pid {}), as the job reports it {}s ago: allocated {} of {} reserved, \
         fragmentation {}, {} alloc retries, {} OOMs.\n",
        task.task,
        task.pid,
        now.saturating_sub(task.updated_at),
        human_size(a.allocated_bytes),
        human_size(a.reserved_bytes),
        fragmentation_ratio(a),
        a.num_alloc_retries,
        a.num_ooms,
    )
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// The node's jobs as `{"jobs":[...],"without_status":[...],"broken":[...],"unreadable":N}`, compact.
/// A job is its status file's fields but `version`, `quota_bytes` (each GPU has it) and
/// `prediction`, with `updated_at` in Unix seconds (`job_reported` keeps the status file's form).
pub fn node_json(node: &NodeStatus) -> String {
    #[derive(Serialize)]
    struct Node<'a> {
        jobs: Vec<NodeJob<'a>>,
        without_status: &'a [u32],
        broken: Vec<Broken<'a>>,
        unreadable: usize,
    }
    #[derive(Serialize)]
    struct NodeJob<'a> {
        job_id: u32,
        state: Option<JobHealth>,
        action: Option<&'a str>,
        updated_at: Option<u64>,
        gpus: &'a [GpuStatus],
        /// Only where the job reported telemetry: the job's word, each entry marked as such.
        #[serde(skip_serializing_if = "<[ReportedTask]>::is_empty")]
        job_reported: &'a [ReportedTask],
        /// Only where tasks were left out of `job_reported`: how many.
        #[serde(skip_serializing_if = "is_zero")]
        job_reported_not_shown: u64,
    }
    #[derive(Serialize)]
    struct Broken<'a> {
        job_id: u32,
        error: &'a str,
    }
    let node = Node {
        jobs: node
            .jobs
            .iter()
            .map(|job| NodeJob {
                job_id: job.job_id,
                state: job.health,
                action: job.action.as_deref(),
                updated_at: job.updated_at,
                gpus: &job.gpus,
                job_reported: &job.job_reported,
                job_reported_not_shown: job.job_reported_not_shown,
            })
            .collect(),
        without_status: &node.without_status,
        broken: node
            .broken
            .iter()
            .map(|(job_id, error)| Broken {
                job_id: *job_id,
                error,
            })
            .collect(),
        unreadable: node.unreadable,
    };
    serde_json::to_string(&node).expect("a node's status always serializes")
}
