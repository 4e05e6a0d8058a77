//! Which job a process belongs to: the edge between NVML's host pids and Slurm jobs.
//!
//! NVML tells the watchdog which pids use GPU memory; the watchdog counts a pid toward its job by
//! evidence the user cannot forge, and never lets the user make a process count for nobody.
//!
//! **Claims.** [`owner_of`] gathers what names jobs for a process, each as a [`Claim`] with its
//! [`Level`]:
//! 1. **cgroups** (`proctrack/cgroup`, cgroup v1 or v2, hybrid hosts too): every line of
//!    `/proc/PID/cgroup` under Slurm's job directory claims the process for that job (the exact
//!    prefixes are in `cgroup.rs`; a directory named by the job's SLUID, on 26.05's cgroup/v2,
//!    claims for the job its root-owned slurmstepd names: `sluid_job.rs`). The claim is *Slurm-made* when the cgroup is a level Slurm
//!    creates (`job_N`, `step_S`, `task_T`, v2's `slurm`/`user`) and, on v1, its `cgroup.procs` and
//!    `tasks` are root's (`v1_owner.rs`: Slurm 22.05 chowns v1 step directories to the user, who
//!    can then `mkdir` a child and move any of their processes into it); otherwise *user-made*;
//! 2. else **ancestry** (`proctrack/linuxproc`): the nearest root-owned `slurmstepd` above the
//!    process, whose title names its step (`slurmstepd: [12.0]`); Slurm-made (a process cannot
//!    choose its parent).
//!
//! **The rule** ([`counts_for_job`], pure): a process counts against job J
//! - when any claim names J, at any level: a process whose lines name several jobs counts against
//!   *each* of them (a user who moves a process into another of their jobs makes it count twice,
//!   not for nobody);
//! - else, when no Slurm-made claim names another job (the process is in no job: outside Slurm's
//!   tree, or daemonized out of its step under linuxproc; or only user-made levels of other jobs
//!   claim it) *and* its real uid (`Uid:` of `/proc/PID/status`, a kernel fact) is J's user *and*
//!   the GPU it was listed on is one of J's GPUs;
//! - never when a Slurm-made claim names only other jobs (two jobs of one user sharing a GPU do
//!   not count each other's processes), and never for a root-owned slurmstepd ([`Owner::Slurmstepd`]).
//!
//! The job environment (`/proc/PID/environ`) is never used: a process can set `SLURM_JOB_ID` to
//! anything.
//!
//! Pids are reused. Every [`Owner`] but [`Owner::Gone`] carries the [`ProcessIdentity`] it was
//! established for (re-checked after the reads), and [`same_process`] tells later whether that
//! process still runs: the watchdog re-reads the start time of every listed pid each sample (one
//! `stat`), attributes a changed one afresh, and re-reads everything before acting.
//!
//! Every function takes its roots as parameters (`/proc`, `/sys/fs/cgroup` in production; fixture
//! trees in tests), never fails on a process that vanished, and never panics.
//!
//! Cost (the watchdog samples every 100 ms .. seconds, up to 8 GPUs x 64 processes):
//! - [`identify`], [`same_process`]: one read of `/proc/PID/stat`.
//! - [`owner_of`] on a cgroup node: four reads (`stat`, `cgroup`, `status`, `stat` again), plus on
//!   v1 three `stat` calls per Slurm-made-looking line (typically 1–4 lines); on a linuxproc node
//!   add one `stat` per ancestor and `status` + `cmdline` of the slurmstepd (typically 5–8 reads).
//!   Every call reads afresh; nothing is cached, so nothing goes stale. Measured on a 2-vCPU VM:
//!   about 45 µs per pid before the v1 ownership check (one `stat` read: 12 µs), so 512 pids cost
//!   ~25 ms. The watchdog calls it once per new process (and per pid before acting), and a
//!   start-time read per listed pid each sample.
//! - [`job_cgroup()`]: a few reads and `stat` calls; once at start.
//! - [`job_active_on_node`]: a few directory listings; every few seconds is plenty.

mod ancestry;
mod cgroup;
mod identity;
mod job_cgroup;
mod leftover;
mod proc_attributor;
pub(crate) mod procfs;
mod sluid_job;
mod step;
mod stepd;
mod v1_owner;

use std::path::Path;

pub use cgroup::Level;
pub use identity::{identify, same_process, signal, ProcessIdentity};
pub use job_cgroup::{find_job_dir, job_active_on_node, job_cgroup, v2_mount, JobCgroup, JobOnNode};
pub use leftover::{sweep_leftovers, Leftover, LeftoverOutcome, Sweep, SWEEP_BUDGET};
pub use proc_attributor::ProcAttributor;
pub use step::StepName;

