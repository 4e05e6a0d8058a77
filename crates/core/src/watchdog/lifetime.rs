//! When the watchdog stops and how it paces itself: whether slurmctld still runs this run of the
//! job, how often to ask, the jittered wait between samples, and the last line it logs.
//!
//! The job epilog's signal ends the watch on a node; slurmctld is asked only where that may not be
//! enough (after an action, to see the job leave RUNNING; on a node without a job cgroup to look
//! at, should the signal never come; on a node whose slurmd has died, which runs no epilog). A
//! job's cost to slurmctld stays a handful of requests.

use std::collections::BTreeMap;
use std::time::Duration;

use super::GpuUsage;
use crate::controller::{ControlError, Controller, SlurmJob};
use crate::size::ByteSize;

/// How often a watchdog that has no job cgroup to look at asks slurmctld whether its job still runs.
pub(crate) const CHECK_WITHOUT_CGROUP: Duration = Duration::from_secs(300);

/// Whether slurmctld's view says this run of the job (`run`: its restart count, when known) is
/// still going. A job slurmctld says is gone is not; `Err`: slurmctld gave no usable answer (or
/// refused), ask again later.
pub fn still_running(control: &mut dyn Controller, run: Option<u32>) -> Result<bool, ControlError> {
    let job = match control.job() {
        Ok(job) => job,
        Err(e) if e.job_gone() => return Ok(false),
        Err(e) => return Err(e),
    };
    Ok(is_this_run(&job, run))
}

/// Whether `job`, as slurmctld has it now, is still the run a watchdog watches (`run`: its restart
/// count, when known): running, and not restarted since. A job requeued for a node failure is
/// pending, or running again with one more restart, possibly on other nodes; what is left of the
/// old run on a node whose slurmd died is no longer the job's to act for.
pub fn is_this_run(job: &SlurmJob, run: Option<u32>) -> bool {
    job.is_running() && run.is_none_or(|r| r == job.restarts)
}

/// What a watchdog whose node's slurmd is gone makes of slurmctld's answers about its run
/// ([`slurmd_gone_run`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlurmdGoneRun {
    /// This run goes on, or slurmctld gave no answer: watch on, ask again later.
    GoesOn,
    /// The run is over, but not yet why: the job is still COMPLETING (its NODE_FAIL shows once it
    /// is done), or this node's state could not be read. Ask again, [`UNSETTLED_ASKS`] times at
    /// most.
    Unsettled,
    /// The run is over: the watchdog stops and ends what the run left here. `node_failure`:
    /// slurmctld ended it NODE_FAIL or requeued it, and has this node DOWN, so it ended for this
    /// node's failure: the node's record counts a `node_fail`, and self-healing leaves it alone.
    /// Otherwise it ended as any run ends (the slurmd out of sight may run on, review K6): no
    /// `node_fail` is written and self-healing decides as always.
    Over { node_failure: bool },
}

/// How many [`SlurmdGoneRun::Unsettled`] answers are waited out (one ask each,
/// [`SLURMD_GONE_CHECK`] apart) before the run is taken as over without a node failure.
pub(crate) const UNSETTLED_ASKS: u32 = 6;

