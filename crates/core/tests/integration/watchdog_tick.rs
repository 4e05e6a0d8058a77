//! The watchdog's loop, driven by tables: fake GPUs, fake ownership, a fake slurmctld.

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

use gmq_core::config::Enforcement;
use gmq_core::record;
use gmq_core::size::ByteSize;
use gmq_core::watchdog::gpu::{GpuProcess, GpuSample, GpuSource};
use gmq_core::watchdog::{Attributor, Flow, Watchdog};

use crate::common::watchdog_fakes::{FakeSlurm, Lines};

const G: u64 = 1 << 30;
const JOB_PID: u32 = 100;
const STRANGER_PID: u32 = 200;

/// One GPU; each sample pops the next (job bytes, stranger bytes), repeating the last.
struct FakeGpus {
    script: VecDeque<Result<(u64, u64), String>>,
    last: Result<(u64, u64), String>,
}

impl FakeGpus {
    fn new(script: Vec<Result<(u64, u64), String>>) -> FakeGpus {
        FakeGpus {
            script: script.into(),
            last: Ok((0, 0)),
        }
    }
}

impl GpuSource for FakeGpus {
    fn sample(&mut self) -> Result<Vec<GpuSample>, String> {
        if let Some(next) = self.script.pop_front() {
            self.last = next;
        }
        let (job, stranger) = self.last.clone()?;
        Ok(one_gpu(job, stranger))
    }

    fn gpu_total(&self) -> Option<u64> {
        Some(80 * G)
    }
}

/// GPU 0 of 80G with the job's process and a stranger's.
fn one_gpu(job: u64, stranger: u64) -> Vec<GpuSample> {
    vec![GpuSample {
        index: 0,
        uuid: "GPU-00000000-0000-4000-8000-000000000000".into(),
        total: 80 * G,
        used: job + stranger,
        processes: vec![
            GpuProcess {
                pid: JOB_PID,
                used: Some(job),
            },
            GpuProcess {
                pid: STRANGER_PID,
                used: Some(stranger),
            },
        ],
        listed: true,
    }]
}

/// One GPU on which the job holds `bytes(time)`, at the time the test last set: every sample taken
/// in one tick (the confirmation too) sees the same.
struct ByTime<F> {
    bytes: F,
    at: Duration,
}

impl<F: Fn(Duration) -> u64> GpuSource for ByTime<F> {
    fn sample(&mut self) -> Result<Vec<GpuSample>, String> {
        Ok(one_gpu((self.bytes)(self.at), 0))
    }

    fn gpu_total(&self) -> Option<u64> {
        Some(80 * G)
    }
}

/// Ticks every `interval` for `span` of fake time, the job holding `bytes(time)`.
fn run_by_time(
    settings: Enforcement,
    interval: Duration,
    span: Duration,
    bytes: impl Fn(Duration) -> u64,
    slurm: FakeSlurm,
) -> (FakeSlurm, Lines, Watchdog) {
    let mut watchdog = Watchdog::new(7, "node1", Some(ByteSize::from_bytes(40 * G)), settings);
    watchdog.set_run(0);
    let (mut gpus, mut slurm, mut lines) = (
        ByTime {
            bytes,
            at: Duration::ZERO,
        },
        slurm,
        Lines::default(),
    );
    let t0 = Instant::now();
    while gpus.at < span {
        watchdog.tick(t0 + gpus.at, &mut gpus, &mut ByPid, &mut slurm, &mut lines);
        gpus.at += interval;
    }
    (slurm, lines, watchdog)
}

struct ByPid;

impl Attributor for ByPid {
    fn is_ours(&mut self, pid: u32, _on_job_gpu: bool) -> Option<bool> {
        Some(pid == JOB_PID)
    }
}

fn settings() -> Enforcement {
    Enforcement {
        grace: Duration::from_secs(2),
        interval: Duration::from_secs(1),
        ..Enforcement::default()
    }
}

/// Runs `ticks` one second apart; returns the controller and the report.
fn run(
    script: Vec<Result<(u64, u64), String>>,
    slurm: FakeSlurm,
    ticks: u64,
) -> (FakeSlurm, Lines, Watchdog) {
    run_with(settings(), 0, script, slurm, ticks)
}

/// [`run`] under `settings`, watching run `run_count` of the job.
fn run_with(
    settings: Enforcement,
    run_count: u32,
    script: Vec<Result<(u64, u64), String>>,
    slurm: FakeSlurm,
    ticks: u64,
) -> (FakeSlurm, Lines, Watchdog) {
    let mut watchdog = Watchdog::new(7, "node1", Some(ByteSize::from_bytes(40 * G)), settings);
    watchdog.set_run(run_count);
    let (mut gpus, mut slurm, mut lines) = (FakeGpus::new(script), slurm, Lines::default());
    let t0 = Instant::now();
    for i in 0..ticks {
        watchdog.tick(
            t0 + Duration::from_secs(i),
            &mut gpus,
            &mut ByPid,
            &mut slurm,
            &mut lines,
        );
    }
    (slurm, lines, watchdog)
}

#[test]
fn under_quota_nothing_happens_and_the_peak_is_kept() {
    let (slurm, lines, watchdog) = run(vec![Ok((30 * G, 0)), Ok((20 * G, 0))], FakeSlurm::default(), 5);
    assert!(slurm.calls.is_empty(), "{:?}", slurm.calls);
    assert!(lines.lines.is_empty(), "{:?}", lines.lines);
    let usage: BTreeMap<_, _> = watchdog
        .usage()
        .iter()
        .map(|(i, u)| (*i, (u.used, u.peak)))
        .collect();
    assert_eq!(usage[&0], (20 * G, 30 * G));
    assert_eq!(lines.status.unwrap().health.unwrap().name(), "ok");
}

