//! The arguments on the plugin's plugstack.conf line: `key=value` words, pyxis style.
//!
//! ```text
//! required /usr/lib/x86_64-linux-gnu/slurm-wlm/gpu_mem_quota.so config=/etc/slurm/gpu-mem-quota.toml
//! ```
//! An unknown key, a repeated key or a bad value is an error that names it: a typo on this line
//! must not silently fall back to a default.

use std::fmt;
use std::path::PathBuf;

use crate::config::values::{parse_on_config_error, OnConfigError};

/// The policy file when the plugstack line names none (the same as `check-config`'s default).
pub(crate) const DEFAULT_CONFIG: &str = crate::config::DEFAULT_PATH;
const DEFAULT_WATCHDOG: &str = "/usr/local/sbin/gpu-mem-quota";

/// Every key the plugstack line accepts, with what it means (for error messages and docs).
const KEYS: &[(&str, &str)] = &[
    ("config", "absolute path of the admin policy (TOML)"),
    (
        "on_config_error",
        "fail-open or fail-closed, for a policy file that is missing or says nothing",
    ),
    (
        "watchdog",
        "absolute path of the gpu-mem-quota binary started as each job's watchdog",
    ),
];

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginArgs {
    /// The admin policy file.
    pub config: PathBuf,
    /// What to do when the policy is missing, or too broken to say itself.
    pub on_config_error: OnConfigError,
    /// The companion binary, started as `watchdog` once per job per node.
    pub watchdog: PathBuf,
}

impl Default for PluginArgs {
    fn default() -> Self {
        PluginArgs {
            config: PathBuf::from(DEFAULT_CONFIG),
            on_config_error: OnConfigError::FailOpen,
            watchdog: PathBuf::from(DEFAULT_WATCHDOG),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArgError {
    NotKeyValue(String),
    UnknownKey(String),
    Repeated(String),
    BadValue { key: String, value: String, why: String },
}

impl fmt::Display for ArgError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let known: Vec<&str> = KEYS.iter().map(|(k, _)| *k).collect();
        match self {
            ArgError::NotKeyValue(word) => {
                write!(
                    f,
                    "plugstack argument '{word}' is not key=value (known keys: {})",
                    known.join(", ")
                )
            }
            ArgError::UnknownKey(key) => {
                write!(
                    f,
                    "unknown plugstack argument '{key}' (known keys: {})",
                    known.join(", ")
                )
            }
            ArgError::Repeated(key) => write!(f, "plugstack argument '{key}' given more than once"),
            ArgError::BadValue { key, value, why } => {
                write!(f, "invalid plugstack argument {key}='{value}': {why}")
            }
        }
    }
}

impl std::error::Error for ArgError {}

/// Parses the words after the plugin's path on its plugstack.conf line.
pub fn parse_plugin_args<S: AsRef<str>>(words: &[S]) -> Result<PluginArgs, ArgError> {
    let mut args = PluginArgs::default();
    let mut seen: Vec<&str> = Vec::new();
    for word in words {
        let word = word.as_ref();
        let Some((key, value)) = word.split_once('=') else {
            return Err(ArgError::NotKeyValue(word.to_string()));
        };
        let Some(&(known, _)) = KEYS.iter().find(|(k, _)| *k == key) else {
            return Err(ArgError::UnknownKey(key.to_string()));
        };
        if seen.contains(&known) {
            return Err(ArgError::Repeated(key.to_string()));
        }
        seen.push(known);
        let bad = |why: String| ArgError::BadValue {
            key: key.to_string(),
            value: value.to_string(),
            why,
        };
        match known {
            "config" | "watchdog" => {
                if !value.starts_with('/') {
                    return Err(bad("must be an absolute path".into()));
                }
                let path = PathBuf::from(value);
                if known == "config" {
                    args.config = path;
                } else {
                    args.watchdog = path;
                }
            }
            "on_config_error" => {
                args.on_config_error = parse_on_config_error(value)
                    .map_err(|_| bad("expected fail-open or fail-closed".into()))?
            }
            _ => unreachable!("every key in KEYS is handled"),
        }
    }
    Ok(args)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_arguments_means_defaults() {
        assert_eq!(parse_plugin_args::<&str>(&[]), Ok(PluginArgs::default()));
        assert_eq!(
            PluginArgs::default().config,
            PathBuf::from("/etc/slurm/gpu-mem-quota.toml")
        );
    }

    #[test]
    fn config_path() {
        let args = parse_plugin_args(&["config=/srv/slurm/gmq.toml"]).unwrap();
        assert_eq!(args.config, PathBuf::from("/srv/slurm/gmq.toml"));
    }

    #[test]
    fn refuses_what_it_does_not_know() {
        let table: Vec<(Vec<&str>, ArgError)> = vec![
            (vec!["config"], ArgError::NotKeyValue("config".into())),
            (vec!["conifg=/x"], ArgError::UnknownKey("conifg".into())),
            (vec!["=x"], ArgError::UnknownKey("".into())),
            (
                vec!["config=/a", "config=/b"],
                ArgError::Repeated("config".into()),
            ),
            (
                vec!["config=relative.toml"],
                ArgError::BadValue {
                    key: "config".into(),
                    value: "relative.toml".into(),
                    why: "must be an absolute path".into(),
                },
            ),
            (
                vec!["config="],
                ArgError::BadValue {
                    key: "config".into(),
                    value: "".into(),
                    why: "must be an absolute path".into(),
                },
            ),
        ];
        for (words, err) in table {
            assert_eq!(parse_plugin_args(&words), Err(err), "{words:?}");
        }
    }

    #[test]
    fn messages_name_the_argument() {
        let e = parse_plugin_args(&["conifg=/x"]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "unknown plugstack argument 'conifg' (known keys: config, on_config_error, watchdog)"
        );
    }

    #[test]
    fn on_config_error() {
        let args = parse_plugin_args(&["on_config_error=fail-closed", "config=/x.toml"]).unwrap();
        assert_eq!(args.on_config_error, OnConfigError::FailClosed);
        let e = parse_plugin_args(&["on_config_error=closed"]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid plugstack argument on_config_error='closed': expected fail-open or fail-closed"
        );
    }
}
