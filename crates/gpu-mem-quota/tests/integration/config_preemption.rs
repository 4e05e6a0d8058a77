//! `[preemption]` and `[preemption.ranks]`: every key, good and bad, with the line an admin is sent
//! to; the built-in settings when the table is left out; the example; `check-config` showing it.

use std::process::Command;
use std::time::Duration;

use gmq_core::config::{self, render, Config};
use gmq_core::preempt::{AfterMax, PreemptSettings, RankKind, Ranks};

use crate::common::config_errors::{assert_one_error_each, parse};

fn ranks(entries: &[(RankKind, &str, i32)]) -> Ranks {
    entries
        .iter()
        .map(|&(kind, name, rank)| ((kind, name.to_string()), rank))
        .collect()
}

#[test]
fn absent_or_empty_is_the_built_in_settings() {
    for text in [
        "",
        "[defaults]\nmax = \"40G\"\n",
        "[preemption]\n",
        "[preemption]\n[preemption.ranks]\n",
    ] {
        let config = parse(text).unwrap();
        assert_eq!(config.preemption, PreemptSettings::default(), "{text:?}");
    }
    let p = PreemptSettings::default();
    assert!(!p.enabled);
    assert_eq!(p.reserve.to_string(), "5%");
    assert_eq!(
        (p.horizon, p.cooldown, p.heartbeat_timeout),
        (
            Duration::from_secs(30),
            Duration::from_secs(300),
            Duration::from_secs(30)
        )
    );
    assert_eq!((p.max_preemptions_per_job, p.after_max), (3, AfterMax::Hold));
    assert!(p.ranks.is_empty());
    assert_eq!(parse("[preemption]\n").unwrap(), Config::default());
}

#[test]
fn good_values() {
    let config = parse(
        "[preemption]\nenabled = true\nreserve = \"4G\"\nhorizon = \"0s\"\ncooldown = \"1s\"\n\
         max_preemptions_per_job = 0\nafter_max = \"leave-alone\"\nheartbeat_timeout = \"2s\"\n",
    )
    .unwrap();
    let p = config.preemption;
    assert!(p.enabled);
    assert_eq!(p.reserve.to_string(), "4G");
    assert_eq!(
        (p.horizon, p.cooldown, p.heartbeat_timeout),
        (Duration::ZERO, Duration::from_secs(1), Duration::from_secs(2))
    );
    assert_eq!(
        (p.max_preemptions_per_job, p.after_max),
        (0, AfterMax::LeaveAlone)
    );
    // The other ends of each range.
    let p = parse(
        "[preemption]\nreserve = \"100%\"\nhorizon = \"1h\"\ncooldown = \"24h\"\n\
         max_preemptions_per_job = 100\nafter_max = \"hold\"\nheartbeat_timeout = \"60m\"\n",
    )
    .unwrap()
    .preemption;
    assert_eq!(p.reserve.to_string(), "100%");
    assert_eq!(
        (p.horizon, p.cooldown, p.heartbeat_timeout),
        (
            Duration::from_secs(3600),
            Duration::from_secs(86_400),
            Duration::from_secs(3600)
        )
    );
    assert_eq!((p.max_preemptions_per_job, p.after_max), (100, AfterMax::Hold));
    assert_eq!(
        parse("[preemption]\nreserve = \"12.5%\"\n")
            .unwrap()
            .preemption
            .reserve
            .to_string(),
        "12.5%"
    );
}

#[test]
fn bad_values() {
    let table: &[(&str, &str)] = &[
        ("enabled = \"yes\"", "t.toml:3:11: [preemption] enabled: expected true or false, found string \"yes\""),
        ("enabled = 1", "t.toml:3:11: [preemption] enabled: expected true or false, found integer 1"),
        (
            "reserve = \"0\"",
            "t.toml:3:11: [preemption] reserve: invalid size '0': a size must be greater than zero",
        ),
        ("reserve = \"0%\"", "t.toml:3:11: [preemption] reserve: invalid percent '0%': must be between 1% and 100%"),
        ("reserve = \"101%\"", "t.toml:3:11: [preemption] reserve: invalid percent '101%'"),
        ("reserve = \"4GB\"", "t.toml:3:11: [preemption] reserve: invalid size '4GB'"),
        (
            "reserve = 5",
            "t.toml:3:11: [preemption] reserve: expected a string such as \"5%\" or \"4G\", found integer 5",
        ),
        ("horizon = \"61m\"", "t.toml:3:11: [preemption] horizon: 61m is out of range: give 0s to 1h"),
        ("horizon = \"30\"", "t.toml:3:11: [preemption] horizon: invalid duration '30'"),
        ("cooldown = \"0s\"", "t.toml:3:12: [preemption] cooldown: 0s is out of range: give 1s to 24h"),
        ("cooldown = \"999ms\"", "t.toml:3:12: [preemption] cooldown: 999ms is out of range: give 1s to 24h"),
        ("cooldown = \"25h\"", "t.toml:3:12: [preemption] cooldown: 25h is out of range: give 1s to 24h"),
        (
            "max_preemptions_per_job = 101",
            "t.toml:3:27: [preemption] max_preemptions_per_job: 101 is out of range: give 0 to 100",
        ),
        (
            "max_preemptions_per_job = -1",
            "t.toml:3:27: [preemption] max_preemptions_per_job: -1 is out of range: give 0 to 100",
        ),
        (
            "max_preemptions_per_job = \"3\"",
            "t.toml:3:27: [preemption] max_preemptions_per_job: expected a whole number 0 to 100, found string \"3\"",
        ),
        (
            "max_preemptions_per_job = 3.0",
            "t.toml:3:27: [preemption] max_preemptions_per_job: expected a whole number 0 to 100, found float 3.0",
        ),
        (
            "after_max = \"leave_alone\"",
            "t.toml:3:13: [preemption] after_max: invalid value 'leave_alone': expected \"hold\" or \"leave-alone\"",
        ),
        ("after_max = \"requeue-hold\"", "t.toml:3:13: [preemption] after_max: invalid value 'requeue-hold'"),
        (
            "heartbeat_timeout = \"1s\"",
            "t.toml:3:21: [preemption] heartbeat_timeout: 1s is out of range: give 2s to 1h",
        ),
        (
            "heartbeat_timeout = \"2h\"",
            "t.toml:3:21: [preemption] heartbeat_timeout: 2h is out of range: give 2s to 1h",
        ),
        (
            "heartbeat = \"30s\"",
            "t.toml:3:1: [preemption] heartbeat: unknown field `heartbeat`, expected one of `enabled`, `reserve`",
        ),
    ];
    assert_one_error_each("preemption", table);
}

