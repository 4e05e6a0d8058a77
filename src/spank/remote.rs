//! slurmstepd on a compute node.
//!
//! `user_init` (once per step, in slurmstepd) decides the step's quota from the option value, the
//! policy and the job's identity; `task_init` (in each task's child, just before exec) applies it:
//! writes the environment, or fails the task with the reason. Refusing in `user_init` itself would
//! make slurmd report "could not execve job" and drain the node, so `user_init` never fails.
//!
//! The option value reaches this process through the job's environment, which the user controls:
//! it is validated again here.

use std::sync::Mutex;

use super::handle::Spank;
use super::{log, options};
use crate::admission::{self, NodeVerdict};
use crate::config;
use crate::job_env;
use crate::plugin_args::parse_plugin_args;
use crate::quota::Identity;

/// The step's decision, made in `user_init` and inherited by every task child (they are forks).
static STEP: Mutex<Option<Result<NodeVerdict, String>>> = Mutex::new(None);

pub fn user_init(spank: &Spank) -> Result<(), String> {
    let job = job_label(spank);
    let verdict = decide(spank);
    match &verdict {
        Ok(v) => {
            if let Some(alarm) = &v.alarm {
                log::error(&format!("job {job}: {alarm}"));
            }
            log::verbose(&format!("job {job}: {}", v.note));
        }
        Err(refusal) => log::error(&format!("job {job}: refusing the step's tasks: {refusal}")),
    }
    *STEP.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(verdict);
    Ok(())
}

pub fn task_init(spank: &Spank) -> Result<(), String> {
    let decided = STEP
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .clone();
    // Should user_init not have run in this process, decide here: the same inputs, the same answer.
    let verdict = decided.unwrap_or_else(|| decide(spank));
    let job = job_label(spank);
    let verdict = verdict.map_err(|refusal| format!("job {job}: refusing to start the task: {refusal}"))?;
    if let Some(quota) = verdict.quota {
        for (name, value) in job_env::quota_vars(quota) {
            spank
                .setenv(name, &value)
                .map_err(|e| format!("job {job}: cannot set {name}: {e}"))?;
        }
    }
    Ok(())
}

fn decide(spank: &Spank) -> Result<NodeVerdict, String> {
    let args = parse_plugin_args(spank.plugin_args()).map_err(|e| e.to_string())?;
    let request = spank.getopt(&options::QUOTA).map_err(|e| e.to_string())?;
    let policy = config::load_for_job(&args.config, args.on_config_error);
    let who = identity(spank)?;
    admission::on_node(request.as_deref(), &policy, &who, None)
}

/// Who runs the job: the user from the job's uid; account, partition and QOS as slurmstepd set them.
fn identity(spank: &Spank) -> Result<Identity, String> {
    let uid = spank.job_uid().map_err(|e| e.to_string())?;
    let user = crate::passwd::user_name(uid).ok_or_else(|| format!("uid {uid} has no passwd entry"))?;
    let env = |name| spank.getenv(name).ok().flatten().filter(|v| !v.is_empty());
    Ok(Identity {
        user: Some(user),
        account: env("SLURM_JOB_ACCOUNT"),
        partition: env("SLURM_JOB_PARTITION"),
        qos: env("SLURM_JOB_QOS"),
    })
}

fn job_label(spank: &Spank) -> String {
    spank
        .job_id()
        .map(|id| id.to_string())
        .unwrap_or_else(|_| "?".into())
}
