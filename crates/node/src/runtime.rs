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
//!                                     read it once at its start (gmq-core's `node_files::NodeFacts`), for the job's srun
//!                                     steps, which would otherwise each ask slurmctld again
//!     prolog                          root 0600, the job prolog's word on the job here (gmq-core's
//!                                     `node_files::PrologWord`), read by each task (as root)
//!                                     before it starts; a step (as the user) only sees it is there
//!     hard-limit                      root 0600, the watchdog's word on the driver's hard limit,
//!                                     which each task waits for (as root) before it starts
//!     record                          root 0600, the watchdog's record entry so far (AdminComment
//!                                     format) while the AdminComment lacks it as it is now, read
//!                                     by the plugin (root) when the batch script ends
//!     record-settling                 root 0600, the same entry while a multi-node job's
//!                                     AdminComment may have lost it to another node's merge, read
//!                                     by the plugin (root) when a task of a step ends here
//! <runtime_dir>/registry/             root 0700, the preemption registry (crate::preempt_registry)
//! <runtime_dir>/gpus                  root 0644, the node's GPUs, "<index> <uuid> <total bytes>" per
//!                                     line, written by every watchdog that loads NVML, read by the
//!                                     plugin (no NVML there), also in the job's task
//! ```
//! The names and formats are gmq-core's (`node_files`); this module does the I/O. Only root
//! writes here; a user reads their own job's status file and nothing else of any job.
//! Directories are opened `O_DIRECTORY|O_NOFOLLOW` and checked on the descriptor, children are made
//! relative to it: nothing is ever created by following a symlink.

use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::attribute::{same_process, signal, ProcessIdentity};
use crate::trusted_dir::TrustedDir;
use gmq_core::node_files::{
    job_dir, NodeFacts, PrologWord, FACTS_FILE, HARD_LIMIT_FILE, INVENTORY_FILE, LOCK_FILE, PID_FILE,
    PROLOG_FILE,
};

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
    read_pid_file_in(&job_dir(runtime_dir, job_id))
}

fn read_pid_file_in(job_dir: &Path) -> Option<ProcessIdentity> {
    let text = fs::read_to_string(job_dir.join(PID_FILE)).ok()?;
    let mut words = text.split_whitespace();
    let pid = words.next()?.parse().ok()?;
    let start_time = words.next()?.parse().ok()?;
    Some(ProcessIdentity { pid, start_time })
}

/// What became of the watchdog of a job's previous run, found still here when the job restarts on
/// this node (review G14).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EarlierWatchdog {
    /// None is running: no pid file, or its process is gone.
    None,
    /// It left within the grace period after SIGTERM (its `leave` ran).
    Stopped { pid: u32 },
    /// It was still there after the grace period (blocked in a slow slurmctld request, say) and
    /// was SIGKILLed: its lock is free, and its `leave` never ran, so it cannot clear the new run's
    /// hard limit or remove the new run's files.
    Killed { pid: u32 },
    /// It could not be stopped (the kill failed, or it had not gone a second after SIGKILL).
    StillThere { pid: u32 },
}

/// Stops the watchdog the job's pid file names, if it is still running: SIGTERM, up to `grace`
/// for it to leave, then SIGKILL, so that the new run's watchdog always gets the job's lock. Every
/// signal goes to the very process the pid file names (pid and start time, through a pidfd).
pub fn stop_earlier_watchdog(
    proc_root: &Path,
    runtime_dir: &Path,
    job_id: u32,
    grace: Duration,
) -> EarlierWatchdog {
    let Some(earlier) = read_pid_file(runtime_dir, job_id) else {
        return EarlierWatchdog::None;
    };
    let pid = earlier.pid;
    if !same_process(proc_root, &earlier) || signal(proc_root, &earlier, libc::SIGTERM).is_err() {
        return EarlierWatchdog::None;
    }
    if wait_until_gone(proc_root, &earlier, grace) {
        return EarlierWatchdog::Stopped { pid };
    }
    match signal(proc_root, &earlier, libc::SIGKILL) {
        Err(_) if !same_process(proc_root, &earlier) => EarlierWatchdog::Stopped { pid },
        Err(_) => EarlierWatchdog::StillThere { pid },
        // A killed process is reaped by init at once; a second covers a loaded node.
        Ok(()) if wait_until_gone(proc_root, &earlier, Duration::from_secs(1)) => {
            EarlierWatchdog::Killed { pid }
        }
        Ok(()) => EarlierWatchdog::StillThere { pid },
    }
}