use ancestry::{is_root_stepd, lineage, Lineage};
use cgroup::{lines, slurm_cgroup, Hierarchy, JobKey};
use job_cgroup::v2_mount as v2_hierarchy;
use procfs::{read_cgroup, read_real_uid, read_stat};
use sluid_job::job_of_sluid_dir;

/// Who a process belongs to: the facts the rule ([`counts_for_job`]) decides on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Owner {
    /// A process that is not a slurmstepd.
    Process {
        process: ProcessIdentity,
        /// The real uid (`Uid:` in `/proc/PID/status`).
        real_uid: u32,
        /// The jobs that claim it, one claim per job, in job id order; empty when no job does
        /// (outside Slurm, or a process that left its step under linuxproc).
        claims: Vec<Claim>,
    },
    /// A root-owned slurmstepd: Slurm's, never a process of its job.
    Slurmstepd { process: ProcessIdentity },
    /// No such process (it exited, or its pid was reused while it was being read).
    Gone,
}

/// One job's claim on a process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    pub job_id: u32,
    /// The step, where the job's lines agree on one.
    pub step: Option<StepName>,
    /// The strongest level among the job's lines.
    pub level: Level,
    pub evidence: Evidence,
}

/// How a process was attributed (for logs: it tells which proctrack layout was seen).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Evidence {
    /// Its `/proc/PID/cgroup` is in the job's cgroup.
    Cgroup,
    /// It descends from the step's root-owned slurmstepd.
    Ancestry,
}

impl Owner {
    /// The jobs that claim the process (none for a slurmstepd or a gone process).
    pub fn claims(&self) -> &[Claim] {
        match self {
            Owner::Process { claims, .. } => claims,
            Owner::Slurmstepd { .. } | Owner::Gone => &[],
        }
    }

    /// The process it was established for; `None` when gone.
    pub fn process(&self) -> Option<ProcessIdentity> {
        match self {
            Owner::Process { process, .. } | Owner::Slurmstepd { process } => Some(*process),
            Owner::Gone => None,
        }
    }
}

/// Whether the process `owner` describes counts against the job `job_id` of user `job_uid`, as
/// listed on a GPU that is (`on_job_gpu`) or is not one of the job's. Pure; the rule is in the
/// module docs.
pub fn counts_for_job(owner: &Owner, job_id: u32, job_uid: u32, on_job_gpu: bool) -> bool {
    claimed_by(owner, job_id) || (on_job_gpu && unclaimed_process_of(owner, job_uid))
}

/// Rule 1: some cgroup line of the process, at any depth, is under job `job_id`'s.
pub fn claimed_by(owner: &Owner, job_id: u32) -> bool {
    owner.claims().iter().any(|c| c.job_id == job_id)
}

/// Rule 2's facts about the process: its real uid is `uid`, and no Slurm-made level of any job
/// claims it (so none of another job for sure).
pub fn unclaimed_process_of(owner: &Owner, uid: u32) -> bool {
    let Owner::Process { real_uid, claims, .. } = owner else {
        return false;
    };
    *real_uid == uid && !claims.iter().any(|c| c.level == Level::Slurm)
}

/// What a process NVML lists on one of job `job_id`'s GPUs is, once the job has ended on the
/// node (reviews G7 and K2, the half the epilog's sweep cannot see: a process of the job's user in
/// no cgroup of the job, such as one started from a login on the node, or one the user parked in a
/// cgroup they made below another of their jobs). Pure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AtJobEnd {
    /// The job's user's, and no other job claims it at a level Slurm made: left behind by the job.
    LeftBehind,
    /// Another job of the job's user claims it at a level Slurm made: evidence that the user
    /// has that job on the GPU (its process, not this job's leftover).
    OtherJobOfTheUser(u32),
    /// Another user's, a slurmstepd, or gone.
    NotTheJobs,
}

/// [`AtJobEnd`] for the process `owner` describes, of job `job_id` of user `job_uid`.
///
/// A user-made level of another job is evidence of nothing (K2): the user made it and moved the
/// process there, from this job or any other. Such a process counted for this job while it ran
/// (rule 2, on the job's GPU), and nothing else will end it with the job whose GPU it is on: it
/// is left behind. (The job whose cgroup it sits in sweeps it at its own end as well.)
pub fn at_job_end(owner: &Owner, job_id: u32, job_uid: u32) -> AtJobEnd {
    let Owner::Process { real_uid, claims, .. } = owner else {
        return AtJobEnd::NotTheJobs;
    };
    if *real_uid != job_uid {
        return AtJobEnd::NotTheJobs;
    }
    claims
        .iter()
        .find(|c| c.job_id != job_id && c.level == Level::Slurm)
        .map_or(AtJobEnd::LeftBehind, |c| AtJobEnd::OtherJobOfTheUser(c.job_id))
}

