//! Whether a job may have what it asked for, and what it gets: the plugin's decisions on the submit
//! host and on the node, as plain functions of the request, the policy and who runs the job.
//! The SPANK edge gathers the inputs, logs the words and writes the environment.

use crate::config::{Config, OnConfigError, RuleKind, Unusable};
use crate::quota::{self, Identity, QuotaFrom};
use crate::request;
use crate::size::ByteSize;

/// The policy as the plugin found it.
pub type Policy = Result<Config, Unusable>;

/// Accepted on the submit host; `warning` is printed to the user (a broken, fail-open policy).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubmitVerdict {
    pub warning: Option<String>,
}

/// Checks a valid `--gpu-mem-quota` request against the caps that can be known on the submit host.
/// `Err` is the refusal to print; nothing is submitted. The node checks again, authoritatively.
pub fn on_submit(request: ByteSize, policy: &Policy, who: &Identity) -> Result<SubmitVerdict, String> {
    let config = match policy {
        Ok(config) => config,
        Err(unusable) => {
            return match unusable.mode {
                OnConfigError::FailOpen => Ok(SubmitVerdict {
                    warning: Some(format!("{}; submitting without a policy check", broken(unusable))),
                }),
                OnConfigError::FailClosed => Err(format!(
                    "{}; jobs are refused until it is fixed",
                    broken(unusable)
                )),
            };
        }
    };
    match quota::resolve(config, who, Some(request), None) {
        Ok(_) => Ok(SubmitVerdict { warning: None }),
        Err(refusal) => Err(refusal.to_string()),
    }
}

/// What a job step gets on the node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeVerdict {
    /// The quota per GPU to put in the environment; `None` leaves the environment untouched.
    pub quota: Option<ByteSize>,
    /// One line for the log saying what was decided and why.
    pub note: String,
    /// Something an admin must see (logged as an error), the job runs anyway.
    pub alarm: Option<String>,
    /// What the user asked for and got less of, said to them and to the log at info level:
    /// `--gpu-mem-quota=40G lowered to the job's 10 shard(s) x 1G`.
    pub lowered: Option<String>,
}

