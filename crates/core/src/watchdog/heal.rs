//! Self-healing: a batch job whose script failed after its run came near out of memory is
//! requeued with the near-OOM hints (`[enforcement] requeue_near_oom`), within `max_requeues`.
//!
//! A real OOM beats the sampling (one allocation too many, between two samples) or happens on a
//! GPU that is full: the watchdog never saw the job over its quota, and the job ends FAILED. The
//! facts are the watchdog's own: the run's peak from its samples, and how the job ended from
//! slurmctld (`squeue --json`: state, exit code, batch host, restart count) — never what the job
//! says about itself. [`decide`] is the rule over plain data; [`after_run`] asks slurmctld, waits
//! for the final state (the batch step's end reaches slurmctld after the plugin stopped the
//! watchdog), requeues, then records the event (slurmctld refuses AdminComment updates to a job
//! that has finished, so here the record follows the requeue; the next run reads it only once it
//! starts).

use std::time::Duration;

use super::shared_record::{count_action, requeues_caused};
use super::{unix_now, Reporter, Watchdog};
use crate::config::Action;
use crate::controller::{record_entry, AdminComment, ControlError, Controller};
use crate::record::EventKind;
use crate::size::ByteSize;
use crate::slurm_text::{JobEnd, JobState};

/// How often the watchdog asks slurmctld how its job ended, after the run ended here, and how far
/// apart: a minute at most (the batch step's end usually shows within a second).
pub(crate) const END_POLLS: u32 = 60;
pub(crate) const END_POLL: Duration = Duration::from_secs(1);

/// The run as the watchdog sampled it, on its busiest GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RunPeak {
    pub(crate) peak: u64,
    pub(crate) quota: u64,
    /// The GPU's size (NVML's total).
    pub(crate) gpu_total: u64,
}

/// The policy's part in the decision.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HealPolicy {
    pub enabled: bool,
    pub max_requeues: u32,
    /// `[hints] near_margin`: what near out of memory means.
    pub near_margin: f64,
}

/// What to do about a run that ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum HealDecision {
    /// slurmctld does not show the end yet: ask again.
    Wait,
    /// Leave the job as it ended; why, for the log.
    Leave(String),
    Requeue,
}

/// Whether the run is worth asking slurmctld about at all: self-healing on, and near out of memory.
pub(crate) fn near_oom(run: &RunPeak, policy: &HealPolicy) -> bool {
    policy.enabled
        && crate::hints::near_oom(
            ByteSize::from_bytes(run.peak),
            ByteSize::from_bytes(run.quota),
            ByteSize::from_bytes(run.gpu_total),
            policy.near_margin,
        )
}

/// The rule. `end`: slurmctld's record of the job; `run`: the restart count of the run this
/// watchdog watched; `requeues_by_us`: what the job's record counts (requeues and holds for GPU
/// memory, self-healing included).
///
/// On a multi-node job the node that came near out of memory decides, whichever node ran the
/// batch script: the batch node's own peak says nothing of the others (a task that dies of OOM on
/// the second node fails the job's srun, and so its script). Should several nodes come near, the
/// first requeue wins: the others find the job requeued (its restart count moved on), or slurmctld
/// refuses to requeue a pending job ([`after_run`] asks which).
pub(crate) fn decide(
    end: &JobEnd,
    run: u32,
    peak: &RunPeak,
    requeues_by_us: u32,
    policy: &HealPolicy,
) -> HealDecision {
    let leave = |why: &str| HealDecision::Leave(why.to_string());
    if !near_oom(peak, policy) {
        return leave("self-healing is off, or the run did not come near out of memory");
    }
    if end.restarts != run {
        return leave("the job was requeued meanwhile: another run");
    }
    match end.state {
        JobState::Failed => {}
        ref state if not_ended(state) => return HealDecision::Wait,
        ref other => return HealDecision::Leave(format!("it ended {other}, not FAILED: not requeued")),
    }
    if end.exit_code == Some(0) && end.signal == 0 {
        return leave("it ended FAILED with exit code 0: not an out-of-memory failure");
    }
    if !end.batch || !end.requeue {
        return leave("only a batch job that allows requeue (not --no-requeue) can be requeued");
    }
    if requeues_by_us >= policy.max_requeues {
        return HealDecision::Leave(format!(
            "already requeued {requeues_by_us} time(s) for GPU memory (max_requeues {}): it stays FAILED",
            policy.max_requeues
        ));
    }
    HealDecision::Requeue
}

