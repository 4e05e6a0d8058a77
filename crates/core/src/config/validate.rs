//! From the file's shape to checked values. Every value is checked and every problem is kept,
//! so that one run of `check-config` shows all of them.

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use toml::{Spanned, Value};

use super::error::{line_column, toml_key, ConfigError};
use super::raw::{
    Leaf, RankTable, RawConfig, RawDefaults, RawEnforcement, RawFrameworks, RawHints, RawMetrics,
    RawPrediction, RawPreemption, RawRanks, RawRule, RawScheduling, Rules,
};
use super::values::{
    format_duration, parse_action, parse_after_max, parse_amount, parse_default_quota, parse_duration,
    parse_non_requeueable, parse_on_config_error, parse_signal, Action, Amount, DefaultQuota,
};
use super::{
    limits, Config, Enforcement, Frameworks, HintSettings, Metrics, Prediction, PreemptSettings, RankKind,
    Ranks, Rule, RuleKind, Scheduling,
};
use crate::dir_rule::{self, Inode};
use crate::size::{parse_size, ByteSize};

pub(super) fn validate(raw: RawConfig, text: &str) -> Result<Config, Vec<ConfigError>> {
    let mut check = Checker {
        text,
        errors: Vec::new(),
    };
    let gpu_memory = check.size(&raw.defaults.gpu_memory, "[defaults] gpu_memory");
    let defaults = check.defaults(&raw.defaults, gpu_memory);
    let users = check.rules(RuleKind::User, &raw.user, gpu_memory);
    let accounts = check.rules(RuleKind::Account, &raw.account, gpu_memory);
    let qos = check.rules(RuleKind::Qos, &raw.qos, gpu_memory);
    let partitions = check.rules(RuleKind::Partition, &raw.partition, gpu_memory);
    let enforcement = check.enforcement(&raw.enforcement);
    let frameworks = check.frameworks(&raw.frameworks);
    let hints = check.hints(&raw.hints);
    let prediction = check.prediction(&raw.prediction);
    let metrics = check.metrics(&raw.metrics);
    let preemption = check.preemption(&raw.preemption);
    let scheduling = check.scheduling(&raw.scheduling);
    if !check.errors.is_empty() {
        let mut errors = check.errors;
        errors.sort_by_key(|e| (e.line, e.column));
        return Err(errors);
    }
    Ok(Config {
        defaults,
        gpu_memory,
        users,
        accounts,
        qos,
        partitions,
        enforcement,
        frameworks,
        hints,
        prediction,
        metrics,
        preemption,
        scheduling,
    })
}

struct Checker<'t> {
    text: &'t str,
    errors: Vec<ConfigError>,
}

