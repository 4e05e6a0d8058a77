//! The watchdog of a job's previous run, still here when the job restarts on the node (review G14):
//! the new run's prolog stops it, and kills it when it does not leave, so that the new run's
//! watchdog always gets the job's lock. Real processes, real signals, a real flock. Needs root (the
//! runtime directory must be root's) and perl (Debian's perl-base) for a process that holds a lock
//! and ignores SIGTERM in one; skipped otherwise.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::Duration;

use gmq_core::node_files::LOCK_FILE;
use gmq_node::attribute::identify;
use gmq_node::runtime::{self, EarlierWatchdog};

const JOB: u32 = 4242;
const PROC: &str = "/proc";

fn cannot_run() -> Option<&'static str> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root");
    }
    (!Path::new("/usr/bin/perl").exists()).then_some("no /usr/bin/perl")
}

/// A stand-in for the previous run's watchdog: it takes the job's lock, writes the pid file as a
/// watchdog does, and then either leaves on SIGTERM or ignores it.
fn earlier_watchdog(job_dir: &Path, ignores_sigterm: bool) -> u32 {
    let lock = job_dir.join(LOCK_FILE);
    let on_term = if ignores_sigterm { "IGNORE" } else { "DEFAULT" };
    let script = format!(
        "use Fcntl ':flock'; open(my $f, '>', $ARGV[0]) or die; flock($f, LOCK_EX) or die; \
         $SIG{{TERM}} = '{on_term}'; print \"locked\\n\"; STDOUT->flush(); sleep 60;"
    );
    let mut child = Command::new("/usr/bin/perl")
        .args(["-e", &script])
        .arg(&lock)
        .stdout(Stdio::piped())
        .spawn()
        .expect("perl");
    wait_for_line(&mut child);
    let pid = child.id();
    let identity = identify(Path::new(PROC), pid).expect("the child's /proc/PID/stat");
    runtime::write_pid_file(job_dir, identity).unwrap();
    // Reaped as soon as it ends, as init reaps a detached watchdog.
    thread::spawn(move || child.wait());
    pid
}

fn wait_for_line(child: &mut Child) {
    use std::io::Read;
    let mut byte = [0u8; 1];
    let out = child.stdout.as_mut().unwrap();
    while out.read(&mut byte).unwrap() == 1 && byte[0] != b'\n' {}
}

#[test]
fn a_previous_runs_watchdog_that_ignores_sigterm_is_killed_and_frees_the_lock() {
    if let Some(reason) = cannot_run() {
        eprintln!("skipped: {reason}");
        return;
    }
    let scratch = tempfile::tempdir().unwrap();
    let runtime_dir = scratch.path().join("run");
    let job_dir = runtime::create_job_dir(&runtime_dir, JOB).unwrap();
    let pid = earlier_watchdog(&job_dir, true);
    assert!(
        runtime::try_lock(&job_dir).unwrap().is_none(),
        "the earlier watchdog holds the lock"
    );

    let outcome =
        runtime::stop_earlier_watchdog(Path::new(PROC), &runtime_dir, JOB, Duration::from_millis(500));

    assert_eq!(outcome, EarlierWatchdog::Killed { pid });
    assert!(identify(Path::new(PROC), pid).is_none(), "pid {pid} is gone");
    assert!(
        runtime::try_lock(&job_dir).unwrap().is_some(),
        "the new run's watchdog gets the lock"
    );
}

#[test]
fn a_previous_runs_watchdog_that_leaves_on_sigterm_is_not_killed() {
    if let Some(reason) = cannot_run() {
        eprintln!("skipped: {reason}");
        return;
    }
    let scratch = tempfile::tempdir().unwrap();
    let runtime_dir = scratch.path().join("run");
    let job_dir = runtime::create_job_dir(&runtime_dir, JOB).unwrap();
    let pid = earlier_watchdog(&job_dir, false);

    let outcome = runtime::stop_earlier_watchdog(Path::new(PROC), &runtime_dir, JOB, Duration::from_secs(5));

    assert_eq!(outcome, EarlierWatchdog::Stopped { pid });
    assert!(runtime::try_lock(&job_dir).unwrap().is_some());
}

#[test]
fn no_pid_file_or_a_pid_file_of_a_process_long_gone_stops_nothing() {
    if let Some(reason) = cannot_run() {
        eprintln!("skipped: {reason}");
        return;
    }
    let scratch = tempfile::tempdir().unwrap();
    let runtime_dir = scratch.path().join("run");
    let job_dir = runtime::create_job_dir(&runtime_dir, JOB).unwrap();
    let grace = Duration::from_secs(5);
    assert_eq!(
        runtime::stop_earlier_watchdog(Path::new(PROC), &runtime_dir, JOB, grace),
        EarlierWatchdog::None
    );

    // This process's pid with another start time: a pid reused since the watchdog wrote its file.
    let mut reused = identify(Path::new(PROC), std::process::id()).unwrap();
    reused.start_time += 1;
    runtime::write_pid_file(&job_dir, reused).unwrap();
    assert_eq!(
        runtime::stop_earlier_watchdog(Path::new(PROC), &runtime_dir, JOB, grace),
        EarlierWatchdog::None
    );
}
