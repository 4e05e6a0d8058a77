//! Quota resolution: precedence, percents, unknown identity on the submit host, refusals.

use gmq_core::config::{self, Config, RuleKind};
use gmq_core::quota::{resolve, Effective, GpuSize, Identity, OverCap, QuotaFrom, Setting, Unchecked};
use gmq_core::size::{parse_size, ByteSize};

fn policy(text: &str) -> Config {
    config::parse(text, "t.toml").unwrap_or_else(|e| panic!("{e}"))
}

fn precedence_policy() -> Config {
    policy(&std::fs::read_to_string("tests/fixtures/config/precedence.toml").unwrap())
}

fn sz(text: &str) -> ByteSize {
    parse_size(text).unwrap()
}

/// `"user/account/qos/partition"`, `-` for not known here.
fn who(spec: &str) -> Identity {
    let parts: Vec<Option<String>> = spec
        .split('/')
        .map(|p| (p != "-").then(|| p.to_string()))
        .collect();
    let [user, account, qos, partition] = <[Option<String>; 4]>::try_from(parts).unwrap();
    Identity {
        user,
        account,
        partition,
        qos,
    }
}

/// The quota as a size or "none", the table that supplied it, the cap and its table.
fn summary(e: &Effective) -> (String, String, String, String) {
    let quota = e.quota.map_or("none".to_string(), |q| q.to_string());
    let from = match &e.quota_from {
        QuotaFrom::Request => "request".to_string(),
        QuotaFrom::Default { rule, .. } => rule.table(),
        QuotaFrom::DefaultCapped { rule, .. } => format!("{} capped", rule.table()),
        QuotaFrom::NoDefault => "nothing".to_string(),
    };
    let cap = e.cap.as_ref().map_or("none".to_string(), |c| c.size.to_string());
    let cap_from = e.cap.as_ref().map_or("-".to_string(), |c| c.rule.table());
    (quota, from, cap, cap_from)
}

#[test]
fn most_specific_rule_wins_for_each_setting_on_its_own() {
    let config = precedence_policy();
    let gpu = Some(sz("80G"));
    // (identity user/account/qos/partition, quota, from, cap, cap from)
    let table: &[(&str, &str, &str, &str, &str)] = &[
        ("nobody/none/none/none", "10G", "[defaults]", "20G", "[defaults]"),
        (
            "nobody/none/none/gpu",
            "11G",
            "[partition.gpu]",
            "21G",
            "[partition.gpu]",
        ),
        ("nobody/none/high/gpu", "12G", "[qos.high]", "22G", "[qos.high]"),
        // The account sets only max: the default still comes from the QOS.
        (
            "nobody/physics/high/gpu",
            "12G",
            "[qos.high]",
            "40G",
            "[account.physics]",
        ),
        // The account sets only default: the max still comes from the QOS.
        (
            "nobody/chemistry/high/gpu",
            "13G",
            "[account.chemistry]",
            "22G",
            "[qos.high]",
        ),
        (
            "alice/physics/high/gpu",
            "14G",
            "[user.alice]",
            "24G",
            "[user.alice]",
        ),
        (
            "alice/chemistry/none/none",
            "14G",
            "[user.alice]",
            "24G",
            "[user.alice]",
        ),
        // bob sets only max: default from the account, then QOS, partition, defaults.
        (
            "bob/chemistry/high/gpu",
            "13G",
            "[account.chemistry]",
            "60G",
            "[user.bob]",
        ),
        ("bob/physics/high/gpu", "12G", "[qos.high]", "60G", "[user.bob]"),
        (
            "bob/physics/none/gpu",
            "11G",
            "[partition.gpu]",
            "60G",
            "[user.bob]",
        ),
        ("bob/physics/none/none", "10G", "[defaults]", "60G", "[user.bob]"),
        // "none" is a default like any other: a more specific "none" means monitor only.
        (
            "nobody/none/monitor/gpu",
            "none",
            "[qos.monitor]",
            "21G",
            "[partition.gpu]",
        ),
        (
            "nobody/chemistry/monitor/gpu",
            "13G",
            "[account.chemistry]",
            "21G",
            "[partition.gpu]",
        ),
        // A percent resolves against the GPU: 50% of 80G; a percent cap: 100% of 80G.
        (
            "nobody/vision/none/big",
            "40G",
            "[account.vision]",
            "80G",
            "[partition.big]",
        ),
        // A default above the cap that applies is lowered to it.
        (
            "nobody/vision/none/none",
            "20G",
            "[account.vision] capped",
            "20G",
            "[defaults]",
        ),
        (
            "nobody/vision/high/none",
            "22G",
            "[account.vision] capped",
            "22G",
            "[qos.high]",
        ),
    ];
    for &(identity, quota, from, cap, cap_from) in table {
        let effective = resolve(&config, &who(identity), None, gpu).unwrap();
        assert_eq!(
            summary(&effective),
            (quota.into(), from.into(), cap.into(), cap_from.into()),
            "{identity}"
        );
        assert!(effective.is_final(), "{identity}: {:?}", effective.unchecked);
        assert_eq!(effective.gpu_size, Some(GpuSize::Measured(sz("80G"))));
    }
}

