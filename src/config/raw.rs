//! The policy file's shape, as serde reads it: which tables and keys exist, nothing more.
//!
//! Every value is kept as a spanned TOML value, so that `validate` can check all of them, report
//! every bad one with its line, and not stop at the first wrong type. Unknown keys and tables are
//! refused here (`deny_unknown_fields`): a misspelt key must never be silently ignored.
//! A later feature adds its key here and its check in `validate`.

use std::collections::BTreeMap;

use serde::Deserialize;
use toml::Spanned;

/// A value as written, with its place in the file.
pub(crate) type Leaf = Option<Spanned<toml::Value>>;

/// Named rules of one kind (`[account.physics]`, `[account.chemistry]`), names with their place.
pub(crate) type Rules = BTreeMap<Spanned<String>, RawRule>;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "the policy's tables")]
pub(crate) struct RawConfig {
    #[serde(default)]
    pub defaults: RawDefaults,
    #[serde(default)]
    pub user: Rules,
    #[serde(default)]
    pub account: Rules,
    #[serde(default)]
    pub qos: Rules,
    #[serde(default)]
    pub partition: Rules,
    #[serde(default)]
    pub enforcement: RawEnforcement,
    #[serde(default)]
    pub frameworks: RawFrameworks,
    #[serde(default)]
    pub hints: RawHints,
    #[serde(default)]
    pub prediction: RawPrediction,
    #[serde(default)]
    pub metrics: RawMetrics,
    #[serde(default)]
    pub preemption: RawPreemption,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table with default, max, gpu_memory")]
pub(crate) struct RawDefaults {
    pub default: Leaf,
    pub max: Leaf,
    pub gpu_memory: Leaf,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table with default, max")]
pub(crate) struct RawRule {
    pub default: Leaf,
    pub max: Leaf,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table of enforcement settings")]
pub(crate) struct RawEnforcement {
    pub interval: Leaf,
    pub warn_threshold: Leaf,
    pub grace: Leaf,
    pub grace_over_share: Leaf,
    pub action: Leaf,
    pub max_requeues: Leaf,
    pub escalation: Leaf,
    pub no_requeue_action: Leaf,
    pub nvml_library: Leaf,
    pub runtime_dir: Leaf,
    pub state_dir: Leaf,
    pub on_config_error: Leaf,
}

#[derive(Debug, Default, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a table with pytorch, pytorch_memory_fraction, jax, tensorflow, mps, context_reserve"
)]
pub(crate) struct RawFrameworks {
    pub pytorch: Leaf,
    pub pytorch_memory_fraction: Leaf,
    pub jax: Leaf,
    pub tensorflow: Leaf,
    pub mps: Leaf,
    pub context_reserve: Leaf,
}

#[derive(Debug, Default, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a table with near_margin, safety_margin, fixed_memory"
)]
pub(crate) struct RawHints {
    pub near_margin: Leaf,
    pub safety_margin: Leaf,
    pub fixed_memory: Leaf,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table with enabled, horizon, signal")]
pub(crate) struct RawPrediction {
    pub enabled: Leaf,
    pub horizon: Leaf,
    pub signal: Leaf,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table with textfile_dir")]
pub(crate) struct RawMetrics {
    pub textfile_dir: Leaf,
}

#[derive(Debug, Default, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a table with enabled, reserve, horizon, cooldown, max_preemptions_per_job, after_max, heartbeat_timeout, ranks"
)]
pub(crate) struct RawPreemption {
    pub enabled: Leaf,
    pub reserve: Leaf,
    pub horizon: Leaf,
    pub cooldown: Leaf,
    pub max_preemptions_per_job: Leaf,
    pub after_max: Leaf,
    pub heartbeat_timeout: Leaf,
    #[serde(default)]
    pub ranks: RawRanks,
}

/// Names to ranks (`{ scavenger = -10, production = 100 }`), each with its place. A value of the
/// wrong type is checked in `validate`; a `qos = 5` (not a table) is a shape error here.
pub(crate) type RankTable = BTreeMap<Spanned<String>, Spanned<toml::Value>>;

/// `[preemption.ranks]`: only the three kinds a rank can be keyed by (`super::RankKind`).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table with qos, partition, account")]
pub(crate) struct RawRanks {
    #[serde(default)]
    pub qos: RankTable,
    #[serde(default)]
    pub partition: RankTable,
    #[serde(default)]
    pub account: RankTable,
}
