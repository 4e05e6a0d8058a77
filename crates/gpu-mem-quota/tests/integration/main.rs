//! gpu-mem-quota's tests: the commands as an admin runs them (`check-config`, `plan`, `report`,
//! `status`), the watchdog's runtime files and leftovers, and `real_gpu` (NVML on a real GPU, run by
//! slurm/gpu-check). One binary; each file a module.

mod common;

mod config_check_cli;
mod config_preemption;
mod plan_cli;
mod real_gpu;
mod report_sacct;
mod report_sacct_command;
mod runtime_permissions;
mod status_node;
mod watchdog_leftovers;
mod watchdog_presence_v2;
mod watchdog_runtime_dir;
