//! Attribution over time: pid reuse, vanished processes, deep ancestry, a job's cgroup directory
//! and its end on the node; and the real /proc of this machine.

use std::fs;
use std::path::{Path, PathBuf};

use gmq_node::attribute::{
    identify, job_active_on_node, job_cgroup, owner_of, same_process, Claim, Evidence, JobCgroup, Level,
    Owner, ProcessIdentity, StepName,
};

/// A fresh directory per test, removed when dropped (even when the test fails).
struct TempDir(tempfile::TempDir);

impl TempDir {
    fn new() -> TempDir {
        TempDir(
            tempfile::Builder::new()
                .prefix("gmq-attribute-")
                .tempdir()
                .unwrap(),
        )
    }

    fn path(&self) -> &Path {
        self.0.path()
    }

    /// Writes `text` to `relpath`, creating directories.
    fn write(&self, relpath: &str, text: &str) {
        let path = self.path().join(relpath);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, text).unwrap();
    }
}

fn fixture(tree: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/proc")
        .join(tree)
}

/// A process in a proc root, in the kernel's formats.
struct FakeProcess<'a> {
    pid: u32,
    comm: &'a str,
    ppid: u32,
    uid: u32,
    start_time: u64,
    cgroup: &'a str,
    cmdline: &'a str,
}

impl FakeProcess<'_> {
    fn write_to(&self, proc_root: &TempDir) {
        let FakeProcess {
            pid,
            comm,
            ppid,
            uid,
            start_time,
            cgroup,
            cmdline,
        } = self;
        let stat = format!(
            "{pid} ({comm}) S {ppid} {pid} {ppid} 0 -1 4194304 76 0 0 0 0 0 0 0 20 0 1 0 {start_time} \
             2990080 420 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0 0\n"
        );
        let status = format!("Name:\t{comm}\nPPid:\t{ppid}\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n");
        proc_root.write(&format!("{pid}/stat"), &stat);
        proc_root.write(&format!("{pid}/status"), &status);
        proc_root.write(&format!("{pid}/cgroup"), cgroup);
        proc_root.write(&format!("{pid}/cmdline"), cmdline);
    }
}

const NO_JOB: &str = "6:freezer:/\n0::/\n";
const JOB_12_STEP_0: &str = "6:freezer:/slurm_vm/uid_2001/job_12/step_0\n0::/\n";

fn task(pid: u32, start_time: u64, cgroup: &str) -> FakeProcess<'_> {
    FakeProcess {
        pid,
        comm: "python3",
        ppid: 1,
        uid: 2001,
        start_time,
        cgroup,
        cmdline: "python3\0",
    }
}

#[test]
fn a_reused_pid_is_another_process() {
    let proc_root = TempDir::new();
    task(4242, 1006, JOB_12_STEP_0).write_to(&proc_root);
    let first = identify(proc_root.path(), 4242).unwrap();
    assert_eq!(
        first,
        ProcessIdentity {
            pid: 4242,
            start_time: 1006
        }
    );
    assert!(same_process(proc_root.path(), &first));
    // Slurm's step cgroup: root's files (here: the files of whoever runs the test, who also owns
    // the hierarchy's root).
    let cgroups = TempDir::new();
    cgroups.write("freezer/cgroup.procs", "");
    cgroups.write("freezer/slurm_vm/uid_2001/job_12/step_0/cgroup.procs", "4242\n");
    cgroups.write("freezer/slurm_vm/uid_2001/job_12/step_0/tasks", "4242\n");
    let owner = owner_of(proc_root.path(), cgroups.path(), 4242);
    assert_eq!(
        owner,
        Owner::Process {
            process: first,
            real_uid: 2001,
            claims: vec![Claim {
                job_id: 12,
                step: Some(StepName::Numbered(0)),
                level: Level::Slurm,
                evidence: Evidence::Cgroup
            }],
        }
    );

    // The task exits; a process of nobody's gets its pid.
    task(4242, 7777, NO_JOB).write_to(&proc_root);
    assert!(!same_process(proc_root.path(), &first));
    assert_eq!(
        identify(proc_root.path(), 4242),
        Some(ProcessIdentity {
            pid: 4242,
            start_time: 7777
        })
    );
    let nobodys = owner_of(proc_root.path(), cgroups.path(), 4242);
    assert_eq!(nobodys.claims(), &[]);
    assert_eq!(
        nobodys.process(),
        Some(ProcessIdentity {
            pid: 4242,
            start_time: 7777
        })
    );

    // And exits too.
    fs::remove_dir_all(proc_root.path().join("4242")).unwrap();
    assert!(!same_process(proc_root.path(), &first));
    assert_eq!(identify(proc_root.path(), 4242), None);
    assert_eq!(owner_of(proc_root.path(), cgroups.path(), 4242), Owner::Gone);
}

