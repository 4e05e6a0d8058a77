//! gmq-node: the node's edges that the SPANK plugin (crates/spank) and the companion binary
//! (crates/gpu-mem-quota) share, over gmq-core's values and decisions; all the non-SPANK `unsafe`
//! of the plugin lives here.
//!
//! Layers point down only: a module uses modules of its own layer or below, never above, and the
//! `crate::` imports have no cycle (a shared piece lives below both of its users). From the bottom:
//!
//! 1. **Files and processes**: `trusted_dir`, `textfile`, `runtime`, `attribute`, `passwd`,
//!    `preempt_registry` (the node's preemption registry), `telemetry` (the job's own allocator
//!    telemetry, found through its processes and read without trusting where it lives).
//! 2. **Slurm and the watchdog**: `slurmctl` (Slurm's commands), `slurm_controller` (gmq-core's
//!    `Controller` over them), `spawn` (the watchdog started from inside slurmstepd), `slurmd`
//!    (the node's slurmd, whose death the watchdog notices).
//! 3. **The plugin's hooks**: `hooks` (each hook's body, generic over the SPANK handle: what it
//!    gathers, the gmq-core decision it makes, what it does).
//!
//! The faces live in their own crates: the plugin's FFI edge (`gpu-mem-quota-spank`: the symbols,
//! the panic guard and the real handle, over `hooks`), and the binary's commands (`gpu-mem-quota`: the watchdog, report,
//! check-config), over this crate and the planner (`gmq-plan`).

pub mod attribute;
pub mod hooks;
pub mod passwd;
pub mod preempt_registry;
pub mod runtime;
pub mod slurm_controller;
pub mod slurmctl;
pub mod slurmd;
pub mod spawn;
pub mod telemetry;
pub mod textfile;
pub mod trusted_dir;

/// The plugin's name: the prefix of every log line, the name Slurm knows it by.
pub const PLUGIN_NAME: &str = "gpu-mem-quota";
