//! gmq-node: what the SPANK plugin (crates/spank) and the companion binary (crates/gpu-mem-quota)
//! share: the policy and every decision over it, the file formats, and the node's edges.
//!
//! Layers point down only: a module uses modules of its own layer or below, never above, and the
//! `crate::` imports have no cycle (a shared piece lives below both of its users). From the bottom:
//!
//! 1. **Values**, pure: `size`, `request`, `batch`, `record` (the AdminComment format), `json_number`,
//!    `argv` (the command-line parser), `job_env`.
//! 2. **Policy and decisions**, pure: `config` (with the `[preemption]` settings), `plugin_args`,
//!    `hints`, `quota`, `admission`, `step` (what a job step gets on a node), `predict`.
//! 3. **Node and Slurm edges**, I/O: `trusted_dir`, `textfile`, `runtime`, `attribute`, `passwd`,
//!    `metrics`, `slurmctl` (Slurm's commands), `preempt` (its pure decision on the node registry).
//! 4. **The job in slurmctld and the watchdog's interface**: `controller` (read the job, keep its
//!    record, act; typed failures), `launch` (the watchdog's command line and its spawn).
//!
//! The faces live in their own crates: the plugin's FFI edge (`gpu-mem-quota-spank`), which starts
//! the watchdog through `launch`, and the binary's commands (`gpu-mem-quota`: the watchdog, report,
//! check-config), over this crate and the planner (`gmq-plan`).

pub mod admission;
pub mod argv;
pub mod attribute;
pub mod batch;
pub mod config;
pub mod controller;
pub mod hints;
pub mod job_env;
pub mod json_number;
pub mod launch;
pub mod metrics;
pub mod passwd;
pub mod plugin_args;
pub mod predict;
pub mod preempt;
pub mod quota;
pub mod record;
pub mod request;
pub mod runtime;
pub mod size;
pub mod slurmctl;
pub mod step;
pub mod textfile;
pub mod trusted_dir;

/// The plugin's name: the prefix of every log line, the name Slurm knows it by.
pub const PLUGIN_NAME: &str = "gpu-mem-quota";