#[test]
fn requests_are_checked_against_the_cap() {
    let config = precedence_policy();
    let gpu = Some(sz("80G"));
    // (identity, request, outcome: the quota, or the refusal message)
    let table: &[(&str, &str, Result<&str, &str>)] = &[
        ("nobody/none/none/none", "20G", Ok("20G")),
        (
            "nobody/none/none/none",
            "20481M",
            Err("--gpu-mem-quota=20481M exceeds the 20G cap for this cluster (defaults.max)"),
        ),
        ("nobody/physics/none/none", "40G", Ok("40G")),
        (
            "nobody/physics/none/none",
            "60G",
            Err("--gpu-mem-quota=60G exceeds the 40G cap for account 'physics'"),
        ),
        (
            "alice/physics/none/none",
            "30G",
            Err("--gpu-mem-quota=30G exceeds the 24G cap for user 'alice'"),
        ),
        ("bob/physics/none/none", "60G", Ok("60G")),
        (
            "nobody/none/high/none",
            "23G",
            Err("--gpu-mem-quota=23G exceeds the 22G cap for QOS 'high'"),
        ),
        (
            "nobody/none/none/gpu",
            "22G",
            Err("--gpu-mem-quota=22G exceeds the 21G cap for partition 'gpu'"),
        ),
        ("nobody/none/none/big", "80G", Ok("80G")),
        (
            "nobody/none/none/big",
            "81G",
            Err("--gpu-mem-quota=81G exceeds the 80G cap for partition 'big'"),
        ),
        // A request below the default is the user's choice.
        ("alice/none/none/none", "1G", Ok("1G")),
    ];
    for &(identity, request, outcome) in table {
        let result = resolve(&config, &who(identity), Some(sz(request)), gpu);
        match (result, outcome) {
            (Ok(e), Ok(quota)) => {
                assert_eq!(e.quota, Some(sz(quota)), "{identity} {request}");
                assert_eq!(e.quota_from, QuotaFrom::Request);
            }
            (Err(refusal), Err(message)) => assert_eq!(refusal.to_string(), message, "{identity} {request}"),
            (result, _) => panic!("{identity} {request}: {result:?}"),
        }
    }
}

#[test]
fn the_issue_example_physics_40g_test_user_30g() {
    let config = policy(&std::fs::read_to_string("../../etc/gpu-mem-quota.toml").unwrap());
    let user = Identity {
        user: Some("gmq-user".into()),
        ..Identity::default()
    };
    // On the submit host the account may be unknown; the user rule decides anyway.
    let refusal: OverCap = resolve(&config, &user, Some(sz("35G")), None).unwrap_err();
    assert_eq!(
        refusal.to_string(),
        "--gpu-mem-quota=35G exceeds the 30G cap for user 'gmq-user'"
    );
    assert_eq!(
        resolve(&config, &user, Some(sz("30G")), None).unwrap().quota,
        Some(sz("30G"))
    );
    let physicist = Identity {
        user: Some("root".into()),
        account: Some("physics".into()),
        partition: Some("gpu".into()),
        qos: Some("normal".into()),
    };
    assert_eq!(
        resolve(&config, &physicist, Some(sz("60G")), None)
            .unwrap_err()
            .to_string(),
        "--gpu-mem-quota=60G exceeds the 40G cap for account 'physics'"
    );
    // No option: the 50% default, resolved on the node against the GPU's real size.
    let node = resolve(&config, &physicist, None, Some(sz("81559M"))).unwrap();
    assert_eq!(node.quota, Some(sz("40779M")));
    assert!(node.is_final());
}

