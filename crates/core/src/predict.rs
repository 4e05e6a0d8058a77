//! Early warning: from a short history of GPU-memory samples, predict when a job will cross its quota.
//!
//! Training memory is a saw-tooth: every step allocates activations and frees them again, so raw
//! samples swing by gigabytes within seconds, and a line fitted through them follows the phase of the
//! last few steps. What grows towards an OOM is the *envelope*: the peak each step reaches. So:
//!
//! 1. Cut the last `history` into windows of `window` (longer than one training step, or one
//!    accumulation cycle), counted back from the newest sample; only whole windows count.
//! 2. Keep each window's highest sample, dated at the window's start: the envelope.
//! 3. Fit the envelope with the Theil–Sen estimator: the slope is the median of the slopes between
//!    every pair of points, the level the median of the points moved along that slope to now. Then
//!    fit again without the windows more than 3 robust standard deviations off the first line (an
//!    evaluation pass, a checkpoint save, a stretch where sampling missed the steps' peaks).
//! 4. Call it a trend only when the windows agree that the envelope rises (Kendall's τ, the share of
//!    window pairs that rise minus the share that fall, at least `min_consistency`) and it rose by at
//!    least `min_rise` of the quota over the fitted span, with at least `min_windows` windows. A flat
//!    saw-tooth, however close to the quota, has τ ≈ 0 and a slope ≈ 0: it never warns.
//! 5. Predict on the early side, because a late warning is worth little. The quota is crossed by
//!    the highest peaks, spikes included, so project the envelope's upper edge (the line moved up to
//!    the highest of the newer half of the windows) at the upper 95 % confidence bound of the slope
//!    (Sen's bound, from Kendall's variance). The time to the quota is
//!    `(quota − level − spread) / rate`, and the warning fires when that is within `horizon`.
//!
//! Measured on the recorded-shape series of crates/core/tests/integration/predict_series.rs (2 s sampling, 40 noise seeds
//! each): slow leaks of 3–20 MiB/s are first warned 316–658 s before the crossing (median 330–476 s)
//! with the default 5 min horizon; flat saw-tooth series at 90 % of the quota (noisy, jittered,
//! aliased with the sampling, with evaluation spikes to 95 %) never warn in two hours.
//!
//! Pure: the watchdog keeps the samples and the clock and calls [`warning`] after each sample.

use std::time::Duration;

use crate::size::ByteSize;

/// One observation of a job's GPU memory (on one GPU).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    /// When, on a monotonic clock (e.g. since the watchdog started).
    pub at: Duration,
    pub used_bytes: u64,
}

/// How the predictor reads a history; [`PredictParams::default`] suits 1–5 s sampling.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PredictParams {
    /// Envelope window: longer than the longest regular cycle of the job's memory (a step, or a
    /// gradient-accumulation cycle). Default 30 s.
    pub window: Duration,
    /// How far back to fit; the watchdog need keep no more than `history + window` of samples.
    /// Default 15 min: long enough that a saw-tooth's sampling noise cannot pass for a trend.
    pub history: Duration,
    /// Fewer whole windows with samples than this: no prediction. Default 14 (7 min at 30 s): with
    /// fewer, chance patterns in a saw-tooth's sampled peaks look like trends.
    pub(crate) min_windows: usize,
    /// The envelope must have risen by this fraction of the quota over the fitted span to count as
    /// a trend. Default 0.01.
    pub(crate) min_rise: f64,
    /// Kendall's τ of the envelope must be at least this to count as a trend (1 = every window
    /// higher than every earlier one). Default 0.6.
    pub(crate) min_consistency: f64,
    /// Warn when the crossing is predicted within this. Default 5 min.
    pub horizon: Duration,
}

impl Default for PredictParams {
    fn default() -> Self {
        PredictParams {
            window: Duration::from_secs(30),
            history: Duration::from_secs(900),
            min_windows: 14,
            min_rise: 0.01,
            min_consistency: 0.6,
            horizon: Duration::from_secs(300),
        }
    }
}

/// A window further than this many robust standard deviations from the first fit is an outlier.
const OUTLIER_SIGMAS: f64 = 3.0;
/// One-sided 95 % normal quantile, for Sen's upper confidence bound of the slope.
const SLOPE_BOUND_Z: f64 = 1.645;

/// A line through the envelope.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Trend {
    /// Sen's slope of the envelope, bytes per second (negative when shrinking).
    slope: f64,
    /// The rate predictions use: the slope's upper confidence bound (never below `slope`).
    pub(crate) rate: f64,
    /// The fitted line's level at the newest sample, in bytes.
    pub(crate) level: f64,
    /// How far the envelope's upper edge lies above the line, in bytes (≥ 0).
    pub(crate) spread: f64,
    /// Time between the oldest and the newest envelope point.
    pub(crate) span: Duration,
    /// Kendall's τ of the envelope: +1 steadily rising, −1 steadily falling, ≈ 0 for no trend.
    consistency: f64,
}

