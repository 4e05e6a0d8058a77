//! Victim selection, pure: one GPU's snapshot in, at most one victim out.
//!
//! Every watchdog on the node runs this on the same facts (the registry's entries and NVML's
//! processes, attributed) and so names the same victim; only the victim's own watchdog acts.
//!
//! The GPU is contended when its free memory is below the reserve, or when the caller's trend
//! predicts it full within the horizon. Then the order is:
//! 0. jobs Slurm gave no GPU at all that have memory on this one (they reach it only because
//!    cgroup.conf does not constrain devices, and no quota or watchdog holds them: review G9), the
//!    largest first, cancelled;
//! 1. jobs over their own quota on this GPU (they broke the rule; the others did not);
//! 2. volunteers (`--gpu-mem-preemptible`);
//! 3. the lowest rank (`rank`);
//! 4. ties: the newest start first (it has lost the least work), then the highest job id.
//!
//! Each key refines the one before (a volunteer over its quota goes before another job over its
//! quota). The order is only as good as the list of jobs: while a Slurm job with memory on the GPU
//! has no entry yet (its watchdog is still starting), nobody is chosen (`Waiting`), or the victim
//! would be picked from the others only, and a job within its quota could go for one that is not
//! yet known to be lower-ranked or over its own quota. The first job in that order that can be preempted is the victim; the ones that cannot
//! are returned with the reason. A job that holds no memory on the GPU frees nothing and is
//! skipped; so is one that cannot be requeued, one protected after a restart (`cooldown`), and
//! one at its preemption cap when the policy leaves such jobs alone.

use std::cmp::Reverse;
use std::fmt;
use std::time::Duration;

use super::cooldown::{protected_until, Gate, GpuCooldown};
use super::rank::Rank;
use super::{AfterMax, PreemptSettings};
use crate::config::{Action, NonRequeueable};
use crate::size::ByteSize;

/// One GPU as the watchdogs see it.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuSnapshot {
    pub index: u32,
    pub total: u64,
    /// By every process on the GPU, in any job or none.
    pub used: u64,
    /// When the caller's trend predicts the GPU full; `None` when it does not grow.
    pub seconds_to_full: Option<f64>,
    pub jobs: Vec<JobOnGpu>,
    /// Slurm jobs with memory on the GPU that have no registry entry yet, in job id order; the
    /// caller lists a job here only for a while after it first saw it (its watchdog's start), so
    /// a job that never registers cannot hold preemption off for good.
    pub arriving: Vec<u32>,
    /// Slurm jobs with memory on the GPU that slurmctld's record says were given no GPU and no
    /// shard on any node: a process of theirs is here only because devices are not constrained
    /// (review G9). They have no watchdog and no registry entry.
    pub not_given: Vec<NotGiven>,
}

/// A Slurm job using a GPU it was not given (see [`GpuSnapshot::not_given`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotGiven {
    pub job_id: u32,
    /// By the job's processes on this GPU.
    pub used: u64,
}

/// One job with a watchdog on the node, as far as this GPU is concerned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobOnGpu {
    pub job_id: u32,
    /// Per GPU; `None`: the job has no quota.
    pub quota: Option<u64>,
    /// By the job's own processes on this GPU.
    pub used: u64,
    pub rank: Rank,
    /// Volunteered with `--gpu-mem-preemptible`.
    pub preemptible: bool,
    /// Unix seconds, of this run.
    pub start_time: u64,
    pub requeueable: bool,
    /// Times we preempted it before (from its record).
    pub preemptions: u32,
}

impl JobOnGpu {
    fn is_over_quota(&self) -> bool {
        self.quota.is_some_and(|quota| self.used > quota)
    }
}

/// Why the GPU is short of memory.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Contention {
    BelowReserve {
        free: u64,
        reserve: u64,
    },
    /// Free memory is above the reserve, but not for long.
    Trend {
        seconds_to_full: f64,
    },
}

