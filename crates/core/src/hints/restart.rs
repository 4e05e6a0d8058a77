//! Restart hints: what a job restarted after a GPU-memory event should change to fit.
//!
//! The memory model (docs/HINTS.md has the long form): a training step's peak is
//! `fixed + per_sample × micro`, where `fixed` (weights, optimizer state, CUDA context) does not
//! depend on the batch and the rest (activations) grows linearly with the micro-batch. To bring a
//! peak `P` under the target `T = limit × (1 − margin)`, per-step memory must shrink by
//! `scale = (T − fixed) / (P − fixed)`. With the job's batch geometry the scale becomes a micro-batch
//! that divides the effective batch, so that the accumulation makes up the difference exactly.

use std::fmt;

use super::{gib, less_margin, Hundredths};
use crate::batch::BatchGeometry;
use crate::size::ByteSize;

/// Our count of GPU-memory requeues of this job.
const RESTARTS: &str = "GPU_MEM_QUOTA_RESTARTS";
/// What ended the previous run: `over-quota`, `preempted` or `near-oom`.
const LAST_EVENT: &str = "GPU_MEM_QUOTA_LAST_EVENT";
/// The previous run's peak GPU memory on its busiest GPU, in bytes.
const LAST_PEAK_BYTES: &str = "GPU_MEM_QUOTA_LAST_PEAK_BYTES";
/// The factor to multiply per-step (batch-dependent) memory by, e.g. `0.56`.
const BATCH_SCALE: &str = "GPU_MEM_QUOTA_BATCH_SCALE";
/// The micro-batch to use (with `--gpu-mem-batch` only).
const MICRO_BATCH: &str = "GPU_MEM_QUOTA_MICRO_BATCH";
/// The gradient accumulation to use with it (with `--gpu-mem-batch` only).
const GRAD_ACCUM: &str = "GPU_MEM_QUOTA_GRAD_ACCUM";
/// `1` when not even a micro-batch of 1 is expected to fit without activation checkpointing.
const ACTIVATION_CHECKPOINTING: &str = "GPU_MEM_QUOTA_ACTIVATION_CHECKPOINTING";

/// Every variable [`hint_vars`] may write: those it did not write this time are removed from the
/// job's environment (a forged value, or one inherited by a job submitted from a restarted job).
pub(crate) const HINT_VARS: [&str; 7] = [
    RESTARTS,
    LAST_EVENT,
    LAST_PEAK_BYTES,
    BATCH_SCALE,
    MICRO_BATCH,
    GRAD_ACCUM,
    ACTIVATION_CHECKPOINTING,
];

/// The smallest scale ever advised: a scale of zero would tell a loop to train on nothing.
const MIN_BATCH_SCALE: Hundredths = Hundredths::new(1);

/// What ended (or endangered) the previous run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum RestartCause {
    /// Our watchdog requeued it for using more than its quota.
    OverQuota,
    /// Our watchdog requeued it to free memory for a higher-priority job on a contended GPU.
    Preempted,
    /// It ended otherwise, but peaked within the near-margin of its quota or of the GPU's size; or
    /// it failed so and our watchdog requeued it to heal (`[enforcement] requeue_near_oom`).
    NearOom,
}

impl RestartCause {
    pub(crate) const fn as_str(self) -> &'static str {
        match self {
            RestartCause::OverQuota => "over-quota",
            RestartCause::Preempted => "preempted",
            RestartCause::NearOom => "near-oom",
        }
    }

    /// The inverse of [`RestartCause::as_str`], for records that store the name.
    #[cfg(test)]
    pub(crate) fn from_name(name: &str) -> Option<RestartCause> {
        [
            RestartCause::OverQuota,
            RestartCause::Preempted,
            RestartCause::NearOom,
        ]
        .into_iter()
        .find(|e| e.as_str() == name)
    }
}

impl fmt::Display for RestartCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the job's record (AdminComment) says about the run before this one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PreviousRun {
    /// Our count of GPU-memory requeues so far.
    pub restarts: u32,
    /// `Some(OverQuota | Preempted | NearOom)` when our watchdog requeued it for GPU memory.
    pub(crate) requeued_for: Option<RestartCause>,
    /// Its peak on its busiest GPU, when the record has one.
    pub(crate) peak: Option<ByteSize>,
}

