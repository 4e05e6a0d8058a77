//! What the plugin tells a job about GPU memory beyond its quota: restart hints after a requeue
//! (`restart`) and the allocator settings of the common frameworks (`framework`).
//!
//! Both are pure: plain data in, `(NAME, value)` pairs out. The plugin looks up what it needs,
//! calls these functions and writes the pairs into the job's environment. docs/HINTS.md is the
//! user-facing reference for every variable.

pub(crate) mod framework;
pub(crate) mod previous;
pub(crate) mod restart;

pub(crate) use framework::{framework_vars, CapInputs};
pub use previous::previous_run;
pub(crate) use restart::{
    batch_scale, hint_vars, near_oom, restart_event, restart_hints, HintInputs, HINT_VARS,
};

use std::fmt;

/// A non-negative fraction rounded DOWN to two decimals, kept as whole hundredths so that what a
/// job reads (`0.56`) is exactly what the plugin computed with: no float formatting surprises.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Hundredths(u32);

impl Hundredths {
    const ONE: Hundredths = Hundredths(100);

    pub(crate) const fn new(hundredths: u32) -> Hundredths {
        Hundredths(hundredths)
    }

    /// ⌊100 × numerator / denominator⌋; `None` when the denominator is zero.
    fn floor_ratio(numerator: u64, denominator: u64) -> Option<Hundredths> {
        if denominator == 0 {
            return None;
        }
        let h = numerator as u128 * 100 / denominator as u128;
        Some(Hundredths(h.min(u32::MAX as u128) as u32))
    }

    pub(crate) const fn get(self) -> u32 {
        self.0
    }

    /// ⌊n × self⌋ for a count such as a micro-batch.
    const fn floor_times(self, n: u64) -> u64 {
        (n as u128 * self.0 as u128 / 100) as u64
    }
}

/// `0.56`, `1.00`: always two decimals, always a leading digit (every framework parses that).
impl fmt::Display for Hundredths {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{:02}", self.0 / 100, self.0 % 100)
    }
}

/// `bytes × (1 − margin)`, rounded down, in integer arithmetic (basis points) so that 5 % of 40G is
/// exactly 2G. A margin outside `[0, 0.99]` (or NaN) is clamped there: config validation refuses such
/// values with a message; this only keeps the arithmetic defined.
fn less_margin(bytes: u64, margin: f64) -> u64 {
    let margin = if margin.is_nan() {
        0.0
    } else {
        margin.clamp(0.0, 0.99)
    };
    let keep_bp = 10_000 - (margin * 10_000.0).round() as u128;
    (bytes as u128 * keep_bp / 10_000) as u64
}

/// Sizes in reasons and logs: GiB with one decimal, as admins read `nvidia-smi`-style figures.
pub(crate) fn gib(bytes: u64) -> String {
    format!("{:.1} GiB", bytes as f64 / (1u64 << 30) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hundredths_round_down_and_print_two_decimals() {
        let table = [
            ((40448, 81920), "0.49"),
            ((1, 1), "1.00"),
            ((1, 3), "0.33"),
            ((2, 3), "0.66"),
            ((0, 5), "0.00"),
            ((5, 2), "2.50"),
        ];
        for ((n, d), text) in table {
            assert_eq!(
                Hundredths::floor_ratio(n, d).unwrap().to_string(),
                text,
                "{n}/{d}"
            );
        }
        assert_eq!(Hundredths::floor_ratio(1, 0), None);
        assert_eq!(Hundredths::new(56).floor_times(8), 4);
        assert_eq!(Hundredths::new(12).floor_times(8), 0);
    }

    #[test]
    fn margins_are_exact_and_clamped() {
        let g40 = 40u64 << 30;
        assert_eq!(less_margin(g40, 0.05), 38u64 << 30);
        assert_eq!(less_margin(g40, 0.0), g40);
        assert_eq!(less_margin(g40, -1.0), g40);
        assert_eq!(less_margin(g40, f64::NAN), g40);
        assert_eq!(less_margin(100, 5.0), 1);
        assert_eq!(less_margin(u64::MAX, 0.0), u64::MAX);
    }
}
