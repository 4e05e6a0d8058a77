//! Attribution, the job's directory, presence and the epilog sweep on cgroup/v2 nodes as Slurm
//! 24.11 and 26.05 make them (crates/node/tests/fixtures/cgroup-v2, written by its
//! make-fixtures.py from cgroup_v2.c): 24.11 names a job's directory `job_<id>`, 26.05 its SLUID.
//! cgroup/v2 cannot run on the dev machines (hybrid hosts), so this is where its paths are proven.

use std::fs;
use std::path::{Path, PathBuf};

use gmq_core::sluid::Sluid;
use gmq_core::watchdog::Attributor;
use gmq_node::attribute::{
    find_job_dir, job_active_on_node, job_cgroup, owner_of, sweep_leftovers, Evidence, JobCgroup, JobOnNode,
    LeftoverOutcome, Level, Owner, ProcAttributor, StepName,
};

/// One of the trees: its /proc, its v2 mount, and its jobs A (uid 2001), B (uid 2002), C (uid
/// 2001, ending).
struct Node {
    root: PathBuf,
    /// slurmd's scope below the v2 mount: Debian's `n1_slurmstepd.scope` (24.11, as seen live),
    /// upstream's `slurmstepd.scope` (26.05).
    scope: &'static str,
    jobs: [JobOnNode; 3],
}

impl Node {
    fn slurm_24_11() -> Node {
        let job = |job_id, uid| JobOnNode {
            job_id,
            uid,
            sluid: None,
        };
        Node::at(
            "slurm-24.11",
            "system.slice/n1_slurmstepd.scope",
            [job(500001, 2001), job(500002, 2002), job(500003, 2001)],
        )
    }

    fn slurm_26_05() -> Node {
        let job = |job_id, uid, sluid| JobOnNode {
            job_id,
            uid,
            sluid: Sluid::parse(sluid),
        };
        Node::at(
            "slurm-26.05",
            "system.slice/slurmstepd.scope",
            [
                job(900001, 2001, "s4T9KSR4920000"),
                job(900002, 2002, "s4T9KSR4920001"),
                job(900003, 2001, "s4T9KSR4920002"),
            ],
        )
    }

    fn at(name: &str, scope: &'static str, jobs: [JobOnNode; 3]) -> Node {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/cgroup-v2")
            .join(name);
        Node { root, scope, jobs }
    }

    fn proc_root(&self) -> PathBuf {
        self.root.join("proc")
    }

    fn cgroup_root(&self) -> PathBuf {
        self.root.join("cgroup")
    }

    /// The directory Slurm makes for `job`: its SLUID where it has one (26.05), else `job_<id>`.
    fn job_dir(&self, job: &JobOnNode) -> PathBuf {
        let name = job.sluid.map_or(format!("job_{}", job.job_id), |s| s.to_string());
        self.cgroup_root().join(self.scope).join(name)
    }

    /// The jobs and steps that claim `pid` (all at Slurm's levels, from cgroups), or `None` for
    /// a slurmstepd.
    fn claims(&self, pid: u32) -> Claims {
        match owner_of(&self.proc_root(), &self.cgroup_root(), pid) {
            Owner::Process { claims, .. } => Some(
                claims
                    .into_iter()
                    .inspect(|c| {
                        assert_eq!(
                            (c.level, c.evidence),
                            (Level::Slurm, Evidence::Cgroup),
                            "pid {pid}"
                        )
                    })
                    .map(|c| (c.job_id, c.step))
                    .collect(),
            ),
            Owner::Slurmstepd { .. } => None,
            Owner::Gone => panic!("pid {pid} is in the fixture"),
        }
    }
}

/// The jobs and steps that claim a process; `None`: a slurmstepd.
type Claims = Option<Vec<(u32, Option<StepName>)>>;

fn both() -> [Node; 2] {
    [Node::slurm_24_11(), Node::slurm_26_05()]
}

#[test]
fn processes_count_for_the_job_whose_directory_holds_them() {
    use StepName::*;
    for node in both() {
        let [a, b, c] = node.jobs.clone().map(|j| j.job_id);
        let name = node.root.display().to_string();
        let cases: &[(u32, Claims, &str)] = &[
            (1, Some(vec![]), "init"),
            (100, Some(vec![]), "slurmd"),
            (150, None, "slurmstepd infinity, in the scope's system/"),
            (200, None, "the extern step's slurmstepd"),
            (
                201,
                Some(vec![(a, Some(Extern))]),
                "the extern step's sleep, in task_special",
            ),
            (210, None, "the batch slurmstepd"),
            (215, Some(vec![(a, Some(Batch))]), "the batch script"),
            (225, Some(vec![(a, Some(Numbered(0)))]), "task 0 of step 0"),
            (226, Some(vec![(a, Some(Numbered(0)))]), "task 1 of step 0"),
            (230, Some(vec![]), "the watchdog, in slurmd's cgroup"),
            (301, None, "a root slurmstepd outside the job it is listed in"),
            (305, Some(vec![(b, Some(Numbered(0)))]), "another user's job"),
            (400, Some(vec![]), "the user's process outside Slurm"),
            (
                410,
                Some(vec![]),
                "a look-alike path in the user's delegated subtree",
            ),
        ];
        for (pid, want, why) in cases {
            assert_eq!(&node.claims(*pid), want, "{name}: pid {pid}: {why}");
        }
        // Job C's steps have ended: on 24.11 its directory names it; 26.05's SLUID names no job
        // number, and no slurmstepd is left to say it, so no job claims the process (it counts
        // for the job's watchdog only as the user's process on the job's GPU).
        let left = node.claims(505).unwrap();
        if node.jobs[2].sluid.is_some() {
            assert_eq!(left, vec![], "{name}");
        } else {
            assert_eq!(left, vec![(c, Some(Numbered(0)))], "{name}");
        }
    }
}