impl Trend {
    /// The peak the job is heading for `after` the newest sample, if the trend holds (for a
    /// suggested batch scale).
    pub(crate) fn peak_after(&self, after: Duration) -> f64 {
        self.level + self.spread + self.rate * after.as_secs_f64()
    }

    /// Time until the envelope's upper edge reaches `bytes`: zero when it is there already, `None`
    /// when it is not rising.
    fn time_to(&self, bytes: u64) -> Option<Duration> {
        let gap = bytes as f64 - self.level - self.spread;
        if gap <= 0.0 {
            return Some(Duration::ZERO);
        }
        if self.rate <= 0.0 {
            return None;
        }
        Duration::try_from_secs_f64(gap / self.rate).ok()
    }
}

/// Fits the envelope of the last `params.history`; `None` with fewer than `params.min_windows`
/// whole windows of data. Samples may come in any order.
pub(crate) fn fit_trend(samples: &[Sample], params: &PredictParams) -> Option<Trend> {
    let min_windows = params.min_windows.max(2);
    let envelope = envelope(samples, params)?;
    if envelope.len() < min_windows {
        return None;
    }
    // Windows that stand out from a first fit (an evaluation pass, a checkpoint save, a dip where
    // sampling missed the steps' peaks) would tilt a short fit; the trend comes from the others.
    // They are real peaks all the same, so they still count for the upper edge.
    let first = sen_fit(&envelope)?;
    let typical = without_outliers(&envelope, &first);
    let fit = match typical.len() >= min_windows {
        true => sen_fit(&typical)?,
        false => first,
    };
    // The upper edge from the newer half only: under a slightly wrong slope the oldest windows drift
    // furthest from the line, and they say least about the peaks to come.
    let highest = envelope[envelope.len() / 2..]
        .iter()
        .map(|(t, y)| y - fit.slope * t)
        .fold(f64::MIN, f64::max);
    Some(Trend {
        slope: fit.slope,
        rate: fit.rate,
        level: fit.level,
        spread: (highest - fit.level).max(0.0),
        span: Duration::try_from_secs_f64(envelope.last()?.0 - envelope.first()?.0).unwrap_or_default(),
        consistency: fit.consistency,
    })
}

/// Theil–Sen on points in time order with distinct times.
struct SenFit {
    slope: f64,
    rate: f64,
    /// At time 0 (the newest sample).
    level: f64,
    consistency: f64,
}

fn sen_fit(points: &[(f64, f64)]) -> Option<SenFit> {
    let n = points.len() as f64;
    let pair_count = n * (n - 1.0) / 2.0;
    let slopes = sorted(
        pairs(points)
            .map(|((t0, y0), (t1, y1))| (y1 - y0) / (t1 - t0))
            .collect(),
    );
    let slope = quantile(&slopes, 0.5)?;
    // Sen's bound: the slope ranked C/2 above the median, C = z·√Var(S) with Kendall's Var(S).
    let c = SLOPE_BOUND_Z * (pair_count * (2.0 * n + 5.0) / 9.0).sqrt();
    let bound_rank = ((pair_count + c) / 2.0).ceil() as usize;
    let rate = slopes[bound_rank.min(slopes.len() - 1)].max(slope);
    let concordance: f64 = pairs(points).map(|((_, y0), (_, y1))| sign(y1 - y0)).sum();
    // Times are seconds relative to the newest sample (≤ 0): each point moved along the slope to now.
    let level = quantile(&sorted(points.iter().map(|(t, y)| y - slope * t).collect()), 0.5)?;
    Some(SenFit {
        slope,
        rate,
        level,
        consistency: concordance / pair_count,
    })
}

/// The points within `OUTLIER_SIGMAS` robust standard deviations (1.4826 × the median absolute
/// residual) of the line.
fn without_outliers(points: &[(f64, f64)], fit: &SenFit) -> Vec<(f64, f64)> {
    let residual = |(t, y): &(f64, f64)| (y - fit.slope * t - fit.level).abs();
    let mad = quantile(&sorted(points.iter().map(residual).collect()), 0.5).unwrap_or(0.0);
    let limit = OUTLIER_SIGMAS * 1.4826 * mad;
    points.iter().copied().filter(|p| residual(p) <= limit).collect()
}

/// Time until the job's memory envelope crosses `quota`, if it is rising by a trend worth the name.
fn time_to_quota(samples: &[Sample], quota: ByteSize, params: &PredictParams) -> Option<Duration> {
    let trend = fit_trend(samples, params)?;
    let rise = trend.slope * trend.span.as_secs_f64();
    let is_trend = trend.slope > 0.0
        && trend.consistency >= params.min_consistency
        && rise >= params.min_rise * quota.bytes() as f64;
    if !is_trend {
        return None;
    }
    trend.time_to(quota.bytes())
}

