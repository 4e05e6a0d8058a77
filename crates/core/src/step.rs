//! What a job step gets on a compute node: the plugin's decision in slurmstepd, as plain functions
//! over what it reads. The plugin (`spank::remote`) only gathers and applies.
//!
//! Where each fact comes from is the decision that matters here, because the step's environment
//! is the user's: in the batch step slurmd wrote `SLURM_JOB_ACCOUNT`, `SLURM_SHARDS_ON_NODE` and
//! `SLURM_JOB_GPUS` from slurmctld's record, but in any other step the user's own srun built the
//! environment and could write anything there. So an srun step takes its identity and shards from
//! the facts the job's watchdog read from slurmctld at its start ([`NodeFacts`]: once per job and
//! node), or, where the watchdog has not yet, from one squeue of the job ([`StepSources`] is asked
//! at most once per decision), and only when the policy needs them.

use std::cell::OnceCell;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::admission::{self, NodeVerdict, Policy};
use crate::config;
use crate::hints;
use crate::job_env;
use crate::node_files::{self, NodeFacts};
use crate::quota::Identity;
use crate::size::ByteSize;
use crate::slurm_text::JobRecord;

/// Slurm's step id for the batch step (slurm.h: `SLURM_BATCH_SCRIPT`).
pub const BATCH_STEP: u32 = 0xffff_fffb;

/// What the step's decision reads beyond its [`Step`]: the plugin answers from SPANK, the
/// watchdog's files and slurmctld; the tests from tables.
pub trait StepSources {
    /// A variable of the step's environment (see the module doc for whose it is).
    fn env(&self, name: &str) -> Option<String>;
    /// The facts the job's watchdog on this node kept in `runtime_dir`; `None` until it has.
    fn node_facts(&self, runtime_dir: &Path) -> Option<NodeFacts>;
    /// slurmctld's record of the job: one single-job squeue.
    fn job_record(&self) -> Result<JobRecord, String>;
    /// The size of these GPUs (the smallest) from the inventory the node's watchdogs keep.
    fn gpu_total(&self, runtime_dir: &Path, gpus: &[String]) -> Option<u64>;
    /// Whether the job prolog left its word on the job in `runtime_dir` ([`node_files::PROLOG_FILE`]):
    /// it does for every job with GPUs on this node, before any step.
    fn prolog_word_here(&self, runtime_dir: &Path) -> bool;
}

/// The step as slurmstepd knows it: from the job credential, but the option value.
pub struct Step<'a> {
    pub job_id: u32,
    pub step_id: u32,
    /// The job owner's user name (from the credential's uid).
    pub user: String,
    /// The `--gpu-mem-quota` value from the job's environment: the user's, validated again.
    pub request: Option<&'a str>,
    pub policy: &'a Policy,
    /// This node's NodeName (whose shards count).
    pub node: &'a str,
}

impl Step<'_> {
    pub fn is_batch(&self) -> bool {
        self.step_id == BATCH_STEP
    }
}

/// What the framework caps and restart hints need, when the policy is usable.
#[derive(Debug, Clone, PartialEq)]
pub struct Tuning {
    pub(crate) frameworks: config::Frameworks,
    pub(crate) hints: config::HintSettings,
    /// The GPU size quotas are measured against (the node's real one where known).
    pub(crate) gpu_total: Option<ByteSize>,
    pub(crate) visible_devices: u32,
}

/// The decision for a step, which every task of it inherits.
#[derive(Debug, Clone, PartialEq)]
pub struct StepDecision {
    /// The quota, or why the step's tasks are refused.
    pub verdict: Result<NodeVerdict, String>,
    /// The status file the job's watchdog here writes, when the policy is usable and the job has
    /// GPUs here (the job prolog started the watchdog).
    pub status_file: Option<PathBuf>,
    pub tuning: Option<Tuning>,
    /// What could not be learned and what was done instead, for slurmstepd's log as errors.
    pub problems: Vec<String>,
}

impl StepDecision {
    /// The job's directory on this node where its watchdog keeps its files (the status file's),
    /// when the job prolog was to start one here.
    pub fn watchdog_dir(&self) -> Option<&Path> {
        self.status_file.as_deref().and_then(Path::parent)
    }
}

/// slurmctld's record, asked of `sources` at most once however many facts need it.
struct Slurmctld<'s, S> {
    sources: &'s S,
    answer: OnceCell<Result<JobRecord, String>>,
    /// Whether the job may be asked about at all (see [`decide_step`]).
    allowed: bool,
}