/// Decides a step on the node. `request` is the raw option value (from the job environment, so
/// untrusted); `gpu_total` the node's GPU size if known. `Err` refuses the step's tasks.
///
/// `shards`: the job's `gres/shard` count on this node, from a fact (slurmd's `SLURM_SHARDS_ON_NODE`
/// in the batch step); with the policy's `[scheduling] shard_unit` they are GPU memory the job
/// reserved. A job with shards and no request gets shards x unit (lowered to its cap, never refused
/// for it); a request above shards x unit is lowered to it: Slurm put no more than that on the GPU.
pub fn on_node(
    request: Option<&str>,
    policy: &Policy,
    who: &Identity,
    gpu_total: Option<ByteSize>,
    shards: Option<u64>,
) -> Result<NodeVerdict, String> {
    let request = match request {
        Some(value) => Some(
            request::parse_quota_option(value)
                .map_err(|e| format!("{e} (value from the job environment)"))?,
        ),
        None => None,
    };
    let config = match policy {
        Ok(config) => config,
        Err(unusable) => {
            return match unusable.mode {
                OnConfigError::FailOpen => Ok(NodeVerdict {
                    quota: request,
                    note: match request {
                        Some(q) => format!("quota {q} per GPU as requested, unchecked"),
                        None => "no quota".to_string(),
                    },
                    alarm: Some(format!("{}; this job runs unmonitored", broken(unusable))),
                    lowered: None,
                }),
                OnConfigError::FailClosed => Err(format!(
                    "{}; jobs are refused until it is fixed",
                    broken(unusable)
                )),
            };
        }
    };
    let reserved = Reserved::of(&config.scheduling, shards);
    let from_shards = request.is_none() && reserved.is_some();
    let asked = request.or(reserved.map(|r| r.memory));
    let mut effective = match quota::resolve(config, who, asked, gpu_total) {
        Ok(effective) => effective,
        // Shards the job asked for are not a quota request: above the cap, the cap applies.
        Err(refusal) if from_shards => quota::resolve(config, who, Some(refusal.cap.size), gpu_total)
            .map_err(|refusal| refusal.to_string())?,
        Err(refusal) => return Err(refusal.to_string()),
    };
    let mut shards_note = None;
    let mut lowered = None;
    if let (Some(reserved), Some(quota)) = (reserved, effective.quota) {
        let Reserved { count, unit, .. } = reserved;
        if from_shards {
            shards_note = Some(format!("from the job's {count} shard(s) x {unit}"));
        } else if quota > reserved.memory {
            effective.quota = Some(reserved.hold(Some(quota)));
            let line = format!("--gpu-mem-quota={quota} lowered to the job's {count} shard(s) x {unit}");
            lowered = Some(line.clone());
            shards_note = Some(line);
        }
    }
    // The node could not learn the account, partition or QOS (slurmctld did not answer): the
    // smallest cap any rule that may apply sets is the cap, never "accept any request".
    let identity_unknown = effective.unchecked.iter().any(|u| {
        matches!(
            u,
            quota::Unchecked::Identity {
                setting: quota::Setting::Max,
                ..
            }
        )
    });
    if identity_unknown {
        if let Some(strictest) = quota::strictest_cap(config, who, gpu_total) {
            if let Some(asked) = request.filter(|&r| r > strictest.size) {
                return Err(format!(
                    "--gpu-mem-quota={asked} exceeds {}, the smallest cap that may apply (that of {}): \
                     the job's account, partition or QOS could not be read from slurmctld",
                    strictest.size, strictest.rule
                ));
            }
            if effective.quota.is_some_and(|q| q > strictest.size) {
                effective.quota = Some(strictest.size);
            }
            effective.cap = Some(strictest);
        }
    }
    let source = match &effective.quota_from {
        QuotaFrom::Request if shards_note.is_some() => shards_note.unwrap_or_default(),
        QuotaFrom::Request => "requested".to_string(),
        QuotaFrom::Default { rule, written } => format!("default {written} of {}", rule.table()),
        QuotaFrom::DefaultCapped { rule, written } => {
            format!("default {written} of {}, lowered to the cap", rule.table())
        }
        QuotaFrom::NoDefault => "no rule sets a default".to_string(),
    };
    let cap = match &effective.cap {
        Some(cap) => format!("; cap {} for {}", cap.size, cap.rule),
        None => String::new(),
    };
    let unchecked: Vec<String> = effective.unchecked.iter().map(|u| u.to_string()).collect();
    let alarm =
        (!unchecked.is_empty()).then(|| format!("not everything could be checked: {}", unchecked.join("; ")));
    let note = match effective.quota {
        Some(q) => format!("quota {q} per GPU ({source}{cap})"),
        None if effective.is_final() => format!("no quota, monitored only ({source})"),
        None => format!("no quota ({source})"),
    };
    Ok(NodeVerdict {
        quota: effective.quota,
        note,
        alarm,
        lowered,
    })
}

/// The shard rule, the one place it is written: `count` shards of `[scheduling] shard_unit` are the
/// GPU memory Slurm put on the GPU for the job, so a quota above it is lowered to it, and a job
/// with no quota gets it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Reserved {
    count: u64,
    unit: ByteSize,
    memory: ByteSize,
}

impl Reserved {
    /// `None` when the job holds no shards, or shards are not memory units here.
    fn of(scheduling: &crate::config::Scheduling, shards: Option<u64>) -> Option<Reserved> {
        let count = shards.filter(|&n| n > 0)?;
        Some(Reserved {
            count,
            unit: scheduling.shard_unit?,
            memory: scheduling.memory_of(count)?,
        })
    }

    fn hold(&self, quota: Option<ByteSize>) -> ByteSize {
        quota.map_or(self.memory, |q| q.min(self.memory))
    }
}

