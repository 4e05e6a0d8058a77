//! Puts the terms together for each pipeline stage that can peak and keeps the higher one.

use super::activations::{self, formats, Stored};
use super::breakdown::{total, Breakdown, Phase, Term};
use super::framework::{profile, LossKernel, Profile, LOSS_CHUNKS};
use super::job::{validate, Checkpointing, Finetune, Job, Model, PlanError};
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
    /// Every pipeline stage that was estimated (first and last; one without a pipeline), in
    /// order; `breakdown` is the one with the highest peak.
    pub stages: Vec<Breakdown>,
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
    let (job, padding_note) = with_padded_vocab(job);
    let job = &job;
    let prof = profile(job.framework);
    let layers = job.model.layers();
    let stages: Vec<Breakdown> = stages_to_check(layers, job.parallel.pp)
        .into_iter()
        .map(|stage| {
            let mut b = stage_breakdown(job, &prof, stage);
            b.notes.extend(padding_note.clone());
            b
        })
        .collect();
    let breakdown = stages
        .iter()
        .max_by_key(|b| b.peak)
        .expect("at least one stage")
        .clone();
    Ok(Estimate {
        job: job.clone(),
        params: job.model.params(),
        breakdown,
        stages,
    })
}

/// The job with its shape's vocabulary padded as the framework pads it (`Job::padded_vocab`),
/// and a note saying so when that changes the vocabulary.
fn with_padded_vocab(job: &Job) -> (Job, Option<String>) {
    let Model::Shaped(shape) = &job.model else {
        return (job.clone(), None);
    };
    let padded = job.padded_vocab(shape.vocab);
    if padded == shape.vocab {
        return (job.clone(), None);
    }
    let note = format!(
        "vocabulary padded from {} to {padded} rows (a multiple of {}): embedding, output layer and logits use the padded size",
        shape.vocab,
        job.vocab_padding_multiple()
    );
    let mut shape = shape.clone();
    shape.vocab = padded;
    (
        Job {
            model: Model::Shaped(shape),
            ..job.clone()
        },
        Some(note),
    )
}

