//! The policy file: every setting's validation, good and bad, with the exact message an admin sees.

use std::path::{Path, PathBuf};
use std::time::Duration;

use gmq_core::config::{self, Action, Amount, Config, DefaultQuota, LoadError, OnConfigError, RuleKind};
use gmq_core::size::parse_size;

use crate::common::config_errors::parse;

fn errors(text: &str) -> Vec<String> {
    match parse(text) {
        Ok(_) => panic!("expected errors for:\n{text}"),
        Err(errors) => errors,
    }
}

fn size(text: &str) -> Amount {
    Amount::Size(parse_size(text).unwrap())
}

fn percent(text: &str) -> Amount {
    config::values::parse_amount(text).unwrap()
}

#[test]
fn an_empty_file_is_a_policy_of_built_in_settings() {
    let config = parse("").unwrap();
    assert_eq!(config, Config::default());
    assert_eq!(config.defaults.default, None);
    assert_eq!(config.defaults.max, None);
    let e = &config.enforcement;
    assert_eq!(e.interval, Duration::from_secs(2));
    assert_eq!(e.warn_threshold, 0.9);
    assert_eq!(e.grace, Duration::from_secs(10));
    assert_eq!(e.grace_over_share, 0.5);
    assert_eq!(e.action, Action::Requeue);
    assert_eq!(e.max_requeues, 3);
    assert_eq!(e.escalation, Action::RequeueHold);
    assert_eq!(e.no_requeue_action, Action::Cancel);
    assert_eq!(
        e.nvml_library,
        PathBuf::from("/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1")
    );
    assert_eq!(e.runtime_dir, PathBuf::from("/run/gpu-mem-quota"));
    assert_eq!(e.state_dir, PathBuf::from("/var/lib/gpu-mem-quota"));
    assert_eq!(e.on_config_error, OnConfigError::FailOpen);
}

#[test]
fn quota_settings_accept_sizes_percents_and_none() {
    let table: &[(&str, Option<DefaultQuota>, Option<Amount>)] = &[
        ("default = \"40G\"", Some(DefaultQuota::Amount(size("40G"))), None),
        (
            "default = \"40960\"",
            Some(DefaultQuota::Amount(size("40G"))),
            None,
        ),
        (
            "default = \"50%\"",
            Some(DefaultQuota::Amount(percent("50%"))),
            None,
        ),
        (
            "default = \"12.5%\"",
            Some(DefaultQuota::Amount(percent("12.5%"))),
            None,
        ),
        ("default = \"none\"", Some(DefaultQuota::MonitorOnly), None),
        ("max = \"80G\"", None, Some(size("80G"))),
        ("max = \"100%\"", None, Some(percent("100%"))),
        ("max = \"1T\"", None, Some(size("1T"))),
        (
            "default = \"30G\"\nmax = \"30G\"",
            Some(DefaultQuota::Amount(size("30G"))),
            Some(size("30G")),
        ),
        (
            "default = \"none\"\nmax = \"1G\"",
            Some(DefaultQuota::MonitorOnly),
            Some(size("1G")),
        ),
    ];
    for &(body, default, max) in table {
        for table_name in [
            "defaults",
            "user.alice",
            "account.physics",
            "qos.low",
            "partition.gpu",
        ] {
            let config = parse(&format!("[{table_name}]\n{body}\n")).unwrap();
            let rule = match table_name.split_once('.') {
                None => &config.defaults,
                Some((kind, name)) => {
                    let kind = RuleKind::PRECEDENCE
                        .into_iter()
                        .find(|k| k.section() == kind)
                        .unwrap();
                    config.rule(kind, name).unwrap()
                }
            };
            assert_eq!((rule.default, rule.max), (default, max), "[{table_name}] {body}");
        }
    }
}

