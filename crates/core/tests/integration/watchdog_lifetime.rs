//! When slurmctld's answer ends a watch: `lifetime::still_running` over the fake slurmctld.

use gmq_core::slurm_text::JobState;
use gmq_core::watchdog::lifetime::still_running;

use crate::common::watchdog_fakes::FakeSlurm;

fn job(state: JobState, restarts: u32) -> FakeSlurm {
    FakeSlurm {
        state: Some(state),
        restarts,
        ..FakeSlurm::default()
    }
}

#[test]
fn this_run_goes_on_while_slurmctld_runs_it_and_not_its_restart() {
    assert!(still_running(&mut job(JobState::Running, 2), Some(2)).unwrap());
    assert!(still_running(&mut job(JobState::Running, 2), None).unwrap());
    // Suspended and configuring jobs come back.
    assert!(still_running(&mut job(JobState::Suspended, 0), Some(0)).unwrap());
    assert!(still_running(&mut job(JobState::Configuring, 0), Some(0)).unwrap());
    // Requeued and restarted: the watchdog of the old run is done.
    assert!(!still_running(&mut job(JobState::Running, 3), Some(2)).unwrap());
    for ended in [
        JobState::Pending,
        JobState::Completed,
        JobState::Cancelled,
        JobState::Failed,
        JobState::NodeFail,
        JobState::Completing,
    ] {
        let what = format!("{ended:?}");
        assert!(!still_running(&mut job(ended, 0), Some(0)).unwrap(), "{what}");
    }
}

#[test]
fn a_gone_job_has_ended_and_a_silent_slurmctld_says_nothing() {
    let mut gone = FakeSlurm {
        job_gone: true,
        ..FakeSlurm::default()
    };
    assert!(!still_running(&mut gone, Some(0)).unwrap());
    let mut down = FakeSlurm {
        fail_job_reads: 1,
        ..FakeSlurm::default()
    };
    assert!(still_running(&mut down, Some(0)).is_err());
    assert!(still_running(&mut down, Some(0)).unwrap());
}
