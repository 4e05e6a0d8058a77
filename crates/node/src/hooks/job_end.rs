//! The end of a step (`exit`, every context calls it): the batch script's end, when the run's
//! record goes into the job's AdminComment while slurmctld still takes it.

use std::path::Path;
use std::time::Duration;

use super::step::{plugin_args, slurm_tools};
use super::{say, HookPhase, SpankHandle};
use crate::slurm_controller::SlurmController;
use gmq_core::config;
use gmq_core::controller::{record_entry, AdminComment, ControlError, Controller};
use gmq_core::node_files;
use gmq_core::step::BATCH_STEP;

/// The batch script ended: its record goes into the AdminComment while slurmctld still takes it.
/// (The job epilog stops the watchdog: `super::job_script`.)
pub fn exit(spank: &impl SpankHandle) -> Result<(), String> {
    if spank.step_id()? != BATCH_STEP {
        return Ok(());
    }
    let job = spank.job_id()?;
    let args = plugin_args(spank)?;
    if let Ok(policy) = config::load(&args.config) {
        record_at_job_end(spank, job, &policy.enforcement.runtime_dir);
    }
    Ok(())
}

/// The batch script ended: put the watchdog's record of this run into the job's AdminComment now,
/// while slurmctld still accepts updates (once the job completes it refuses them). Quick and
/// bounded: one attempt each, two seconds at most; a failure is logged, the job is not held up.
fn record_at_job_end(spank: &impl SpankHandle, job: u32, runtime_dir: &Path) {
    let log = say(spank, HookPhase::Exit);
    let path = node_files::job_dir(runtime_dir, job).join(node_files::RECORD_FILE);
    let Ok(text) = std::fs::read_to_string(&path) else {
        return;
    };
    let Some(entry) = gmq_core::record::parse(&text)
        .ok()
        .flatten()
        .and_then(|r| r.entries().first().cloned())
    else {
        return;
    };
    let mut tools = slurm_tools(spank, Duration::from_secs(2));
    tools.backoff.pauses.clear();
    // The watchdog's own way to write its record, one attempt: the job's end may not be held up.
    let mut slurm = SlurmController { job_id: job, tools };
    let comment = match slurm.admin_comment() {
        Ok(comment) => comment,
        Err(e) => {
            log.error(&format!(
                "job {job}: cannot write the final record to AdminComment: {e}"
            ));
            return;
        }
    };
    // Text that cannot be told apart from imitation is left as it is: an admin's words and the
    // job's history must not go for this run's entry.
    let Some(existing) = comment.readable() else {
        if let AdminComment::Unreadable(why) = &comment {
            log.error(&format!(
                "job {job}: the AdminComment cannot be read ({why}): the final record is not written"
            ));
        }
        return;
    };
    match record_entry(&mut slurm, existing, &entry, false) {
        Ok(_) => {}
        // Cancelled, or out of time: the watchdog kept the record while the job ran.
        Err(ControlError::JobGone(_)) => log.verbose(&format!(
            "job {job}: the job has ended before its batch script: its record is the one kept while it ran"
        )),
        Err(e) => log.error(&format!(
            "job {job}: cannot write the final record to AdminComment: {e}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hooks::fake::{FakeSpank, ScratchNode};

    #[test]
    fn only_the_batch_step_with_a_record_asks_slurmctld() {
        let node = ScratchNode::new();
        let policy = node.policy();
        // An srun step's end, and the batch step's of a job whose watchdog kept no record: nothing
        // to write, nothing asked, nothing said.
        for step_id in [0, BATCH_STEP] {
            let spank = FakeSpank {
                step_id,
                ..FakeSpank::new(&policy)
            };
            assert_eq!(exit(&spank), Ok(()));
            assert!(spank.logged.borrow().is_empty(), "{:?}", spank.logged);
        }
    }
}
