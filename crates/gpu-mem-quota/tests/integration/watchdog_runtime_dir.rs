//! The real `gpu-mem-quota watchdog` against a runtime directory it cannot use (docs/SAFETY.md, fault
//! table): it logs why, once, and exits at once with status 1; the job it was started for runs
//! unwatched (the plugin never waits for it; the e2e test
//! `a_runtime_dir_it_cannot_use_leaves_the_job_unwatched_and_unharmed` shows the job side).
//!
//! The watchdog runs as root, which permission bits do not stop: every case here fails for root too.
//! Each run is in its own mount namespace where the syslog sockets are empty files, so the watchdog
//! falls back to `<state_dir>/watchdog.log` and the test reads exactly what it logged. Needs root and
//! mount namespaces (`unshare -m`); skipped with the reason otherwise.

use std::fs;
use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::time::{Duration, Instant};

const JOB: u32 = 4242;

/// How long a watchdog that must exit at once may take, generously (the machine may be busy).
const PROMPT: Duration = Duration::from_secs(10);

/// One way the runtime directory can be unusable, set up under `base`; returns the runtime_dir to
/// name in the policy and, for a read-only mount, the directory to mount read-only in the namespace.
struct Case {
    name: &'static str,
    setup: fn(&Path) -> (PathBuf, Option<PathBuf>),
    /// What the log line must say about the cause.
    reason: fn(&Path) -> String,
}

const CASES: &[Case] = &[
    Case {
        name: "under-a-regular-file",
        setup: |base| {
            fs::write(base.join("file"), "").unwrap();
            (base.join("file/run"), None)
        },
        reason: |base| {
            format!(
                "{}: Not a directory (os error 20)",
                base.join("file/run").display()
            )
        },
    },
    Case {
        name: "read-only-filesystem",
        setup: |base| {
            fs::create_dir(base.join("ro")).unwrap();
            (base.join("ro/run"), Some(base.join("ro")))
        },
        reason: |base| {
            format!(
                "{}: Read-only file system (os error 30)",
                base.join("ro/run").display()
            )
        },
    },
    Case {
        name: "owned-by-a-user",
        setup: |base| {
            let dir = base.join("theirs");
            fs::create_dir(&dir).unwrap();
            std::os::unix::fs::chown(&dir, Some(2001), Some(2001)).unwrap();
            (dir, None)
        },
        reason: |base| {
            format!(
                "{} is owned by uid 2001, not root: refused, left as it is",
                base.join("theirs").display()
            )
        },
    },
    Case {
        name: "a-symlink",
        setup: |base| {
            fs::create_dir(base.join("elsewhere")).unwrap();
            symlink(base.join("elsewhere"), base.join("link")).unwrap();
            (base.join("link"), None)
        },
        reason: |base| {
            format!(
                "{} is a symlink: refused, left as it is",
                base.join("link").display()
            )
        },
    },
    // F12: a shared directory such as /tmp named as the runtime_dir is refused, not chmodded.
    Case {
        name: "world-writable-sticky",
        setup: |base| {
            let dir = base.join("sharedtmp");
            fs::create_dir(&dir).unwrap();
            fs::set_permissions(&dir, fs::Permissions::from_mode(0o1777)).unwrap();
            (dir, None)
        },
        reason: |base| {
            format!(
                "{} is writable by group or others (mode 1777): refused, left as it is",
                base.join("sharedtmp").display()
            )
        },
    },
    Case {
        name: "sticky-only",
        setup: |base| {
            let dir = base.join("sticky");
            fs::create_dir(&dir).unwrap();
            fs::set_permissions(&dir, fs::Permissions::from_mode(0o1755)).unwrap();
            (dir, None)
        },
        reason: |base| {
            format!(
                "{} has the sticky bit, a shared directory (mode 1755): refused, left as it is",
                base.join("sticky").display()
            )
        },
    },
    Case {
        name: "group-writable",
        setup: |base| {
            let dir = base.join("group");
            fs::create_dir(&dir).unwrap();
            fs::set_permissions(&dir, fs::Permissions::from_mode(0o775)).unwrap();
            (dir, None)
        },
        reason: |base| {
            format!(
                "{} is writable by group or others (mode 0775): refused, left as it is",
                base.join("group").display()
            )
        },
    },
];

/// Owner and mode of `path` itself (not following a symlink), if it exists.
fn owner_and_mode(path: &Path) -> Option<(u32, u32)> {
    fs::symlink_metadata(path)
        .ok()
        .map(|m| (m.uid(), m.mode() & 0o7777))
}

