//! The admin policy: who may use how much GPU memory, and what happens on overuse.
//!
//! Read from a TOML file (`etc/gpu-mem-quota.toml` is the commented example; `docs/CONFIG.md` the
//! reference). [`parse`] turns the text into a validated [`Config`] or into every error it can find,
//! each placed at `file:line:column` with its key. [`load`] reads the file first; it is the only
//! function here that does I/O, so that a missing file is an error of its own kind.
//!
//! Module map: `raw` (the file's shape, for serde), `validate` (raw → checked values),
//! `values` (percent, duration and action syntax), `error` (placing errors in the file),
//! `render` (a policy back to TOML, every setting spelt out).

mod error;
mod preemption;
mod raw;
mod render;
mod validate;
pub mod values;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use error::LoadError;
pub use error::{toml_key, ConfigErrors};
pub use preemption::NonRequeueable;
pub use preemption::{AfterMax, PreemptSettings, RankKind, Ranks};
pub use render::render;
pub(crate) use values::Percent;
pub use values::{Action, Amount, DefaultQuota, OnConfigError};

use crate::size::ByteSize;

/// Where the plugin and `check-config` look when told nothing else.
pub const DEFAULT_PATH: &str = "/etc/slurm/gpu-mem-quota.toml";

/// The kinds of rule, each a table family in the file (`[user.NAME]`, ... and `[defaults]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RuleKind {
    User,
    Account,
    Qos,
    Partition,
    Defaults,
}

impl RuleKind {
    /// Most specific first: for each setting, the first kind with a matching rule that sets it wins.
    /// A user rule is about one person; an account is the group a cluster shares GPUs between;
    /// a QOS is a service level picked per job; a partition is a pool of hardware; `[defaults]`
    /// is everyone. (docs/CONFIG.md explains the choice.)
    pub const PRECEDENCE: [RuleKind; 5] = [
        RuleKind::User,
        RuleKind::Account,
        RuleKind::Qos,
        RuleKind::Partition,
        RuleKind::Defaults,
    ];

    /// The table family's name in the file.
    pub const fn section(self) -> &'static str {
        match self {
            RuleKind::User => "user",
            RuleKind::Account => "account",
            RuleKind::Qos => "qos",
            RuleKind::Partition => "partition",
            RuleKind::Defaults => "defaults",
        }
    }

    /// The word an admin uses for it in a sentence (`account 'physics'`, `QOS 'low'`).
    pub const fn noun(self) -> &'static str {
        match self {
            RuleKind::User => "user",
            RuleKind::Account => "account",
            RuleKind::Qos => "QOS",
            RuleKind::Partition => "partition",
            RuleKind::Defaults => "cluster",
        }
    }

    /// A rule's table as written in the file: `[account.physics]`, `[user."j.doe"]`, `[defaults]`.
    pub fn table(self, name: &str) -> String {
        match self {
            RuleKind::Defaults => "[defaults]".to_string(),
            kind => format!("[{}.{}]", kind.section(), error::toml_key(name)),
        }
    }
}

/// One rule: the quota of a job that asks for none, and the largest quota a job may ask for.
/// A setting left out is taken from the next rule in [`RuleKind::PRECEDENCE`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rule {
    pub default: Option<DefaultQuota>,
    pub max: Option<Amount>,
}

/// The validated policy.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Config {
    /// `[defaults]`: for every job no more specific rule covers. No default means monitor only;
    /// no max means no cap.
    pub defaults: Rule,
    /// `[defaults] gpu_memory`: the GPU size to resolve percents against where the real size is
    /// not known (the submit host). The node's real GPU size always wins.
    pub gpu_memory: Option<ByteSize>,
    pub users: BTreeMap<String, Rule>,
    pub accounts: BTreeMap<String, Rule>,
    pub(crate) qos: BTreeMap<String, Rule>,
    pub partitions: BTreeMap<String, Rule>,
    pub enforcement: Enforcement,
    /// `[frameworks]`: memory caps written into the environment of every job with a quota.
    pub frameworks: Frameworks,
    /// `[hints]`: OOM-rollback hints for a job restarted for GPU memory.
    pub hints: HintSettings,
    /// `[prediction]`: early warning from the usage trend.
    pub prediction: Prediction,
    /// `[metrics]`: Prometheus textfile-collector output.
    pub metrics: Metrics,
    /// `[preemption]`: priority preemption on a contended GPU (off unless the admin turns it on).
    pub preemption: PreemptSettings,
    /// `[scheduling]`: GPU memory as a Slurm resource (gres/shard as memory units).
    pub scheduling: Scheduling,
}

