//! The admin policy file (TOML), and the salvage of `on_config_error` from a broken one.
//!
//! Never panics; a policy that parses renders (`check-config --print`) to text that parses back
//! to the same policy; and the salvaged `on_config_error` of a valid file is the one it set.
#![no_main]

use gmq_core::config::{self, render, OnConfigError};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    let salvaged = config::salvage_on_config_error(text);
    match config::parse(text, "fuzz.toml") {
        Ok(policy) => {
            let rendered = render(&policy);
            let again = config::parse(&rendered, "rendered.toml")
                .unwrap_or_else(|e| panic!("{text:?} rendered to\n{rendered}\nwhich fails: {e}"));
            assert_eq!(again, policy, "{text:?} rendered to\n{rendered}");
            assert_eq!(render(&again), rendered);
            let set = policy.enforcement.on_config_error;
            assert!(
                salvaged == Some(set) || (salvaged.is_none() && set == OnConfigError::FailOpen),
                "{text:?}: parsed {set:?}, salvaged {salvaged:?}"
            );
        }
        Err(errors) => drop(errors.to_string()),
    }
});
