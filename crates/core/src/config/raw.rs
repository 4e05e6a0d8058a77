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
    pub(crate) defaults: RawDefaults,
    #[serde(default)]
    pub(crate) user: Rules,
    #[serde(default)]
    pub(crate) account: Rules,
    #[serde(default)]
    pub(crate) qos: Rules,
    #[serde(default)]
    pub(crate) partition: Rules,
    #[serde(default)]
    pub(crate) enforcement: RawEnforcement,
    #[serde(default)]
    pub(crate) frameworks: RawFrameworks,
    #[serde(default)]
    pub(crate) hints: RawHints,
    #[serde(default)]
    pub(crate) prediction: RawPrediction,
    #[serde(default)]
    pub(crate) metrics: RawMetrics,
    #[serde(default)]
    pub(crate) preemption: RawPreemption,
    #[serde(default)]
    pub(crate) scheduling: RawScheduling,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table with default, max, gpu_memory")]
pub(crate) struct RawDefaults {
    pub(crate) default: Leaf,
    pub(crate) max: Leaf,
    pub(crate) gpu_memory: Leaf,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table with default, max")]
pub(crate) struct RawRule {
    pub(crate) default: Leaf,
    pub(crate) max: Leaf,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table of enforcement settings")]
pub(crate) struct RawEnforcement {
    pub(crate) interval: Leaf,
    pub(crate) warn_threshold: Leaf,
    pub(crate) grace: Leaf,
    pub(crate) grace_over_share: Leaf,
    pub(crate) action: Leaf,
    pub(crate) max_requeues: Leaf,
    pub(crate) escalation: Leaf,
    pub(crate) no_requeue_action: Leaf,
    pub(crate) requeue_near_oom: Leaf,
    pub(crate) hard_limit: Leaf,
    pub(crate) kill_leftovers: Leaf,
    pub(crate) nvml_library: Leaf,
    pub(crate) runtime_dir: Leaf,
    pub(crate) state_dir: Leaf,
    pub(crate) on_config_error: Leaf,
}

#[derive(Debug, Default, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a table with pytorch, pytorch_memory_fraction, jax, tensorflow, mps, context_reserve"
)]
pub(crate) struct RawFrameworks {
    pub(crate) pytorch: Leaf,
    pub(crate) pytorch_memory_fraction: Leaf,
    pub(crate) jax: Leaf,
    pub(crate) tensorflow: Leaf,
    pub(crate) mps: Leaf,
    pub(crate) context_reserve: Leaf,
}

#[derive(Debug, Default, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a table with near_margin, safety_margin, fixed_memory"
)]
pub(crate) struct RawHints {
    pub(crate) near_margin: Leaf,
    pub(crate) safety_margin: Leaf,
    pub(crate) fixed_memory: Leaf,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table with enabled, horizon, signal")]
pub(crate) struct RawPrediction {
    pub(crate) enabled: Leaf,
    pub(crate) horizon: Leaf,
    pub(crate) signal: Leaf,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table with shard_unit")]
pub(crate) struct RawScheduling {
    pub(crate) shard_unit: Leaf,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table with textfile_dir")]
pub(crate) struct RawMetrics {
    pub(crate) textfile_dir: Leaf,
}

#[derive(Debug, Default, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a table with enabled, reserve, horizon, cooldown, max_preemptions_per_job, after_max, non_requeueable, heartbeat_timeout, ranks"
)]
pub(crate) struct RawPreemption {
    pub(crate) enabled: Leaf,
    pub(crate) reserve: Leaf,
    pub(crate) horizon: Leaf,
    pub(crate) cooldown: Leaf,
    pub(crate) max_preemptions_per_job: Leaf,
    pub(crate) after_max: Leaf,
    pub(crate) non_requeueable: Leaf,
    pub(crate) heartbeat_timeout: Leaf,
    #[serde(default)]
    pub(crate) ranks: RawRanks,
}

/// Names to ranks (`{ scavenger = -10, production = 100 }`), each with its place. A value of the
/// wrong type is checked in `validate`; a `qos = 5` (not a table) is a shape error here.
pub(crate) type RankTable = BTreeMap<Spanned<String>, Spanned<toml::Value>>;

/// `[preemption.ranks]`: only the three kinds a rank can be keyed by (`super::RankKind`).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table with qos, partition, account")]
pub(crate) struct RawRanks {
    #[serde(default)]
    pub(crate) qos: RankTable,
    #[serde(default)]
    pub(crate) partition: RankTable,
    #[serde(default)]
    pub(crate) account: RankTable,
}
