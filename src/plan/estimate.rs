//! Puts the terms together for each pipeline stage that can peak and keeps the higher one.

use super::activations::{self, formats, Stored};
use super::breakdown::{total, Breakdown, Phase, Term};
use super::framework::{profile, LossKernel, Profile};
use super::job::{validate, Checkpointing, Job, Model, PlanError};
use super::overheads;
use super::placement::{local, stages_to_check, Stage};
use super::shape::{Head, ModelShape, Norm};
use super::states;

const KORTHIKANTI: &str = "Korthikanti et al. 2022, sec. 4, table 2";
const MIB: f64 = (1u64 << 20) as f64;

/// The estimate for a job: the per-GPU breakdown of the stage that peaks highest.
#[derive(Debug, Clone, PartialEq)]
pub struct Estimate {
    pub job: Job,
    pub params: u64,
    pub breakdown: Breakdown,
}

impl Estimate {
    /// Peak device memory per GPU (what NVML and a GPU-memory quota see).
    pub fn peak(&self) -> u64 {
        self.breakdown.peak
    }
}

/// Estimates the per-GPU peak of `job`, or says which input makes no sense.
pub fn estimate(job: &Job) -> Result<Estimate, PlanError> {
    validate(job)?;
    let prof = profile(job.framework);
    let layers = match &job.model {
        Model::Shaped(shape) => shape.layers,
        Model::ParamsOnly(_) => 1,
    };
    let breakdown = stages_to_check(layers, job.parallel.pp)
        .into_iter()
        .map(|stage| stage_breakdown(job, &prof, stage))
        .max_by_key(|b| b.peak)
        .expect("at least one stage");
    Ok(Estimate {
        job: job.clone(),
        params: job.model.params(),
        breakdown,
    })
}

fn stage_breakdown(job: &Job, prof: &Profile, stage: Stage) -> Breakdown {
    let here = local(&job.model, job.finetune, stage, job.parallel.tp);
    let mut terms = states::terms(job, &here, prof);
    let mut notes = Vec::new();
    match &job.model {
        Model::Shaped(shape) => terms.extend(activation_terms(job, prof, shape, stage)),
        Model::ParamsOnly(_) => notes.push(
            "activations not estimated: only a parameter count was given (use --model or --layers/--hidden/--heads/--vocab)"
                .to_string(),
        ),
    }
    terms.extend(overheads::buffers(job, &here, prof));
    terms.extend(overheads::step(job, &here, prof));
    terms.extend(overheads::device(job));
    total(terms, overheads::FRAGMENTATION, stage.name(), notes)
}

/// Stored activations, the recompute working set, and the logits/loss buffers of one stage.
fn activation_terms(job: &Job, prof: &Profile, shape: &ModelShape, stage: Stage) -> Vec<Term> {
    let p = job.parallel;
    let tokens = (job.micro_batch * job.seq) as f64;
    let fmt = formats(job.precision);
    let h = shape.hidden as f64;
    let seq_split = if p.sp { p.tp as f64 } else { 1.0 };
    let layer: Vec<Stored> = activations::layer(shape, job.precision, prof, job.flash, job.seq);
    let per_layer_all = activations::bytes(&layer, tokens, p.tp, p.sp);
    let (per_layer, how) = match job.checkpointing {
        Checkpointing::None => (per_layer_all, "no recomputation"),
        Checkpointing::Selective => (
            activations::bytes(&activations::without_scores(&layer), tokens, p.tp, p.sp),
            "selective recomputation",
        ),
        Checkpointing::Full => (
            fmt.residual * h * tokens / seq_split,
            "full recomputation: layer inputs only",
        ),
    };
    // 1F1B keeps p - i micro-batches in flight on stage i (Narayanan et al. 2021; Korthikanti
    // sec. 4.2.3), but never more than the micro-batches of a step (the gradient accumulation).
    let in_flight = (stage.count - stage.index).min(job.grad_accum) as f64;
    let mut out = vec![Term::new(
        "activations",
        format!(
            "activations: {} layers x {} micro-batch(es) x {:.1} MiB ({how})",
            stage.layers,
            in_flight,
            per_layer / MIB
        ),
        stage.layers as f64 * in_flight * per_layer,
        Phase::Forward,
        KORTHIKANTI,
    )];
    let recompute = match job.checkpointing {
        Checkpointing::None => 0.0,
        Checkpointing::Selective => activations::bytes(&activations::scores(&layer), tokens, p.tp, p.sp),
        Checkpointing::Full => per_layer_all,
    };
    if recompute > 0.0 {
        out.push(Term::new(
            "recompute",
            "one layer's activations while it is recomputed in backward",
            recompute,
            Phase::Recompute,
            KORTHIKANTI,
        ));
    }
    if stage.first() && shape.dropout {
        out.push(Term::new(
            "embedding_dropout",
            "embedding dropout mask",
            h * tokens * in_flight / seq_split,
            Phase::Forward,
            KORTHIKANTI,
        ));
    }
    if stage.last() && shape.head == Head::Lm {
        let norm_in = if prof.norm_upcast && shape.norm == Norm::RmsNorm {
            4.0
        } else {
            fmt.residual
        };
        let final_norm = if shape.final_norm { norm_in } else { 0.0 };
        out.push(Term::new(
            "head_input",
            "final norm and output projection inputs",
            (final_norm + fmt.gemm_in) * h * tokens / seq_split,
            Phase::Forward,
            KORTHIKANTI,
        ));
        let loss_bytes = match prof.loss {
            // fp32 copy of the logits + fp32 log-softmax kept for backward (its gradient in backward).
            LossKernel::Fp32Upcast => 8.0,
            // One fp32 copy, softmax in place (Korthikanti sec. 4.3: 4sbv/t).
            LossKernel::FusedFp32 => 4.0,
        };
        let per_token = shape.vocab as f64 / p.tp as f64 * (fmt.act + loss_bytes);
        out.push(Term::new(
            "logits",
            format!(
                "logits and cross-entropy: vocab {} x ({} + {loss_bytes}) B per token",
                shape.vocab, fmt.act
            ),
            per_token * tokens,
            Phase::Loss,
            "Korthikanti et al. 2022, sec. 4.3; HF ForCausalLMLoss upcasts logits to fp32",
        ));
    }
    out
}

/// Model states of a breakdown (parameters, gradients, master weights, optimizer states).
pub fn model_states(breakdown: &Breakdown) -> u64 {
    breakdown
        .terms
        .iter()
        .filter(|t| {
            matches!(
                t.key,
                "params" | "frozen_params" | "grads" | "master_params" | "optimizer_states"
            )
        })
        .map(|t| t.bytes)
        .sum()
}