/// The decision: `Some(time to quota)` when it is within `params.horizon`, else `None`.
pub fn warning(samples: &[Sample], quota: ByteSize, params: &PredictParams) -> Option<Duration> {
    time_to_quota(samples, quota, params).filter(|eta| *eta <= params.horizon)
}

/// The highest sample of each whole window, as (the window's start in seconds relative to the
/// newest sample, bytes), oldest first. Windows without samples (a gap in sampling) are left out.
///
/// A point is dated at its window's start, not at the time of its highest sample. A fixed date
/// keeps the fit unbiased: in a noisy rising series an early sample only wins its window with
/// unusually high noise, so the highest sample's own time would tie early times to high values and
/// pull the slope down. And the start is the earliest the maximum can have happened, so on a rising
/// envelope the line lies at or above it: the prediction errs early, by at most one window.
fn envelope(samples: &[Sample], params: &PredictParams) -> Option<Vec<(f64, f64)>> {
    let newest = samples.iter().map(|s| s.at).max()?;
    let oldest = samples.iter().map(|s| s.at).min()?;
    let window = params.window;
    if window.is_zero() {
        return None;
    }
    let covered = (newest - oldest).min(params.history);
    let windows = (covered.as_nanos() / window.as_nanos()).min(u32::MAX as u128) as usize;
    // Window i (0 = newest) holds the samples aged [i·window, (i+1)·window).
    let mut peaks: Vec<Option<u64>> = vec![None; windows];
    for s in samples {
        let i = ((newest - s.at).as_nanos() / window.as_nanos()) as usize;
        if let Some(peak) = peaks.get_mut(i) {
            *peak = Some(peak.map_or(s.used_bytes, |p| p.max(s.used_bytes)));
        }
    }
    let window_s = window.as_secs_f64();
    Some(
        peaks
            .into_iter()
            .enumerate()
            .rev()
            .filter_map(|(i, peak)| Some((-((i + 1) as f64) * window_s, peak? as f64)))
            .collect(),
    )
}

fn pairs<T: Copy>(items: &[T]) -> impl Iterator<Item = (T, T)> + '_ {
    items
        .iter()
        .enumerate()
        .flat_map(move |(i, a)| items[i + 1..].iter().map(move |b| (*a, *b)))
}

fn sorted(mut values: Vec<f64>) -> Vec<f64> {
    values.retain(|v| v.is_finite());
    values.sort_by(f64::total_cmp);
    values
}

/// The `q` quantile of sorted values (nearest rank; the median averages the middle two).
fn quantile(sorted: &[f64], q: f64) -> Option<f64> {
    let last = sorted.len().checked_sub(1)?;
    if q == 0.5 && sorted.len().is_multiple_of(2) {
        return Some((sorted[last / 2] + sorted[last / 2 + 1]) / 2.0);
    }
    Some(sorted[(last as f64 * q).round() as usize])
}

