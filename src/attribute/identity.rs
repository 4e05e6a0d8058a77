//! A process, not just a pid: pids are reused, a (pid, start time) pair is not.

use std::path::Path;

use super::procfs::read_stat;

/// One process for as long as it lives. The kernel never gives two live processes the same pid,
/// and a new process with a reused pid has a later start time, so the pair names one process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProcessIdentity {
    pub pid: u32,
    /// When it started: field 22 of `/proc/PID/stat`, clock ticks since boot.
    pub start_time: u64,
}

/// The identity of the process that has `pid` now, or `None` when there is none. One read of
/// `/proc/PID/stat`.
pub fn identify(proc_root: &Path, pid: u32) -> Option<ProcessIdentity> {
    read_stat(proc_root, pid).map(|stat| ProcessIdentity {
        pid,
        start_time: stat.start_time,
    })
}

/// Whether `process` is still running: its pid exists and was not reused since. One read of
/// `/proc/PID/stat`. A process that has exited but not yet been reaped (a zombie) still counts.
pub fn same_process(proc_root: &Path, process: &ProcessIdentity) -> bool {
    identify(proc_root, process.pid).as_ref() == Some(process)
}
