//! Starting the watchdog from inside slurmstepd, as a daemon that owes slurmstepd nothing.
//!
//! slurmstepd is multi-threaded, blocks a set of signals (HUP, INT, QUIT, USR1, USR2, PIPE, ALRM,
//! TERM, TSTP) and ignores QUIT; children inherit all of that. `std::process::Command` would clear
//! the signal mask, but it keeps ignored dispositions, inherited descriptors and slurmstepd's
//! session, so the spawn is done by hand. Everything the child needs is allocated and computed
//! before `fork`; between `fork` and `execve` only async-signal-safe system calls run, through raw
//! libc (nix's exec wrappers allocate: nix-rust/nix#555). The child double-forks (slurmstepd reaps
//! its children with wait3 and must not wait for ours), calls `setsid`, unblocks every signal and
//! restores default dispositions, points stdin/stdout/stderr at /dev/null, closes every other
//! descriptor, sets `oom_score_adj` to -500 (see [`OOM_SCORE_ADJ`]) and executes the watchdog with
//! a clean environment.

use std::ffi::{CStr, CString, NulError};
use std::io;
use std::path::Path;

/// The watchdog's `oom_score_adj`: not slurmstepd's -1000 (the kernel must be able to end it),
/// but below the job's own processes (0), which share its memory cgroup: a job that fills its
/// memory limit loses one of its own processes to the OOM killer before its watchdog (H7).
const OOM_SCORE_ADJ: &[u8] = b"-500\n";

/// The most descriptors the process may have open (`RLIMIT_NOFILE`), at most 2^20.
fn open_max() -> libc::c_int {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into `limit`, which we own.
    let known = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0;
    if known {
        limit.rlim_cur.clamp(1024, 1 << 20) as libc::c_int
    } else {
        1 << 20
    }
}

/// The environment the watchdog gets: a fixed PATH and, when set, where Slurm's config lives and
/// the node's Slurm name (`SLURMD_NODENAME`, from slurmstepd's own environment: never the job's).
pub fn clean_environment(slurm_conf: Option<&str>, node_name: Option<&str>) -> Vec<String> {
    let mut env = vec![
        "PATH=/usr/sbin:/usr/bin:/sbin:/bin".to_string(),
        "LANG=C".to_string(),
    ];
    if let Some(conf) = slurm_conf {
        env.push(format!("SLURM_CONF={conf}"));
    }
    if let Some(name) = node_name.filter(|n| !n.is_empty() && !n.contains(['=', '\0'])) {
        env.push(format!("SLURMD_NODENAME={name}"));
    }
    env
}

/// Everything the child uses after `fork`, prepared while allocating and non-async-signal-safe
/// calls are still allowed. `argv` and `envp` point into `program`, `_args` and `_env`, which this
/// struct keeps alive.
struct Prepared {
    program: CString,
    _args: Vec<CString>,
    _env: Vec<CString>,
    argv: Vec<*const libc::c_char>,
    envp: Vec<*const libc::c_char>,
    /// `SIGRTMAX()`: a libc function call, not on the async-signal-safe list.
    last_signal: libc::c_int,
    /// Where close_range is missing: every descriptor below slurmstepd's limit (often far above
    /// 65536). getrlimit is not on the async-signal-safe list either.
    open_max: libc::c_int,
}

impl Prepared {
    fn new(program: &Path, args: &[String], env: &[String]) -> io::Result<Prepared> {
        let to_c =
            |s: &str| CString::new(s).map_err(|e: NulError| io::Error::new(io::ErrorKind::InvalidInput, e));
        let program = to_c(&program.to_string_lossy())?;
        let mut args_c = vec![program.clone()];
        for a in args {
            args_c.push(to_c(a)?);
        }
        let env_c: Vec<CString> = env.iter().map(|e| to_c(e)).collect::<io::Result<_>>()?;
        let null_terminated = |strings: &[CString]| {
            let mut pointers: Vec<*const libc::c_char> = strings.iter().map(|s| s.as_ptr()).collect();
            pointers.push(std::ptr::null());
            pointers
        };
        Ok(Prepared {
            argv: null_terminated(&args_c),
            envp: null_terminated(&env_c),
            program,
            _args: args_c,
            _env: env_c,
            last_signal: libc::SIGRTMAX(),
            open_max: open_max(),
        })
    }
}

/// Forks a detached `program args...` with `env`. Returns once the intermediate child is gone;
/// the watchdog itself is not our child.
pub fn spawn_detached(program: &Path, args: &[String], env: &[String]) -> io::Result<()> {
    let prepared = Prepared::new(program, args, env)?;
    // SAFETY: fork in a multi-threaded process; the child runs only `child_after_fork`, whose
    // contract `prepared` meets: it was built above, before the fork.
    let child = unsafe { libc::fork() };
    if child < 0 {
        return Err(io::Error::last_os_error());
    }
    if child == 0 {
        // SAFETY: we are the child of the fork above, and `prepared` is complete.
        unsafe { child_after_fork(&prepared) }
    }
    // The intermediate child exits at once. slurmstepd's own wait3 loop may reap it first: then
    // waitpid says ECHILD, which is fine.
    let mut status = 0;
    loop {
        // SAFETY: waiting for our own child, into a status we own.
        let reaped = unsafe { libc::waitpid(child, &mut status, 0) };
        if reaped >= 0 || io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return Ok(());
        }
    }
}