#[test]
fn bad_quota_settings() {
    let table: &[(&str, &str)] = &[
        (
            "max = \"banana\"",
            "t.toml:2:7: [account.physics] max: invalid size 'banana': not a size; expected a whole number with an optional K, M, G or T suffix (e.g. 40G)",
        ),
        (
            "max = \"40GB\"",
            "t.toml:2:7: [account.physics] max: invalid size '40GB': ambiguous suffix 'GB'; use G or GiB (binary: 1G = 1024M, as in --mem)",
        ),
        (
            "max = \"1.5G\"",
            "t.toml:2:7: [account.physics] max: invalid size '1.5G': fractions are not supported; use a smaller unit (1536M, not 1.5G)",
        ),
        ("max = \"0\"", "t.toml:2:7: [account.physics] max: invalid size '0': a size must be greater than zero"),
        (
            "max = \"none\"",
            "t.toml:2:7: [account.physics] max: invalid size 'none': not a size; expected a whole number with an optional K, M, G or T suffix (e.g. 40G)",
        ),
        (
            "max = 40",
            "t.toml:2:7: [account.physics] max: expected a string such as \"40G\" or \"50%\", found integer 40",
        ),
        (
            "max = \"0%\"",
            "t.toml:2:7: [account.physics] max: invalid percent '0%': must be between 1% and 100% of the GPU",
        ),
        (
            "max = \"101%\"",
            "t.toml:2:7: [account.physics] max: invalid percent '101%': must be between 1% and 100% of the GPU",
        ),
        (
            "max = \"12.345%\"",
            "t.toml:2:7: [account.physics] max: invalid percent '12.345%': expected 1% to 100% with at most two decimals (e.g. \"50%\", \"12.5%\")",
        ),
        (
            "default = \"half\"",
            "t.toml:2:11: [account.physics] default: invalid size 'half': not a size; expected a whole number with an optional K, M, G or T suffix (e.g. 40G) (or \"none\" for monitor only)",
        ),
        (
            "default = true",
            "t.toml:2:11: [account.physics] default: expected a string such as \"40G\", \"50%\" or \"none\", found boolean true",
        ),
        (
            "default = \"48G\"\nmax = \"40G\"",
            "t.toml:2:11: [account.physics] default: default 48G is larger than this rule's max 40G: a job that asks for nothing would get more than it may ask for",
        ),
        (
            "default = \"60%\"\nmax = \"50%\"",
            "t.toml:2:11: [account.physics] default: default 60% is larger than this rule's max 50%: a job that asks for nothing would get more than it may ask for",
        ),
    ];
    for &(body, expected) in table {
        assert_eq!(
            errors(&format!("[account.physics]\n{body}\n")),
            vec![expected],
            "{body}"
        );
    }
}

#[test]
fn default_above_max_is_judged_with_gpu_memory_when_percents_are_mixed() {
    // Without gpu_memory, 60% and 40G cannot be compared from the file alone: the node decides.
    assert!(parse("[defaults]\ndefault = \"60%\"\nmax = \"40G\"\n").is_ok());
    assert_eq!(
        errors("[defaults]\ndefault = \"60%\"\nmax = \"40G\"\ngpu_memory = \"80G\"\n"),
        vec![
            "t.toml:2:11: [defaults] default: default 60% (48G of gpu_memory 80G) is larger than this rule's max 40G: a job that asks for nothing would get more than it may ask for"
        ]
    );
    assert!(parse("[defaults]\ndefault = \"50%\"\nmax = \"40G\"\ngpu_memory = \"80G\"\n").is_ok());
    // A default above another rule's max is not an error: that cap lowers it for the jobs it covers.
    assert!(parse("[defaults]\nmax = \"40G\"\n[partition.big]\ndefault = \"60G\"\n").is_ok());
}

#[test]
fn gpu_memory() {
    let config = parse("[defaults]\ngpu_memory = \"81559M\"\n").unwrap();
    assert_eq!(config.gpu_memory, Some(parse_size("81559M").unwrap()));
    assert_eq!(
        errors("[defaults]\ngpu_memory = \"50%\"\n"),
        vec!["t.toml:2:14: [defaults] gpu_memory: invalid size '50%': not a size; expected a whole number with an optional K, M, G or T suffix (e.g. 40G)"]
    );
}

