//! What the job leaves on its GPUs outside its cgroups, dealt with as its watchdog leaves (review
//! G7, the half the epilog's cgroup sweep cannot see).
//!
//! A process of the job's user that sits in no cgroup of the job (started from a login on the
//! node, say) counts against the job while it runs (`gmq_node::attribute`, rule 2), and nothing
//! in Slurm ends it with the job: it would keep its GPU memory while Slurm hands the GPU out
//! again. The watchdog has NVML open; once the job's run here is over (the epilog's signal, or
//! the job's cgroup empty and slurmctld saying so), it looks at the job's GPUs once more:
//! - a process of the job's user that no other job claims at a level Slurm made is left behind
//!   (one the user parked in a cgroup they made below another of their jobs too: review K2):
//!   SIGKILLed through a pidfd (`[enforcement] kill_leftovers = false`: logged only);
//! - unless another job of the same user is on that GPU (a Slurm-made cgroup claims one of its
//!   processes, or it is in the node's registry with that GPU): whose process it is cannot be
//!   told, so it is left running, and the log says so. The wrong job is never killed;
//! - nor is root's process, for a job run as root (review K10): logged, left running.

use std::path::Path;

use gmq_core::watchdog::gpu::{GpuSample, GpuSource};
use gmq_core::watchdog::Reporter;
use gmq_node::attribute::{self, AtJobEnd, Owner, ProcessIdentity};
use gmq_node::preempt_registry::Registry;

/// What is done with one process found on the job's GPU at its end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum GpuLeftoverAction {
    Kill,
    /// `kill_leftovers = false`.
    ReportOnly,
    /// Another job of the user is on the GPU: the process may be that job's.
    MaybeOfJob(u32),
    /// Root's, left by a job run as root: root's processes are root's to end (review K10).
    RootsLeftRunning,
}

/// One left-behind process and what to do with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Found {
    pub(crate) gpu: u32,
    pub(crate) process: ProcessIdentity,
    pub(crate) verdict: GpuLeftoverAction,
}

/// Decides, for the processes NVML lists on the job's GPUs (`(gpu, owner)`), which the job left
/// behind and what to do with each. `registered`: other jobs of the job's user that the node's
/// registry lists, with a GPU each. Pure.
pub(crate) fn decide(
    listed: &[(u32, Owner)],
    (job_id, uid): (u32, u32),
    registered: &[(u32, u32)],
    kill: bool,
) -> Vec<Found> {
    let other_job_on = |gpu: u32| {
        listed
            .iter()
            .filter(|(on, _)| *on == gpu)
            .find_map(|(_, owner)| match attribute::at_job_end(owner, job_id, uid) {
                AtJobEnd::OtherJobOfTheUser(other) => Some(other),
                _ => None,
            })
            .or_else(|| registered.iter().find(|(_, on)| *on == gpu).map(|(job, _)| *job))
    };
    listed
        .iter()
        .filter(|(_, owner)| attribute::at_job_end(owner, job_id, uid) == AtJobEnd::LeftBehind)
        .filter_map(|(gpu, owner)| {
            let verdict = match other_job_on(*gpu) {
                _ if uid == 0 => GpuLeftoverAction::RootsLeftRunning,
                Some(other) => GpuLeftoverAction::MaybeOfJob(other),
                None if kill => GpuLeftoverAction::Kill,
                None => GpuLeftoverAction::ReportOnly,
            };
            Some(Found {
                gpu: *gpu,
                process: owner.process()?,
                verdict,
            })
        })
        .collect()
}

