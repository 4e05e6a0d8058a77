//! Process → job attribution on fake /proc trees (crates/node/tests/fixtures/proc, described in its README)
//! and on nodes written at test time (tests/integration/common/attribution_world.rs): the claims
//! `owner_of` finds and the rule `ProcAttributor` applies (security review F2, F9, F10).

use std::fs;
use std::path::{Path, PathBuf};

use gmq_core::watchdog::Attributor;
use gmq_node::attribute::ProcAttributor;
use gmq_node::attribute::{owner_of, owners_of, Evidence, Level, Owner, ProcessIdentity, StepName};

use crate::common::attribution_world::{needs_root, v1_job, World};

fn tree(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../node/tests/fixtures/proc")
        .join(name)
}

/// The start time the fixtures give each pid.
fn start_time(proc_root: &Path, pid: u32) -> u64 {
    let stat = fs::read_to_string(proc_root.join(pid.to_string()).join("stat")).unwrap();
    let after_comm = &stat[stat.rfind(')').unwrap() + 1..];
    after_comm.split_whitespace().nth(19).unwrap().parse().unwrap()
}

/// The real uid the fixtures give each pid.
fn real_uid(proc_root: &Path, pid: u32) -> u32 {
    let status = fs::read_to_string(proc_root.join(pid.to_string()).join("status")).unwrap();
    let uids = status.lines().find_map(|l| l.strip_prefix("Uid:")).unwrap();
    uids.split_whitespace().next().unwrap().parse().unwrap()
}