#[test]
fn rule_names_that_can_never_match() {
    assert_eq!(
        errors("[user.\"j doe\"]\nmax = \"1G\"\n[account.\"\"]\nmax = \"1G\"\n[qos.\"a,b\"]\nmax = \"1G\"\n"),
        vec![
            "t.toml:1:7: [user.\"j doe\"]: user name contains whitespace or a control character: this rule would never match",
            "t.toml:3:10: [account.\"\"]: account name is empty: this rule would never match",
            "t.toml:5:6: [qos.\"a,b\"]: QOS name contains a comma (one table per name): this rule would never match",
        ]
    );
    // Names Slurm allows are taken as written, quoted or not.
    let config = parse("[user.\"j.doe\"]\nmax = \"1G\"\n[partition.gpu-a100_80]\nmax = \"1G\"\n").unwrap();
    assert!(config.users.contains_key("j.doe"));
    assert!(config.partitions.contains_key("gpu-a100_80"));
}

/// A setting as written, and what must hold of the parsed enforcement settings.
type Case = (&'static str, fn(&config::Enforcement) -> bool);

#[test]
fn enforcement_settings_good() {
    let table: &[Case] = &[
        ("interval = \"100ms\"", |e| {
            e.interval == Duration::from_millis(100)
        }),
        ("interval = \"500ms\"", |e| {
            e.interval == Duration::from_millis(500)
        }),
        ("interval = \"1m\"", |e| e.interval == Duration::from_secs(60)),
        ("interval = \"1h\"", |e| e.interval == Duration::from_secs(3600)),
        ("warn_threshold = 0.75", |e| e.warn_threshold == 0.75),
        ("warn_threshold = 1", |e| e.warn_threshold == 1.0),
        ("warn_threshold = 1.0", |e| e.warn_threshold == 1.0),
        ("warn_threshold = 0.01", |e| e.warn_threshold == 0.01),
        ("grace = \"0s\"", |e| e.grace == Duration::ZERO),
        ("grace = \"1500ms\"", |e| e.grace == Duration::from_millis(1500)),
        ("grace = \"1h\"", |e| e.grace == Duration::from_secs(3600)),
        ("grace_over_share = 0.5", |e| e.grace_over_share == 0.5),
        ("grace_over_share = 0.01", |e| e.grace_over_share == 0.01),
        ("grace_over_share = 1", |e| e.grace_over_share == 1.0),
        ("grace_over_share = 1.0", |e| e.grace_over_share == 1.0),
        ("action = \"requeue\"", |e| e.action == Action::Requeue),
        ("action = \"requeue-hold\"", |e| e.action == Action::RequeueHold),
        ("action = \"cancel\"", |e| e.action == Action::Cancel),
        ("action = \"warn-only\"", |e| e.action == Action::WarnOnly),
        ("max_requeues = 0", |e| e.max_requeues == 0),
        ("max_requeues = 100", |e| e.max_requeues == 100),
        ("escalation = \"requeue-hold\"", |e| {
            e.escalation == Action::RequeueHold
        }),
        ("escalation = \"cancel\"", |e| e.escalation == Action::Cancel),
        ("escalation = \"warn-only\"", |e| e.escalation == Action::WarnOnly),
        ("no_requeue_action = \"cancel\"", |e| {
            e.no_requeue_action == Action::Cancel
        }),
        ("no_requeue_action = \"warn-only\"", |e| {
            e.no_requeue_action == Action::WarnOnly
        }),
        ("requeue_near_oom = false", |e| !e.requeue_near_oom),
        ("requeue_near_oom = true", |e| e.requeue_near_oom),
        ("hard_limit = false", |e| !e.hard_limit),
        ("hard_limit = true", |e| e.hard_limit),
        ("kill_leftovers = false", |e| !e.kill_leftovers),
        ("nvml_library = \"/opt/nvidia/lib64/libnvidia-ml.so.1\"", |e| {
            e.nvml_library == Path::new("/opt/nvidia/lib64/libnvidia-ml.so.1")
        }),
        ("runtime_dir = \"/run/gmq\"", |e| {
            e.runtime_dir == Path::new("/run/gmq")
        }),
        ("state_dir = \"/srv/gmq\"", |e| {
            e.state_dir == Path::new("/srv/gmq")
        }),
        ("on_config_error = \"fail-open\"", |e| {
            e.on_config_error == OnConfigError::FailOpen
        }),
        ("on_config_error = \"fail-closed\"", |e| {
            e.on_config_error == OnConfigError::FailClosed
        }),
    ];
    for &(line, holds) in table {
        let config = parse(&format!("[enforcement]\n{line}\n")).unwrap_or_else(|e| panic!("{line}: {e:?}"));
        assert!(holds(&config.enforcement), "{line}: {:?}", config.enforcement);
    }
}

#[test]
fn enforcement_settings_bad() {
    let table: &[(&str, &str)] = &[
        ("interval = \"50ms\"", "interval: 50ms is out of range: give 100ms to 1h"),
        ("interval = \"0s\"", "interval: 0s is out of range: give 100ms to 1h"),
        ("interval = \"2h\"", "interval: 2h is out of range: give 100ms to 1h"),
        (
            "interval = \"2\"",
            "interval: invalid duration '2': expected a whole number with ms, s, m or h (e.g. \"500ms\", \"2s\", \"1m\")",
        ),
        (
            "interval = 2",
            "interval: expected a string such as \"2s\", found integer 2",
        ),
        (
            "interval = \"2 s\"",
            "interval: invalid duration '2 s': expected a whole number with ms, s, m or h (e.g. \"500ms\", \"2s\", \"1m\")",
        ),
        ("grace = \"61m\"", "grace: 61m is out of range: give 0s to 1h"),
        (
            "grace = \"-1s\"",
            "grace: invalid duration '-1s': expected a whole number with ms, s, m or h (e.g. \"500ms\", \"2s\", \"1m\")",
        ),
        (
            "grace_over_share = 0",
            "grace_over_share: 0 is not a share of the grace period: give a number greater than 0 and at most 1 (0.5 = act when over the quota for half of the last grace period)",
        ),
        (
            "grace_over_share = 1.5",
            "grace_over_share: 1.5 is not a share of the grace period: give a number greater than 0 and at most 1 (0.5 = act when over the quota for half of the last grace period)",
        ),
        (
            "grace_over_share = -0.5",
            "grace_over_share: -0.5 is not a share of the grace period: give a number greater than 0 and at most 1 (0.5 = act when over the quota for half of the last grace period)",
        ),
        (
            "grace_over_share = nan",
            "grace_over_share: NaN is not a share of the grace period: give a number greater than 0 and at most 1 (0.5 = act when over the quota for half of the last grace period)",
        ),
        (
            "grace_over_share = \"50%\"",
            "grace_over_share: expected a number such as 0.5 (act when over the quota half of the grace period), found string \"50%\"",
        ),
        (
            "grace_over_share = true",
            "grace_over_share: expected a number such as 0.5 (act when over the quota half of the grace period), found boolean true",
        ),
        (
            "warn_threshold = 0",
            "warn_threshold: 0 is not a fraction of the quota: give a number greater than 0 and at most 1 (0.9 = warn at 90%)",
        ),
        (
            "warn_threshold = 1.01",
            "warn_threshold: 1.01 is not a fraction of the quota: give a number greater than 0 and at most 1 (0.9 = warn at 90%)",
        ),
        (
            "warn_threshold = -0.5",
            "warn_threshold: -0.5 is not a fraction of the quota: give a number greater than 0 and at most 1 (0.9 = warn at 90%)",
        ),
        (
            "warn_threshold = nan",
            "warn_threshold: NaN is not a fraction of the quota: give a number greater than 0 and at most 1 (0.9 = warn at 90%)",
        ),
        (
            "warn_threshold = \"90%\"",
            "warn_threshold: expected a number such as 0.9 (warn at 90% of the quota), found string \"90%\"",
        ),
        (
            "action = \"kill\"",
            "action: invalid action 'kill': expected \"requeue\", \"requeue-hold\", \"cancel\", \"warn-only\"",
        ),
        (
            "action = \"Requeue\"",
            "action: invalid action 'Requeue': expected \"requeue\", \"requeue-hold\", \"cancel\", \"warn-only\"",
        ),
        ("max_requeues = -1", "max_requeues: -1 is out of range: give 0 to 100"),
        ("max_requeues = 101", "max_requeues: 101 is out of range: give 0 to 100"),
        ("max_requeues = 2.5", "max_requeues: expected a whole number 0 to 100, found float 2.5"),
        ("max_requeues = \"3\"", "max_requeues: expected a whole number 0 to 100, found string \"3\""),
        (
            "escalation = \"requeue\"",
            "escalation: invalid action 'requeue': expected \"requeue-hold\", \"cancel\", \"warn-only\" (escalation replaces requeueing after max_requeues)",
        ),
        (
            "no_requeue_action = \"requeue\"",
            "no_requeue_action: invalid action 'requeue': expected \"cancel\", \"warn-only\" (this action is for jobs Slurm will not requeue)",
        ),
        (
            "no_requeue_action = \"requeue-hold\"",
            "no_requeue_action: invalid action 'requeue-hold': expected \"cancel\", \"warn-only\" (this action is for jobs Slurm will not requeue)",
        ),
        (
            "requeue_near_oom = \"yes\"",
            "requeue_near_oom: expected true or false, found string \"yes\"",
        ),
        ("hard_limit = 1", "hard_limit: expected true or false, found integer 1"),
        (
            "hard_limit = \"off\"",
            "hard_limit: expected true or false, found string \"off\"",
        ),
        (
            "nvml_library = \"libnvidia-ml.so.1\"",
            "nvml_library: 'libnvidia-ml.so.1' is not an absolute path: give one that starts with /",
        ),
        ("runtime_dir = \"run/gmq\"", "runtime_dir: 'run/gmq' is not an absolute path: give one that starts with /"),
        ("state_dir = \"\"", "state_dir: '' is not an absolute path: give one that starts with /"),
        (
            "state_dir = \"/var/lib/\\u0000x\"",
            "state_dir: '/var/lib/\\0x' is not an absolute path: give one that starts with /",
        ),
        (
            "on_config_error = \"closed\"",
            "on_config_error: invalid value 'closed': expected \"fail-open\" or \"fail-closed\"",
        ),
    ];
    for &(line, expected) in table {
        let column = line.find('=').unwrap() + 3;
        let expected = format!("t.toml:2:{column}: [enforcement] {expected}");
        assert_eq!(
            errors(&format!("[enforcement]\n{line}\n")),
            vec![expected],
            "{line}"
        );
    }
}

#[test]
fn every_bad_value_is_reported_in_file_order() {
    let path = "tests/fixtures/config/many-errors.toml";
    let found = config::parse(&std::fs::read_to_string(path).unwrap(), path).unwrap_err();
    assert_eq!(found.errors.len(), 17);
    let expected = std::fs::read_to_string("tests/fixtures/config/many-errors.expected").unwrap();
    assert_eq!(format!("{found}\n"), expected);
}

#[test]
fn structural_errors_name_line_and_key() {
    let table: &[(&str, &str)] = &[
        (
            "[defaults]\nmax = \"40G\"\n\n[account.physics]\nmaxx = \"40G\"\n",
            "t.toml:5:1: [account.physics] maxx: unknown field `maxx`, expected `default` or `max`",
        ),
        (
            "[acount.physics]\nmax = \"40G\"\n",
            "t.toml:1:2: [acount.physics]: unknown field `acount`, expected one of `defaults`, `user`, `account`, `qos`, `partition`, `enforcement`, `frameworks`, `hints`, `prediction`, `metrics`, `preemption`, `scheduling`",
        ),
        (
            "[enforcement]\nintervall = \"2s\"\n",
            "t.toml:2:1: [enforcement] intervall: unknown field `intervall`, expected one of `interval`, `warn_threshold`, `grace`, `grace_over_share`, `action`, `max_requeues`, `escalation`, `no_requeue_action`, `requeue_near_oom`, `hard_limit`, `kill_leftovers`, `nvml_library`, `runtime_dir`, `state_dir`, `on_config_error`",
        ),
        (
            "[defaults]\nquota = \"40G\"\n",
            "t.toml:2:1: [defaults] quota: unknown field `quota`, expected one of `default`, `max`, `gpu_memory`",
        ),
        (
            "account.physics.maxx = \"4G\"\n",
            "t.toml:1:17: account.physics.maxx: unknown field `maxx`, expected `default` or `max`",
        ),
        (
            "[account]\nphysics = 5\n",
            "t.toml:2:11: [account] physics: invalid type: integer `5`, expected a table with default, max",
        ),
        ("[defaults]\nmax = \"40G\n", "t.toml:2:11: [defaults] max: invalid basic string"),
        ("[defaults]\nmax = \"40G\"\nmax = \"30G\"\n", "t.toml:3:1: [defaults] max: duplicate key `max` in table `defaults`"),
        ("[defaults\nmax = \"1G\"\n", "t.toml:1:10: invalid table header; expected `.`, `]`"),
    ];
    for &(text, expected) in table {
        assert_eq!(errors(text), vec![expected], "{text}");
    }
}

#[test]
fn load_tells_a_missing_file_apart() {
    match config::load("tests/fixtures/config/no-such-file.toml".as_ref()) {
        Err(LoadError::Missing { path }) => {
            assert_eq!(path, PathBuf::from("tests/fixtures/config/no-such-file.toml"))
        }
        other => panic!("{other:?}"),
    }
    let missing = config::load("/nonexistent/gpu-mem-quota.toml".as_ref()).unwrap_err();
    assert_eq!(
        missing.to_string(),
        "/nonexistent/gpu-mem-quota.toml: no such file: the GPU memory policy is missing"
    );
    assert!(matches!(
        config::load("tests/fixtures/config".as_ref()),
        Err(LoadError::Unreadable { .. })
    ));
    match config::load("tests/fixtures/config/unknown-key.toml".as_ref()) {
        Err(LoadError::Invalid(errors)) => assert_eq!(
            errors.to_string(),
            "tests/fixtures/config/unknown-key.toml:7:1: [account.physics] maximum: unknown field `maximum`, expected `default` or `max`"
        ),
        other => panic!("{other:?}"),
    }
}

#[test]
fn on_config_error_is_salvaged_from_a_broken_file() {
    let table: &[(&str, Option<OnConfigError>)] = &[
        ("", None),
        (
            "[enforcement]\non_config_error = \"fail-closed\"\n",
            Some(OnConfigError::FailClosed),
        ),
        // Valid TOML, invalid policy: read from the parsed table.
        (
            "[enforcement]\non_config_error = \"fail-closed\"\naction = \"kill\"\n",
            Some(OnConfigError::FailClosed),
        ),
        // Broken TOML: read from its line in [enforcement].
        (
            "[defaults\n[enforcement]\non_config_error = \"fail-closed\"  # refuse jobs\n",
            Some(OnConfigError::FailClosed),
        ),
        (
            "[defaults\n[enforcement]\non_config_error = \"fail-open\"\n",
            Some(OnConfigError::FailOpen),
        ),
        (
            "[defaults\n[enforcement] # what the watchdog does\non_config_error = 'fail-closed'\n",
            Some(OnConfigError::FailClosed),
        ),
        // Not in [enforcement], or not a known value: not trusted.
        ("[defaults\non_config_error = \"fail-closed\"\n", None),
        ("[enforcement]\non_config_error = \"closed\"\n", None),
        ("[enforcement]\non_config_error = 1\n", None),
    ];
    for &(text, expected) in table {
        assert_eq!(config::salvage_on_config_error(text), expected, "{text}");
    }
}