#[test]
fn ranks_are_read_by_kind() {
    let config = parse(
        "[preemption.ranks]\n\
         qos = { scavenger = -10, normal = 0, production = 100 }\n\
         partition = { }\n\
         account = { physics = 10, chemistry = 0, \"j.lab\" = -2147483648, big = 2147483647 }\n",
    )
    .unwrap();
    assert_eq!(
        config.preemption.ranks,
        ranks(&[
            (RankKind::Qos, "scavenger", -10),
            (RankKind::Qos, "normal", 0),
            (RankKind::Qos, "production", 100),
            (RankKind::Account, "physics", 10),
            (RankKind::Account, "chemistry", 0),
            (RankKind::Account, "j.lab", i32::MIN),
            (RankKind::Account, "big", i32::MAX),
        ])
    );
    // The same table written as sub-tables, and the same name under two kinds.
    let config =
        parse("[preemption.ranks.qos]\nlow = -1\n\n[preemption.ranks.partition]\nlow = 5\n").unwrap();
    assert_eq!(
        config.preemption.ranks,
        ranks(&[(RankKind::Qos, "low", -1), (RankKind::Partition, "low", 5)])
    );
}

#[test]
fn bad_ranks() {
    let table: &[(&str, &str)] = &[
        (
            "qos = { low = \"-10\" }",
            "t.toml:3:15: [preemption.ranks] qos.low: expected a whole number such as 100 or -10 (lower ranks are preempted first), found string \"-10\"",
        ),
        ("qos = { low = 1.5 }", "t.toml:3:15: [preemption.ranks] qos.low: expected a whole number such as 100 or -10"),
        (
            "account = { big = 2147483648 }",
            "t.toml:3:19: [preemption.ranks] account.big: 2147483648 is out of range: give a whole number -2147483648 to 2147483647",
        ),
        (
            "account = { small = -2147483649 }",
            "t.toml:3:21: [preemption.ranks] account.small: -2147483649 is out of range",
        ),
        (
            "qos = { \"\" = 1 }",
            "t.toml:3:9: [preemption.ranks] qos.\"\": QOS name is empty: this rank would never apply",
        ),
        (
            "partition = { \"gpu shared\" = 1 }",
            "t.toml:3:15: [preemption.ranks] partition.\"gpu shared\": partition name contains whitespace or a control character",
        ),
        (
            "user = { alice = 1 }",
            "t.toml:3:1: [preemption.ranks] user: unknown field `user`, expected one of `qos`, `partition`, `account`",
        ),
        ("qos = 5", "t.toml:3:7: [preemption.ranks] qos: invalid type: integer `5`, expected a map"),
    ];
    assert_one_error_each("preemption.ranks", table);
}

#[test]
fn every_bad_value_is_reported_in_file_order() {
    let text = "[preemption]\nenabled = \"no\"\nreserve = \"0%\"\nhorizon = \"2h\"\ncooldown = \"0s\"\n\
                max_preemptions_per_job = 101\nafter_max = \"drop\"\nheartbeat_timeout = \"1s\"\n\
                [preemption.ranks]\nqos = { a = \"x\", b = 1, c = 3000000000 }\naccount = { \"\" = 1 }\n";
    let found = parse(text).unwrap_err();
    let places: Vec<&str> = found.iter().map(|e| e.split(": ").next().unwrap()).collect();
    assert_eq!(
        places,
        [
            "t.toml:2:11",
            "t.toml:3:11",
            "t.toml:4:11",
            "t.toml:5:12",
            "t.toml:6:27",
            "t.toml:7:13",
            "t.toml:8:21",
            "t.toml:10:13",
            "t.toml:10:29",
            "t.toml:11:13",
        ],
        "{found:#?}"
    );
}

