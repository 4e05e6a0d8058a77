//! Activations stored for the backward pass, tensor by tensor, after Korthikanti et al. 2022,
//! "Reducing Activation Recomputation in Large Transformer Models", sec. 4.1 and table 2.
//!
//! For a GPT layer in 16-bit precision with dropout the paper counts, per token (s·b) and layer:
//! attention 11h + 5as bytes, MLP 19h, two layer norms 4h: `sbh(34 + 5as/h)`. The list below
//! names each of those tensors so that other shapes follow from the same reasoning: gated MLPs
//! (three matrices), grouped-query attention (narrower K and V), no dropout, fp32 or autocast
//! precision, fp8 GEMM inputs, fused attention (no `as` score terms), and the implementation
//! details of the framework (fp32 norm copies, `repeat_kv`). With those set to the paper's case
//! the list adds up to exactly `34h + 5as` (crates/plan/tests/integration/plan_activations.rs).
//!
//! Tensor parallelism (size t) splits everything inside attention and MLP; the norm inputs, the
//! first GEMM inputs and the dropout masks stay replicated unless sequence parallelism splits them
//! too: `sbh(10 + 24/t + 5as/(ht))` and `sbh(34/t + 5as/(ht))` (table 2).

use super::framework::Profile;
use super::job::Precision;
use super::shape::{Mlp, ModelShape};

/// How a stored tensor divides under tensor parallelism.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Split {
    /// Split over the tensor-parallel group (attention heads, MLP columns).
    Tensor,
    /// Replicated across the tensor-parallel group unless sequence parallelism splits it.
    Sequence,
}

/// One tensor a layer keeps for its backward pass.
#[derive(Debug, Clone, PartialEq)]
pub struct Stored {
    pub name: &'static str,
    /// Bytes per token (one position of one sample) of one layer, before any split.
    bytes_per_token: f64,
    pub(crate) split: Split,
    /// Part of the attention score matrix (`a x s` per token): dropped by fused attention and
    /// recomputed by selective recomputation.
    pub(crate) score: bool,
}

/// Numeric formats of the tensors a layer stores.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Formats {
    /// Most activations (GEMM outputs, elementwise results).
    pub(crate) act: f64,
    /// Inputs saved by GEMMs (1 byte with fp8 GEMMs).
    pub(crate) gemm_in: f64,
    /// The residual stream: the layer's input and the norms' inputs (fp32 under autocast).
    pub(crate) residual: f64,
}

pub fn formats(precision: Precision) -> Formats {
    match precision {
        Precision::Fp32 => Formats {
            act: 4.0,
            gemm_in: 4.0,
            residual: 4.0,
        },
        // Autocast runs GEMMs in 16 bits but keeps the residual adds and layer norms in fp32.
        Precision::Amp => Formats {
            act: 2.0,
            gemm_in: 2.0,
            residual: 4.0,
        },
        Precision::Mixed | Precision::Bf16 => Formats {
            act: 2.0,
            gemm_in: 2.0,
            residual: 2.0,
        },
        // Transformer Engine saves the fp8 cast of each GEMM input.
        Precision::Fp8 => Formats {
            act: 2.0,
            gemm_in: 1.0,
            residual: 2.0,
        },
    }
}

/// Bytes per attention-score element kept by eager attention: the softmax output, and with
/// dropout its mask and its output (the paper's 2 + 1 + 2 = 5 in 16-bit precision).
fn score_bytes(precision: Precision, dropout: bool, profile: &Profile) -> f64 {
    let mask = if dropout { 1.0 } else { 0.0 };
    match precision {
        // softmax output, mask, dropout output (which is also the AV matmul's input).
        Precision::Fp32 => 4.0 + mask + if dropout { 4.0 } else { 0.0 },
        // Autocast's softmax runs in fp32; the AV matmul saves its own 16-bit cast of it.
        Precision::Amp => 4.0 + mask + 2.0,
        _ if profile.softmax_fp32 => 4.0 + mask + 2.0,
        _ => 2.0 + if dropout { 1.0 + 2.0 } else { 0.0 },
    }
}

/// Share of a layer's eager stored activations that a `torch.compile`d layer still stores:
/// AOTAutograd's min-cut partitioner recomputes cheap pointwise results in backward (the fp32
/// norm copies, SiLU, casts, transposes) instead of saving them. Which tensors it keeps is a
/// decision of the partitioner, not of the model code, so this one constant is fitted: on
/// torchtune's README row "+ Compile" (Llama 3.2 3B, batch 2, packed seq 4096, bf16: 60.0 ->
/// 51.0 GiB peak active; crates/plan/tests/integration/plan_validation.rs, a fitted row).
pub const COMPILE_ACTIVATION_SHARE: f64 = 0.74;