#[test]
fn over_quota_past_grace_records_first_then_requeues_once() {
    let slurm = FakeSlurm {
        requeueable: true,
        admin_comment: "site:keep-me".into(),
        ..FakeSlurm::default()
    };
    let (slurm, lines, _) = run(vec![Ok((50 * G, 0))], slurm, 6);
    assert_eq!(slurm.calls, vec!["comment", "requeue"]);
    assert!(
        slurm.admin_comment.starts_with("site:keep-me "),
        "{}",
        slurm.admin_comment
    );
    let record = record::parse(&slurm.admin_comment).unwrap().unwrap();
    let totals = record.totals();
    assert_eq!(totals.events.get(record::EventKind::Requeued), 1);
    assert_eq!(totals.events.get(record::EventKind::OverQuota), 1);
    assert_eq!(totals.peak, 50 * G);
    assert!(lines
        .lines
        .iter()
        .any(|l| l.contains("GPU memory 50G over its 40G quota") && l.contains("requeued")));
}

#[test]
fn another_jobs_memory_never_counts() {
    let (slurm, lines, watchdog) = run(vec![Ok((10 * G, 70 * G))], FakeSlurm::default(), 6);
    assert!(slurm.calls.is_empty());
    assert!(lines.lines.is_empty(), "{:?}", lines.lines);
    assert_eq!(watchdog.usage()[&0].peak, 10 * G);
}

#[test]
fn a_spike_shorter_than_grace_is_forgiven() {
    let script = vec![Ok((50 * G, 0)), Ok((50 * G, 0)), Ok((30 * G, 0))];
    let (slurm, _, _) = run(
        script,
        FakeSlurm {
            requeueable: true,
            ..FakeSlurm::default()
        },
        6,
    );
    assert!(slurm.calls.is_empty(), "{:?}", slurm.calls);
}

#[test]
fn nvml_failures_are_logged_once_and_never_act() {
    let script = vec![
        Err("GPU is lost".into()),
        Err("GPU is lost".into()),
        Err("GPU is lost".into()),
    ];
    let (slurm, lines, _) = run(
        script,
        FakeSlurm {
            requeueable: true,
            ..FakeSlurm::default()
        },
        6,
    );
    assert!(slurm.calls.is_empty());
    let errors: Vec<_> = lines.lines.iter().filter(|l| l.starts_with("error")).collect();
    assert_eq!(errors.len(), 1, "{:?}", lines.lines);
    assert!(errors[0].contains("GPU is lost") && errors[0].contains("keeps running"));
}

#[test]
fn no_action_without_the_record_and_a_retry_later() {
    let slurm = FakeSlurm {
        requeueable: true,
        fail_comment_writes: 1,
        fail_job_reads: 1,
        ..FakeSlurm::default()
    };
    let (slurm, lines, _) = run(vec![Ok((50 * G, 0))], slurm, 14);
    // First attempt: slurmctld unreachable; second: record refused; third: recorded and requeued.
    assert_eq!(slurm.calls, vec!["comment", "requeue"], "{:?}", lines.lines);
    assert!(lines
        .lines
        .iter()
        .any(|l| l.contains("cannot read the job from slurmctld")));
    assert!(lines
        .lines
        .iter()
        .any(|l| l.contains("the record cannot be written") && l.contains("not acting blind")));
}

#[test]
fn a_job_slurmctld_says_is_gone_stops_the_watchdog_instead_of_a_retry() {
    let mut watchdog = Watchdog::new(7, "node1", Some(ByteSize::from_bytes(40 * G)), settings());
    watchdog.set_run(0);
    let mut gpus = FakeGpus::new(vec![Ok((50 * G, 0))]);
    let mut slurm = FakeSlurm {
        requeueable: true,
        job_gone: true,
        ..FakeSlurm::default()
    };
    let mut lines = Lines::default();
    let t0 = Instant::now();
    let flows: Vec<Flow> = (0..10)
        .map(|i| {
            let at = t0 + Duration::from_secs(i);
            watchdog.tick(at, &mut gpus, &mut ByPid, &mut slurm, &mut lines)
        })
        .collect();
    // Over the quota past the grace period (2 s): the third sample acts, and finds the job gone.
    let stop = flows.iter().position(|f| *f == Flow::Stop);
    assert_eq!(stop, Some(2), "{flows:?} {:?}", lines.lines);
    assert!(slurm.calls.is_empty(), "{:?}", slurm.calls);
    assert!(lines
        .lines
        .iter()
        .any(|l| l.starts_with("info: the job is gone from slurmctld") && l.contains("Invalid job id")));
    assert!(
        !lines.lines.iter().any(|l| l.contains("will try again")),
        "{:?}",
        lines.lines
    );
}

#[test]
fn escalation_and_jobs_that_cannot_be_requeued() {
    // Requeued 3 times by us already (the default max_requeues): held instead.
    let mut entry = record::Entry::new("node1", 2, ByteSize::from_bytes(40 * G));
    for _ in 0..3 {
        entry.count_event(record::EventKind::Requeued, 1);
    }
    let earlier = record::merge("", &entry).admin_comment;
    let slurm = FakeSlurm {
        requeueable: true,
        restarts: 3,
        admin_comment: earlier,
        ..FakeSlurm::default()
    };
    let (slurm, _, _) = run_with(settings(), 3, vec![Ok((50 * G, 0))], slurm, 6);
    assert_eq!(slurm.calls, vec!["comment", "requeue-hold"]);

    let (slurm, lines, _) = run(vec![Ok((50 * G, 0))], FakeSlurm::default(), 6);
    assert_eq!(slurm.calls, vec!["comment", "cancel"]);
    assert!(lines.lines.iter().any(|l| l.contains("cannot be requeued")));
}