/// Whether the GPU is contended. Below the reserve wins over the trend (it is the fact, not the
/// forecast). A trend that is not a finite, non-negative number is no prediction.
pub fn contention(
    total: u64,
    used: u64,
    reserve: u64,
    seconds_to_full: Option<f64>,
    horizon: Duration,
) -> Option<Contention> {
    let free = total.saturating_sub(used);
    if free < reserve {
        return Some(Contention::BelowReserve { free, reserve });
    }
    seconds_to_full
        .filter(|s| s.is_finite() && *s >= 0.0 && *s <= horizon.as_secs_f64())
        .map(|seconds_to_full| Contention::Trend { seconds_to_full })
}

/// Why a job is the victim: the first rule of the order that put it there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Why {
    /// Slurm gave it no GPU, yet it holds `used` here.
    NotGiven {
        used: u64,
    },
    OverQuota {
        used: u64,
        quota: u64,
    },
    Volunteer,
    LowestRank(Rank),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Victim {
    pub job_id: u32,
    /// `Requeue`, or `RequeueHold` for a job at its cap under `after_max = hold`, or `Cancel` for
    /// one that cannot be requeued under `non_requeueable = cancel` and for a job given no GPU.
    pub action: Action,
    pub why: Why,
}

/// Why a job cannot be the victim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CannotPreempt {
    /// `--no-requeue`, `JobRequeue=0`, or not a batch job.
    NotRequeueable,
    /// Preempted `count` times already, and the policy leaves such jobs alone.
    AtCap { count: u32, max: u32 },
    /// Restarted after a preemption; protected until (unix seconds).
    Protected { until: u64 },
    /// It has no memory on this GPU: requeueing it frees nothing.
    HoldsNothing,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Skipped {
    pub job_id: u32,
    pub reason: CannotPreempt,
}

/// The outcome for one GPU.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// Enough free memory, none predicted short.
    Calm,
    /// Contended, but a preemption happened on this GPU within the cooldown.
    CoolingDown { contention: Contention, until: u64 },
    /// Contended, but these jobs on the GPU have not registered yet: the order waits for them.
    Waiting {
        contention: Contention,
        arriving: Vec<u32>,
    },
    Preempt {
        contention: Contention,
        victim: Victim,
        /// The jobs that cannot be preempted, in victim order.
        skipped: Vec<Skipped>,
    },
    /// Contended, and no job can be preempted.
    NoVictim {
        contention: Contention,
        skipped: Vec<Skipped>,
    },
}

impl Decision {
    pub fn victim(&self) -> Option<&Victim> {
        match self {
            Decision::Preempt { victim, .. } => Some(victim),
            _ => None,
        }
    }
}

/// The jobs of the GPU in the order they would be preempted (ignoring whether they can be).
/// Total and independent of the input order: the job id breaks every tie.
pub fn victim_order(jobs: &[JobOnGpu]) -> Vec<&JobOnGpu> {
    let mut order: Vec<&JobOnGpu> = jobs.iter().collect();
    order.sort_by_key(|job| {
        (
            !job.is_over_quota(),
            !job.preemptible,
            job.rank,
            Reverse(job.start_time),
            Reverse(job.job_id),
        )
    });
    order
}

/// Decides for one GPU at `now` (unix seconds): calm, cooling down, the victim, or nobody.
pub fn decide(gpu: &GpuSnapshot, settings: &PreemptSettings, cooldown: &GpuCooldown, now: u64) -> Decision {
    let reserve = settings.reserve_bytes(gpu.total);
    let Some(contention) = contention(
        gpu.total,
        gpu.used,
        reserve,
        gpu.seconds_to_full,
        settings.horizon,
    ) else {
        return Decision::Calm;
    };
    if let Gate::CoolingDown { until } = cooldown.gate(now, settings.cooldown) {
        return Decision::CoolingDown { contention, until };
    }
    // Known from slurmctld's record, so waiting for arriving jobs changes nothing about it.
    // Cancelled, whatever `non_requeueable` says: requeued, it would do the same again, and left
    // alone it would make a job within its quota the victim.
    let largest_not_given = gpu
        .not_given
        .iter()
        .filter(|job| job.used > 0)
        .max_by_key(|job| (job.used, job.job_id));
    if let Some(job) = largest_not_given {
        return Decision::Preempt {
            contention,
            victim: Victim {
                job_id: job.job_id,
                action: Action::Cancel,
                why: Why::NotGiven { used: job.used },
            },
            skipped: Vec::new(),
        };
    }
    if !gpu.arriving.is_empty() {
        return Decision::Waiting {
            contention,
            arriving: gpu.arriving.clone(),
        };
    }
    let mut skipped = Vec::new();
    let mut victim = None;
    for job in victim_order(&gpu.jobs) {
        match preemptible(job, settings, now) {
            Ok(action) if victim.is_none() => {
                victim = Some(Victim {
                    job_id: job.job_id,
                    action,
                    why: why(job),
                })
            }
            Ok(_) => {}
            Err(reason) => skipped.push(Skipped {
                job_id: job.job_id,
                reason,
            }),
        }
    }
    match victim {
        Some(victim) => Decision::Preempt {
            contention,
            victim,
            skipped,
        },
        None => Decision::NoVictim { contention, skipped },
    }
}