fn stage_breakdown(job: &Job, prof: &Profile, stage: Stage) -> Breakdown {
    let here = local(&job.model, job.finetune, stage, job.parallel.tp);
    let mut terms = states::terms(job, &here, prof);
    let mut notes = Vec::new();
    match &job.model {
        Model::Shaped(shape) => terms.extend(activation_terms(job, prof, shape, stage)),
        Model::ParamsOnly(_) | Model::ParamsLayers { .. } => {
            notes.push(
                "activations not estimated: only a parameter count was given (use --model or --layers/--hidden/--heads/--vocab)"
                    .to_string(),
            );
            if let Model::ParamsOnly(n) = job.model {
                if job.sharding.gathers_params() {
                    notes.push(format!(
                        "ZeRO-3/FSDP units: {} layers of {} parameters each, the usual depth for {} parameters (hidden = 128 x layers; give --layers to change it)",
                        job.model.layers(),
                        states::count(n as f64 / job.model.layers() as f64),
                        states::count(n as f64)
                    ));
                }
            }
        }
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
    let norms_trained = job.finetune == Finetune::Full;
    let layer: Vec<Stored> =
        activations::layer_with(shape, job.precision, prof, job.flash, job.seq, norms_trained);
    // torch.compile stores a share of what the eager layer stores (activations.rs).
    let compiled = if job.compile {
        activations::COMPILE_ACTIVATION_SHARE
    } else {
        1.0
    };
    let per_layer_all = activations::bytes(&layer, tokens, p.tp, p.sp) * compiled;
    let op_saved = activations::op_checkpoint_saved(shape, job.precision, job.flash);
    let (per_layer, how) = match job.checkpointing {
        Checkpointing::None => (per_layer_all, "no recomputation"),
        Checkpointing::Selective => (
            activations::bytes(&activations::without_scores(&layer), tokens, p.tp, p.sp) * compiled,
            "selective recomputation",
        ),
        Checkpointing::Full => (
            fmt.residual * h * tokens / seq_split,
            "full recomputation: layer inputs only",
        ),
        // The policy fixes what is saved (MUST_SAVE), so torch.compile does not shrink it.
        Checkpointing::SelectiveOp => (
            activations::bytes(&op_saved, tokens, p.tp, p.sp),
            "per-op selective recomputation: input, every other matmul, attention outputs",
        ),
    };
    let in_flight = in_flight_chunks(stage, job.grad_accum, job.virtual_stages);
    let chunk_layers = stage.layers / job.virtual_stages;
    let stored_layers = (chunk_layers * in_flight) as f64;
    // The embedding's micro-batches in flight: the whole stage's without interleaving; with it,
    // those of its first chunk, at most one group of `p` micro-batches (Megatron's schedule).
    let in_flight_embedding = if job.virtual_stages > 1 {
        stage.count.min(job.grad_accum) as f64
    } else {
        in_flight as f64
    };
    // Offloading keeps only the layers in transfer on the GPU.
    let (on_gpu, offloaded) = if job.activation_offload {
        (
            stored_layers.min(activations::OFFLOAD_RESIDENT_LAYERS),
            ", offloaded to CPU: 2 layers on the GPU",
        )
    } else {
        (stored_layers, "")
    };
    let compiled_note = if job.compile { ", torch.compile" } else { "" };
    let layers_in_flight = if job.virtual_stages > 1 {
        format!(
            "{} chunks of {chunk_layers} layer(s) x {in_flight} chunk-micro-batches in flight (interleaved)",
            job.virtual_stages
        )
    } else {
        format!("{} layers x {} micro-batch(es)", stage.layers, in_flight)
    };
    let mut out = vec![Term::new(
        "activations",
        format!(
            "activations: {layers_in_flight} x {:.1} MiB ({how}{compiled_note}{offloaded})",
            per_layer / MIB
        ),
        on_gpu * per_layer,
        Phase::Forward,
        KORTHIKANTI,
    )];
    let recompute = match job.checkpointing {
        Checkpointing::None => 0.0,
        Checkpointing::Selective => {
            activations::bytes(&activations::scores(&layer), tokens, p.tp, p.sp) * compiled
        }
        Checkpointing::Full => per_layer_all,
        // The recomputed tensors of one layer: what the eager layer keeps beyond what the policy
        // saved (the saved matmul outputs stand in for some of the eager tensors).
        Checkpointing::SelectiveOp => {
            let input = fmt.residual * h * tokens / seq_split;
            (per_layer_all - (per_layer - input)).max(0.0)
        }
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
            h * tokens * in_flight_embedding / seq_split,
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
        // The final norm saves its input, and an upcasting RMSNorm also its 16-bit cast (layer()).
        let norm_copy = if prof.norm_upcast && shape.norm == Norm::RmsNorm && norms_trained {
            fmt.act
        } else {
            0.0
        };
        let final_norm = if shape.final_norm {
            norm_in + norm_copy
        } else {
            0.0
        };
        out.push(Term::new(
            "head_input",
            "final norm and output projection inputs",
            (final_norm + fmt.gemm_in) * h * tokens / seq_split,
            Phase::Forward,
            KORTHIKANTI,
        ));
        out.push(loss_term(job, prof, shape, tokens));
        if job.keep_shifted_logits {
            out.push(kept_shifted_logits(job, shape));
        }
    }
    out
}

/// Loss parallel (torchtitan's default, Megatron always): each tensor-parallel rank computes the
/// loss on its vocabulary shard. Without it the output projection's shards are all-gathered
/// (`ColwiseParallel(output_layouts=Replicate())`) and every rank holds the logits of the whole
/// vocabulary.
fn logits_gathered(job: &Job) -> bool {
    !job.loss_parallel && job.parallel.tp > 1
}

/// The vocabulary entries of the logits one GPU holds.
fn vocab_per_rank(job: &Job, shape: &ModelShape) -> f64 {
    if logits_gathered(job) {
        shape.vocab as f64
    } else {
        shape.vocab as f64 / job.parallel.tp as f64
    }
}

/// The fp32 copy of the shifted logits that a training loop keeps alive through the backward:
/// `logits = model(...).float()` (or `logits.float()` in the loss), then
/// `logits = logits[..., :-1, :].contiguous()`, with `logits` still referenced when
/// `loss.backward()` runs (torchtune's recipes before `del logits` was added in its PR #1046,
/// "free logits otherwise it peaks backward memory"; loops that hold the fp32 logits that
/// transformers < 4.46 returned, `logits.float()` in `forward`). The copy is a
/// tensor of its own (`contiguous()` of a slice), `b (s - 1)` tokens of 4 bytes per vocabulary
/// entry (sharded like the logits), live from the loss through every layer's backward, so it adds
/// to the forward/backward phase rather than to the loss alone.
fn kept_shifted_logits(job: &Job, shape: &ModelShape) -> Term {
    let shifted_tokens = (job.micro_batch * (job.seq - 1)) as f64;
    let vocab = vocab_per_rank(job, shape);
    Term::new(
        "shifted_logits",
        format!(
            "fp32 shifted logits kept through the backward: {} tokens x vocab {} x 4 B",
            shifted_tokens, shape.vocab
        ),
        shifted_tokens * vocab * 4.0,
        Phase::Forward,
        "torchtune PR #1046 (del logits before backward); logits[..., :-1, :].contiguous()",
    )
}

/// Model-chunk micro-batches whose activations stage `stage` holds at its peak, as Megatron's
/// schedules run them (`megatron/core/pipeline_parallel/schedules.py`,
/// `get_pp_rank_microbatches`): the warm-up forwards plus the one forward of the first 1F1B
/// step, never more than the step has (`grad_accum` micro-batches x `virtual_stages` chunks).
///
/// - 1F1B (`virtual_stages` = 1): `p - i - 1` warm-up forwards on rank `i`, so `p - i`
///   micro-batches (Narayanan et al. 2021; Korthikanti et al. 2022, sec. 4.2.3);
/// - interleaved (`virtual_stages` = v chunks of `L / (p v)` layers per rank): `2 (p - i - 1) + (v - 1) p`
///   warm-up chunk forwards. For many micro-batches the first rank then holds
///   `L (1 + (p - 1) / (p v))` layers' worth, Korthikanti's interleaved figure, and the last
///   rank `L ((v - 1) / v + 1 / (p v))`: nearly as much, besides the output layer and logits, so
///   the last stage can hold the peak.
pub(crate) fn in_flight_chunks(stage: Stage, grad_accum: u64, virtual_stages: u64) -> u64 {
    let (p, i, v) = (stage.count, stage.index, virtual_stages);
    let warmup = if v > 1 {
        2 * (p - i - 1) + (v - 1) * p
    } else {
        p - i - 1
    };
    (warmup + 1).min(grad_accum * v)
}

/// The logits and the cross entropy, by how the loss is computed.
fn loss_term(job: &Job, prof: &Profile, shape: &ModelShape, tokens: f64) -> Term {
    let fmt = formats(job.precision);
    let gathered = logits_gathered(job);
    let vocab = vocab_per_rank(job, shape);
    let kernel = job.loss_impl.unwrap_or(prof.loss);
    let (bytes, label, source) = match kernel {
        // 16-bit logits + fp32 copy + fp32 log-softmax kept for backward (its gradient in backward).
        // With the shifted fp32 copy kept (`kept_shifted_logits`), the model hands out fp32
        // logits (its 16-bit output is not held) and that copy is the loss's input, counted in
        // its own term. The loss's backward peak is then the larger: `F.cross_entropy` is
        // `nll_loss(log_softmax(x))` (ATen `cross_entropy_loss`); `NllLossBackward0` hands a
        // gradient of the input's full size to `LogSoftmaxBackward0`, which allocates its own
        // (`_log_softmax_backward_data`) while that gradient and the saved fp32 log-softmax are
        // still held: 3 x 4 bytes beside the kept copy (torchtitan PR #112's debug model, whose
        // peak is this, measures the 16 bytes per entry; docs/PLAN.md sec. 4).
        LossKernel::Fp32Upcast if job.keep_shifted_logits => (
            vocab * tokens * 12.0,
            format!(
                "cross-entropy backward: vocab {} x 12 B per token (saved log-softmax, the nll gradient and the log-softmax gradient, beside the kept copy)",
                shape.vocab
            ),
            "Korthikanti et al. 2022, sec. 4.3; HF ForCausalLMLoss upcasts logits to fp32",
        ),
        LossKernel::Fp32Upcast => (
            vocab * tokens * (fmt.act + 8.0),
            format!(
                "logits and cross-entropy: vocab {} x ({} + 8) B per token",
                shape.vocab, fmt.act
            ),
            "Korthikanti et al. 2022, sec. 4.3; HF ForCausalLMLoss upcasts logits to fp32",
        ),
        // One fp32 copy, softmax in place (Korthikanti sec. 4.3: 4sbv/t).
        LossKernel::FusedFp32 => (
            vocab * tokens * (fmt.act + 4.0),
            format!(
                "logits and vocab-parallel cross-entropy: vocab {} x ({} + 4) B per token",
                shape.vocab, fmt.act
            ),
            "Korthikanti et al. 2022, sec. 4.3 (Megatron vocab-parallel cross entropy)",
        ),
        // Eager: 16-bit logits and fp32 log-softmax of every chunk; fp32 copy and gradient of one
        // chunk. Compiled (torchtune compiles the chunk loss with the model): the partitioner
        // saves only the chunk's 16-bit logits (held anyway) and a log-sum-exp per token, and
        // computes one chunk's 16-bit gradient in backward.
        LossKernel::Chunked => {
            let per = if job.compile {
                fmt.act * (1.0 + 1.0 / LOSS_CHUNKS)
            } else {
                fmt.act + 4.0 + 8.0 / LOSS_CHUNKS
            };
            (
                vocab * tokens * per,
                format!(
                    "chunked cross-entropy ({LOSS_CHUNKS:.0} chunks{}): vocab {} x {per:.2} B per token",
                    if job.compile { ", compiled" } else { "" },
                    shape.vocab
                ),
                "torchtune CEWithChunkedOutputLoss: fp32 upcast one chunk at a time",
            )
        }
        // The gradient of the head's input (16-bit) and one chunk of fp32 logits, whose tokens
        // Liger sizes to about tokens x hidden / vocab (so ~4 hidden bytes per token); the
        // gradient of a trained head's weight is computed in forward, so it exists at the loss.
        LossKernel::FusedLinear => {
            let h = shape.hidden as f64;
            let head_grad = if job.finetune == Finetune::Full {
                vocab * h * states::grad_bytes(job.precision, prof)
            } else {
                0.0
            };
            (
                tokens * h * (fmt.act + 4.0) + head_grad,
                "fused linear cross-entropy: head input gradient + one chunk of logits".to_string(),
                "Liger FusedLinearCrossEntropy; Wijmans et al. 2024 (Cut Cross-Entropy)",
            )
        }
    };
    let label = if gathered {
        format!(
            "{label}, all-gathered over tp {} (no loss parallel)",
            job.parallel.tp
        )
    } else {
        label
    };
    Term::new("logits", label, bytes, Phase::Loss, source)
}

/// Model states of a breakdown (parameters, gradients, master weights, optimizer states).
pub fn model_states(breakdown: &Breakdown) -> u64 {
    breakdown
        .terms
        .iter()
        .filter(|t| {
            matches!(
                t.key,
                "params"
                    | "frozen_params"
                    | "grads"
                    | "master_params"
                    | "optimizer_states"
                    | "paged_optimizer_states"
            )
        })
        .map(|t| t.bytes)
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stage(index: u64, count: u64) -> Stage {
        Stage {
            index,
            count,
            layers: 8,
        }
    }

    #[test]
    fn plain_1f1b_holds_p_minus_i_micro_batches() {
        assert_eq!(in_flight_chunks(stage(0, 4), 16, 1), 4);
        assert_eq!(in_flight_chunks(stage(3, 4), 16, 1), 1);
        assert_eq!(in_flight_chunks(stage(0, 4), 2, 1), 2);
    }

    #[test]
    fn interleaving_matches_korthikanti_on_the_first_rank() {
        // Many micro-batches: the first rank holds L (1 + (p - 1) / (p v)) layers' worth.
        let (p, v, layers_per_rank) = (4u64, 2u64, 8u64);
        let chunks = in_flight_chunks(stage(0, p), 64, v);
        let held = chunks * layers_per_rank / v;
        let total_layers = p * layers_per_rank;
        assert_eq!(held * p * v, total_layers * (p * v + p - 1));
        // Never more than the step's chunk-micro-batches.
        assert_eq!(in_flight_chunks(stage(0, 4), 4, 8), 32);
        assert_eq!(in_flight_chunks(stage(3, 4), 4, 8), 29);
    }
}