/// Samples the job's GPUs once more, decides ([`decide`]) and acts, one log line per process.
/// The roots (`/proc`, `/sys/fs/cgroup`) are the caller's, as everywhere below the daemon.
pub(crate) fn sweep(
    source: &mut dyn GpuSource,
    (job_id, uid): (u32, u32),
    user: &str,
    (runtime_dir, proc_root, cgroup_root): (&Path, &Path, &Path),
    kill: bool,
    report: &mut dyn Reporter,
) {
    let samples: Vec<GpuSample> = match source.sample() {
        Ok(samples) => samples.into_iter().filter(|s| s.listed).collect(),
        Err(e) => {
            report.warning(&format!(
                "cannot look at the job's GPUs for what it left behind: {e}"
            ));
            return;
        }
    };
    let listed: Vec<(u32, Owner)> = samples
        .iter()
        .flat_map(|s| s.processes.iter().map(move |p| (s.index, p.pid)))
        .map(|(gpu, pid)| (gpu, attribute::owner_of(proc_root, cgroup_root, pid)))
        .collect();
    let registered: Vec<(u32, u32)> = match Registry::open_existing(runtime_dir) {
        Ok(Some(registry)) => registry
            .list()
            .unwrap_or_default()
            .into_iter()
            .filter(|e| e.user == user && e.job_id != job_id)
            .flat_map(|e| e.gpus.into_iter().map(move |g| (e.job_id, g.index)))
            .collect(),
        _ => Vec::new(),
    };
    for found in decide(&listed, (job_id, uid), &registered, kill) {
        let (pid, gpu) = (found.process.pid, found.gpu);
        let what = format!("process {pid} of the job's user is still on GPU {gpu} after the job's end");
        match found.verdict {
            GpuLeftoverAction::Kill => match attribute::signal(proc_root, &found.process, libc::SIGKILL) {
                Ok(()) => report.error(&format!("{what}: killed")),
                Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
                Err(e) => report.error(&format!("{what}: cannot kill it: {e}")),
            },
            GpuLeftoverAction::ReportOnly => {
                report.error(&format!("{what} (kill_leftovers = false: left running)"))
            }
            GpuLeftoverAction::RootsLeftRunning => report.warning(&format!(
                "{what}: root's, left running (no process of root's is ever killed at a job's end)"
            )),
            GpuLeftoverAction::MaybeOfJob(other) => report.warning(&format!(
                "{what}: left running, since job {other} of the same user is on that GPU and it may be that job's"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gmq_node::attribute::{Claim, Evidence, Level};

    const JOB: u32 = 7;
    const UID: u32 = 2001;

    fn owner(pid: u32, real_uid: u32, claims: &[(u32, Level)]) -> Owner {
        Owner::Process {
            process: ProcessIdentity { pid, start_time: 1 },
            real_uid,
            claims: claims
                .iter()
                .map(|&(job_id, level)| Claim {
                    job_id,
                    step: None,
                    level,
                    evidence: Evidence::Cgroup,
                })
                .collect(),
        }
    }

    fn verdicts(found: &[Found]) -> Vec<(u32, GpuLeftoverAction)> {
        found.iter().map(|f| (f.process.pid, f.verdict.clone())).collect()
    }

    #[test]
    fn the_users_process_in_no_job_is_killed_and_nothing_else() {
        let listed = [
            (0, owner(10, UID, &[])),
            (0, owner(11, 2002, &[])),
            (0, owner(12, UID, &[(JOB, Level::User)])),
            (1, owner(13, UID, &[(9, Level::User)])),
        ];
        let found = decide(&listed, (JOB, UID), &[], true);
        let all = [10, 12, 13];
        assert_eq!(verdicts(&found), all.map(|pid| (pid, GpuLeftoverAction::Kill)));
        let found = decide(&listed, (JOB, UID), &[], false);
        assert_eq!(
            verdicts(&found),
            all.map(|pid| (pid, GpuLeftoverAction::ReportOnly))
        );
    }

    #[test]
    fn a_process_parked_below_another_jobs_step_is_killed_at_the_end_of_the_job_whose_gpu_it_is_on() {
        // K2 (a): job 7's GPU process in a cgroup the user made below job 9's step (a CPU-only
        // job: nothing of job 9 is on the GPU), in every hierarchy or in one.
        let listed = [
            (0, owner(10, UID, &[(9, Level::User)])),
            (0, owner(11, UID, &[(JOB, Level::Slurm), (9, Level::User)])),
            (0, owner(12, UID, &[(9, Level::User), (10, Level::User)])),
        ];
        let found = decide(&listed, (JOB, UID), &[], true);
        assert_eq!(
            verdicts(&found),
            [10, 11, 12].map(|pid| (pid, GpuLeftoverAction::Kill))
        );
        // Where job 9 is on that GPU for sure (its own process there), whose it is cannot be
        // told: left running, and job 9's watchdog counts it (rule 2) and decides at its end.
        let mut listed = listed.to_vec();
        listed.push((0, owner(20, UID, &[(9, Level::Slurm)])));
        let found = decide(&listed, (JOB, UID), &[], true);
        assert_eq!(
            verdicts(&found),
            [10, 11, 12].map(|pid| (pid, GpuLeftoverAction::MaybeOfJob(9)))
        );
    }

    #[test]
    fn a_root_jobs_leftovers_are_roots_and_left_running() {
        let listed = [
            (0, owner(10, 0, &[])),
            (0, owner(11, 0, &[(JOB, Level::User)])),
            (0, owner(12, UID, &[])),
            (0, owner(13, 0, &[(8, Level::Slurm)])),
        ];
        for kill in [true, false] {
            assert_eq!(
                verdicts(&decide(&listed, (JOB, 0), &[], kill)),
                [
                    (10, GpuLeftoverAction::RootsLeftRunning),
                    (11, GpuLeftoverAction::RootsLeftRunning)
                ]
            );
        }
    }

    #[test]
    fn another_job_of_the_user_on_the_gpu_keeps_it_running() {
        // Job 8's own process on GPU 0 (a Slurm-made claim) says job 8 is there.
        let listed = [
            (0, owner(10, UID, &[])),
            (0, owner(20, UID, &[(8, Level::Slurm)])),
            (1, owner(11, UID, &[])),
        ];
        let found = decide(&listed, (JOB, UID), &[], true);
        assert_eq!(
            verdicts(&found),
            [
                (10, GpuLeftoverAction::MaybeOfJob(8)),
                (11, GpuLeftoverAction::Kill)
            ]
        );
        // The registry says job 9 holds GPU 1.
        let found = decide(&listed, (JOB, UID), &[(9, 1)], true);
        assert_eq!(
            verdicts(&found),
            [
                (10, GpuLeftoverAction::MaybeOfJob(8)),
                (11, GpuLeftoverAction::MaybeOfJob(9))
            ]
        );
        // Another user's job on the GPU changes nothing.
        let listed = [
            (0, owner(10, UID, &[])),
            (0, owner(30, 2002, &[(8, Level::Slurm)])),
        ];
        assert_eq!(
            verdicts(&decide(&listed, (JOB, UID), &[], true)),
            [(10, GpuLeftoverAction::Kill)]
        );
    }
}