/// The rule, over slurmctld's answers: `job` (its record, or why there is none), `run` (the
/// restart count of the run watched, when known), `node_down` (whether slurmctld has this node
/// DOWN: asked only once `job` says the run is over; `None`: not asked or no answer) and
/// `unsettled` (how many [`SlurmdGoneRun::Unsettled`] answers came before). A node failure is
/// never inferred from this node's side alone (a slurmd not found, a job gone): only slurmctld's
/// NODE_FAIL or requeue with this node DOWN says it.
pub fn slurmd_gone_run(
    job: Result<&SlurmJob, &ControlError>,
    run: Option<u32>,
    node_down: Option<bool>,
    unsettled: u32,
) -> SlurmdGoneRun {
    use crate::slurm_text::JobState as S;
    let job = match job {
        Ok(job) if is_this_run(job, run) => return SlurmdGoneRun::GoesOn,
        Ok(job) => job,
        // slurmctld no longer knows the job: over, and nothing says why.
        Err(e) if e.job_gone() => return SlurmdGoneRun::Over { node_failure: false },
        Err(_) => return SlurmdGoneRun::GoesOn,
    };
    let requeued = match run {
        Some(run) => job.restarts > run,
        None => matches!(
            job.state,
            S::Pending | S::Requeued | S::RequeueFed | S::RequeueHold
        ),
    };
    let ended_for_a_node = requeued || job.state == S::NodeFail;
    let wait = || {
        if unsettled < UNSETTLED_ASKS {
            SlurmdGoneRun::Unsettled
        } else {
            SlurmdGoneRun::Over { node_failure: false }
        }
    };
    match node_down {
        Some(true) if ended_for_a_node => SlurmdGoneRun::Over { node_failure: true },
        Some(true) if job.state == S::Completing => wait(),
        Some(_) => SlurmdGoneRun::Over { node_failure: false },
        None => wait(),
    }
}

/// How often a watchdog whose node's slurmd is gone (and has not come back) asks slurmctld whether
/// its run goes on, for the first [`SLURMD_GONE_FAST_ANSWERS`] answers. slurmctld notices a dead
/// slurmd only after `SlurmdTimeout` (300 s by default) and requeues or ends the job then; until
/// it has, the answer is "running", and the watchdog enforces as before. Once it has, the old
/// run's tasks here are orphans holding their GPU memory, so the answer is wanted soon.
pub(crate) const SLURMD_GONE_CHECK: Duration = Duration::from_secs(10);

/// How many "still running" answers are asked for at [`SLURMD_GONE_CHECK`]: 10 minutes, twice the
/// default `SlurmdTimeout`. After them, a node cut off this long is asked about every
/// [`SLURMD_GONE_SLOW_CHECK`].
pub(crate) const SLURMD_GONE_FAST_ANSWERS: u32 = 60;

/// See [`SLURMD_GONE_FAST_ANSWERS`].
pub(crate) const SLURMD_GONE_SLOW_CHECK: Duration = Duration::from_secs(60);

/// How often a watchdog whose node's slurmd is gone asks slurmctld whether its run goes on, after
/// slurmctld has said `answered` times that it does. (A slurmd restarted on purpose is found again
/// before each ask, and ends this: `gmq_node::slurmd::find`.)
pub fn slurmd_gone_check_every(answered: u32) -> Duration {
    if answered < SLURMD_GONE_FAST_ANSWERS {
        SLURMD_GONE_CHECK
    } else {
        SLURMD_GONE_SLOW_CHECK
    }
}