/// Whether `process` is gone (exited and reaped) within `wait`.
fn wait_until_gone(proc_root: &Path, process: &ProcessIdentity, wait: Duration) -> bool {
    poll_until(wait, || !same_process(proc_root, process))
}

/// Whether `done` holds now or within `wait`, asking every 50 ms.
fn poll_until(wait: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + wait;
    loop {
        if done() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Whether the watchdog of the job whose directory is `job_dir` runs on this node: its pid file
/// names a live process, now or within `wait` (the job prolog starts it detached, so the job's
/// first task may come first). Root only (the pid file is root's). Read-only: the job's lock is
/// never tried, which would make a watchdog starting meanwhile find it taken and leave.
pub fn watchdog_runs(proc_root: &Path, job_dir: &Path, wait: Duration) -> bool {
    poll_until(wait, || {
        read_pid_file_in(job_dir).is_some_and(|w| same_process(proc_root, &w))
    })
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

/// Writes the job prolog's word on job `job_id`, making the job's directory.
pub fn write_prolog_word(runtime_dir: &Path, job_id: u32, word: &PrologWord) -> io::Result<()> {
    let dir = create_job_dir(runtime_dir, job_id)?;
    crate::textfile::write_atomically_as(
        &dir,
        PROLOG_FILE,
        &word.render(),
        crate::textfile::Access::ROOT_ONLY,
    )
}

/// The job prolog's word in the job directory `job_dir`; `None` where the prolog left none (it did
/// not run for this run of the job, or the job has no GPUs here). Root only.
pub fn read_prolog_word(job_dir: &Path) -> Option<PrologWord> {
    fs::read_to_string(job_dir.join(PROLOG_FILE))
        .ok()
        .map(|text| PrologWord::parse(&text))
}

/// Whether the job's watchdog (directory `job_dir`) has said whether the driver's hard limit is in
/// force, now or within `wait`. Root only.
pub fn hard_limit_said(job_dir: &Path, wait: Duration) -> bool {
    poll_until(wait, || job_dir.join(HARD_LIMIT_FILE).is_file())
}

/// Whether the job prolog left its word on job `job_id` here: then the job has GPUs on this node.
/// Anyone may ask (the file's name is known; its text is root's).
pub fn prolog_word_here(runtime_dir: &Path, job_id: u32) -> bool {
    fs::symlink_metadata(job_dir(runtime_dir, job_id).join(PROLOG_FILE)).is_ok_and(|m| m.is_file())
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

    #[test]
    fn a_watchdog_runs_only_where_its_pid_file_names_a_live_process() {
        let scratch = tempfile::Builder::new()
            .prefix("gmq-watchdog-runs-")
            .tempdir()
            .unwrap();
        let (runtime_dir, proc_root) = (scratch.path(), Path::new("/proc"));
        let runs = |job_id| watchdog_runs(proc_root, &job_dir(runtime_dir, job_id), Duration::ZERO);
        assert!(!runs(7), "no job directory");
        let dir = create_job_dir(runtime_dir, 7).unwrap();
        assert!(!runs(7), "no pid file");
        let me = crate::attribute::identify(proc_root, std::process::id()).unwrap();
        // The pid of a process that is gone, and now another's, is no watchdog.
        let earlier = ProcessIdentity {
            pid: me.pid,
            start_time: me.start_time + 1,
        };
        write_pid_file(&dir, earlier).unwrap();
        assert!(!runs(7), "a reused pid");
        write_pid_file(&dir, me).unwrap();
        assert!(runs(7));
        assert!(!runs(8), "another job's");
    }
}