/// Who the process with `pid` belongs to: cgroups first, then ancestry. `cgroup_root` is where
/// cgroups are mounted (`/sys/fs/cgroup`), for the v1 ownership check.
pub fn owner_of(proc_root: &Path, cgroup_root: &Path, pid: u32) -> Owner {
    let Some(process) = read_stat(proc_root, pid) else {
        return Owner::Gone;
    };
    let identity = ProcessIdentity {
        pid,
        start_time: process.start_time,
    };
    if is_root_stepd(proc_root, &process) {
        return if same_process(proc_root, &identity) {
            Owner::Slurmstepd { process: identity }
        } else {
            Owner::Gone
        };
    }
    let Some(cgroups) = read_cgroup(proc_root, pid) else {
        return Owner::Gone;
    };
    let mut claims = cgroup_claims(&cgroups, proc_root, cgroup_root);
    if claims.is_empty() {
        if let Lineage::Step { job_id, step } = lineage(proc_root, &process) {
            claims.push(Claim {
                job_id,
                step: Some(step),
                level: Level::Slurm,
                evidence: Evidence::Ancestry,
            });
        }
    }
    let Some(real_uid) = read_real_uid(proc_root, pid) else {
        return Owner::Gone;
    };
    // Everything above must have been read from one process: the pid was not reused meanwhile.
    if !same_process(proc_root, &identity) {
        return Owner::Gone;
    }
    Owner::Process {
        process: identity,
        real_uid,
        claims,
    }
}

/// The claims of a `/proc/PID/cgroup` text, the v1 lines checked against the files under
/// `cgroup_root`. A v2 line under a SLUID (26.05) claims for the job its slurmstepd names
/// (`sluid_job.rs`); while no step of it has one, the line claims for no job.
fn cgroup_claims(text: &str, proc_root: &Path, cgroup_root: &Path) -> Vec<Claim> {
    let named: Vec<(u32, Option<StepName>, Level)> = lines(text)
        .filter_map(|line| {
            let cgroup = slurm_cgroup(&line)?;
            let job_id = match cgroup.job {
                JobKey::Id(job_id) => job_id,
                JobKey::Sluid(_) => {
                    let job_dir = v2_hierarchy(cgroup_root)?.join(cgroup.job_path.trim_start_matches('/'));
                    job_of_sluid_dir(proc_root, &job_dir, cgroup.job_path)?
                }
            };
            let level = match (cgroup.shape, line.hierarchy) {
                (Level::Slurm, Hierarchy::V1(controllers))
                    if !v1_owner::made_by_slurm(cgroup_root, controllers, line.path) =>
                {
                    Level::User
                }
                (shape, _) => shape,
            };
            Some((job_id, cgroup.step, level))
        })
        .collect();
    combine_claims(&named)
}

/// One claim per job from the lines that name it: the strongest level, and the step where the
/// lines agree (v1 controllers stop at different depths, so a line without a step does not
/// contradict one with a step). Pure.
fn combine_claims(named: &[(u32, Option<StepName>, Level)]) -> Vec<Claim> {
    let mut jobs: Vec<u32> = named.iter().map(|(job, ..)| *job).collect();
    jobs.sort_unstable();
    jobs.dedup();
    jobs.into_iter()
        .map(|job_id| {
            let mine = || named.iter().filter(move |(job, ..)| *job == job_id);
            let mut steps: Vec<&StepName> = Vec::new();
            for step in mine().filter_map(|(_, step, _)| step.as_ref()) {
                if !steps.contains(&step) {
                    steps.push(step);
                }
            }
            let step = match steps.as_slice() {
                [only] => Some((*only).clone()),
                _ => None,
            };
            let level = mine().map(|(.., level)| *level).max().unwrap_or(Level::User);
            Claim {
                job_id,
                step,
                level,
                evidence: Evidence::Cgroup,
            }
        })
        .collect()
}