#[test]
fn a_watchdog_counts_its_jobs_processes_and_no_others() {
    for node in both() {
        let a = &node.jobs[0];
        let mut watchdog = ProcAttributor::new(a.job_id, a.uid, node.proc_root(), node.cgroup_root());
        watchdog.new_sample(true);
        let name = node.root.display().to_string();
        // (pid, listed on one of the job's GPUs, counts)
        for (pid, on_job_gpu, want) in [
            (225, false, true),
            (226, true, true),
            (215, false, true),
            (305, true, false),
            (200, true, false),
            (400, true, true),
            (400, false, false),
        ] {
            assert_eq!(watchdog.is_ours(pid, on_job_gpu), Some(want), "{name}: pid {pid}");
        }
        let b = &node.jobs[1];
        let mut other = ProcAttributor::new(b.job_id, b.uid, node.proc_root(), node.cgroup_root());
        other.new_sample(true);
        assert_eq!(
            other.is_ours(225, true),
            Some(false),
            "{name}: job A's task on B's GPU"
        );
        assert_eq!(other.is_ours(305, false), Some(true), "{name}");
    }
}

#[test]
fn the_jobs_directory_is_found_by_its_id_or_its_sluid() {
    for node in both() {
        let name = node.root.display().to_string();
        for job in &node.jobs {
            assert_eq!(
                find_job_dir(&node.cgroup_root(), job),
                Some(node.job_dir(job)),
                "{name}"
            );
        }
        let a = &node.jobs[0];
        if a.sluid.is_some() {
            // Without the SLUID (a watchdog not told it) there is nothing named job_<id> on 26.05.
            let unnamed = JobOnNode {
                sluid: None,
                ..a.clone()
            };
            assert_eq!(find_job_dir(&node.cgroup_root(), &unnamed), None, "{name}");
        }
        // The hard limit's namespace: the job's cgroup, found from a task's own cgroup line.
        assert_eq!(
            job_cgroup(&node.proc_root(), &node.cgroup_root(), 225),
            Some(JobCgroup {
                job_id: a.job_id,
                dir: node.job_dir(a),
            }),
            "{name}"
        );
        assert_eq!(
            job_cgroup(&node.proc_root(), &node.cgroup_root(), 410),
            None,
            "{name}"
        );
        // Presence: A's steps hold processes besides the watchdog; C's only a leftover in step_0.
        assert!(job_active_on_node(&node.job_dir(a), &[230]).unwrap(), "{name}");
        assert!(
            job_active_on_node(&node.job_dir(&node.jobs[2]), &[]).unwrap(),
            "{name}"
        );
        let gone = node.cgroup_root().join(node.scope).join("job_1");
        assert!(!job_active_on_node(&gone, &[]).unwrap(), "{name}");
    }
}

#[test]
fn the_epilog_sweep_finds_what_is_left_in_the_jobs_directory() {
    for node in both() {
        let name = node.root.display().to_string();
        let swept = |job: &JobOnNode| -> Vec<(u32, LeftoverOutcome)> {
            let sweep = sweep_leftovers(&node.proc_root(), job, false);
            assert!(!sweep.cut_short, "{name}");
            sweep.leftovers.into_iter().map(|l| (l.pid, l.outcome)).collect()
        };
        assert_eq!(swept(&node.jobs[2]), [(505, LeftoverOutcome::Reported)], "{name}");
        // Job A (still running here): its user's processes; Slurm's own (root's) are not even
        // looked at for a job of an ordinary user.
        let a: Vec<_> = swept(&node.jobs[0]);
        let want = [
            (215, LeftoverOutcome::Reported),
            (225, LeftoverOutcome::Reported),
            (226, LeftoverOutcome::Reported),
        ];
        assert_eq!(a, want, "{name}");
        // As if root ran job A: its slurmstepds and root's processes, every one left alone (K10).
        let as_root = JobOnNode {
            uid: 0,
            ..node.jobs[0].clone()
        };
        let stepd = LeftoverOutcome::Slurmstepd;
        let want = [
            (200, stepd.clone()),
            (201, LeftoverOutcome::Root),
            (210, stepd.clone()),
            (220, stepd),
        ];
        assert_eq!(swept(&as_root), want, "{name}");
    }
}

/// OWNERS (git keeps no owners) says what cgroup_v2.c gives each directory: root, at every level
/// Slurm makes, task directories included; and it lists every directory of the trees.
#[test]
fn slurm_makes_every_v2_directory_roots() {
    for node in both() {
        let owners = fs::read_to_string(node.root.join("OWNERS")).unwrap();
        let listed: Vec<(&str, &str)> = owners
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| l.split_once(' ').unwrap())
            .collect();
        for (path, owner) in &listed {
            if path.trim_start_matches('/').starts_with(node.scope) {
                assert_eq!(*owner, "0 0", "{path}");
            } else {
                assert!(path.contains("/user@2001.service/"), "{path}");
            }
            assert!(
                node.cgroup_root().join(path.trim_start_matches('/')).is_dir(),
                "{path}"
            );
        }
        let tasks = listed
            .iter()
            .filter(|(p, _)| p.starts_with("/system.slice/") && p.contains("/task_"));
        assert!(tasks.count() >= 5);
    }
}
