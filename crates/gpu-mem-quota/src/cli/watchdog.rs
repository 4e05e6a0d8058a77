//! `gpu-mem-quota watchdog`: started by the plugin as root, once per job per node.
use std::process::ExitCode;

use super::args::Spec;
use crate::watchdog::daemon;
use gmq_core::launch::Params;

const HELP: &str = "\
Usage: gpu-mem-quota watchdog --job ID --uid UID --gid GID --gpus LIST --config PATH [--quota-bytes N]
                              [--preemptible] [--sluid SLUID] [--provisional [--request SIZE]]

Watches one job's GPU memory on this node: samples NVML every interval, counts the job's own
processes only, warns at the warn threshold, and on overuse past the grace period records the event
in the job's AdminComment and requeues, holds or cancels the job as the policy says.
The SPANK plugin starts it (as root, detached, with a clean environment) and stops it when the job
ends on the node; it is not meant to be run by hand except to debug. --sluid is the job's SLUID
(slurmd's SLURM_JOB_SLUID, 25.11 on), the name of its cgroup/v2 directory on Slurm 26.05.
--provisional: the job prolog lacked the job's QOS (before 26.05); the quota holds until the
watchdog decides again from --request (the job's --gpu-mem-quota) and slurmctld's record.
";

pub(crate) const SPEC: Spec = Spec {
    command: "watchdog",
    options: Params::OPTIONS,
    max_positional: 0,
    help: || HELP.to_string(),
    error_shows_help: true,
};

pub(super) fn run(argv: Vec<String>) -> ExitCode {
    match SPEC.parse_with(&argv, Params::from_parsed) {
        Ok(params) => daemon::run(params),
        Err(status) => status,
    }
}
