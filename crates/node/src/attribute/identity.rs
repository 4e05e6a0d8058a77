//! A process, not just a pid: pids are reused, a (pid, start time) pair is not.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
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

/// Sends `signal` to `process`, never to another process that took its pid: the pid is pinned with
/// a pidfd (Linux 5.3+) before its start time is checked, and the signal goes through the pidfd.
/// On a kernel without pidfds: check, then `kill` (the race is a pid reused in between).
/// `ESRCH` when the process is gone (or its pid is another process's now).
pub fn signal(proc_root: &Path, process: &ProcessIdentity, signal: i32) -> io::Result<()> {
    let pinned = Pinned::open(process.pid)?;
    if !same_process(proc_root, process) {
        return Err(gone());
    }
    pinned.send(signal)
}

fn gone() -> io::Error {
    io::Error::from_raw_os_error(libc::ESRCH)
}

/// The process that has a pid when it is opened, held by a pidfd (Linux 5.3+): a signal sent
/// through it reaches that process or none, whoever has the pid by then. What is read under
/// `/proc/PID` after opening is that process's for as long as it lives (a pid is not reused
/// before its process is reaped). On a kernel without pidfds it holds the pid alone, and a signal
/// is a plain `kill`.
#[derive(Debug)]
pub(crate) struct Pinned {
    pid: libc::pid_t,
    pidfd: Option<OwnedFd>,
}

impl Pinned {
    /// Pins the process that has `pid` now. `ESRCH` when there is none.
    pub(crate) fn open(pid: u32) -> io::Result<Pinned> {
        let pid = libc::pid_t::try_from(pid).map_err(|_| gone())?;
        // SAFETY: plain syscall; on success it returns a new descriptor that we own.
        let raw = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        if raw < 0 {
            let error = io::Error::last_os_error();
            return match error.raw_os_error() {
                Some(libc::ENOSYS) => Ok(Pinned { pid, pidfd: None }),
                _ => Err(error),
            };
        }
        // SAFETY: `raw` is a descriptor pidfd_open just gave us; OwnedFd closes it.
        let pidfd = unsafe { OwnedFd::from_raw_fd(raw as RawFd) };
        Ok(Pinned {
            pid,
            pidfd: Some(pidfd),
        })
    }

    /// Sends `signal` to the pinned process. `ESRCH` when it has exited.
    pub(crate) fn send(&self, signal: i32) -> io::Result<()> {
        let sent = match &self.pidfd {
            // SAFETY: plain syscall on our pidfd; no siginfo.
            Some(pidfd) => unsafe {
                libc::syscall(
                    libc::SYS_pidfd_send_signal,
                    pidfd.as_raw_fd(),
                    signal,
                    std::ptr::null::<libc::siginfo_t>(),
                    0u32,
                )
            },
            // SAFETY: plain syscall; the caller checked the pid just before (no pidfds here).
            None => libc::c_long::from(unsafe { libc::kill(self.pid, signal) }),
        };
        match sent {
            0 => Ok(()),
            _ => Err(io::Error::last_os_error()),
        }
    }
}

#[cfg(test)]
mod signal_tests {
    use super::*;
    use std::process::Command;

    #[test]
    fn a_process_is_signalled_and_a_reused_identity_is_not() {
        let mut child = Command::new("sleep").arg("30").spawn().unwrap();
        let proc_root = Path::new("/proc");
        let me = identify(proc_root, child.id()).unwrap();
        // Another start time: the pid names another process now; nothing is sent.
        let stale = ProcessIdentity {
            start_time: me.start_time.wrapping_sub(1),
            ..me
        };
        let error = signal(proc_root, &stale, libc::SIGTERM).unwrap_err();
        assert_eq!(error.raw_os_error(), Some(libc::ESRCH));
        assert!(
            child.try_wait().unwrap().is_none(),
            "signalled through a stale identity"
        );
        signal(proc_root, &me, libc::SIGTERM).unwrap();
        let status = child.wait().unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(libc::SIGTERM));
    }
}
