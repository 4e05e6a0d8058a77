//! The job's own allocator telemetry (gmq-core's `job_telemetry`), found and read by root without
//! trusting the place it lives in.
//!
//! python's `TelemetryWriter` writes `gpu-mem-quota-telemetry.<job>.<task>.json` in the task's
//! working directory, a place the job's user can change at any moment. So the watchdog finds the
//! directory through the job's processes, never by a path it is told: the pids come from the
//! attribution (cgroups or ancestry, `crate::attribute`, facts the user cannot forge), and each
//! one's working directory is opened as `/proc/<pid>/cwd` (`O_DIRECTORY`: the kernel's link to the
//! directory itself, not a path to walk). Inside it, through the descriptor:
//! - only the names of the exact pattern with the job's own id are looked at;
//! - each is `lstat`ed first and refused unless a regular file owned by the job's user and under
//!   the size cap ([`refusal`]): a FIFO, a device, a symlink or another user's file is never opened;
//! - then opened `O_NOFOLLOW|O_NONBLOCK|O_CLOEXEC|O_NOCTTY` (a symlink swapped in fails, a FIFO
//!   swapped in does not block) and checked again on the descriptor, which must be the inode the
//!   `lstat` saw; at most the cap and one byte are read.
//!
//! A file counts only when its `job_id` is the job's and its `pid` is one of the processes whose
//! working directory holds it (in that process's pid namespace too, `NSpid`): on a filesystem that
//! several nodes share, the other nodes' tasks are theirs to show, and a file a finished process
//! left behind is shown by nobody.
//!
//! `GPU_MEM_QUOTA_TELEMETRY_FILE` is not honoured: the watchdog could learn that path only from the
//! job's environment (`/proc/<pid>/environ`, the job's own say), and a path the job chooses, opened
//! by root, could name any file on the node; the working-directory default is what the package
//! writes. A job that sets it is simply not shown.
//!
//! Nothing here decides anything: the telemetry is shown (status file, metrics) as the job's word.
//! Every failure is returned for the caller to log once; none stops or slows the watch.
//!
//! What is shown is bounded however many files the job writes (review K3): at most
//! `job_telemetry::MAX_TASKS_SHOWN` tasks, one per process, the lowest task numbers
//! (`job_telemetry::shown`), the rest counted; while reading, no more than twice that is held,
//! and no more failure lines than are ever logged.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, File};
use std::io::{self, Read};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use nix::dir::Dir;
use nix::errno::Errno;
use nix::fcntl::{self, AtFlags, OFlag};
use nix::sys::stat::{self, FileStat, Mode, SFlag};

use gmq_core::job_telemetry::{self, ReportedTask, Shown, MAX_FILE_BYTES};

/// How often a job's telemetry is read: the writer rewrites it every optimizer step, and the admin
/// looks at it on a dashboard; every sample would be a directory listing per process per 100 ms.
pub const READ_EVERY: Duration = Duration::from_secs(15);

/// The most names a working directory may hold for it to be listed: a huge scratch directory is
/// not listed again and again.
pub const MAX_DIR_ENTRIES: usize = 100_000;

/// The most failure lines kept as logged: past that, new ones are dropped, not logged.
const MAX_LOGGED: usize = 64;

/// What `lstat`/`fstat` said of a candidate file, for [`refusal`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileFacts {
    pub mode: u32,
    pub uid: u32,
    pub size: u64,
}

/// Why a file may not be read as the job's telemetry, or `None` when it may: a regular file, owned
/// by the job's user `job_uid`, at most [`MAX_FILE_BYTES`]. Pure.
pub fn refusal(file: FileFacts, job_uid: u32) -> Option<String> {
    if file.mode & libc::S_IFMT != libc::S_IFREG {
        return Some("not a regular file".into());
    }
    if file.uid != job_uid {
        return Some(format!("owned by uid {}, not the job's user {job_uid}", file.uid));
    }
    if file.size > MAX_FILE_BYTES as u64 {
        return Some(format!("larger than {MAX_FILE_BYTES} bytes"));
    }
    None
}

