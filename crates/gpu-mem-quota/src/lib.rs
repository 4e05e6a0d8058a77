//! gpu-mem-quota's commands: the per-job watchdog (`watchdog`), the admin's `check-config`,
//! `plan`, `report` and `status` (`cli`, over `report`, `slurm_layout` and the planner). `main.rs`
//! is the binary: `gpu-mem-quota <command>`.

pub mod cli;
pub mod report;
pub mod slurm_layout;
pub mod watchdog;
