//! What the job prolog decides on a node, before any step: the node's half of the decision that
//! comes first ([`crate::step`] decides each step after it). Pure: the plugin gathers the facts
//! ([`PrologFacts`]: the job's option values, the policy, what the job credential says of who runs
//! it, the node's GPU inventory), calls [`decide_prolog`] and acts on its [`PrologDecision`].
//!
//! The rule (review K1): a refusal never means "no watchdog". The prolog and the steps reach the
//! same verdict from the same facts, and where the prolog lacks one, it decides for every value
//! that fact may take:
//! - the credential lacks the job's QOS before 26.05 (slurmd passes `SLURM_JOB_QOS` to the prolog
//!   only from then on), while the batch step and slurmctld's record have it. The prolog tries the
//!   QOS of every `[qos.NAME]` rule and one of no rule: refused for all of them is refused; any
//!   other outcome starts the watchdog, with the strictest quota accepted until the watchdog has
//!   slurmctld's record and decides again with the job's real QOS ([`Params::provisional`]).
//! - a refused request writes the refusal where every task of the job on the node reads it, and
//!   they are all refused: nothing of the job runs there unwatched.

use std::path::Path;

use crate::admission::{self, NodeVerdict, Policy};
use crate::config::{Config, RuleKind};
use crate::launch::{Params, Provisional};
use crate::quota::Identity;
use crate::size::ByteSize;
use crate::sluid::Sluid;

/// What the job prolog knows of the job on this node, gathered before it decides. Only a job with
/// GPUs here has a prolog decision: without them there is nothing to watch.
#[derive(Debug, Clone)]
pub struct PrologFacts<'a> {
    pub job_id: u32,
    /// The job owner's uid and primary gid (the credential's).
    pub uid: u32,
    pub gid: u32,
    /// The owner's user name; `None`: the uid has no passwd entry on this node.
    pub user: Option<String>,
    /// The account, partition and QOS from slurmd's script environment (the credential's; the QOS
    /// only from 26.05 on).
    pub account: Option<String>,
    pub partition: Option<String>,
    pub qos: Option<String>,
    /// The job's GPUs on this node (`SLURM_JOB_GPUS`); empty where the list does not parse.
    pub gpus: Vec<String>,
    /// `--gpu-mem-quota` as the job was submitted: the user's, checked here.
    pub request: Option<&'a str>,
    /// `--gpu-mem-preemptible` was given.
    pub preemptible: bool,
    /// slurmd's `SLURM_JOB_SLUID` (25.11 on), as text.
    pub sluid: Option<&'a str>,
    pub policy: &'a Policy,
    /// The policy's path, which the watchdog reads again.
    pub config: &'a Path,
    /// The size of the job's GPUs here, from the inventory the node's watchdogs keep.
    pub gpu_total: Option<ByteSize>,
}

/// What the job prolog does, and what it could not read (for slurmd's log as errors).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrologDecision {
    pub action: PrologAction,
    pub problems: Vec<String>,
}

/// See [`decide_prolog`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PrologAction {
    /// No watchdog and no word for the tasks, only this line at error level: the policy is
    /// unusable (the steps read it too and decide as the admin chose: refused, or unmonitored), or
    /// the job's owner is unknown here (its tasks find no word and are refused).
    Nothing(String),
    /// Every task of the job on this node is refused, for this reason (the prolog's word says so).
    Refuse(String),
    /// Start the job's watchdog with these parameters; `note` says what was decided and why.
    Watch { params: Params, note: String },
}

