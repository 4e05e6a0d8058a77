//! Process → job attribution on fake /proc trees (tests/fixtures/proc, described in its README).

use std::path::{Path, PathBuf};

use gpu_mem_quota::attribute::{owner_of, owners_of, Evidence, Owner, ProcessIdentity, Step};

fn tree(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/proc")
        .join(name)
}

/// The start time the fixtures give each pid.
fn start_time(proc_root: &Path, pid: u32) -> u64 {
    let stat = std::fs::read_to_string(proc_root.join(pid.to_string()).join("stat")).unwrap();
    let after_comm = &stat[stat.rfind(')').unwrap() + 1..];
    after_comm.split_whitespace().nth(19).unwrap().parse().unwrap()
}

/// What a table row expects.
#[derive(Debug)]
enum Want {
    Job(u32, Option<Step>, Evidence),
    NotAJob,
    Gone,
}

fn check(tree_name: &str, cases: &[(u32, Want, &str)]) {
    let root = tree(tree_name);
    for (pid, want, why) in cases {
        let want = match want {
            Want::Job(job_id, step, evidence) => Owner::Job {
                job_id: *job_id,
                step: step.clone(),
                process: ProcessIdentity {
                    pid: *pid,
                    start_time: start_time(&root, *pid),
                },
                evidence: *evidence,
            },
            Want::NotAJob => Owner::NotAJob,
            Want::Gone => Owner::Gone,
        };
        assert_eq!(owner_of(&root, *pid), want, "{tree_name} pid {pid}: {why}");
    }
}

#[test]
fn cgroup_v1_on_a_hybrid_host() {
    use Evidence::Cgroup;
    use Step::*;
    use Want::*;
    check(
        "v1-hybrid",
        &[
            (1, NotAJob, "init"),
            (100, NotAJob, "slurmd"),
            (200, NotAJob, "the extern stepd is not a job process"),
            (201, Job(12, Some(Extern), Cgroup), "the extern step's sleep"),
            (210, NotAJob, "the batch stepd"),
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
            (400, NotAJob, "not in Slurm's cgroups, no stepd above"),
            (410, NotAJob, "a look-alike path outside /slurm*/uid_*/"),
            (420, NotAJob, "controllers disagree about the job"),
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
    use Step::*;
    use Want::*;
    check(
        "v2",
        &[
            (1, NotAJob, "init"),
            (200, NotAJob, "the extern stepd, in step_extern/slurm"),
            (201, Job(12, Some(Extern), Cgroup), "the extern step's sleep"),
            (210, NotAJob, "the batch stepd, in step_batch/slurm"),
            (215, Job(12, Some(Batch), Cgroup), "the batch script"),
            (225, Job(12, Some(Numbered(0)), Cgroup), "an srun task"),
            (305, Job(123, Some(Numbered(0)), Cgroup), "job_123 is not job_12"),
            (410, NotAJob, "a look-alike in the user's delegated subtree"),
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
    use Step::*;
    use Want::*;
    check(
        "linuxproc",
        &[
            (1, NotAJob, "init"),
            (200, NotAJob, "a stepd is not its own job's process"),
            (201, Job(12, Some(Extern), Ancestry), "the extern step's sleep"),
            (210, NotAJob, "the batch stepd"),
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
            (610, NotAJob, "a user-owned 'slurmstepd' outside any job"),
            (611, NotAJob, "below a fake stepd and nothing else"),
            (620, NotAJob, "a PPid loop ends"),
            (621, NotAJob, "a PPid loop ends"),
            (630, NotAJob, "the parent vanished"),
            (640, NotAJob, "the parent pid was reused by a later stepd"),
            (650, NotAJob, "the spank prolog stepd"),
            (651, NotAJob, "below the spank prolog stepd: no step"),
            (
                660,
                NotAJob,
                "daemonized out of its step: linuxproc cannot see it",
            ),
            (999, Gone, "no such pid"),
        ],
    );
}

#[test]
fn owners_in_order() {
    let root = tree("v1-hybrid");
    let owners = owners_of(&root, &[225, 999, 305, 400, 225]);
    let jobs: Vec<Option<u32>> = owners.iter().map(Owner::job_id).collect();
    assert_eq!(jobs, [Some(12), None, Some(123), None, Some(12)]);
    assert_eq!(owners[1], Owner::Gone);
    assert_eq!(owners[3], Owner::NotAJob);
    assert!(owners_of(&root, &[]).is_empty());
}

#[test]
fn a_missing_proc_root_is_nobody() {
    let root = tree("no-such-tree");
    assert_eq!(owner_of(&root, 1), Owner::Gone);
}
