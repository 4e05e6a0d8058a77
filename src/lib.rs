//! gpu-mem-quota: GPU-memory quotas for Slurm.
//!
//! One library, two faces: the SPANK plugin (`cdylib`, loaded by slurmd, slurmstepd, sbatch, srun
//! and salloc through plugstack.conf) and the code the companion binary `gpu-mem-quota` runs.
//!
//! Layers point down only: a module uses modules of its own layer or below, never above, and the
//! `crate::` imports have no cycle (a shared piece lives below both of its users). From the bottom:
//!
//! 1. **Values**, pure: `size`, `request`, `batch`, `record` (the AdminComment format), `json_number`,
//!    `argv` (the command-line parser), `job_env`.
//! 2. **Policy and decisions**, pure: `config` (with the `[preemption]` settings), `plugin_args`,
//!    `hints`, `quota`, `admission`, `predict`, `plan`.
//! 3. **Node and Slurm edges**, I/O: `trusted_dir`, `textfile`, `runtime`, `attribute`, `passwd`,
//!    `metrics`, `slurmctl` (Slurm's commands), `preempt` (its pure decision on the node registry).
//! 4. **The job in slurmctld and the watchdog's interface**: `controller` (read the job, keep its
//!    record, act; typed failures), `launch` (the watchdog's command line and its spawn).
//! 5. **Faces**: `watchdog` (the per-job daemon), `report` (reads accounting and the watchdog's
//!    status files), `cli` (the binary's commands) over both, and `spank` (the plugin's FFI edge),
//!    which starts the watchdog through `launch` and never reaches into `watchdog`.

// Without the `spank` feature (the fuzz crate, machines without Slurm headers) the parts only the
// plugin uses are unused; the default build, which has the plugin, still reports dead code.
#![cfg_attr(not(feature = "spank"), allow(dead_code))]

pub mod admission;
pub(crate) mod argv;
pub mod attribute;
pub mod batch;
pub mod cli;
pub mod config;
pub mod controller;
pub mod hints;
pub mod job_env;
pub(crate) mod json_number;
pub(crate) mod launch;
pub mod metrics;
pub(crate) mod passwd;
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
pub mod slurm_layout;
pub mod slurmctl;
pub(crate) mod step;
pub mod textfile;
pub mod trusted_dir;
pub mod watchdog;

#[cfg(feature = "spank")]
pub(crate) mod spank;

/// The plugin's name: the prefix of every log line, the name Slurm knows it by.
pub(crate) const PLUGIN_NAME: &str = "gpu-mem-quota";
