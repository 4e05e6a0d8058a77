//! Self-healing after the run (`watchdog::heal::after_run`): a watchdog that sampled its job near
//! its quota, a fake slurmctld that shows how the job ended.

use std::time::{Duration, Instant};

use gmq_core::config::Enforcement;
use gmq_core::record::{self, EventKind};
use gmq_core::size::ByteSize;
use gmq_core::slurm_text::{JobEnd, JobState};
use gmq_core::watchdog::gpu::{GpuProcess, GpuSample, GpuSource};
use gmq_core::watchdog::heal::{after_run, HealPolicy};
use gmq_core::watchdog::{Attributor, Watchdog};

use crate::common::watchdog_fakes::{FakeSlurm, Lines};

const G: u64 = 1 << 30;
const JOB_PID: u32 = 100;

/// GPU 0 of 80G on which the job holds `.0` bytes.
struct OneGpu(u64);

impl GpuSource for OneGpu {
    fn sample(&mut self) -> Result<Vec<GpuSample>, String> {
        Ok(vec![GpuSample {
            index: 0,
            uuid: "GPU-00000000-0000-4000-8000-000000000000".into(),
            total: 80 * G,
            used: self.0,
            processes: vec![GpuProcess {
                pid: JOB_PID,
                used: Some(self.0),
            }],
            listed: true,
        }])
    }

    fn gpu_total(&self) -> Option<u64> {
        Some(80 * G)
    }
}

struct ByPid;

impl Attributor for ByPid {
    fn is_ours(&mut self, pid: u32, _on_job_gpu: bool) -> Option<bool> {
        Some(pid == JOB_PID)
    }
}

const POLICY: HealPolicy = HealPolicy {
    enabled: true,
    max_requeues: 3,
    near_margin: 0.05,
};

fn ended(state: JobState, exit_code: u32) -> JobEnd {
    JobEnd {
        state,
        exit_code: Some(exit_code),
        signal: 0,
        batch_host: "node1".into(),
        batch: true,
        requeue: true,
        restarts: 0,
        node_count: 1,
    }
}

/// A run under a 16G quota that peaked at `peak`, sampled a few times; then what `after_run` did.
fn heal(peak: u64, mut slurm: FakeSlurm, policy: &HealPolicy) -> (FakeSlurm, Lines, Vec<Duration>) {
    let settings = Enforcement {
        grace: Duration::from_secs(30),
        ..Enforcement::default()
    };
    let mut watchdog = Watchdog::new(7, "node1", Some(ByteSize::from_bytes(16 * G)), settings);
    watchdog.set_run(slurm.endings.first().map_or(0, |e| e.restarts));
    let mut lines = Lines::default();
    let t0 = Instant::now();
    for (i, used) in [8 * G, peak, peak].into_iter().enumerate() {
        let at = t0 + Duration::from_secs(i as u64);
        watchdog.tick(at, &mut OneGpu(used), &mut ByPid, &mut slurm, &mut lines);
    }
    assert!(slurm.calls.is_empty(), "acted while running: {:?}", slurm.calls);
    lines.lines.clear();
    let mut waits = Vec::new();
    let mut wait = |pause: Duration| {
        waits.push(pause);
        true
    };
    after_run(&mut watchdog, policy, &mut slurm, &mut lines, &mut wait);
    (slurm, lines, waits)
}

#[test]
fn a_failure_near_the_quota_is_requeued_once_it_shows_then_recorded() {
    let slurm = FakeSlurm {
        admin_comment: "site:keep-me".into(),
        // slurmctld shows the end of the batch script a moment after the watchdog was stopped.
        endings: vec![ended(JobState::Running, 0), ended(JobState::Failed, 1)],
        ..FakeSlurm::default()
    };
    let (slurm, lines, waits) = heal(31 * G / 2, slurm, &POLICY);
    assert_eq!(slurm.calls, ["requeue-ended", "comment"], "{:?}", lines.lines);
    assert_eq!(waits.len(), 1, "one wait while it still showed RUNNING");
    assert!(
        slurm.admin_comment.starts_with("site:keep-me "),
        "{}",
        slurm.admin_comment
    );
    let totals = record::parse(&slurm.admin_comment).unwrap().unwrap().totals();
    assert_eq!(totals.events.get(EventKind::Oom), 1);
    assert_eq!(totals.events.get(EventKind::Requeued), 1);
    assert_eq!(totals.restarts, 1);
    assert!(
        lines.lines.iter().any(|l| l
            .contains("failed (exit code 1) after peaking at 15872M (quota 16G, GPU 80G)")
            && l.contains("requeued with near-OOM hints")),
        "{:?}",
        lines.lines
    );
}