/// `[scheduling]`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Scheduling {
    /// The GPU memory one `gres/shard` stands for (gres.conf gives each GPU `size / unit` shards);
    /// `None`: shards are not memory units (they only count jobs sharing a GPU).
    pub shard_unit: Option<ByteSize>,
}

impl Scheduling {
    /// The GPU memory `shards` shards stand for; `None` when shards are not memory units.
    pub(crate) fn memory_of(&self, shards: u64) -> Option<ByteSize> {
        self.shard_unit
            .map(|unit| ByteSize::from_bytes(unit.bytes().saturating_mul(shards)))
    }
}

/// `[frameworks]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Frameworks {
    pub switches: crate::hints::framework::FrameworkSwitches,
    /// What a quota leaves aside for one process's CUDA context when it becomes a fraction.
    pub context_reserve: ByteSize,
}

impl Default for Frameworks {
    fn default() -> Self {
        Frameworks {
            switches: crate::hints::framework::FrameworkSwitches {
                pytorch: true,
                pytorch_memory_fraction: false,
                jax: true,
                tensorflow: true,
                mps: false,
            },
            context_reserve: crate::hints::framework::DEFAULT_CONTEXT_RESERVE,
        }
    }
}

/// `[hints]`.
#[derive(Debug, Clone, PartialEq)]
pub struct HintSettings {
    /// A previous run that peaked within this fraction of its quota or of the GPU counts as near-OOM.
    pub near_margin: f64,
    /// The batch scale aims this fraction below the quota.
    pub safety_margin: f64,
    /// Memory that does not scale with the batch (weights, optimizer state, CUDA context), when the
    /// site knows it; otherwise it is taken as 0 (the hints then shrink the batch more than needed).
    pub fixed_memory: Option<ByteSize>,
}

impl Default for HintSettings {
    fn default() -> Self {
        HintSettings {
            near_margin: 0.05,
            safety_margin: 0.10,
            fixed_memory: None,
        }
    }
}

/// `[prediction]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Prediction {
    pub enabled: bool,
    /// Warn when the trend crosses the quota sooner than this.
    pub horizon: Duration,
    /// Also send this signal to the job's processes on such a warning (none by default: a process
    /// that does not handle SIGUSR1 dies of it).
    pub signal: Option<i32>,
}

impl Default for Prediction {
    fn default() -> Self {
        Prediction {
            enabled: true,
            horizon: Duration::from_secs(300),
            signal: None,
        }
    }
}

/// `[metrics]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Metrics {
    /// node_exporter's textfile-collector directory; `None`: no metrics. A directory that does not
    /// exist is skipped (with one log line), so the default costs nothing where node_exporter is not.
    pub textfile_dir: Option<PathBuf>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            textfile_dir: Some(PathBuf::from("/var/lib/prometheus/node-exporter")),
        }
    }
}

impl Config {
    /// The named rules of one kind; `None` for [`RuleKind::Defaults`], which has no names.
    pub fn rules(&self, kind: RuleKind) -> Option<&BTreeMap<String, Rule>> {
        match kind {
            RuleKind::User => Some(&self.users),
            RuleKind::Account => Some(&self.accounts),
            RuleKind::Qos => Some(&self.qos),
            RuleKind::Partition => Some(&self.partitions),
            RuleKind::Defaults => None,
        }
    }

    /// The rule for `name` of this kind (`name` is ignored for [`RuleKind::Defaults`]).
    pub fn rule(&self, kind: RuleKind, name: &str) -> Option<&Rule> {
        match self.rules(kind) {
            Some(rules) => rules.get(name),
            None => Some(&self.defaults),
        }
    }
}