/// Does this restart deserve hints, and under which event? Call it on a restart only (the job's
/// `SLURM_RESTART_COUNT` > 0, or a record from an earlier run exists).
///
/// Yes when our watchdog requeued the previous run for GPU memory (its event is returned), or when
/// that run peaked within `near_margin` (a fraction, e.g. 0.05) of the quota or of the GPU's size,
/// even though it ended some other way (`near-oom`: a node failure, a time limit, a real OOM).
pub(crate) fn restart_event(
    previous: &PreviousRun,
    quota: ByteSize,
    gpu_total: ByteSize,
    near_margin: f64,
) -> Option<RestartCause> {
    if let Some(event) = previous.requeued_for {
        return Some(event);
    }
    let peak = previous.peak?;
    near_oom(peak, quota, gpu_total, near_margin).then_some(RestartCause::NearOom)
}

/// Whether a run that peaked at `peak` came near out of memory: within `near_margin` (a fraction,
/// e.g. 0.05) of its quota or of the GPU's size. The one definition the restart hints and the
/// watchdog's self-healing (`watchdog::heal`) share.
pub(crate) fn near_oom(peak: ByteSize, quota: ByteSize, gpu_total: ByteSize, near_margin: f64) -> bool {
    let near = |limit: ByteSize| peak.bytes() >= less_margin(limit.bytes(), near_margin);
    near(quota) || near(gpu_total)
}

/// Everything [`restart_hints`] needs, as plain data.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct HintInputs {
    pub(crate) restarts: u32,
    pub(crate) last_event: RestartCause,
    /// The previous run's peak on its busiest GPU.
    pub(crate) last_peak: ByteSize,
    pub(crate) quota: ByteSize,
    /// The GPU's real size (NVML's total): a quota larger than the GPU cannot be used.
    pub(crate) gpu_total: ByteSize,
    /// Memory that does not scale with the batch (weights, optimizer state, CUDA context), from the
    /// job's history or the admin config. `None` assumes everything scales, which under-shrinks when
    /// the fixed part is large: the estimate matters.
    pub(crate) fixed_estimate: Option<ByteSize>,
    /// Head-room below the limit to aim for, as a fraction (0.05 = aim for 95 % of the quota).
    pub(crate) safety_margin: f64,
    /// The job's `--gpu-mem-batch`, if it gave one.
    pub(crate) batch: Option<BatchGeometry>,
}

/// A micro-batch and accumulation that keep the effective batch exactly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BatchAdvice {
    pub(crate) micro: u32,
    /// `u64`: a micro-batch of 1 with 65536x65536 needs 2^32 accumulation steps.
    pub(crate) accum: u64,
    /// Not even a micro-batch of 1 is predicted to fit: trade compute for memory.
    pub(crate) activation_checkpointing: bool,
    /// One sentence for the job's log saying what was chosen and why.
    pub(crate) reason: String,
}

#[cfg(test)]
impl BatchAdvice {
    pub(crate) const fn effective(&self) -> u64 {
        self.micro as u64 * self.accum
    }
}

/// The hints for one restart; [`hint_vars`] renders them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RestartHints {
    pub(crate) restarts: u32,
    pub(crate) last_event: RestartCause,
    pub(crate) last_peak: ByteSize,
    /// The factor per-step memory should shrink by; 1.00 when the last peak already fits.
    pub(crate) batch_scale: Hundredths,
    /// Present when the job gave `--gpu-mem-batch`.
    pub(crate) batch: Option<BatchAdvice>,
}

/// Computes every restart hint. See the module documentation for the model.
pub(crate) fn restart_hints(inputs: &HintInputs) -> RestartHints {
    let limit = inputs.quota.min(inputs.gpu_total);
    let fixed = inputs.fixed_estimate.map_or(0, ByteSize::bytes);
    // A preempted job made room for another; if it stayed within its quota, it fits as it was.
    let scale = if inputs.last_event == RestartCause::Preempted && inputs.last_peak <= limit {
        Hundredths::ONE
    } else {
        batch_scale(
            inputs.last_peak,
            limit,
            inputs.fixed_estimate,
            inputs.safety_margin,
        )
    };
    let target = less_margin(limit.bytes(), inputs.safety_margin);
    let batch = inputs
        .batch
        .map(|geometry| advise_batch(geometry, scale, inputs.last_peak.bytes(), fixed, target));
    RestartHints {
        restarts: inputs.restarts,
        last_event: inputs.last_event,
        last_peak: inputs.last_peak,
        batch_scale: scale,
        batch,
    }
}