impl Checker<'_> {
    fn report(&mut self, span: Range<usize>, key: &str, message: String) {
        let (line, column) = line_column(self.text, span.start);
        self.errors.push(ConfigError {
            line,
            column,
            key: key.to_string(),
            message,
        });
    }

    /// The value as a string, or an error naming the type found and what was expected.
    fn string<'v>(&mut self, value: &'v Spanned<Value>, key: &str, example: &str) -> Option<&'v str> {
        match value.get_ref() {
            Value::String(s) => Some(s),
            other => {
                let message = format!(
                    "expected a string such as {example}, found {} {other}",
                    other.type_str()
                );
                self.report(value.span(), key, message);
                None
            }
        }
    }

    /// Parses a string value with `parse`; `None` when absent or bad (bad ones are reported).
    fn parsed<T>(
        &mut self,
        leaf: &Leaf,
        key: &str,
        example: &str,
        parse: impl FnOnce(&str) -> Result<T, String>,
    ) -> Option<T> {
        let value = leaf.as_ref()?;
        let text = self.string(value, key, example)?;
        match parse(text) {
            Ok(parsed) => Some(parsed),
            Err(message) => {
                self.report(value.span(), key, message);
                None
            }
        }
    }

    fn size(&mut self, leaf: &Leaf, key: &str) -> Option<ByteSize> {
        self.parsed(leaf, key, "\"80G\"", |text| {
            parse_size(text).map_err(|e| format!("invalid size '{}': {e}", text.escape_debug()))
        })
    }

    fn defaults(&mut self, raw: &RawDefaults, gpu_memory: Option<ByteSize>) -> Rule {
        let rule = RawRule {
            default: raw.default.clone(),
            max: raw.max.clone(),
        };
        self.rule("[defaults]", &rule, gpu_memory)
    }

    fn rules(&mut self, kind: RuleKind, raw: &Rules, gpu_memory: Option<ByteSize>) -> BTreeMap<String, Rule> {
        let mut rules = BTreeMap::new();
        for (name, raw_rule) in raw {
            let table = kind.table(name.get_ref());
            if let Some(problem) = unmatchable(name.get_ref()) {
                let message = format!("{} name {problem}: this rule would never match", kind.noun());
                self.report(name.span(), &table, message);
            }
            let rule = self.rule(&table, raw_rule, gpu_memory);
            rules.insert(name.get_ref().clone(), rule);
        }
        rules
    }

    fn rule(&mut self, table: &str, raw: &RawRule, gpu_memory: Option<ByteSize>) -> Rule {
        let default_key = format!("{table} default");
        let default = self.parsed(&raw.default, &default_key, "\"40G\", \"50%\" or \"none\"", |t| {
            parse_default_quota(t)
        });
        let max = self.parsed(
            &raw.max,
            &format!("{table} max"),
            "\"40G\" or \"50%\"",
            parse_amount,
        );
        if let (Some(DefaultQuota::Amount(d)), Some(m), Some(span)) =
            (default, max, raw.default.as_ref().map(Spanned::span))
        {
            if let Some(message) = default_above_max(d, m, gpu_memory) {
                self.report(span, &default_key, message);
            }
        }
        Rule { default, max }
    }

    fn enforcement(&mut self, raw: &RawEnforcement) -> Enforcement {
        let built_in = Enforcement::default();
        let table = "[enforcement]";
        let key = |name: &str| format!("{table} {name}");
        let interval = self.parsed(&raw.interval, &key("interval"), "\"2s\"", |t| {
            within(parse_duration(t)?, limits::MIN_INTERVAL, limits::MAX_INTERVAL)
        });
        let grace = self.parsed(&raw.grace, &key("grace"), "\"10s\"", |t| {
            within(parse_duration(t)?, Duration::ZERO, limits::MAX_GRACE)
        });
        let grace_over_share = self.grace_over_share(&raw.grace_over_share, &key("grace_over_share"));
        let warn_threshold = self.warn_threshold(&raw.warn_threshold, &key("warn_threshold"));
        let max_requeues = self.count(
            &raw.max_requeues,
            &key("max_requeues"),
            limits::MAX_REQUEUES_LIMIT,
        );
        let action = self.parsed(&raw.action, &key("action"), "\"requeue\"", |t| {
            parse_action(t, &Action::ALL)
        });
        let escalation = self.parsed(&raw.escalation, &key("escalation"), "\"requeue-hold\"", |t| {
            let allowed = [Action::RequeueHold, Action::Cancel, Action::WarnOnly];
            parse_action(t, &allowed).map_err(|e| match t {
                "requeue" => format!("{e} (escalation replaces requeueing after max_requeues)"),
                _ => e,
            })
        });
        let no_requeue_action = self.parsed(
            &raw.no_requeue_action,
            &key("no_requeue_action"),
            "\"cancel\"",
            |t| {
                parse_action(t, &[Action::Cancel, Action::WarnOnly]).map_err(|e| {
                    if t == "requeue" || t == "requeue-hold" {
                        format!("{e} (this action is for jobs Slurm will not requeue)")
                    } else {
                        e
                    }
                })
            },
        );
        let requeue_near_oom = self.boolean(&raw.requeue_near_oom, &key("requeue_near_oom"));
        let hard_limit = self.boolean(&raw.hard_limit, &key("hard_limit"));
        let kill_leftovers = self.boolean(&raw.kill_leftovers, &key("kill_leftovers"));
        let nvml_library = self.path(&raw.nvml_library, &key("nvml_library"));
        let runtime_dir = self.parsed(
            &raw.runtime_dir,
            &key("runtime_dir"),
            "\"/run/gpu-mem-quota\"",
            dedicated_dir,
        );
        let state_dir = self.parsed(
            &raw.state_dir,
            &key("state_dir"),
            "\"/var/lib/gpu-mem-quota\"",
            dedicated_dir,
        );
        let on_config_error = self.parsed(
            &raw.on_config_error,
            &key("on_config_error"),
            "\"fail-open\"",
            parse_on_config_error,
        );
        Enforcement {
            interval: interval.unwrap_or(built_in.interval),
            warn_threshold: warn_threshold.unwrap_or(built_in.warn_threshold),
            grace: grace.unwrap_or(built_in.grace),
            grace_over_share: grace_over_share.unwrap_or(built_in.grace_over_share),
            action: action.unwrap_or(built_in.action),
            max_requeues: max_requeues.unwrap_or(built_in.max_requeues),
            escalation: escalation.unwrap_or(built_in.escalation),
            no_requeue_action: no_requeue_action.unwrap_or(built_in.no_requeue_action),
            requeue_near_oom: requeue_near_oom.unwrap_or(built_in.requeue_near_oom),
            hard_limit: hard_limit.unwrap_or(built_in.hard_limit),
            kill_leftovers: kill_leftovers.unwrap_or(built_in.kill_leftovers),
            nvml_library: nvml_library.unwrap_or(built_in.nvml_library),
            runtime_dir: runtime_dir.unwrap_or(built_in.runtime_dir),
            state_dir: state_dir.unwrap_or(built_in.state_dir),
            on_config_error: on_config_error.unwrap_or(built_in.on_config_error),
        }
    }

    /// The value as a number (a TOML integer or float), or an error naming the type found.
    fn number(&mut self, value: &Spanned<Value>, key: &str, example: &str) -> Option<f64> {
        match value.get_ref() {
            Value::Float(f) => Some(*f),
            Value::Integer(i) => Some(*i as f64),
            other => {
                let message = format!(
                    "expected a number such as {example}, found {} {other}",
                    other.type_str()
                );
                self.report(value.span(), key, message);
                None
            }
        }
    }

    /// A switch: a TOML boolean, not a string or number that looks like one.
    fn boolean(&mut self, leaf: &Leaf, key: &str) -> Option<bool> {
        let value = leaf.as_ref()?;
        match value.get_ref() {
            Value::Boolean(b) => Some(*b),
            other => {
                let message = format!("expected true or false, found {} {other}", other.type_str());
                self.report(value.span(), key, message);
                None
            }
        }
    }

    fn warn_threshold(&mut self, leaf: &Leaf, key: &str) -> Option<f64> {
        let value = leaf.as_ref()?;
        let threshold = self.number(value, key, "0.9 (warn at 90% of the quota)")?;
        if threshold > 0.0 && threshold <= 1.0 {
            return Some(threshold);
        }
        let message = format!(
            "{threshold} is not a fraction of the quota: give a number greater than 0 and at most 1 (0.9 = warn at 90%)"
        );
        self.report(value.span(), key, message);
        None
    }

    fn grace_over_share(&mut self, leaf: &Leaf, key: &str) -> Option<f64> {
        let value = leaf.as_ref()?;
        let share = self.number(
            value,
            key,
            "0.5 (act when over the quota half of the grace period)",
        )?;
        if share > 0.0 && share <= 1.0 {
            return Some(share);
        }
        let message = format!(
            "{share} is not a share of the grace period: give a number greater than 0 and at most 1 \
             (0.5 = act when over the quota for half of the last grace period)"
        );
        self.report(value.span(), key, message);
        None
    }

    /// A whole number 0 to `limit`.
    fn count(&mut self, leaf: &Leaf, key: &str, limit: u32) -> Option<u32> {
        let value = leaf.as_ref()?;
        match value.get_ref() {
            Value::Integer(n) if (0..=i64::from(limit)).contains(n) => Some(*n as u32),
            Value::Integer(n) => {
                self.report(
                    value.span(),
                    key,
                    format!("{n} is out of range: give 0 to {limit}"),
                );
                None
            }
            other => {
                let message = format!(
                    "expected a whole number 0 to {limit}, found {} {other}",
                    other.type_str()
                );
                self.report(value.span(), key, message);
                None
            }
        }
    }

    fn frameworks(&mut self, raw: &RawFrameworks) -> Frameworks {
        let built_in = Frameworks::default();
        let key = |name: &str| format!("[frameworks] {name}");
        let mut switches = built_in.switches;
        let mut set = |flag: &mut bool, leaf: &Leaf, name: &str| {
            if let Some(value) = self.boolean(leaf, &key(name)) {
                *flag = value;
            }
        };
        set(&mut switches.pytorch, &raw.pytorch, "pytorch");
        set(
            &mut switches.pytorch_memory_fraction,
            &raw.pytorch_memory_fraction,
            "pytorch_memory_fraction",
        );
        set(&mut switches.jax, &raw.jax, "jax");
        set(&mut switches.tensorflow, &raw.tensorflow, "tensorflow");
        set(&mut switches.mps, &raw.mps, "mps");
        // The fraction is one key of PyTorch's allocator config: without that config it has nowhere to go.
        if let (true, false, Some(value)) = (
            switches.pytorch_memory_fraction,
            switches.pytorch,
            raw.pytorch_memory_fraction.as_ref(),
        ) {
            let message =
                "only applies together with pytorch: set pytorch = true, or remove this".to_string();
            self.report(value.span(), &key("pytorch_memory_fraction"), message);
        }
        let context_reserve = self.parsed(&raw.context_reserve, &key("context_reserve"), "\"512M\"", |t| {
            let size = parse_size(t).map_err(|e| format!("invalid size '{}': {e}", t.escape_debug()))?;
            if size >= limits::MAX_CONTEXT_RESERVE {
                return Err(format!(
                    "{size} is out of range: give a size below {}",
                    limits::MAX_CONTEXT_RESERVE
                ));
            }
            Ok(size)
        });
        Frameworks {
            switches,
            context_reserve: context_reserve.unwrap_or(built_in.context_reserve),
        }
    }

    fn hints(&mut self, raw: &RawHints) -> HintSettings {
        let built_in = HintSettings::default();
        let max = limits::MAX_HINT_MARGIN;
        let near_margin = self.margin(&raw.near_margin, "[hints] near_margin", |m| {
            (0.0..=max).contains(&m).then_some(()).ok_or_else(|| {
                format!(
                    "{m} is out of range: give 0 to {max} (0.05 = a peak within 5% of the quota is near-OOM)"
                )
            })
        });
        let safety_margin = self.margin(&raw.safety_margin, "[hints] safety_margin", |m| {
            (0.0..max).contains(&m).then_some(()).ok_or_else(|| {
                format!(
                    "{m} is out of range: give at least 0 and less than {max} (0.1 = aim 10% below the quota)"
                )
            })
        });
        let fixed_memory = self.size(&raw.fixed_memory, "[hints] fixed_memory");
        HintSettings {
            near_margin: near_margin.unwrap_or(built_in.near_margin),
            safety_margin: safety_margin.unwrap_or(built_in.safety_margin),
            fixed_memory: fixed_memory.or(built_in.fixed_memory),
        }
    }

    /// A fraction of the quota, checked by `in_range` (which says the allowed range when it refuses).
    fn margin(
        &mut self,
        leaf: &Leaf,
        key: &str,
        in_range: impl Fn(f64) -> Result<(), String>,
    ) -> Option<f64> {
        let value = leaf.as_ref()?;
        let margin = self.number(value, key, "0.05 (5% of the quota)")?;
        match in_range(margin) {
            Ok(()) => Some(margin),
            Err(message) => {
                self.report(value.span(), key, message);
                None
            }
        }
    }

    fn prediction(&mut self, raw: &RawPrediction) -> Prediction {
        let built_in = Prediction::default();
        let enabled = self.boolean(&raw.enabled, "[prediction] enabled");
        let horizon = self.parsed(&raw.horizon, "[prediction] horizon", "\"5m\"", |t| {
            within(parse_duration(t)?, limits::MIN_HORIZON, limits::MAX_HORIZON)
        });
        let signal = self.parsed(&raw.signal, "[prediction] signal", "\"SIGUSR1\"", parse_signal);
        Prediction {
            enabled: enabled.unwrap_or(built_in.enabled),
            horizon: horizon.unwrap_or(built_in.horizon),
            signal: signal.unwrap_or(built_in.signal),
        }
    }

    fn metrics(&mut self, raw: &RawMetrics) -> Metrics {
        let example = "\"/var/lib/prometheus/node-exporter\"";
        let textfile_dir = self.parsed(
            &raw.textfile_dir,
            "[metrics] textfile_dir",
            example,
            |t| match t {
                "" | "none" => Ok(None),
                t => absolute_path(t)
                    .map(Some)
                    .map_err(|e| format!("{e}, or \"none\" for no metrics")),
            },
        );
        Metrics {
            textfile_dir: textfile_dir.unwrap_or(Metrics::default().textfile_dir),
        }
    }

    fn scheduling(&mut self, raw: &RawScheduling) -> Scheduling {
        let shard_unit = self.parsed(&raw.shard_unit, "[scheduling] shard_unit", "\"1G\"", |text| {
            let size =
                parse_size(text).map_err(|e| format!("invalid size '{}': {e}", text.escape_debug()))?;
            if size.bytes() < 1 << 20 || size.bytes() > 1 << 40 {
                return Err(format!(
                    "{size} is out of range: give 1M to 1T (one shard's GPU memory)"
                ));
            }
            Ok(size)
        });
        Scheduling { shard_unit }
    }

    fn preemption(&mut self, raw: &RawPreemption) -> PreemptSettings {
        let built_in = PreemptSettings::default();
        let key = |name: &str| format!("[preemption] {name}");
        let enabled = self.boolean(&raw.enabled, &key("enabled"));
        // parse_amount refuses 0 and 0%: a reserve of nothing would never see contention coming.
        let reserve = self.parsed(&raw.reserve, &key("reserve"), "\"5%\" or \"4G\"", parse_amount);
        let duration = |min: Duration, max: Duration| move |t: &str| within(parse_duration(t)?, min, max);
        let horizon = self.parsed(
            &raw.horizon,
            &key("horizon"),
            "\"30s\"",
            duration(Duration::ZERO, limits::MAX_PREEMPT_HORIZON),
        );
        let cooldown = self.parsed(
            &raw.cooldown,
            &key("cooldown"),
            "\"5m\"",
            duration(limits::MIN_PREEMPT_COOLDOWN, limits::MAX_PREEMPT_COOLDOWN),
        );
        let max_preemptions_per_job = self.count(
            &raw.max_preemptions_per_job,
            &key("max_preemptions_per_job"),
            limits::MAX_PREEMPTIONS_LIMIT,
        );
        let after_max = self.parsed(&raw.after_max, &key("after_max"), "\"hold\"", parse_after_max);
        let non_requeueable = self.parsed(
            &raw.non_requeueable,
            &key("non_requeueable"),
            "\"skip\"",
            parse_non_requeueable,
        );
        let heartbeat_timeout = self.parsed(
            &raw.heartbeat_timeout,
            &key("heartbeat_timeout"),
            "\"30s\"",
            duration(limits::MIN_HEARTBEAT_TIMEOUT, limits::MAX_HEARTBEAT_TIMEOUT),
        );
        let ranks = self.ranks(&raw.ranks);
        PreemptSettings {
            enabled: enabled.unwrap_or(built_in.enabled),
            reserve: reserve.unwrap_or(built_in.reserve),
            horizon: horizon.unwrap_or(built_in.horizon),
            cooldown: cooldown.unwrap_or(built_in.cooldown),
            max_preemptions_per_job: max_preemptions_per_job.unwrap_or(built_in.max_preemptions_per_job),
            after_max: after_max.unwrap_or(built_in.after_max),
            non_requeueable: non_requeueable.unwrap_or(built_in.non_requeueable),
            heartbeat_timeout: heartbeat_timeout.unwrap_or(built_in.heartbeat_timeout),
            ranks,
        }
    }

    /// `[preemption.ranks]`: every name and rank checked; the good ones kept.
    fn ranks(&mut self, raw: &RawRanks) -> Ranks {
        let mut ranks = Ranks::new();
        for kind in RankKind::ALL {
            let table: &RankTable = match kind {
                RankKind::Qos => &raw.qos,
                RankKind::Partition => &raw.partition,
                RankKind::Account => &raw.account,
            };
            let noun = match kind {
                RankKind::Qos => "QOS",
                RankKind::Partition => "partition",
                RankKind::Account => "account",
            };
            for (name, value) in table {
                let key = format!("[preemption.ranks] {}.{}", kind.name(), toml_key(name.get_ref()));
                if let Some(problem) = unmatchable(name.get_ref()) {
                    let message = format!("{noun} name {problem}: this rank would never apply");
                    self.report(name.span(), &key, message);
                    continue;
                }
                let rank = match value.get_ref() {
                    Value::Integer(n) => i32::try_from(*n).map_err(|_| {
                        format!(
                            "{n} is out of range: give a whole number {} to {}",
                            i32::MIN,
                            i32::MAX
                        )
                    }),
                    other => Err(format!(
                        "expected a whole number such as 100 or -10 (lower ranks are preempted first), found {} {other}",
                        other.type_str()
                    )),
                };
                match rank {
                    Ok(rank) => {
                        ranks.insert((kind, name.get_ref().clone()), rank);
                    }
                    Err(message) => self.report(value.span(), &key, message),
                }
            }
        }
        ranks
    }

    fn path(&mut self, leaf: &Leaf, key: &str) -> Option<PathBuf> {
        self.parsed(leaf, key, "\"/run/gpu-mem-quota\"", absolute_path)
    }
}