/// Layers' worth of saved activations that stay on the GPU with activation offloading: the layer
/// being computed and the one whose tensors are in transfer (torchtune `OffloadActivations`
/// copies on a side stream and brings tensors back one layer ahead of backward).
pub(crate) const OFFLOAD_RESIDENT_LAYERS: f64 = 2.0;

/// The tensors one transformer layer stores with no recomputation, for sequence length `seq`.
pub fn layer(
    shape: &ModelShape,
    precision: Precision,
    profile: &Profile,
    flash: bool,
    seq: u64,
) -> Vec<Stored> {
    layer_with(shape, precision, profile, flash, seq, true)
}

/// `layer`, saying whether the norms' weights are trained (not with LoRA): an upcasting RMSNorm
/// then also saves its 16-bit normalised output for the weight's gradient.
pub(crate) fn layer_with(
    shape: &ModelShape,
    precision: Precision,
    profile: &Profile,
    flash: bool,
    seq: u64,
    norm_weights_trained: bool,
) -> Vec<Stored> {
    let fmt = formats(precision);
    let h = shape.hidden as f64;
    let f = shape.ffn as f64;
    let a = shape.heads as f64;
    let s = seq as f64;
    let kv = if profile.repeat_kv {
        h
    } else {
        shape.kv_dim() as f64
    };
    let mask = if shape.dropout { 1.0 } else { 0.0 };
    // Norms save their input; Hugging Face/torchtitan RMSNorm saves an fp32 copy of it.
    let norm_in = if profile.norm_upcast && shape.norm == super::shape::Norm::RmsNorm {
        4.0
    } else {
        fmt.residual
    };
    // `weight * x_normed.to(dtype)` (HF `LlamaRMSNorm`, torchtitan, torchtune) saves the cast for
    // the weight's gradient: a 16-bit tensor besides the fp32 input and the norm's output.
    let norm_copy = profile.norm_upcast && shape.norm == super::shape::Norm::RmsNorm && norm_weights_trained;
    let t = |name, bytes_per_token, split| Stored {
        name,
        bytes_per_token,
        split,
        score: false,
    };
    let score = |name, bytes_per_token| Stored {
        name,
        bytes_per_token,
        split: Split::Tensor,
        score: true,
    };

    let mut out = vec![t("attention norm input", norm_in * h, Split::Sequence)];
    if norm_copy {
        out.push(t(
            "attention norm: 16-bit normalised input (weight gradient)",
            fmt.act * h,
            Split::Sequence,
        ));
    }
    out.extend([
        t("QKV projection input", fmt.gemm_in * h, Split::Sequence),
        t("Q", fmt.act * h, Split::Tensor),
        t("K", fmt.act * kv, Split::Tensor),
        t("V", fmt.act * kv, Split::Tensor),
    ]);
    if flash {
        // The kernel keeps its output and the fp32 log-sum-exp of each row, not the scores.
        out.push(t("softmax log-sum-exp (fused attention)", 4.0 * a, Split::Tensor));
        if profile.attention_output_copy {
            out.push(t(
                "attention output (kept by fused attention)",
                fmt.act * h,
                Split::Tensor,
            ));
        }
    } else {
        out.push(score(
            "attention scores (softmax, dropout)",
            score_bytes(precision, shape.dropout, profile) * a * s,
        ));
    }
    out.push(t("output projection input", fmt.gemm_in * h, Split::Tensor));
    if mask > 0.0 {
        out.push(t("attention dropout mask", mask * h, Split::Sequence));
    }
    out.push(t("MLP norm input", norm_in * h, Split::Sequence));
    if norm_copy {
        out.push(t(
            "MLP norm: 16-bit normalised input (weight gradient)",
            fmt.act * h,
            Split::Sequence,
        ));
    }
    out.push(t("MLP input", fmt.gemm_in * h, Split::Sequence));
    match shape.mlp {
        Mlp::Gelu => out.push(t("GeLU input", fmt.act * f, Split::Tensor)),
        Mlp::Gated if profile.fused_swiglu => out.push(t(
            "gate and up outputs (fused SwiGLU)",
            2.0 * fmt.act * f,
            Split::Tensor,
        )),
        Mlp::Gated => {
            out.push(t("gate output (SiLU input)", fmt.act * f, Split::Tensor));
            out.push(t("SiLU output", fmt.act * f, Split::Tensor));
            out.push(t("up output", fmt.act * f, Split::Tensor));
        }
    }
    out.push(t("down projection input", fmt.gemm_in * f, Split::Tensor));
    if mask > 0.0 {
        out.push(t("MLP dropout mask", mask * h, Split::Sequence));
    }
    out
}

