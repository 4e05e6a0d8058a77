//! Who can read what in the runtime directory (F11, G4): the real modes and owners on a real directory,
//! and the attacks made as the ordinary user `gmq-user` (uid 2001). Job 101 is gmq-user's; job 102
//! is another user's (uid 2002) whose primary group is gmq-user's own (2001), as on clusters where
//! every user's primary group is `users`. Needs root and the user `gmq-user`; skipped otherwise.

use std::fs;
use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::{Command, Output};

use gmq_core::node_files;
use gmq_node::runtime;
use gmq_node::textfile::{self, Access};

const USER: &str = "gmq-user";
const USER_UID: u32 = 2001;
const OTHER_UID: u32 = 2002;

fn cannot_run() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root".into());
    }
    match Command::new("id").args(["-u", USER]).output() {
        Ok(out) if String::from_utf8_lossy(&out.stdout).trim() == USER_UID.to_string() => None,
        _ => Some(format!("no user {USER} with uid {USER_UID}")),
    }
}

fn as_user(args: &[&str]) -> Output {
    Command::new("runuser")
        .args(["-u", USER, "--"])
        .args(args)
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .output()
        .expect("runuser")
}

fn owner_mode(path: &Path) -> (u32, u32, u32) {
    let meta = fs::symlink_metadata(path).unwrap();
    (meta.uid(), meta.gid(), meta.mode() & 0o7777)
}

fn status_json(job: u32) -> String {
    format!("{{\"version\":1,\"job_id\":{job},\"updated_at\":1,\"quota_bytes\":1,\"gpus\":[]}}")
}

/// Sets up jobs 101 and 102 as their watchdogs would.
fn watched_jobs(runtime_dir: &Path) {
    for (job, uid) in [(101, USER_UID), (102, OTHER_UID)] {
        let dir = runtime::create_job_dir(runtime_dir, job).unwrap();
        let _lock = runtime::try_lock(&dir).unwrap().unwrap();
        let me = gmq_node::attribute::ProcessIdentity {
            pid: std::process::id(),
            start_time: 1,
        };
        runtime::write_pid_file(&dir, me).unwrap();
        let status = status_json(job);
        textfile::write_atomically_as(&dir, node_files::STATUS_FILE, &status, Access::readable_by(uid))
            .unwrap();
        textfile::write_atomically_as(&dir, node_files::RECORD_FILE, "gmq1 ...", Access::ROOT_ONLY).unwrap();
    }
}

#[test]
fn a_user_reads_their_own_status_and_nothing_else_of_any_job() {
    if let Some(reason) = cannot_run() {
        eprintln!("skipped: {reason}");
        return;
    }
    let scratch = tempfile::Builder::new().prefix("gmq-perms-").tempdir().unwrap();
    // gmq-user must get through it to its own status file and to the policy (tempfile makes it 0700).
    fs::set_permissions(scratch.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let runtime_dir = scratch.path().join("run");
    watched_jobs(&runtime_dir);

    // The modes and owners, as root sees them.
    let jobs = node_files::jobs_dir(&runtime_dir);
    assert_eq!(owner_mode(&runtime_dir), (0, 0, 0o755));
    assert_eq!(owner_mode(&jobs), (0, 0, 0o711));
    for job in [101, 102] {
        let dir = node_files::job_dir(&runtime_dir, job);
        assert_eq!(owner_mode(&dir), (0, 0, 0o711), "job {job}");
        assert_eq!(
            owner_mode(&dir.join(node_files::STATUS_FILE)),
            (0, 0, 0o440),
            "job {job}"
        );
        for name in [
            node_files::RECORD_FILE,
            node_files::PID_FILE,
            node_files::LOCK_FILE,
        ] {
            assert_eq!(owner_mode(&dir.join(name)), (0, 0, 0o600), "job {job} {name}");
        }
        // Nothing else: every temporary was renamed.
        assert_eq!(fs::read_dir(&dir).unwrap().count(), 4, "job {job}");
    }

    // The attacks, as gmq-user.
    let path = |job: u32, name: &str| {
        node_files::job_dir(&runtime_dir, job)
            .join(name)
            .display()
            .to_string()
    };
    let own = as_user(&["cat", &path(101, node_files::STATUS_FILE)]);
    assert!(own.status.success(), "{own:?}");
    assert_eq!(String::from_utf8_lossy(&own.stdout), status_json(101));
    // G4: the user reads their status file but cannot make it writable, nor keep it open for
    // writing, to fill the runtime filesystem through the inode once a new file replaces it.
    let status = path(101, node_files::STATUS_FILE);
    for attack in [
        vec!["chmod", "600", status.as_str()],
        vec!["sh", "-c", "exec 3>>\"$0\"", status.as_str()],
    ] {
        let out = as_user(&attack);
        assert!(!out.status.success(), "{attack:?} as {USER}: {out:?}");
    }
    assert_eq!(owner_mode(Path::new(&status)), (0, 0, 0o440));
    for (job, name) in [
        (102, node_files::STATUS_FILE),
        (101, node_files::RECORD_FILE),
        (102, node_files::RECORD_FILE),
        (101, node_files::PID_FILE),
    ] {
        let out = as_user(&["cat", &path(job, name)]);
        assert!(
            !out.status.success(),
            "job {job} {name} readable by {USER}: {out:?}"
        );
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("Permission denied"),
            "{out:?}"
        );
    }
    for dir in [jobs.clone(), node_files::job_dir(&runtime_dir, 101)] {
        let out = as_user(&["ls", &dir.display().to_string()]);
        assert!(
            !out.status.success(),
            "{} listable by {USER}: {out:?}",
            dir.display()
        );
    }

    // `gpu-mem-quota status` as gmq-user, from a process of job 101 (a child of a root process
    // titled like slurmstepd, which is how the watchdog attributes processes without cgroups):
    // job 101 and only job 101.
    let config = scratch.path().join("policy.toml");
    fs::write(
        &config,
        format!(
            "[enforcement]\nruntime_dir = \"{}\"\nstate_dir = \"{}\"\n",
            runtime_dir.display(),
            scratch.path().join("state").display()
        ),
    )
    .unwrap();
    let stepd = scratch.path().join("slurmstepd");
    symlink("/bin/sh", &stepd).unwrap();
    let script = format!(
        "runuser -u {USER} -- {} status --json --config {}\nexit $?\n",
        env!("CARGO_BIN_EXE_gpu-mem-quota"),
        config.display()
    );
    let out = Command::new("bash")
        .args(["-c", "exec -a 'slurmstepd: [101.0]' \"$0\" < \"$1\""])
        .arg(&stepd)
        .arg({
            let file = scratch.path().join("script");
            fs::write(&file, script).unwrap();
            file
        })
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(text.contains("\"job_id\":101"), "{text}");
    assert!(!text.contains("102"), "another user's job shows: {text}");

    // Root lists them all.
    let node = gmq_commands::report::read_node(&runtime_dir, true).unwrap();
    assert_eq!(node.jobs.iter().map(|j| j.job_id).collect::<Vec<_>>(), [101, 102]);
}
