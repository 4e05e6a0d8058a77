//! The end of a step's tasks and of the step (`task_exit`, `exit`): when this node's record of the
//! run goes into the job's AdminComment while slurmctld still takes it.

use std::path::Path;
use std::time::Duration;

use super::step::{plugin_args, slurm_tools};
use super::{say, HookPhase, SpankHandle};
use crate::slurm_controller::SlurmController;
use gmq_core::config;
use gmq_core::controller::{record_entry, AdminComment, ControlError, Controller};
use gmq_core::node_files;
use gmq_core::record;
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
        let dir = node_files::job_dir(&policy.enforcement.runtime_dir, job);
        put_entry(spank, job, &dir.join(node_files::RECORD_FILE), Put::BatchEnd);
    }
    Ok(())
}

/// A task of an srun step ended here (slurmstepd, root), before srun, and so the batch script,
/// learns of it: where the watchdog says that another node's merge may have replaced this node's
/// entry in a multi-node job's AdminComment and it has not looked again yet
/// (`Watchdog::settling_text`), the entry is looked for and put back. A run that ends seconds
/// after its nodes' first writes would otherwise end before the watchdog's look, and then
/// slurmctld takes no more updates. Once per step and node (its first task); without that word
/// from the watchdog, nothing is asked.
pub fn task_exit(spank: &impl SpankHandle) -> Result<(), String> {
    if spank.step_id()? == BATCH_STEP || spank.task_local_id()? != 0 {
        return Ok(());
    }
    let job = spank.job_id()?;
    let args = plugin_args(spank)?;
    if let Ok(policy) = config::load(&args.config) {
        let dir = node_files::job_dir(&policy.enforcement.runtime_dir, job);
        put_entry(
            spank,
            job,
            &dir.join(node_files::SETTLING_RECORD_FILE),
            Put::Settle,
        );
    }
    Ok(())
}

/// Which end puts the entry into the AdminComment.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Put {
    /// The batch script's end: the run's last write on this node, merged once.
    BatchEnd,
    /// A step's end on a node of a multi-node job: only where the entry is missing, and read back,
    /// since the other nodes' steps end at the same moment.
    Settle,
}

/// Puts the entry the watchdog left at `path` (root's file in the job's runtime directory; none:
/// nothing to do) into the job's AdminComment now, while slurmctld still accepts updates (once the
/// job completes it refuses them). Quick and bounded: one attempt each, two seconds at most; a
/// failure is logged, the job is not held up.
fn put_entry(spank: &impl SpankHandle, job: u32, path: &Path, put: Put) {
    let log = say(spank, HookPhase::Exit);
    let Ok(text) = std::fs::read_to_string(path) else {
        return;
    };
    let Some(entry) = record::parse(&text)
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
    // Cancelled, or out of time: the watchdog kept the record while the job ran.
    let failed = |e: ControlError| match e {
        ControlError::JobGone(_) => log.verbose(&format!(
            "job {job}: the job has ended before this step: its record is the one kept while it ran"
        )),
        e => log.error(&format!(
            "job {job}: cannot write the record to AdminComment: {e}"
        )),
    };
    let comment = match slurm.admin_comment() {
        Ok(comment) => comment,
        Err(e) => return failed(e),
    };
    // Text that cannot be told apart from imitation is left as it is: an admin's words and the
    // job's history must not go for this run's entry.
    let Some(existing) = comment.readable() else {
        if let AdminComment::Unreadable(why) = &comment {
            log.error(&format!(
                "job {job}: the AdminComment cannot be read ({why}): the record is not written"
            ));
        }
        return;
    };
    if put == Put::Settle && record::is_recorded(existing, &entry) {
        return;
    }
    match record_entry(&mut slurm, existing, &entry, put == Put::Settle) {
        Ok(true) if put == Put::Settle => log.info(&format!(
            "job {job}: this node's record entry, which another node's write had replaced, is back \
             in the AdminComment"
        )),
        Ok(true) => {}
        Ok(false) => log.error(&format!(
            "job {job}: the other nodes' writes replaced this node's record every time"
        )),
        Err(e) => failed(e),
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

    #[test]
    fn a_tasks_end_asks_slurmctld_only_for_a_settling_entry_and_once_per_step() {
        let node = ScratchNode::new();
        let policy = node.policy();
        let task = |step_id, task_local_id| FakeSpank {
            step_id,
            task_local_id,
            ..FakeSpank::new(&policy)
        };
        // No word from the watchdog: nothing asked, nothing said.
        let spank = task(0, 0);
        assert_eq!(task_exit(&spank), Ok(()));
        assert!(spank.logged.borrow().is_empty(), "{:?}", spank.logged);
        // With it, the step's other tasks and the batch step's (its `exit` writes) leave it alone:
        // they would ask slurmctld, which no slurmctld here answers, and say so.
        let dir = node_files::job_dir(&node.runtime_dir(), crate::hooks::fake::JOB);
        std::fs::create_dir_all(&dir).unwrap();
        let text = "gpu-mem-quota:v1{n2/1:q=20G,g0=8G/00000000}";
        assert!(record::parse(text).unwrap().is_some());
        std::fs::write(dir.join(node_files::SETTLING_RECORD_FILE), text).unwrap();
        for spank in [task(0, 1), task(3, 7), task(BATCH_STEP, 0)] {
            assert_eq!(task_exit(&spank), Ok(()));
            assert!(spank.logged.borrow().is_empty(), "{:?}", spank.logged);
        }
    }
}