/// The run ended here (the plugin stopped the watchdog, or slurmctld says the job left RUNNING):
/// requeue it when [`decide`] says so. `wait` sleeps between questions to slurmctld, and says
/// whether to go on asking (`false`: the watchdog is told to go, as when the job's next run starts
/// here: review G14).
pub fn after_run(
    watchdog: &mut Watchdog,
    policy: &HealPolicy,
    control: &mut dyn Controller,
    report: &mut dyn Reporter,
    wait: &mut dyn FnMut(Duration) -> bool,
) {
    let (Some(quota), Some(run)) = (watchdog.quota, watchdog.run) else {
        return;
    };
    if watchdog.has_acted() {
        return; // requeued, held or cancelled by us already
    }
    let Some(peak) = watchdog.usage.values().max_by_key(|u| u.peak).map(|u| RunPeak {
        peak: u.peak,
        quota: quota.bytes(),
        gpu_total: u.total,
    }) else {
        return;
    };
    if !near_oom(&peak, policy) {
        return; // no question to slurmctld for the common case
    }
    let Some(end) = final_state(control, report, wait) else {
        return;
    };
    let comment = match control.admin_comment() {
        Ok(comment) => comment,
        Err(e) => {
            report.error(&format!(
                "self-healing: cannot read the job's AdminComment ({e}): the job stays {}",
                end.state
            ));
            return;
        }
    };
    // Unknown history must not buy the job more requeues: count every restart as ours. A known
    // one counts no more requeues than slurmctld's restart count says happened (G12).
    let requeues_by_us = requeues_caused(&comment).map_or(end.restarts, |n| n.min(end.restarts));
    let verdict = decide(&end, run, &peak, requeues_by_us, policy);
    // A script that ended COMPLETED near its quota is said to have ended, not failed.
    let ended = if end.state == JobState::Failed {
        "failed"
    } else {
        "ended"
    };
    let what = format!(
        "the batch script {ended} ({}) after peaking at {} (quota {}, GPU {})",
        exit_text(&end),
        ByteSize::from_bytes(peak.peak).floor_mib(),
        ByteSize::from_bytes(peak.quota),
        ByteSize::from_bytes(peak.gpu_total).floor_mib(),
    );
    match verdict {
        HealDecision::Wait => report.warning(&format!(
            "self-healing: slurmctld still shows the job {} after {}s: left as it is",
            end.state,
            (END_POLL * (END_POLLS - 1)).as_secs()
        )),
        HealDecision::Leave(why) => report.info(&format!("{what}: {why}")),
        HealDecision::Requeue => {
            if let Err(e) = control.requeue_ended() {
                // Another node of the job, near out of memory too, requeued it first.
                if let Ok(Some(now)) = control.ending() {
                    if now.restarts != run {
                        report.info(&format!(
                            "{what} (near out of memory): another node of the job requeued it first"
                        ));
                        return;
                    }
                }
                report.error(&format!(
                    "{what}: self-healing requeue failed ({e}): the job stays FAILED"
                ));
                return;
            }
            report.warning(&format!(
                "{what} (near out of memory): requeued with near-OOM hints (self-healing, requeue {} of at most {})",
                requeues_by_us + 1,
                policy.max_requeues
            ));
            watchdog.acted = Some(Action::Requeue);
            record_heal(watchdog, &comment, control, report);
        }
    }
}

/// Asks slurmctld until it shows how the job ended, [`END_POLLS`] times at most, [`END_POLL`]
/// apart. `None`: the job is gone, or slurmctld gave no usable answer in time (logged).
fn final_state(
    control: &mut dyn Controller,
    report: &mut dyn Reporter,
    wait: &mut dyn FnMut(Duration) -> bool,
) -> Option<JobEnd> {
    let mut last: Option<JobEnd> = None;
    let mut failure: Option<ControlError> = None;
    for attempt in 1..=END_POLLS {
        match control.ending() {
            Ok(Some(end)) if !not_ended(&end.state) => return Some(end),
            Ok(Some(end)) => last = Some(end),
            Ok(None) => {}
            Err(e) if e.job_gone() => return None,
            Err(e) => failure = Some(e),
        }
        if attempt < END_POLLS && !wait(END_POLL) {
            report.info("self-healing: told to stop while waiting for the job's end: left as it is");
            return None;
        }
    }
    match (last, failure) {
        (Some(end), _) => Some(end), // still not ended: `decide` says Wait, which is logged
        (None, Some(e)) => {
            report.error(&format!(
                "self-healing: cannot read how the job ended from slurmctld ({e}): left as it is"
            ));
            None
        }
        (None, None) => {
            report.error("self-healing: slurmctld's record of the job shows no state: left as it is");
            None
        }
    }
}

/// States slurmctld shows before it has taken in the end of the batch script (or while the job's
/// processes are still being cleaned up, when it cannot be requeued yet).
fn not_ended(state: &JobState) -> bool {
    matches!(
        state,
        JobState::Running
            | JobState::Configuring
            | JobState::Suspended
            | JobState::Completing
            | JobState::StageOut
            | JobState::Signaling
    )
}

