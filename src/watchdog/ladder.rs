//! The enforcement ladder, pure: below the warn threshold nothing; at or above it a warning; over
//! the quota for most of the grace period, act once. Plain data in, a step out.
//!
//! Over the quota is judged over a window, not on consecutive samples: a job that dips under its
//! quota for one sample in every few must not restart the grace period each time (review F7). An
//! *episode* begins with the first sample over the quota and ends only once the job stayed at or
//! under it for a full `grace`. Within an episode the ladder acts, on a sample over the quota, when
//!
//! - the episode's first sample over the quota is at least `grace` old, and
//! - over the trailing window `[now - grace, now)` the job was over the quota for at least
//!   `grace_over_share` of the time.
//!
//! The share is time-weighted, by sample spacing: each sample's reading holds from that sample until
//! the next one (the current sample begins a stretch, it covers no time yet). Weighting by time, not
//! by sample count, keeps the share right when the spacing varies (the daemon jitters its interval)
//! and across a gap in sampling. A spike shorter than `grace` is always forgiven: the sample that
//! would act must itself be over the quota and at least `grace` after the spike's first sample.
//!
//! Warn and recover have hysteresis (review F13): after a warning the job has recovered only once
//! its usage falls below [`RECOVER_SHARE_OF_WARN`] of the warn level, and the log lines for either
//! are rate-limited per job (see [`CrossingLines`]).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::config::{Action, Enforcement};

/// After a warning, usage must fall below this share of the warn level to count as recovered: a
/// job hovering at the threshold stays warned instead of crossing it every sample.
pub const RECOVER_SHARE_OF_WARN: f64 = 0.9;

/// After the first warn (or recover) line of a job, at most one more per this, carrying the count
/// of crossings not logged since.
pub const CROSSING_LINE_EVERY: Duration = Duration::from_secs(5 * 60);

/// What one sample means for the job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    Nothing,
    /// Usage reached the warn threshold (once until it recovers).
    Warn,
    /// Usage fell below the recover level after a warning.
    Recovered,
    /// Usage is over the quota; the ladder acts at `deadline` at the earliest (when the job stays
    /// over for enough of the window).
    Over {
        deadline: Instant,
    },
    /// Over the quota for enough of the grace period: act now (once).
    Act,
}

/// A stretch of samples on the same side of the quota: from `from` until the next stretch begins.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stretch {
    from: Instant,
    over: bool,
}

/// From the first sample over the quota until the job stayed at or under it for a full grace.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Episode {
    first_over: Instant,
    /// Oldest first, never empty; only what the trailing window needs is kept (the stretch the
    /// window starts in and the later ones), so memory stays bounded by the samples in one grace.
    stretches: VecDeque<Stretch>,
}

impl Episode {
    fn new(now: Instant) -> Episode {
        Episode {
            first_over: now,
            stretches: VecDeque::from([Stretch {
                from: now,
                over: true,
            }]),
        }
    }

    fn record(&mut self, now: Instant, over: bool, grace: Duration) {
        if self.stretches.back().map(|s| s.over) != Some(over) {
            self.stretches.push_back(Stretch { from: now, over });
        }
        // A stretch that ended before the window began no longer counts.
        if let Some(window_start) = now.checked_sub(grace) {
            while self
                .stretches
                .get(1)
                .is_some_and(|next| next.from <= window_start)
            {
                self.stretches.pop_front();
            }
        }
    }

    fn is_over(&self) -> bool {
        self.stretches.back().is_some_and(|s| s.over)
    }

    /// How long the job has been at or under the quota, as of `now` (zero while over).
    fn under_for(&self, now: Instant) -> Duration {
        match self.stretches.back() {
            Some(last) if !last.over => now.saturating_duration_since(last.from),
            _ => Duration::ZERO,
        }
    }
}

/// How long, within `[window_start, now)`, the stretches were over the quota. Each stretch lasts
/// until the next one begins, the last one until `now`.
fn time_over(stretches: &VecDeque<Stretch>, window_start: Instant, now: Instant) -> Duration {
    let ends = stretches.iter().skip(1).map(|s| s.from).chain([now]);
    stretches
        .iter()
        .zip(ends)
        .filter(|(stretch, _)| stretch.over)
        .map(|(stretch, end)| end.saturating_duration_since(stretch.from.max(window_start)))
        .sum()
}

/// Whether an episode calls for action at `now`: old enough, and over for enough of the window.
fn episode_is_due(episode: &Episode, now: Instant, grace: Duration, grace_over_share: f64) -> bool {
    if now.saturating_duration_since(episode.first_over) < grace {
        return false;
    }
    if grace.is_zero() {
        return true;
    }
    // The episode is at least `grace` old, so the window starts within it.
    let window_start = now.checked_sub(grace).unwrap_or(episode.first_over);
    let over = time_over(&episode.stretches, window_start, now);
    over.as_secs_f64() >= grace_over_share * grace.as_secs_f64()
}