#[test]
fn identities_from_fixtures() {
    let root = fixture("v1-hybrid");
    let cases = [(226, Some(1007)), (1, Some(5)), (999, None)];
    for (pid, start_time) in cases {
        let want = start_time.map(|start_time| ProcessIdentity { pid, start_time });
        assert_eq!(identify(&root, pid), want, "pid {pid}");
    }
    assert!(!same_process(
        &root,
        &ProcessIdentity {
            pid: 226,
            start_time: 1008
        }
    ));
}

#[test]
fn ancestry_is_bounded() {
    // A stepd, then a chain of 70 descendants, each the child of the one before.
    let proc_root = TempDir::new();
    let stepd = FakeProcess {
        pid: 700,
        comm: "slurmstepd",
        ppid: 1,
        uid: 0,
        start_time: 100,
        cgroup: NO_JOB,
        cmdline: "slurmstepd: [14.0]\0",
    };
    stepd.write_to(&proc_root);
    for pid in 701..=770 {
        FakeProcess {
            ppid: pid - 1,
            start_time: u64::from(pid),
            ..task(pid, 0, NO_JOB)
        }
        .write_to(&proc_root);
    }
    // 64 ancestors are looked at, no more.
    let no_cgroups = proc_root.path().join("no-cgroups");
    let owner = owner_of(proc_root.path(), &no_cgroups, 764);
    let jobs: Vec<(u32, Level, Evidence)> = owner
        .claims()
        .iter()
        .map(|c| (c.job_id, c.level, c.evidence))
        .collect();
    assert_eq!(jobs, [(14, Level::Slurm, Evidence::Ancestry)]);
    let beyond = owner_of(proc_root.path(), &no_cgroups, 765);
    assert!(
        beyond.process().is_some() && beyond.claims().is_empty(),
        "{beyond:?}"
    );
}

/// A v1 node's cgroup mount holding job 12 (see the v1-hybrid fixture), with the watchdog
/// (pid 230) in the job's own cgroup.
fn v1_cgroups() -> TempDir {
    let root = TempDir::new();
    let job = "freezer/slurm_vm/uid_2001/job_12";
    root.write(&format!("{job}/cgroup.procs"), "200\n210\n220\n230\n");
    root.write(&format!("{job}/step_extern/cgroup.procs"), "201\n");
    root.write(&format!("{job}/step_batch/cgroup.procs"), "215\n216\n");
    root.write(&format!("{job}/step_0/cgroup.procs"), "225\n226\n");
    root.write(
        "memory/slurm_vm/uid_2001/job_12/step_0/task_0/cgroup.procs",
        "430\n",
    );
    root
}

#[test]
fn the_job_cgroup_of_a_pid() {
    let proc_root = fixture("v1-hybrid");
    let cgroups = v1_cgroups();
    let freezer_dir = cgroups.path().join("freezer/slurm_vm/uid_2001/job_12");
    let memory_dir = cgroups.path().join("memory/slurm_vm/uid_2001/job_12");
    let cases = [
        (
            230,
            Some(freezer_dir.clone()),
            "the watchdog, in the job's cgroup",
        ),
        (225, Some(freezer_dir.clone()), "a task"),
        (430, Some(memory_dir), "only the memory hierarchy has it"),
        (305, None, "job 123 has no directory here"),
        (420, None, "two jobs"),
        (400, None, "no job"),
        (999, None, "gone"),
    ];
    for (pid, dir, why) in cases {
        let want = dir.map(|dir| JobCgroup { job_id: 12, dir });
        assert_eq!(
            job_cgroup(&proc_root, cgroups.path(), pid),
            want,
            "pid {pid}: {why}"
        );
    }
}

