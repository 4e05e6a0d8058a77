//! The node-local runtime directory: one root-owned directory per job with a watchdog here.
//!
//! ```text
//! <runtime_dir>/                      root 0755, from the policy (default /run/gpu-mem-quota):
//!                                     made when missing, never chowned or chmodded when there; refused
//!                                     unless a real directory owned by root, not group/other-writable,
//!                                     not sticky (crate::trusted_dir)
//! <runtime_dir>/jobs/                 root 0711: the job ids running here cannot be listed
//! <runtime_dir>/jobs/<id>/            root:root 0711: only a path known in advance can be opened
//!     status.json                     the job's status (GPU_MEM_QUOTA_STATUS_FILE), root 0440
//!                                     with the ACL entry user:<job's uid>:r--: readable by that
//!                                     user and root alone, and never the user's inode (G4)
//!     watchdog.lock                   root 0600, flock held by the job's watchdog for its whole life
//!     watchdog.pid                    root 0600, "<pid> <start time>" of that watchdog
//!     facts                           root 0440 with the ACL entry user:<job's uid>:r--: the job's
//!                                     facts on this node from slurmctld's record, as the watchdog
//!                                     read it once at its start ([`NodeFacts`]), for the job's srun
//!                                     steps, which would otherwise each ask slurmctld again
//!     record                          root 0600, the watchdog's record entry so far (AdminComment
//!                                     format) while the AdminComment lacks it as it is now, read
//!                                     by the plugin (root) when the batch script ends
//! <runtime_dir>/registry/             root 0700, the preemption registry (crate::preempt::registry)
//! <runtime_dir>/gpus                  root 0644, the node's GPUs, "<index> <uuid> <total bytes>" per
//!                                     line, written by every watchdog that loads NVML, read by the
//!                                     plugin (no NVML there), also in the job's task
//! ```
//! Only root writes here; a user reads their own job's status file and nothing else of any job.
//! Directories are opened `O_DIRECTORY|O_NOFOLLOW` and checked on the descriptor, children are made
//! relative to it: nothing is ever created by following a symlink.

use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::attribute::ProcessIdentity;
use crate::trusted_dir::TrustedDir;

pub const STATUS_FILE: &str = "status.json";
pub const LOCK_FILE: &str = "watchdog.lock";
pub const PID_FILE: &str = "watchdog.pid";
pub const INVENTORY_FILE: &str = "gpus";
/// The watchdog's latest record entry for this node and run (our AdminComment format), which the
/// plugin writes into the job's AdminComment when the batch script ends, while slurmctld still
/// accepts updates.
pub const RECORD_FILE: &str = "record";
pub const FACTS_FILE: &str = "facts";

pub fn jobs_dir(runtime_dir: &Path) -> PathBuf {
    runtime_dir.join("jobs")
}

pub fn job_dir(runtime_dir: &Path, job_id: u32) -> PathBuf {
    jobs_dir(runtime_dir).join(job_id.to_string())
}

pub fn status_file(runtime_dir: &Path, job_id: u32) -> PathBuf {
    job_dir(runtime_dir, job_id).join(STATUS_FILE)
}

/// The mode of `<runtime_dir>` when we make it.
const RUNTIME_DIR_MODE: u32 = 0o755;
/// `jobs/` and each job's directory: searchable, not listable.
const JOB_DIRS_MODE: u32 = 0o711;

/// Opens `runtime_dir`, making it (root 0755) when missing; an existing one is refused, left as it
/// is, unless it is a real directory owned by root and writable by nobody else (no sticky bit).
pub(crate) fn open_runtime_dir(runtime_dir: &Path) -> io::Result<TrustedDir> {
    TrustedDir::open_or_create(runtime_dir, RUNTIME_DIR_MODE)
}

/// Creates the job's directory (root 0711, as is `jobs/`): a user reaches only the files whose
/// names are known, and may open only their own status file.
pub fn create_job_dir(runtime_dir: &Path, job_id: u32) -> io::Result<PathBuf> {
    let jobs = open_runtime_dir(runtime_dir)?.child_dir("jobs", JOB_DIRS_MODE)?;
    let dir = jobs.child_dir(&job_id.to_string(), JOB_DIRS_MODE)?;
    Ok(dir.path().to_path_buf())
}

/// Removes the job's directory and everything in it (a job that is gone needs none of it).
pub fn remove_job_dir(runtime_dir: &Path, job_id: u32) -> io::Result<()> {
    match fs::remove_dir_all(job_dir(runtime_dir, job_id)) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

/// Opens (creating) a file in a root-owned directory without following a symlink.
fn open_private(path: &Path, mode: u32) -> io::Result<fs::File> {
    fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(mode)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
}

/// Takes the job's watchdog lock without waiting: `Ok(None)` when another watchdog holds it.
/// The lock lives as long as the returned file.
pub fn try_lock(dir: &Path) -> io::Result<Option<fs::File>> {
    try_lock_file(&dir.join(LOCK_FILE))
}

/// Opens (creating, 0600, see [`open_private`]) `path` and takes an exclusive lock on it without
/// waiting (std's `File::try_lock`: flock on Linux): `Ok(None)` when someone else holds it. The
/// lock lives as long as the returned file.
pub(crate) fn try_lock_file(path: &Path) -> io::Result<Option<fs::File>> {
    let file = open_private(path, 0o600)?;
    match file.try_lock() {
        Ok(()) => Ok(Some(file)),
        Err(fs::TryLockError::WouldBlock) => Ok(None),
        Err(fs::TryLockError::Error(e)) => Err(e),
    }
}

pub fn write_pid_file(dir: &Path, me: ProcessIdentity) -> io::Result<()> {
    let mut file = open_private(&dir.join(PID_FILE), 0o600)?;
    // Only root reads it; an older version made it 0644.
    file.set_permissions(fs::Permissions::from_mode(0o600))?;
    file.set_len(0)?;
    writeln!(file, "{} {}", me.pid, me.start_time)
}

/// The watchdog recorded in the job's directory, if its file is there and well formed.
pub fn read_pid_file(runtime_dir: &Path, job_id: u32) -> Option<ProcessIdentity> {
    let text = fs::read_to_string(job_dir(runtime_dir, job_id).join(PID_FILE)).ok()?;
    let mut words = text.split_whitespace();
    let pid = words.next()?.parse().ok()?;
    let start_time = words.next()?.parse().ok()?;
    Some(ProcessIdentity { pid, start_time })
}

/// The size of the smallest of `gpus` (gres indices or UUIDs) in the node's inventory, or of the
/// smallest GPU of the node when `gpus` is empty. `None` when no watchdog has written it yet.
pub fn gpu_total(runtime_dir: &Path, gpus: &[String]) -> Option<u64> {
    let text = fs::read_to_string(runtime_dir.join(INVENTORY_FILE)).ok()?;
    text.lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            let (index, uuid, total) = (words.next()?, words.next()?, words.next()?.parse::<u64>().ok()?);
            (gpus.is_empty() || gpus.iter().any(|g| g == index || g == uuid)).then_some(total)
        })
        .min()
}