/// Why this machine cannot run these tests, if it cannot.
fn cannot_run() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root: permission bits would be the only obstacle, and mounts need root".into());
    }
    match Command::new("unshare").args(["-m", "true"]).status() {
        Ok(status) if status.success() => None,
        Ok(status) => Some(format!(
            "`unshare -m true` failed ({status}): no mount namespaces here"
        )),
        Err(e) => Some(format!("cannot run unshare: {e}")),
    }
}

/// Runs the watchdog for `JOB` with `config` in a mount namespace without syslog, `read_only`
/// mounted as a read-only tmpfs there; waits for it to exit (killing it after `PROMPT`).
fn run_watchdog(base: &Path, config: &Path, read_only: Option<&Path>) -> Option<ExitStatus> {
    let empty = base.join("not-a-socket");
    fs::write(&empty, "").unwrap();
    let script = r#"
        for socket in /dev/log /var/run/syslog /var/run/log; do
            if [ -S "$socket" ]; then mount --bind "$0" "$socket" || exit 98; fi
        done
        if [ -n "$1" ]; then mount -t tmpfs -o ro,size=16k gmq-test "$1" || exit 99; fi
        shift
        exec "$@"
    "#;
    let mut child = Command::new("unshare")
        .args(["-m", "--propagation", "private", "sh", "-c", script])
        .arg(&empty)
        .arg(read_only.map(|p| p.as_os_str()).unwrap_or_default())
        .arg(env!("CARGO_BIN_EXE_gpu-mem-quota"))
        .args([
            "watchdog".to_string(),
            format!("--job={JOB}"),
            "--uid=0".into(),
            "--gid=0".into(),
            "--gpus=0".into(),
            format!("--config={}", config.display()),
            "--quota-bytes=42949672960".into(),
        ])
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .spawn()
        .expect("unshare");
    let end = Instant::now() + PROMPT;
    while Instant::now() < end {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

#[test]
fn an_unusable_runtime_dir_is_logged_once_and_the_watchdog_exits() {
    if let Some(reason) = cannot_run() {
        eprintln!("skipped: {reason}");
        return;
    }
    for case in CASES {
        let scratch = tempfile::Builder::new()
            .prefix(&format!("gmq-runtime-dir-{}-", case.name))
            .tempdir()
            .unwrap();
        // The mode a directory made with the usual umask has (tempfile makes it 0700), so that
        // each case's own directory is the only thing wrong.
        fs::set_permissions(scratch.path(), fs::Permissions::from_mode(0o755)).unwrap();
        let base = scratch.path();
        let (runtime_dir, read_only) = (case.setup)(base);
        let state_dir = base.join("state");
        let config = base.join("policy.toml");
        fs::write(
            &config,
            format!(
                "[defaults]\ndefault = \"none\"\n\n[enforcement]\nruntime_dir = \"{}\"\nstate_dir = \"{}\"\n",
                runtime_dir.display(),
                state_dir.display()
            ),
        )
        .unwrap();

        let before = owner_and_mode(&runtime_dir);
        let status = run_watchdog(base, &config, read_only.as_deref());
        let log = fs::read_to_string(state_dir.join("watchdog.log")).unwrap_or_default();
        assert_eq!(
            status.map(|s| s.code()),
            Some(Some(1)),
            "{}: the watchdog must exit with status 1 at once; log: {log}",
            case.name
        );
        let expected = format!(
            "error: job {JOB}: cannot create the job's runtime directory {}/jobs/{JOB}: {}; \
             the job runs unwatched",
            runtime_dir.display(),
            (case.reason)(base)
        );
        let lines: Vec<&str> = log.lines().collect();
        assert_eq!(lines.len(), 1, "{}: one line, and only that: {log}", case.name);
        // The line ends with the node's name (watchdog/log.rs).
        assert!(
            lines[0].contains(&format!("{expected} (node ")),
            "{}: {log}\nexpected: {expected}",
            case.name
        );
        // Left exactly as it was: owner and mode unchanged.
        assert_eq!(owner_and_mode(&runtime_dir), before, "{}", case.name);
        // Nothing was made in its place: no jobs directory, nothing through the symlink.
        assert!(!runtime_dir.join("jobs").exists(), "{}", case.name);
        assert!(!base.join("elsewhere/jobs").exists(), "{}", case.name);
        scratch.close().unwrap();
    }
}