fn facts_of(stat: &FileStat) -> FileFacts {
    FileFacts {
        mode: stat.st_mode,
        uid: stat.st_uid,
        size: u64::try_from(stat.st_size).unwrap_or(u64::MAX),
    }
}

/// The pids of a process in each pid namespace it is in, from its `/proc/<pid>/status` text
/// (`NSpid:\t4242\t7`: the host's pid first, its own namespace's last). Empty without the line
/// (kernels before 4.1). Pure.
pub fn ns_pids(status: &str) -> Vec<u32> {
    status
        .lines()
        .find_map(|line| line.strip_prefix("NSpid:"))
        .map(|pids| {
            pids.split_ascii_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// One read of a job's telemetry on this node: the tasks shown (at most
/// `job_telemetry::MAX_TASKS_SHOWN`, the lowest task numbers, one per process:
/// `job_telemetry::shown`), how many more were read and left out, and what went wrong (each line
/// names the file or directory; for the caller to log once; at most [`MAX_LOGGED`] a read).
#[derive(Debug, Default)]
pub struct Reading {
    pub tasks: Vec<ReportedTask>,
    pub not_shown: u64,
    pub failures: Vec<String>,
}

impl Reading {
    /// Keeps `line` unless the read already has [`MAX_LOGGED`] (no more are ever logged: a job's
    /// thousands of broken files cost no memory).
    fn fail(&mut self, line: String) {
        if self.failures.len() < MAX_LOGGED {
            self.failures.push(line);
        }
    }
}

/// Reads the telemetry files of job `job_id` (user `job_uid`) in the working directories of its
/// processes `pids` (host pids, under `proc_root`). Each directory is read once, however many of
/// the processes work in it.
pub fn read_job_telemetry(proc_root: &Path, job_id: u32, job_uid: u32, pids: &[u32]) -> Reading {
    let mut reading = Reading::default();
    let mut shown = Shown::default();
    // Each directory, by inode, with the pids (in every namespace) of the processes working there.
    let mut dirs: BTreeMap<(u64, u64), (OwnedFd, PathBuf, BTreeSet<u32>)> = BTreeMap::new();
    for &pid in pids {
        let cwd = proc_root.join(pid.to_string()).join("cwd");
        let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
        let fd = match fcntl::open(&cwd, flags, Mode::empty()) {
            Ok(fd) => fd,
            // Gone since the sample: nothing to say.
            Err(Errno::ENOENT | Errno::ESRCH) => continue,
            Err(e) => {
                reading.fail(format!("{}: {e}", cwd.display()));
                continue;
            }
        };
        let Ok(stat) = stat::fstat(&fd) else { continue };
        let mut aliases = ns_pids(&read_status(proc_root, pid));
        aliases.push(pid);
        // For messages only: the directory is used through its descriptor.
        let shown = fs::read_link(&cwd).unwrap_or(cwd);
        let entry = dirs
            .entry((stat.st_dev, stat.st_ino))
            .or_insert_with(|| (fd, shown, BTreeSet::new()));
        entry.2.extend(aliases);
    }
    for (fd, cwd, writers) in dirs.values() {
        read_dir(fd, cwd, job_id, job_uid, writers, &mut shown, &mut reading);
    }
    let shown = shown.finish();
    reading.tasks = shown.tasks;
    reading.not_shown = shown.not_shown;
    reading
}

/// `/proc/<pid>/status`, at most 16 KiB of it; empty when it cannot be read.
fn read_status(proc_root: &Path, pid: u32) -> String {
    let mut text = String::new();
    if let Ok(file) = File::open(proc_root.join(pid.to_string()).join("status")) {
        let _ = file.take(16 * 1024).read_to_string(&mut text);
    }
    text
}

/// The telemetry files of the job in the directory `dir` (named `cwd` in messages), written by one
/// of `writers`: each task into `shown`, each failure into `reading`.
fn read_dir(
    dir: &OwnedFd,
    cwd: &Path,
    job_id: u32,
    job_uid: u32,
    writers: &BTreeSet<u32>,
    shown: &mut Shown,
    reading: &mut Reading,
) {
    let names = match names(dir) {
        Ok(names) => names,
        Err(e) => {
            reading.fail(format!("{}: {e}", cwd.display()));
            return;
        }
    };
    for (name, task) in names
        .iter()
        .filter_map(|name| Some((name, job_telemetry::task_of_file_name(name, job_id)?)))
    {
        let path = cwd.join(name);
        let telemetry = match read_file(dir, name, job_uid) {
            Ok(Some(bytes)) => job_telemetry::parse(&path.display().to_string(), &bytes),
            Ok(None) => continue,
            Err(e) => {
                reading.fail(format!("{}: {e}", path.display()));
                continue;
            }
        };
        match telemetry {
            Ok(t) if t.job_id != Some(job_id) => {
                reading.fail(format!("{}: job_id: not job {job_id}, refused", path.display()))
            }
            // Another node's task on a shared filesystem, or a file a finished process left.
            Ok(t) if !writers.contains(&t.pid) => {}
            Ok(t) => shown.push(ReportedTask::new(task, t)),
            Err(e) => reading.fail(e.to_string()),
        }
    }
}

/// The names in the directory, through its descriptor; refused past [`MAX_DIR_ENTRIES`].
fn names(dir: &OwnedFd) -> io::Result<Vec<String>> {
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
    let mut listing = Dir::openat(dir, ".", flags, Mode::empty())?;
    let mut names = Vec::new();
    for (n, dirent) in listing.iter().enumerate() {
        if n > MAX_DIR_ENTRIES {
            return Err(io::Error::other(format!(
                "more than {MAX_DIR_ENTRIES} entries: not listed"
            )));
        }
        if let Ok(name) = dirent?.file_name().to_str() {
            names.push(name.to_string());
        }
    }
    Ok(names)
}

/// The content of the file `name` in `dir`, read as the module docs say; `Ok(None)` when it went
/// away meanwhile (the writer renames its new file over the old one).
fn read_file(dir: &OwnedFd, name: &str, job_uid: u32) -> io::Result<Option<Vec<u8>>> {
    let before = match stat::fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
        Ok(stat) => stat,
        Err(Errno::ENOENT) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    if let Some(why) = refusal(facts_of(&before), job_uid) {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("{why}: not read"),
        ));
    }
    let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC | OFlag::O_NOCTTY;
    let fd = match fcntl::openat(dir, name, flags, Mode::empty()) {
        Ok(fd) => fd,
        Err(Errno::ENOENT) => return Ok(None),
        Err(Errno::ELOOP) => {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "a symlink: not read",
            ));
        }
        Err(e) => return Err(e.into()),
    };
    let after = stat::fstat(&fd)?;
    if (after.st_dev, after.st_ino) != (before.st_dev, before.st_ino) {
        return Ok(None);
    }
    if let Some(why) = refusal(facts_of(&after), job_uid) {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("{why}: not read"),
        ));
    }
    debug_assert_eq!(after.st_mode & SFlag::S_IFMT.bits(), SFlag::S_IFREG.bits());
    let mut bytes = Vec::new();
    File::from(fd)
        .take(MAX_FILE_BYTES as u64 + 1)
        .read_to_end(&mut bytes)?;
    // Grown past the cap since the fstat: the parser refuses it, naming the size.
    Ok(Some(bytes))
}

