//! The value syntaxes of the policy file that are not plain sizes: percents of the GPU,
//! durations, and the enforcement actions. Each parser takes the text as written and returns a
//! message that completes "invalid ...: " when it refuses it.

use std::fmt;
use std::time::Duration;

use super::{AfterMax, NonRequeueable};
use crate::size::{parse_size, ByteSize};

const MIB: u64 = 1 << 20;

/// A share of one GPU's memory, `1%`..`100%`, with at most two decimals (`12.5%`, `33.33%`).
/// Kept as hundredths of a percent so that comparisons and display are exact.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Percent(u16);

impl Percent {
    /// Hundredths of a percent: `50%` is 5000.
    #[cfg(test)]
    pub(crate) const fn hundredths(self) -> u16 {
        self.0
    }

    /// This share of `total`, rounded down to a whole MiB (never below 1 MiB) so that it prints in
    /// Slurm's size syntax and never exceeds the share.
    pub(crate) fn of(self, total: ByteSize) -> ByteSize {
        let share = u128::from(total.bytes()) * u128::from(self.0) / 10_000;
        // share <= total, so it fits in u64.
        let floored = ByteSize::from_bytes(share as u64).floor_mib();
        floored.max(ByteSize::from_bytes(MIB))
    }
}

impl fmt::Display for Percent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (whole, hundredths) = (self.0 / 100, self.0 % 100);
        match hundredths {
            0 => write!(f, "{whole}%"),
            h if h % 10 == 0 => write!(f, "{whole}.{}%", h / 10),
            h => write!(f, "{whole}.{h:02}%"),
        }
    }
}

/// Parses `"50%"`, `"12.5%"`, `"33.33%"`: 1% to 100%, at most two decimals.
fn parse_percent(text: &str) -> Result<Percent, String> {
    let syntax = || {
        format!(
            "invalid percent '{}': expected 1% to 100% with at most two decimals (e.g. \"50%\", \"12.5%\")",
            text.escape_debug()
        )
    };
    let number = text.strip_suffix('%').ok_or_else(syntax)?;
    let (whole, decimals) = number.split_once('.').unwrap_or((number, ""));
    let all_digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty()
        || whole.len() > 3
        || !all_digits(whole)
        || decimals.len() > 2
        || !all_digits(decimals)
        || number.ends_with('.')
    {
        return Err(syntax());
    }
    let whole: u32 = whole.parse().map_err(|_| syntax())?;
    let decimals: u32 = format!("{decimals:0<2}").parse().map_err(|_| syntax())?;
    let hundredths = whole * 100 + decimals;
    if !(100..=10_000).contains(&hundredths) {
        return Err(format!(
            "invalid percent '{text}': must be between 1% and 100% of the GPU"
        ));
    }
    Ok(Percent(hundredths as u16))
}

/// A quota or cap as written: an absolute size per GPU, or a share of the GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Amount {
    Size(ByteSize),
    Percent(Percent),
}

impl Amount {
    /// The amount in bytes, if it can be known: a percent needs the GPU's size.
    pub(crate) fn resolve(self, gpu_total: Option<ByteSize>) -> Option<ByteSize> {
        match self {
            Amount::Size(size) => Some(size),
            Amount::Percent(p) => gpu_total.map(|total| p.of(total)),
        }
    }
}

impl fmt::Display for Amount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Amount::Size(size) => size.fmt(f),
            Amount::Percent(p) => p.fmt(f),
        }
    }
}

/// Parses a size (`"40G"`, Slurm syntax) or a percent of the GPU (`"50%"`).
pub fn parse_amount(text: &str) -> Result<Amount, String> {
    if text.ends_with('%') {
        return parse_percent(text).map(Amount::Percent);
    }
    parse_size(text)
        .map(Amount::Size)
        .map_err(|e| format!("invalid size '{}': {e}", text.escape_debug()))
}

/// The quota a job gets when it asks for none.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DefaultQuota {
    /// `"none"`: no quota; the job is watched and recorded, never acted on.
    MonitorOnly,
    Amount(Amount),
}

impl fmt::Display for DefaultQuota {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DefaultQuota::MonitorOnly => write!(f, "none"),
            DefaultQuota::Amount(a) => a.fmt(f),
        }
    }
}

/// Parses a default quota: a size, a percent, or `"none"` (monitor only).
pub(crate) fn parse_default_quota(text: &str) -> Result<DefaultQuota, String> {
    if text == "none" {
        return Ok(DefaultQuota::MonitorOnly);
    }
    parse_amount(text)
        .map(DefaultQuota::Amount)
        .map_err(|e| format!("{e} (or \"none\" for monitor only)"))
}