/// [`owner_of`] for each pid, in the same order (e.g. NVML's process list of one GPU).
pub fn owners_of(proc_root: &Path, cgroup_root: &Path, pids: &[u32]) -> Vec<Owner> {
    pids.iter()
        .map(|&pid| owner_of(proc_root, cgroup_root, pid))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const JOB: u32 = 7;
    const OTHER: u32 = 8;
    const UID: u32 = 2001;

    fn claim(job_id: u32, level: Level) -> Claim {
        Claim {
            job_id,
            step: None,
            level,
            evidence: Evidence::Cgroup,
        }
    }

    fn process(real_uid: u32, claims: Vec<Claim>) -> Owner {
        Owner::Process {
            process: ProcessIdentity {
                pid: 500,
                start_time: 1,
            },
            real_uid,
            claims,
        }
    }

    #[test]
    fn the_rule() {
        use Level::*;
        // (owner, on the job's GPU, counts for JOB)
        let cases = [
            (process(UID, vec![claim(JOB, Slurm)]), false, true),
            (process(9999, vec![claim(JOB, User)]), false, true),
            (
                process(UID, vec![claim(JOB, Slurm), claim(OTHER, User)]),
                true,
                true,
            ),
            (
                process(UID, vec![claim(JOB, User), claim(OTHER, Slurm)]),
                false,
                true,
            ),
            // in no job: the job's user on the job's GPU only
            (process(UID, vec![]), true, true),
            (process(UID, vec![]), false, false),
            (process(2002, vec![]), true, false),
            // only a user-made level of another job: the same
            (process(UID, vec![claim(OTHER, User)]), true, true),
            (process(UID, vec![claim(OTHER, User)]), false, false),
            (process(2002, vec![claim(OTHER, User)]), true, false),
            // another job's for sure
            (process(UID, vec![claim(OTHER, Slurm)]), true, false),
            (
                process(UID, vec![claim(OTHER, Slurm), claim(9, User)]),
                true,
                false,
            ),
            // Slurm's own
            (
                Owner::Slurmstepd {
                    process: ProcessIdentity {
                        pid: 200,
                        start_time: 1,
                    },
                },
                true,
                false,
            ),
            (Owner::Gone, true, false),
        ];
        for (owner, on_job_gpu, want) in cases {
            assert_eq!(
                counts_for_job(&owner, JOB, UID, on_job_gpu),
                want,
                "{owner:?} on the job's GPU: {on_job_gpu}"
            );
        }
        // a slurmstepd is never a job process, not even for a job of root
        let stepd = Owner::Slurmstepd {
            process: ProcessIdentity {
                pid: 200,
                start_time: 1,
            },
        };
        assert!(!counts_for_job(&stepd, JOB, 0, true));
    }

    #[test]
    fn what_a_process_on_the_jobs_gpu_is_at_the_jobs_end() {
        use Level::*;
        let cases = [
            // in no job (a login on the node), or below the job's own cgroups: left behind
            (process(UID, vec![]), AtJobEnd::LeftBehind),
            (process(UID, vec![claim(JOB, User)]), AtJobEnd::LeftBehind),
            (process(UID, vec![claim(JOB, Slurm)]), AtJobEnd::LeftBehind),
            // another job of the user's, for sure: that job's, whatever else claims it
            (
                process(UID, vec![claim(OTHER, Slurm)]),
                AtJobEnd::OtherJobOfTheUser(OTHER),
            ),
            (
                process(UID, vec![claim(JOB, User), claim(OTHER, Slurm)]),
                AtJobEnd::OtherJobOfTheUser(OTHER),
            ),
            // only the user's own placement below another job (K2: a CPU-only job of the user,
            // say): evidence of nothing, left behind by the job whose GPU it is on
            (process(UID, vec![claim(OTHER, User)]), AtJobEnd::LeftBehind),
            (
                process(UID, vec![claim(JOB, Slurm), claim(OTHER, User)]),
                AtJobEnd::LeftBehind,
            ),
            (
                process(UID, vec![claim(OTHER, User), claim(9, User)]),
                AtJobEnd::LeftBehind,
            ),
            (
                process(UID, vec![claim(OTHER, User), claim(9, Slurm)]),
                AtJobEnd::OtherJobOfTheUser(9),
            ),
            // another user's, Slurm's, gone
            (process(2002, vec![]), AtJobEnd::NotTheJobs),
            (process(2002, vec![claim(JOB, Slurm)]), AtJobEnd::NotTheJobs),
            (
                Owner::Slurmstepd {
                    process: ProcessIdentity {
                        pid: 200,
                        start_time: 1,
                    },
                },
                AtJobEnd::NotTheJobs,
            ),
            (Owner::Gone, AtJobEnd::NotTheJobs),
        ];
        for (owner, want) in cases {
            assert_eq!(at_job_end(&owner, JOB, UID), want, "{owner:?}");
        }
    }

    #[test]
    fn one_claim_per_job() {
        use Level::*;
        use StepName::*;
        let named = [
            (OTHER, Some(Numbered(0)), User),
            (JOB, Some(Numbered(0)), Slurm),
            (JOB, None, User),
            (OTHER, Some(Numbered(1)), Slurm),
            (JOB, Some(Numbered(0)), User),
        ];
        let want = vec![
            Claim {
                job_id: JOB,
                step: Some(Numbered(0)),
                level: Slurm,
                evidence: Evidence::Cgroup,
            },
            Claim {
                job_id: OTHER,
                step: None,
                level: Slurm,
                evidence: Evidence::Cgroup,
            },
        ];
        assert_eq!(combine_claims(&named), want);
        assert!(combine_claims(&[]).is_empty());
    }
}
