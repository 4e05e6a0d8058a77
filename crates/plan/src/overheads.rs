//! Memory that is neither model state nor stored activation: gathered parameters and
//! communication buckets, weight casts, optimizer-step temporaries, the CUDA context, NCCL, and
//! the caching allocator's fragmentation. Each constant names its source; docs/PLAN.md explains.

use super::breakdown::{Phase, Term};
use super::framework::Framework;
use super::framework::{Profile, StepKernel};
use super::job::{Finetune, Job, Offload, Optimizer, Precision, Sharding};
use super::placement::Local;
use super::states::{grad_bytes, master_bytes, state_bytes, weight_bytes, NF4_BYTES};

const MIB: f64 = (1u64 << 20) as f64;

/// NCCL's device buffers per communicator this process joins (data-, tensor- and pipeline-parallel
/// groups each have one): NCCL_BUFFSIZE (4 MiB) for each channel and peer plus the LL/LL128
/// protocol buffers. A rough figure; docs/PLAN.md.
const NCCL_PER_COMMUNICATOR: f64 = 256.0 * MIB;

/// Reserved-but-unallocated memory as a share of the transient part of the peak (activations,
/// buffers, temporaries): blocks of varying sizes freed and reallocated every step leave holes the
/// caching allocator keeps. Calibrated on published measurements (docs/PLAN.md, "Fragmentation").
pub(crate) const FRAGMENTATION: f64 = 0.25;

/// Parameters gathered and gradients reduce-scattered on separate CUDA streams live in pools of
/// their own: a block freed by one stream is not reused by another until the streams synchronise
/// (PyTorch CUDA semantics, `record_stream`; Zhao et al. 2023, "PyTorch FSDP", sec. 4.4 on the
/// rate limiter). The two sides differ, so they are two terms:
///
/// - all-gather: the rate limiter lets one all-gather run ahead of the unit in use, and units of
///   equal size reuse each other's blocks, so the pool holds one more unit than the two counted
///   in `gathered_params`: one extra copy (a mechanism, not a fit);
/// - reduce-scatter: each unit's unsharded gradient, its fp32 copy for the reduction
///   (`reduce_dtype`) and the reduced shard, all held until the reduce-scatter stream is done
///   with them, for the units in flight: the extra copies are fitted on torchtitan's FSDP rows
///   (docs/PLAN.md, "Fragmentation"; the only fitted rows with a sharded full fine-tuning).
///
/// With LoRA the reduced gradients are the adapters' only, so a large frozen base no longer
/// brings a reduce-scatter pool the size of its layers (issue 18).
const STREAM_POOL_GATHER_COPIES: f64 = 1.0;
const STREAM_POOL_REDUCE_COPIES: f64 = 7.0;

/// Terms outside the allocator: the CUDA context and NCCL.
pub(crate) fn device(job: &Job) -> Vec<Term> {
    let p = job.parallel;
    let communicators = [p.dp, p.tp, p.pp].iter().filter(|&&n| n > 1).count() as f64;
    let mut out = vec![Term::new(
        "cuda_context",
        format!(
            "CUDA context and library handles ({:.0} MiB)",
            job.cuda_context as f64 / MIB
        ),
        job.cuda_context as f64,
        Phase::Device,
        "measured per process: nvidia-smi before the first tensor; docs/PLAN.md",
    )];
    if communicators > 0.0 {
        out.push(Term::new(
            "nccl",
            format!(
                "NCCL buffers ({communicators:.0} communicator(s) x {:.0} MiB)",
                NCCL_PER_COMMUNICATOR / MIB
            ),
            communicators * NCCL_PER_COMMUNICATOR,
            Phase::Device,
            "NCCL docs: NCCL_BUFFSIZE per channel and peer; rough",
        ));
    }
    out
}