/// Parses a duration: a whole number with a unit, `ms`, `s`, `m` or `h` (`"500ms"`, `"2s"`, `"1m"`).
/// A unit is required: a bare `"2"` could mean seconds or milliseconds.
pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    let invalid = || {
        format!(
            "invalid duration '{}': expected a whole number with ms, s, m or h (e.g. \"500ms\", \"2s\", \"1m\")",
            text.escape_debug()
        )
    };
    let digits_end = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (digits, unit) = text.split_at(digits_end);
    let number: u64 = if digits.is_empty() {
        return Err(invalid());
    } else {
        digits.parse().map_err(|_| invalid())?
    };
    let millis_per_unit: u64 = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        _ => return Err(invalid()),
    };
    number
        .checked_mul(millis_per_unit)
        .map(Duration::from_millis)
        .ok_or_else(invalid)
}

/// A duration in the same syntax the file uses (`"2s"`, `"500ms"`, `"1m"`), for messages.
pub fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    match ms {
        0 => "0s".to_string(),
        ms if ms % 3_600_000 == 0 => format!("{}h", ms / 3_600_000),
        ms if ms % 60_000 == 0 => format!("{}m", ms / 60_000),
        ms if ms % 1_000 == 0 => format!("{}s", ms / 1_000),
        ms => format!("{ms}ms"),
    }
}

/// What the watchdog does to a job that stays over its quota.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    /// `scontrol requeue`: the job goes back to the queue and restarts.
    Requeue,
    /// `scontrol requeuehold`: requeued and held until someone releases it.
    RequeueHold,
    /// `scancel`.
    Cancel,
    /// Log and tell the job, nothing more.
    WarnOnly,
}

impl Action {
    pub(crate) const ALL: [Action; 4] = [
        Action::Requeue,
        Action::RequeueHold,
        Action::Cancel,
        Action::WarnOnly,
    ];

    /// The name the policy file uses.
    pub const fn name(self) -> &'static str {
        match self {
            Action::Requeue => "requeue",
            Action::RequeueHold => "requeue-hold",
            Action::Cancel => "cancel",
            Action::WarnOnly => "warn-only",
        }
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Parses one of the names in `allowed`, listing them when the text is none of them.
pub(crate) fn parse_action(text: &str, allowed: &[Action]) -> Result<Action, String> {
    match allowed.iter().find(|a| a.name() == text) {
        Some(&action) => Ok(action),
        None => {
            let names: Vec<String> = allowed.iter().map(|a| format!("\"{a}\"")).collect();
            Err(format!(
                "invalid action '{}': expected {}",
                text.escape_debug(),
                names.join(", ")
            ))
        }
    }
}

/// What the plugin does when the policy file is missing or invalid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum OnConfigError {
    /// Jobs run unmonitored, and every step logs loudly that the policy is broken.
    #[default]
    FailOpen,
    /// Jobs are refused until the policy is fixed.
    FailClosed,
}

impl OnConfigError {
    pub(crate) const fn name(self) -> &'static str {
        match self {
            OnConfigError::FailOpen => "fail-open",
            OnConfigError::FailClosed => "fail-closed",
        }
    }
}

impl fmt::Display for OnConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

pub(crate) fn parse_on_config_error(text: &str) -> Result<OnConfigError, String> {
    match text {
        "fail-open" => Ok(OnConfigError::FailOpen),
        "fail-closed" => Ok(OnConfigError::FailClosed),
        _ => Err(format!(
            "invalid value '{}': expected \"fail-open\" or \"fail-closed\"",
            text.escape_debug()
        )),
    }
}

/// The signals `[prediction] signal` may name: the two a program can safely be asked to handle.
/// (SIGTERM or SIGINT would end most jobs; that is the watchdog's `action`, not a warning.)
const PREDICTION_SIGNALS: [(&str, i32); 2] = [("SIGUSR1", libc::SIGUSR1), ("SIGUSR2", libc::SIGUSR2)];

/// Parses `"none"` (no signal) or a name in [`PREDICTION_SIGNALS`] to its number.
pub(crate) fn parse_signal(text: &str) -> Result<Option<i32>, String> {
    if text == "none" {
        return Ok(None);
    }
    match PREDICTION_SIGNALS.iter().find(|(name, _)| *name == text) {
        Some(&(_, number)) => Ok(Some(number)),
        None => Err(format!(
            "invalid signal '{}': expected \"none\", \"SIGUSR1\" or \"SIGUSR2\"",
            text.escape_debug()
        )),
    }
}

