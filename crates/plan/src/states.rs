//! Model states: parameters, gradients, optimizer states (and master weights), partitioned by
//! ZeRO stage (Rajbhandari et al. 2020, "ZeRO: Memory Optimizations Toward Training Trillion
//! Parameter Models", section 5, figure 1):
//!
//! | stage | per GPU                      |
//! |-------|------------------------------|
//! | 0     | (2 + 2 + K) psi              |
//! | 1     | 2 psi + 2 psi + K psi / Nd   |
//! | 2     | 2 psi + (2 + K) psi / Nd     |
//! | 3     | (2 + 2 + K) psi / Nd         |
//!
//! with 2 bytes for 16-bit parameters and gradients and K = 12 for mixed-precision Adam (fp32
//! master weights, momentum and variance). Other precisions and optimizers change the byte counts,
//! not the partitioning. FSDP FULL_SHARD partitions like stage 3.

use super::breakdown::{Phase, Term};
use super::framework::Profile;
use super::job::{Job, Offload, Optimizer, Precision};
use super::placement::Local;

const ZERO: &str = "Rajbhandari et al. 2020 (ZeRO), sec. 5";

/// Bytes per element of the weights the model computes with.
pub(crate) fn weight_bytes(precision: Precision) -> f64 {
    match precision {
        Precision::Fp32 | Precision::Amp => 4.0,
        Precision::Mixed | Precision::Bf16 | Precision::Fp8 => 2.0,
    }
}

/// Bytes per element of the gradients kept between backward and step.
pub(crate) fn grad_bytes(precision: Precision, profile: &Profile) -> f64 {
    match precision {
        Precision::Fp32 | Precision::Amp => 4.0,
        Precision::Mixed | Precision::Fp8 if profile.fp32_main_grads => 4.0,
        Precision::Mixed | Precision::Bf16 | Precision::Fp8 => 2.0,
    }
}

/// Bytes per element of the fp32 master copy the optimizer updates (0 when the weights are the master).
pub(crate) fn master_bytes(precision: Precision) -> f64 {
    match precision {
        Precision::Mixed | Precision::Fp8 => 4.0,
        Precision::Fp32 | Precision::Amp | Precision::Bf16 => 0.0,
    }
}

/// Bytes per element of an optimizer state tensor: pure bf16 keeps them in bf16 (PyTorch allocates
/// states like the parameter), everything else in fp32.
pub(crate) fn state_bytes(precision: Precision) -> f64 {
    if precision == Precision::Bf16 {
        2.0
    } else {
        4.0
    }
}

/// 4-bit NormalFloat with double quantisation: 4 + 8/64 + 32/(64*256) bits per parameter
/// (Dettmers et al. 2023, "QLoRA", sec. 3: double quantisation brings the constants from 0.5 to
/// 0.127 bits per parameter).
pub(crate) const NF4_BYTES: f64 = (4.0 + 8.0 / 64.0 + 32.0 / (64.0 * 256.0)) / 8.0;

/// 8-bit optimizers: one byte per state element plus one fp32 absmax per block of 256 (Dettmers
/// et al. 2022, "8-bit Optimizers via Block-wise Quantization", used 2048; bitsandbytes'
/// `Optimizer2State.init_state` and torchao's `AdamW8bit` both quantise in blocks of 256).
const BLOCKWISE_8BIT: f64 = 1.0 + 4.0 / 256.0;

/// The optimizer's own state for the trainable parameters on this GPU, before sharding: bytes and
/// a description.
fn optimizer_state(job: &Job, local: &Local) -> (f64, String) {
    // bitsandbytes' 32-bit optimizers (the paged ones among them) keep their states in fp32
    // whatever the parameters' dtype (`Optimizer2State.init_state`: `dtype=torch.float32`).
    let s = if job.paged_optimizer {
        4.0
    } else {
        state_bytes(job.precision)
    };
    let dtype = if s == 2.0 { "bf16" } else { "fp32" };
    match job.optimizer {
        Optimizer::AdamW => (
            local.trainable * 2.0 * s,
            format!("AdamW momentum + variance, {dtype}"),
        ),
        Optimizer::Adam8bit => (
            local.trainable * 2.0 * BLOCKWISE_8BIT,
            "8-bit AdamW momentum + variance, block-wise".into(),
        ),
        Optimizer::Sgd => (0.0, "SGD: no state".into()),
        Optimizer::SgdMomentum => (local.trainable * s, format!("SGD momentum buffer, {dtype}")),
        Optimizer::Adafactor => (
            local.adafactor_state * s,
            format!("Adafactor factored second moment, {dtype}"),
        ),
        // Zhao et al. 2024, "GaLore", table 1: an m x n matrix (m <= n) keeps the projection
        // m x r and the two Adam moments r x n; everything else keeps AdamW's 2 states.
        Optimizer::Galore { rank } => {
            let r = rank as f64;
            (
                (2.0 * r * local.galore_long + r * local.galore_short + 2.0 * local.galore_other) * s,
                format!("GaLore rank {rank}: projected Adam moments + projections, {dtype}"),
            )
        }
    }
}

