//! The node-local runtime directory: one root-owned directory per job with a watchdog here.
//!
//! ```text
//! <runtime_dir>/                      root 0755 (from the policy, default /run/gpu-mem-quota)
//! <runtime_dir>/jobs/<id>/            root:<job's group> 0750
//!     watchdog.lock                   flock held by the job's watchdog for its whole life
//!     watchdog.pid                    "<pid> <start time>" of that watchdog
//!     status.json                     the job's status (GPU_MEM_QUOTA_STATUS_FILE), root:<group> 0640
//!     record                          the watchdog's record entry so far (AdminComment format)
//! <runtime_dir>/gpus                  the node's GPUs, "<index> <uuid> <total bytes>" per line, written
//!                                     by every watchdog that loads NVML, read by the plugin (no NVML there)
//! ```
//! Only root writes here; the job's user may read its own job's directory. Nothing is ever
//! created by following a symlink: the directories are checked to be real, root-owned directories.

use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::attribute::ProcessIdentity;

pub const STATUS_FILE: &str = "status.json";
pub const LOCK_FILE: &str = "watchdog.lock";
pub const PID_FILE: &str = "watchdog.pid";
pub const INVENTORY_FILE: &str = "gpus";
/// The watchdog's latest record entry for this node and run (our AdminComment format), which the
/// plugin writes into the job's AdminComment when the batch script ends, while slurmctld still
/// accepts updates.
pub const RECORD_FILE: &str = "record";

pub fn jobs_dir(runtime_dir: &Path) -> PathBuf {
    runtime_dir.join("jobs")
}

pub fn job_dir(runtime_dir: &Path, job_id: u32) -> PathBuf {
    jobs_dir(runtime_dir).join(job_id.to_string())
}

pub fn status_file(runtime_dir: &Path, job_id: u32) -> PathBuf {
    job_dir(runtime_dir, job_id).join(STATUS_FILE)
}

/// Creates (or checks) `dir` as a root-owned directory with `mode`, refusing a symlink or a
/// directory someone else owns.
fn ensure_root_dir(dir: &Path, mode: u32, gid: u32) -> io::Result<()> {
    match fs::DirBuilder::new().mode(mode).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    let meta = fs::symlink_metadata(dir)?;
    if !meta.file_type().is_dir() || meta.uid() != 0 {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("{} is not a root-owned directory", dir.display()),
        ));
    }
    std::os::unix::fs::chown(dir, Some(0), Some(gid))?;
    fs::set_permissions(dir, fs::Permissions::from_mode(mode))
}

/// Creates the job's directory, readable by the job's group only.
pub fn create_job_dir(runtime_dir: &Path, job_id: u32, gid: u32) -> io::Result<PathBuf> {
    ensure_root_dir(runtime_dir, 0o755, 0)?;
    ensure_root_dir(&jobs_dir(runtime_dir), 0o755, 0)?;
    let dir = job_dir(runtime_dir, job_id);
    ensure_root_dir(&dir, 0o750, gid)?;
    Ok(dir)
}

/// Removes the job's directory and everything in it (a job that is gone needs none of it).
pub fn remove_job_dir(runtime_dir: &Path, job_id: u32) -> io::Result<()> {
    match fs::remove_dir_all(job_dir(runtime_dir, job_id)) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

/// Opens (creating) a file in a root-owned directory without following a symlink.
pub fn open_private(path: &Path, mode: u32) -> io::Result<fs::File> {
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
    let file = open_private(&dir.join(LOCK_FILE), 0o600)?;
    // SAFETY: flock on a valid descriptor.
    if unsafe {
        libc::flock(
            std::os::fd::AsRawFd::as_raw_fd(&file),
            libc::LOCK_EX | libc::LOCK_NB,
        )
    } == 0
    {
        Ok(Some(file))
    } else {
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
            Ok(None)
        } else {
            Err(e)
        }
    }
}

pub fn write_pid_file(dir: &Path, me: ProcessIdentity) -> io::Result<()> {
    let mut file = open_private(&dir.join(PID_FILE), 0o644)?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inventory_sizes() {
        let dir = std::env::temp_dir().join(format!("gmq-inventory-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        fs::write(
            dir.join(INVENTORY_FILE),
            "0 GPU-a 85899345920\n1 GPU-b 42949672960\n",
        )
        .unwrap();
        assert_eq!(gpu_total(&dir, &["0".into()]), Some(85899345920));
        assert_eq!(gpu_total(&dir, &["GPU-b".into()]), Some(42949672960));
        assert_eq!(gpu_total(&dir, &[]), Some(42949672960));
        assert_eq!(gpu_total(&dir, &["7".into()]), None);
        fs::remove_dir_all(&dir).unwrap();
        assert_eq!(gpu_total(&dir, &[]), None);
    }
}