/// The name [`parse_signal`] reads back: `"none"`, `"SIGUSR1"`, or the number of any other signal.
pub fn signal_name(signal: Option<i32>) -> String {
    match signal {
        None => "none".to_string(),
        Some(number) => PREDICTION_SIGNALS
            .iter()
            .find(|&&(_, n)| n == number)
            .map_or_else(|| format!("signal {number}"), |(name, _)| name.to_string()),
    }
}

/// `[preemption] after_max`: the names the file uses, with what they mean.
const AFTER_MAX_NAMES: [(&str, AfterMax); 2] =
    [("hold", AfterMax::Hold), ("leave-alone", AfterMax::LeaveAlone)];

/// The value `names` gives `text`, or an error naming every name there is.
fn one_of<T: Copy>(names: &[(&str, T)], text: &str) -> Result<T, String> {
    match names.iter().find(|(name, _)| *name == text) {
        Some(&(_, value)) => Ok(value),
        None => Err(format!(
            "invalid value '{}': expected {}",
            text.escape_debug(),
            names
                .iter()
                .map(|(name, _)| format!("\"{name}\""))
                .collect::<Vec<_>>()
                .join(" or ")
        )),
    }
}

/// Parses `"hold"` or `"leave-alone"`.
pub(crate) fn parse_after_max(text: &str) -> Result<AfterMax, String> {
    one_of(&AFTER_MAX_NAMES, text)
}

/// `[preemption] non_requeueable`: the names the file uses, with what they mean.
const NON_REQUEUEABLE_NAMES: [(&str, NonRequeueable); 2] =
    [("skip", NonRequeueable::Skip), ("cancel", NonRequeueable::Cancel)];

/// Parses `"skip"` or `"cancel"`.
pub(crate) fn parse_non_requeueable(text: &str) -> Result<NonRequeueable, String> {
    one_of(&NON_REQUEUEABLE_NAMES, text)
}

/// The name [`parse_non_requeueable`] reads back.
pub(crate) fn non_requeueable_name(what: NonRequeueable) -> &'static str {
    match what {
        NonRequeueable::Skip => "skip",
        NonRequeueable::Cancel => "cancel",
    }
}