fn sign(x: f64) -> f64 {
    if x > 0.0 {
        1.0
    } else if x < 0.0 {
        -1.0
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const G: u64 = 1 << 30;

    fn series(seconds: u64, used: impl Fn(u64) -> u64) -> Vec<Sample> {
        (0..=seconds)
            .map(|t| Sample {
                at: Duration::from_secs(t),
                used_bytes: used(t),
            })
            .collect()
    }

    #[test]
    fn too_little_data_predicts_nothing() {
        let p = PredictParams::default();
        assert_eq!(fit_trend(&[], &p), None);
        // 6 min 50 s at 1 s: only 13 whole windows of 30 s; 7 min make the 14 needed.
        assert_eq!(fit_trend(&series(410, |t| t * G / 100), &p), None);
        assert!(fit_trend(&series(420, |t| t * G / 100), &p).is_some());
        let zero_window = PredictParams {
            window: Duration::ZERO,
            ..p
        };
        assert_eq!(fit_trend(&series(600, |_| G), &zero_window), None);
    }

    #[test]
    fn an_exact_line_is_read_exactly() {
        // 10 GiB + 10 MiB/s; quota 40 GiB. Now (t = 600 s) the level is 10 GiB + 6000 MiB, and the
        // quota is (40960 − 10240 − 6000) MiB / 10 MiB/s = 2472 s away. Each window's maximum (its
        // newest sample) is dated at the window's start, 30 s early: the line runs 300 MiB high, and
        // the prediction comes 30 s early, never late.
        let samples = series(600, |t| 10 * G + t * (10 << 20));
        let trend = fit_trend(&samples, &PredictParams::default()).unwrap();
        let mib = |m: u64| (m << 20) as f64;
        assert_eq!((trend.slope, trend.rate), (mib(10), mib(10)), "{trend:?}");
        assert_eq!(trend.level, (10 * G) as f64 + mib(6000 + 300), "{trend:?}");
        assert_eq!((trend.spread, trend.consistency), (0.0, 1.0), "{trend:?}");
        let eta = time_to_quota(&samples, ByteSize::from_bytes(40 * G), &PredictParams::default()).unwrap();
        assert_eq!(eta.as_secs(), 2472 - 30);
    }

    #[test]
    fn flat_shrinking_or_barely_rising_predicts_nothing() {
        let p = PredictParams::default();
        let quota = ByteSize::from_bytes(40 * G);
        type Usage = Box<dyn Fn(u64) -> u64>;
        let table: [(&str, Usage); 3] = [
            ("flat", Box::new(|_| 36 * G)),
            ("shrinking", Box::new(|t| 36 * G - t * (1 << 20))),
            // 0.35 GiB over the 15 min history is under 1 % of 40 GiB.
            ("creeping", Box::new(|t| 36 * G + t * (G * 35 / 100) / 900)),
        ];
        for (name, used) in table {
            assert_eq!(time_to_quota(&series(900, used), quota, &p), None, "{name}");
        }
    }

    #[test]
    fn a_spike_does_not_make_a_trend_but_raises_the_upper_edge() {
        let p = PredictParams::default();
        let quota = ByteSize::from_bytes(40 * G);
        // Flat at 30G with a 40 s evaluation pass at 38G two minutes ago: no trend.
        let spiked = |t: u64| if (780..820).contains(&t) { 38 * G } else { 30 * G };
        let flat = series(900, spiked);
        let trend = fit_trend(&flat, &p).unwrap();
        assert_eq!((trend.slope, trend.level), (0.0, (30 * G) as f64), "{trend:?}");
        assert_eq!(time_to_quota(&flat, quota, &p), None);
        // The same spike on a leak: the trend ignores it, the upper edge does not (the next
        // evaluation pass will cross the quota first).
        let leak = series(900, |t| spiked(t) + t * (4 << 20));
        let trend = fit_trend(&leak, &p).unwrap();
        assert_eq!(trend.slope, (4u64 << 20) as f64, "{trend:?}");
        assert!(trend.spread > (7 * G) as f64, "{trend:?}");
    }

    #[test]
    fn already_over_is_zero_and_warns() {
        let p = PredictParams::default();
        let samples = series(600, |t| 30 * G + t * (20 << 20));
        let quota = ByteSize::from_bytes(40 * G);
        assert_eq!(time_to_quota(&samples, quota, &p), Some(Duration::ZERO));
        assert_eq!(warning(&samples, quota, &p), Some(Duration::ZERO));
    }

    #[test]
    fn only_the_history_counts_and_order_does_not_matter() {
        let p = PredictParams::default();
        // Growing for an hour, flat for the last 10 min: the old growth is forgotten.
        let mut samples = series(4200, |t| (10 * G + t.min(3600) * (4 << 20)).min(35 * G));
        assert_eq!(time_to_quota(&samples, ByteSize::from_bytes(40 * G), &p), None);
        samples.reverse();
        assert_eq!(time_to_quota(&samples, ByteSize::from_bytes(40 * G), &p), None);
        let leak = series(600, |t| 10 * G + t * (10 << 20));
        let mut shuffled = leak.clone();
        shuffled.rotate_left(77);
        assert_eq!(fit_trend(&leak, &p), fit_trend(&shuffled, &p));
    }

    #[test]
    fn warning_is_the_horizon_test() {
        let p = PredictParams::default();
        let quota = ByteSize::from_bytes(40 * G);
        // Rising 10 MiB/s and, at the newest sample, 400 s (then 200 s) from the quota: predicted
        // 370 s and 170 s (one window early).
        let far = series(600, |t| 40 * G - (400 + 600 - t) * (10 << 20));
        let near = series(600, |t| 40 * G - (200 + 600 - t) * (10 << 20));
        assert_eq!(warning(&far, quota, &p), None);
        assert_eq!(warning(&near, quota, &p).map(|d| d.as_secs()), Some(170));
    }

    #[test]
    fn trend_helpers() {
        let t = Trend {
            slope: 2.0,
            rate: 2.0,
            level: 90.0,
            spread: 10.0,
            span: Duration::from_secs(60),
            consistency: 1.0,
        };
        assert_eq!(t.peak_after(Duration::from_secs(10)), 120.0);
        assert_eq!(t.time_to(150), Some(Duration::from_secs(25)));
        assert_eq!(t.time_to(50), Some(Duration::ZERO));
        let flat = Trend {
            slope: 0.0,
            rate: 0.0,
            ..t
        };
        assert_eq!(flat.time_to(150), None);
    }
}
