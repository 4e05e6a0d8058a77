//! slurmstepd on a compute node: every task of every step (the batch script is the batch step's task).
//!
//! The option's value reaches this process through the job's environment, which the user controls:
//! it is validated again here, and an invalid value fails the task with a logged error (exit code 1).

use super::handle::Spank;
use super::{log, options};
use crate::{job_env, request};

pub fn task_init(spank: &Spank) -> Result<(), String> {
    let Some(value) = spank.getopt(&options::QUOTA).map_err(|e| e.to_string())? else {
        return Ok(()); // no quota asked for: the job is left exactly as it was
    };
    let job = spank
        .job_id()
        .map(|id| id.to_string())
        .unwrap_or_else(|_| "?".into());
    let quota = request::parse_quota_option(&value).map_err(|e| {
        format!("job {job}: refusing to start the task: {e} (value from the job environment)")
    })?;
    for (name, value) in job_env::quota_vars(quota) {
        spank
            .setenv(name, &value)
            .map_err(|e| format!("job {job}: cannot set {name}: {e}"))?;
    }
    log::verbose(&format!("job {job}: quota {quota} per GPU"));
    Ok(())
}