/// A job's telemetry as the watchdog keeps it: read at most every [`READ_EVERY`], on a thread of
/// its own, each failure line logged once.
///
/// The read runs beside the watch, not in it: a working directory on a network filesystem that
/// stopped answering would block a `getdents` or an `open` in the kernel, and the watch (the
/// quota's enforcement) must go on. While a read is under way no other starts, so a hung
/// filesystem costs one thread, once.
#[derive(Debug)]
pub struct TelemetryReader {
    proc_root: PathBuf,
    job_id: u32,
    job_uid: u32,
    every: Duration,
    last: Option<Instant>,
    in_flight: Option<mpsc::Receiver<Reading>>,
    logged: BTreeSet<String>,
}

impl TelemetryReader {
    pub fn new(proc_root: PathBuf, job_id: u32, job_uid: u32, every: Duration) -> TelemetryReader {
        TelemetryReader {
            proc_root,
            job_id,
            job_uid,
            every,
            last: None,
            in_flight: None,
            logged: BTreeSet::new(),
        }
    }

    /// What changed at `now`: what a read that has ended shows, with the failure lines not
    /// logged before; `None` while nothing new is known. A read of the working directories of
    /// `pids` starts when due (at once the first time, then every `every`) and none is under
    /// way. Without processes (none on the GPUs yet, or any more) there is nothing to show, and
    /// the next process is read at once.
    pub fn poll(&mut self, now: Instant, pids: &[u32]) -> Option<(Shown, Vec<String>)> {
        if let Some(in_flight) = &self.in_flight {
            return match in_flight.try_recv() {
                Ok(reading) => {
                    self.in_flight = None;
                    Some(self.said_once(reading))
                }
                Err(mpsc::TryRecvError::Empty) => None,
                // The thread panicked: nothing read, tried again when due.
                Err(mpsc::TryRecvError::Disconnected) => {
                    self.in_flight = None;
                    None
                }
            };
        }
        if pids.is_empty() {
            self.last = None;
            return Some((Shown::default(), Vec::new()));
        }
        if self
            .last
            .is_some_and(|last| now.saturating_duration_since(last) < self.every)
        {
            return None;
        }
        self.last = Some(now);
        let (tx, rx) = mpsc::channel();
        let (proc_root, job_id, job_uid, pids) =
            (self.proc_root.clone(), self.job_id, self.job_uid, pids.to_vec());
        let started = std::thread::Builder::new()
            .name("gmq-telemetry".into())
            .spawn(move || {
                let _ = tx.send(read_job_telemetry(&proc_root, job_id, job_uid, &pids));
            });
        match started {
            Ok(_) => self.in_flight = Some(rx),
            Err(e) => {
                let line = format!("cannot start a thread to read it: {e}");
                return Some(self.said_once(Reading {
                    failures: vec![line],
                    ..Reading::default()
                }));
            }
        }
        None
    }

