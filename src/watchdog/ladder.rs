//! The enforcement ladder, pure: below the warn threshold nothing; at or above it one warning;
//! over the quota for longer than the grace period, act once. Plain data in, a step out.

use std::time::{Duration, Instant};

use crate::config::{Action, Enforcement};

/// What one sample means for the job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    Nothing,
    /// Usage reached the warn threshold (once per episode above it).
    Warn,
    /// Usage fell back below the warn threshold after a warning.
    Recovered,
    /// Usage is over the quota; the grace period runs until `deadline`.
    Over {
        deadline: Instant,
    },
    /// Over the quota for longer than the grace period: act now (once).
    Act,
}

/// The ladder's memory between samples.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ladder {
    warned: bool,
    over_since: Option<Instant>,
    acted: bool,
}

impl Ladder {
    /// Feeds one sample: the highest usage over the job's GPUs against the quota per GPU.
    pub fn observe(
        &mut self,
        used: u64,
        quota: u64,
        now: Instant,
        warn_threshold: f64,
        grace: Duration,
    ) -> Step {
        if self.acted {
            return Step::Nothing;
        }
        let warn_at = (quota as f64 * warn_threshold) as u64;
        if used > quota {
            let since = *self.over_since.get_or_insert(now);
            let first_warning = !std::mem::replace(&mut self.warned, true);
            if now.duration_since(since) >= grace {
                self.acted = true;
                return Step::Act;
            }
            return if first_warning {
                Step::Warn
            } else {
                Step::Over {
                    deadline: since + grace,
                }
            };
        }
        self.over_since = None;
        if used >= warn_at {
            return if std::mem::replace(&mut self.warned, true) {
                Step::Nothing
            } else {
                Step::Warn
            };
        }
        if std::mem::replace(&mut self.warned, false) {
            return Step::Recovered;
        }
        Step::Nothing
    }

    /// Whether the job is over its quota right now (as of the last sample).
    pub fn is_over(&self) -> bool {
        self.over_since.is_some()
    }
}

/// What the job's Slurm record allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobFacts {
    /// A batch job with requeue allowed (`BatchFlag=1`, `Requeue=1`).
    pub requeueable: bool,
    /// Requeues we caused in earlier runs (from the job's record).
    pub requeues_by_us: u32,
}

/// The action for a job that stayed over its quota, and why when it is not the configured one.
pub fn choose_action(settings: &Enforcement, job: JobFacts) -> (Action, Option<String>) {
    let wanted = settings.action;
    if matches!(wanted, Action::WarnOnly | Action::Cancel) {
        return (wanted, None);
    }
    let (action, why) = if job.requeues_by_us >= settings.max_requeues {
        (
            settings.escalation,
            Some(format!(
                "requeued {} time(s) for GPU memory already (max_requeues = {}): escalating",
                job.requeues_by_us, settings.max_requeues
            )),
        )
    } else {
        (wanted, None)
    };
    if matches!(action, Action::Requeue | Action::RequeueHold) && !job.requeueable {
        let why = format!(
            "the job cannot be requeued (--no-requeue, or not a batch job): {}",
            settings.no_requeue_action
        );
        return (settings.no_requeue_action, Some(why));
    }
    (action, why)
}

#[cfg(test)]
mod tests {
    use super::*;

    const G: u64 = 1 << 30;

    #[test]
    fn the_ladder_warns_once_then_acts_after_grace() {
        let t0 = Instant::now();
        let s = |secs: u64| t0 + Duration::from_secs(secs);
        let grace = Duration::from_secs(10);
        let mut ladder = Ladder::default();
        let table: &[(u64, u64, Step)] = &[
            (0, 30 * G, Step::Nothing),
            (1, 37 * G, Step::Warn), // 92.5% of 40G
            (2, 38 * G, Step::Nothing),
            (3, 30 * G, Step::Recovered),
            (4, 50 * G, Step::Warn), // straight over: the warning comes first
            (5, 50 * G, Step::Over { deadline: s(14) }),
            (14, 50 * G, Step::Act),
            (15, 50 * G, Step::Nothing), // acted once, never again
        ];
        for &(at, used, expected) in table {
            assert_eq!(
                ladder.observe(used, 40 * G, s(at), 0.9, grace),
                expected,
                "t={at}s used={used}"
            );
        }
    }

    #[test]
    fn a_short_spike_is_forgiven() {
        let t0 = Instant::now();
        let grace = Duration::from_secs(10);
        let mut ladder = Ladder::default();
        assert_eq!(ladder.observe(50 * G, 40 * G, t0, 0.9, grace), Step::Warn);
        assert!(ladder.is_over());
        assert_eq!(
            ladder.observe(20 * G, 40 * G, t0 + Duration::from_secs(5), 0.9, grace),
            Step::Recovered
        );
        assert!(!ladder.is_over());
        // The grace period starts again.
        let t = t0 + Duration::from_secs(12);
        assert_eq!(ladder.observe(50 * G, 40 * G, t, 0.9, grace), Step::Warn);
        assert_eq!(
            ladder.observe(50 * G, 40 * G, t + Duration::from_secs(9), 0.9, grace),
            Step::Over { deadline: t + grace }
        );
    }

    #[test]
    fn zero_grace_acts_on_the_first_sample_over() {
        let mut ladder = Ladder::default();
        assert_eq!(
            ladder.observe(41 * G, 40 * G, Instant::now(), 0.9, Duration::ZERO),
            Step::Act
        );
    }

    #[test]
    fn exactly_the_quota_is_not_over() {
        let mut ladder = Ladder::default();
        assert_eq!(
            ladder.observe(40 * G, 40 * G, Instant::now(), 0.9, Duration::ZERO),
            Step::Warn
        );
        assert!(!ladder.is_over());
    }

    #[test]
    fn action_table() {
        let settings = Enforcement::default(); // requeue, max 3, escalation requeue-hold, no-requeue: cancel
        let facts = |requeueable, requeues_by_us| JobFacts {
            requeueable,
            requeues_by_us,
        };
        assert_eq!(choose_action(&settings, facts(true, 0)).0, Action::Requeue);
        assert_eq!(choose_action(&settings, facts(true, 2)).0, Action::Requeue);
        assert_eq!(choose_action(&settings, facts(true, 3)).0, Action::RequeueHold);
        assert!(choose_action(&settings, facts(true, 3))
            .1
            .unwrap()
            .contains("escalating"));
        assert_eq!(choose_action(&settings, facts(false, 0)).0, Action::Cancel);
        assert!(choose_action(&settings, facts(false, 0))
            .1
            .unwrap()
            .contains("cannot be requeued"));
        let warn_only = Enforcement {
            action: Action::WarnOnly,
            ..Enforcement::default()
        };
        assert_eq!(
            choose_action(&warn_only, facts(false, 9)),
            (Action::WarnOnly, None)
        );
        let escalate_to_warn = Enforcement {
            escalation: Action::WarnOnly,
            ..Enforcement::default()
        };
        assert_eq!(
            choose_action(&escalate_to_warn, facts(false, 5)).0,
            Action::WarnOnly
        );
    }
}