impl<S: StepSources> Slurmctld<'_, S> {
    fn record(&self) -> Result<&JobRecord, &str> {
        self.answer
            .get_or_init(|| match self.allowed {
                true => self.sources.job_record(),
                false => Err("not asked: the job prolog left no word on this node".to_string()),
            })
            .as_ref()
            .map_err(String::as_str)
    }
}

/// Decides the step: its identity, GPUs and shards from where each may be trusted, then
/// [`admission::on_node`].
pub fn decide_step(step: &Step, sources: &impl StepSources) -> StepDecision {
    let config = step.policy.as_ref().ok();
    let gpus = job_gpus(step, sources);
    // A job the prolog left no word on has no GPU here (or no prolog ran for this run, and its
    // tasks are refused where they start, for want of a watchdog): slurmctld is never asked for
    // it, so a CPU-only step costs slurmctld nothing (review K5). An unusable policy (no runtime
    // directory to look in) asks nothing either, and decides as the admin chose.
    let job_here = step.is_batch()
        || config.is_none_or(|config| sources.prolog_word_here(&config.enforcement.runtime_dir));
    if !job_here && gpus.is_none() {
        return StepDecision {
            verdict: Ok(NodeVerdict {
                quota: None,
                note: "no GPU of the job on this node: no quota here".to_string(),
                alarm: None,
                lowered: None,
            }),
            status_file: None,
            tuning: None,
            problems: Vec::new(),
        };
    }
    let slurmctld = Slurmctld {
        sources,
        answer: OnceCell::new(),
        allowed: job_here,
    };
    let mut problems = Vec::new();
    let who = identity(step, &slurmctld, config, &mut problems);
    let shards = shards_on_node(step, &slurmctld, config, &mut problems);
    let gpu_total = config
        .and_then(|config| sources.gpu_total(&config.enforcement.runtime_dir, gpus.as_deref().unwrap_or(&[])))
        .map(ByteSize::from_bytes);
    let verdict = admission::on_node(step.request, step.policy, &who, gpu_total, shards);
    let usable = config.filter(|_| verdict.is_ok());
    StepDecision {
        status_file: usable
            .filter(|_| gpus.is_some())
            .map(|config| node_files::status_file(&config.enforcement.runtime_dir, step.job_id)),
        tuning: usable.map(|config| Tuning {
            frameworks: config.frameworks.clone(),
            hints: config.hints.clone(),
            gpu_total: gpu_total.or(config.gpu_memory),
            visible_devices: gpus.as_ref().map_or(1, |g| g.len().max(1) as u32),
        }),
        verdict,
        problems,
    }
}

/// Who runs the job. The user from the credential. Account, partition and QOS: in the batch step
/// from the variables slurmd wrote; in any other step from slurmctld's record, when the policy has
/// rules that depend on them. When slurmctld cannot answer they stay unknown, and the node applies
/// the strictest cap that may apply ([`admission::on_node`]).
fn identity<S: StepSources>(
    step: &Step,
    slurmctld: &Slurmctld<S>,
    config: Option<&config::Config>,
    problems: &mut Vec<String>,
) -> Identity {
    let user_only = Identity::named(&step.user, "", "", "");
    if step.is_batch() {
        let env = |name| slurmctld.sources.env(name).unwrap_or_default();
        let (account, partition, qos) = (
            env("SLURM_JOB_ACCOUNT"),
            env("SLURM_JOB_PARTITION"),
            env("SLURM_JOB_QOS"),
        );
        return Identity::named(&step.user, &account, &partition, &qos);
    }
    let Some(config) = config.filter(|config| admission::depends_on_identity(config)) else {
        return user_only;
    };
    let (account, partition, qos) = match slurmctld.sources.node_facts(&config.enforcement.runtime_dir) {
        Some(facts) => (facts.account, facts.partition, facts.qos),
        None => match slurmctld.record() {
            Ok(job) => (job.account.clone(), job.partition.clone(), job.qos.clone()),
            Err(e) => {
                problems.push(format!(
                    "cannot read the job's account, partition and QOS from slurmctld ({e}): the \
                     strictest cap that may apply is enforced"
                ));
                return user_only;
            }
        },
    };
    Identity::named(&step.user, &account, &partition, &qos)
}