/// The parameter, gradient, master-weight and optimizer-state terms for one GPU.
pub(crate) fn terms(job: &Job, local: &Local, profile: &Profile) -> Vec<Term> {
    let stage = job.sharding.stage();
    let nd = job.parallel.dp as f64;
    let shard = |from_stage: u8| if stage >= from_stage { nd } else { 1.0 };
    let sharded = |from_stage: u8| {
        if stage >= from_stage && nd > 1.0 {
            format!(", /{} ZeRO-{stage}", job.parallel.dp)
        } else {
            String::new()
        }
    };
    let keep = |offloaded: bool| if offloaded { 0.0 } else { 1.0 };

    let w = weight_bytes(job.precision);
    let g = grad_bytes(job.precision, profile);
    let m = master_bytes(job.precision);
    let (opt, opt_label) = optimizer_state(job, local);
    let params_on_cpu = job.offload == Offload::Params;
    // Parameter offload moves the optimizer's side too.
    let optimizer_on_cpu = job.offload != Offload::None;
    let cpu = |offloaded: bool| {
        if offloaded {
            " (offloaded to CPU: 0 on GPU)"
        } else {
            ""
        }
    };

    let mut out = vec![Term::new(
        "params",
        format!(
            "parameters: {} x {w} B{}{}",
            count(local.trainable),
            sharded(3),
            cpu(params_on_cpu)
        ),
        local.trainable * w / shard(3) * keep(params_on_cpu),
        Phase::Resident,
        ZERO,
    )];
    if local.frozen > 0.0 || local.frozen_nf4 > 0.0 {
        out.push(Term::new(
            "frozen_params",
            format!(
                "frozen base: {} x {w} B{}{}{}",
                count(local.frozen),
                if local.frozen_nf4 > 0.0 {
                    format!(" + {} x {NF4_BYTES:.3} B (NF4)", count(local.frozen_nf4))
                } else {
                    String::new()
                },
                sharded(3),
                cpu(params_on_cpu)
            ),
            (local.frozen * w + local.frozen_nf4 * NF4_BYTES) / shard(3) * keep(params_on_cpu),
            Phase::Resident,
            "Hu et al. 2021 (LoRA); Dettmers et al. 2023 (QLoRA), sec. 3",
        ));
    }
    // When gradients exist: all step long with persistent buffers (Megatron, DeepSpeed, gradient
    // accumulation); from backward to the step otherwise, so not at the loss peak, when the
    // activations are all alive; one parameter's at a time when the step runs in backward.
    let (grad_elements, grad_phase, grad_when) = if job.optimizer_in_backward {
        (
            local.largest_trainable,
            Phase::Forward,
            " (step in backward: one parameter's at a time)",
        )
    } else if job.persistent_grads() {
        (local.trainable, Phase::Resident, "")
    } else {
        (
            local.trainable,
            Phase::Step,
            " (allocated in backward, freed by zero_grad)",
        )
    };
    out.push(Term::new(
        "grads",
        format!(
            "gradients: {} x {g} B{}{}{grad_when}",
            count(grad_elements),
            sharded(2),
            cpu(optimizer_on_cpu)
        ),
        grad_elements * g / shard(2) * keep(optimizer_on_cpu),
        grad_phase,
        ZERO,
    ));
    if m > 0.0 {
        out.push(Term::new(
            "master_params",
            format!(
                "fp32 master weights: {} x {m} B{}{}",
                count(local.trainable),
                sharded(1),
                cpu(optimizer_on_cpu)
            ),
            local.trainable * m / shard(1) * keep(optimizer_on_cpu),
            Phase::Resident,
            ZERO,
        ));
    }
    // A paged bitsandbytes optimizer allocates the states of every tensor of 1e5 elements or
    // more with cudaMallocManaged (`get_state_buffer` -> `F.get_paged`): on the GPU until the
    // driver needs the room, but outside PyTorch's caching allocator, so not in
    // max_memory_allocated/reserved. AdamW's states are per element, so the paged share is
    // the share of the trainable elements in such tensors.
    let paged_share = if job.paged_optimizer && local.trainable > 0.0 {
        local.trainable_pageable / local.trainable
    } else {
        0.0
    };
    let states = opt / shard(1) * keep(optimizer_on_cpu);
    out.push(Term::new(
        "optimizer_states",
        format!(
            "optimizer states: {opt_label}{}{}{}",
            sharded(1),
            cpu(optimizer_on_cpu),
            if paged_share > 0.0 {
                " (tensors under 1e5 elements; the rest paged)"
            } else {
                ""
            }
        ),
        states * (1.0 - paged_share),
        Phase::Resident,
        "ZeRO sec. 3.1 (K); Dettmers et al. 2022 (8-bit); Shazeer & Stern 2018 (Adafactor)",
    ));
    if paged_share > 0.0 {
        out.push(Term::new(
            "paged_optimizer_states",
            format!(
                "paged optimizer states: {opt_label}, CUDA managed memory (outside the allocator)"
            ),
            states * paged_share,
            Phase::Device,
            "bitsandbytes Optimizer8bit.get_state_buffer (F.get_paged, tensors >= 1e5 elements); Dettmers et al. 2023 (QLoRA), sec. 3",
        ));
    }
    out
}

/// "6.74B", "125.0M": a parameter count for labels.
pub(crate) fn count(n: f64) -> String {
    if n >= 1e9 {
        format!("{:.2}B", n / 1e9)
    } else if n >= 1e6 {
        format!("{:.1}M", n / 1e6)
    } else {
        format!("{:.0}", n)
    }
}