/// The child of [`spawn_detached`]'s `fork`: detaches (`setsid`, a second `fork`), resets the
/// signal mask and every disposition, puts /dev/null on 0–2, closes every other descriptor, sets
/// [`OOM_SCORE_ADJ`], moves to `/` with umask 022, and executes the watchdog. Never returns: it
/// execs or `_exit`s (0 in the intermediate child, 1 when the second fork fails, 127 when exec
/// does).
///
/// # Safety
///
/// Call only in the child of a `fork` of a possibly multi-threaded process, and nowhere else (it
/// closes descriptors and exits). It allocates nothing, takes no lock and makes only
/// async-signal-safe system calls, reading only `prepared`, which must have been built before
/// the fork.
unsafe fn child_after_fork(prepared: &Prepared) -> ! {
    const DEV_NULL: &CStr = c"/dev/null";
    const OOM_SCORE_ADJ_PATH: &CStr = c"/proc/self/oom_score_adj";
    // SAFETY: the whole body makes async-signal-safe calls on `prepared` and on stack values, as
    // the contract above requires.
    unsafe {
        libc::setsid();
        match libc::fork() {
            0 => {}
            -1 => libc::_exit(1),
            _ => libc::_exit(0),
        }
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
        let mut default: libc::sigaction = std::mem::zeroed();
        default.sa_sigaction = libc::SIG_DFL;
        for signal in 1..=prepared.last_signal {
            if signal != libc::SIGKILL && signal != libc::SIGSTOP {
                libc::sigaction(signal, &default, std::ptr::null_mut());
            }
        }
        let null = libc::open(DEV_NULL.as_ptr(), libc::O_RDWR);
        if null >= 0 {
            libc::dup2(null, 0);
            libc::dup2(null, 1);
            libc::dup2(null, 2);
        }
        // Every other descriptor: close_range(3, ~0) where the kernel has it, else one by one.
        if libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32) != 0 {
            for fd in 3..prepared.open_max {
                libc::close(fd);
            }
        }
        let adj = libc::open(OOM_SCORE_ADJ_PATH.as_ptr(), libc::O_WRONLY);
        if adj >= 0 {
            libc::write(adj, OOM_SCORE_ADJ.as_ptr().cast(), OOM_SCORE_ADJ.len());
            libc::close(adj);
        }
        libc::chdir(c"/".as_ptr());
        libc::umask(0o022);
        libc::execve(
            prepared.program.as_ptr(),
            prepared.argv.as_ptr(),
            prepared.envp.as_ptr(),
        );
        libc::_exit(127)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    /// The program starts detached and clean even from a caller that blocks and ignores signals
    /// and holds an inheritable descriptor, as slurmstepd does.
    #[test]
    fn the_program_starts_in_its_own_session_with_nothing_inherited() {
        // Named in the shell script unquoted: tempfile's random suffix is letters and digits only.
        let dir = tempfile::Builder::new().prefix("gmq-spawn-").tempdir().unwrap();
        let out = dir.path().join("out");
        // `exec >`: dash keeps no saved copy of stdout, as it does for a command's redirection.
        // The masks are grep's own, inherited through the shell: the shell itself blocks signals
        // for a moment while it forks, so reading its status would race that.
        let script = format!(
            "exec > {0}.tmp; ls /proc/$$/fd; grep -E '^Sig(Blk|Ign)' /proc/self/status; \
             cut -d' ' -f6 /proc/$$/stat; pwd; echo \"$GMQ_TEST\"; mv {0}.tmp {0}",
            out.display()
        );
        let inherited = std::fs::File::open("/dev/null").unwrap();
        // SAFETY: test-only setup on this thread: an inheritable duplicate, SIGUSR1 blocked,
        // SIGQUIT ignored; all undone below.
        let (leaked, old_quit) = unsafe {
            let leaked = libc::dup(std::os::fd::AsRawFd::as_raw_fd(&inherited));
            let mut usr1: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut usr1);
            libc::sigaddset(&mut usr1, libc::SIGUSR1);
            libc::pthread_sigmask(libc::SIG_BLOCK, &usr1, std::ptr::null_mut());
            (leaked, libc::signal(libc::SIGQUIT, libc::SIG_IGN))
        };
        let spawned = spawn_detached(
            Path::new("/bin/sh"),
            &["-c".to_string(), script],
            &["GMQ_TEST=clean".to_string(), "PATH=/usr/bin:/bin".to_string()],
        );
        // SAFETY: undoing the setup above.
        unsafe {
            libc::close(leaked);
            let mut usr1: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut usr1);
            libc::sigaddset(&mut usr1, libc::SIGUSR1);
            libc::pthread_sigmask(libc::SIG_UNBLOCK, &usr1, std::ptr::null_mut());
            libc::signal(libc::SIGQUIT, old_quit);
        }
        spawned.unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while !out.exists() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let text = std::fs::read_to_string(&out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        let our_session = std::fs::read_to_string("/proc/self/stat").unwrap();
        let our_session = our_session
            .rsplit(')')
            .next()
            .unwrap()
            .split_whitespace()
            .nth(3)
            .unwrap();
        assert_eq!(lines[..3], ["0", "1", "2"], "{text}");
        assert_eq!(lines[3], "SigBlk:\t0000000000000000", "{text}");
        // Signals 1-31 (std's test harness ignores SIGPIPE; we ignored SIGQUIT). glibc reserves
        // 32 and 33 for itself and refuses sigaction on them.
        let ignored = u64::from_str_radix(lines[4].trim_start_matches("SigIgn:\t"), 16).unwrap();
        assert_eq!(ignored & 0x7fff_ffff, 0, "{text}");
        assert_ne!(lines[5], our_session, "{text}");
        assert_eq!(&lines[6..], ["/", "clean"], "{text}");
    }
}