#[test]
fn the_example_has_preemption_off_and_spelt_out() {
    let config = config::load("../../etc/gpu-mem-quota.toml".as_ref()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(config.preemption, PreemptSettings::default());
    let text = std::fs::read_to_string("../../etc/gpu-mem-quota.toml").unwrap();
    for line in [
        "[preemption]",
        "enabled = false",
        "reserve = \"5%\"",
        "after_max = \"hold\"",
        "[preemption.ranks]",
    ] {
        assert!(text.lines().any(|l| l == line), "missing {line:?}");
    }
    // Its commented-out ranks are a valid table once uncommented.
    let uncommented: String = text
        .lines()
        .map(|l| match l.strip_prefix("# ") {
            Some(rest)
                if ["qos = ", "partition = ", "account = "]
                    .iter()
                    .any(|k| rest.starts_with(k)) =>
            {
                rest
            }
            _ => l,
        })
        .map(|l| format!("{l}\n"))
        .collect();
    let ranked = config::parse(&uncommented, "uncommented").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        ranked
            .preemption
            .ranks
            .get(&(RankKind::Qos, "production".to_string())),
        Some(&100)
    );
}

#[test]
fn round_trip() {
    let text = "[preemption]\nenabled = true\nreserve = \"4096M\"\nhorizon = \"0s\"\ncooldown = \"90s\"\n\
                max_preemptions_per_job = 5\nafter_max = \"leave-alone\"\nheartbeat_timeout = \"1m\"\n\
                [preemption.ranks]\nqos = { scavenger = -10, production = 100 }\n\
                account = { \"j.lab\" = 7 }\n";
    let config = parse(text).unwrap();
    let rendered = render(&config);
    for line in [
        "[preemption]",
        "enabled = true",
        "reserve = \"4G\"",
        "horizon = \"0s\"",
        "cooldown = \"90s\"",
        "max_preemptions_per_job = 5",
        "after_max = \"leave-alone\"",
        "heartbeat_timeout = \"1m\"",
        "[preemption.ranks]",
        "qos = { production = 100, scavenger = -10 }",
        "partition = {}",
        "account = { \"j.lab\" = 7 }",
    ] {
        assert!(
            rendered.lines().any(|l| l == line),
            "missing {line:?} in\n{rendered}"
        );
    }
    assert_eq!(parse(&rendered).unwrap(), config);
}

fn check_config(policy: &str, args: &[&str]) -> String {
    let dir = tempfile::Builder::new().prefix("gmq-preempt-").tempdir().unwrap();
    let path = dir
        .path()
        .join(format!("{}.toml", args.join("_").replace(['-', ' ', '/'], "")));
    std::fs::write(&path, policy).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_gpu-mem-quota"))
        .arg("check-config")
        .arg(&path)
        .args(args)
        .output()
        .unwrap();
    drop(dir);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn explain_shows_whether_on_and_the_jobs_rank() {
    let policy = "[preemption]\nenabled = true\n[preemption.ranks]\n\
                  qos = { scavenger = -10 }\npartition = { shared = 5 }\naccount = { physics = 10 }\n";
    let table: &[(&[&str], &str, Option<&str>)] = &[
        (
            &[
                "--qos",
                "scavenger",
                "--partition",
                "shared",
                "--account",
                "physics",
            ],
            "  this job's rank       -10  <- [preemption.ranks] qos.scavenger",
            None,
        ),
        (
            &["--qos", "normal", "--partition", "shared", "--account", "physics"],
            "  this job's rank       5  <- [preemption.ranks] partition.shared",
            None,
        ),
        (
            &["--qos", "normal", "--partition", "gpu", "--account", "physics"],
            "  this job's rank       10  <- [preemption.ranks] account.physics",
            None,
        ),
        (
            &["--qos", "normal", "--partition", "gpu", "--account", "chemistry"],
            "  this job's rank       0  <- no rank names this job's QOS, partition or account",
            None,
        ),
        (
            &["--account", "physics"],
            "  this job's rank       10  <- [preemption.ranks] account.physics",
            Some("  (the rank may differ: qos, partition not given, and [preemption.ranks] names some)"),
        ),
    ];
    for &(args, rank_line, note) in table {
        let mut argv = vec!["--explain"];
        argv.extend_from_slice(args);
        let report = check_config(policy, &argv);
        for line in [Some("  enabled               yes"), Some(rank_line), note]
            .into_iter()
            .flatten()
        {
            assert!(
                report.lines().any(|l| l == line),
                "{args:?}: missing {line:?} in\n{report}"
            );
        }
        assert_eq!(note.is_some(), report.contains("may differ"), "{args:?}");
    }
    let report = check_config("", &["--explain", "--qos", "normal"]);
    assert!(
        report
            .lines()
            .any(|l| l == "  enabled               no (enabled = false)"),
        "{report}"
    );
    let printed = check_config(policy, &["--print"]);
    assert!(
        printed.lines().any(|l| l == "partition = { shared = 5 }"),
        "{printed}"
    );
}