/// Parameters gathered for compute, weight casts and communication buckets.
pub(crate) fn buffers(job: &Job, local: &Local, profile: &Profile) -> Vec<Term> {
    let mut out = Vec::new();
    let w = weight_bytes(job.precision);
    let g = grad_bytes(job.precision, profile);
    let base = match job.finetune {
        Finetune::Lora { quantized: true, .. } => NF4_BYTES,
        _ => w,
    };
    let dp = job.parallel.dp;
    match job.sharding {
        Sharding::Fsdp => {
            out.push(Term::new(
                "gathered_root",
                "FSDP: root unit (embeddings, final norm, head), unsharded through the step",
                local.root * base,
                Phase::Forward,
                "PyTorch FSDP docs: the root unit is not resharded after forward",
            ));
            out.push(Term::new(
                "gathered_params",
                "FSDP: current and prefetched layer, unsharded",
                2.0 * local.layer * base,
                Phase::Forward,
                "PyTorch FSDP docs: backward_prefetch gathers the next unit early",
            ));
            out.push(Term::new(
                "grad_buckets",
                "FSDP: unsharded gradients of two layers awaiting reduce-scatter",
                2.0 * local.layer * g.max(2.0) * trainable_share(local),
                Phase::Forward,
                "Zhao et al. 2023 (PyTorch FSDP), sec. 3.2",
            ));
        }
        Sharding::Zero(3) => {
            // Modules are gathered one at a time, the next one prefetched; the embedding and the
            // output projection are modules of their own.
            let unit = local.layer.max(local.largest_table);
            out.push(Term::new(
                "gathered_params",
                "ZeRO-3: current and prefetched unit, unsharded",
                2.0 * unit * base,
                Phase::Forward,
                "DeepSpeed ZeRO-3 docs: stage3_prefetch_bucket_size, stage3_max_live_parameters",
            ));
        }
        _ => {}
    }
    let bytes_of = |key: &str| -> f64 { out.iter().filter(|t| t.key == key).map(|t| t.bytes as f64).sum() };
    let pools = STREAM_POOL_GATHER_COPIES * bytes_of("gathered_params")
        + STREAM_POOL_REDUCE_COPIES * bytes_of("grad_buckets");
    if pools > 0.0 {
        out.push(Term::new(
            "stream_pools",
            format!(
                "communication-stream pools ({STREAM_POOL_GATHER_COPIES:.0} x gathered layers + {STREAM_POOL_REDUCE_COPIES:.0} x gradient buffers)"
            ),
            pools,
            Phase::Fragmentation,
            "PyTorch CUDA semantics (record_stream); Zhao et al. 2023 (PyTorch FSDP), sec. 4.4; fitted on torchtitan PR #165",
        ));
    }
    if let Some(buckets) = profile.zero_buckets {
        if job.sharding.stage() >= 1 {
            let reduce = (buckets.reduce as f64).min(local.trainable);
            out.push(Term::new(
                "reduce_bucket",
                format!("ZeRO gradient reduce bucket ({} elements)", buckets.reduce),
                reduce * g,
                Phase::Resident,
                "DeepSpeed config docs: reduce_bucket_size (default 5e8)",
            ));
        }
        if matches!(job.sharding, Sharding::Zero(1) | Sharding::Zero(2)) && dp > 1 {
            let gather = (buckets.allgather as f64).min(local.trainable);
            out.push(Term::new(
                "allgather_bucket",
                format!(
                    "ZeRO parameter all-gather bucket after the step ({} elements)",
                    buckets.allgather
                ),
                gather * w,
                Phase::Step,
                "DeepSpeed config docs: allgather_bucket_size (default 5e8)",
            ));
        }
    }
    if profile.ddp_bucket_copy && job.sharding == Sharding::None && dp > 1 {
        out.push(Term::new(
            "ddp_buckets",
            "DDP all-reduce buckets (a copy of the gradients)",
            local.trainable * g,
            Phase::Resident,
            "PyTorch DDP docs: gradient_as_bucket_view=False (default) keeps gradient-sized buckets",
        ));
    }
    if job.precision == Precision::Amp && !job.sharding.gathers_params() {
        out.push(Term::new(
            "autocast_weights",
            "autocast 16-bit copies of the linear weights (cached through backward)",
            local.linear * 2.0,
            Phase::Forward,
            "PyTorch autocast docs: casts of leaf tensors are cached inside the autocast region",
        ));
    }
    if job.precision == Precision::Fp8 {
        out.push(Term::new(
            "fp8_weights",
            "fp8 copies of the linear weights",
            local.linear * 1.0
                / if job.sharding.gathers_params() {
                    dp as f64
                } else {
                    1.0
                },
            Phase::Forward,
            "Transformer Engine: fp8 weight casts cached across micro-batches",
        ));
    }
    if let Finetune::Lora { quantized: true, .. } = job.finetune {
        out.push(Term::new(
            "dequantized_weight",
            "one dequantised 4-bit weight (bf16, transient)",
            local.largest_linear * 2.0,
            Phase::Forward,
            "bitsandbytes 4-bit matmul dequantises the weight per call",
        ));
    }
    out
}