    /// What the reading shows, and its failure lines not said before (at most [`MAX_LOGGED`] ever).
    fn said_once(&mut self, reading: Reading) -> (Shown, Vec<String>) {
        let mut new = Vec::new();
        for line in reading.failures {
            if self.logged.len() < MAX_LOGGED && self.logged.insert(line.clone()) {
                new.push(line);
            }
        }
        let shown = Shown {
            tasks: reading.tasks,
            not_shown: reading.not_shown,
        };
        (shown, new)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_refusal_rule() {
        let uid = 2001;
        let file = |mode: u32, uid: u32, size: u64| FileFacts {
            mode: mode | 0o644,
            uid,
            size,
        };
        let cap = MAX_FILE_BYTES as u64;
        // (facts, refused because of)
        let table = [
            (file(libc::S_IFREG, uid, 900), None),
            (file(libc::S_IFREG, uid, cap), None),
            (file(libc::S_IFREG, uid, cap + 1), Some("larger than")),
            (file(libc::S_IFREG, 0, 900), Some("owned by uid 0")),
            (file(libc::S_IFREG, 2002, 900), Some("owned by uid 2002")),
            (file(libc::S_IFIFO, uid, 0), Some("not a regular file")),
            (file(libc::S_IFLNK, uid, 10), Some("not a regular file")),
            (file(libc::S_IFCHR, uid, 0), Some("not a regular file")),
            (file(libc::S_IFDIR, uid, 4096), Some("not a regular file")),
        ];
        for (facts, want) in table {
            let got = refusal(facts, uid);
            match want {
                None => assert_eq!(got, None, "{facts:?}"),
                Some(why) => assert!(
                    got.as_deref().is_some_and(|g| g.starts_with(why)),
                    "{facts:?}: {got:?}"
                ),
            }
        }
    }

    #[test]
    fn pids_in_each_namespace() {
        let table = [
            ("Name:\tpython\nNSpid:\t4242\n", vec![4242]),
            (
                "Name:\tpython\nNSpid:\t4242\t17\t1\nNSpgid:\t1\n",
                vec![4242, 17, 1],
            ),
            ("Name:\tNSpid:\t1\nUid:\t0\n", vec![]),
            ("Name:\tpython\n", vec![]),
            ("", vec![]),
        ];
        for (status, want) in table {
            assert_eq!(ns_pids(status), want, "{status:?}");
        }
    }
}
