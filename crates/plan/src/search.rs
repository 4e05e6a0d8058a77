//! Fitting a job to a quota: the largest micro-batch that fits while keeping the effective batch,
//! and the cheapest ladder of memory-saving techniques that makes the requested micro-batch fit.

use super::estimate::estimate;
use super::framework::Framework;
use super::job::{Checkpointing, Job, Model, Offload, PlanError, Sharding};

/// A micro-batch and the gradient accumulation that keeps `micro x accum` equal to the job's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchFit {
    pub micro_batch: u64,
    pub grad_accum: u64,
    pub peak: u64,
}

/// The largest micro-batch dividing the effective batch (`micro_batch x grad_accum`) whose peak fits
/// in `quota`; `None` when even a micro-batch of 1 does not fit.
pub fn largest_micro_batch(job: &Job, quota: u64) -> Result<Option<BatchFit>, PlanError> {
    let effective = job.micro_batch * job.grad_accum;
    let mut best = None;
    // Peaks grow with the micro-batch, so walk the divisors upwards and stop at the first miss.
    for micro in divisors(effective) {
        let mut trial = job.clone();
        trial.micro_batch = micro;
        trial.grad_accum = effective / micro;
        let peak = estimate(&trial)?.peak();
        if peak > quota {
            break;
        }
        best = Some(BatchFit {
            micro_batch: micro,
            grad_accum: effective / micro,
            peak,
        });
    }
    Ok(best)
}

/// The divisors of `n` in increasing order.
fn divisors(n: u64) -> Vec<u64> {
    let (mut low, mut high) = (Vec::new(), Vec::new());
    let mut d = 1;
    while d * d <= n {
        if n.is_multiple_of(d) {
            low.push(d);
            if d * d != n {
                high.push(n / d);
            }
        }
        d += 1;
    }
    low.extend(high.into_iter().rev());
    low
}

/// One rung of the ladder: a technique, the flag that turns it on, what it costs, and the peak
/// with it and every rung before it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rung {
    pub(crate) technique: &'static str,
    pub flag: String,
    pub(crate) cost: &'static str,
    pub peak: u64,
    pub fits: bool,
}

/// A memory-saving technique, in increasing order of throughput cost.
struct Technique {
    name: &'static str,
    cost: &'static str,
    /// The changed job, or `None` when the technique does not apply to this job.
    apply: fn(&Job) -> Option<(Job, String)>,
}

const TECHNIQUES: &[Technique] = &[
    Technique {
        name: "fused attention (FlashAttention)",
        cost: "none: faster",
        apply: |job| {
            (!job.flash).then(|| {
                (
                    Job {
                        flash: true,
                        ..job.clone()
                    },
                    "--flash".into(),
                )
            })
        },
    },
    Technique {
        name: "sequence parallelism",
        cost: "none: same communication volume as tensor parallelism (Korthikanti sec. 4.2.2)",
        apply: |job| {
            (job.parallel.tp > 1 && !job.parallel.sp && job.framework == Framework::Megatron).then(|| {
                let mut next = job.clone();
                next.parallel.sp = true;
                (next, "--sp".into())
            })
        },
    },
    Technique {
        name: "ZeRO-1 (shard optimizer states)",
        cost: "none: same communication volume as data parallelism (ZeRO sec. 7)",
        apply: |job| {
            let supported = matches!(job.framework, Framework::Deepspeed | Framework::Megatron);
            (supported && job.parallel.dp > 1 && job.sharding.stage() < 1).then(|| {
                (
                    Job {
                        sharding: Sharding::Zero(1),
                        ..job.clone()
                    },
                    "--zero 1".into(),
                )
            })
        },
    },
    Technique {
        name: "ZeRO-2 (shard gradients)",
        cost: "none: same communication volume as data parallelism (ZeRO sec. 7)",
        apply: |job| {
            (job.framework == Framework::Deepspeed && job.parallel.dp > 1 && job.sharding.stage() < 2).then(
                || {
                    (
                        Job {
                            sharding: Sharding::Zero(2),
                            ..job.clone()
                        },
                        "--zero 2".into(),
                    )
                },
            )
        },
    },
    Technique {
        name: "selective activation recomputation",
        cost: "small: recomputes attention scores, ~2-4% (Korthikanti sec. 5)",
        // Korthikanti's selective recomputation drops only the attention score tensors, which
        // fused attention never stores: with it this rung saves nothing, so it is not offered.
        apply: |job| {
            (job.checkpointing == Checkpointing::None && !job.flash).then(|| {
                (
                    Job {
                        checkpointing: Checkpointing::Selective,
                        ..job.clone()
                    },
                    "--checkpointing selective".into(),
                )
            })
        },
    },
    Technique {
        name: "ZeRO-3 / FSDP (shard parameters)",
        cost: "moderate: 1.5x data-parallel communication (ZeRO sec. 7)",
        apply: |job| {
            if job.parallel.dp < 2 || job.sharding.gathers_params() {
                return None;
            }
            match job.framework {
                Framework::Deepspeed => Some((
                    Job {
                        sharding: Sharding::Zero(3),
                        ..job.clone()
                    },
                    "--zero 3".into(),
                )),
                Framework::Pytorch => Some((
                    Job {
                        sharding: Sharding::Fsdp,
                        ..job.clone()
                    },
                    "--fsdp".into(),
                )),
                Framework::Megatron => None,
            }
        },
    },
    Technique {
        name: "per-op selective recomputation (torchtitan)",
        cost: "moderate: recomputes every other matmul, ~12% (torchtitan docs/performance.md, 13B: 2162 -> 1904 WPS)",
        apply: |job| {
            let applies = job.framework == Framework::Pytorch
                && matches!(job.checkpointing, Checkpointing::None | Checkpointing::Selective)
                && matches!(job.model, Model::Shaped(_));
            applies.then(|| {
                (
                    Job {
                        checkpointing: Checkpointing::SelectiveOp,
                        ..job.clone()
                    },
                    "--checkpointing selective-op".into(),
                )
            })
        },
    },
    Technique {
        name: "full activation recomputation",
        cost: "high: one extra forward pass, ~33% more compute",
        apply: |job| {
            (job.checkpointing != Checkpointing::Full && matches!(job.model, Model::Shaped(_))).then(|| {
                (
                    Job {
                        checkpointing: Checkpointing::Full,
                        ..job.clone()
                    },
                    "--checkpointing full".into(),
                )
            })
        },
    },
    Technique {
        name: "CPU offload of optimizer states (ZeRO-Offload)",
        cost: "high: optimizer step on the CPU, gradients over PCIe",
        apply: |job| {
            (job.framework == Framework::Deepspeed
                && job.sharding.stage() >= 1
                && job.offload == Offload::None)
                .then(|| {
                    (
                        Job {
                            offload: Offload::Optimizer,
                            ..job.clone()
                        },
                        "--offload optimizer".into(),
                    )
                })
        },
    },
    Technique {
        name: "CPU offload of parameters",
        cost: "highest: parameters cross PCIe every forward and backward",
        apply: |job| {
            (job.sharding.gathers_params() && job.offload != Offload::Params).then(|| {
                (
                    Job {
                        offload: Offload::Params,
                        ..job.clone()
                    },
                    "--offload params".into(),
                )
            })
        },
    },
];

