//! gmq-node: the node's edges that the SPANK plugin (crates/spank) and the companion binary
//! (crates/gpu-mem-quota) share, over gmq-core's values and decisions; all the non-SPANK `unsafe`
//! of the plugin lives here.
//!
//! Layers point down only: a module uses modules of its own layer or below, never above, and the
//! `crate::` imports have no cycle (a shared piece lives below both of its users). From the bottom:
//!
//! 1. **Pure, still here**: `argv` (the command-line parser), `metrics` (the textfile's format),
//!    `preempt`'s victim choice, `launch`'s parameters.
//! 2. **Node and Slurm edges**, I/O: `trusted_dir`, `textfile`, `runtime`, `attribute`, `passwd`,
//!    `slurmctl` (Slurm's commands), `preempt` (the node registry).
//! 3. **The job in slurmctld and the watchdog's interface**: `controller` (read the job, keep its
//!    record, act; typed failures), `launch` (the watchdog's command line and its spawn).
//!
//! The faces live in their own crates: the plugin's FFI edge (`gpu-mem-quota-spank`), which starts
//! the watchdog through `launch`, and the binary's commands (`gpu-mem-quota`: the watchdog, report,
//! check-config), over this crate and the planner (`gmq-plan`).

pub mod argv;
pub mod attribute;
pub mod controller;
pub mod launch;
pub mod metrics;
pub mod passwd;
pub mod preempt;
pub mod runtime;
pub mod slurmctl;
pub mod textfile;
pub mod trusted_dir;

/// The plugin's name: the prefix of every log line, the name Slurm knows it by.
pub const PLUGIN_NAME: &str = "gpu-mem-quota";