#[test]
fn on_a_multi_node_job_the_node_near_out_of_memory_requeues_it() {
    // The batch script ran on node0; this watchdog's node1 came near its quota (a task that died
    // of OOM here failed the job's srun, and so its script).
    let on_node0 = |state, restarts| JobEnd {
        batch_host: "node0".into(),
        node_count: 2,
        restarts,
        ..ended(state, 1)
    };
    let slurm = FakeSlurm {
        endings: vec![on_node0(JobState::Failed, 0)],
        ..FakeSlurm::default()
    };
    let (slurm, lines, _) = heal(31 * G / 2, slurm, &POLICY);
    assert_eq!(slurm.calls, ["requeue-ended", "comment"], "{:?}", lines.lines);

    // Another node near out of memory too requeued it first: slurmctld refuses a pending job.
    let slurm = FakeSlurm {
        endings: vec![on_node0(JobState::Failed, 0), on_node0(JobState::Pending, 1)],
        fail_actions: 1,
        ..FakeSlurm::default()
    };
    let (slurm, lines, _) = heal(31 * G / 2, slurm, &POLICY);
    assert_eq!(slurm.calls, ["requeue-ended"], "{:?}", lines.lines);
    assert!(
        lines
            .lines
            .iter()
            .any(|l| l.starts_with("info:") && l.contains("another node of the job requeued it first")),
        "{:?}",
        lines.lines
    );
}

#[test]
fn far_from_the_quota_slurmctld_is_not_even_asked() {
    let slurm = FakeSlurm {
        endings: vec![ended(JobState::Failed, 1)],
        ..FakeSlurm::default()
    };
    let (slurm, lines, waits) = heal(10 * G, slurm, &POLICY);
    assert!(slurm.calls.is_empty() && waits.is_empty());
    assert!(lines.lines.is_empty(), "{:?}", lines.lines);
}

#[test]
fn switched_off_or_completed_or_at_max_requeues_it_stays_as_it_ended() {
    let off = HealPolicy {
        enabled: false,
        ..POLICY
    };
    let failed = || FakeSlurm {
        endings: vec![ended(JobState::Failed, 1)],
        ..FakeSlurm::default()
    };
    let (slurm, _, _) = heal(16 * G, failed(), &off);
    assert!(slurm.calls.is_empty());

    let completed = FakeSlurm {
        endings: vec![ended(JobState::Completed, 0)],
        ..FakeSlurm::default()
    };
    let (slurm, lines, _) = heal(16 * G, completed, &POLICY);
    assert!(slurm.calls.is_empty());
    assert!(
        lines
            .lines
            .iter()
            .any(|l| l.contains("the batch script ended (exit code 0)")
                && l.contains("ended COMPLETED, not FAILED")
                && !l.contains("failed (")),
        "{:?}",
        lines.lines
    );

    // Three requeues for GPU memory on record already, and slurmctld restarted the job three
    // times: this is its fourth run.
    let mut entry = record::Entry::new("node1", 0, ByteSize::from_bytes(16 * G));
    for at in [1, 2, 3] {
        entry.count_event(EventKind::OverQuota, at);
        entry.count_event(EventKind::Requeued, at);
    }
    let at_max = FakeSlurm {
        admin_comment: record::merge("", &entry).admin_comment,
        endings: vec![JobEnd {
            restarts: 3,
            ..ended(JobState::Failed, 1)
        }],
        ..FakeSlurm::default()
    };
    let (slurm, lines, _) = heal(16 * G, at_max, &POLICY);
    assert!(slurm.calls.is_empty());
    assert!(
        lines.lines.iter().any(|l| l.contains("max_requeues 3")),
        "{:?}",
        lines.lines
    );

    // An AdminComment that cannot be read: every restart counts as ours.
    let unreadable = FakeSlurm {
        unreadable_comment: Some("imitation".into()),
        endings: vec![JobEnd {
            restarts: 3,
            ..ended(JobState::Failed, 1)
        }],
        ..FakeSlurm::default()
    };
    let (slurm, _, _) = heal(16 * G, unreadable, &POLICY);
    assert!(slurm.calls.is_empty(), "{:?}", slurm.calls);
}

#[test]
fn a_job_that_never_shows_its_end_is_left_alone_within_a_bounded_wait() {
    let slurm = FakeSlurm {
        endings: vec![ended(JobState::Completing, 0)],
        ..FakeSlurm::default()
    };
    let (slurm, lines, waits) = heal(16 * G, slurm, &POLICY);
    assert!(slurm.calls.is_empty());
    assert_eq!(waits.len(), 59, "a minute of asking, once a second");
    assert!(waits.iter().all(|w| *w == Duration::from_secs(1)));
    assert!(
        lines
            .lines
            .iter()
            .any(|l| l.contains("still shows the job COMPLETING")),
        "{:?}",
        lines.lines
    );
}