/// The watchdog's check of the quota the step's environment gave the job (which the plugin
/// decided from what the user's own srun wrote) against slurmctld's record of the job: held to
/// the job's shards on this node, then to the cap for its account, partition and QOS (`who`, from
/// the record), percents resolved against the real GPU (`gpu_total`). Returns the quota to enforce
/// and, for each change, the line to log as a warning.
pub fn held_by_watchdog(
    config: &Config,
    quota: Option<ByteSize>,
    who: &Identity,
    shards: Option<u64>,
    gpu_total: Option<ByteSize>,
) -> (Option<ByteSize>, Vec<String>) {
    let mut said = Vec::new();
    let quota = match Reserved::of(&config.scheduling, shards) {
        Some(reserved) => {
            let held = reserved.hold(quota);
            let Reserved { count, unit, .. } = reserved;
            match quota {
                Some(q) if q <= held => {}
                Some(q) => said.push(format!(
                    "the quota {q} given to the job exceeds its {count} shard(s) x {unit} (slurmctld's \
                     record of the job): enforcing {held}"
                )),
                None => said.push(format!(
                    "the job holds {count} shard(s) x {unit}: enforcing a quota of {held}"
                )),
            }
            Some(held)
        }
        None => quota,
    };
    let Some(requested) = quota else {
        return (None, said);
    };
    match quota::resolve(config, who, Some(requested), gpu_total) {
        Ok(_) => (Some(requested), said),
        Err(refusal) => {
            let cap = refusal.cap.size;
            said.push(format!(
                "the quota {requested} given to the job exceeds the {cap} cap for {} (slurmctld's \
                 record of the job): enforcing {cap}",
                refusal.cap.rule
            ));
            (Some(cap), said)
        }
    }
}

/// Whether the policy has rules whose choice depends on the job's account, partition or QOS: then
/// the node must know them (from slurmctld) to decide.
pub(crate) fn depends_on_identity(config: &Config) -> bool {
    [RuleKind::Account, RuleKind::Partition, RuleKind::Qos]
        .into_iter()
        .any(|kind| config.rules(kind).is_some_and(|rules| !rules.is_empty()))
}