#[test]
fn a_run_slurmctld_has_requeued_is_never_acted_for() {
    // A node failure: this node's slurmd died, its tasks of run 0 ran on, and slurmctld requeued
    // the job, whose run 1 runs elsewhere (or waits). Over the quota now, run 0's watchdog must not
    // requeue, hold or cancel the job: that would be done to run 1.
    use gmq_core::slurm_text::JobState;
    for (state, restarts) in [
        (JobState::Running, 1),
        (JobState::Pending, 1),
        (JobState::NodeFail, 0),
    ] {
        let slurm = FakeSlurm {
            requeueable: true,
            restarts,
            state: Some(state.clone()),
            ..FakeSlurm::default()
        };
        let (slurm, lines, _) = run_with(settings(), 0, vec![Ok((50 * G, 0))], slurm, 6);
        assert!(slurm.calls.is_empty(), "{state}: {:?}", slurm.calls);
        let said = format!(
            "slurmctld no longer runs this run of the job: it is {state} after {restarts} restart(s)"
        );
        assert!(
            lines
                .lines
                .iter()
                .any(|l| l.contains(&said) && l.contains("the watchdog stops")),
            "{:?}",
            lines.lines
        );
    }
}

#[test]
fn an_orphaned_runs_entry_records_the_node_failure_whatever_another_node_wrote() {
    // Two nodes wrote at the job's start and, after this one's looks for its entry, a slow write of
    // the other node replaced it; the peak never grew, so no later write was due. When the run
    // ends without this node's slurmd, the watchdog puts its entry back with the node failure,
    // keeping the other node's and the next run's.
    let mut watchdog = Watchdog::new(7, "node2", Some(ByteSize::from_bytes(40 * G)), settings());
    watchdog.set_run(0);
    watchdog.set_node_count(2);
    let (mut gpus, mut slurm, mut lines) = (
        FakeGpus::new(vec![Ok((5 * G, 0))]),
        FakeSlurm::default(),
        Lines::default(),
    );
    let t0 = Instant::now();
    for i in 0..16 {
        watchdog.tick(
            t0 + Duration::from_secs(i),
            &mut gpus,
            &mut ByPid,
            &mut slurm,
            &mut lines,
        );
        watchdog.keep_record_current(t0 + Duration::from_secs(i), &mut slurm, &mut lines);
    }
    assert!(
        slurm.admin_comment.contains("node2/0:"),
        "{}",
        slurm.admin_comment
    );
    slurm.admin_comment =
        "gpu-mem-quota:v1{node1/0:q=40G,g0=5G/00000000;node1/1:q=40G,g0=1G/00000000}".into();
    slurm.restarts = 1;
    watchdog.keep_record_current(t0 + Duration::from_secs(16), &mut slurm, &mut lines);
    assert!(
        !slurm.admin_comment.contains("node2/0:"),
        "not due: {}",
        slurm.admin_comment
    );
    watchdog.record_node_fail(1_800_000_000, &mut slurm, &mut lines);
    let record = record::parse(&slurm.admin_comment).unwrap().unwrap();
    assert_eq!(record.entries().len(), 3, "{}", slurm.admin_comment);
    let failed = record.entry("node2", 0).unwrap();
    assert_eq!(failed.facts.events.get(record::EventKind::NodeFail), 1);
    assert_eq!(
        failed.facts.last_event,
        Some(record::LastEvent {
            at: 1_800_000_000,
            kind: record::EventKind::NodeFail
        })
    );
    assert!(
        slurm.admin_comment.contains("node_fail=1,")
            && slurm.admin_comment.contains("last=node_fail@1800000000"),
        "{}",
        slurm.admin_comment
    );
    // Not a requeue of ours: the next run's hints see no GPU-memory event.
    let previous = gmq_core::hints::previous_run(&slurm.admin_comment).unwrap();
    assert_eq!(previous.restarts, 0);
    for (node, run) in [("node1", 0), ("node1", 1), ("node2", 0)] {
        assert!(
            record.entry(node, run).is_some(),
            "{node}/{run}: {}",
            slurm.admin_comment
        );
    }
    assert!(lines.lines.is_empty(), "{:?}", lines.lines);
}

#[test]
fn a_node_failure_that_ended_the_job_is_said_not_warned() {
    // `--no-requeue`: slurmctld ended the job NODE_FAIL and takes no more AdminComment writes.
    // The entry written while the job ran stays; the watchdog says why it adds nothing.
    let mut watchdog = Watchdog::new(7, "node2", Some(ByteSize::from_bytes(40 * G)), settings());
    watchdog.set_run(0);
    let (mut gpus, mut slurm, mut lines) = (
        FakeGpus::new(vec![Ok((5 * G, 0))]),
        FakeSlurm::default(),
        Lines::default(),
    );
    let t0 = Instant::now();
    watchdog.tick(t0, &mut gpus, &mut ByPid, &mut slurm, &mut lines);
    watchdog.keep_record_current(t0, &mut slurm, &mut lines);
    let written = slurm.admin_comment.clone();
    assert!(written.contains("node2/0:"), "{written}");
    slurm.job_gone = true;
    watchdog.record_node_fail(1_800_000_000, &mut slurm, &mut lines);
    assert_eq!(slurm.admin_comment, written);
    assert!(
        lines
            .lines
            .iter()
            .any(|l| l.starts_with("info: the job has ended (") && l.contains("NODE_FAIL in sacct")),
        "{:?}",
        lines.lines
    );
    assert!(
        !lines.lines.iter().any(|l| l.starts_with("warning")),
        "{:?}",
        lines.lines
    );
}