/// The name [`parse_after_max`] reads back.
pub fn after_max_name(after_max: AfterMax) -> &'static str {
    match after_max {
        AfterMax::Hold => "hold",
        AfterMax::LeaveAlone => "leave-alone",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    #[test]
    fn percents() {
        let good: &[(&str, u16, &str)] = &[
            ("1%", 100, "1%"),
            ("50%", 5000, "50%"),
            ("100%", 10000, "100%"),
            ("12.5%", 1250, "12.5%"),
            ("12.50%", 1250, "12.5%"),
            ("33.33%", 3333, "33.33%"),
            ("0.5%", 50, ""),
            ("050%", 5000, "50%"),
        ];
        for &(text, hundredths, shown) in good {
            match parse_percent(text) {
                Ok(p) => {
                    assert_eq!(p.hundredths(), hundredths, "{text}");
                    assert_eq!(p.to_string(), shown, "{text}");
                }
                Err(e) if hundredths < 100 => assert!(e.contains("between 1% and 100%"), "{e}"),
                Err(e) => panic!("{text}: {e}"),
            }
        }
        for bad in [
            "0%", "0.99%", "100.01%", "101%", "1000%", "50", "%", "5 0%", "50 %", "-5%", "+5%", "1.%", ".5%",
            "1.234%", "1e2%", "٥٠%", "50%%",
        ] {
            assert!(parse_percent(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn percent_of_a_gpu_rounds_down_to_mib() {
        let h100 = ByteSize::from_bytes(80 * GIB);
        let table: &[(&str, ByteSize, u64)] = &[
            ("50%", h100, 40 * GIB),
            ("100%", h100, 80 * GIB),
            ("33.33%", h100, 27303 * MIB), // 27303.9 MiB, rounded down
            ("1%", h100, 819 * MIB),
            // A real 80 GB board reports 81559 MiB; half is 40779.5 MiB.
            ("50%", ByteSize::from_bytes(81559 * MIB), 40779 * MIB),
            ("1%", ByteSize::from_bytes(50 * MIB), MIB), // never zero
        ];
        for &(text, total, bytes) in table {
            assert_eq!(
                parse_percent(text).unwrap().of(total).bytes(),
                bytes,
                "{text} of {total}"
            );
        }
    }

    #[test]
    fn amounts_and_defaults() {
        assert_eq!(
            parse_amount("40G"),
            Ok(Amount::Size(ByteSize::from_bytes(40 * GIB)))
        );
        assert_eq!(parse_amount("50%"), Ok(Amount::Percent(Percent(5000))));
        assert_eq!(
            parse_amount("banana").unwrap_err(),
            "invalid size 'banana': not a size; expected a whole number with an optional K, M, G or T suffix (e.g. 40G)"
        );
        assert!(parse_amount("40GB")
            .unwrap_err()
            .starts_with("invalid size '40GB': ambiguous"));
        assert!(parse_amount("none").is_err());
        assert_eq!(parse_default_quota("none"), Ok(DefaultQuota::MonitorOnly));
        assert_eq!(parse_default_quota("50%").unwrap().to_string(), "50%");
        assert!(parse_default_quota("None")
            .unwrap_err()
            .ends_with("(or \"none\" for monitor only)"));
        assert_eq!(Amount::Percent(Percent(5000)).resolve(None), None);
        assert_eq!(
            Amount::Percent(Percent(5000)).resolve(Some(ByteSize::from_bytes(80 * GIB))),
            Some(ByteSize::from_bytes(40 * GIB))
        );
    }

    #[test]
    fn durations() {
        let good: &[(&str, u64, &str)] = &[
            ("0s", 0, "0s"),
            ("0ms", 0, "0s"),
            ("100ms", 100, "100ms"),
            ("500ms", 500, "500ms"),
            ("1500ms", 1500, "1500ms"),
            ("2000ms", 2000, "2s"),
            ("2s", 2000, "2s"),
            ("90s", 90_000, "90s"),
            ("1m", 60_000, "1m"),
            ("1h", 3_600_000, "1h"),
        ];
        for &(text, ms, shown) in good {
            let d = parse_duration(text).unwrap();
            assert_eq!(d, Duration::from_millis(ms), "{text}");
            assert_eq!(format_duration(d), shown, "{text}");
        }
        for bad in [
            "",
            "2",
            "s",
            "2 s",
            " 2s",
            "2S",
            "2sec",
            "1.5s",
            "-1s",
            "1m30s",
            "2d",
            "99999999999999999999h",
            "18446744073709551615h",
        ] {
            let e = parse_duration(bad).unwrap_err();
            assert!(e.starts_with("invalid duration"), "{bad}: {e}");
        }
    }

    #[test]
    fn actions() {
        for action in Action::ALL {
            assert_eq!(parse_action(action.name(), &Action::ALL), Ok(action));
        }
        assert_eq!(
            parse_action("requeue", &[Action::Cancel, Action::WarnOnly]).unwrap_err(),
            "invalid action 'requeue': expected \"cancel\", \"warn-only\""
        );
        assert!(parse_action("Requeue", &Action::ALL).is_err());
        assert_eq!(
            parse_on_config_error("fail-closed"),
            Ok(OnConfigError::FailClosed)
        );
        assert!(parse_on_config_error("closed").is_err());
    }

    #[test]
    fn after_max() {
        for after_max in [AfterMax::Hold, AfterMax::LeaveAlone] {
            assert_eq!(parse_after_max(after_max_name(after_max)), Ok(after_max));
        }
        assert_eq!(
            parse_after_max("leave_alone").unwrap_err(),
            "invalid value 'leave_alone': expected \"hold\" or \"leave-alone\""
        );
        assert!(parse_after_max("Hold").is_err());
    }

    #[test]
    fn non_requeueable() {
        for what in [NonRequeueable::Skip, NonRequeueable::Cancel] {
            assert_eq!(parse_non_requeueable(non_requeueable_name(what)), Ok(what));
        }
        assert_eq!(
            parse_non_requeueable("requeue").unwrap_err(),
            "invalid value 'requeue': expected \"skip\" or \"cancel\""
        );
    }

    #[test]
    fn signals() {
        let table: &[(&str, Option<i32>)] = &[
            ("none", None),
            ("SIGUSR1", Some(libc::SIGUSR1)),
            ("SIGUSR2", Some(libc::SIGUSR2)),
        ];
        for &(text, number) in table {
            assert_eq!(parse_signal(text), Ok(number), "{text}");
            assert_eq!(signal_name(number), text);
        }
        for bad in ["", "None", "USR1", "sigusr1", "SIGTERM", "SIGKILL", "10"] {
            let e = parse_signal(bad).unwrap_err();
            assert!(e.starts_with("invalid signal"), "{bad}: {e}");
        }
    }
}