fn absolute_path(text: &str) -> Result<PathBuf, String> {
    if text.starts_with('/') && !text.contains('\0') {
        Ok(PathBuf::from(text))
    } else {
        Err(format!(
            "'{}' is not an absolute path: give one that starts with /",
            text.escape_debug()
        ))
    }
}

/// Directories a node shares with other programs or users. root creates, replaces and removes
/// files in `runtime_dir` and `state_dir`, and the watchdog refuses a runtime directory that others
/// can write: each must be a directory of its own.
const SHARED_DIRS: &[&str] = &[
    "/",
    "/tmp",
    "/var/tmp",
    "/dev",
    "/dev/shm",
    "/run",
    "/run/shm",
    "/run/user",
    "/run/lock",
    "/var",
    "/var/run",
    "/var/lock",
    "/var/lib",
    "/var/log",
    "/var/spool",
    "/var/cache",
    "/var/mail",
    "/etc",
    "/usr",
    "/usr/local",
    "/opt",
    "/srv",
    "/home",
    "/root",
    "/mnt",
    "/media",
    "/boot",
    "/proc",
    "/sys",
];

/// An absolute path that names a directory of its own: not a well-known shared directory, not a
/// user's `/run/user/UID`, no `..`.
fn dedicated_dir(text: &str) -> Result<PathBuf, String> {
    let path = absolute_path(text)?;
    if path.components().any(|c| c == Component::ParentDir) {
        return Err(format!(
            "'{}' contains '..': name the directory itself",
            text.escape_debug()
        ));
    }
    // Without "." and repeated or trailing slashes: "/tmp/" and "/tmp/." are /tmp.
    let plain: PathBuf = path.components().collect();
    let shared = SHARED_DIRS.iter().any(|d| plain == Path::new(d)) || plain.starts_with("/run/user");
    if shared {
        return Err(format!(
            "'{}' is a directory shared with other programs or users: name one of its own, such \
             as /run/gpu-mem-quota",
            text.escape_debug()
        ));
    }
    Ok(path)
}