/// What slurmctld's record says of the job on this node, that the job credential does not: read
/// by the watchdog once, at its start, and kept in [`FACTS_FILE`] for the job's srun steps (whose
/// environment the user's srun built). Names of accounts, partitions and QOS are the admin's; an
/// empty one is unknown.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeFacts {
    pub account: String,
    pub partition: String,
    pub qos: String,
    /// The job's `gres/shard` count on this node; `None`: slurmctld's record did not say.
    pub shards: Option<u64>,
}

impl NodeFacts {
    const KEYS: [&'static str; 4] = ["account", "partition", "qos", "shards"];

    /// One `key=value` line each, in [`NodeFacts::KEYS`] order.
    pub fn render(&self) -> String {
        let shards = self.shards.map_or(String::new(), |n| n.to_string());
        let values = [&self.account, &self.partition, &self.qos, &shards];
        Self::KEYS
            .iter()
            .zip(values)
            .map(|(key, value)| format!("{key}={value}\n"))
            .collect()
    }

    /// The text [`NodeFacts::render`] wrote; anything else (a key missing, twice, unknown, out of
    /// order, a count that is not one) is `None`, and the facts are asked of slurmctld instead.
    /// Lines end at `\n` alone, as written: a value's own `\r` is kept.
    pub fn parse(text: &str) -> Option<NodeFacts> {
        let mut lines = text.strip_suffix('\n').unwrap_or(text).split('\n');
        let mut values = Self::KEYS.iter().map(|key| {
            let (k, value) = lines.next()?.split_once('=')?;
            (k == *key).then_some(value)
        });
        let mut next = || values.next().flatten();
        let (account, partition, qos, shards) = (next()?, next()?, next()?, next()?);
        if lines.next().is_some() {
            return None;
        }
        Some(NodeFacts {
            account: account.to_string(),
            partition: partition.to_string(),
            qos: qos.to_string(),
            shards: match shards {
                "" => None,
                n => Some(n.parse().ok()?),
            },
        })
    }
}

/// Job `job_id`'s [`NodeFacts`] as its watchdog kept them; `None` when there are none (no watchdog
/// here yet, or it could not read the job's record).
pub fn read_node_facts(runtime_dir: &Path, job_id: u32) -> Option<NodeFacts> {
    let text = fs::read_to_string(job_dir(runtime_dir, job_id).join(FACTS_FILE)).ok()?;
    NodeFacts::parse(&text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_facts_read_back_what_was_written_and_nothing_else() {
        let facts = NodeFacts {
            account: "physics".into(),
            partition: "gpu".into(),
            qos: String::new(),
            shards: Some(8),
        };
        assert_eq!(facts.render(), "account=physics\npartition=gpu\nqos=\nshards=8\n");
        assert_eq!(NodeFacts::parse(&facts.render()), Some(facts.clone()));
        let unknown = NodeFacts {
            shards: None,
            ..facts
        };
        assert_eq!(NodeFacts::parse(&unknown.render()), Some(unknown.clone()));
        // A value ending in `\r` reads back whole (found by fuzzing: `str::lines` dropped it).
        let carriage = NodeFacts {
            account: "physics\r".into(),
            ..unknown
        };
        assert_eq!(NodeFacts::parse(&carriage.render()), Some(carriage));
        for bad in [
            "",
            "account=a\npartition=p\nqos=q\n",
            "partition=p\naccount=a\nqos=q\nshards=1\n",
            "account=a\npartition=p\nqos=q\nshards=x\n",
            "account=a\npartition=p\nqos=q\nshards=1\nshards=2\n",
        ] {
            assert_eq!(NodeFacts::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn inventory_sizes() {
        let scratch = tempfile::Builder::new()
            .prefix("gmq-inventory-")
            .tempdir()
            .unwrap();
        let dir = scratch.path().to_path_buf();
        fs::write(
            dir.join(INVENTORY_FILE),
            "0 GPU-a 85899345920\n1 GPU-b 42949672960\n",
        )
        .unwrap();
        assert_eq!(gpu_total(&dir, &["0".into()]), Some(85899345920));
        assert_eq!(gpu_total(&dir, &["GPU-b".into()]), Some(42949672960));
        assert_eq!(gpu_total(&dir, &[]), Some(42949672960));
        assert_eq!(gpu_total(&dir, &["7".into()]), None);
        scratch.close().unwrap();
        assert_eq!(gpu_total(&dir, &[]), None);
    }
}