#[test]
fn a_requeue_that_failed_does_not_count_toward_escalation() {
    // G12: the record goes first, so a requeue that slurmctld never carried out (it did not
    // answer) stays in the AdminComment. With max_requeues = 1 the next try would hold the job,
    // though it was never requeued: slurmctld's restart count says how many requeues happened.
    let one_requeue = || Enforcement {
        max_requeues: 1,
        ..settings()
    };
    let slurm = FakeSlurm {
        requeueable: true,
        fail_actions: 1,
        ..FakeSlurm::default()
    };
    let (slurm, lines, _) = run_with(one_requeue(), 0, vec![Ok((50 * G, 0))], slurm, 12);
    let actions: Vec<&String> = slurm.calls.iter().filter(|c| *c != "comment").collect();
    assert_eq!(actions, ["requeue", "requeue"], "{:?}", lines.lines);
    let record = record::parse(&slurm.admin_comment).unwrap().unwrap();
    assert_eq!(record.totals().events.get(record::EventKind::Requeued), 1);
    // Once slurmctld says the job was requeued, the count holds: the next is a hold.
    let slurm = FakeSlurm {
        requeueable: true,
        restarts: 1,
        admin_comment: slurm.admin_comment,
        ..FakeSlurm::default()
    };
    let (slurm, lines, _) = run_with(one_requeue(), 1, vec![Ok((50 * G, 0))], slurm, 6);
    let actions: Vec<&String> = slurm.calls.iter().filter(|c| *c != "comment").collect();
    assert_eq!(actions, ["requeue-hold"], "{:?}", lines.lines);
}

#[test]
fn an_unreadable_admin_comment_never_buys_a_job_more_requeues() {
    // A job whose name imitates `AdminComment=` hides its history: every restart counts as ours.
    let hidden = |restarts| FakeSlurm {
        requeueable: true,
        restarts,
        admin_comment: "what slurmctld really holds".into(),
        unreadable_comment: Some("ambiguous: `AdminComment=` appears 2 times".into()),
        ..FakeSlurm::default()
    };
    let (slurm, lines, _) = run_with(settings(), 3, vec![Ok((50 * G, 0))], hidden(3), 6);
    assert_eq!(slurm.calls, vec!["requeue-hold"], "{:?}", lines.lines);
    assert!(lines.lines.iter().any(|l| l.starts_with("warning")
        && l.contains("AdminComment cannot be read (ambiguous")
        && l.contains("counting all 3 restart(s)")
        && l.contains("without writing the record")));
    // F6: text that cannot be read is never written over (an admin's words, the job's history).
    assert_eq!(slurm.admin_comment, "what slurmctld really holds");

    // A first offence is still a first offence.
    let (slurm, _, _) = run(vec![Ok((50 * G, 0))], hidden(0), 6);
    assert_eq!(slurm.calls, vec!["requeue"]);
}

#[test]
fn duty_cycled_overuse_is_requeued() {
    // Review F7: 50G for 1.4 s, 30G for 0.6 s, on a 40G quota; sampled every 500 ms, grace 2 s.
    // One sample in four is under the quota; it used to restart the grace period every cycle.
    let settings = Enforcement {
        grace: Duration::from_secs(2),
        interval: Duration::from_millis(500),
        ..Enforcement::default()
    };
    let bytes = |t: Duration| {
        if t.as_millis() % 2000 < 1400 {
            50 * G
        } else {
            30 * G
        }
    };
    let slurm = FakeSlurm {
        requeueable: true,
        ..FakeSlurm::default()
    };
    let (slurm, lines, watchdog) = run_by_time(
        settings,
        Duration::from_millis(500),
        Duration::from_secs(20),
        bytes,
        slurm,
    );
    assert_eq!(slurm.calls, vec!["comment", "requeue"], "{:?}", lines.lines);
    assert!(watchdog.has_acted());
    assert!(
        lines
            .lines
            .iter()
            .any(|l| l.contains("GPU memory 50G over its 40G quota") && l.contains("requeued")),
        "{:?}",
        lines.lines
    );
    let record = record::parse(&slurm.admin_comment).unwrap().unwrap();
    assert_eq!(record.totals().events.get(record::EventKind::Requeued), 1);
}

#[test]
fn a_fresh_sample_under_the_quota_delays_the_action_by_one_sample_not_a_grace() {
    // Due at 2 s, but the confirmation sample reads 30G: nothing then; the sample at 3 s (over,
    // and so is its confirmation) acts, where a reset would have waited until 5 s.
    let script = vec![
        Ok((50 * G, 0)),
        Ok((50 * G, 0)),
        Ok((50 * G, 0)),
        Ok((30 * G, 0)), // the confirmation at 2 s
        Ok((50 * G, 0)),
    ];
    let slurm = FakeSlurm {
        requeueable: true,
        ..FakeSlurm::default()
    };
    let (slurm, lines, _) = run(script, slurm, 4);
    assert_eq!(slurm.calls, vec!["comment", "requeue"], "{:?}", lines.lines);
    assert!(lines
        .lines
        .iter()
        .any(|l| l.contains("over the quota no more on a fresh sample")));
}