/// What is wrong, on this machine, with the directories the policy names for root's files
/// (`runtime_dir`, `state_dir`, `[metrics] textfile_dir`), one error per key at the key's value.
/// For `check-config` only: the policy itself is valid anywhere, but this machine's filesystem
/// may make a directory unusable (the watchdog then refuses it, or its metrics are off).
pub(super) fn directories_here(raw: &RawConfig, text: &str) -> Vec<ConfigError> {
    let mut check = Checker {
        text,
        errors: Vec::new(),
    };
    let keys = [
        (&raw.enforcement.runtime_dir, "[enforcement] runtime_dir", true),
        (&raw.enforcement.state_dir, "[enforcement] state_dir", true),
        (&raw.metrics.textfile_dir, "[metrics] textfile_dir", false),
    ];
    for (leaf, key, with_parents) in keys {
        let Some(value) = leaf.as_ref() else { continue };
        let Some(dir) = value.get_ref().as_str() else {
            continue;
        };
        if let Some(message) = directory_problem(Path::new(dir), with_parents) {
            check.report(value.span(), key, message);
        }
    }
    check.errors
}

/// The owner the policy's directories must have, whoever runs `check-config`: the watchdog is
/// root.
const ROOT: u32 = 0;

/// Why `dir` cannot hold root's files on this machine, if it cannot: when it exists, it must pass
/// crate::dir_rule's rule for [`ROOT`], the one the watchdog applies; with `with_parents`, each
/// existing directory above it must pass it too (else someone could make it first, or move it
/// away).
fn directory_problem(dir: &Path, with_parents: bool) -> Option<String> {
    match std::fs::symlink_metadata(dir) {
        Ok(meta) if meta.file_type().is_symlink() => {
            return Some(format!(
                "{} is a symlink on this machine: name the directory itself",
                dir.display()
            ))
        }
        Ok(meta) => {
            if let Some(why) = dir_rule::refusal(Inode::from(&meta), ROOT) {
                return Some(format!("{} {why} on this machine", dir.display()));
            }
        }
        Err(_) => {}
    }
    if !with_parents {
        return None;
    }
    // The directories above, as the path resolves them (a symlinked /var/run is /run).
    dir.ancestors().skip(1).find_map(|parent| {
        let meta = std::fs::metadata(parent).ok()?;
        dir_rule::refusal(Inode::from(&meta), ROOT).map(|why| {
            format!(
                "{} is under {}, which {why} on this machine",
                dir.display(),
                parent.display()
            )
        })
    })
}

