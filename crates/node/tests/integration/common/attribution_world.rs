//! A node's /proc and cgroup mount in a temporary directory, written the way the kernel and Slurm
//! 22.05 write them, for the attribution rule's tests (attribute_fixtures, watchdog_attribution).
//!
//! The v1 cgroups Slurm makes have files owned by whoever owns the hierarchy's root (root on a
//! node; here whoever runs the test); a cgroup the job's user made has the user's files, which
//! takes root to write ([`World::can_chown`]).

#![allow(dead_code)] // each test file uses part of it

use std::fs;
use std::path::PathBuf;

/// `/proc` under `proc/`, the cgroup mount (`freezer/`, `memory/`) under `cgroup/`; removed when
/// dropped (even when the test fails).
pub(crate) struct World {
    dir: tempfile::TempDir,
}

/// The v1 prefix of a job of user 2001 on node n1.
pub(crate) fn v1_job(job: u32) -> String {
    format!("/slurm_n1/uid_2001/job_{job}")
}

impl World {
    pub(crate) fn new() -> World {
        let dir = tempfile::Builder::new().prefix("gmq-world-").tempdir().unwrap();
        let world = World { dir };
        for hierarchy in ["freezer", "memory"] {
            world.write(&format!("cgroup/{hierarchy}/cgroup.procs"), "");
        }
        world
    }

    /// Whether this test may give files to another user (it runs as root).
    pub(crate) fn can_chown() -> bool {
        // SAFETY: geteuid has no preconditions.
        unsafe { libc::geteuid() == 0 }
    }

    pub(crate) fn proc_root(&self) -> PathBuf {
        self.dir.path().join("proc")
    }

    pub(crate) fn cgroup_root(&self) -> PathBuf {
        self.dir.path().join("cgroup")
    }

    fn write(&self, relpath: &str, text: &str) {
        let path = self.dir.path().join(relpath);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, text).unwrap();
    }

    /// A cgroup Slurm made in v1 `hierarchy` (`freezer`, `memory`) at `path`.
    pub(crate) fn slurm_cgroup(&self, hierarchy: &str, path: &str) {
        for file in ["cgroup.procs", "tasks"] {
            self.write(&format!("cgroup/{hierarchy}{path}/{file}"), "");
        }
    }

    /// A cgroup user `uid` made with `mkdir` in v1 `hierarchy` at `path` (the kernel gives them
    /// its files). Needs [`World::can_chown`].
    pub(crate) fn user_cgroup(&self, hierarchy: &str, path: &str, uid: u32) {
        self.slurm_cgroup(hierarchy, path);
        let dir = self
            .cgroup_root()
            .join(hierarchy)
            .join(path.trim_start_matches('/'));
        for entry in [dir.clone(), dir.join("cgroup.procs"), dir.join("tasks")] {
            std::os::unix::fs::chown(&entry, Some(uid), Some(uid)).unwrap();
        }
    }

    /// A process (or its replacement with the same pid) with its v1 freezer and memory cgroups.
    pub(crate) fn process(
        &self,
        pid: u32,
        comm: &str,
        uid: u32,
        start_time: u64,
        freezer: &str,
        memory: &str,
    ) {
        let stat = format!(
            "{pid} ({comm}) S 1 {pid} 1 0 -1 4194304 76 0 0 0 0 0 0 0 20 0 1 0 {start_time} \
             2990080 420 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0 0\n"
        );
        let status = format!("Name:\t{comm}\nPPid:\t1\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n");
        let cgroup = format!("6:freezer:{freezer}\n4:memory:{memory}\n0::/\n");
        self.write(&format!("proc/{pid}/stat"), &stat);
        self.write(&format!("proc/{pid}/status"), &status);
        self.write(&format!("proc/{pid}/cgroup"), &cgroup);
        self.write(&format!("proc/{pid}/cmdline"), &format!("{comm}\0"));
    }

    /// The F2 node: user 2001 runs jobs 7 and 8 (step 0 each). Pid 510 is job 8's own process; pid
    /// 500 is job 7's GPU process that the user moved into `job_8/step_0/x` in the freezer
    /// hierarchy only; 501 moved into it in every hierarchy; 502 into `job_8/step_0/task_9` (a name
    /// Slurm uses, made by the user) in every hierarchy; 200 is a root slurmstepd. Needs
    /// [`World::can_chown`].
    pub(crate) fn moved_between_jobs() -> World {
        let world = World::new();
        let (a, b) = (v1_job(7), v1_job(8));
        for hierarchy in ["freezer", "memory"] {
            world.slurm_cgroup(hierarchy, &a);
            world.slurm_cgroup(hierarchy, &format!("{a}/step_0"));
            world.slurm_cgroup(hierarchy, &b);
            world.slurm_cgroup(hierarchy, &format!("{b}/step_0"));
            world.user_cgroup(hierarchy, &format!("{b}/step_0/x"), 2001);
            world.user_cgroup(hierarchy, &format!("{b}/step_0/task_9"), 2001);
        }
        let (a0, b0) = (format!("{a}/step_0"), format!("{b}/step_0"));
        let (bx, b9) = (format!("{b}/step_0/x"), format!("{b}/step_0/task_9"));
        world.process(500, "python3", 2001, 1000, &bx, &a0);
        world.process(501, "python3", 2001, 1001, &bx, &bx);
        world.process(502, "python3", 2001, 1002, &b9, &b9);
        world.process(510, "python3", 2001, 1003, &b0, &b0);
        world.process(200, "slurmstepd", 0, 900, &a, &a);
        world
    }
}

/// Prints why a test that needs root did nothing; returns whether it may go on.
pub(crate) fn needs_root(test: &str) -> bool {
    let root = World::can_chown();
    if !root {
        eprintln!("{test}: skipped, giving cgroup files to the job's user needs root");
    }
    root
}