#[test]
fn the_job_cgroup_on_v2() {
    let proc_root = fixture("v2");
    let job = "system.slice/slurmstepd.scope/job_12";
    // Pure v2: the mount itself has cgroup.controllers. Hybrid: the v2 mount is `unified`.
    for mount in ["", "unified/"] {
        let cgroups = TempDir::new();
        cgroups.write(&format!("{mount}cgroup.controllers"), "cpu memory pids\n");
        cgroups.write(&format!("{mount}{job}/step_0/user/task_0/cgroup.procs"), "225\n");
        let dir = cgroups.path().join(format!("{mount}{job}"));
        assert_eq!(
            job_cgroup(&proc_root, cgroups.path(), 225),
            Some(JobCgroup { job_id: 12, dir }),
            "mount {mount:?}"
        );
        assert_eq!(
            job_cgroup(&proc_root, cgroups.path(), 410),
            None,
            "look-alike, mount {mount:?}"
        );
    }
}

#[test]
fn a_job_ends_on_the_node() {
    let cgroups = v1_cgroups();
    let job_dir = cgroups.path().join("freezer/slurm_vm/uid_2001/job_12");
    let watchdog = [230];
    assert!(job_active_on_node(&job_dir, &watchdog).unwrap());

    // Steps end one by one; Slurm removes their directories.
    fs::remove_dir_all(job_dir.join("step_0")).unwrap();
    fs::remove_dir_all(job_dir.join("step_batch")).unwrap();
    assert!(
        job_active_on_node(&job_dir, &watchdog).unwrap(),
        "the extern step still runs"
    );

    // The extern step's directory left behind, empty: the job has nothing left here. The
    // processes in the job's own cgroup (stepds, the watchdog) are not a step.
    fs::write(job_dir.join("step_extern/cgroup.procs"), "").unwrap();
    assert!(!job_active_on_node(&job_dir, &watchdog).unwrap());

    fs::remove_dir_all(&job_dir).unwrap();
    assert!(
        !job_active_on_node(&job_dir, &watchdog).unwrap(),
        "the job's directory is gone"
    );
}

#[test]
fn a_v2_job_ends_on_the_node() {
    let cgroups = TempDir::new();
    let job = "system.slice/slurmstepd.scope/job_12";
    cgroups.write("cgroup.controllers", "");
    cgroups.write(&format!("{job}/step_extern/slurm/cgroup.procs"), "200\n");
    cgroups.write(&format!("{job}/step_extern/cgroup.procs"), "");
    cgroups.write(&format!("{job}/step_0/user/task_0/cgroup.procs"), "225\n");
    let job_dir = cgroups.path().join(job);
    // On v2 the watchdog lives where the extern stepd that spawned it lives.
    let watchdog = [231];
    assert!(job_active_on_node(&job_dir, &watchdog).unwrap());
    fs::write(job_dir.join("step_0/user/task_0/cgroup.procs"), "").unwrap();
    assert!(
        job_active_on_node(&job_dir, &watchdog).unwrap(),
        "the extern stepd still runs"
    );
    fs::write(job_dir.join("step_extern/slurm/cgroup.procs"), "231\n").unwrap();
    assert!(
        !job_active_on_node(&job_dir, &watchdog).unwrap(),
        "only the watchdog is left"
    );
}

#[test]
fn this_process_on_the_real_proc() {
    let proc_root = Path::new("/proc");
    let me = std::process::id();
    let identity = identify(proc_root, me).expect("this process has a /proc entry");
    assert!(same_process(proc_root, &identity));
    assert!(!same_process(
        proc_root,
        &ProcessIdentity {
            pid: me,
            start_time: identity.start_time + 1
        }
    ));
    // Run inside a Slurm job (CI on a cluster), this process is that job's; anywhere else, nobody's.
    let job: Option<u32> = std::env::var("SLURM_JOB_ID").ok().and_then(|id| id.parse().ok());
    let cgroup_root = Path::new("/sys/fs/cgroup");
    let owner = owner_of(proc_root, cgroup_root, me);
    assert_eq!(owner.process(), Some(identity));
    let jobs: Vec<u32> = owner.claims().iter().map(|c| c.job_id).collect();
    assert_eq!(jobs, job.into_iter().collect::<Vec<_>>(), "{owner:?}");
    // Pid 0 never has a /proc entry.
    assert_eq!(owner_of(proc_root, cgroup_root, 0), Owner::Gone);
}