/// Why a rule's name can never equal a Slurm user, account, QOS or partition name, if it cannot.
fn unmatchable(name: &str) -> Option<&'static str> {
    if name.is_empty() {
        Some("is empty")
    } else if name.chars().any(|c| c.is_whitespace() || c.is_control()) {
        Some("contains whitespace or a control character")
    } else if name.contains(',') {
        Some("contains a comma (one table per name)")
    } else {
        None
    }
}

/// The message when a rule's default is larger than its own max, where that can be told from the
/// file alone (both sizes, both percents, or percents resolved against `gpu_memory`).
fn default_above_max(default: Amount, max: Amount, gpu_memory: Option<ByteSize>) -> Option<String> {
    let above = match (default, max) {
        (Amount::Percent(d), Amount::Percent(m)) => d > m,
        _ => match (default.resolve(gpu_memory), max.resolve(gpu_memory)) {
            (Some(d), Some(m)) => d > m,
            _ => false,
        },
    };
    let shown = |amount: Amount| match (amount, gpu_memory) {
        (Amount::Percent(p), Some(total)) => format!("{p} ({} of gpu_memory {total})", p.of(total)),
        _ => amount.to_string(),
    };
    above.then(|| {
        format!(
            "default {} is larger than this rule's max {}: a job that asks for nothing would get more than it may ask for",
            shown(default),
            shown(max)
        )
    })
}

fn within(d: Duration, min: Duration, max: Duration) -> Result<Duration, String> {
    if d < min || d > max {
        return Err(format!(
            "{} is out of range: give {} to {}",
            format_duration(d),
            format_duration(min),
            format_duration(max)
        ));
    }
    Ok(d)
}
