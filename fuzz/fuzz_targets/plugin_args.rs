//! The words after the plugin's path on its plugstack.conf line (Slurm splits them on whitespace).
//!
//! Never panics; an accepted line has absolute paths, does not depend on the order of its words,
//! and written back as `key=value` words parses to the same arguments.
#![no_main]

use gmq_core::plugin_args::parse_plugin_args;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|line: &str| {
    let words: Vec<&str> = line.split_whitespace().collect();
    match parse_plugin_args(&words) {
        Ok(args) => {
            assert!(
                args.config.is_absolute() && args.watchdog.is_absolute(),
                "{line:?}"
            );
            let reversed: Vec<&str> = words.iter().rev().copied().collect();
            assert_eq!(
                parse_plugin_args(&reversed),
                Ok(args.clone()),
                "{line:?} reversed"
            );
            let written = [
                format!("config={}", args.config.display()),
                format!("on_config_error={}", args.on_config_error),
                format!("watchdog={}", args.watchdog.display()),
            ];
            assert_eq!(
                parse_plugin_args(&written),
                Ok(args),
                "{line:?} written as {written:?}"
            );
        }
        Err(e) => drop(e.to_string()),
    }
});
