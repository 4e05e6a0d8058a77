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
pub(crate) const RECOVER_SHARE_OF_WARN: f64 = 0.9;

/// After the first warn (or recover) line of a job, at most one more per this, carrying the count
/// of crossings not logged since.
const CROSSING_LINE_EVERY: Duration = Duration::from_secs(5 * 60);

/// What one sample means for the job: where it stands on the ladder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LadderStep {
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
pub(crate) enum Crossing {
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
pub(crate) struct CrossingLines {
    warn: LineBudget,
    recovered: LineBudget,
}

impl CrossingLines {
    /// `Some(crossings not logged since the last such line)` when this one is to be logged.
    pub(crate) fn admit(&mut self, crossing: Crossing, now: Instant) -> Option<u32> {
        let budget = match crossing {
            Crossing::Warn => &mut self.warn,
            Crossing::Recovered => &mut self.recovered,
        };
        budget.admit(now, CROSSING_LINE_EVERY)
    }
}

/// What to add to a logged crossing line about the ones not logged before it.
pub(crate) fn not_logged_note(not_logged: u32) -> String {
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
pub(crate) struct Ladder {
    warned: bool,
    episode: Option<Episode>,
    acted: bool,
    /// Kept across `retry_later`: a retry is no reason to log more lines.
    pub(crate) lines: CrossingLines,
}

impl Ladder {
    /// Feeds one sample: the highest usage over the job's GPUs against the quota per GPU.
    pub(crate) fn observe(
        &mut self,
        used: u64,
        quota: u64,
        now: Instant,
        settings: &Enforcement,
    ) -> LadderStep {
        if self.acted {
            return LadderStep::Nothing;
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
            return LadderStep::Act;
        }
        match crossing {
            LadderStep::Warn => LadderStep::Warn,
            _ => LadderStep::Over {
                deadline: episode.first_over + grace,
            },
        }
    }

    /// The warn threshold with hysteresis: `Warn` on reaching it, `Recovered` only below the
    /// recover level, `Nothing` in between.
    fn warn_or_recover(&mut self, used: u64, quota: u64, warn_threshold: f64) -> LadderStep {
        let warn_at = (quota as f64 * warn_threshold) as u64;
        let recover_below = (warn_at as f64 * RECOVER_SHARE_OF_WARN) as u64;
        if used >= warn_at {
            return if std::mem::replace(&mut self.warned, true) {
                LadderStep::Nothing
            } else {
                LadderStep::Warn
            };
        }
        if used < recover_below && std::mem::replace(&mut self.warned, false) {
            return LadderStep::Recovered;
        }
        LadderStep::Nothing
    }

    /// `Act` came, but the fresh sample that confirms it was not over the quota: do not act now,
    /// and keep the episode, so the next sample over the quota (with the window still over)
    /// acts. A reset here would hand a job that dips under its quota a new grace period.
    pub(crate) fn unconfirmed(&mut self) {
        self.acted = false;
    }

    /// `Act` came but could not be carried out (slurmctld unreachable, record not writable):
    /// start the episode afresh, so the next attempt comes a grace period later, as it always
    /// did. The warning stands: a retry is not a new crossing.
    pub(crate) fn retry_later(&mut self) {
        self.acted = false;
        self.episode = None;
    }

    /// Whether the job is over its quota right now (as of the last sample).
    pub(crate) fn is_over(&self) -> bool {
        self.episode.as_ref().is_some_and(Episode::is_over)
    }

    /// Whether the job is warned: at or above the warn level, or not yet below the recover level.
    pub(crate) fn is_warned(&self) -> bool {
        self.warned
    }
}

/// What the job's Slurm record allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ActFacts {
    /// A batch job with requeue allowed (`BatchFlag=1`, `Requeue=1`).
    pub(crate) requeueable: bool,
    /// Requeues we caused in earlier runs (from the job's record).
    pub(crate) requeues_by_us: u32,
}

/// The action for a job that stayed over its quota, and why when it is not the configured one.
pub(crate) fn choose_action(settings: &Enforcement, job: ActFacts) -> (Action, Option<String>) {
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
    const QUOTA: u64 = 40 * G;

    fn settings(grace: Duration, grace_over_share: f64) -> Enforcement {
        Enforcement {
            grace,
            grace_over_share,
            ..Enforcement::default()
        }
    }

    fn secs(s: f64) -> Duration {
        Duration::from_secs_f64(s)
    }

    #[test]
    fn the_ladder_warns_once_then_acts_after_grace() {
        let t0 = Instant::now();
        let s = |secs: u64| t0 + Duration::from_secs(secs);
        let settings = settings(Duration::from_secs(10), 0.5);
        let mut ladder = Ladder::default();
        let table: &[(u64, u64, LadderStep)] = &[
            (0, 30 * G, LadderStep::Nothing),
            (1, 37 * G, LadderStep::Warn), // 92.5% of 40G
            (2, 38 * G, LadderStep::Nothing),
            (3, 30 * G, LadderStep::Recovered),
            (4, 50 * G, LadderStep::Warn), // straight over: the warning comes first
            (5, 50 * G, LadderStep::Over { deadline: s(14) }),
            (14, 50 * G, LadderStep::Act),
            (15, 50 * G, LadderStep::Nothing), // acted once, never again
        ];
        for &(at, used, expected) in table {
            assert_eq!(
                ladder.observe(used, QUOTA, s(at), &settings),
                expected,
                "t={at}s used={used}"
            );
        }
    }

    /// Feeds `(seconds after t0, bytes)` samples; the steps the ladder answered.
    fn feed(
        ladder: &mut Ladder,
        t0: Instant,
        settings: &Enforcement,
        samples: &[(f64, u64)],
    ) -> Vec<LadderStep> {
        samples
            .iter()
            .map(|&(at, used)| ladder.observe(used, QUOTA, t0 + secs(at), settings))
            .collect()
    }

    #[test]
    fn a_short_spike_is_forgiven() {
        let t0 = Instant::now();
        let settings = settings(Duration::from_secs(10), 0.5);
        let mut ladder = Ladder::default();
        let steps = feed(
            &mut ladder,
            t0,
            &settings,
            &[(0.0, 50 * G), (5.0, 50 * G), (9.0, 20 * G)],
        );
        assert_eq!(steps[2], LadderStep::Recovered);
        assert!(!ladder.is_over());
        // However long it stays under: the sample that would act has to be over the quota.
        for at in 10..40 {
            assert_eq!(
                ladder.observe(20 * G, QUOTA, t0 + Duration::from_secs(at), &settings),
                LadderStep::Nothing
            );
        }
    }

    #[test]
    fn one_sample_under_the_quota_restarts_nothing() {
        // F7: 50G for ten seconds but for one sample at 30G; before, that sample gave the job a new
        // grace period.
        let t0 = Instant::now();
        let settings = settings(Duration::from_secs(10), 0.5);
        let mut ladder = Ladder::default();
        let samples: Vec<(f64, u64)> = (0..=10)
            .map(|s| (s as f64, if s == 5 { 30 * G } else { 50 * G }))
            .collect();
        let steps = feed(&mut ladder, t0, &settings, &samples);
        assert_eq!(steps[5], LadderStep::Recovered);
        assert_eq!(steps[6], LadderStep::Warn);
        assert_eq!(
            steps[7],
            LadderStep::Over {
                deadline: t0 + Duration::from_secs(10)
            }
        );
        assert_eq!(steps[10], LadderStep::Act); // 9 s of the last 10 over
    }

    #[test]
    fn an_episode_ends_only_after_a_full_grace_under() {
        let settings = settings(Duration::from_secs(10), 0.5);
        // Over for 0..=9 s, under from 10 s, over again at `back`: the deadline tells whether the
        // episode of 0 s still runs (deadline 10 s) or a new one began at `back`.
        let deadline_after_return = |back: u64| {
            let t0 = Instant::now();
            let mut ladder = Ladder::default();
            for s in 0..back {
                // 35G: under the quota, still warned (above the recover level), so no new warning.
                let used = if s < 10 { 50 * G } else { 35 * G };
                ladder.observe(used, QUOTA, t0 + Duration::from_secs(s), &settings);
            }
            match ladder.observe(50 * G, QUOTA, t0 + Duration::from_secs(back), &settings) {
                LadderStep::Over { deadline } => Some(deadline - t0),
                _ => None,
            }
        };
        // Under for 9 s (from the sample at 10 s to the one at 19 s): the same episode.
        assert_eq!(deadline_after_return(19), Some(Duration::from_secs(10)));
        // Under for a full 10 s (10 s to 20 s): a new episode, a new grace period.
        assert_eq!(deadline_after_return(20), Some(Duration::from_secs(30)));
    }

    #[test]
    fn an_episode_also_ends_across_a_gap_in_sampling() {
        // Last seen under at 10 s, next sample (over) at 30 s: a new episode, not one that is old
        // enough to act on at once.
        let t0 = Instant::now();
        let settings = settings(Duration::from_secs(10), 0.5);
        let mut ladder = Ladder::default();
        let steps = feed(
            &mut ladder,
            t0,
            &settings,
            &[(0.0, 50 * G), (10.0, 20 * G), (30.0, 50 * G)],
        );
        assert_eq!(steps[2], LadderStep::Warn);
        assert_eq!(
            ladder.observe(50 * G, QUOTA, t0 + secs(31.0), &settings),
            LadderStep::Over {
                deadline: t0 + secs(40.0)
            }
        );
    }

    /// Samples every `interval` (jittered by up to ±10 % when `jitter`) for `span` of a job that
    /// is over its quota (50G of 40G) for `over` of every `period` and at 30G otherwise, its cycle
    /// starting `phase` before the first sample. When the ladder first acts, if it does.
    fn first_act(
        over: f64,
        period: f64,
        phase: f64,
        interval: f64,
        jitter: bool,
        settings: &Enforcement,
        span: f64,
    ) -> Option<f64> {
        let t0 = Instant::now();
        let mut ladder = Ladder::default();
        let mut at = 0.0;
        let mut i: u64 = 0;
        while at < span {
            let used = if (at + phase) % period < over {
                50 * G
            } else {
                30 * G
            };
            if ladder.observe(used, QUOTA, t0 + secs(at), settings) == LadderStep::Act {
                return Some(at);
            }
            // A fixed spread of -10 % to +10 %, different from sample to sample.
            let spread = if jitter {
                (i * 7919 % 21) as f64 / 100.0 - 0.1
            } else {
                0.0
            };
            at += interval * (1.0 + spread);
            i += 1;
        }
        None
    }

    #[test]
    fn duty_cycled_overuse_is_acted_on() {
        // (over, period, interval, grace): the review's 1.4 s of 2 s at 500 ms / 2 s grace, the
        // shipped defaults (2 s interval, 10 s grace) with 8 s of 10 s over, and 70 % over.
        let cases = [
            (1.4, 2.0, 0.5, 2.0),
            (8.0, 10.0, 2.0, 10.0),
            (7.0, 10.0, 1.0, 10.0),
            (1.6, 2.0, 0.5, 2.0),
        ];
        for (over, period, interval, grace, phase, jitter) in every_phase(&cases) {
            let settings = settings(secs(grace), 0.5);
            let acted = first_act(over, period, phase, interval, jitter, &settings, 120.0);
            assert!(
                acted.is_some_and(|at| at <= 2.0 * grace + period),
                "{over}s of {period}s over, interval {interval}s, grace {grace}s, phase {phase:.2}s, \
                 jitter {jitter}: acted at {acted:?}"
            );
        }
    }

    /// Each `(over, period, interval, grace)` case at 7 phases of its cycle, with and without
    /// jitter: `(over, period, interval, grace, phase, jitter)`.
    fn every_phase(cases: &[(f64, f64, f64, f64)]) -> Vec<(f64, f64, f64, f64, f64, bool)> {
        let mut runs = Vec::new();
        for &(over, period, interval, grace) in cases {
            for k in 0..7 {
                for jitter in [false, true] {
                    runs.push((over, period, interval, grace, period * k as f64 / 7.0, jitter));
                }
            }
        }
        runs
    }

    #[test]
    fn rare_spikes_are_never_acted_on() {
        // 10 % of the time over the quota, for an hour of samples.
        let cases = [
            (1.0, 10.0, 0.5, 10.0),
            (0.2, 2.0, 0.1, 2.0),
            (1.0, 10.0, 2.0, 10.0),
        ];
        for (over, period, interval, grace, phase, jitter) in every_phase(&cases) {
            let settings = settings(secs(grace), 0.5);
            assert_eq!(
                first_act(over, period, phase, interval, jitter, &settings, 3600.0),
                None,
                "{over}s of {period}s, interval {interval}s, phase {phase:.2}s, jitter {jitter}"
            );
        }
    }

    #[test]
    fn the_share_decides_how_much_of_the_window_must_be_over() {
        // 70 % over: acted on at shares up to 0.7, never above.
        for (share, acts) in [(0.5, true), (0.7, true), (0.75, false), (1.0, false)] {
            let settings = settings(Duration::from_secs(10), share);
            let acted = first_act(7.0, 10.0, 0.0, 1.0, false, &settings, 600.0);
            assert_eq!(acted.is_some(), acts, "share {share}: {acted:?}");
        }
        // Share 1: a dip keeps the job from being acted on only until the dip leaves the window.
        let t0 = Instant::now();
        let settings = settings(Duration::from_secs(10), 1.0);
        let mut ladder = Ladder::default();
        let samples: Vec<(f64, u64)> = (0..=16)
            .map(|s| (s as f64, if s == 5 { 30 * G } else { 50 * G }))
            .collect();
        let steps = feed(&mut ladder, t0, &settings, &samples);
        assert!(!steps[..16].contains(&LadderStep::Act), "{steps:?}");
        assert_eq!(steps[16], LadderStep::Act); // the window [6 s, 16 s) is all over
    }

    #[test]
    fn an_unconfirmed_act_keeps_the_episode_and_a_failed_one_waits_a_grace() {
        let t0 = Instant::now();
        let settings = settings(Duration::from_secs(10), 0.5);
        let mut ladder = Ladder::default();
        let samples: Vec<(f64, u64)> = (0..=10).map(|s| (s as f64, 50 * G)).collect();
        assert_eq!(feed(&mut ladder, t0, &settings, &samples)[10], LadderStep::Act);
        // The fresh sample was under the quota: the next sample over acts, no new grace period.
        ladder.unconfirmed();
        assert_eq!(
            ladder.observe(50 * G, QUOTA, t0 + secs(11.0), &settings),
            LadderStep::Act
        );
        // slurmctld did not answer: the next attempt a grace period later, without a new warning.
        ladder.retry_later();
        assert_eq!(
            ladder.observe(50 * G, QUOTA, t0 + secs(12.0), &settings),
            LadderStep::Over {
                deadline: t0 + secs(22.0)
            }
        );
        assert!(ladder.is_warned());
    }

    #[test]
    fn recovery_needs_usage_below_the_recover_level() {
        // Warn at 36G (0.9 of 40G), recovered only below 32.4G (0.9 of that).
        let t0 = Instant::now();
        let settings = settings(Duration::from_secs(10), 0.5);
        let mut ladder = Ladder::default();
        let used = [
            36 * G,
            35 * G,
            33 * G,
            37 * G,
            32 * G + G / 2,
            32 * G,
            33 * G,
            36 * G,
        ];
        let samples: Vec<(f64, u64)> = used.iter().enumerate().map(|(i, &u)| (i as f64, u)).collect();
        use LadderStep::{Nothing, Recovered, Warn};
        assert_eq!(
            feed(&mut ladder, t0, &settings, &samples),
            [Warn, Nothing, Nothing, Nothing, Nothing, Recovered, Nothing, Warn]
        );
    }

    #[test]
    fn crossing_lines_are_logged_first_then_once_per_five_minutes_with_a_count() {
        let t0 = Instant::now();
        let mut lines = CrossingLines::default();
        let at = |s: u64| t0 + Duration::from_secs(s);
        assert_eq!(lines.admit(Crossing::Warn, at(0)), Some(0));
        assert_eq!(lines.admit(Crossing::Recovered, at(1)), Some(0)); // its own first line
        assert_eq!(lines.admit(Crossing::Warn, at(2)), None);
        assert_eq!(lines.admit(Crossing::Warn, at(299)), None);
        assert_eq!(lines.admit(Crossing::Warn, at(300)), Some(2));
        assert_eq!(lines.admit(Crossing::Warn, at(301)), None);
        assert_eq!(lines.admit(Crossing::Recovered, at(302)), Some(0));
        assert_eq!(not_logged_note(0), "");
        assert_eq!(
            not_logged_note(2),
            " (2 more time(s) since the last such line, not logged: at most one per 5 min)"
        );
    }

    #[test]
    fn zero_grace_acts_on_the_first_sample_over() {
        let mut ladder = Ladder::default();
        let settings = settings(Duration::ZERO, 0.5);
        assert_eq!(
            ladder.observe(41 * G, QUOTA, Instant::now(), &settings),
            LadderStep::Act
        );
    }

    #[test]
    fn exactly_the_quota_is_not_over() {
        let mut ladder = Ladder::default();
        let settings = settings(Duration::ZERO, 0.5);
        assert_eq!(
            ladder.observe(40 * G, QUOTA, Instant::now(), &settings),
            LadderStep::Warn
        );
        assert!(!ladder.is_over());
    }

    #[test]
    fn action_table() {
        let settings = Enforcement::default(); // requeue, max 3, escalation requeue-hold, no-requeue: cancel
        let facts = |requeueable, requeues_by_us| ActFacts {
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