/// How often to ask slurmctld whether the job still runs; `None`: never, the epilog's signal and
/// the job's cgroup say when the job is done here. `acted`: the watchdog requeued, held or
/// cancelled the job, and waits to see it leave RUNNING. `watches_cgroup`: it found the job's
/// cgroup on this node. `slurmd_gone`: the node's slurmd that ran the job prolog has died and none
/// runs here now (no epilog will come, and the job's tasks here outlive a requeue), with how many
/// times slurmctld has said since that the run goes on ([`slurmd_gone_check_every`]).
pub fn slurmctld_check_every(
    acted: bool,
    watches_cgroup: bool,
    slurmd_gone: Option<u32>,
    interval: Duration,
) -> Option<Duration> {
    let without_cgroup = (!watches_cgroup).then_some(CHECK_WITHOUT_CGROUP);
    let without_slurmd = slurmd_gone.map(slurmd_gone_check_every);
    if acted {
        Some(interval)
    } else {
        match (without_cgroup, without_slurmd) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// How long a watchdog that could not read its job's record from slurmctld at start waits before
/// it asks again, after `failures` failed reads (review K7): [`RECORD_RETRY_FIRST`], doubling,
/// then every [`RECORD_RETRY_MOST`]. Every read is a request to slurmctld, whose slowness is the
/// likely cause: a handful over the first quarter hour, then a few an hour, until one succeeds.
pub fn record_retry_after(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(8);
    (RECORD_RETRY_FIRST * (1u32 << doublings)).min(RECORD_RETRY_MOST)
}

/// See [`record_retry_after`].
pub(crate) const RECORD_RETRY_FIRST: Duration = Duration::from_secs(30);

/// See [`record_retry_after`].
pub(crate) const RECORD_RETRY_MOST: Duration = Duration::from_secs(600);

/// Each wait between samples is the interval times a factor drawn uniformly from
/// `[1 - INTERVAL_JITTER, 1 + INTERVAL_JITTER]`, so that a job cycling its memory cannot stay
/// phase-locked to the samples (review F7); ±10 % keeps the interval what the policy says.
pub(crate) const INTERVAL_JITTER: f64 = 0.1;

/// xorshift64*: cheap, and enough to spread sample times. Nothing secret depends on it; its state
/// lives in root's process, where the job cannot read it.
#[derive(Debug, Clone)]
pub struct Jitter {
    state: u64,
}

impl Jitter {
    /// From any seed (the daemon's: the clock and its pid, so that watchdogs started in the same
    /// instant still differ).
    pub fn from_seed(seed: u64) -> Jitter {
        // xorshift stays at 0 once there.
        Jitter {
            state: (seed ^ 0x9E37_79B9_7F4A_7C15).max(1),
        }
    }

    /// Uniform in [0, 1).
    fn next_unit(&mut self) -> f64 {
        let mut x = self.state;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.state = x;
        (x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64
    }

    /// The next wait: `interval` within ±[`INTERVAL_JITTER`].
    pub fn around(&mut self, interval: Duration) -> Duration {
        jittered(interval, self.next_unit())
    }
}

/// `interval` scaled by `1 ± INTERVAL_JITTER`; `unit`, in [0, 1], chooses where in that range.
fn jittered(interval: Duration, unit: f64) -> Duration {
    let factor = 1.0 + INTERVAL_JITTER * (2.0 * unit.clamp(0.0, 1.0) - 1.0);
    Duration::try_from_secs_f64(interval.as_secs_f64() * factor).unwrap_or(interval)
}

/// The watchdog's last line: each GPU's peak.
pub fn stopping_line(usage: &BTreeMap<u32, GpuUsage>) -> String {
    let peaks: Vec<String> = usage
        .iter()
        .map(|(i, u)| format!("GPU {i} peak {}", ByteSize::from_bytes(u.peak).floor_mib()))
        .collect();
    if peaks.is_empty() {
        "stopping: no GPU memory seen".into()
    } else {
        format!("stopping: {}", peaks.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A two-node job in `state`, after `restarts` requeues.
    fn job(state: crate::slurm_text::JobState, restarts: u32) -> SlurmJob {
        SlurmJob {
            state,
            restarts,
            requeueable: true,
            qos: String::new(),
            partition: String::new(),
            account: String::new(),
            priority: 0,
            node_count: 2,
        }
    }

    #[test]
    fn slurmctld_is_asked_only_where_the_node_cannot_tell() {
        let interval = Duration::from_secs(2);
        assert_eq!(slurmctld_check_every(false, true, None, interval), None);
        assert_eq!(
            slurmctld_check_every(false, false, None, interval),
            Some(CHECK_WITHOUT_CGROUP)
        );
        assert_eq!(slurmctld_check_every(true, true, None, interval), Some(interval));
        assert_eq!(slurmctld_check_every(true, false, None, interval), Some(interval));
        // slurmd gone: asked every 10 s, after 10 minutes every minute.
        assert_eq!(
            slurmctld_check_every(false, true, Some(0), interval),
            Some(SLURMD_GONE_CHECK)
        );
        assert_eq!(
            slurmctld_check_every(false, false, Some(0), interval),
            Some(SLURMD_GONE_CHECK)
        );
        assert_eq!(
            slurmctld_check_every(false, true, Some(60), interval),
            Some(SLURMD_GONE_SLOW_CHECK)
        );
        assert_eq!(
            slurmctld_check_every(true, true, Some(0), interval),
            Some(interval)
        );
    }

    #[test]
    fn without_slurmd_slurmctld_is_asked_every_ten_seconds_then_every_minute() {
        assert_eq!(slurmd_gone_check_every(0), SLURMD_GONE_CHECK);
        assert_eq!(slurmd_gone_check_every(59), SLURMD_GONE_CHECK);
        assert_eq!(slurmd_gone_check_every(60), SLURMD_GONE_SLOW_CHECK);
        assert_eq!(slurmd_gone_check_every(u32::MAX), SLURMD_GONE_SLOW_CHECK);
        // The fast asks cover twice the default SlurmdTimeout (300 s).
        assert!(SLURMD_GONE_CHECK * SLURMD_GONE_FAST_ANSWERS >= Duration::from_secs(600));
    }

    #[test]
    fn a_requeued_or_restarted_job_is_not_the_run_watched() {
        use crate::slurm_text::JobState as S;
        assert!(is_this_run(&job(S::Running, 0), Some(0)));
        assert!(is_this_run(&job(S::Running, 3), None));
        // Requeued for the node failure: pending, then running again elsewhere.
        assert!(!is_this_run(&job(S::Pending, 1), Some(0)));
        assert!(!is_this_run(&job(S::Running, 1), Some(0)));
        assert!(!is_this_run(&job(S::NodeFail, 0), Some(0)));
    }

    #[test]
    fn a_node_failure_is_slurmctlds_word_never_the_nodes_guess() {
        use crate::slurm_text::JobState as S;
        let gone = ControlError::JobGone("invalid job id".into());
        let cut_off = ControlError::Unavailable("slurmctld not responding".into());
        let over = |node_failure| SlurmdGoneRun::Over { node_failure };
        use SlurmdGoneRun::{GoesOn, Unsettled};
        // (what, job, run, node down, earlier unsettled answers, verdict)
        type Case = (
            &'static str,
            Result<SlurmJob, ControlError>,
            Option<u32>,
            Option<bool>,
            u32,
            SlurmdGoneRun,
        );
        let cases: Vec<Case> = vec![
            ("still this run", Ok(job(S::Running, 0)), Some(0), None, 0, GoesOn),
            ("no answer", Err(cut_off.clone()), Some(0), None, 0, GoesOn),
            // slurmctld's word: requeued or NODE_FAIL, with this node down.
            (
                "requeued, node down",
                Ok(job(S::Pending, 1)),
                Some(0),
                Some(true),
                0,
                over(true),
            ),
            (
                "requeued, completing, node down",
                Ok(job(S::Completing, 1)),
                Some(0),
                Some(true),
                0,
                over(true),
            ),
            (
                "running again elsewhere, node down",
                Ok(job(S::Running, 1)),
                Some(0),
                Some(true),
                0,
                over(true),
            ),
            (
                "NODE_FAIL, node down",
                Ok(job(S::NodeFail, 0)),
                Some(0),
                Some(true),
                0,
                over(true),
            ),
            (
                "requeued, run unknown, node down",
                Ok(job(S::Pending, 1)),
                None,
                Some(true),
                0,
                over(true),
            ),
            // K6: slurmd is fine (the watchdog lost sight of it), the job ended between
            // slurmctld and the epilog: an ordinary end, healed as always.
            (
                "completed, node up",
                Ok(job(S::Completed, 0)),
                Some(0),
                Some(false),
                0,
                over(false),
            ),
            (
                "failed, node up",
                Ok(job(S::Failed, 0)),
                Some(0),
                Some(false),
                0,
                over(false),
            ),
            (
                "requeued by an admin, node up",
                Ok(job(S::Pending, 1)),
                Some(0),
                Some(false),
                0,
                over(false),
            ),
            (
                "another node's NODE_FAIL, node up",
                Ok(job(S::NodeFail, 0)),
                Some(0),
                Some(false),
                0,
                over(false),
            ),
            ("gone from slurmctld", Err(gone), Some(0), None, 0, over(false)),
            // Ended by itself before this node went down.
            (
                "failed, node down",
                Ok(job(S::Failed, 0)),
                Some(0),
                Some(true),
                0,
                over(false),
            ),
            // Not settled yet: asked again, then taken as an ordinary end.
            (
                "completing, node down",
                Ok(job(S::Completing, 0)),
                Some(0),
                Some(true),
                0,
                Unsettled,
            ),
            (
                "completing, node down, long",
                Ok(job(S::Completing, 0)),
                Some(0),
                Some(true),
                UNSETTLED_ASKS,
                over(false),
            ),
            (
                "node unreadable",
                Ok(job(S::Pending, 1)),
                Some(0),
                None,
                3,
                Unsettled,
            ),
            (
                "node unreadable, long",
                Ok(job(S::Pending, 1)),
                Some(0),
                None,
                UNSETTLED_ASKS,
                over(false),
            ),
        ];
        for (what, answer, run, node_down, unsettled, want) in cases {
            assert_eq!(
                slurmd_gone_run(answer.as_ref(), run, node_down, unsettled),
                want,
                "{what}"
            );
        }
    }

    #[test]
    fn a_failed_record_read_is_asked_again_rarely_and_ever_more_rarely() {
        let waits: Vec<u64> = (1..=8).map(|n| record_retry_after(n).as_secs()).collect();
        assert_eq!(waits, [30, 60, 120, 240, 480, 600, 600, 600]);
        assert_eq!(record_retry_after(0), RECORD_RETRY_FIRST);
        assert_eq!(record_retry_after(u32::MAX), RECORD_RETRY_MOST);
        // The first hour: ten requests at most.
        let mut at = Duration::ZERO;
        let mut asks = 0;
        while at < Duration::from_secs(3600) {
            asks += 1;
            at += record_retry_after(asks);
        }
        assert_eq!(asks, 10);
    }

    #[test]
    fn the_jitter_stays_within_ten_percent_of_the_interval() {
        let interval = Duration::from_secs(2);
        assert_eq!(jittered(interval, 0.0), Duration::from_millis(1800));
        assert_eq!(jittered(interval, 0.5), interval);
        assert_eq!(jittered(interval, 1.0), Duration::from_millis(2200));
        assert_eq!(jittered(interval, f64::NAN), interval);
        for seed in [0, 1, 0x9E37_79B9_7F4A_7C15, u64::MAX] {
            let mut jitter = Jitter::from_seed(seed);
            let waits: Vec<Duration> = (0..10_000).map(|_| jitter.around(interval)).collect();
            assert!(waits
                .iter()
                .all(|w| (Duration::from_millis(1800)..=Duration::from_millis(2200)).contains(w)));
            // Spread over the whole range, not stuck: every tenth of it is hit, the mean is the
            // interval.
            let mut tenths = [0u32; 10];
            for w in &waits {
                let tenth = ((w.as_secs_f64() - 1.8) / 0.04) as usize;
                tenths[tenth.min(9)] += 1;
            }
            assert!(tenths.iter().all(|&n| n > 800), "seed {seed}: {tenths:?}");
            let mean = waits.iter().sum::<Duration>() / waits.len() as u32;
            assert!((mean.as_secs_f64() - 2.0).abs() < 0.01, "seed {seed}: {mean:?}");
        }
    }

    #[test]
    fn the_last_line_names_each_gpus_peak() {
        let mut usage = BTreeMap::new();
        assert_eq!(stopping_line(&usage), "stopping: no GPU memory seen");
        for (gpu, peak) in [(3, 12 << 30), (1, (1 << 30) + 5)] {
            usage.insert(
                gpu,
                GpuUsage {
                    peak,
                    ..GpuUsage::default()
                },
            );
        }
        assert_eq!(stopping_line(&usage), "stopping: GPU 1 peak 1G, GPU 3 peak 12G");
    }
}
