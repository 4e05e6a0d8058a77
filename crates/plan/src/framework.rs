//! The implementation details of each training stack that move memory, as plain constants.
//! Every field says which code it describes; docs/PLAN.md has the sources.

use super::names::name_in;

/// How the loss is computed from the logits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LossKernel {
    /// `cross_entropy(logits.float())`: an fp32 copy of the logits plus the fp32 log-softmax kept
    /// for backward (Hugging Face `ForCausalLMLoss`, torchtitan).
    Fp32Upcast,
    /// Megatron's vocab-parallel cross entropy: one fp32 copy, softmax computed in place.
    FusedFp32,
    /// The output projection and the upcast cross entropy run chunk by chunk over the tokens
    /// (torchtune `CEWithChunkedOutputLoss`, 8 chunks): the 16-bit logits and the fp32
    /// log-softmax of every chunk are kept, the fp32 copy and the gradients exist for one chunk.
    Chunked,
    /// Output projection and cross entropy fused into one kernel that never materialises the
    /// logits of all tokens (Liger `LigerFusedLinearCrossEntropyLoss`, Apple Cut Cross-Entropy):
    /// it computes the gradients of the head's input and weight in forward, a chunk at a time.
    FusedLinear,
}

impl LossKernel {
    /// Each kernel and its name (`plan --loss-impl`, the plan's text and JSON).
    pub const ALL: [(LossKernel, &'static str); 4] = [
        (LossKernel::Fp32Upcast, "upcast"),
        (LossKernel::FusedFp32, "vocab-parallel"),
        (LossKernel::Chunked, "chunked"),
        (LossKernel::FusedLinear, "fused-linear"),
    ];

    pub fn name(self) -> &'static str {
        name_in(&Self::ALL, self)
    }
}

/// torchtune `CEWithChunkedOutputLoss(num_output_chunks=8)`, the default of its recipes.
pub(crate) const LOSS_CHUNKS: f64 = 8.0;

/// How the optimizer step runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepKernel {
    /// One parameter at a time (`foreach=False`, transformers' old `AdamW`/`adamw_hf`, Adafactor):
    /// temporaries the size of the largest parameter.
    ForLoop,
    /// `torch.optim` `foreach` (the CUDA default): intermediates are whole tensor lists, so AdamW
    /// holds one extra state-sized buffer (`_foreach_sqrt(exp_avg_sq)`) during the step.
    Foreach,
    /// Fused multi-tensor kernels (apex/DeepSpeed FusedAdam, TE): updates in place.
    Fused,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Profile {
    /// RMSNorm saves an fp32 copy of its input (HF `LlamaRMSNorm`, torchtitan `x.float()`);
    /// Megatron's fused norms keep the 16-bit input.
    pub(crate) norm_upcast: bool,
    /// The gated MLP runs as one fused SwiGLU kernel (Megatron `bias_swiglu`): it keeps the
    /// gate/up output and the down input (6f/h bytes per token per 2-byte element), not the
    /// eager four tensors (8f/h).
    pub(crate) fused_swiglu: bool,
    /// Grouped-query attention expands K and V to all heads before attention (`repeat_kv`), so the
    /// attention kernel saves full-width K and V.
    pub(crate) repeat_kv: bool,
    /// The attention output is transposed into a new tensor before the output projection
    /// (`transpose(1, 2).contiguous()`), so a fused-attention kernel's saved output and the
    /// projection's saved input are two tensors.
    pub(crate) attention_output_copy: bool,
    /// The softmax of eager attention runs in fp32 and is cast back (HF Llama eager attention).
    pub(crate) softmax_fp32: bool,
    pub(crate) loss: LossKernel,
    pub step: StepKernel,
    /// bf16 training keeps fp32 main gradients (Megatron `accumulate_allreduce_grads_in_fp32`).
    pub(crate) fp32_main_grads: bool,
    /// Plain data parallelism copies gradients into separate all-reduce buckets (PyTorch DDP with
    /// `gradient_as_bucket_view=False`, its default).
    pub(crate) ddp_bucket_copy: bool,
    /// DeepSpeed ZeRO bucket sizes, in elements (`reduce_bucket_size`, `allgather_bucket_size`).
    pub(crate) zero_buckets: Option<ZeroBuckets>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct ZeroBuckets {
    pub(crate) reduce: u64,
    pub(crate) allgather: u64,
}

/// DeepSpeed's documented defaults: `reduce_bucket_size` and `allgather_bucket_size` are 5e8.
pub(crate) const DEEPSPEED_BUCKETS: ZeroBuckets = ZeroBuckets {
    reduce: 500_000_000,
    allgather: 500_000_000,
};

pub fn profile(framework: Framework) -> Profile {
    match framework {
        Framework::Pytorch => Profile {
            norm_upcast: true,
            fused_swiglu: false,
            repeat_kv: true,
            attention_output_copy: true,
            softmax_fp32: true,
            loss: LossKernel::Fp32Upcast,
            step: StepKernel::Foreach,
            fp32_main_grads: false,
            ddp_bucket_copy: true,
            zero_buckets: None,
        },
        Framework::Deepspeed => Profile {
            // The model code is Hugging Face's, as under Pytorch; the engine is DeepSpeed's.
            step: StepKernel::Fused,
            ddp_bucket_copy: false,
            zero_buckets: Some(DEEPSPEED_BUCKETS),
            ..profile(Framework::Pytorch)
        },
        Framework::Megatron => Profile {
            norm_upcast: false,
            fused_swiglu: true,
            repeat_kv: false,
            attention_output_copy: false,
            softmax_fp32: false,
            loss: LossKernel::FusedFp32,
            step: StepKernel::Fused,
            fp32_main_grads: true,
            ddp_bucket_copy: false,
            zero_buckets: None,
        },
    }
}

impl StepKernel {
    /// Each kernel and its name (`plan --step-kernel`, the plan's text and JSON).
    pub const ALL: [(StepKernel, &'static str); 3] = [
        (StepKernel::ForLoop, "loop"),
        (StepKernel::Foreach, "foreach"),
        (StepKernel::Fused, "fused"),
    ];

    pub fn name(self) -> &'static str {
        name_in(&Self::ALL, self)
    }
}

/// The training stack; it decides implementation details that move memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framework {
    /// Plain PyTorch: Hugging Face Transformers + Trainer/Accelerate, torchtitan, torchtune, FSDP.
    Pytorch,
    /// Hugging Face models trained under DeepSpeed ZeRO.
    Deepspeed,
    /// Megatron-LM / NeMo (fused kernels, distributed optimizer).
    Megatron,
}

impl Framework {
    /// Each framework and its name (`plan --framework`, the plan's text and JSON).
    pub const ALL: [(Framework, &'static str); 3] = [
        (Framework::Pytorch, "pytorch"),
        (Framework::Deepspeed, "deepspeed"),
        (Framework::Megatron, "megatron"),
    ];

    pub fn name(self) -> &'static str {
        name_in(&Self::ALL, self)
    }
}
