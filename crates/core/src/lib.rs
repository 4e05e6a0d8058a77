//! gmq-core: the values, the policy and the decisions over them, with no system calls of its own
//! beyond reading the files it is named: what the plugin (crates/spank), the node's edges
//! (crates/node) and the binary (crates/gpu-mem-quota) decide with, each decision a plain function
//! tested beside it.
//!
//! Layers point down only. From the bottom:
//!
//! 1. **Values**: `size`, `request`, `batch`, `record` (the AdminComment format), `json_number`,
//!    `argv` (the command line, over lexopt), `job_env`, `dir_rule` (the one rule for a directory
//!    root is handed), `node_files` (the runtime directory's names and file formats), `sluid` (a
//!    job's SLUID, as Slurm prints it), `job_telemetry` (the job's own allocator telemetry file,
//!    the job's word).
//! 2. **Policy and decisions**: `config` (with the `[preemption]` settings), `plugin_args`,
//!    `hints`, `quota`, `admission`, `step` (what a job step gets on a node), `predict`, `metrics`
//!    (the textfile's format), `preempt` (victim choice, ranks, cooldowns); `slurm_text` (what
//!    Slurm's commands print, read).
//! 3. **The watchdog's interface**: `launch` (its command line), `controller` (the job in
//!    slurmctld as the watchdog acts on it: the `Controller` trait, typed failures, record_entry),
//!    `prolog` (what the job prolog decides on a node: whether and how the watchdog starts).

#![forbid(unsafe_code)]

pub mod admission;
pub mod argv;
pub mod batch;
pub mod config;
pub mod controller;
pub mod dir_rule;
pub mod hints;
pub mod job_env;
pub mod job_telemetry;
pub mod json_number;
pub mod launch;
pub mod metrics;
pub mod node_files;
pub mod plugin_args;
pub mod predict;
pub mod preempt;
pub mod prolog;
pub mod quota;
pub mod record;
pub mod request;
pub mod size;
pub mod sluid;
pub mod slurm_text;
pub mod step;
pub mod watchdog;
