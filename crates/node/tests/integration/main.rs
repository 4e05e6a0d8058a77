//! gmq-node's tests: attribution on fixture trees of /proc and cgroups, the preemption registry,
//! the metrics files and the Slurm commands. One binary; each file a module.

mod common;

mod attribute_fixtures;
mod attribute_lifecycle;
mod cgroup_v2_fixtures;
mod dashboard_metrics;
mod earlier_watchdog;
mod job_submit_lua;
mod job_telemetry_files;
mod metrics_render;
mod metrics_textfile;
mod preempt_antithrash;
mod preempt_registry;
mod preempt_victim;
mod slurmctl_commands;
mod watchdog_attribution;