/// `[enforcement]`: what the watchdog does, as plain values it can take as they are.
#[derive(Debug, Clone, PartialEq)]
pub struct Enforcement {
    /// How often the job's GPU memory is sampled.
    pub interval: Duration,
    /// Warn when usage reaches this fraction of the quota, in (0, 1].
    pub warn_threshold: f64,
    /// How long usage may stay over the quota before `action` is taken (0 = at once).
    pub grace: Duration,
    /// The share of the trailing `grace` the job must have been over its quota for `action` to be
    /// taken, in (0, 1]; time-weighted by sample spacing (see `watchdog::ladder`). Below 1 a job
    /// cannot escape by dipping under its quota now and then.
    pub grace_over_share: f64,
    /// What is done to a job that stays over its quota.
    pub action: Action,
    /// After this many requeues for overuse, `escalation` is done instead of `action`.
    pub max_requeues: u32,
    /// Never `requeue` (that is the loop it ends).
    pub escalation: Action,
    /// For jobs that cannot be requeued (`--no-requeue`, `JobRequeue=0`): `cancel` or `warn-only`.
    pub no_requeue_action: Action,
    /// Self-healing: a batch job that failed (non-zero exit) after peaking near its quota or the
    /// GPU's size is requeued with near-OOM hints, within `max_requeues` (`watchdog::heal`).
    pub requeue_near_oom: bool,
    /// Whether the watchdog sets the quota as the driver's per-cgroup hard limit where the driver
    /// offers one (`watchdog::hard_limit`); `false`: the watchdog alone enforces, on every node.
    pub hard_limit: bool,
    /// At the job's end (the job epilog), kill what is still in the job's cgroups on the node
    /// (a process moved into a sub-cgroup of its own step, which Slurm's v1 proctrack never
    /// signals: it would keep its GPU memory while Slurm hands the GPU out again); `false`:
    /// report them only. Logged either way.
    pub kill_leftovers: bool,
    pub nvml_library: PathBuf,
    /// Node-local files of running jobs (root-owned).
    pub runtime_dir: PathBuf,
    /// Node-local state that outlives a job.
    pub state_dir: PathBuf,
    /// What the plugin does when this file is missing or invalid.
    pub on_config_error: OnConfigError,
}

/// The built-in enforcement settings and the limits `validate` holds settings to.
pub mod limits {
    use std::time::Duration;

    pub(crate) const INTERVAL: Duration = Duration::from_secs(2);
    pub(crate) const MIN_INTERVAL: Duration = Duration::from_millis(100);
    pub(crate) const MAX_INTERVAL: Duration = Duration::from_secs(3600);
    pub(crate) const WARN_THRESHOLD: f64 = 0.9;
    pub(crate) const GRACE: Duration = Duration::from_secs(10);
    pub(crate) const MAX_GRACE: Duration = Duration::from_secs(3600);
    pub(crate) const GRACE_OVER_SHARE: f64 = 0.5;
    pub(crate) const MAX_REQUEUES: u32 = 3;
    pub(crate) const MAX_REQUEUES_LIMIT: u32 = 100;
    pub(crate) const NVML_LIBRARY: &str = "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1";
    pub(crate) const RUNTIME_DIR: &str = "/run/gpu-mem-quota";
    pub const STATE_DIR: &str = "/var/lib/gpu-mem-quota";

    /// `[frameworks] context_reserve` must be below this (and above 0): no GPU's context is that big.
    pub(crate) const MAX_CONTEXT_RESERVE: crate::size::ByteSize = crate::size::ByteSize::from_bytes(64 << 30);
    /// `[hints] near_margin` is at most this, `safety_margin` below it: half the quota is already
    /// far from an OOM.
    pub(crate) const MAX_HINT_MARGIN: f64 = 0.5;
    pub(crate) const MIN_HORIZON: Duration = Duration::from_secs(10);
    pub(crate) const MAX_HORIZON: Duration = Duration::from_secs(24 * 3600);

    /// `[preemption] horizon`: 0 turns trend-based contention off; beyond an hour a trend says little.
    pub(crate) const MAX_PREEMPT_HORIZON: Duration = Duration::from_secs(3600);
    /// `[preemption] cooldown`: at least a second (0 would let a GPU preempt a job every sample).
    pub(crate) const MIN_PREEMPT_COOLDOWN: Duration = Duration::from_secs(1);
    pub(crate) const MAX_PREEMPT_COOLDOWN: Duration = Duration::from_secs(24 * 3600);
    pub(crate) const MAX_PREEMPTIONS_LIMIT: u32 = 100;
    /// `[preemption] heartbeat_timeout`: heartbeats are compared in whole seconds, so below 2 s a
    /// live watchdog could look stale between two of its samples.
    pub(crate) const MIN_HEARTBEAT_TIMEOUT: Duration = Duration::from_secs(2);
    pub(crate) const MAX_HEARTBEAT_TIMEOUT: Duration = Duration::from_secs(3600);
}