/// What would be done to `job` as the victim, or why it cannot be.
fn preemptible(job: &JobOnGpu, settings: &PreemptSettings, now: u64) -> Result<Action, CannotPreempt> {
    if !job.requeueable && settings.non_requeueable == NonRequeueable::Skip {
        return Err(CannotPreempt::NotRequeueable);
    }
    let at_cap = job.preemptions >= settings.max_preemptions_per_job;
    if at_cap && settings.after_max == AfterMax::LeaveAlone {
        return Err(CannotPreempt::AtCap {
            count: job.preemptions,
            max: settings.max_preemptions_per_job,
        });
    }
    if let Some(until) = protected_until(job.preemptions, job.start_time, settings.cooldown) {
        if now < until {
            return Err(CannotPreempt::Protected { until });
        }
    }
    if job.used == 0 {
        return Err(CannotPreempt::HoldsNothing);
    }
    Ok(if !job.requeueable {
        // `non_requeueable = "cancel"`: it cannot come back, so it goes.
        Action::Cancel
    } else if at_cap {
        Action::RequeueHold
    } else {
        Action::Requeue
    })
}

fn why(job: &JobOnGpu) -> Why {
    match job.quota {
        Some(quota) if job.used > quota => Why::OverQuota {
            used: job.used,
            quota,
        },
        _ if job.preemptible => Why::Volunteer,
        _ => Why::LowestRank(job.rank),
    }
}

fn size(bytes: u64) -> ByteSize {
    ByteSize::from_bytes(bytes).floor_mib()
}

impl fmt::Display for Contention {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Contention::BelowReserve { free, reserve } => {
                write!(
                    f,
                    "free GPU memory {} below the reserve {}",
                    size(*free),
                    size(*reserve)
                )
            }
            Contention::Trend { seconds_to_full } => {
                write!(f, "GPU memory predicted full in {seconds_to_full:.0} s")
            }
        }
    }
}

impl fmt::Display for Why {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Why::OverQuota { used, quota } => {
                write!(f, "over its quota ({} of {})", size(*used), size(*quota))
            }
            Why::NotGiven { used } => write!(
                f,
                "given no GPU by Slurm, yet holding {} on this one (cgroup.conf does not constrain devices)",
                size(*used)
            ),
            Why::Volunteer => write!(f, "volunteered (--gpu-mem-preemptible)"),
            Why::LowestRank(rank) => write!(f, "lowest priority ({rank})"),
        }
    }
}

impl fmt::Display for CannotPreempt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CannotPreempt::NotRequeueable => {
                write!(f, "cannot be requeued (--no-requeue, or not a batch job)")
            }
            CannotPreempt::AtCap { count, max } => write!(
                f,
                "preempted {count} time(s) already (max_preemptions_per_job = {max}), left alone"
            ),
            CannotPreempt::Protected { until } => {
                write!(f, "restarted after a preemption, protected until {until}")
            }
            CannotPreempt::HoldsNothing => write!(f, "holds no memory on this GPU"),
        }
    }
}

impl fmt::Display for Skipped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "job {}: cannot preempt: {}", self.job_id, self.reason)
    }
}