/// LoRA's frozen layers produce no weight gradients: only the adapters' share is reduced.
fn trainable_share(local: &Local) -> f64 {
    let all = local.trainable + local.frozen + local.frozen_nf4;
    if all > 0.0 {
        local.trainable / all
    } else {
        1.0
    }
}

/// Temporaries of the optimizer step.
pub(crate) fn step(job: &Job, local: &Local, profile: &Profile) -> Vec<Term> {
    let mut out = Vec::new();
    if job.offload != Offload::None {
        return out;
    }
    let shard = if job.sharding.stage() >= 1 {
        job.parallel.dp as f64
    } else {
        1.0
    };
    let held = local.trainable / shard;
    let s = state_bytes(job.precision);
    // A step in backward runs one parameter at a time, whatever the implementation.
    // bitsandbytes' paged optimizers update in one fused kernel per parameter, in place.
    let kernel = if job.paged_optimizer {
        StepKernel::Fused
    } else if job.optimizer_in_backward {
        StepKernel::ForLoop
    } else {
        job.optimizer_impl.unwrap_or(profile.step)
    };
    let (bytes, what) = match (kernel, job.optimizer) {
        (StepKernel::Foreach, Optimizer::AdamW) => (
            held * s,
            "foreach AdamW: sqrt(variance) of all parameters at once",
        ),
        (StepKernel::ForLoop, Optimizer::AdamW) => (
            local.largest_trainable * s,
            "AdamW loop: sqrt(variance) of the largest parameter",
        ),
        // bitsandbytes updates its 8-bit states in place in one kernel. torchao's AdamW8bit
        // steps one parameter at a time through a compiled `single_param_adam` that dequantises
        // both moments to fp32 (`exp_avg.float().lerp(...)`), which the quantising `copy_` and
        // the update both read: two fp32 buffers the size of the parameter being stepped.
        (StepKernel::Fused, Optimizer::Adam8bit) => (0.0, ""),
        (_, Optimizer::Adam8bit) => (
            2.0 * local.largest_trainable * 4.0,
            "8-bit AdamW (torchao): both moments of the largest parameter dequantised to fp32",
        ),
        // galore_torch loops over parameters; every update_proj_gap steps it takes the SVD of an
        // fp32 copy of the gradient, and it projects the update back to full rank.
        (_, Optimizer::Galore { .. }) => (
            2.0 * local.largest_trainable * 4.0,
            "GaLore: fp32 copy of the largest gradient (SVD) and its full-rank update",
        ),
        // Adafactor always loops over parameters: the squared gradient, the update and its RMS.
        (_, Optimizer::Adafactor) => (
            3.0 * local.largest_trainable * 4.0,
            "Adafactor: update temporaries of the largest parameter",
        ),
        _ => (0.0, ""),
    };
    // A step in backward runs while the backward's tensors are live (the output head steps
    // right after the loss's backward), so its temporaries add to that phase, not to a phase of
    // their own after it.
    let phase = if job.optimizer_in_backward {
        Phase::Forward
    } else {
        Phase::Step
    };
    if bytes > 0.0 {
        out.push(Term::new(
            "step_temporaries",
            what,
            bytes,
            phase,
            "torch.optim docs: foreach implementations hold tensor-list intermediates",
        ));
    }
    if job.framework == Framework::Deepspeed && master_bytes(job.precision) > 0.0 {
        out.push(Term::new(
            "fp32_grad_partition",
            "fp32 copy of the gradient partition for the step",
            held * 4.0,
            Phase::Step,
            "DeepSpeed stage_1_and_2.py: single_partition_of_fp32_groups[i].grad",
        ));
    }
    out
}