/// `(T − fixed) / (P − fixed)` with `T = limit × (1 − margin)`, rounded down to hundredths and kept in
/// `[MIN_BATCH_SCALE, 1.00]`: 1.00 when the peak already fits, the minimum when even the fixed part
/// alone does not. Public so that the watchdog's early-warning suggestion uses the same model.
pub(crate) fn batch_scale(
    peak: ByteSize,
    limit: ByteSize,
    fixed: Option<ByteSize>,
    margin: f64,
) -> Hundredths {
    let target = less_margin(limit.bytes(), margin);
    let (peak, fixed) = (peak.bytes(), fixed.map_or(0, ByteSize::bytes));
    if peak <= target {
        return Hundredths::ONE;
    }
    if fixed >= target {
        return MIN_BATCH_SCALE;
    }
    // Here fixed < target < peak, so both differences are positive.
    Hundredths::floor_ratio(target - fixed, peak - fixed)
        .unwrap_or(MIN_BATCH_SCALE)
        .clamp(MIN_BATCH_SCALE, Hundredths::ONE)
}

/// The largest divisor of the effective batch that is at most `micro × scale` (using the published,
/// rounded-down scale, so the numbers a job reads agree with each other), and the accumulation that
/// restores the effective batch. No divisor ≥ 1 fits: micro-batch 1 and activation checkpointing.
fn advise_batch(
    geometry: BatchGeometry,
    scale: Hundredths,
    peak: u64,
    fixed: u64,
    target: u64,
) -> BatchAdvice {
    let effective = geometry.effective();
    let cap = scale
        .floor_times(geometry.micro as u64)
        .min(geometry.micro as u64);
    let per_sample = peak.saturating_sub(fixed) / geometry.micro as u64;
    if cap == 0 {
        let why = if fixed >= target {
            format!(
                "the fixed part alone ({}) exceeds the target {}",
                gib(fixed),
                gib(target)
            )
        } else {
            format!(
                "even micro-batch 1 ({} fixed + {} per sample, scale {scale}) is predicted over the target {}",
                gib(fixed),
                gib(per_sample),
                gib(target)
            )
        };
        return BatchAdvice {
            micro: 1,
            accum: effective,
            activation_checkpointing: true,
            reason: format!(
                "{why}: use micro-batch 1 with accumulation {effective} and activation checkpointing"
            ),
        };
    }
    // `cap` ≤ micro ≤ MAX_BATCH_FACTOR, so this loop is short; 1 always divides.
    let micro = (1..=cap)
        .rev()
        .find(|d| effective.is_multiple_of(*d))
        .unwrap_or(1);
    let accum = effective / micro;
    let reason = if micro == geometry.micro as u64 {
        format!(
            "last peak {} fits the target {}: keeping {geometry}",
            gib(peak),
            gib(target)
        )
    } else {
        format!(
            "last peak {} over the target {}: per-step memory × {scale} allows micro-batch ≤ {cap}; \
             {micro}x{accum} (largest divisor of {effective}) keeps the effective batch {effective}",
            gib(peak),
            gib(target)
        )
    };
    BatchAdvice {
        micro: micro as u32,
        accum,
        activation_checkpointing: false,
        reason,
    }
}

/// The hints as environment variables, in a fixed order.
pub(crate) fn hint_vars(hints: &RestartHints) -> Vec<(&'static str, String)> {
    let mut vars = vec![
        (RESTARTS, hints.restarts.to_string()),
        (LAST_EVENT, hints.last_event.to_string()),
        (LAST_PEAK_BYTES, hints.last_peak.bytes().to_string()),
        (BATCH_SCALE, hints.batch_scale.to_string()),
    ];
    if let Some(batch) = &hints.batch {
        vars.push((MICRO_BATCH, batch.micro.to_string()));
        vars.push((GRAD_ACCUM, batch.accum.to_string()));
        if batch.activation_checkpointing {
            vars.push((ACTIVATION_CHECKPOINTING, "1".to_string()));
        }
    }
    vars
}

#[cfg(test)]
mod tests {
    use super::*;

    const G: u64 = 1 << 30;

    fn gb(n: u64) -> ByteSize {
        ByteSize::from_bytes(n * G)
    }

