//! What the planner is asked about: a model, a precision, an optimizer, a parallel layout and a
//! batch. Plain data, with `validate` turning nonsense into errors that name the flag to fix.

use std::fmt;

use super::framework::{Framework, LossKernel, StepKernel};
use super::names::name_in;
use super::shape::{default_layers, ModelShape};

/// The model: its full shape, or only a parameter count (model states only, no activations).
#[derive(Debug, Clone, PartialEq)]
pub enum Model {
    Shaped(ModelShape),
    /// A parameter count; ZeRO-3/FSDP units are `params / layers` with the layer count of
    /// `shape::default_layers` (the usual depth for that size).
    ParamsOnly(u64),
    /// A parameter count and the number of transformer layers it is split into (`--params N
    /// --layers L`).
    ParamsLayers {
        params: u64,
        layers: u64,
    },
}

impl Model {
    pub fn params(&self) -> u64 {
        match self {
            Model::Shaped(shape) => shape.params(),
            Model::ParamsOnly(n) => *n,
            Model::ParamsLayers { params, .. } => *params,
        }
    }

    /// Transformer layers: the shape's, the one given with `--params`, or the default for the count.
    pub fn layers(&self) -> u64 {
        match self {
            Model::Shaped(shape) => shape.layers,
            Model::ParamsOnly(n) => default_layers(*n),
            Model::ParamsLayers { layers, .. } => *layers,
        }
    }

    pub fn name(&self) -> String {
        match self {
            Model::Shaped(shape) => shape.name.clone(),
            Model::ParamsOnly(n) => format!("{n} parameters"),
            Model::ParamsLayers { params, layers } => format!("{params} parameters in {layers} layers"),
        }
    }
}

/// The largest model the planner accepts: 10 trillion parameters, five times the largest dense
/// models published so far. Beyond it the input is a typo (`--params 1e15`), and an answer in
/// millions of GiB helps nobody.
pub const MAX_PARAMS: u64 = 10_000_000_000_000;

/// Numeric formats of weights, gradients, optimizer states and activations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precision {
    /// Everything fp32.
    Fp32,
    /// `torch.autocast`: fp32 weights, gradients and states; 16-bit compute and most activations.
    Amp,
    /// 16-bit weights and gradients with an fp32 master copy in the optimizer (Megatron,
    /// DeepSpeed, the ZeRO paper's "mixed precision"; FSDP MixedPrecision totals the same).
    Mixed,
    /// Pure bf16: weights, gradients and optimizer states all bf16.
    Bf16,
    /// FP8 GEMMs (Transformer Engine) on top of `Mixed`.
    Fp8,
}

impl Precision {
    /// Each value and its name (`plan`'s option value, the plan's text and JSON).
    pub const ALL: [(Precision, &'static str); 5] = [
        (Precision::Fp32, "fp32"),
        (Precision::Amp, "amp"),
        (Precision::Mixed, "mixed"),
        (Precision::Bf16, "bf16"),
        (Precision::Fp8, "fp8"),
    ];

    pub fn name(self) -> &'static str {
        name_in(&Self::ALL, self)
    }
}

/// Optimizers and their per-parameter state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Optimizer {
    AdamW,
    /// 8-bit AdamW (block-wise quantised states): bitsandbytes' fused kernel with
    /// `--optimizer-impl fused`, otherwise torchao's per-parameter step.
    Adam8bit,
    Sgd,
    SgdMomentum,
    /// Adafactor with factored second moments and no first moment.
    Adafactor,
    /// GaLore AdamW (Zhao et al. 2024): the layers' weight matrices keep Adam moments of their
    /// gradients projected to `rank`; the other parameters keep plain AdamW states.
    Galore {
        rank: u64,
    },
}

impl Optimizer {
    /// Each optimizer without a parameter and its name; GaLore (`galore`) takes its rank.
    pub const ALL: [(Optimizer, &'static str); 5] = [
        (Optimizer::AdamW, "adamw"),
        (Optimizer::Adam8bit, "adam8bit"),
        (Optimizer::Sgd, "sgd"),
        (Optimizer::SgdMomentum, "sgd-momentum"),
        (Optimizer::Adafactor, "adafactor"),
    ];

    pub fn name(self) -> &'static str {
        match self {
            Optimizer::Galore { .. } => "galore",
            other => name_in(&Self::ALL, other),
        }
    }
}

