//! The memory planner: predicts a training job's peak GPU memory per GPU from its shape, and fits
//! it to a quota. Pure: plain structs in, a breakdown out; no I/O.
//!
//! - `shape`, `presets`: the model (presets are data, `presets.toml`).
//! - `job`: the inputs and their validation.
//! - `framework`: the training stack and the implementation details of PyTorch/Hugging Face,
//!   DeepSpeed and Megatron that move memory.
//! - `names`: the names of the closed vocabularies (`plan`'s option values, text and JSON).
//! - `placement`: which parameters one GPU holds under tensor/pipeline parallelism and LoRA.
//! - `states`: parameters, gradients, optimizer states per ZeRO stage (Rajbhandari et al. 2020).
//! - `activations`: per-layer stored activations (Korthikanti et al. 2022).
//! - `overheads`: buckets, gathered parameters, step temporaries, context, NCCL, fragmentation.
//! - `breakdown`, `estimate`: terms by phase of the step and the peak they add up to.
//! - `search`: largest micro-batch, ladder of techniques, values to paste.
//! - `report`, `json`: text and JSON output.
//!
//! docs/PLAN.md documents every term with its source.

#![forbid(unsafe_code)]

pub mod activations;
pub(crate) mod breakdown;
pub mod estimate;
pub mod framework;
pub(crate) mod job;
mod names;
mod overheads;
mod placement;
pub mod presets;
pub mod report;
mod search;
pub mod shape;
pub(crate) mod states;

pub use estimate::{estimate, model_states};
pub use framework::Framework;
pub use job::DEFAULT_CUDA_CONTEXT;
pub use job::{
    validate, Checkpointing, Finetune, Job, LoraTargets, Model, Offload, Optimizer, Parallel, Precision,
    Sharding, MAX_PARAMS,
};
pub use search::{ladder, largest_micro_batch, plan, quota_gib};
pub use shape::{Head, ModelShape};