/// The job's `gres/shard` count on this node: in the batch step `SLURM_SHARDS_ON_NODE`, which
/// slurmd wrote from the allocation; in any other step, when the policy schedules by shards, the
/// count slurmctld's record gives this node. The quota the step's tasks are told, and the
/// framework caps set from it, are then the one the watchdog holds the job to.
fn shards_on_node<S: StepSources>(
    step: &Step,
    slurmctld: &Slurmctld<S>,
    config: Option<&config::Config>,
    problems: &mut Vec<String>,
) -> Option<u64> {
    if step.is_batch() {
        return slurmctld.sources.env("SLURM_SHARDS_ON_NODE")?.trim().parse().ok();
    }
    let config = config?;
    config.scheduling.shard_unit?;
    if let Some(facts) = slurmctld.sources.node_facts(&config.enforcement.runtime_dir) {
        return facts.shards;
    }
    match slurmctld.record() {
        Ok(record) => record.shards_on(step.node),
        Err(e) => {
            problems.push(format!(
                "cannot read the job's shards from slurmctld ({e}): the step is told the quota \
                 without them; the watchdog holds the job to its shards"
            ));
            None
        }
    }
}

/// The job's GPUs on this node as Slurm set them in the step's environment; `None`: no GPUs here.
/// `SLURM_JOB_GPUS` is read in the batch step only, where slurmd writes it from the job's
/// allocation; in other steps it is whatever the user's srun carried, and slurmstepd sets
/// `SLURM_STEP_GPUS` / `CUDA_VISIBLE_DEVICES` instead. A list that does not parse still counts as
/// GPUs here, with no names.
fn job_gpus(step: &Step, sources: &impl StepSources) -> Option<Vec<String>> {
    let names: &[&str] = if step.is_batch() {
        &["SLURM_JOB_GPUS", "SLURM_STEP_GPUS", "CUDA_VISIBLE_DEVICES"]
    } else {
        &["SLURM_STEP_GPUS", "CUDA_VISIBLE_DEVICES"]
    };
    let value = names
        .iter()
        .filter_map(|name| sources.env(name))
        .find(|value| !value.is_empty() && value != "NoDevFiles")?;
    Some(job_env::parse_gpu_list(&value).unwrap_or_default())
}

/// A line for slurmstepd's log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Said {
    Info(String),
    Error(String),
}