/// Decides the job prolog on this node from what it gathered.
pub fn decide_prolog(facts: &PrologFacts) -> PrologDecision {
    let mut problems = Vec::new();
    let nothing = |why: String| PrologDecision {
        action: PrologAction::Nothing(why),
        problems: Vec::new(),
    };
    if let Err(e) = facts.policy {
        return nothing(format!(
            "no watchdog: the policy is unusable ({}, on_config_error = {})",
            e.error, e.mode
        ));
    }
    let Some(user) = &facts.user else {
        return nothing(format!("uid {} has no passwd entry", facts.uid));
    };
    let who = Identity {
        user: Some(user.clone()),
        account: facts.account.clone(),
        partition: facts.partition.clone(),
        // In the prolog's environment from 26.05 on; before, `at_job_start` decides for every QOS
        // the job may have, and the watchdog again with slurmctld's.
        qos: facts.qos.clone(),
    };
    let action = match at_job_start(facts.request, facts.policy, &who, facts.gpu_total) {
        JobStart::Refuse(why) => PrologAction::Refuse(why),
        // Not reached: an unusable policy is said above.
        JobStart::Unwatched(why) => PrologAction::Nothing(why),
        JobStart::Watch { verdict, settled } => {
            let sluid = facts.sluid.and_then(|text| {
                let sluid = Sluid::parse(text);
                if sluid.is_none() {
                    problems.push(format!("SLURM_JOB_SLUID '{text}' is not a SLUID: ignored"));
                }
                sluid
            });
            let params = Params {
                job_id: facts.job_id,
                uid: facts.uid,
                gid: facts.gid,
                quota: verdict.quota,
                gpus: facts.gpus.clone(),
                config: facts.config.to_path_buf(),
                preemptible: facts.preemptible,
                sluid,
                provisional: (!settled).then(|| Provisional {
                    request: facts.request.map(str::to_string),
                }),
            };
            PrologAction::Watch {
                params,
                note: verdict.note,
            }
        }
    };
    PrologDecision { action, problems }
}

/// The prolog's decision on the job's request (review K1).
#[derive(Debug, Clone, PartialEq, Eq)]
enum JobStart {
    /// Start the job's watchdog with `verdict.quota`. `settled`: every fact was known; otherwise the
    /// quota holds until the watchdog has decided again from slurmctld's record of the job.
    Watch { verdict: NodeVerdict, settled: bool },
    /// Every task of the job on this node is refused, for this reason.
    Refuse(String),
    /// The policy is unusable and the admin chose to let jobs run (`on_config_error = "allow"`): no
    /// watchdog, and the steps say the job runs unmonitored.
    Unwatched(String),
}

/// Decides the job on this node from its option value (`request`: the submission's, untrusted),
/// the policy and `who` as the job credential gives it, where a `None` name is one the credential
/// does not carry (the QOS before 26.05).
fn at_job_start(
    request: Option<&str>,
    policy: &Policy,
    who: &Identity,
    gpu_total: Option<ByteSize>,
) -> JobStart {
    let Ok(config) = policy else {
        // Only a fail-open policy accepts anything when it is unusable.
        return match admission::on_node(request, policy, who, gpu_total, None) {
            Ok(verdict) => JobStart::Unwatched(verdict.alarm.unwrap_or(verdict.note)),
            Err(refusal) => JobStart::Refuse(refusal),
        };
    };
    let candidates = candidate_identities(config, who);
    let verdicts: Vec<Result<NodeVerdict, String>> = candidates
        .iter()
        .map(|who| admission::on_node(request, policy, who, gpu_total, None))
        .collect();
    let accepted: Vec<&NodeVerdict> = verdicts.iter().filter_map(|v| v.as_ref().ok()).collect();
    if accepted.is_empty() {
        // Refused whatever the unknown names are; the most general candidate's words (the last:
        // no rule for any unknown name) say it without naming a QOS the job may not have.
        return JobStart::Refuse(
            verdicts
                .into_iter()
                .filter_map(Result::err)
                .next_back()
                .unwrap_or_default(),
        );
    }
    let settled = candidates.len() == 1;
    if settled {
        return JobStart::Watch {
            verdict: accepted[0].clone(),
            settled,
        };
    }
    // Until the watchdog knows the job's real QOS: the strictest quota of those it may have.
    let strictest = accepted
        .iter()
        .min_by_key(|v| v.quota.map_or(u64::MAX, ByteSize::bytes))
        .copied()
        .cloned()
        .unwrap_or_else(|| accepted[0].clone());
    let refused_for = candidates.len() - accepted.len();
    let mut verdict = strictest;
    verdict.note = format!(
        "{}, until the watchdog reads the job's QOS from slurmctld ({} of the {} QOS the policy \
         names would refuse the request)",
        verdict.note,
        refused_for,
        candidates.len() - 1
    );
    JobStart::Watch { verdict, settled }
}

