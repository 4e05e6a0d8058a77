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
pub type Leaf = Option<Spanned<toml::Value>>;

/// Named rules of one kind (`[account.physics]`, `[account.chemistry]`), names with their place.
pub type Rules = BTreeMap<Spanned<String>, RawRule>;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "the policy's tables")]
pub struct RawConfig {
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
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table with default, max, gpu_memory")]
pub struct RawDefaults {
    pub default: Leaf,
    pub max: Leaf,
    pub gpu_memory: Leaf,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table with default, max")]
pub struct RawRule {
    pub default: Leaf,
    pub max: Leaf,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table of enforcement settings")]
pub struct RawEnforcement {
    pub interval: Leaf,
    pub warn_threshold: Leaf,
    pub grace: Leaf,
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
pub struct RawFrameworks {
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
pub struct RawHints {
    pub near_margin: Leaf,
    pub safety_margin: Leaf,
    pub fixed_memory: Leaf,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table with enabled, horizon, signal")]
pub struct RawPrediction {
    pub enabled: Leaf,
    pub horizon: Leaf,
    pub signal: Leaf,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table with textfile_dir")]
pub struct RawMetrics {
    pub textfile_dir: Leaf,
}
