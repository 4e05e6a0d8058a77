//! Starting the watchdog from inside slurmstepd, as a daemon that owes slurmstepd nothing.
//!
//! slurmstepd is multi-threaded, blocks a set of signals (HUP, INT, QUIT, USR1, USR2, PIPE, ALRM,
//! TERM, TSTP) and ignores QUIT; children inherit all of that, and `std::process::Command` resets
//! none of it. So: everything the child needs is allocated before `fork`; between `fork` and
//! `execve` only async-signal-safe system calls run. The child double-forks (slurmstepd reaps its
//! children with wait3 and must not wait for ours), calls `setsid`, unblocks every signal and
//! restores default dispositions, points stdin/stdout/stderr at /dev/null, closes every other
//! descriptor, sets `oom_score_adj` to -500 (see [`OOM_SCORE_ADJ`]) and executes the watchdog with a clean environment.

use std::ffi::{CString, NulError};
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

/// The environment the watchdog gets: a fixed PATH and, when set, where Slurm's config lives.
pub fn clean_environment(slurm_conf: Option<&str>) -> Vec<String> {
    let mut env = vec![
        "PATH=/usr/sbin:/usr/bin:/sbin:/bin".to_string(),
        "LANG=C".to_string(),
    ];
    if let Some(conf) = slurm_conf {
        env.push(format!("SLURM_CONF={conf}"));
    }
    env
}

/// Forks a detached `program args...` with `env`. Returns once the intermediate child is gone;
/// the watchdog itself is not our child.
pub fn spawn_detached(program: &Path, args: &[String], env: &[String]) -> io::Result<()> {
    let to_c =
        |s: &str| CString::new(s).map_err(|e: NulError| io::Error::new(io::ErrorKind::InvalidInput, e));
    let program_c = to_c(&program.to_string_lossy())?;
    let mut argv_c = vec![program_c.clone()];
    for a in args {
        argv_c.push(to_c(a)?);
    }
    let envp_c: Vec<CString> = env.iter().map(|e| to_c(e)).collect::<io::Result<_>>()?;
    let mut argv: Vec<*const libc::c_char> = argv_c.iter().map(|a| a.as_ptr()).collect();
    argv.push(std::ptr::null());
    let mut envp: Vec<*const libc::c_char> = envp_c.iter().map(|e| e.as_ptr()).collect();
    envp.push(std::ptr::null());
    let dev_null = c"/dev/null";
    let oom_score_adj = c"/proc/self/oom_score_adj";
    // Where close_range is missing: every descriptor below slurmstepd's limit (often far above
    // 65536), read now: getrlimit is not on the async-signal-safe list.
    let open_max = open_max();

    // SAFETY: fork in a multi-threaded process; the child only makes async-signal-safe calls on
    // memory prepared above, then execs or _exits.
    let child = unsafe { libc::fork() };
    if child < 0 {
        return Err(io::Error::last_os_error());
    }
    if child == 0 {
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
            for signal in 1..=libc::SIGRTMAX() {
                if signal != libc::SIGKILL && signal != libc::SIGSTOP {
                    libc::sigaction(signal, &default, std::ptr::null_mut());
                }
            }
            let null = libc::open(dev_null.as_ptr(), libc::O_RDWR);
            if null >= 0 {
                libc::dup2(null, 0);
                libc::dup2(null, 1);
                libc::dup2(null, 2);
            }
            // Every other descriptor: close_range(3, ~0) where the kernel has it, else one by one.
            if libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32) != 0 {
                for fd in 3..open_max {
                    libc::close(fd);
                }
            }
            let adj = libc::open(oom_score_adj.as_ptr(), libc::O_WRONLY);
            if adj >= 0 {
                libc::write(adj, OOM_SCORE_ADJ.as_ptr().cast(), OOM_SCORE_ADJ.len());
                libc::close(adj);
            }
            libc::chdir(c"/".as_ptr());
            libc::umask(0o022);
            libc::execve(program_c.as_ptr(), argv.as_ptr(), envp.as_ptr());
            libc::_exit(127);
        }
    }
    // The intermediate child exits at once. slurmstepd's own wait3 loop may reap it first: then
    // waitpid says ECHILD, which is fine.
    let mut status = 0;
    // SAFETY: waiting for our own child.
    unsafe { libc::waitpid(child, &mut status, 0) };
    Ok(())
}