fn broken(unusable: &Unusable) -> String {
    let error = unusable.error.to_string().replace('\n', "; ");
    format!(
        "the GPU memory policy is unusable ({error}) and on_config_error = {}",
        unusable.mode
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{parse, LoadError};
    use std::path::PathBuf;

    const POLICY: &str = r#"
        [defaults]
        default = "50%"
        max = "64G"
        [account.physics]
        max = "40G"
        [user.gmq-user]
        max = "30G"
        [qos.monitor]
        default = "none"
    "#;

    fn policy() -> Policy {
        Ok(parse(POLICY, "test.toml").unwrap())
    }

    fn broken_policy(mode: OnConfigError) -> Policy {
        Err(Unusable {
            mode,
            error: LoadError::Missing {
                path: PathBuf::from("/etc/slurm/gpu-mem-quota.toml"),
            },
        })
    }

    fn who(user: &str, account: &str) -> Identity {
        Identity {
            user: Some(user.into()),
            account: Some(account.into()),
            partition: Some("gpu".into()),
            qos: Some("normal".into()),
        }
    }

    fn size(text: &str) -> ByteSize {
        crate::size::parse_size(text).unwrap()
    }

    #[test]
    fn submit_refuses_above_a_known_cap() {
        let user_only = Identity {
            user: Some("gmq-user".into()),
            ..Identity::default()
        };
        assert_eq!(
            on_submit(size("35G"), &policy(), &user_only),
            Err("--gpu-mem-quota=35G exceeds the 30G cap for user 'gmq-user'".to_string())
        );
        assert_eq!(
            on_submit(size("30G"), &policy(), &user_only),
            Ok(SubmitVerdict { warning: None })
        );
        // The account is not known on the submit host and account rules set caps: the node decides.
        let other = Identity {
            user: Some("alice".into()),
            ..Identity::default()
        };
        assert!(on_submit(size("50G"), &policy(), &other).is_ok());
        assert!(on_node(Some("50G"), &policy(), &who("alice", "physics"), None, None).is_err());
    }

    #[test]
    fn node_applies_the_most_specific_cap() {
        let verdict = on_node(Some("40G"), &policy(), &who("alice", "physics"), None, None).unwrap();
        assert_eq!(verdict.quota, Some(size("40G")));
        assert_eq!(
            verdict.note,
            "quota 40G per GPU (requested; cap 40G for account 'physics')"
        );
        assert_eq!(
            on_node(Some("41G"), &policy(), &who("alice", "physics"), None, None),
            Err("--gpu-mem-quota=41G exceeds the 40G cap for account 'physics'".to_string())
        );
        assert_eq!(
            on_node(Some("35G"), &policy(), &who("gmq-user", "physics"), None, None).unwrap_err(),
            "--gpu-mem-quota=35G exceeds the 30G cap for user 'gmq-user'"
        );
    }

    #[test]
    fn node_gives_the_default_resolved_against_the_gpu() {
        let verdict = on_node(
            None,
            &policy(),
            &who("alice", "chemistry"),
            Some(size("80G")),
            None,
        )
        .unwrap();
        assert_eq!(verdict.quota, Some(size("40G")));
        assert_eq!(verdict.alarm, None);
        // A default above the cap is lowered to it.
        let verdict = on_node(
            None,
            &policy(),
            &who("gmq-user", "chemistry"),
            Some(size("80G")),
            None,
        )
        .unwrap();
        assert_eq!(verdict.quota, Some(size("30G")));
        let mut monitor = who("alice", "chemistry");
        monitor.qos = Some("monitor".into());
        let verdict = on_node(None, &policy(), &monitor, Some(size("80G")), None).unwrap();
        assert_eq!(verdict.quota, None);
    }

    #[test]
    fn an_identity_the_node_cannot_read_gets_the_strictest_cap_not_any() {
        // F3: the account unknown on the node (slurmctld did not answer in an srun step).
        let unknown = Identity {
            user: Some("alice".into()),
            ..Identity::default()
        };
        let refusal = on_node(Some("1000G"), &policy(), &unknown, None, None).unwrap_err();
        assert!(
            refusal.starts_with("--gpu-mem-quota=1000G exceeds 40G, the smallest cap that may apply (that of account 'physics')"),
            "{refusal}"
        );
        assert!(on_node(Some("64G"), &policy(), &unknown, None, None).is_err());
        let verdict = on_node(Some("40G"), &policy(), &unknown, None, None).unwrap();
        assert_eq!(verdict.quota, Some(size("40G")));
        // A default above the strictest cap is lowered to it.
        let verdict = on_node(None, &policy(), &unknown, Some(size("80G")), None).unwrap();
        assert_eq!(verdict.quota, Some(size("40G")));
        // A user rule is more specific than any account: it is the cap, unknown account or not.
        let gmq = Identity {
            user: Some("gmq-user".into()),
            ..Identity::default()
        };
        assert_eq!(
            on_node(Some("31G"), &policy(), &gmq, None, None).unwrap_err(),
            "--gpu-mem-quota=31G exceeds the 30G cap for user 'gmq-user'"
        );
    }

    #[test]
    fn node_refuses_a_forged_value() {
        let e = on_node(Some("banana"), &policy(), &who("alice", "physics"), None, None).unwrap_err();
        assert!(
            e.starts_with("invalid --gpu-mem-quota 'banana': not a size"),
            "{e}"
        );
        assert!(e.ends_with("(value from the job environment)"), "{e}");
    }

    fn scheduled_policy() -> Policy {
        Ok(parse(
            &format!("{POLICY}\n[scheduling]\nshard_unit = \"1G\"\n"),
            "test.toml",
        )
        .unwrap())
    }

    #[test]
    fn shards_alone_give_their_memory_as_the_quota_within_the_cap() {
        let alice = who("alice", "physics");
        let verdict = on_node(None, &scheduled_policy(), &alice, Some(size("80G")), Some(20)).unwrap();
        assert_eq!(verdict.quota, Some(size("20G")));
        assert!(
            verdict.note.contains("from the job's 20 shard(s) x 1G"),
            "{}",
            verdict.note
        );
        // Shards above the cap are not a request to refuse: the cap applies.
        let gmq = who("gmq-user", "physics");
        let verdict = on_node(None, &scheduled_policy(), &gmq, Some(size("80G")), Some(40)).unwrap();
        assert_eq!(verdict.quota, Some(size("30G")));
        // Without a shard unit shards are not memory: the policy's default applies.
        let verdict = on_node(None, &policy(), &alice, Some(size("80G")), Some(20)).unwrap();
        assert_eq!(verdict.quota, Some(size("40G")));
        // No shards on this node (a whole-GPU job): the default.
        let verdict = on_node(None, &scheduled_policy(), &alice, Some(size("80G")), Some(0)).unwrap();
        assert_eq!(verdict.quota, Some(size("40G")));
    }

    #[test]
    fn a_request_above_the_jobs_shards_is_lowered_to_them() {
        let alice = who("alice", "physics");
        let verdict = on_node(Some("40G"), &scheduled_policy(), &alice, None, Some(20)).unwrap();
        assert_eq!(verdict.quota, Some(size("20G")));
        assert!(
            verdict
                .note
                .contains("--gpu-mem-quota=40G lowered to the job's 20 shard(s) x 1G"),
            "{}",
            verdict.note
        );
        let verdict = on_node(Some("10G"), &scheduled_policy(), &alice, None, Some(20)).unwrap();
        assert_eq!(verdict.quota, Some(size("10G")));
        assert!(verdict.note.contains("requested"), "{}", verdict.note);
        // The cap is still checked first: shards never buy more than the cap.
        assert!(on_node(Some("50G"), &scheduled_policy(), &alice, None, Some(60)).is_err());
    }

    #[test]
    fn a_broken_policy_fails_open_or_closed_as_configured() {
        let open = on_node(
            Some("40G"),
            &broken_policy(OnConfigError::FailOpen),
            &who("a", "b"),
            None,
            None,
        )
        .unwrap();
        assert_eq!(open.quota, Some(size("40G")));
        let alarm = open.alarm.unwrap();
        assert!(
            alarm.contains("no such file") && alarm.contains("fail-open") && alarm.contains("unmonitored")
        );
        let closed = on_node(
            None,
            &broken_policy(OnConfigError::FailClosed),
            &who("a", "b"),
            None,
            None,
        )
        .unwrap_err();
        assert!(
            closed.contains("fail-closed") && closed.contains("refused until it is fixed"),
            "{closed}"
        );
        let who = Identity::default();
        assert!(
            on_submit(size("1G"), &broken_policy(OnConfigError::FailOpen), &who)
                .unwrap()
                .warning
                .is_some()
        );
        assert!(on_submit(size("1G"), &broken_policy(OnConfigError::FailClosed), &who).is_err());
    }

    #[test]
    fn the_watchdog_holds_the_quota_to_the_shards_then_to_the_cap() {
        let config = parse(
            &format!("{POLICY}\n[scheduling]\nshard_unit = \"1G\"\n"),
            "test.toml",
        )
        .unwrap();
        let physics = who("alice", "physics");
        let chemistry = who("alice", "chemistry");
        let q = |text| Some(size(text));
        // (quota given, who, shards here, quota enforced, lines said)
        type Row<'a> = (
            Option<ByteSize>,
            &'a Identity,
            Option<u64>,
            Option<ByteSize>,
            &'a [&'a str],
        );
        let table: [Row; 8] = [
            (q("20G"), &physics, Some(30), q("20G"), &[]),
            (q("20G"), &physics, None, q("20G"), &[]),
            (
                q("35G"),
                &physics,
                Some(10),
                q("10G"),
                &["exceeds its 10 shard(s) x 1G"],
            ),
            (
                None,
                &physics,
                Some(10),
                q("10G"),
                &["holds 10 shard(s) x 1G: enforcing a quota of 10G"],
            ),
            // The user's srun said chemistry (64G cap); slurmctld says physics.
            (
                q("60G"),
                &physics,
                None,
                q("40G"),
                &["exceeds the 40G cap for account 'physics'"],
            ),
            // Both: shards first, then the cap.
            (
                None,
                &physics,
                Some(50),
                q("40G"),
                &["holds 50 shard(s)", "the 40G cap"],
            ),
            (None, &chemistry, None, None, &[]),
            (None, &chemistry, Some(0), None, &[]),
        ];
        for (given, who, shards, enforced, lines) in table {
            let (quota, said) = held_by_watchdog(&config, given, who, shards, Some(size("80G")));
            assert_eq!(quota, enforced, "{given:?} {shards:?}");
            assert_eq!(said.len(), lines.len(), "{said:?}");
            for (line, part) in said.iter().zip(lines) {
                assert!(line.contains(part), "{line:?} lacks {part:?}");
            }
        }
        // Without `shard_unit` shards are not memory: only the cap.
        let (quota, said) = held_by_watchdog(&policy().unwrap(), q("30G"), &physics, Some(10), None);
        assert_eq!((quota, said.len()), (q("30G"), 0));
    }
}