impl Default for Enforcement {
    fn default() -> Self {
        Enforcement {
            interval: limits::INTERVAL,
            warn_threshold: limits::WARN_THRESHOLD,
            grace: limits::GRACE,
            grace_over_share: limits::GRACE_OVER_SHARE,
            action: Action::Requeue,
            max_requeues: limits::MAX_REQUEUES,
            escalation: Action::RequeueHold,
            no_requeue_action: Action::Cancel,
            requeue_near_oom: true,
            hard_limit: true,
            kill_leftovers: true,
            nvml_library: PathBuf::from(limits::NVML_LIBRARY),
            runtime_dir: PathBuf::from(limits::RUNTIME_DIR),
            state_dir: PathBuf::from(limits::STATE_DIR),
            on_config_error: OnConfigError::FailOpen,
        }
    }
}

/// Parses and validates a policy. `file` names the file in error messages.
/// A TOML syntax error, an unknown key or a table of the wrong shape stops the parser, so it
/// comes alone; every bad value after that is reported, in file order.
pub fn parse(text: &str, file: &str) -> Result<Config, ConfigErrors> {
    let errors = |errors| ConfigErrors {
        file: file.to_string(),
        errors,
    };
    let raw: raw::RawConfig = toml::from_str(text).map_err(|e| errors(vec![error::from_toml(text, &e)]))?;
    validate::validate(raw, text).map_err(errors)
}

/// What is wrong, on this machine, with the directories that the valid policy `text` names for
/// root's files (see [`validate::directories_here`]); `file` names the file in messages.
pub fn check_directories_here(text: &str, file: &str) -> Result<(), ConfigErrors> {
    let raw: raw::RawConfig = toml::from_str(text).map_err(|e| ConfigErrors {
        file: file.to_string(),
        errors: vec![error::from_toml(text, &e)],
    })?;
    let errors = validate::directories_here(&raw, text);
    if errors.is_empty() {
        Ok(())
    } else {
        Err(ConfigErrors {
            file: file.to_string(),
            errors,
        })
    }
}

/// Reads and parses the policy file at `path`.
pub fn load(path: &Path) -> Result<Config, LoadError> {
    load_for_job(path, OnConfigError::FailOpen).map_err(|unusable| unusable.error)
}

/// A policy that cannot be used, and what the site wants done about that.
#[derive(Debug)]
pub struct Unusable {
    pub mode: OnConfigError,
    pub error: LoadError,
}

/// Reads the policy for a job. When it is missing or invalid, the mode comes from the file itself
/// where it says (even a broken one, see [`salvage_on_config_error`]), else `if_unsaid` (the
/// plugstack argument `on_config_error`, fail-open unless the admin chose otherwise).
pub fn load_for_job(path: &Path, if_unsaid: OnConfigError) -> Result<Config, Unusable> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(reason) => {
            let error = match reason.kind() {
                std::io::ErrorKind::NotFound => LoadError::Missing {
                    path: path.to_path_buf(),
                },
                _ => LoadError::Unreadable {
                    path: path.to_path_buf(),
                    reason,
                },
            };
            return Err(Unusable {
                mode: if_unsaid,
                error,
            });
        }
    };
    parse(&text, &path.display().to_string()).map_err(|errors| Unusable {
        mode: salvage_on_config_error(&text).unwrap_or(if_unsaid),
        error: LoadError::Invalid(errors),
    })
}

/// `[enforcement] on_config_error` read from a file that does not validate, so that a broken
/// policy can still be fail-closed. Trusts the setting only where it is unambiguous: from the
/// parsed TOML when the syntax is fine, otherwise from a line `on_config_error = "..."` inside
/// `[enforcement]`. `None` means not found (the plugin then uses fail-open, the default).
pub fn salvage_on_config_error(text: &str) -> Option<OnConfigError> {
    if let Ok(table) = text.parse::<toml::Table>() {
        let value = table.get("enforcement")?.get("on_config_error")?.as_str()?;
        return values::parse_on_config_error(value).ok();
    }
    let mut in_enforcement = false;
    let mut found = None;
    for line in text.lines().map(str::trim) {
        if line.starts_with('[') {
            in_enforcement = line.split('#').next().map(str::trim) == Some("[enforcement]");
        } else if in_enforcement {
            let Some((key, value)) = line.split_once('=') else {
                continue;
            };
            if key.trim() == "on_config_error" {
                let value = value.split('#').next().unwrap_or("").trim();
                let value = value.trim_matches(|c| c == '"' || c == '\'');
                found = values::parse_on_config_error(value).ok();
            }
        }
    }
    found
}