/// On a restart, what the record of the previous run says the job should change to fit, and what
/// to log. `restart_count` is slurmstepd's own count (trusted when it says so; Slurm 22.05 leaves
/// it 0 in the batch step). `SLURM_RESTART_COUNT` is slurmd's on every restart but the user's to
/// set on a first run: a restart it claims is confirmed with slurmctld's record, which also holds
/// the previous run's record (the AdminComment). A first run asks slurmctld nothing.
pub fn restart_hints(
    sources: &impl StepSources,
    restart_count: u32,
    quota: ByteSize,
    tuning: &Tuning,
    batch_option: Option<&str>,
) -> (Vec<(&'static str, String)>, Vec<Said>) {
    let claimed = sources
        .env("SLURM_RESTART_COUNT")
        .and_then(|v| v.trim().parse::<u32>().ok())
        .is_some_and(|count| count > 0);
    if restart_count == 0 && !claimed {
        return (Vec::new(), Vec::new());
    }
    let record = match sources.job_record() {
        Ok(record) => record,
        Err(e) => {
            let said = format!("no restart hints: cannot read the job's record from slurmctld: {e}");
            return (Vec::new(), vec![Said::Error(said)]);
        }
    };
    let restarted = restart_count > 0 || record.end.as_ref().is_some_and(|end| end.restarts > 0);
    let Some(previous) = hints::previous_run(&record.admin_comment).filter(|_| restarted) else {
        return (Vec::new(), Vec::new());
    };
    let gpu_total = tuning.gpu_total.unwrap_or(quota);
    let Some(last_event) = hints::restart_event(&previous, quota, gpu_total, tuning.hints.near_margin) else {
        return (Vec::new(), Vec::new());
    };
    let batch = batch_option.and_then(|value| crate::batch::parse_batch_option(value).ok());
    let advice = hints::restart_hints(&hints::HintInputs {
        restarts: previous.restarts,
        last_event,
        last_peak: previous.peak.unwrap_or(quota),
        quota,
        gpu_total,
        fixed_estimate: tuning.hints.fixed_memory,
        safety_margin: tuning.hints.safety_margin,
        batch,
    });
    let mut line = format!(
        "restart hints after {last_event}: batch scale {}",
        advice.batch_scale
    );
    if let Some(b) = &advice.batch {
        line.push_str(&format!(
            "; micro-batch {} x accumulation {} ({})",
            b.micro, b.accum, b.reason
        ));
    }
    (hints::hint_vars(&advice), vec![Said::Info(line)])
}

/// The environment a task of the step starts with: the variables to set (`hints`: the restart
/// hints decided for this step) and the variables of ours to remove, so that they say only what
/// we said (a forged value, or one inherited by a job submitted from inside another job).
pub fn task_env(
    decision: &StepDecision,
    verdict: &NodeVerdict,
    sources: &impl StepSources,
    hints: &[(&'static str, String)],
) -> (Vec<(&'static str, String)>, Vec<&'static str>) {
    let mut vars = match verdict.quota {
        Some(quota) => job_env::quota_vars(quota),
        None => Vec::new(),
    };
    // The status file speaks of the quota: a job without one is left exactly as it was.
    if let Some(status) = decision.status_file.as_ref().filter(|_| verdict.quota.is_some()) {
        vars.push((job_env::STATUS_FILE, status.display().to_string()));
    }
    if let (Some(quota), Some(tuning)) = (verdict.quota, &decision.tuning) {
        vars.extend(framework_caps(sources, quota, tuning));
        vars.extend(hints.iter().cloned());
    }
    let unset = match decision.tuning {
        Some(_) => job_env::QUOTA_VARS
            .iter()
            .chain(hints::HINT_VARS.iter())
            .copied()
            .filter(|name| !vars.iter().any(|(set, _)| set == name))
            .collect(),
        None => Vec::new(),
    };
    (vars, unset)
}

/// PyTorch, JAX, TensorFlow (and MPS) settings that keep a framework inside the quota, merged with
/// (never overwriting) what the user set.
fn framework_caps(
    sources: &impl StepSources,
    quota: ByteSize,
    tuning: &Tuning,
) -> Vec<(&'static str, String)> {
    let Some(gpu_total) = tuning.gpu_total else {
        return Vec::new();
    };
    let user_env: BTreeMap<String, String> = hints::framework::FRAMEWORK_VARS
        .iter()
        .filter_map(|name| Some((name.to_string(), sources.env(name)?)))
        .collect();
    hints::framework_vars(&hints::CapInputs {
        quota,
        gpu_total,
        context_reserve: tuning.frameworks.context_reserve,
        visible_devices: tuning.visible_devices,
        switches: tuning.frameworks.switches,
        user_env: &user_env,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{parse, LoadError, OnConfigError, Unusable};
    use crate::slurm_text::{JobEnd, JobState};
    use std::cell::Cell;

    const GIB: u64 = 1 << 30;

    /// A policy with an account rule (so srun steps need the identity) and shards of 1G.
    const BY_ACCOUNT: &str = r#"
        [defaults]
        max = "64G"
        gpu_memory = "80G"
        [account.physics]
        max = "40G"
        [scheduling]
        shard_unit = "1G"
        [enforcement]
        runtime_dir = "/run/gmq"
    "#;

    /// The same cap for everyone, no shards: no srun step needs slurmctld.
    const FLAT: &str = r#"
        [defaults]
        max = "64G"
        [enforcement]
        runtime_dir = "/run/gmq"
    "#;

    #[derive(Default)]
    struct Table {
        env: BTreeMap<&'static str, &'static str>,
        facts: Option<NodeFacts>,
        record: Option<JobRecord>,
        gpu_total: Option<u64>,
        squeues: Cell<u32>,
        /// The job prolog left no word here (a job without GPUs on the node).
        no_prolog_word: bool,
    }

    impl StepSources for Table {
        fn env(&self, name: &str) -> Option<String> {
            self.env.get(name).map(|v| v.to_string())
        }
        fn node_facts(&self, runtime_dir: &Path) -> Option<NodeFacts> {
            assert_eq!(runtime_dir, Path::new("/run/gmq"));
            self.facts.clone()
        }
        fn job_record(&self) -> Result<JobRecord, String> {
            self.squeues.set(self.squeues.get() + 1);
            self.record
                .clone()
                .ok_or_else(|| "slurmctld did not answer".to_string())
        }
        fn gpu_total(&self, _: &Path, _: &[String]) -> Option<u64> {
            self.gpu_total
        }
        fn prolog_word_here(&self, _: &Path) -> bool {
            !self.no_prolog_word
        }
    }

    fn env(pairs: &[(&'static str, &'static str)]) -> BTreeMap<&'static str, &'static str> {
        pairs.iter().copied().collect()
    }

    fn record(account: &str, shards: u64, restarts: u32, admin_comment: &str) -> JobRecord {
        JobRecord {
            job_id: 7,
            admin_comment: admin_comment.into(),
            account: account.into(),
            partition: "gpu".into(),
            qos: "normal".into(),
            user_id: 1000,
            priority: 1,
            nodes: vec!["gpu01".into(), "gpu02".into()],
            shards_by_node: vec![shards, 99],
            given_gpus: true,
            end: Some(JobEnd {
                state: JobState::Running,
                exit_code: None,
                signal: 0,
                batch_host: "gpu01".into(),
                batch: true,
                requeue: true,
                restarts,
                node_count: 2,
            }),
            het_leader: None,
        }
    }

    fn facts(account: &str, shards: Option<u64>) -> NodeFacts {
        NodeFacts {
            account: account.into(),
            partition: "gpu".into(),
            qos: "normal".into(),
            shards,
        }
    }

    fn policy(text: &str) -> Policy {
        Ok(parse(text, "test.toml").expect("a valid policy"))
    }

    fn decide(policy: &Policy, step_id: u32, request: Option<&str>, sources: &Table) -> StepDecision {
        let step = Step {
            job_id: 7,
            step_id,
            user: "alice".into(),
            request,
            policy,
            node: "gpu01",
        };
        decide_step(&step, sources)
    }

    fn quota(decision: &StepDecision) -> Option<u64> {
        decision
            .verdict
            .as_ref()
            .expect("not refused")
            .quota
            .map(ByteSize::bytes)
    }

    #[test]
    fn the_batch_step_trusts_slurmds_variables_and_asks_slurmctld_nothing() {
        let sources = Table {
            env: env(&[
                ("SLURM_JOB_ACCOUNT", "physics"),
                ("SLURM_SHARDS_ON_NODE", "30"),
                ("SLURM_JOB_GPUS", "0,1"),
            ]),
            ..Table::default()
        };
        let policy = policy(BY_ACCOUNT);
        let decision = decide(&policy, BATCH_STEP, Some("50G"), &sources);
        // 50G is above physics' 40G cap: refused, and refused by the account rule.
        let refusal = decision.verdict.unwrap_err();
        assert!(refusal.contains("account 'physics'"), "{refusal}");
        let decision = decide(&policy, BATCH_STEP, None, &sources);
        assert_eq!(quota(&decision), Some(30 * GIB), "the 30 shards x 1G");
        assert_eq!(decision.watchdog_dir(), Some(Path::new("/run/gmq/jobs/7")));
        assert_eq!(decision.tuning.unwrap().visible_devices, 2);
        assert_eq!(
            decision.status_file,
            Some(PathBuf::from("/run/gmq/jobs/7/status.json"))
        );
        assert_eq!(sources.squeues.get(), 0);
    }

    #[test]
    fn an_srun_step_ignores_what_the_users_srun_wrote() {
        // The user's srun claims another account, more shards and other GPUs.
        let sources = Table {
            env: env(&[
                ("SLURM_JOB_ACCOUNT", "chemistry"),
                ("SLURM_SHARDS_ON_NODE", "60"),
                ("SLURM_JOB_GPUS", "0,1,2,3"),
                ("SLURM_STEP_GPUS", "1"),
            ]),
            facts: Some(facts("physics", Some(10))),
            ..Table::default()
        };
        let policy = policy(BY_ACCOUNT);
        let decision = decide(&policy, 0, Some("40G"), &sources);
        let verdict = decision.verdict.as_ref().unwrap();
        assert_eq!(verdict.quota.map(ByteSize::bytes), Some(10 * GIB));
        assert!(
            verdict.note.contains("lowered to the job's 10 shard(s)"),
            "{}",
            verdict.note
        );
        assert_eq!(
            decision.tuning.unwrap().visible_devices,
            1,
            "SLURM_STEP_GPUS, not SLURM_JOB_GPUS"
        );
        assert_eq!(sources.squeues.get(), 0, "the watchdog's facts were there");
    }

    #[test]
    fn an_srun_step_before_the_watchdogs_facts_asks_slurmctld_once_for_both() {
        let sources = Table {
            record: Some(record("physics", 20, 0, "")),
            ..Table::default()
        };
        let policy = policy(BY_ACCOUNT);
        let decision = decide(&policy, 0, None, &sources);
        assert_eq!(
            quota(&decision),
            Some(20 * GIB),
            "this node's 20 shards, not gpu02's"
        );
        assert_eq!(sources.squeues.get(), 1, "identity and shards from one squeue");
        assert!(decision.problems.is_empty());
        // No GPUs in the environment: no watchdog here, no status file.
        assert_eq!(decision.status_file, None);
    }

    #[test]
    fn a_step_of_a_job_without_gpus_here_asks_slurmctld_nothing() {
        // K5: a CPU-only job (no prolog word), under a policy with account rules and shards.
        let cpu_only = Table {
            record: Some(record("physics", 20, 0, "")),
            no_prolog_word: true,
            ..Table::default()
        };
        let policy = policy(BY_ACCOUNT);
        for request in [None, Some("50G"), Some("banana")] {
            let decision = decide(&policy, 0, request, &cpu_only);
            assert_eq!(quota(&decision), None, "{request:?}");
            assert_eq!(decision.status_file, None);
        }
        assert_eq!(cpu_only.squeues.get(), 0);
        // GPUs in a step's environment without the prolog's word (forged, or no prolog ran): still
        // nothing asked; the strictest cap, and the task is refused where it starts (no watchdog).
        let forged = Table {
            env: env(&[("SLURM_STEP_GPUS", "0")]),
            record: Some(record("physics", 20, 0, "")),
            no_prolog_word: true,
            ..Table::default()
        };
        let decision = decide(&policy, 0, Some("30G"), &forged);
        assert_eq!(quota(&decision), Some(30 * GIB));
        assert!(decision.status_file.is_some());
        assert!(decide(&policy, 0, Some("50G"), &forged).verdict.is_err());
        assert_eq!(forged.squeues.get(), 0);
    }

    #[test]
    fn without_slurmctld_an_srun_step_gets_the_strictest_cap_and_the_log_says_why() {
        let sources = Table::default();
        let policy = policy(BY_ACCOUNT);
        let decision = decide(&policy, 0, Some("50G"), &sources);
        let refusal = decision.verdict.clone().unwrap_err();
        assert!(refusal.contains("the smallest cap that may apply"), "{refusal}");
        assert_eq!(decision.problems.len(), 2, "{:?}", decision.problems);
        assert!(decision.problems[0].contains("strictest cap"));
        assert!(decision.problems[1].contains("holds the job to its shards"));
        assert_eq!(sources.squeues.get(), 1, "asked once, not once per fact");
        assert_eq!(quota(&decide(&policy, 0, Some("30G"), &sources)), Some(30 * GIB));
    }

    #[test]
    fn a_policy_that_needs_no_identity_or_shards_never_asks_slurmctld() {
        let sources = Table {
            env: env(&[("SLURM_JOB_ACCOUNT", "physics"), ("CUDA_VISIBLE_DEVICES", "0")]),
            ..Table::default()
        };
        let decision = decide(&policy(FLAT), 0, Some("64G"), &sources);
        assert_eq!(quota(&decision), Some(64 * GIB));
        assert_eq!(sources.squeues.get(), 0);
        assert!(decision.problems.is_empty());
        assert!(
            decision.status_file.is_some(),
            "GPUs here: the watchdog writes the status file"
        );
    }

    #[test]
    fn a_forged_request_is_refused_with_the_option_named() {
        let decision = decide(&policy(FLAT), 0, Some("banana"), &Table::default());
        let refusal = decision.verdict.unwrap_err();
        assert!(refusal.contains("--gpu-mem-quota 'banana'"), "{refusal}");
        assert_eq!((decision.tuning, decision.status_file), (None, None));
    }

    #[test]
    fn an_unusable_policy_fails_open_or_closed_as_the_admin_said() {
        let unusable = |mode| -> Policy {
            Err(Unusable {
                mode,
                error: LoadError::Missing {
                    path: PathBuf::from("/etc/gmq.toml"),
                },
            })
        };
        let open = decide(
            &unusable(OnConfigError::FailOpen),
            0,
            Some("8G"),
            &Table::default(),
        );
        let verdict = open.verdict.as_ref().unwrap();
        assert_eq!(verdict.quota.map(ByteSize::bytes), Some(8 * GIB));
        assert!(verdict.alarm.as_ref().unwrap().contains("runs unmonitored"));
        assert_eq!((open.tuning, open.status_file), (None, None));
        let closed = decide(
            &unusable(OnConfigError::FailClosed),
            0,
            Some("8G"),
            &Table::default(),
        );
        assert!(closed
            .verdict
            .unwrap_err()
            .contains("jobs are refused until it is fixed"));
    }

    fn tuning() -> Tuning {
        Tuning {
            frameworks: config::Frameworks::default(),
            hints: config::HintSettings::default(),
            gpu_total: Some(ByteSize::from_bytes(80 * GIB)),
            visible_devices: 1,
        }
    }

    /// The record our watchdog writes when it requeues a run for its GPU memory.
    const REQUEUED: &str =
        "gpu-mem-quota:v1{gpu01/0:q=40G,g0=41G/1a2b3c4d,over_quota=1,requeued=1,last=requeued@1718000061,t=1718000061}";

    #[test]
    fn a_first_run_gets_no_hints_and_costs_slurmctld_nothing() {
        let sources = Table::default();
        let (vars, said) = restart_hints(&sources, 0, ByteSize::from_bytes(40 * GIB), &tuning(), None);
        assert!(vars.is_empty() && said.is_empty());
        assert_eq!(sources.squeues.get(), 0);
    }

    #[test]
    fn a_restart_the_user_claims_is_confirmed_with_slurmctld() {
        let quota = ByteSize::from_bytes(40 * GIB);
        let claimed = env(&[("SLURM_RESTART_COUNT", "1")]);
        // slurmctld says the job never restarted: the claim and the record in it are ignored.
        let forged = Table {
            env: claimed.clone(),
            record: Some(record("physics", 0, 0, REQUEUED)),
            ..Table::default()
        };
        assert_eq!(
            restart_hints(&forged, 0, quota, &tuning(), None),
            (Vec::new(), Vec::new())
        );
        let real = Table {
            env: claimed,
            record: Some(record("physics", 0, 1, REQUEUED)),
            ..Table::default()
        };
        let (vars, said) = restart_hints(&real, 0, quota, &tuning(), None);
        assert!(
            vars.iter()
                .any(|(name, value)| *name == "GPU_MEM_QUOTA_LAST_EVENT" && value == "over-quota"),
            "{vars:?}"
        );
        assert!(
            matches!(&said[..], [Said::Info(line)] if line.starts_with("restart hints after over-quota")),
            "{said:?}"
        );
        assert_eq!(real.squeues.get(), 1);
    }

    #[test]
    fn a_restart_without_slurmctld_gets_no_hints_and_an_error_line() {
        let (vars, said) = restart_hints(&Table::default(), 2, ByteSize::from_bytes(GIB), &tuning(), None);
        assert!(vars.is_empty());
        assert!(
            matches!(&said[..], [Said::Error(line)] if line.contains("slurmctld did not answer")),
            "{said:?}"
        );
    }

    #[test]
    fn a_tasks_environment_says_only_what_we_said() {
        let sources = Table {
            env: env(&[("GPU_MEM_QUOTA_BYTES", "1"), ("CUDA_VISIBLE_DEVICES", "0")]),
            ..Table::default()
        };
        let policy = policy(FLAT);
        let no_quota = decide(&policy, 0, None, &sources);
        let (set, unset) = task_env(&no_quota, no_quota.verdict.as_ref().unwrap(), &sources, &[]);
        assert!(set.is_empty(), "{set:?}");
        assert!(unset.contains(&"GPU_MEM_QUOTA_BYTES") && unset.contains(&job_env::STATUS_FILE));
        let with_quota = decide(&policy, 0, Some("8G"), &sources);
        let (set, unset) = task_env(&with_quota, with_quota.verdict.as_ref().unwrap(), &sources, &[]);
        assert!(
            set.contains(&("GPU_MEM_QUOTA_BYTES", (8 * GIB).to_string())),
            "{set:?}"
        );
        assert!(set
            .iter()
            .any(|(name, value)| *name == job_env::STATUS_FILE && value == "/run/gmq/jobs/7/status.json"));
        assert!(!unset.contains(&"GPU_MEM_QUOTA_BYTES"));
        assert!(unset.contains(&"GPU_MEM_QUOTA_RESTARTS"), "a forged hint goes");
    }
}
