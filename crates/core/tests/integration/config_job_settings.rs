//! `[frameworks]`, `[hints]`, `[prediction]`, `[metrics]`: every key, good and bad, with the line an
//! admin is sent to; the built-in settings when a table is left out.

use std::path::PathBuf;
use std::time::Duration;

use gmq_core::config::{self, render, Config, Frameworks, HintSettings, Metrics, Prediction};
use gmq_core::size::parse_size;

use crate::common::config_errors::{assert_one_error_each, errors_in, parse};

fn size(text: &str) -> gmq_core::size::ByteSize {
    parse_size(text).unwrap()
}

#[test]
fn absent_tables_are_the_built_in_settings() {
    let config = parse("[defaults]\nmax = \"40G\"\n").unwrap();
    assert_eq!(config.frameworks, Frameworks::default());
    assert_eq!(config.hints, HintSettings::default());
    assert_eq!(config.prediction, Prediction::default());
    assert_eq!(config.metrics, Metrics::default());
    let s = config.frameworks.switches;
    assert_eq!(
        (s.pytorch, s.pytorch_memory_fraction, s.jax, s.tensorflow, s.mps),
        (true, false, true, true, false)
    );
    assert_eq!(config.frameworks.context_reserve, size("512M"));
    assert_eq!(
        (config.hints.near_margin, config.hints.safety_margin),
        (0.05, 0.10)
    );
    assert_eq!(config.hints.fixed_memory, None);
    assert_eq!(config.prediction.horizon, Duration::from_secs(300));
    assert_eq!(config.prediction.signal, None);
    assert!(config.prediction.enabled);
    assert_eq!(
        config.metrics.textfile_dir,
        Some(PathBuf::from("/var/lib/prometheus/node-exporter"))
    );
    // Empty tables are the same as absent ones.
    let empty = parse("[frameworks]\n[hints]\n[prediction]\n[metrics]\n").unwrap();
    assert_eq!(empty, Config::default());
}

#[test]
fn frameworks_good() {
    let config = parse(
        "[frameworks]\npytorch = false\njax = false\ntensorflow = false\nmps = true\ncontext_reserve = \"1G\"\n",
    )
    .unwrap();
    let s = config.frameworks.switches;
    assert_eq!(
        (s.pytorch, s.pytorch_memory_fraction, s.jax, s.tensorflow, s.mps),
        (false, false, false, false, true)
    );
    assert_eq!(config.frameworks.context_reserve, size("1G"));
    let config = parse("[frameworks]\npytorch_memory_fraction = true\n").unwrap();
    assert!(config.frameworks.switches.pytorch && config.frameworks.switches.pytorch_memory_fraction);
    for (text, expected) in [("\"1\"", "1M"), ("\"300M\"", "300M"), ("\"65535M\"", "65535M")] {
        let config = parse(&format!("[frameworks]\ncontext_reserve = {text}\n")).unwrap();
        assert_eq!(config.frameworks.context_reserve, size(expected), "{text}");
    }
}

#[test]
fn frameworks_bad() {
    let table: &[(&str, &str)] = &[
        (
            "pytorch = \"true\"",
            "t.toml:3:11: [frameworks] pytorch: expected true or false, found string \"true\"",
        ),
        ("jax = 1", "t.toml:3:7: [frameworks] jax: expected true or false, found integer 1"),
        ("tensorflow = \"yes\"", "t.toml:3:14: [frameworks] tensorflow: expected true or false, found string \"yes\""),
        ("mps = 0", "t.toml:3:7: [frameworks] mps: expected true or false, found integer 0"),
        (
            "pytorch_memory_fraction = \"false\"",
            "t.toml:3:27: [frameworks] pytorch_memory_fraction: expected true or false, found string \"false\"",
        ),
        (
            "context_reserve = \"64G\"",
            "t.toml:3:19: [frameworks] context_reserve: 64G is out of range: give a size below 64G",
        ),
        (
            "context_reserve = \"0\"",
            "t.toml:3:19: [frameworks] context_reserve: invalid size '0': a size must be greater than zero",
        ),
        (
            "context_reserve = 512",
            "t.toml:3:19: [frameworks] context_reserve: expected a string such as \"512M\", found integer 512",
        ),
        (
            "context_reserve = \"512MB\"",
            "t.toml:3:19: [frameworks] context_reserve: invalid size '512MB'",
        ),
        (
            "contex_reserve = \"512M\"",
            "t.toml:3:1: [frameworks] contex_reserve: unknown field `contex_reserve`, expected one of `pytorch`, `pytorch_memory_fraction`, `jax`, `tensorflow`, `mps`, `context_reserve`",
        ),
    ];
    assert_one_error_each("frameworks", table);
}

