//! etc/gpu-mem-quota.toml: it parses, says what the dev cluster needs, and survives a round trip.

use std::path::PathBuf;

use gmq_core::config::{self, render, Action, OnConfigError};
use gmq_core::quota::{resolve, Identity};
use gmq_core::size::parse_size;

const EXAMPLE: &str = "../../etc/gpu-mem-quota.toml";

fn example() -> config::Config {
    config::load(EXAMPLE.as_ref()).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn the_example_parses_and_holds_the_dev_cluster_policy() {
    let config = example();
    let max = |rules: &std::collections::BTreeMap<String, config::Rule>, name: &str| {
        rules[name].max.map(|m| m.to_string())
    };
    assert_eq!(max(&config.accounts, "physics").as_deref(), Some("40G"));
    assert_eq!(max(&config.users, "gmq-user").as_deref(), Some("30G"));
    assert_eq!(
        config.defaults.default.map(|d| d.to_string()).as_deref(),
        Some("50%")
    );
    assert_eq!(config.gpu_memory, Some(parse_size("80G").unwrap()));
    let e = &config.enforcement;
    assert_eq!(
        (e.action, e.escalation, e.no_requeue_action),
        (Action::Requeue, Action::RequeueHold, Action::Cancel)
    );
    assert_eq!(e.on_config_error, OnConfigError::FailOpen);
    assert_eq!(
        e.nvml_library,
        PathBuf::from("/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1")
    );
}

#[test]
fn the_example_spells_out_the_built_in_enforcement_settings() {
    // The example documents the built-in settings: changing one means changing both.
    // (Paths are site-specific: a dev cluster may point them elsewhere.)
    let example = example().enforcement;
    let built_in = config::Enforcement {
        nvml_library: example.nvml_library.clone(),
        runtime_dir: example.runtime_dir.clone(),
        state_dir: example.state_dir.clone(),
        ..config::Enforcement::default()
    };
    assert_eq!(example, built_in);
}

#[test]
fn round_trip() {
    let config = example();
    let text = render(&config);
    let again = config::parse(&text, "rendered").unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(again, config);
    assert_eq!(render(&again), text);
    // Every key the renderer writes is one the parser reads, including for odd names and values.
    let odd = "[defaults]\ndefault = \"none\"\n[user.\"j.doe\"]\nmax = \"12.5%\"\n\
               [enforcement]\nwarn_threshold = 1\ngrace = \"0s\"\nstate_dir = \"/var/lib/gmq \\\"x\\\"\"\n";
    let config = config::parse(odd, "odd").unwrap();
    assert_eq!(config::parse(&render(&config), "rendered").unwrap(), config);
}

#[test]
fn the_example_resolves_for_the_dev_cluster_jobs() {
    let config = example();
    let on_node = |user: &str, account: &str| Identity {
        user: Some(user.into()),
        account: Some(account.into()),
        partition: Some("gpu".into()),
        qos: Some("normal".into()),
    };
    let gpu = Some(parse_size("80G").unwrap());
    let sz = |t: &str| Some(parse_size(t).unwrap());
    // The test user: capped at 30G; the 50% default (40G) is lowered to that cap.
    let e = resolve(&config, &on_node("gmq-user", "physics"), None, gpu).unwrap();
    assert_eq!(e.quota, sz("30G"));
    // Another physics user: the 50% default fits the account's 40G cap.
    let e = resolve(&config, &on_node("root", "physics"), None, gpu).unwrap();
    assert_eq!(e.quota, sz("40G"));
    // chemistry has its own default.
    let e = resolve(&config, &on_node("root", "chemistry"), None, gpu).unwrap();
    assert_eq!(e.quota, sz("20G"));
}