/// How model states are partitioned across data-parallel ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sharding {
    /// Plain data parallelism: every rank holds everything.
    None,
    /// ZeRO stage 1, 2 or 3 (DeepSpeed; Megatron's distributed optimizer is stage 1).
    Zero(u8),
    /// PyTorch FSDP FULL_SHARD (partitions like ZeRO-3).
    Fsdp,
}

impl Sharding {
    /// The name in the plan's text and JSON (`none`, `zero-N`, `fsdp`).
    pub fn name(self) -> String {
        match self {
            Sharding::None => "none".into(),
            Sharding::Zero(stage) => format!("zero-{stage}"),
            Sharding::Fsdp => "fsdp".into(),
        }
    }

    /// The ZeRO stage this partitioning amounts to: what is divided by the data-parallel size.
    pub fn stage(self) -> u8 {
        match self {
            Sharding::None => 0,
            Sharding::Zero(stage) => stage,
            Sharding::Fsdp => 3,
        }
    }

    /// Parameters are gathered layer by layer before use (ZeRO-3, FSDP).
    pub(crate) fn gathers_params(self) -> bool {
        self.stage() == 3
    }
}

/// What is moved to CPU memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Offload {
    None,
    /// Optimizer states, master weights and gradients (ZeRO-Offload).
    Optimizer,
    /// Also the parameters (ZeRO-3 offload_param, FSDP CPUOffload).
    Params,
}

impl Offload {
    /// Each value and its name (`plan`'s option value, the plan's text and JSON).
    pub const ALL: [(Offload, &'static str); 3] = [
        (Offload::None, "none"),
        (Offload::Optimizer, "optimizer"),
        (Offload::Params, "params"),
    ];

    pub fn name(self) -> &'static str {
        name_in(&Self::ALL, self)
    }
}

/// Activation recomputation (Korthikanti et al. 2022).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Checkpointing {
    None,
    /// Recompute only the attention core (QK^T, softmax, dropout, attention over V).
    Selective,
    /// Keep only each layer's input; recompute the layer in the backward pass.
    Full,
    /// torchtitan's per-op selective checkpointing: keep each layer's input, every other
    /// matmul's output and the fused attention outputs; recompute the rest (activations.rs).
    SelectiveOp,
}

impl Checkpointing {
    /// Each value and its name (`plan`'s option value, the plan's text and JSON).
    pub const ALL: [(Checkpointing, &'static str); 4] = [
        (Checkpointing::None, "none"),
        (Checkpointing::Selective, "selective"),
        (Checkpointing::Full, "full"),
        (Checkpointing::SelectiveOp, "selective-op"),
    ];

    pub fn name(self) -> &'static str {
        name_in(&Self::ALL, self)
    }
}

/// LoRA targets: which linear layers of each transformer layer get adapters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoraTargets {
    /// Query and value projections (the LoRA paper's choice).
    QueryValue,
    /// All attention projections.
    Attention,
    /// Every linear layer in the transformer layers (the QLoRA paper's choice).
    All,
}

impl LoraTargets {
    /// Each value and its name (`plan`'s option value, the plan's text and JSON).
    pub const ALL: [(LoraTargets, &'static str); 3] = [
        (LoraTargets::QueryValue, "qv"),
        (LoraTargets::Attention, "attn"),
        (LoraTargets::All, "all"),
    ];

    pub fn name(self) -> &'static str {
        name_in(&Self::ALL, self)
    }
}

/// Full fine-tuning/pre-training, or adapters on a frozen base.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finetune {
    Full,
    Lora {
        rank: u64,
        targets: LoraTargets,
        /// QLoRA: the frozen base's linear weights are 4-bit NormalFloat with double quantisation.
        quantized: bool,
    },
}

/// Parallel layout: GPUs = dp x tp x pp.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parallel {
    pub dp: u64,
    pub tp: u64,
    pub pp: u64,
    /// Megatron sequence parallelism (splits the non-tensor-parallel activations over the TP group).
    pub sp: bool,
}

impl Parallel {
    pub fn gpus(&self) -> u64 {
        self.dp * self.tp * self.pp
    }
}