/// `who` itself when the QOS is known; otherwise `who` with the QOS of each `[qos.NAME]` rule, then
/// with a QOS that no rule names (last). Account and partition are always in the credential; one
/// that is not stays unknown and gets the strictest cap ([`admission::on_node`]).
fn candidate_identities(config: &Config, who: &Identity) -> Vec<Identity> {
    if who.qos.is_some() {
        return vec![who.clone()];
    }
    let named: Vec<String> = config
        .rules(RuleKind::Qos)
        .into_iter()
        .flatten()
        .map(|(name, _)| name.clone())
        .collect();
    if named.is_empty() {
        return vec![who.clone()];
    }
    // A name no rule has (Slurm's QOS names have no spaces); found, not assumed.
    let unnamed = (0u32..)
        .map(|n| format!("(no rule {n})"))
        .find(|name| config.rule(RuleKind::Qos, name).is_none())
        .unwrap_or_default();
    named
        .into_iter()
        .chain(std::iter::once(unnamed))
        .map(|qos| Identity {
            qos: Some(qos),
            ..who.clone()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{parse, LoadError, OnConfigError, Unusable};
    use std::path::PathBuf;

    /// The review's policy (K1), with the example's user rule.
    const POLICY: &str = r#"
        [defaults]
        default = "50%"
        max = "64G"
        [account.chemistry]
        max = "30G"
        [user.gmq-user]
        max = "40G"
        [qos.debug]
        max = "8G"
        [qos.monitor]
        default = "none"
    "#;

    fn policy(text: &str) -> Policy {
        Ok(parse(text, "test.toml").unwrap())
    }

    fn who(user: &str, account: &str, qos: Option<&str>) -> Identity {
        Identity {
            qos: qos.map(str::to_string),
            ..Identity::named(user, account, "gpu", "")
        }
    }

    fn gib(n: u64) -> ByteSize {
        ByteSize::from_bytes(n << 30)
    }

    fn quota(start: &JobStart) -> Option<ByteSize> {
        match start {
            JobStart::Watch { verdict, .. } => verdict.quota,
            other => panic!("not watched: {other:?}"),
        }
    }

    #[test]
    fn a_qos_the_credential_lacks_never_leaves_the_job_unwatched() {
        // K1, route A: 20G under QOS normal; the prolog of 22.05-25.11 has no QOS.
        let start = at_job_start(
            Some("20G"),
            &policy(POLICY),
            &who("alice", "biology", None),
            Some(gib(80)),
        );
        let JobStart::Watch { verdict, settled } = &start else {
            panic!("{start:?}");
        };
        assert!(!settled, "the watchdog decides again with the real QOS");
        assert_eq!(verdict.quota, Some(gib(20)));
        assert!(
            verdict
                .note
                .contains("1 of the 2 QOS the policy names would refuse"),
            "{}",
            verdict.note
        );
        // With the QOS in the credential (26.05), the same facts as the batch step: one answer.
        let normal = at_job_start(
            Some("20G"),
            &policy(POLICY),
            &who("alice", "biology", Some("normal")),
            Some(gib(80)),
        );
        assert!(
            matches!(normal, JobStart::Watch { settled: true, .. }),
            "{normal:?}"
        );
        assert_eq!(quota(&normal), Some(gib(20)));
        let debug = at_job_start(
            Some("20G"),
            &policy(POLICY),
            &who("alice", "biology", Some("debug")),
            Some(gib(80)),
        );
        assert_eq!(
            debug,
            JobStart::Refuse("--gpu-mem-quota=20G exceeds the 8G cap for QOS 'debug'".into())
        );
    }

    #[test]
    fn refused_for_every_qos_it_may_have_is_refused() {
        // K1, route B: above the account's cap whatever the QOS; the tasks are refused, never unwatched.
        let start = at_job_start(
            Some("35G"),
            &policy(POLICY),
            &who("alice", "chemistry", None),
            Some(gib(80)),
        );
        assert_eq!(
            start,
            JobStart::Refuse("--gpu-mem-quota=35G exceeds the 30G cap for account 'chemistry'".into())
        );
        let start = at_job_start(
            Some("100G"),
            &policy(POLICY),
            &who("alice", "biology", None),
            Some(gib(80)),
        );
        assert_eq!(
            start,
            JobStart::Refuse(
                "--gpu-mem-quota=100G exceeds the 64G cap for this cluster (defaults.max)".into()
            )
        );
        let forged = at_job_start(
            Some("banana"),
            &policy(POLICY),
            &who("alice", "biology", None),
            None,
        );
        assert!(
            matches!(&forged, JobStart::Refuse(why) if why.contains("not a size")),
            "{forged:?}"
        );
    }

    #[test]
    fn the_default_until_the_qos_is_known_is_the_strictest_one() {
        // No request: QOS debug caps the 40G default at 8G, QOS monitor has none; 8G until known.
        let start = at_job_start(
            None,
            &policy(POLICY),
            &who("alice", "biology", None),
            Some(gib(80)),
        );
        assert!(
            matches!(start, JobStart::Watch { settled: false, .. }),
            "{start:?}"
        );
        assert_eq!(quota(&start), Some(gib(8)));
        // Without QOS rules the QOS is not needed: settled at once.
        let no_qos = "[defaults]\ndefault = \"50%\"\nmax = \"64G\"\n";
        let start = at_job_start(
            None,
            &policy(no_qos),
            &who("alice", "biology", None),
            Some(gib(80)),
        );
        assert!(
            matches!(start, JobStart::Watch { settled: true, .. }),
            "{start:?}"
        );
        assert_eq!(quota(&start), Some(gib(40)));
    }

    #[test]
    fn a_broken_policy_refuses_or_runs_unmonitored_as_the_admin_chose() {
        let broken = |mode| {
            Err(Unusable {
                mode,
                error: LoadError::Missing {
                    path: PathBuf::from("/etc/slurm/gpu-mem-quota.toml"),
                },
            })
        };
        let who = who("alice", "biology", None);
        assert!(matches!(
            at_job_start(Some("20G"), &broken(OnConfigError::FailClosed), &who, None),
            JobStart::Refuse(why) if why.contains("jobs are refused until it is fixed")
        ));
        assert!(matches!(
            at_job_start(Some("20G"), &broken(OnConfigError::FailOpen), &who, None),
            JobStart::Unwatched(why) if why.contains("runs unmonitored")
        ));
    }

    /// The facts of a job of `gmq-user` in account `account` asking `request`, under `policy`.
    fn facts<'a>(
        policy: &'a Policy,
        request: Option<&'a str>,
        account: &str,
        qos: Option<&str>,
    ) -> PrologFacts<'a> {
        PrologFacts {
            job_id: 12,
            uid: 1000,
            gid: 1000,
            user: Some("alice".into()),
            account: Some(account.into()),
            partition: Some("gpu".into()),
            qos: qos.map(str::to_string),
            gpus: vec!["0".into(), "1".into()],
            request,
            preemptible: false,
            sluid: None,
            policy,
            config: Path::new("/etc/slurm/gpu-mem-quota.toml"),
            gpu_total: Some(gib(80)),
        }
    }

    fn watched(decision: &PrologDecision) -> &Params {
        match &decision.action {
            PrologAction::Watch { params, .. } => params,
            other => panic!("not watched: {other:?}"),
        }
    }

    #[test]
    fn the_prolog_decides_as_the_table_says() {
        let policy = policy(POLICY);
        let broken = Err(crate::config::Unusable {
            mode: crate::config::OnConfigError::FailClosed,
            error: crate::config::LoadError::Missing {
                path: PathBuf::from("/etc/slurm/gpu-mem-quota.toml"),
            },
        });
        let open = Err(crate::config::Unusable {
            mode: crate::config::OnConfigError::FailOpen,
            error: crate::config::LoadError::Missing {
                path: PathBuf::from("/etc/slurm/gpu-mem-quota.toml"),
            },
        });
        let no_user = PrologFacts {
            user: None,
            ..facts(&policy, Some("20G"), "biology", None)
        };
        // (facts, the action's kind, words it says)
        let table: Vec<(PrologFacts, &str, &str)> = vec![
            (
                facts(&broken, Some("20G"), "biology", None),
                "nothing",
                "no watchdog: the policy is unusable",
            ),
            (
                facts(&open, Some("20G"), "biology", None),
                "nothing",
                "on_config_error = fail-open",
            ),
            (no_user, "nothing", "uid 1000 has no passwd entry"),
            // K1, route B: above the account's cap whatever the QOS: refused, never unwatched.
            (
                facts(&policy, Some("35G"), "chemistry", None),
                "refuse",
                "exceeds the 30G cap for account 'chemistry'",
            ),
            (
                facts(&policy, Some("banana"), "biology", None),
                "refuse",
                "not a size",
            ),
            (
                facts(&policy, Some("20G"), "biology", Some("debug")),
                "refuse",
                "8G cap for QOS 'debug'",
            ),
            // K1, route A: the QOS the credential lacks never leaves the job unwatched.
            (
                facts(&policy, Some("20G"), "biology", None),
                "watch",
                "until the watchdog reads the job's QOS",
            ),
            (
                facts(&policy, Some("20G"), "biology", Some("normal")),
                "watch",
                "20G",
            ),
            (
                facts(&policy, None, "biology", None),
                "watch",
                "until the watchdog reads the job's QOS",
            ),
        ];
        for (facts, kind, says) in table {
            let decision = decide_prolog(&facts);
            let (got, text) = match &decision.action {
                PrologAction::Nothing(why) => ("nothing", why.clone()),
                PrologAction::Refuse(why) => ("refuse", why.clone()),
                PrologAction::Watch { note, .. } => ("watch", note.clone()),
            };
            assert_eq!(got, kind, "{facts:?}: {decision:?}");
            assert!(text.contains(says), "{facts:?}: {text}");
            assert!(decision.problems.is_empty(), "{decision:?}");
        }
    }

    #[test]
    fn the_watchdog_starts_with_what_the_prolog_knows() {
        let policy = policy(POLICY);
        let facts = PrologFacts {
            preemptible: true,
            sluid: Some("not-a-sluid"),
            ..facts(&policy, Some("20G"), "biology", None)
        };
        let decision = decide_prolog(&facts);
        let params = watched(&decision);
        assert_eq!(params.job_id, 12);
        assert_eq!((params.uid, params.gid), (1000, 1000));
        assert_eq!(params.quota, Some(gib(20)));
        assert_eq!(params.gpus, vec!["0".to_string(), "1".to_string()]);
        assert_eq!(params.config, PathBuf::from("/etc/slurm/gpu-mem-quota.toml"));
        assert!(params.preemptible);
        assert_eq!(params.sluid, None);
        // Without the QOS the quota holds until the watchdog decides again from the request.
        assert_eq!(
            params.provisional,
            Some(Provisional {
                request: Some("20G".into())
            })
        );
        assert_eq!(
            decision.problems,
            vec!["SLURM_JOB_SLUID 'not-a-sluid' is not a SLUID: ignored".to_string()]
        );
        // With the QOS (26.05) nothing is provisional.
        let known = decide_prolog(&facts_with_qos(&policy));
        assert_eq!(watched(&known).provisional, None);
    }

    fn facts_with_qos(policy: &Policy) -> PrologFacts<'_> {
        facts(policy, Some("20G"), "biology", Some("normal"))
    }
}