/// Which log line a crossing of the warn threshold asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Crossing {
    Warn,
    Recovered,
}

/// The rate limit of one kind of line: when it was last logged, and how many were not since.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct LineBudget {
    last_logged: Option<Instant>,
    not_logged: u32,
}

impl LineBudget {
    fn admit(&mut self, now: Instant, every: Duration) -> Option<u32> {
        match self.last_logged {
            Some(last) if now.saturating_duration_since(last) < every => {
                self.not_logged = self.not_logged.saturating_add(1);
                None
            }
            _ => {
                self.last_logged = Some(now);
                Some(std::mem::take(&mut self.not_logged))
            }
        }
    }
}

/// The per-job rate limit of the warn and recover log lines: a job flapping around its warn
/// threshold must not write two syslog lines per cycle (review F13). The first line of each kind
/// is logged; after it at most one per [`CROSSING_LINE_EVERY`], saying how many were not logged.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CrossingLines {
    warn: LineBudget,
    recovered: LineBudget,
}

impl CrossingLines {
    /// `Some(crossings not logged since the last such line)` when this one is to be logged.
    pub fn admit(&mut self, crossing: Crossing, now: Instant) -> Option<u32> {
        let budget = match crossing {
            Crossing::Warn => &mut self.warn,
            Crossing::Recovered => &mut self.recovered,
        };
        budget.admit(now, CROSSING_LINE_EVERY)
    }
}

/// What to add to a logged crossing line about the ones not logged before it.
pub fn not_logged_note(not_logged: u32) -> String {
    match not_logged {
        0 => String::new(),
        n => format!(
            " ({n} more time(s) since the last such line, not logged: at most one per {} min)",
            CROSSING_LINE_EVERY.as_secs() / 60
        ),
    }
}

/// The ladder's memory between samples.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ladder {
    warned: bool,
    episode: Option<Episode>,
    acted: bool,
    /// Kept across `retry_later`: a retry is no reason to log more lines.
    pub lines: CrossingLines,
}

impl Ladder {
    /// Feeds one sample: the highest usage over the job's GPUs against the quota per GPU.
    pub fn observe(&mut self, used: u64, quota: u64, now: Instant, settings: &Enforcement) -> Step {
        if self.acted {
            return Step::Nothing;
        }
        let grace = settings.grace;
        let over = used > quota;
        let ended = |e: &Episode| !e.is_over() && e.under_for(now) >= grace;
        // Checked before this sample too: after a gap in sampling, a job that was last seen under
        // its quota a grace period ago starts a new episode even when this sample is over.
        if self.episode.as_ref().is_some_and(ended) {
            self.episode = None;
        }
        match &mut self.episode {
            Some(episode) => episode.record(now, over, grace),
            None if over => self.episode = Some(Episode::new(now)),
            None => {}
        }
        if self.episode.as_ref().is_some_and(ended) {
            self.episode = None;
        }
        let crossing = self.warn_or_recover(used, quota, settings.warn_threshold);
        let Some(episode) = self.episode.as_ref().filter(|_| over) else {
            return crossing;
        };
        if episode_is_due(episode, now, grace, settings.grace_over_share) {
            self.acted = true;
            return Step::Act;
        }
        match crossing {
            Step::Warn => Step::Warn,
            _ => Step::Over {
                deadline: episode.first_over + grace,
            },
        }
    }

    /// The warn threshold with hysteresis: `Warn` on reaching it, `Recovered` only below the
    /// recover level, `Nothing` in between.
    fn warn_or_recover(&mut self, used: u64, quota: u64, warn_threshold: f64) -> Step {
        let warn_at = (quota as f64 * warn_threshold) as u64;
        let recover_below = (warn_at as f64 * RECOVER_SHARE_OF_WARN) as u64;
        if used >= warn_at {
            return if std::mem::replace(&mut self.warned, true) {
                Step::Nothing
            } else {
                Step::Warn
            };
        }
        if used < recover_below && std::mem::replace(&mut self.warned, false) {
            return Step::Recovered;
        }
        Step::Nothing
    }

    /// `Act` came, but the fresh sample that confirms it was not over the quota: do not act now,
    /// and keep the episode, so the next sample over the quota (with the window still over)
    /// acts. A reset here would hand a job that dips under its quota a new grace period.
    pub fn unconfirmed(&mut self) {
        self.acted = false;
    }

    /// `Act` came but could not be carried out (slurmctld unreachable, record not writable):
    /// start the episode afresh, so the next attempt comes a grace period later, as it always
    /// did. The warning stands: a retry is not a new crossing.
    pub fn retry_later(&mut self) {
        self.acted = false;
        self.episode = None;
    }

    /// Whether the job is over its quota right now (as of the last sample).
    pub fn is_over(&self) -> bool {
        self.episode.as_ref().is_some_and(Episode::is_over)
    }

    /// Whether the job is warned: at or above the warn level, or not yet below the recover level.
    pub fn is_warned(&self) -> bool {
        self.warned
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