#[test]
fn flapping_around_the_warn_threshold_logs_a_bounded_number_of_lines() {
    // Review F13: 37G (over the 36G warn level) and 30G (under the 32.4G recover level) in turn,
    // sampled every 500 ms for 10 minutes: 600 warnings and 600 recoveries.
    let settings = Enforcement {
        interval: Duration::from_millis(500),
        ..Enforcement::default()
    };
    let flapping = |t: Duration| {
        if t.as_millis() % 1000 < 500 {
            37 * G
        } else {
            30 * G
        }
    };
    let ten_minutes = Duration::from_secs(600);
    let half_second = Duration::from_millis(500);
    let (slurm, lines, watchdog) = run_by_time(
        settings.clone(),
        half_second,
        ten_minutes,
        flapping,
        FakeSlurm::default(),
    );
    assert!(slurm.calls.is_empty(), "{:?}", slurm.calls);
    let warns: Vec<_> = lines
        .lines
        .iter()
        .filter(|l| l.contains("warning the job"))
        .collect();
    let recovers: Vec<_> = lines.lines.iter().filter(|l| l.contains("back under")).collect();
    // The first of each, then one at 5 min carrying the count of those not logged.
    assert_eq!(warns.len(), 2, "{:?}", lines.lines);
    assert_eq!(recovers.len(), 2, "{:?}", lines.lines);
    assert_eq!(lines.lines.len(), 4, "{:?}", lines.lines);
    assert!(
        warns[1].contains("299 more time(s) since the last such line, not logged"),
        "{}",
        warns[1]
    );
    assert!(
        recovers[1].contains("299 more time(s) since the last such line, not logged"),
        "{}",
        recovers[1]
    );
    // The record counts every warning; the status shows the last sample's state (30G: ok).
    let record = record::parse(&watchdog.record_text().unwrap()).unwrap().unwrap();
    assert_eq!(record.totals().events.get(record::EventKind::Warn), 600);
    assert_eq!(lines.status.unwrap().health.unwrap().name(), "ok");

    // Between the recover level and the warn level (35G, 37G): one warning, no recovery at all.
    let hovering = |t: Duration| {
        if t.as_millis() % 1000 < 500 {
            37 * G
        } else {
            35 * G
        }
    };
    let (_, lines, watchdog) =
        run_by_time(settings, half_second, ten_minutes, hovering, FakeSlurm::default());
    assert_eq!(lines.lines.len(), 1, "{:?}", lines.lines);
    assert!(lines.lines[0].contains("warning the job"), "{:?}", lines.lines);
    assert_eq!(lines.status.unwrap().health.unwrap().name(), "warn");
    let record = record::parse(&watchdog.record_text().unwrap()).unwrap().unwrap();
    assert_eq!(record.totals().events.get(record::EventKind::Warn), 1);
}

/// One tick and one `keep_record_current` per second, `bytes(second)` of the job's memory.
fn run_recording(
    bytes: impl Fn(u64) -> u64,
    seconds: u64,
    slurm: FakeSlurm,
    multi_node: bool,
) -> (FakeSlurm, Lines) {
    run_recording_watched(bytes, seconds, slurm, multi_node, |_, _| {})
}

/// [`run_recording`], showing `after_second` the watchdog after each second's record keeping.
fn run_recording_watched(
    bytes: impl Fn(u64) -> u64,
    seconds: u64,
    slurm: FakeSlurm,
    multi_node: bool,
    mut after_second: impl FnMut(u64, &Watchdog),
) -> (FakeSlurm, Lines) {
    let mut watchdog = Watchdog::new(7, "node2", Some(ByteSize::from_bytes(40 * G)), settings());
    watchdog.set_run(0);
    watchdog.set_node_count(if multi_node { 2 } else { 1 });
    let (mut slurm, mut lines) = (slurm, Lines::default());
    let t0 = Instant::now();
    for second in 0..seconds {
        let now = t0 + Duration::from_secs(second);
        let mut gpus = FakeGpus::new(vec![Ok((bytes(second), 0))]);
        watchdog.tick(now, &mut gpus, &mut ByPid, &mut slurm, &mut lines);
        watchdog.keep_record_current(now, &mut slurm, &mut lines);
        after_second(second, &watchdog);
    }
    (slurm, lines)
}

fn recorded_peak(admin_comment: &str) -> u64 {
    let record = record::parse(admin_comment).unwrap().unwrap();
    record.entry("node2", 0).map_or(0, |e| e.peak())
}

#[test]
fn a_multi_node_jobs_peak_is_recorded_while_it_runs_a_handful_of_times() {
    // 10G at once, 10.5G at 30 s (5 %: not worth it), 20G at 40 s (written once 60 s have passed).
    let bytes = |s| match s {
        0..30 => 10 * G,
        30..40 => 10 * G + G / 2,
        _ => 20 * G,
    };
    let slurm = FakeSlurm {
        admin_comment: "site:keep-me".into(),
        ..FakeSlurm::default()
    };
    let (slurm, lines) = run_recording(bytes, 100, slurm, true);
    assert_eq!(slurm.calls, ["comment", "comment"], "{:?}", lines.lines);
    assert!(
        slurm.admin_comment.starts_with("site:keep-me "),
        "{}",
        slurm.admin_comment
    );
    assert_eq!(recorded_peak(&slurm.admin_comment), 20 * G);
    assert!(lines.lines.is_empty(), "{:?}", lines.lines);

    // A single-node job's record is kept the same way (a cancelled job gets no final write: the
    // controller refuses updates once it is completing), without reading each write back.
    let (slurm, lines) = run_recording(bytes, 100, FakeSlurm::default(), false);
    assert_eq!(slurm.calls, ["comment", "comment"], "{:?}", lines.lines);
    assert_eq!(recorded_peak(&slurm.admin_comment), 20 * G);
}