/// Bytes of `tensors` for `tokens` tokens on one GPU of a tensor-parallel group of `tp`.
pub fn bytes(tensors: &[Stored], tokens: f64, tp: u64, sp: bool) -> f64 {
    let tp = tp as f64;
    tensors
        .iter()
        .map(|x| {
            let divisor = match x.split {
                Split::Tensor => tp,
                Split::Sequence if sp => tp,
                Split::Sequence => 1.0,
            };
            x.bytes_per_token * tokens / divisor
        })
        .sum()
}

/// The score tensors of a layer only (what selective recomputation recomputes).
pub(crate) fn scores(tensors: &[Stored]) -> Vec<Stored> {
    tensors.iter().filter(|x| x.score).cloned().collect()
}

/// The tensors without the score terms (what selective recomputation keeps).
pub fn without_scores(tensors: &[Stored]) -> Vec<Stored> {
    tensors.iter().filter(|x| !x.score).cloned().collect()
}

/// What torchtitan's per-op selective activation checkpointing (`mode = "selective"`,
/// `selective_ac_option = "op"`) keeps of one layer: the checkpointed block's input, the output
/// of every other matmul in forward order (the 1st, 3rd, ...: its policy saves `aten.mm` unless
/// the per-layer mm count is even), and the outputs of the fused attention kernel (output and
/// log-sum-exp; `_scaled_dot_product_flash_attention` is on its save list). Everything else is
/// recomputed from those in backward, one layer at a time. Source: torchtitan
/// `parallelize_llama.py` at commit 9dec370 (`_save_list`, `_custom_policy`); the matmul order is
/// its Llama block's: wq, wk, wv, wo, then w1, w3, w2 (`w2(silu(w1(x)) * w3(x))`).
///
/// Eager attention (no fused kernel) saves nothing of its own: its batched matmuls and softmax
/// are not on the save list. The outputs of the row-parallel projections (attention output,
/// down) are counted as replicated under tensor parallelism unless sequence parallelism splits
/// them (the reduce-scatter output is on the save list).
pub(crate) fn op_checkpoint_saved(shape: &ModelShape, precision: Precision, flash: bool) -> Vec<Stored> {
    let fmt = formats(precision);
    let h = shape.hidden as f64;
    let f = shape.ffn as f64;
    let a = shape.heads as f64;
    let kv = shape.kv_dim() as f64;
    let t = |name, bytes_per_token, split| Stored {
        name,
        bytes_per_token,
        split,
        score: false,
    };
    // Every matmul of the layer in forward order: (what its output is, width, split).
    let mut matmuls: Vec<(&'static str, f64, Split)> = Vec::new();
    if kv == h && shape.bias {
        matmuls.push(("QKV projection output", 3.0 * h, Split::Tensor));
    } else {
        matmuls.push(("Q projection output", h, Split::Tensor));
        matmuls.push(("K projection output", kv, Split::Tensor));
        matmuls.push(("V projection output", kv, Split::Tensor));
    }
    matmuls.push(("attention output projection output", h, Split::Sequence));
    if shape.mlp == Mlp::Gated {
        matmuls.push(("gate projection output", f, Split::Tensor));
    }
    matmuls.push(("up projection output", f, Split::Tensor));
    matmuls.push(("down projection output", h, Split::Sequence));

    let mut out = vec![t(
        "layer input (checkpointed block input)",
        fmt.residual * h,
        Split::Sequence,
    )];
    // The policy saves the 1st, 3rd, 5th ... matmul (1-based count; an even count recomputes).
    out.extend(
        matmuls
            .into_iter()
            .step_by(2)
            .map(|(name, width, split)| t(name, fmt.act * width, split)),
    );
    if flash {
        out.push(t("fused attention output", fmt.act * h, Split::Tensor));
        out.push(t("softmax log-sum-exp (fused attention)", 4.0 * a, Split::Tensor));
    }
    out
}
