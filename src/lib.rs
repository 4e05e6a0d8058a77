//! gpu-mem-quota: GPU-memory quotas for Slurm.
//!
//! One library, two faces: the SPANK plugin (`cdylib`, loaded by slurmd, slurmstepd, sbatch, srun
//! and salloc through plugstack.conf) and the code the companion binary `gpu-mem-quota` runs.
//! Layers point down only: `spank` (FFI edge) and `cli` use the pure modules; the pure modules
//! (`size`, `request`, `config`, `quota`, `hints`, `predict`, `record`, `plan`) do no I/O.

pub mod admission;
pub mod argv;
pub mod attribute;
pub mod batch;
pub mod cli;
pub mod config;
pub mod controller;
pub mod hints;
pub mod job_env;
pub mod json;
pub mod launch;
pub mod metrics;
pub mod passwd;
pub mod plan;
pub mod plugin_args;
pub mod predict;
pub mod preempt;
pub mod quota;
pub mod record;
pub mod report;
pub mod request;
pub mod runtime;
pub mod size;
pub mod slurmctl;
pub mod textfile;
pub mod trusted_dir;
pub mod watchdog;

#[cfg(feature = "spank")]
pub mod spank;

/// The plugin's name: the prefix of every log line, the name Slurm knows it by.
pub const PLUGIN_NAME: &str = "gpu-mem-quota";