#[test]
fn a_refused_requeue_falls_back_to_the_no_requeue_action_at_once() {
    // G5: squeue says a heterogeneous job's later component may be requeued; slurmctld refuses.
    let slurm = FakeSlurm {
        requeueable: true,
        refuse_requeues: Some("Job not heterogeneous job leader for job 8".into()),
        ..FakeSlurm::default()
    };
    let (slurm, lines, watchdog) = run(vec![Ok((50 * G, 0))], slurm, 30);
    let actions: Vec<&String> = slurm.calls.iter().filter(|c| *c != "comment").collect();
    assert_eq!(actions, ["requeue", "cancel"], "{:?}", lines.lines);
    assert!(watchdog.has_acted());
    // The record went first, so it says a requeue was tried (the larger count wins in a merge);
    // a refused action is counted once, never again at each retry (G12: `requeued=3,held=147`).
    let record = record::parse(&slurm.admin_comment).unwrap().unwrap();
    assert_eq!(
        record.totals().events.get(record::EventKind::Requeued),
        1,
        "{}",
        slurm.admin_comment
    );
    assert_eq!(
        record.totals().events.get(record::EventKind::Cancelled),
        1,
        "{}",
        slurm.admin_comment
    );
    assert!(
        lines
            .lines
            .iter()
            .any(|l| l.contains("refused to requeue") && l.contains("not heterogeneous")),
        "{:?}",
        lines.lines
    );
}

#[test]
fn an_unreadable_admin_comment_is_not_read_again_at_every_sample() {
    // G3: five minutes at one sample a second. Every read costs slurmctld a request.
    let slurm = FakeSlurm {
        unreadable_comment: Some("the AdminComment could not be written back".into()),
        ..FakeSlurm::default()
    };
    let (slurm, lines) = run_recording(|_| 10 * G, 300, slurm, false);
    // Tried at 0, 2, 6, 14, 30, 62, 126 and 254 s.
    assert_eq!(slurm.comment_reads, 8, "{:?}", lines.lines);
    assert!(slurm.calls.is_empty(), "{:?}", slurm.calls);
    assert_eq!(lines.lines.len(), 1, "{:?}", lines.lines);
}

#[test]
fn a_record_lost_to_another_nodes_write_is_written_again() {
    let slurm = FakeSlurm {
        lost_comment_writes: 2,
        ..FakeSlurm::default()
    };
    let (slurm, lines) = run_recording(|_| 10 * G, 10, slurm, true);
    // Read back after each write: lost twice, kept the third time, then nothing more to say.
    assert_eq!(slurm.calls, ["comment"; 3], "{:?}", lines.lines);
    assert_eq!(recorded_peak(&slurm.admin_comment), 10 * G);
}

#[test]
fn a_record_replaced_after_it_was_read_back_is_written_again() {
    // Node 1 reads the text, node 2 writes and reads its entry back, node 1 writes its merge of
    // the older text: node 2's entry is gone, and its peak never grows again to bring it back.
    let slurm = FakeSlurm {
        admin_comment: "site:keep-me".into(),
        stale_write_at_read: Some((3, "site:keep-me".into())),
        ..FakeSlurm::default()
    };
    let (slurm, lines) = run_recording(|_| 10 * G, 60, slurm, true);
    // Written at 0 s and read back; looked for at 3 s (gone), written again and read back;
    // looked for at 15 s (there): then nothing more. The write the look made armed no looks of
    // its own (K4: each rewrite re-armed them, and a record that never settled was read for ever).
    assert_eq!(slurm.calls, ["comment"; 2], "{:?}", lines.lines);
    assert_eq!(slurm.comment_reads, 5, "{:?}", lines.lines);
    assert_eq!(recorded_peak(&slurm.admin_comment), 10 * G);
    assert!(lines.lines.is_empty(), "{:?}", lines.lines);

    // A single-node job has no other writer: no look afterwards.
    let (slurm, _) = run_recording(|_| 10 * G, 60, FakeSlurm::default(), false);
    assert_eq!((slurm.calls.len(), slurm.comment_reads), (1, 1));
}

#[test]
fn a_multi_node_jobs_entry_stays_for_the_final_write_until_it_has_settled() {
    // The record file (unrecorded_text) is what the plugin writes when the batch script ends.
    // A write another node may still replace has not settled: a job that ends within seconds of
    // its nodes' first writes gets this node's entry back from the batch node's final write.
    let record_file_at = |multi_node: bool, seconds: &[u64]| {
        let mut kept = Vec::new();
        let last = *seconds.iter().max().unwrap();
        let (slurm, lines) = run_recording_watched(
            |_| 10 * G,
            last + 1,
            FakeSlurm::default(),
            multi_node,
            |second, watchdog| {
                if seconds.contains(&second) {
                    kept.push(watchdog.unrecorded_text().is_some());
                }
            },
        );
        assert_eq!(slurm.calls, ["comment"], "{:?}", lines.lines);
        kept
    };
    // Written at 0 s, looked for at 3 s and 15 s (and this node's stagger, under 2 s): the file
    // goes with the last look.
    assert_eq!(
        record_file_at(true, &[0, 2, 3, 14, 17, 30]),
        [true, true, true, true, false, false]
    );
    // A single-node job's write has no other writer to lose it to.
    assert_eq!(record_file_at(false, &[0, 3, 15]), [false, false, false]);
}

