//! Running one command safely from a root process: an absolute path and an argv (never a shell),
//! a cleared environment with a fixed PATH, stdin from /dev/null, its own process group, a
//! deadline, and output kept to [`MAX_OUTPUT_BYTES`] per stream.
//!
//! Single-threaded on purpose (the watchdog has one thread): the pipes are non-blocking and drained
//! while we wait, so a chatty child never stalls on a full pipe. The child's exit is observed with
//! `waitid(WNOWAIT)`, which leaves it a zombie: its pid, and so its process group id, cannot be
//! reused until we reap it, which makes `killpg` safe. Whatever else is left in the group (a
//! grandchild holding our pipes, say) is killed before the child is reaped, on success and on
//! timeout alike, so nothing the command started outlives the call. A grandchild that moved to
//! another process group or session is out of reach; scontrol and scancel start none.

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use nix::fcntl::{fcntl, FcntlArg, OFlag};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{killpg, Signal};
use nix::sys::wait::{waitid, Id, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

/// The PATH a Slurm command gets: system directories only.
pub const SAFE_PATH: &str = "/usr/sbin:/usr/bin:/sbin:/bin";

/// The most bytes kept from each of stdout and stderr; more is read and dropped.
pub(crate) const MAX_OUTPUT_BYTES: usize = 1 << 20;

/// The same for `squeue --json`, which in Slurm 22.05 prints every job slurmctld knows (a few KiB
/// each, whatever `--jobs` says): room for about ten thousand jobs.
pub(crate) const MAX_JSON_OUTPUT_BYTES: usize = 64 << 20;

/// The most bytes read from one pipe per look at the child.
const MAX_READ_PER_LOOK: usize = 256 * 1024;

/// The longest pause between two looks at the child (the first looks come sooner).
const MAX_NAP: Duration = Duration::from_millis(50);

/// What a command that ran to its end left behind.
#[derive(Debug)]
pub(crate) struct Finished {
    pub(crate) status: ExitStatus,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
    /// Some output was dropped to stay within the cap (e.g. [`MAX_OUTPUT_BYTES`]).
    pub(crate) truncated: bool,
}

/// Why a command gave no [`Finished`].
#[derive(Debug)]
pub(crate) enum RunError {
    /// It could not be started.
    Spawn(io::Error),
    /// It ran past its deadline and was killed with its process group.
    TimedOut,
    /// Waiting for it or reading its output failed (it was killed and reaped all the same).
    Wait(io::Error),
}

/// Runs `program args...` with only PATH and `env` in its environment, and waits at most `timeout`;
/// keeps at most `max_output` bytes of each stream.
pub(super) fn run(
    program: &Path,
    args: &[String],
    env: &[(String, String)],
    timeout: Duration,
    max_output: usize,
) -> Result<Finished, RunError> {
    let deadline = Instant::now() + timeout;
    let mut child = Command::new(program)
        .args(args)
        .env_clear()
        .env("PATH", SAFE_PATH)
        .envs(env.iter().map(|(key, value)| (key, value)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .map_err(RunError::Spawn)?;
    let waited = wait_draining(&mut child, deadline, max_output);
    // Whatever happened, the child is still unreaped here: its group can be killed safely.
    kill_group(&child);
    let reaped = child.wait();
    let (stdout, stderr, truncated) = waited?;
    let status = reaped.map_err(RunError::Wait)?;
    Ok(Finished {
        status,
        stdout,
        stderr,
        truncated,
    })
}

/// Drains both pipes until the child exits (left unreaped) or the deadline passes.
/// Returns the output on exit, `TimedOut` at the deadline.
fn wait_draining(
    child: &mut Child,
    deadline: Instant,
    max_output: usize,
) -> Result<(String, String, bool), RunError> {
    let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
        return Err(RunError::Wait(io::Error::other("child without output pipes")));
    };
    let mut out = Drain::new(stdout.into(), max_output).map_err(RunError::Wait)?;
    let mut err = Drain::new(stderr.into(), max_output).map_err(RunError::Wait)?;
    let mut nap = Duration::from_millis(1);
    loop {
        out.read_available().map_err(RunError::Wait)?;
        err.read_available().map_err(RunError::Wait)?;
        if has_exited(child.id()).map_err(RunError::Wait)? {
            break;
        }
        let now = Instant::now();
        if now >= deadline {
            return Err(RunError::TimedOut);
        }
        wait_readable(&[&out, &err], nap.min(deadline - now));
        nap = (nap * 2).min(MAX_NAP);
    }
    // What the child wrote before exiting is in the pipes. Stop its leftovers first, then take what
    // is there rather than wait for an end of file they might have held back.
    kill_group(child);
    out.read_available().map_err(RunError::Wait)?;
    err.read_available().map_err(RunError::Wait)?;
    let truncated = out.dropped || err.dropped;
    Ok((out.into_text(), err.into_text(), truncated))
}

/// Has the child exited? Leaves it unreaped (`WNOWAIT`), keeping its pid and group id ours.
fn has_exited(pid: u32) -> io::Result<bool> {
    let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT;
    // With WNOHANG, a child that has not changed state reads as StillAlive (si_pid 0).
    let status = waitid(Id::Pid(Pid::from_raw(pid as libc::pid_t)), flags)?;
    Ok(!matches!(status, WaitStatus::StillAlive))
}

/// SIGKILL to the child's process group (the child leads it: `process_group(0)`). Called only while
/// the child is unreaped; a group that is already empty is fine. The group id is our unreaped
/// child's pid, so it names no one else.
fn kill_group(child: &Child) {
    let _ = killpg(Pid::from_raw(child.id() as libc::pid_t), Signal::SIGKILL);
}

/// Sleeps until one of the open pipes has something to read (or closes) or `nap` passes.
fn wait_readable(drains: &[&Drain], nap: Duration) {
    let mut fds: Vec<PollFd> = drains
        .iter()
        .filter_map(|d| d.fd())
        .map(|fd| PollFd::new(fd, PollFlags::POLLIN))
        .collect();
    if fds.is_empty() {
        std::thread::sleep(nap);
        return;
    }
    let millis = nap.as_millis().clamp(1, i32::MAX as u128) as i32;
    // EINTR or an error only means we look again sooner.
    let _ = poll(
        &mut fds,
        PollTimeout::try_from(millis).unwrap_or(PollTimeout::MAX),
    );
}

/// One non-blocking output pipe and what was read from it.
struct Drain {
    pipe: Option<File>,
    kept: Vec<u8>,
    max: usize,
    dropped: bool,
}

impl Drain {
    fn new(pipe: OwnedFd, max: usize) -> io::Result<Self> {
        set_nonblocking(&pipe)?;
        Ok(Drain {
            pipe: Some(File::from(pipe)),
            kept: Vec::new(),
            max,
            dropped: false,
        })
    }

    fn fd(&self) -> Option<BorrowedFd<'_>> {
        self.pipe.as_ref().map(|p| p.as_fd())
    }

    /// Reads what is in the pipe now, up to [`MAX_READ_PER_LOOK`] so that a writer faster than us
    /// cannot keep us from the deadline; closes our end at end of file.
    fn read_available(&mut self) -> io::Result<()> {
        let Some(pipe) = self.pipe.as_mut() else {
            return Ok(());
        };
        let mut buf = [0u8; 8192];
        for _ in 0..MAX_READ_PER_LOOK / buf.len() {
            match pipe.read(&mut buf) {
                Ok(0) => {
                    self.pipe = None;
                    return Ok(());
                }
                Ok(n) => {
                    let room = self.max - self.kept.len();
                    self.kept.extend_from_slice(&buf[..n.min(room)]);
                    self.dropped |= n > room;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    fn into_text(self) -> String {
        String::from_utf8_lossy(&self.kept).into_owned()
    }
}

fn set_nonblocking(fd: &OwnedFd) -> io::Result<()> {
    let flags = OFlag::from_bits_retain(fcntl(fd, FcntlArg::F_GETFL)?);
    fcntl(fd, FcntlArg::F_SETFL(flags | OFlag::O_NONBLOCK))?;
    Ok(())
}

/// How a finished command's status reads in a message: "exit status 1" or "killed by signal 9".
pub(super) fn describe(status: &ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit status {code}"),
        (None, Some(signal)) => format!("killed by signal {signal}"),
        (None, None) => "no exit status".to_string(),
    }
}