/// Applies techniques in order of throughput cost, each on top of the previous ones, skipping
/// those that do not apply or do not lower the peak, until the job fits in `quota`.
pub fn ladder(job: &Job, quota: u64) -> Result<Vec<Rung>, PlanError> {
    let mut current = job.clone();
    let mut peak = estimate(&current)?.peak();
    let mut rungs = Vec::new();
    if peak <= quota {
        return Ok(rungs);
    }
    for technique in TECHNIQUES {
        let Some((next, flag)) = (technique.apply)(&current) else {
            continue;
        };
        let next_peak = estimate(&next)?.peak();
        if next_peak >= peak {
            continue;
        }
        current = next;
        peak = next_peak;
        rungs.push(Rung {
            technique: technique.name,
            flag,
            cost: technique.cost,
            peak,
            fits: peak <= quota,
        });
        if peak <= quota {
            break;
        }
    }
    Ok(rungs)
}

/// Whole GiB, rounded up: what to ask `--gpu-mem-quota` for.
pub fn quota_gib(peak: u64) -> u64 {
    peak.div_ceil(1 << 30)
}

/// Values ready to paste on the job's submission line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Paste {
    /// `--gpu-mem-quota=NG`.
    pub quota_gib: u64,
    /// `--gpu-mem-batch=MICROxACCUM`.
    pub micro_batch: u64,
    pub grad_accum: u64,
}

/// Everything the `plan` command reports.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub estimate: super::estimate::Estimate,
    pub quota: Option<u64>,
    /// The largest micro-batch that fits the quota as configured (with a quota only).
    pub largest: Option<BatchFit>,
    /// Techniques that make the requested micro-batch fit (empty when it fits already).
    pub ladder: Vec<Rung>,
    /// What to paste, when something fits.
    pub paste: Option<Paste>,
}

/// Estimates `job` and, against `quota`, searches the micro-batch and the ladder.
pub fn plan(job: &Job, quota: Option<u64>) -> Result<Plan, PlanError> {
    let estimate = estimate(job)?;
    let Some(quota) = quota else {
        let paste = Paste {
            quota_gib: quota_gib(estimate.peak()),
            micro_batch: job.micro_batch,
            grad_accum: job.grad_accum,
        };
        return Ok(Plan {
            estimate,
            quota: None,
            largest: None,
            ladder: Vec::new(),
            paste: Some(paste),
        });
    };
    let largest = largest_micro_batch(job, quota)?;
    let ladder = ladder(job, quota)?;
    let paste = match (largest, ladder.last()) {
        (Some(fit), _) => Some(Paste {
            quota_gib: quota_gib(fit.peak),
            micro_batch: fit.micro_batch,
            grad_accum: fit.grad_accum,
        }),
        (None, Some(rung)) if rung.fits => Some(Paste {
            quota_gib: quota_gib(rung.peak),
            micro_batch: job.micro_batch,
            grad_accum: job.grad_accum,
        }),
        _ => None,
    };
    Ok(Plan {
        estimate,
        quota: Some(quota),
        largest,
        ladder,
        paste,
    })
}