#[test]
fn a_record_lost_to_another_nodes_write_is_written_again_before_acting_too() {
    let slurm = FakeSlurm {
        requeueable: true,
        node_count: 2,
        lost_comment_writes: 1,
        ..FakeSlurm::default()
    };
    let (slurm, lines, _) = run(vec![Ok((50 * G, 0))], slurm, 6);
    assert_eq!(
        slurm.calls,
        ["comment", "comment", "requeue"],
        "{:?}",
        lines.lines
    );
    let record = record::parse(&slurm.admin_comment).unwrap().unwrap();
    assert_eq!(record.totals().events.get(record::EventKind::Requeued), 1);

    // Lost every time: the writes worked, so the job is requeued all the same, and it is said.
    let slurm = FakeSlurm {
        requeueable: true,
        node_count: 2,
        lost_comment_writes: 3,
        ..FakeSlurm::default()
    };
    let (slurm, lines, _) = run(vec![Ok((50 * G, 0))], slurm, 6);
    assert_eq!(
        slurm.calls,
        ["comment", "comment", "comment", "requeue"],
        "{:?}",
        lines.lines
    );
    assert!(lines
        .lines
        .iter()
        .any(|l| l.contains("other writers replaced it 3 times")));
}

#[test]
fn an_unreadable_admin_comment_is_left_alone_while_the_job_runs() {
    let slurm = FakeSlurm {
        admin_comment: "what slurmctld really holds".into(),
        unreadable_comment: Some("ambiguous".into()),
        ..FakeSlurm::default()
    };
    let (slurm, lines) = run_recording(|_| 10 * G, 10, slurm, true);
    assert!(slurm.calls.is_empty(), "{:?}", slurm.calls);
    let warnings: Vec<_> = lines.lines.iter().filter(|l| l.starts_with("warning")).collect();
    assert_eq!(warnings.len(), 1, "{:?}", lines.lines);
    assert!(
        warnings[0].contains("cannot keep this node's record"),
        "{}",
        warnings[0]
    );
}

/// `ticks` samples 2 s apart of `series(i)` bytes, with prediction on (horizon 5 min).
fn run_trend(series: impl Fn(u64) -> u64, ticks: u64) -> (Lines, Watchdog) {
    let prediction = gmq_core::config::Prediction {
        enabled: true,
        ..Default::default()
    };
    let mut watchdog =
        Watchdog::new(7, "node1", Some(ByteSize::from_bytes(40 * G)), settings()).with_prediction(prediction);
    watchdog.set_run(0);
    let script = (0..ticks).map(|i| Ok((series(i), 0))).collect();
    let (mut gpus, mut slurm, mut lines) = (FakeGpus::new(script), FakeSlurm::default(), Lines::default());
    let t0 = Instant::now();
    for i in 0..ticks {
        watchdog.tick(
            t0 + Duration::from_secs(2 * i),
            &mut gpus,
            &mut ByPid,
            &mut slurm,
            &mut lines,
        );
    }
    (lines, watchdog)
}

#[test]
fn a_slow_leak_is_predicted_before_the_quota_and_shows_in_the_status() {
    // 20G, growing 8 MiB/s: crosses 40G after ~43 min. Watch 38 min of it.
    let (lines, _) = run_trend(|i| 20 * G + i * 2 * 8 * (1 << 20), 38 * 30);
    let warning = lines
        .lines
        .iter()
        .find(|l| l.contains("predicted to cross it in"));
    assert!(warning.is_some(), "{:?}", lines.lines);
    let status = lines.status.unwrap();
    let prediction = status.prediction.expect("a prediction in the status");
    assert!(prediction.seconds_to_quota <= 300, "{prediction:?}");
    assert!(prediction.suggested_batch_scale < 100, "{prediction:?}");
    assert!(status.to_json().contains("\"prediction\":{\"gpu_index\":0"));
}

#[test]
fn the_saw_tooth_of_training_steps_never_warns() {
    // Steps of 10 samples: 30G rising to 36G (90% of the quota), then freed, for 30 minutes.
    let (lines, _) = run_trend(|i| 30 * G + (i % 10) * 6 * G / 10, 30 * 30);
    assert!(
        lines.lines.iter().all(|l| !l.contains("predicted")),
        "{:?}",
        lines.lines
    );
}

#[test]
fn counts_in_a_record_cannot_wrap_the_requeue_count_to_zero() {
    // F5: requeued + held overflowed u32 and read as 0 requeues: requeued for ever, never held.
    let slurm = FakeSlurm {
        requeueable: true,
        // Restarted as often as max_requeues: the count cannot be checked down below it.
        restarts: 3,
        admin_comment: "gpu-mem-quota:v1{zz/0:q=1G,requeued=4294967295,held=1}".into(),
        ..FakeSlurm::default()
    };
    let (slurm, lines, _) = run_with(settings(), 3, vec![Ok((50 * G, 0))], slurm, 6);
    assert_eq!(slurm.calls, vec!["comment", "requeue-hold"], "{:?}", lines.lines);
    let previous = gmq_core::hints::previous_run(&slurm.admin_comment).unwrap();
    assert_eq!(previous.restarts, u32::MAX);
}

/// The node's GPU 3 (`/dev/nvidia3`), the only GPU the job sees (as its device 0).
struct NodeGpuThree;

impl GpuSource for NodeGpuThree {
    fn sample(&mut self) -> Result<Vec<GpuSample>, String> {
        let mut gpu = one_gpu(12 * G, 0).remove(0);
        gpu.index = 3;
        Ok(vec![gpu])
    }