#[test]
fn pytorch_memory_fraction_needs_pytorch() {
    let found = errors_in("frameworks", "pytorch = false\npytorch_memory_fraction = true");
    assert_eq!(
        found,
        vec![
            "t.toml:4:27: [frameworks] pytorch_memory_fraction: only applies together with pytorch: set pytorch = true, or remove this"
        ]
    );
    // Either one alone is fine, and so is both off.
    for lines in [
        "pytorch = false",
        "pytorch = false\npytorch_memory_fraction = false",
        "pytorch = true\npytorch_memory_fraction = true",
    ] {
        assert!(parse(&format!("[frameworks]\n{lines}\n")).is_ok(), "{lines}");
    }
}

#[test]
fn hints_good() {
    let table: &[(&str, f64, f64)] = &[
        ("near_margin = 0\nsafety_margin = 0", 0.0, 0.0),
        ("near_margin = 0.5\nsafety_margin = 0.49", 0.5, 0.49),
        ("near_margin = 0.02\nsafety_margin = 0.2", 0.02, 0.2),
    ];
    for &(lines, near, safety) in table {
        let config = parse(&format!("[hints]\n{lines}\n")).unwrap();
        assert_eq!(
            (config.hints.near_margin, config.hints.safety_margin),
            (near, safety),
            "{lines}"
        );
    }
    let config = parse("[hints]\nfixed_memory = \"12G\"\n").unwrap();
    assert_eq!(config.hints.fixed_memory, Some(size("12G")));
}

#[test]
fn hints_bad() {
    let table: &[(&str, &str)] = &[
        (
            "near_margin = 0.51",
            "t.toml:3:15: [hints] near_margin: 0.51 is out of range: give 0 to 0.5 (0.05 = a peak within 5% of the quota is near-OOM)",
        ),
        ("near_margin = -0.1", "t.toml:3:15: [hints] near_margin: -0.1 is out of range: give 0 to 0.5"),
        ("near_margin = nan", "t.toml:3:15: [hints] near_margin: NaN is out of range"),
        (
            "near_margin = \"5%\"",
            "t.toml:3:15: [hints] near_margin: expected a number such as 0.05 (5% of the quota), found string \"5%\"",
        ),
        (
            "safety_margin = 0.5",
            "t.toml:3:17: [hints] safety_margin: 0.5 is out of range: give at least 0 and less than 0.5 (0.1 = aim 10% below the quota)",
        ),
        ("safety_margin = 1", "t.toml:3:17: [hints] safety_margin: 1 is out of range"),
        ("safety_margin = inf", "t.toml:3:17: [hints] safety_margin: inf is out of range"),
        ("safety_margin = true", "t.toml:3:17: [hints] safety_margin: expected a number such as 0.05 (5% of the quota), found boolean true"),
        ("fixed_memory = \"banana\"", "t.toml:3:16: [hints] fixed_memory: invalid size 'banana'"),
        ("fixed_memory = 12", "t.toml:3:16: [hints] fixed_memory: expected a string such as \"80G\", found integer 12"),
        ("fixed_memory = \"none\"", "t.toml:3:16: [hints] fixed_memory: invalid size 'none'"),
    ];
    assert_one_error_each("hints", table);
}

#[test]
fn prediction_good() {
    let table: &[(&str, bool, u64, Option<i32>)] = &[
        ("enabled = false", false, 300, None),
        ("horizon = \"10s\"", true, 10, None),
        ("horizon = \"24h\"", true, 86_400, None),
        (
            "horizon = \"15m\"\nsignal = \"SIGUSR1\"",
            true,
            900,
            Some(libc::SIGUSR1),
        ),
        ("signal = \"SIGUSR2\"", true, 300, Some(libc::SIGUSR2)),
        ("signal = \"none\"", true, 300, None),
    ];
    for &(lines, enabled, horizon_s, signal) in table {
        let p = parse(&format!("[prediction]\n{lines}\n")).unwrap().prediction;
        assert_eq!(
            (p.enabled, p.horizon, p.signal),
            (enabled, Duration::from_secs(horizon_s), signal),
            "{lines}"
        );
    }
}

#[test]
fn prediction_bad() {
    let table: &[(&str, &str)] = &[
        (
            "enabled = \"yes\"",
            "t.toml:3:11: [prediction] enabled: expected true or false, found string \"yes\"",
        ),
        ("enabled = 1", "t.toml:3:11: [prediction] enabled: expected true or false, found integer 1"),
        (
            "horizon = \"9s\"",
            "t.toml:3:11: [prediction] horizon: 9s is out of range: give 10s to 24h",
        ),
        ("horizon = \"25h\"", "t.toml:3:11: [prediction] horizon: 25h is out of range: give 10s to 24h"),
        ("horizon = \"5\"", "t.toml:3:11: [prediction] horizon: invalid duration '5'"),
        ("horizon = 300", "t.toml:3:11: [prediction] horizon: expected a string such as \"5m\", found integer 300"),
        (
            "signal = \"SIGTERM\"",
            "t.toml:3:10: [prediction] signal: invalid signal 'SIGTERM': expected \"none\", \"SIGUSR1\" or \"SIGUSR2\"",
        ),
        ("signal = \"USR1\"", "t.toml:3:10: [prediction] signal: invalid signal 'USR1'"),
        ("signal = 10", "t.toml:3:10: [prediction] signal: expected a string such as \"SIGUSR1\", found integer 10"),
    ];
    assert_one_error_each("prediction", table);
}