#[test]
fn percents_resolve_against_the_real_gpu_then_gpu_memory_else_not_at_all() {
    let text = "[defaults]\ndefault = \"50%\"\nmax = \"75%\"\n";
    let with_fallback = policy(&format!("{text}gpu_memory = \"80G\"\n"));
    let without = policy(text);
    let anyone = who("u/a/q/p");

    let node = resolve(&with_fallback, &anyone, None, Some(sz("40G"))).unwrap();
    assert_eq!(
        (node.quota, node.gpu_size),
        (Some(sz("20G")), Some(GpuSize::Measured(sz("40G"))))
    );
    assert_eq!(node.cap.unwrap().size, sz("30G"));

    let login = resolve(&with_fallback, &anyone, None, None).unwrap();
    assert_eq!(
        (login.quota, login.gpu_size),
        (Some(sz("40G")), Some(GpuSize::Assumed(sz("80G"))))
    );

    let unknown = resolve(&without, &anyone, None, None).unwrap();
    assert_eq!(
        (unknown.quota, unknown.cap.clone(), unknown.gpu_size),
        (None, None, None)
    );
    assert_eq!(
        unknown
            .unchecked
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>(),
        vec![
            "[defaults] max = \"75%\" needs the GPU's size, which is not known here",
            "[defaults] default = \"50%\" needs the GPU's size, which is not known here",
        ]
    );
    // An unresolvable cap refuses nothing: the node checks.
    let request = resolve(&without, &anyone, Some(sz("1T")), None).unwrap();
    assert_eq!(request.quota, Some(sz("1T")));
    assert!(!request.is_final());
    // Rounded down to whole MiB.
    let odd = resolve(
        &without,
        &anyone,
        None,
        Some(ByteSize::from_bytes(81559 * (1 << 20) + 12345)),
    )
    .unwrap();
    assert_eq!(odd.quota, Some(sz("40779M")));
}

#[test]
fn unknown_identity_on_the_submit_host_defers_to_the_node() {
    let config = precedence_policy();
    // Account unknown, and account rules set max: 60G over the 20G cluster cap is not refused here.
    let login = resolve(&config, &who("nobody/-/-/-"), Some(sz("30G")), Some(sz("80G"))).unwrap();
    assert_eq!(login.quota, Some(sz("30G")));
    assert_eq!(login.cap.as_ref().unwrap().rule.kind, RuleKind::Defaults);
    assert_eq!(
        login.unchecked,
        vec![
            Unchecked::Identity {
                kind: RuleKind::Account,
                setting: Setting::Max
            },
            Unchecked::Identity {
                kind: RuleKind::Qos,
                setting: Setting::Max
            },
            Unchecked::Identity {
                kind: RuleKind::Partition,
                setting: Setting::Max
            },
        ]
    );
    assert_eq!(
        login.unchecked[0].to_string(),
        "the account is not known here and some account rules set 'max'"
    );
    // A known user rule that sets max is certain whatever else is unknown.
    assert!(resolve(&config, &who("alice/-/-/-"), Some(sz("30G")), None).is_err());
    let alice = resolve(&config, &who("alice/-/-/-"), Some(sz("20G")), None).unwrap();
    assert!(alice.is_final());
    // Unknown kinds whose rules do not set the setting do not matter.
    let only_max = policy("[defaults]\nmax = \"20G\"\n[account.a]\ndefault = \"5G\"\n");
    assert!(resolve(&only_max, &who("u/-/-/-"), Some(sz("30G")), None).is_err());
    // Without a request, the default's uncertainty is reported too.
    let no_request = resolve(&config, &who("bob/-/-/-"), None, None).unwrap();
    assert_eq!(
        no_request.unchecked,
        vec![
            Unchecked::Identity {
                kind: RuleKind::Account,
                setting: Setting::Default
            },
            Unchecked::Identity {
                kind: RuleKind::Qos,
                setting: Setting::Default
            },
            Unchecked::Identity {
                kind: RuleKind::Partition,
                setting: Setting::Default
            },
        ]
    );
    assert_eq!(no_request.quota, Some(sz("10G")));
}

#[test]
fn no_policy_means_monitor_only_and_no_cap() {
    let config = Config::default();
    let e = resolve(&config, &who("u/a/q/p"), None, None).unwrap();
    assert_eq!((e.quota, e.quota_from, e.cap), (None, QuotaFrom::NoDefault, None));
    let e = resolve(&config, &who("u/a/q/p"), Some(sz("1T")), None).unwrap();
    assert_eq!(e.quota, Some(sz("1T")));
}