/// Counts the requeue in the run's record and puts it into the AdminComment, now that the job is
/// pending again (slurmctld takes updates again).
fn record_heal(
    watchdog: &mut Watchdog,
    comment: &AdminComment,
    control: &mut dyn Controller,
    report: &mut dyn Reporter,
) {
    let Some(entry) = watchdog.entry.as_mut() else {
        return;
    };
    count_action(entry, EventKind::Oom, Action::Requeue, unix_now());
    let Some(existing) = comment.readable() else {
        report.warning("the job's AdminComment cannot be read: the self-healing requeue goes unrecorded");
        return;
    };
    if let Err(e) = record_entry(control, existing, entry, false) {
        report.error(&format!(
            "cannot record the self-healing requeue in the AdminComment ({e}); the next run still \
             gets near-OOM hints from the recorded peak"
        ));
    }
}

fn exit_text(end: &JobEnd) -> String {
    match (end.exit_code, end.signal) {
        (_, signal) if signal != 0 => format!("signal {signal}"),
        (Some(code), _) => format!("exit code {code}"),
        (None, _) => "exit code unknown".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const G: u64 = 1 << 30;

    fn failed(exit_code: u32) -> JobEnd {
        // A one-node sbatch job that may be requeued, FAILED in its first run on `vm`.
        JobEnd {
            state: JobState::Failed,
            exit_code: Some(exit_code),
            signal: 0,
            batch_host: "vm".into(),
            batch: true,
            requeue: true,
            restarts: 0,
            node_count: 1,
        }
    }

    const ON: HealPolicy = HealPolicy {
        enabled: true,
        max_requeues: 3,
        near_margin: 0.05,
    };

    fn peak(peak: u64) -> RunPeak {
        RunPeak {
            peak,
            quota: 16 * G,
            gpu_total: 80 * G,
        }
    }

    #[test]
    fn a_batch_job_that_failed_near_its_quota_is_requeued() {
        // 15.5G of 16G: within 5 %.
        assert_eq!(
            decide(&failed(1), 0, &peak(31 * G / 2), 0, &ON),
            HealDecision::Requeue
        );
        // Killed by a signal (a C++ OOM abort): the exit code is 0, the signal tells.
        let aborted = JobEnd {
            exit_code: Some(0),
            signal: 6,
            ..failed(0)
        };
        assert_eq!(decide(&aborted, 0, &peak(16 * G), 0, &ON), HealDecision::Requeue);
        // Near the GPU's size with a quota larger than the GPU.
        let full_gpu = RunPeak {
            peak: 79 * G,
            quota: 100 * G,
            gpu_total: 80 * G,
        };
        assert_eq!(decide(&failed(1), 0, &full_gpu, 0, &ON), HealDecision::Requeue);
    }

    #[test]
    fn far_from_the_quota_or_switched_off_it_stays_failed() {
        let far = decide(&failed(1), 0, &peak(8 * G), 0, &ON);
        assert!(matches!(far, HealDecision::Leave(_)), "{far:?}");
        let off = HealPolicy { enabled: false, ..ON };
        assert!(matches!(
            decide(&failed(1), 0, &peak(16 * G), 0, &off),
            HealDecision::Leave(_)
        ));
        assert!(!near_oom(&peak(16 * G), &off));
        assert!(near_oom(&peak(16 * G), &ON) && !near_oom(&peak(15 * G), &ON));
    }

    #[test]
    fn only_a_failure_of_this_run_of_a_requeueable_batch_job() {
        let near = peak(16 * G);
        let leaves =
            |end: JobEnd, run: u32| matches!(decide(&end, run, &near, 0, &ON), HealDecision::Leave(_));
        for state in [
            JobState::Completed,
            JobState::Cancelled,
            JobState::Timeout,
            JobState::NodeFail,
            JobState::OutOfMemory,
            JobState::Pending,
            JobState::Preempted,
        ] {
            assert!(
                leaves(
                    JobEnd {
                        state: state.clone(),
                        ..failed(1)
                    },
                    0
                ),
                "{state}"
            );
        }
        assert!(leaves(failed(0), 0));
        assert!(leaves(
            JobEnd {
                batch: false,
                ..failed(1)
            },
            0
        ));
        assert!(leaves(
            JobEnd {
                requeue: false,
                ..failed(1)
            },
            0
        ));
        assert!(leaves(failed(1), 1), "another run ended");
        // The node near out of memory decides, whether or not it ran the batch script.
        let two_nodes = JobEnd {
            batch_host: "n1".into(),
            node_count: 2,
            ..failed(1)
        };
        assert_eq!(decide(&two_nodes, 0, &near, 0, &ON), HealDecision::Requeue);
    }

    #[test]
    fn not_ended_yet_means_wait_and_max_requeues_bounds_it() {
        let near = peak(16 * G);
        for state in [JobState::Running, JobState::Completing] {
            let end = JobEnd { state, ..failed(1) };
            assert_eq!(decide(&end, 0, &near, 0, &ON), HealDecision::Wait);
        }
        assert_eq!(decide(&failed(1), 0, &near, 2, &ON), HealDecision::Requeue);
        let HealDecision::Leave(why) = decide(&failed(1), 0, &near, 3, &ON) else {
            panic!("requeued past max_requeues");
        };
        assert!(why.contains("max_requeues 3"), "{why}");
    }
}