#[test]
fn metrics() {
    let table: &[(&str, Option<&str>)] = &[
        (
            "\"/srv/node-exporter/textfiles\"",
            Some("/srv/node-exporter/textfiles"),
        ),
        ("\"none\"", None),
        ("\"\"", None),
    ];
    for &(text, expected) in table {
        let config = parse(&format!("[metrics]\ntextfile_dir = {text}\n")).unwrap();
        assert_eq!(config.metrics.textfile_dir, expected.map(PathBuf::from), "{text}");
    }
    let table: &[(&str, &str)] = &[
        (
            "textfile_dir = \"var/lib/node-exporter\"",
            "t.toml:3:16: [metrics] textfile_dir: 'var/lib/node-exporter' is not an absolute path: give one that starts with /, or \"none\" for no metrics",
        ),
        (
            "textfile_dir = \"None\"",
            "t.toml:3:16: [metrics] textfile_dir: 'None' is not an absolute path",
        ),
        (
            "textfile_dir = false",
            "t.toml:3:16: [metrics] textfile_dir: expected a string such as \"/var/lib/prometheus/node-exporter\", found boolean false",
        ),
        ("dir = \"/x\"", "t.toml:3:1: [metrics] dir: unknown field `dir`, expected `textfile_dir`"),
    ];
    assert_one_error_each("metrics", table);
}

#[test]
fn every_bad_value_in_the_new_tables_is_reported_in_file_order() {
    let text = "[frameworks]\npytorch = false\npytorch_memory_fraction = true\ncontext_reserve = \"64G\"\n\
                [hints]\nnear_margin = 0.6\nsafety_margin = \"0.1\"\n\
                [prediction]\nenabled = \"true\"\nhorizon = \"1s\"\nsignal = \"SIGKILL\"\n\
                [metrics]\ntextfile_dir = \"relative\"\n";
    let found = parse(text).unwrap_err();
    let places: Vec<&str> = found.iter().map(|e| e.split(": ").next().unwrap()).collect();
    assert_eq!(
        places,
        [
            "t.toml:3:27",
            "t.toml:4:19",
            "t.toml:6:15",
            "t.toml:7:17",
            "t.toml:9:11",
            "t.toml:10:11",
            "t.toml:11:10",
            "t.toml:13:16"
        ]
    );
}

#[test]
fn the_example_sets_the_new_tables() {
    let config = config::load("../../etc/gpu-mem-quota.toml".as_ref()).unwrap_or_else(|e| panic!("{e}"));
    // The example spells out the built-in settings (fixed_memory is site-specific: left out).
    assert_eq!(config.frameworks, Frameworks::default());
    assert_eq!(config.hints, HintSettings::default());
    assert_eq!(config.prediction, Prediction::default());
    assert_eq!(config.metrics, Metrics::default());
    // And says so in the file, not by leaving the tables out.
    let text = std::fs::read_to_string("../../etc/gpu-mem-quota.toml").unwrap();
    for line in [
        "[frameworks]",
        "pytorch = true",
        "pytorch_memory_fraction = false",
        "context_reserve = \"512M\"",
        "[hints]",
        "near_margin = 0.05",
        "[prediction]",
        "horizon = \"5m\"",
        "signal = \"none\"",
        "[metrics]",
        "textfile_dir = \"/var/lib/prometheus/node-exporter\"",
    ] {
        assert!(text.lines().any(|l| l == line), "missing {line:?}");
    }
}

#[test]
fn the_new_tables_survive_a_round_trip() {
    let text = "[frameworks]\npytorch_memory_fraction = true\nmps = true\ncontext_reserve = \"1024M\"\n\
                [hints]\nnear_margin = 0.1\nsafety_margin = 0\nfixed_memory = \"12288M\"\n\
                [prediction]\nenabled = false\nhorizon = \"90s\"\nsignal = \"SIGUSR2\"\n\
                [metrics]\ntextfile_dir = \"none\"\n";
    let config = parse(text).unwrap();
    let rendered = render(&config);
    for line in [
        "pytorch_memory_fraction = true",
        "context_reserve = \"1G\"",
        "safety_margin = 0.0",
        "fixed_memory = \"12G\"",
        "enabled = false",
        "horizon = \"90s\"",
        "signal = \"SIGUSR2\"",
        "textfile_dir = \"none\"",
    ] {
        assert!(
            rendered.lines().any(|l| l == line),
            "missing {line:?} in\n{rendered}"
        );
    }
    assert_eq!(parse(&rendered).unwrap(), config);
}