    fn inputs(peak: u64, fixed: Option<u64>, batch: Option<(u32, u32)>) -> HintInputs {
        HintInputs {
            restarts: 1,
            last_event: RestartCause::OverQuota,
            last_peak: gb(peak),
            quota: gb(40),
            gpu_total: gb(80),
            fixed_estimate: fixed.map(gb),
            safety_margin: 0.05,
            batch: batch.map(|(micro, accum)| BatchGeometry { micro, accum }),
        }
    }

    /// (peak G, fixed G, geometry) → (scale, micro, accum, checkpointing). Quota 40G, margin 5 %:
    /// target 38G.
    #[test]
    fn hint_table() {
        type Given = (u64, Option<u64>, (u32, u32));
        type Want = (&'static str, u32, u64, bool);
        let table: &[(Given, Want)] = &[
            // The case: 20G fixed + 8 × 4G = 52G. (38−20)/(52−20) = 0.5625 → 0.56 → ≤ 4.48 → 4.
            ((52, Some(20), (8, 8)), ("0.56", 4, 16, false)),
            // Same peak, fixed part unknown: 38/52 = 0.73 → ≤ 5.84; 5 does not divide 64 → 4.
            ((52, None, (8, 8)), ("0.73", 4, 16, false)),
            // Divisors matter: effective 48, cap 8 × 0.73 = 5 → 4 (48 = 4 × 12).
            ((52, None, (8, 6)), ("0.73", 4, 12, false)),
            // Effective 7 (prime): only 1 or 7 divide it, so a small shrink falls to 1.
            ((42, None, (7, 1)), ("0.90", 1, 7, false)),
            // Already under the target (a preempted run): scale 1, geometry unchanged.
            ((30, Some(20), (8, 8)), ("1.00", 8, 8, false)),
            // Exactly at the target still fits.
            ((38, Some(20), (8, 8)), ("1.00", 8, 8, false)),
            // Nothing fits: 30G fixed + 8 × 8G = 94G; (38−30)/64 = 0.125 → 0.12 → ⌊0.96⌋ = 0.
            ((94, Some(30), (8, 8)), ("0.12", 1, 64, true)),
            // Nothing fits: the fixed part alone is over the target.
            ((52, Some(39), (8, 8)), ("0.01", 1, 64, true)),
            // A fixed estimate larger than the peak (a bad estimate) behaves like "nothing fits".
            ((52, Some(60), (4, 2)), ("0.01", 1, 8, true)),
            // Micro-batch 1 already: cannot shrink further.
            ((45, Some(20), (1, 64)), ("0.72", 1, 64, true)),
            // Large geometry at the bounds: no overflow.
            ((76, None, (65536, 65536)), ("0.50", 32768, 131072, false)),
        ];
        for &((peak, fixed, (micro, accum)), (scale, want_micro, want_accum, ckpt)) in table {
            let hints = restart_hints(&inputs(peak, fixed, Some((micro, accum))));
            let batch = hints.batch.as_ref().unwrap();
            let case = format!("peak {peak}G fixed {fixed:?} {micro}x{accum}: {}", batch.reason);
            assert_eq!(hints.batch_scale.to_string(), scale, "{case}");
            assert_eq!(
                (batch.micro, batch.accum, batch.activation_checkpointing),
                (want_micro, want_accum, ckpt),
                "{case}"
            );
            assert_eq!(batch.effective(), micro as u64 * accum as u64, "{case}");
        }
    }

    #[test]
    fn micro_one_at_the_boundary_is_refused_conservatively() {
        // 30G fixed + 8G per sample: micro-batch 1 would land exactly on the 38G target, but the
        // published scale 0.12 × 8 rounds down to 0, and the advice never promises more than the
        // environment says.
        let hints = restart_hints(&inputs(94, Some(30), Some((8, 8))));
        assert!(hints.batch.unwrap().reason.contains("even micro-batch 1"));
    }

    #[test]
    fn a_preempted_job_within_its_quota_restarts_at_full_batch() {
        // Defect 2: 39G of a 40G quota is above the 5 % safety target, but preemption is no sign
        // that the job is too big.
        let mut i = inputs(39, None, Some((8, 8)));
        i.last_event = RestartCause::Preempted;
        let hints = restart_hints(&i);
        assert_eq!(hints.batch_scale, Hundredths::ONE);
        assert_eq!(hints.batch.map(|b| (b.micro, b.accum)), Some((8, 8)));
        // Over its quota when preempted: it shrinks like any over-quota job.
        i.last_peak = gb(52);
        assert!(restart_hints(&i).batch_scale < Hundredths::ONE);
    }

    #[test]
    fn reasons_say_what_and_why() {
        let shrink = restart_hints(&inputs(52, Some(20), Some((8, 8)))).batch.unwrap();
        assert_eq!(
            shrink.reason,
            "last peak 52.0 GiB over the target 38.0 GiB: per-step memory × 0.56 allows micro-batch ≤ 4; \
             4x16 (largest divisor of 64) keeps the effective batch 64"
        );
        let fixed_too_big = restart_hints(&inputs(52, Some(39), Some((8, 8)))).batch.unwrap();
        assert_eq!(
            fixed_too_big.reason,
            "the fixed part alone (39.0 GiB) exceeds the target 38.0 GiB: \
             use micro-batch 1 with accumulation 64 and activation checkpointing"
        );
    }

    #[test]
    fn the_gpu_size_limits_a_quota_larger_than_the_gpu() {
        let mut i = inputs(90, Some(20), Some((8, 8)));
        i.quota = gb(200);
        // Target is 95 % of the 80G GPU = 76G: (76−20)/(90−20) = 0.8 → ≤ 6.4 → 4.
        let hints = restart_hints(&i);
        assert_eq!(hints.batch_scale.to_string(), "0.80");
        assert_eq!(hints.batch.unwrap().micro, 4);
    }

    #[test]
    fn vars_without_and_with_geometry() {
        let hints = restart_hints(&inputs(52, Some(20), None));
        assert_eq!(hints.batch, None);
        assert_eq!(
            hint_vars(&hints),
            vec![
                ("GPU_MEM_QUOTA_RESTARTS", "1".to_string()),
                ("GPU_MEM_QUOTA_LAST_EVENT", "over-quota".to_string()),
                ("GPU_MEM_QUOTA_LAST_PEAK_BYTES", (52 * G).to_string()),
                ("GPU_MEM_QUOTA_BATCH_SCALE", "0.56".to_string()),
            ]
        );
        let vars = hint_vars(&restart_hints(&inputs(52, Some(20), Some((8, 8)))));
        assert_eq!(
            vars[4..],
            [
                ("GPU_MEM_QUOTA_MICRO_BATCH", "4".into()),
                ("GPU_MEM_QUOTA_GRAD_ACCUM", "16".into())
            ]
        );
        let vars = hint_vars(&restart_hints(&inputs(94, Some(30), Some((8, 8)))));
        assert_eq!(
            vars[4..],
            [
                ("GPU_MEM_QUOTA_MICRO_BATCH", "1".into()),
                ("GPU_MEM_QUOTA_GRAD_ACCUM", "64".into()),
                ("GPU_MEM_QUOTA_ACTIVATION_CHECKPOINTING", "1".into())
            ]
        );
    }

    #[test]
    fn which_restarts_deserve_hints() {
        use RestartCause::*;
        let run = |requeued_for, peak: Option<u64>| PreviousRun {
            restarts: 1,
            requeued_for,
            peak: peak.map(gb),
        };
        // Quota 40G on an 80G GPU, near-margin 10 %: near means ≥ 36G (quota) or ≥ 72G (GPU).
        let table = [
            (run(Some(OverQuota), Some(52)), Some(OverQuota)),
            (run(Some(Preempted), Some(10)), Some(Preempted)),
            (run(Some(OverQuota), None), Some(OverQuota)),
            (run(None, Some(36)), Some(NearOom)),
            (run(None, Some(35)), None),
            (run(None, None), None),
        ];
        for (previous, want) in table {
            assert_eq!(
                restart_event(&previous, gb(40), gb(80), 0.10),
                want,
                "{previous:?}"
            );
        }
        // A quota above the GPU's size: the GPU is what a run nears.
        assert_eq!(
            restart_event(&run(None, Some(73)), gb(200), gb(80), 0.10),
            Some(NearOom)
        );
        assert_eq!(restart_event(&run(None, Some(71)), gb(200), gb(80), 0.10), None);
    }

    #[test]
    fn event_names_round_trip() {
        for e in [
            RestartCause::OverQuota,
            RestartCause::Preempted,
            RestartCause::NearOom,
        ] {
            assert_eq!(RestartCause::from_name(e.as_str()), Some(e));
        }
        assert_eq!(RestartCause::from_name("oom"), None);
    }
}