    fn gpu_total(&self) -> Option<u64> {
        Some(80 * G)
    }
}

#[test]
fn the_gpu_is_named_by_the_nodes_number_in_metrics_record_and_status() {
    // Defect 3: one meaning everywhere, the node's GPU number (not the job's CUDA ordinal 0).
    let mut watchdog = Watchdog::new(7, "node2", Some(ByteSize::from_bytes(40 * G)), settings());
    watchdog.set_run(0);
    let (mut slurm, mut lines) = (FakeSlurm::default(), Lines::default());
    watchdog.tick(
        Instant::now(),
        &mut NodeGpuThree,
        &mut ByPid,
        &mut slurm,
        &mut lines,
    );
    let metrics = gmq_core::metrics::render(&watchdog.metrics("alice"));
    assert!(metrics.contains("gpu=\"3\""), "{metrics}");
    assert!(!metrics.contains("gpu=\"0\""), "{metrics}");
    let record = watchdog.record_text().unwrap();
    assert!(record.contains(",g3=12G/"), "{record}");
    let status = watchdog.status(Some(40 * G));
    assert_eq!(status.gpus.iter().map(|g| g.index).collect::<Vec<_>>(), [3]);
}

#[test]
fn the_jobs_telemetry_is_shown_and_never_decided_on() {
    use gmq_core::job_telemetry::{AllocatorTelemetry, ReportedTask, SOURCE};
    // The job says it holds almost nothing and has never run out of memory; NVML says it is over
    // its quota. The status and the metrics show both, and the watchdog acts on NVML's word alone.
    let lie = ReportedTask {
        source: SOURCE.into(),
        task: 0,
        pid: JOB_PID,
        updated_at: 1_796_018_400,
        allocator: AllocatorTelemetry {
            allocated_bytes: 1,
            reserved_bytes: 1,
            peak_allocated_bytes: 1,
            peak_reserved_bytes: 1,
            num_alloc_retries: 0,
            num_ooms: 0,
            fragmentation: 0,
        },
        controller: None,
    };
    let mut watchdog = Watchdog::new(7, "node1", Some(ByteSize::from_bytes(40 * G)), settings());
    watchdog.set_run(0);
    watchdog.set_job_reported(gmq_core::job_telemetry::Shown {
        tasks: vec![lie.clone()],
        not_shown: 0,
    });
    let (mut gpus, mut slurm, mut lines) = (
        FakeGpus::new(vec![Ok((50 * G, 0))]),
        FakeSlurm::default(),
        Lines::default(),
    );
    let t0 = Instant::now();
    for i in 0..5 {
        watchdog.tick(
            t0 + Duration::from_secs(i),
            &mut gpus,
            &mut ByPid,
            &mut slurm,
            &mut lines,
        );
    }
    assert_eq!(watchdog.attributed_pids(), [JOB_PID]);
    assert!(watchdog.has_acted(), "{:?}", slurm.calls);
    let status = lines.status.expect("a status was written");
    assert_eq!(status.job_reported, vec![lie]);
    assert_eq!(status.gpus[0].used_bytes, 50 * G);
    let metrics = gmq_core::metrics::render(&watchdog.metrics("alice"));
    assert!(
        metrics.contains(
            "gpu_mem_quota_job_reported_reserved_bytes{job_id=\"7\",user=\"alice\",jobid=\"7\",hpc_job=\"7\",task=\"0\"} 1\n"
        ),
        "{metrics}"
    );
}

/// K7: a watchdog whose start could not read the job's record watches with the prolog's quota and
/// knows no run (so writes no record); when the record arrives late, the daemon lowers the quota
/// and sets the run, in that order (`Daemon::take_record`), on the same watchdog: from the next
/// sample on the job is held to the lowered quota, its entry is recorded with it, and the action
/// follows after the grace as for any job.
#[test]
fn a_quota_lowered_when_the_record_arrives_late_is_enforced_from_then_on() {
    let slurm = FakeSlurm {
        requeueable: true,
        ..FakeSlurm::default()
    };
    let mut watchdog = Watchdog::new(7, "node1", Some(ByteSize::from_bytes(40 * G)), settings());
    let (mut gpus, mut slurm, mut lines) = (FakeGpus::new(vec![Ok((5 * G, 0))]), slurm, Lines::default());
    let t0 = Instant::now();
    let mut tick = |watchdog: &mut Watchdog, i: u64, slurm: &mut FakeSlurm, lines: &mut Lines| {
        watchdog.tick(t0 + Duration::from_secs(i), &mut gpus, &mut ByPid, slurm, lines)
    };
    for i in 0..5 {
        assert_eq!(tick(&mut watchdog, i, &mut slurm, &mut lines), Flow::Continue);
    }
    assert!(slurm.calls.is_empty(), "{:?}", slurm.calls);
    assert!(watchdog.entry().is_none());
    // The record, read at last: the job holds 1 shard of 1G.
    watchdog.quota = Some(ByteSize::from_bytes(G));
    watchdog.set_run(0);
    for i in 5..12 {
        tick(&mut watchdog, i, &mut slurm, &mut lines);
    }
    assert_eq!(slurm.calls, vec!["comment", "requeue"], "{:?}", lines.lines);
    assert!(
        lines
            .lines
            .iter()
            .any(|l| l.contains("GPU memory 5G over its 1G quota") && l.contains("requeued")),
        "{:?}",
        lines.lines
    );
    let record = record::parse(&slurm.admin_comment).unwrap().unwrap();
    assert_eq!(record.totals().events.get(record::EventKind::Requeued), 1);
}