/// A training job to plan.
#[derive(Debug, Clone, PartialEq)]
pub struct Job {
    pub model: Model,
    pub precision: Precision,
    pub optimizer: Optimizer,
    pub parallel: Parallel,
    pub sharding: Sharding,
    pub offload: Offload,
    pub micro_batch: u64,
    pub seq: u64,
    pub grad_accum: u64,
    pub checkpointing: Checkpointing,
    /// FlashAttention (or any fused attention that does not store the score matrix).
    pub flash: bool,
    pub finetune: Finetune,
    pub framework: Framework,
    /// How the optimizer step is implemented; `None`: the framework's default.
    pub optimizer_impl: Option<StepKernel>,
    /// How the loss is computed from the logits; `None`: the framework's default.
    pub loss_impl: Option<LossKernel>,
    /// `torch.compile` of the model: AOTAutograd saves fewer activations (overheads.rs).
    pub compile: bool,
    /// Saved activations are moved to CPU memory in forward and brought back in backward
    /// (torchtune `enable_activation_offloading`).
    pub activation_offload: bool,
    /// Each parameter's optimizer step runs in backward as soon as its gradient is ready, and the
    /// gradient is freed (torchtune `optimizer_in_bwd`, LOMO).
    pub optimizer_in_backward: bool,
    /// Gradients stay allocated between steps (`zero_grad(set_to_none=False)`, PyTorch before
    /// 2.0); `None`: the framework's behaviour (see `persistent_grads`).
    pub keep_grads: Option<bool>,
    /// Device memory taken by the CUDA context and library handles before any tensor exists.
    pub cuda_context: u64,
    /// Model chunks per pipeline rank of an interleaved schedule (Megatron virtual pipeline
    /// stages, torchtitan `Interleaved1F1B`); 1: plain 1F1B.
    pub virtual_stages: u64,
    /// The vocabulary is padded to a multiple of this (`None`: the framework's; Megatron pads to
    /// `--make-vocab-size-divisible-by` 128 times the tensor-parallel size).
    pub vocab_multiple: Option<u64>,
    /// Under tensor parallelism each rank computes the cross entropy on its vocabulary shard
    /// (torchtitan `loss_parallel`, on unless `--training.disable_loss_parallel`; Megatron's
    /// vocab-parallel cross entropy, always). `false`: the logits are all-gathered first.
    pub loss_parallel: bool,
    /// The training loop keeps the fp32 copy of the shifted logits alive through the backward
    /// (no `del logits` before `loss.backward()`); estimate.rs, `kept_shifted_logits`.
    pub keep_shifted_logits: bool,
    /// A paged bitsandbytes optimizer (`PagedAdamW`, `PagedAdamW8bit`; QLoRA's
    /// `paged_adamw_32bit`): the states of large tensors live in CUDA managed memory, outside
    /// PyTorch's allocator (states.rs).
    pub paged_optimizer: bool,
}

/// Megatron's `--make-vocab-size-divisible-by` default (`megatron/training/arguments.py`).
pub(crate) const MEGATRON_VOCAB_MULTIPLE: u64 = 128;

/// 500 MiB: a CUDA 12 context with lazy module loading plus cuBLAS/cuDNN handles, as `nvidia-smi`
/// shows it for a PyTorch process before its first tensor (see docs/PLAN.md, "CUDA context").
pub const DEFAULT_CUDA_CONTEXT: u64 = 500 << 20;

impl Job {
    /// A single-GPU, full fine-tuning job with the common defaults; callers adjust fields.
    pub fn new(model: Model, micro_batch: u64, seq: u64) -> Job {
        Job {
            model,
            precision: Precision::Mixed,
            optimizer: Optimizer::AdamW,
            parallel: Parallel {
                dp: 1,
                tp: 1,
                pp: 1,
                sp: false,
            },
            sharding: Sharding::None,
            offload: Offload::None,
            micro_batch,
            seq,
            grad_accum: 1,
            checkpointing: Checkpointing::None,
            flash: true,
            finetune: Finetune::Full,
            framework: Framework::Pytorch,
            optimizer_impl: None,
            loss_impl: None,
            compile: false,
            activation_offload: false,
            optimizer_in_backward: false,
            keep_grads: None,
            cuda_context: DEFAULT_CUDA_CONTEXT,
            virtual_stages: 1,
            vocab_multiple: None,
            loss_parallel: true,
            keep_shifted_logits: false,
            paged_optimizer: false,
        }
    }