/// What a table row expects.
#[derive(Debug)]
enum Want {
    /// Claimed by one job, at a Slurm-made level.
    Job(u32, Option<StepName>, Evidence),
    /// Claimed by these jobs (job, step, level), by cgroups.
    Jobs(&'static [(u32, Option<StepName>, Level)]),
    /// A process in no job.
    NoJob,
    Stepd,
    Gone,
}

fn check(tree_name: &str, cgroup_root: &Path, cases: &[(u32, Want, &str)]) {
    let root = tree(tree_name);
    for (pid, want, why) in cases {
        let process = || ProcessIdentity {
            pid: *pid,
            start_time: start_time(&root, *pid),
        };
        let claimed = |claims: Vec<(u32, Option<StepName>, Level, Evidence)>| Owner::Process {
            process: process(),
            real_uid: real_uid(&root, *pid),
            claims: claims
                .into_iter()
                .map(|(job_id, step, level, evidence)| gmq_node::attribute::Claim {
                    job_id,
                    step,
                    level,
                    evidence,
                })
                .collect(),
        };
        let want = match want {
            Want::Job(job_id, step, evidence) => {
                claimed(vec![(*job_id, step.clone(), Level::Slurm, *evidence)])
            }
            Want::Jobs(claims) => claimed(
                claims
                    .iter()
                    .map(|(job, step, level)| (*job, step.clone(), *level, Evidence::Cgroup))
                    .collect(),
            ),
            Want::NoJob => claimed(vec![]),
            Want::Stepd => Owner::Slurmstepd { process: process() },
            Want::Gone => Owner::Gone,
        };
        assert_eq!(
            owner_of(&root, cgroup_root, *pid),
            want,
            "{tree_name} pid {pid}: {why}"
        );
    }
}

/// A cgroup mount for a fixture /proc tree: every v1 cgroup its processes name, made by Slurm
/// (files owned like the hierarchy's root).
fn slurm_cgroups_of(proc_root: &Path) -> World {
    let world = World::new();
    for entry in fs::read_dir(proc_root).unwrap() {
        let Ok(text) = fs::read_to_string(entry.unwrap().path().join("cgroup")) else {
            continue;
        };
        for line in text.lines() {
            let mut parts = line.splitn(3, ':');
            let (_, controllers, path) = (parts.next(), parts.next().unwrap_or(""), parts.next());
            if let (false, Some(path)) = (controllers.is_empty(), path) {
                let hierarchy = controllers.trim_start_matches("name=");
                world.slurm_cgroup(hierarchy, path);
                world.slurm_cgroup(hierarchy, "");
            }
        }
    }
    world
}

#[test]
fn cgroup_v1_on_a_hybrid_host() {
    use Evidence::Cgroup;
    use StepName::*;
    use Want::*;
    let cgroups = slurm_cgroups_of(&tree("v1-hybrid"));
    check(
        "v1-hybrid",
        &cgroups.cgroup_root(),
        &[
            (1, NoJob, "init"),
            (100, NoJob, "slurmd"),
            (200, Stepd, "the extern stepd is not a job process"),
            (201, Job(12, Some(Extern), Cgroup), "the extern step's sleep"),
            (210, Stepd, "the batch stepd"),
            (215, Job(12, Some(Batch), Cgroup), "the batch script"),
            (216, Job(12, Some(Batch), Cgroup), "a process of the batch script"),
            (225, Job(12, Some(Numbered(0)), Cgroup), "an srun task"),
            (
                226,
                Job(12, Some(Numbered(0)), Cgroup),
                "comm with spaces and parentheses",
            ),
            (230, Job(12, None, Cgroup), "in the job's cgroup, in no step"),
            (305, Job(123, Some(Numbered(0)), Cgroup), "job_123 is not job_12"),
            (400, NoJob, "not in Slurm's cgroups, no stepd above"),
            (410, NoJob, "a look-alike path outside /slurm*/uid_*/"),
            (
                420,
                Jobs(&[
                    (12, Some(Numbered(0)), Level::Slurm),
                    (13, Some(Numbered(0)), Level::Slurm),
                ]),
                "controllers disagree about the job: both jobs claim it",
            ),
            (
                430,
                Job(12, Some(Numbered(0)), Cgroup),
                "only the memory controller has it",
            ),
            (440, Gone, "exited between reading stat and cgroup"),
            (999, Gone, "no such pid"),
        ],
    );
}

#[test]
fn cgroup_v2() {
    use Evidence::Cgroup;
    use StepName::*;
    use Want::*;
    check(
        "v2",
        Path::new("/nonexistent"),
        &[
            (1, NoJob, "init"),
            (200, Stepd, "the extern stepd, in step_extern/slurm"),
            (201, Job(12, Some(Extern), Cgroup), "the extern step's sleep"),
            (210, Stepd, "the batch stepd, in step_batch/slurm"),
            (215, Job(12, Some(Batch), Cgroup), "the batch script"),
            (225, Job(12, Some(Numbered(0)), Cgroup), "an srun task"),
            (305, Job(123, Some(Numbered(0)), Cgroup), "job_123 is not job_12"),
            (410, NoJob, "a look-alike in the user's delegated subtree"),
            (
                500,
                Job(77, Some(Interactive), Cgroup),
                "a per-node slurmstepd scope",
            ),
        ],
    );
}

#[test]
fn linuxproc_ancestry() {
    use Evidence::Ancestry;
    use StepName::*;
    use Want::*;
    check(
        "linuxproc",
        Path::new("/nonexistent"),
        &[
            (1, NoJob, "init"),
            (200, Stepd, "a stepd is not its own job's process"),
            (201, Job(12, Some(Extern), Ancestry), "the extern step's sleep"),
            (210, Stepd, "the batch stepd"),
            (215, Job(12, Some(Batch), Ancestry), "the batch script"),
            (
                216,
                Job(12, Some(Batch), Ancestry),
                "grandchild of the batch stepd",
            ),
            (225, Job(12, Some(Numbered(0)), Ancestry), "an srun task"),
            (
                305,
                Job(123, Some(Numbered(0)), Ancestry),
                "job 123, NUL-separated title",
            ),
            (
                600,
                Job(12, Some(Batch), Ancestry),
                "a user-owned 'slurmstepd' is an ordinary process",
            ),
            (
                601,
                Job(12, Some(Batch), Ancestry),
                "below a fake stepd: the real one above counts",
            ),
            (610, NoJob, "a user-owned 'slurmstepd' outside any job"),
            (611, NoJob, "below a fake stepd and nothing else"),
            (620, NoJob, "a PPid loop ends"),
            (621, NoJob, "a PPid loop ends"),
            (630, NoJob, "the parent vanished"),
            (640, NoJob, "the parent pid was reused by a later stepd"),
            (650, Stepd, "the spank prolog stepd"),
            (651, NoJob, "below the spank prolog stepd: no step"),
            (
                660,
                NoJob,
                "daemonized out of its step: no claim (the rule counts it by uid and GPU)",
            ),
            (999, Gone, "no such pid"),
        ],
    );
}

#[test]
fn owners_in_order() {
    let root = tree("v1-hybrid");
    let cgroups = slurm_cgroups_of(&root);
    let owners = owners_of(&root, &cgroups.cgroup_root(), &[225, 999, 305, 400, 225]);
    let jobs: Vec<Vec<u32>> = owners
        .iter()
        .map(|o| o.claims().iter().map(|c| c.job_id).collect())
        .collect();
    assert_eq!(jobs, [vec![12], vec![], vec![123], vec![], vec![12]]);
    assert_eq!(owners[1], Owner::Gone);
    assert!(owners[3].process().is_some(), "400 is a process, of no job");
    assert!(owners_of(&root, &cgroups.cgroup_root(), &[]).is_empty());
}

#[test]
fn a_missing_proc_root_is_nobody() {
    let root = tree("no-such-tree");
    assert_eq!(owner_of(&root, Path::new("/nonexistent"), 1), Owner::Gone);
}

#[test]
fn v1_slurm_shapes_without_slurms_files_are_the_users() {
    // Without the cgroup mount (or with files the user owns) a v1 line cannot be proven Slurm's:
    // it still claims the process for its job, only not against other jobs of the user.
    let root = tree("v1-hybrid");
    let owner = owner_of(&root, Path::new("/nonexistent"), 225);
    let claims: Vec<(u32, Level)> = owner.claims().iter().map(|c| (c.job_id, c.level)).collect();
    assert_eq!(claims, [(12, Level::User)]);
}

/// The watchdog's answer for `pid` on a GPU that is or is not its job's, in a fresh sample.
fn counts(attributor: &mut ProcAttributor, pid: u32, on_job_gpu: bool) -> Option<bool> {
    attributor.new_sample(false);
    attributor.is_ours(pid, on_job_gpu)
}

fn watchdog_of(job_id: u32, uid: u32, world: &World) -> ProcAttributor {
    ProcAttributor::new(job_id, uid, world.proc_root(), world.cgroup_root())
}

#[test]
fn a_process_moved_into_another_job_of_the_user_in_one_hierarchy_counts_for_both() {
    if !needs_root("moved_in_one_hierarchy") {
        return;
    }
    let world = World::moved_between_jobs();
    // The claims: job 7 by Slurm's memory cgroup, job 8 by the user's freezer mkdir.
    let owner = owner_of(&world.proc_root(), &world.cgroup_root(), 500);
    let claims: Vec<(u32, Level)> = owner.claims().iter().map(|c| (c.job_id, c.level)).collect();
    assert_eq!(claims, [(7, Level::Slurm), (8, Level::User)]);
    for on_job_gpu in [true, false] {
        assert_eq!(
            counts(&mut watchdog_of(7, 2001, &world), 500, on_job_gpu),
            Some(true)
        );
        assert_eq!(
            counts(&mut watchdog_of(8, 2001, &world), 500, on_job_gpu),
            Some(true)
        );
    }
}

#[test]
fn a_process_moved_into_another_job_of_the_user_in_every_hierarchy_still_counts_for_its_job() {
    if !needs_root("moved_in_every_hierarchy") {
        return;
    }
    let world = World::moved_between_jobs();
    // 501: below job 8's step in a directory the user made; 502: the same with a name Slurm uses
    // (`task_9`), told apart by the files' owner.
    for pid in [501, 502] {
        let owner = owner_of(&world.proc_root(), &world.cgroup_root(), pid);
        let claims: Vec<(u32, Level)> = owner.claims().iter().map(|c| (c.job_id, c.level)).collect();
        assert_eq!(claims, [(8, Level::User)], "pid {pid}");
        // Job 8, whose directory it is in, counts it wherever it is.
        assert_eq!(counts(&mut watchdog_of(8, 2001, &world), pid, false), Some(true));
        // Job 7 of the same user counts it on job 7's GPU...
        assert_eq!(counts(&mut watchdog_of(7, 2001, &world), pid, true), Some(true));
        // ...not on a GPU that is not job 7's, and never for a job of another user.
        assert_eq!(counts(&mut watchdog_of(7, 2001, &world), pid, false), Some(false));
        assert_eq!(counts(&mut watchdog_of(7, 2002, &world), pid, true), Some(false));
    }
}

#[test]
fn a_legit_process_of_another_job_of_the_user_on_a_shared_gpu_is_not_ours() {
    if !needs_root("legit_process_of_another_job") {
        return;
    }
    let world = World::moved_between_jobs();
    // 510 is in Slurm's own step cgroup of job 8: job 7 of the same user, same GPU, does not count it.
    assert_eq!(counts(&mut watchdog_of(7, 2001, &world), 510, true), Some(false));
    assert_eq!(counts(&mut watchdog_of(8, 2001, &world), 510, true), Some(true));
    // A slurmstepd never counts, not even for a job of root on its own GPU.
    assert_eq!(counts(&mut watchdog_of(7, 0, &world), 200, true), Some(false));
    // A pid that does not exist is gone.
    assert_eq!(counts(&mut watchdog_of(7, 2001, &world), 999, true), None);
}

#[test]
fn a_daemonized_process_on_linuxproc_counts_for_its_users_job_on_the_jobs_gpu() {
    let root = tree("linuxproc");
    let watchdog = |job_id, uid| ProcAttributor::new(job_id, uid, root.clone(), "/nonexistent".into());
    // 660: uid 2001, reparented to init, no cgroup: no claim at all.
    assert_eq!(counts(&mut watchdog(12, 2001), 660, true), Some(true));
    assert_eq!(
        counts(&mut watchdog(12, 2001), 660, false),
        Some(false),
        "not on the job's GPU"
    );
    assert_eq!(
        counts(&mut watchdog(12, 2002), 660, true),
        Some(false),
        "another user's job"
    );
    // 225: job 12's srun task (below its stepd): not job 123's, even with the same uid and GPU.
    assert_eq!(counts(&mut watchdog(123, 2001), 225, true), Some(false));
    assert_eq!(counts(&mut watchdog(12, 2001), 225, false), Some(true));
    // 200: job 12's extern slurmstepd (root) is never a job process.
    assert_eq!(counts(&mut watchdog(12, 0), 200, true), Some(false));
}

#[test]
fn a_reused_pid_is_attributed_afresh_on_the_very_next_sample() {
    // F10: pid 500 is job 7's GPU process, then job 8's (a later start time) within one interval.
    let world = World::new();
    for job in [7, 8] {
        for hierarchy in ["freezer", "memory"] {
            world.slurm_cgroup(hierarchy, &v1_job(job));
            world.slurm_cgroup(hierarchy, &format!("{}/step_0", v1_job(job)));
        }
    }
    let step = |job| format!("{}/step_0", v1_job(job));
    world.process(500, "python3", 2001, 1000, &step(7), &step(7));
    let mut job_8 = watchdog_of(8, 2001, &world);
    let mut job_7 = watchdog_of(7, 2001, &world);
    assert_eq!(counts(&mut job_8, 500, true), Some(false));
    assert_eq!(counts(&mut job_7, 500, true), Some(true));
    world.process(500, "python3", 2001, 5000, &step(8), &step(8));
    // Non-strict samples: each one re-reads the start time.
    for sample in 2..=4 {
        assert_eq!(counts(&mut job_8, 500, true), Some(true), "sample {sample}");
        assert_eq!(counts(&mut job_7, 500, true), Some(false), "sample {sample}");
    }
    // A strict sample (before acting) reads everything afresh and agrees.
    job_8.new_sample(true);
    assert_eq!(job_8.is_ours(500, true), Some(true));
    // And once it exits the pid is gone.
    fs::remove_dir_all(world.proc_root().join("500")).unwrap();
    assert_eq!(counts(&mut job_8, 500, true), None);
}

#[test]
fn a_process_parked_below_another_jobs_step_is_left_behind_by_the_job_whose_gpu_it_is_on() {
    // K2 (a): job 7's GPU process moved into a cgroup the user made below job 8's step (a CPU-only
    // job, say), in every hierarchy (501), or under a name Slurm uses (502). At job 7's end the
    // GPU look finds it left behind: a user-made level of another job is evidence of nothing.
    if !needs_root("parked_below_another_job") {
        return;
    }
    use gmq_node::attribute::{at_job_end, sweep_leftovers, AtJobEnd, JobOnNode, LeftoverOutcome};
    let world = World::moved_between_jobs();
    let owner = |pid| owner_of(&world.proc_root(), &world.cgroup_root(), pid);
    for pid in [500, 501, 502] {
        assert_eq!(
            at_job_end(&owner(pid), 7, 2001),
            AtJobEnd::LeftBehind,
            "pid {pid}"
        );
    }
    // Job 8's own process (Slurm-made claim): job 8's, never job 7's leftover.
    assert_eq!(at_job_end(&owner(510), 7, 2001), AtJobEnd::OtherJobOfTheUser(8));
    // The epilog's sweeps by claim: job 7's end takes what still names job 7 (500's memory
    // line); job 8's end everything that names job 8, its own and what was parked there.
    let swept = |job_id| -> Vec<u32> {
        let job = JobOnNode {
            job_id,
            uid: 2001,
            sluid: None,
        };
        let sweep = sweep_leftovers(&world.proc_root(), &job, false);
        assert!(sweep
            .leftovers
            .iter()
            .all(|l| l.outcome == LeftoverOutcome::Reported));
        sweep.leftovers.iter().map(|l| l.pid).collect()
    };
    assert_eq!(swept(7), [500]);
    assert_eq!(swept(8), [500, 501, 502, 510]);
}
