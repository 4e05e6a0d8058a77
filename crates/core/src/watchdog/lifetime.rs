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
use crate::controller::{ControlError, Controller, JobState};
use crate::size::ByteSize;

/// How often a watchdog that has no job cgroup to look at asks slurmctld whether its job still runs.
pub const CHECK_WITHOUT_CGROUP: Duration = Duration::from_secs(300);

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
pub fn is_this_run(job: &JobState, run: Option<u32>) -> bool {
    job.is_running() && run.is_none_or(|r| r == job.restarts)
}

/// How often a watchdog whose node's slurmd is gone (and has not come back) asks slurmctld whether
/// its run goes on, for the first [`SLURMD_GONE_FAST_ANSWERS`] answers. slurmctld notices a dead
/// slurmd only after `SlurmdTimeout` (300 s by default) and requeues or ends the job then; until
/// it has, the answer is "running", and the watchdog enforces as before. Once it has, the old
/// run's tasks here are orphans holding their GPU memory, so the answer is wanted soon.
pub const SLURMD_GONE_CHECK: Duration = Duration::from_secs(10);

/// How many "still running" answers are asked for at [`SLURMD_GONE_CHECK`]: 10 minutes, twice the
/// default `SlurmdTimeout`. After them, a node cut off this long is asked about every
/// [`SLURMD_GONE_SLOW_CHECK`].
pub const SLURMD_GONE_FAST_ANSWERS: u32 = 60;

/// See [`SLURMD_GONE_FAST_ANSWERS`].
pub const SLURMD_GONE_SLOW_CHECK: Duration = Duration::from_secs(60);

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

/// Each wait between samples is the interval times a factor drawn uniformly from
/// `[1 - INTERVAL_JITTER, 1 + INTERVAL_JITTER]`, so that a job cycling its memory cannot stay
/// phase-locked to the samples (review F7); ±10 % keeps the interval what the policy says.
pub const INTERVAL_JITTER: f64 = 0.1;

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
        let job = |state, restarts| JobState {
            state,
            restarts,
            requeueable: true,
            qos: String::new(),
            partition: String::new(),
            account: String::new(),
            priority: 0,
            node_count: 2,
        };
        use crate::slurm_text::JobState as S;
        assert!(is_this_run(&job(S::Running, 0), Some(0)));
        assert!(is_this_run(&job(S::Running, 3), None));
        // Requeued for the node failure: pending, then running again elsewhere.
        assert!(!is_this_run(&job(S::Pending, 1), Some(0)));
        assert!(!is_this_run(&job(S::Running, 1), Some(0)));
        assert!(!is_this_run(&job(S::NodeFail, 0), Some(0)));
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