    /// The vocabulary the embedding, output layer and logits really have: Megatron pads it to a
    /// multiple of `make_vocab_size_divisible_by x tp` (`megatron/training/vocab_utils.py`, default 128)
    /// so that each tensor-parallel shard is a whole number of aligned rows; other stacks keep
    /// the tokenizer's size unless `--vocab-multiple` says otherwise.
    pub fn padded_vocab(&self, vocab: u64) -> u64 {
        let multiple = self.vocab_padding_multiple();
        vocab.div_ceil(multiple) * multiple
    }

    /// What `padded_vocab` rounds up to a multiple of (1: no padding).
    pub fn vocab_padding_multiple(&self) -> u64 {
        let multiple = match (self.vocab_multiple, self.framework) {
            (Some(m), Framework::Megatron) => m * self.parallel.tp,
            (Some(m), _) => m,
            (None, Framework::Megatron) => MEGATRON_VOCAB_MULTIPLE * self.parallel.tp,
            (None, _) => 1,
        };
        multiple.max(1)
    }

    /// Whether gradients exist during the forward pass. Megatron and DeepSpeed keep contiguous
    /// gradient buffers for the whole run; gradient accumulation keeps the previous micro-batches'
    /// gradients; plain PyTorch frees them at `zero_grad()` (`set_to_none=True`, the default since
    /// PyTorch 2.0) and allocates them again in backward, after the activations of the loss peak.
    pub(crate) fn persistent_grads(&self) -> bool {
        self.keep_grads
            .unwrap_or(self.framework != Framework::Pytorch || self.grad_accum > 1)
    }
}

/// A nonsense input: the flag to fix and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanError {
    pub flag: &'static str,
    pub message: String,
}

impl fmt::Display for PlanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.flag, self.message)
    }
}

impl std::error::Error for PlanError {}

fn error(flag: &'static str, message: impl Into<String>) -> PlanError {
    PlanError {
        flag,
        message: message.into(),
    }
}

/// At least 1 and at most `limit`: beyond it the input is a typo, and bounding it keeps every
/// product the planner forms far from overflow.
fn in_range(flag: &'static str, value: u64, limit: u64) -> Result<(), PlanError> {
    if value == 0 {
        return Err(error(flag, format!("{flag} must be at least 1")));
    }
    if value > limit {
        return Err(error(
            flag,
            format!("{flag} {value} is larger than the planner accepts ({limit})"),
        ));
    }
    Ok(())
}

/// `flag` with value `value` must divide `what` (named by its own flag).
fn must_divide(
    flag: &'static str,
    value: u64,
    what_flag: &str,
    what: u64,
    why: &str,
) -> Result<(), PlanError> {
    if !what.is_multiple_of(value) {
        return Err(error(
            flag,
            format!("{flag} {value} does not divide {what_flag} {what} ({why})"),
        ));
    }
    Ok(())
}

/// Checks that the job describes something that can run; the first problem found is returned.
pub fn validate(job: &Job) -> Result<(), PlanError> {
    for (flag, value, limit) in [
        ("--micro-batch", job.micro_batch, 1 << 20),
        ("--seq", job.seq, 1 << 24),
        ("--grad-accum", job.grad_accum, 1 << 20),
        ("--dp", job.parallel.dp, 1 << 20),
        ("--tp", job.parallel.tp, 1 << 12),
        ("--pp", job.parallel.pp, 1 << 12),
        ("--virtual-stages", job.virtual_stages, 1 << 10),
    ] {
        in_range(flag, value, limit)?;
    }
    let p = job.parallel;
    if let Model::ParamsLayers { layers, .. } = job.model {
        in_range("--layers", layers, 1 << 16)?;
    }
    if let Model::Shaped(shape) = &job.model {
        validate_shape(shape)?;
        let params = shape.params();
        if params > MAX_PARAMS {
            return Err(error(
                "--layers",
                format!(
                    "this shape has {params} parameters, more than the planner accepts ({MAX_PARAMS}, 10 trillion): check --layers, --hidden, --ffn and --vocab"
                ),
            ));
        }
        must_divide(
            "--tp",
            p.tp,
            "--heads",
            shape.heads,
            "tensor parallelism splits attention heads",
        )?;
        must_divide(
            "--tp",
            p.tp,
            "--kv-heads",
            shape.kv_heads,
            "each rank needs whole key/value heads",
        )?;
        must_divide(
            "--tp",
            p.tp,
            "--ffn",
            shape.ffn,
            "tensor parallelism splits the MLP columns",
        )?;
        must_divide(
            "--pp",
            p.pp,
            "--layers",
            shape.layers,
            "pipeline stages hold whole layers",
        )?;
        must_divide(
            "--virtual-stages",
            job.virtual_stages,
            "the layers per pipeline stage",
            shape.layers / p.pp,
            "each model chunk holds whole layers",
        )?;
    } else {
        if job.model.params() > MAX_PARAMS {
            return Err(error(
                "--params",
                format!(
                    "--params {} is more than the planner accepts ({MAX_PARAMS}, 10 trillion parameters)",
                    job.model.params()
                ),
            ));
        }
        in_range("--params", job.model.params(), MAX_PARAMS)?;
        if matches!(job.optimizer, Optimizer::Galore { .. }) {
            return Err(error(
                "--optimizer",
                "GaLore projects each weight matrix: it needs the model's shape (--model or --layers/--hidden/--heads/--vocab)",
            ));
        }
        if p.tp > 1 || p.pp > 1 {
            return Err(error(
                if p.tp > 1 { "--tp" } else { "--pp" },
                "tensor and pipeline parallelism need the model's shape (--model or --layers/--hidden/--heads/--vocab)",
            ));
        }
        if job.finetune != Finetune::Full {
            return Err(error(
                "--lora-rank",
                "LoRA needs the model's shape (--model or --layers/--hidden/--heads/--vocab)",
            ));
        }
    }
    if job.virtual_stages > 1 && p.pp == 1 {
        return Err(error(
            "--virtual-stages",
            "an interleaved schedule splits each pipeline stage into chunks: it needs --pp greater than 1",
        ));
    }
    if let Some(multiple) = job.vocab_multiple {
        in_range("--vocab-multiple", multiple, 1 << 16)?;
    }
    if p.sp && p.tp == 1 {
        return Err(error("--sp", "sequence parallelism splits activations over the tensor-parallel group: it needs --tp greater than 1"));
    }
    if let Sharding::Zero(stage) = job.sharding {
        if !(1..=3).contains(&stage) {
            return Err(error(
                "--zero",
                format!("--zero {stage} is not a ZeRO stage; use 0, 1, 2 or 3"),
            ));
        }
    }
    match (job.framework, job.sharding) {
        (Framework::Megatron, Sharding::Zero(stage)) if stage > 1 => {
            return Err(error(
                "--zero",
                "Megatron shards optimizer states only (distributed optimizer): use --zero 1",
            ))
        }
        (Framework::Megatron, Sharding::Fsdp) => {
            return Err(error(
                "--fsdp",
                "--framework megatron does not use FSDP; use --zero 1 (distributed optimizer)",
            ))
        }
        (Framework::Pytorch, Sharding::Zero(_)) => {
            return Err(error(
                "--zero",
                "ZeRO stages are DeepSpeed's: use --framework deepspeed, or --fsdp with PyTorch",
            ))
        }
        (Framework::Deepspeed, Sharding::Fsdp) => {
            return Err(error(
                "--fsdp",
                "FSDP is PyTorch's: use --framework pytorch, or --zero 3 with DeepSpeed",
            ))
        }
        _ => {}
    }
    match job.offload {
        Offload::None => {}
        Offload::Optimizer if job.framework != Framework::Deepspeed || job.sharding.stage() == 0 => {
            return Err(error(
                "--offload",
                "optimizer offload is DeepSpeed ZeRO-Offload: it needs --zero 1, 2 or 3",
            ))
        }
        Offload::Optimizer => {}
        Offload::Params if !job.sharding.gathers_params() => {
            return Err(error("--offload", "parameter offload needs --zero 3 or --fsdp"))
        }
        Offload::Params => {}
    }
    if let Finetune::Lora { rank, .. } = job.finetune {
        if rank == 0 {
            return Err(error("--lora-rank", "--lora-rank must be at least 1"));
        }
        if let Model::Shaped(shape) = &job.model {
            if rank > shape.hidden {
                return Err(error(
                    "--lora-rank",
                    format!("--lora-rank {rank} exceeds --hidden {} (a low-rank adapter must be narrower than the layer)", shape.hidden),
                ));
            }
        }
    }
    if let Optimizer::Galore { rank } = job.optimizer {
        if rank == 0 {
            return Err(error("--galore-rank", "--galore-rank must be at least 1"));
        }
        if job.sharding.stage() > 0 {
            return Err(error(
                "--optimizer",
                "GaLore runs on unsharded parameters (its projection needs whole matrices): use it without --zero/--fsdp",
            ));
        }
    }
    if job.optimizer_in_backward {
        if job.grad_accum > 1 {
            return Err(error(
                "--optimizer-in-backward",
                "the step runs in backward on each micro-batch's gradient: it needs --grad-accum 1",
            ));
        }
        if job.offload != Offload::None || matches!(job.sharding, Sharding::Zero(_)) {
            return Err(error(
                "--optimizer-in-backward",
                "the optimizer step in backward is PyTorch's (torchtune): not with --zero or --offload",
            ));
        }
    }
    if job.keep_shifted_logits {
        let kernel = job
            .loss_impl
            .unwrap_or(super::framework::profile(job.framework).loss);
        if kernel != LossKernel::Fp32Upcast {
            return Err(error(
                "--keep-shifted-logits",
                "the kept fp32 copy is the upcast cross entropy's input: it needs --loss-impl upcast (the pytorch and deepspeed default)",
            ));
        }
        let lm_head = matches!(&job.model, Model::Shaped(shape) if shape.head == super::shape::Head::Lm);
        if !lm_head {
            return Err(error(
                "--keep-shifted-logits",
                "shifted logits need a language-model head and the model's shape",
            ));
        }
    }
    if job.paged_optimizer {
        if !matches!(job.optimizer, Optimizer::AdamW | Optimizer::Adam8bit) {
            return Err(error(
                "--paged-optimizer",
                "paged optimizers are bitsandbytes' AdamW and 8-bit AdamW: use --optimizer adamw or adam8bit",
            ));
        }
        if matches!(job.sharding, Sharding::Zero(_)) || job.offload != Offload::None {
            return Err(error(
                "--paged-optimizer",
                "a paged optimizer is bitsandbytes', not DeepSpeed's: not with --zero or --offload",
            ));
        }
    }
    if !job.loss_parallel && job.framework == Framework::Megatron {
        return Err(error(
            "--no-loss-parallel",
            "Megatron's cross entropy is always vocab-parallel: use --framework pytorch",
        ));
    }
    if job.checkpointing == Checkpointing::SelectiveOp && job.framework != Framework::Pytorch {
        return Err(error(
            "--checkpointing",
            "selective-op is torchtitan's per-op policy (PyTorch): use --framework pytorch, or selective/full",
        ));
    }
    if job.precision == Precision::Fp8 && job.framework == Framework::Deepspeed {
        return Err(error(
            "--precision",
            "fp8 training is Transformer Engine's: use --framework megatron or pytorch",
        ));
    }
    Ok(())
}

fn validate_shape(shape: &ModelShape) -> Result<(), PlanError> {
    for (flag, value, limit) in [
        ("--layers", shape.layers, 1 << 16),
        ("--hidden", shape.hidden, 1 << 20),
        ("--heads", shape.heads, 1 << 16),
        ("--kv-heads", shape.kv_heads, 1 << 16),
        ("--ffn", shape.ffn, 1 << 22),
        ("--vocab", shape.vocab, 1 << 24),
    ] {
        in_range(flag, value, limit)?;
    }
    must_divide(
        "--heads",
        shape.heads,
        "--hidden",
        shape.hidden,
        "each head gets hidden/heads channels",
    )?;
    if shape.kv_heads > shape.heads {
        return Err(error(
            "--kv-heads",
            format!("--kv-heads {} exceeds --heads {}", shape.kv_heads, shape.heads),
        ));
    }
    must_divide(
        "--kv-heads",
        shape.kv_heads,
        "--heads",
        shape.heads,
        "query heads share key/value heads in equal groups",
    )?;
    Ok(())
}
