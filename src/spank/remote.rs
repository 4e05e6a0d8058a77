//! slurmstepd on a compute node.
//!
//! - `user_init` (once per step, in slurmstepd): decide the step's quota from the option value, the
//!   policy and the job's identity. It never fails: a failed `user_init` makes slurmd report
//!   "could not execve job" and drain the node.
//! - `task_init` (each task's child, as the user, just before exec): apply the decision: write the
//!   environment, or fail the task (exit code 1) with the reason.
//! - `exit` of the batch step (the batch script ended): write the run's final record.
//!
//! The job's watchdog on this node is started and stopped by the job prolog and epilog
//! (`super::job_script`).
//!
//! The option value reaches this process through the job's environment, which the user controls:
//! it is validated again here.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::handle::Spank;
use super::{log, options};
use crate::admission::{self, NodeVerdict};
use crate::config;
use crate::controller::{record_entry, AdminComment, ControlError, Controller, SlurmController};
use crate::hints;
use crate::job_env;
use crate::launch;
use crate::plugin_args::{parse_plugin_args, PluginArgs};
use crate::quota::Identity;
use crate::runtime;
use crate::size::ByteSize;
use crate::slurmctl::{JobInfo, SlurmTools};

/// Slurm's step id for the batch step (slurm.h: SLURM_BATCH_SCRIPT).
const BATCH_STEP: u32 = 0xffff_fffb;

/// What `user_init` decided for this step; every task child inherits it (they are forks).
#[derive(Clone)]
struct StepPlan {
    verdict: Result<NodeVerdict, String>,
    /// The status file the job's watchdog here writes, when the policy is usable and the job has
    /// GPUs here (the job prolog started the watchdog).
    status_file: Option<PathBuf>,
    /// What the framework caps and restart hints need, when the policy is usable.
    tuning: Option<Tuning>,
    /// The restart hints of a requeued job (decided once per step, from slurmctld's record).
    restart_hints: Vec<(&'static str, String)>,
}

#[derive(Clone)]
struct Tuning {
    frameworks: config::Frameworks,
    hints: config::HintSettings,
    /// The GPU size quotas are measured against (the node's real one where known).
    gpu_total: Option<ByteSize>,
    visible_devices: u32,
}

static STEP: Mutex<Option<StepPlan>> = Mutex::new(None);

fn step_plan() -> Option<StepPlan> {
    STEP.lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .clone()
}

pub(crate) fn user_init(spank: &Spank) -> Result<(), String> {
    let job = job_label(spank);
    let plan = plan(spank);
    match &plan.verdict {
        Ok(v) => {
            if let Some(alarm) = &v.alarm {
                log::error(&format!("job {job}: {alarm}"));
            }
            log::verbose(&format!("job {job}: {}", v.note));
        }
        Err(refusal) => log::error(&format!("job {job}: refusing the step's tasks: {refusal}")),
    }
    *STEP.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(plan);
    Ok(())
}

pub(super) fn task_init(spank: &Spank) -> Result<(), String> {
    // Should user_init not have run in this process, decide here: the same inputs, the same answer.
    let plan = step_plan().unwrap_or_else(|| plan(spank));
    let job = job_label(spank);
    let verdict = plan
        .verdict
        .map_err(|refusal| format!("job {job}: refusing to start the task: {refusal}"))?;
    let mut vars = match verdict.quota {
        Some(quota) => job_env::quota_vars(quota),
        None => Vec::new(),
    };
    // The status file speaks of the quota: a job without one is left exactly as it was.
    if let Some(status) = plan.status_file.as_ref().filter(|_| verdict.quota.is_some()) {
        vars.push((job_env::STATUS_FILE, status.display().to_string()));
    }
    if let (Some(quota), Some(tuning)) = (verdict.quota, &plan.tuning) {
        vars.extend(framework_caps(spank, quota, tuning));
        vars.extend(plan.restart_hints.iter().cloned());
        if let Ok(BATCH_STEP) = spank.step_id() {
            let job_id = spank.job_id().map_err(|e| e.to_string())?;
            vars.extend(restart_hints(
                spank,
                &JobFromSlurmctld::new(job_id),
                quota,
                tuning,
            ));
        }
    }
    for (name, value) in &vars {
        spank
            .setenv(name, value)
            .map_err(|e| format!("job {job}: cannot set {name}: {e}"))?;
    }
    // The variables that speak for us say only what we said: a forged value, or one inherited by
    // a job submitted from inside another job, is removed.
    if plan.tuning.is_some() {
        let ours = job_env::QUOTA_VARS.iter().chain(hints::HINT_VARS.iter());
        for name in ours.filter(|name| !vars.iter().any(|(set, _)| set == *name)) {
            spank
                .unsetenv(name)
                .map_err(|e| format!("job {job}: cannot unset {name}: {e}"))?;
        }
    }
    Ok(())
}

/// PyTorch, JAX, TensorFlow (and MPS) settings that keep a framework inside the quota, merged with
/// (never overwriting) what the user set.
fn framework_caps(spank: &Spank, quota: ByteSize, tuning: &Tuning) -> Vec<(&'static str, String)> {
    let Some(gpu_total) = tuning.gpu_total else {
        return Vec::new();
    };
    let user_env: BTreeMap<String, String> = hints::framework::FRAMEWORK_VARS
        .iter()
        .filter_map(|name| Some((name.to_string(), spank.getenv(name).ok().flatten()?)))
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

/// Slurm's commands as root may run them from slurmstepd: `SLURM_CONF` from slurmstepd's own
/// environment (slurmd's), never the job's (in an srun step the user's srun writes it, and could
/// point root's queries at a controller of their own). Quick: `timeout` per attempt, one retry.
fn slurm_tools(timeout: std::time::Duration) -> SlurmTools {
    let mut tools = SlurmTools::find_configured();
    tools.timeout = timeout;
    // The plugin is built for the Slurm that loads it (slurmd checks major.minor).
    let (major, minor) = crate::slurmctl::JSON_JOB_READS_FROM;
    tools.json_job_reads = super::sys::SLURM_VERSION_NUMBER >= (major << 16) | (minor << 8);
    tools.backoff.pauses = vec![std::time::Duration::from_millis(500)];
    tools
}

/// slurmctld's squeue record of the job, asked at most once per step: the identity of an srun step
/// and the confirmation of a restart both read it. Also the facts the job's watchdog kept from it
/// (read at most once per step too): the identity and the shards of an srun step read those.
struct JobFromSlurmctld {
    job_id: u32,
    answer: std::cell::OnceCell<Result<JobInfo, String>>,
    facts: std::cell::OnceCell<Option<runtime::NodeFacts>>,
}

impl JobFromSlurmctld {
    fn new(job_id: u32) -> JobFromSlurmctld {
        JobFromSlurmctld {
            job_id,
            answer: std::cell::OnceCell::new(),
            facts: std::cell::OnceCell::new(),
        }
    }

    /// The job's [`runtime::NodeFacts`] as its watchdog kept them in `runtime_dir`.
    fn node_facts(&self, runtime_dir: &Path) -> Option<&runtime::NodeFacts> {
        self.facts
            .get_or_init(|| runtime::read_node_facts(runtime_dir, self.job_id))
            .as_ref()
    }

    fn get(&self) -> Result<&JobInfo, &str> {
        self.answer
            .get_or_init(|| {
                slurm_tools(std::time::Duration::from_secs(5))
                    .job(self.job_id)
                    .map_err(|e| e.to_string())
            })
            .as_ref()
            .map_err(String::as_str)
    }
}

/// On a restart (`restarts` from slurmstepd: the job was requeued), what the record of the previous
/// run says the job should change to fit. One controller round trip per step, on restarts only.
fn restart_hints(
    spank: &Spank,
    slurmctld: &JobFromSlurmctld,
    quota: ByteSize,
    tuning: &Tuning,
) -> Vec<(&'static str, String)> {
    let job_id = slurmctld.job_id;
    let job = job_id.to_string();
    let tools = slurm_tools(std::time::Duration::from_secs(5));
    match restarted(spank, slurmctld) {
        Ok(false) => return Vec::new(),
        Ok(true) => {}
        Err(e) => {
            log::error(&format!("job {job}: no restart hints: {e}"));
            return Vec::new();
        }
    }
    let admin_comment = match tools.admin_comment(job_id) {
        Ok(text) => text,
        Err(e) => {
            log::error(&format!(
                "job {job}: no restart hints: cannot read the job's record: {e}"
            ));
            return Vec::new();
        }
    };
    let Some(previous) = hints::previous_run(&admin_comment) else {
        return Vec::new();
    };
    let gpu_total = tuning.gpu_total.unwrap_or(quota);
    let Some(last_event) = hints::restart_event(&previous, quota, gpu_total, tuning.hints.near_margin) else {
        return Vec::new();
    };
    let batch = spank
        .getopt(&options::BATCH)
        .ok()
        .flatten()
        .and_then(|value| crate::batch::parse_batch_option(&value).ok());
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
        "job {job}: restart hints after {last_event}: batch scale {}",
        advice.batch_scale
    );
    if let Some(b) = &advice.batch {
        line.push_str(&format!(
            "; micro-batch {} x accumulation {} ({})",
            b.micro, b.accum, b.reason
        ));
    }
    log::info(&line);
    hints::hint_vars(&advice)
}

/// Whether this run is a restart, without a controller round trip on a first run. slurmstepd's own
/// count (`S_SLURM_RESTART_COUNT`) is trusted when it says so, but Slurm 22.05 leaves it 0 in the
/// batch step. `SLURM_RESTART_COUNT` is set by slurmd on every restart (a user cannot hide a real
/// one, but from their own srun steps), yet the user's to set on a first run: a restart it claims
/// is confirmed with slurmctld (one squeue, bounded like the identity's).
fn restarted(spank: &Spank, slurmctld: &JobFromSlurmctld) -> Result<bool, String> {
    if spank.restart_count().is_ok_and(|count| count > 0) {
        return Ok(true);
    }
    let claimed = spank
        .getenv("SLURM_RESTART_COUNT")
        .ok()
        .flatten()
        .and_then(|v| v.trim().parse::<u32>().ok())
        .is_some_and(|count| count > 0);
    if !claimed {
        return Ok(false);
    }
    slurmctld
        .get()
        .map(|job| job.restarts > 0)
        .map_err(|e| format!("cannot read the job's restart count from slurmctld: {e}"))
}

/// The batch script ended: its record goes into the AdminComment while slurmctld still takes it.
/// (The job epilog stops the watchdog: `super::job_script`.)
pub(super) fn exit(spank: &Spank) -> Result<(), String> {
    if spank.step_id().map_err(|e| e.to_string())? != BATCH_STEP {
        return Ok(());
    }
    let job = spank.job_id().map_err(|e| e.to_string())?;
    let args = plugin_args(spank)?;
    if let Ok(policy) = config::load(&args.config) {
        record_at_job_end(job, &policy.enforcement.runtime_dir);
    }
    Ok(())
}

/// The batch script ended: put the watchdog's record of this run into the job's AdminComment now,
/// while slurmctld still accepts updates (once the job completes it refuses them). Quick and
/// bounded: one attempt each, two seconds at most; a failure is logged, the job is not held up.
fn record_at_job_end(job: u32, runtime_dir: &Path) {
    let path = runtime::job_dir(runtime_dir, job).join(runtime::RECORD_FILE);
    let Ok(text) = std::fs::read_to_string(&path) else {
        return;
    };
    let Some(entry) = crate::record::parse(&text)
        .ok()
        .flatten()
        .and_then(|r| r.entries().first().cloned())
    else {
        return;
    };
    let mut tools = slurm_tools(std::time::Duration::from_secs(2));
    tools.backoff.pauses.clear();
    // The watchdog's own way to write its record, one attempt: the job's end may not be held up.
    let mut slurm = SlurmController { job_id: job, tools };
    let comment = match slurm.admin_comment() {
        Ok(comment) => comment,
        Err(e) => {
            log::error(&format!(
                "job {job}: cannot write the final record to AdminComment: {e}"
            ));
            return;
        }
    };
    // Text that cannot be told apart from imitation is left as it is: an admin's words and the
    // job's history must not go for this run's entry.
    let Some(existing) = comment.readable() else {
        if let AdminComment::Unreadable(why) = &comment {
            log::error(&format!(
                "job {job}: the AdminComment cannot be read ({why}): the final record is not written"
            ));
        }
        return;
    };
    match record_entry(&mut slurm, existing, &entry, false) {
        Ok(_) => {}
        // Cancelled, or out of time: the watchdog kept the record while the job ran.
        Err(ControlError::JobGone(_)) => log::verbose(&format!(
            "job {job}: the job has ended before its batch script: its record is the one kept while it ran"
        )),
        Err(e) => log::error(&format!(
            "job {job}: cannot write the final record to AdminComment: {e}"
        )),
    }
}

fn plugin_args(spank: &Spank) -> Result<PluginArgs, String> {
    parse_plugin_args(spank.plugin_args()).map_err(|e| e.to_string())
}

fn plan(spank: &Spank) -> StepPlan {
    let decided = (|| {
        let args = plugin_args(spank)?;
        let request = spank.getopt(&options::QUOTA).map_err(|e| e.to_string())?;
        let policy = config::load_for_job(&args.config, args.on_config_error);
        let job_id = spank.job_id().map_err(|e| e.to_string())?;
        let step = spank.step_id().map_err(|e| e.to_string())?;
        let slurmctld = JobFromSlurmctld::new(job_id);
        let who = identity(spank, &slurmctld, step, policy.as_ref().ok())?;
        let gpus = job_gpus(spank, step);
        // The real GPU size, from the inventory the node's watchdogs keep (no NVML in slurmstepd).
        let gpu_total = policy.as_ref().ok().and_then(|config| {
            runtime::gpu_total(&config.enforcement.runtime_dir, gpus.as_deref().unwrap_or(&[]))
        });
        let verdict = admission::on_node(
            request.as_deref(),
            &policy,
            &who,
            gpu_total.map(ByteSize::from_bytes),
            shards_on_node(spank, &slurmctld, step, policy.as_ref().ok()),
        )?;
        let tuning = policy.as_ref().ok().map(|config| Tuning {
            frameworks: config.frameworks.clone(),
            hints: config.hints.clone(),
            gpu_total: gpu_total.map(ByteSize::from_bytes).or(config.gpu_memory),
            visible_devices: gpus.as_ref().map_or(1, |g| g.len().max(1) as u32),
        });
        // Once per step. The batch step's in its task (one task), where slurmd's
        // SLURM_RESTART_COUNT is in the environment already; it is not yet at user_init.
        let restart_hints = match (verdict.quota, &tuning) {
            (Some(quota), Some(tuning)) if step != BATCH_STEP => {
                restart_hints(spank, &slurmctld, quota, tuning)
            }
            _ => Vec::new(),
        };
        let status_file = match (&policy, gpus) {
            (Ok(config), Some(_)) => Some(runtime::status_file(&config.enforcement.runtime_dir, job_id)),
            _ => None,
        };
        Ok((verdict, status_file, tuning, restart_hints))
    })();
    match decided {
        Ok((verdict, status_file, tuning, restart_hints)) => StepPlan {
            verdict: Ok(verdict),
            status_file,
            tuning,
            restart_hints,
        },
        Err(refusal) => StepPlan {
            verdict: Err(refusal),
            status_file: None,
            tuning: None,
            restart_hints: Vec::new(),
        },
    }
}

/// The job's GPUs on this node as Slurm set them in the step's environment; `None`: no GPUs here.
/// `SLURM_JOB_GPUS` is read in the batch step only, where slurmd writes it from the job's
/// allocation; in other steps it is whatever the user's srun carried, and slurmstepd sets
/// `SLURM_STEP_GPUS` / `CUDA_VISIBLE_DEVICES` instead. A list that does not parse still starts the
/// watchdog, with no list: it reads the allocation from slurmctld either way.
fn job_gpus(spank: &Spank, step: u32) -> Option<Vec<String>> {
    let names: &[&str] = if step == BATCH_STEP {
        &["SLURM_JOB_GPUS", "SLURM_STEP_GPUS", "CUDA_VISIBLE_DEVICES"]
    } else {
        &["SLURM_STEP_GPUS", "CUDA_VISIBLE_DEVICES"]
    };
    let value = names
        .iter()
        .filter_map(|name| spank.getenv(name).ok().flatten())
        .find(|value| !value.is_empty() && value != "NoDevFiles")?;
    Some(launch::parse_gpu_list(&value).unwrap_or_default())
}

/// The job's `gres/shard` count on this node. In the batch step slurmd wrote
/// `SLURM_SHARDS_ON_NODE` from the job's allocation. Any other step's environment was built by the
/// user's own srun, so there the count is the one the job's watchdog read from slurmctld's record
/// at its start ([`runtime::NodeFacts`]: once per job and node), or, where it has not yet, asked
/// of slurmctld (that one job's record: never the whole cluster, G1), when the policy schedules by
/// shards: the quota the
/// step's tasks are told, and the framework caps set from it, are then the one the watchdog holds
/// the job to. The node is found by its NodeName (slurmstepd's `SLURMD_NODENAME`, G6).
fn shards_on_node(
    spank: &Spank,
    slurmctld: &JobFromSlurmctld,
    step: u32,
    config: Option<&config::Config>,
) -> Option<u64> {
    if step == BATCH_STEP {
        let value = spank.getenv("SLURM_SHARDS_ON_NODE").ok().flatten()?;
        return value.trim().parse().ok();
    }
    let config = config?;
    config.scheduling.shard_unit?;
    let job_id = slurmctld.job_id;
    if let Some(facts) = slurmctld.node_facts(&config.enforcement.runtime_dir) {
        return facts.shards;
    }
    match slurm_tools(std::time::Duration::from_secs(5)).job_record(job_id) {
        Ok(record) => record.shards_on(&crate::slurmctl::this_node()),
        Err(e) => {
            log::error(&format!(
                "job {job_id}: cannot read the job's shards from slurmctld ({e}): the step is told \
                 the quota without them; the watchdog holds the job to its shards"
            ));
            None
        }
    }
}

/// Who runs the job. The user from the job's uid (slurmstepd's, from the job credential). Account,
/// partition and QOS: in the batch step from the variables slurmd wrote from slurmctld's record; in
/// any other step the environment was built by the user's own srun, so they come from slurmctld,
/// when the policy has rules that depend on them: the facts the job's watchdog read at its start
/// ([`runtime::NodeFacts`]), or, where it has not yet, one squeue. When slurmctld
/// cannot answer they stay unknown, and the node applies the strictest cap that may apply
/// ([`admission::on_node`]).
fn identity(
    spank: &Spank,
    slurmctld: &JobFromSlurmctld,
    step: u32,
    config: Option<&config::Config>,
) -> Result<Identity, String> {
    let job_id = slurmctld.job_id;
    let uid = spank.job_uid().map_err(|e| e.to_string())?;
    let user = crate::passwd::user_name(uid).ok_or_else(|| format!("uid {uid} has no passwd entry"))?;
    let mut who = Identity {
        user: Some(user),
        ..Identity::default()
    };
    if step == BATCH_STEP {
        let env = |name| spank.getenv(name).ok().flatten().filter(|v| !v.is_empty());
        who.account = env("SLURM_JOB_ACCOUNT");
        who.partition = env("SLURM_JOB_PARTITION");
        who.qos = env("SLURM_JOB_QOS");
        return Ok(who);
    }
    let Some(config) = config.filter(|config| admission::depends_on_identity(config)) else {
        return Ok(who);
    };
    let known = |s: &str| (!s.is_empty()).then(|| s.to_string());
    if let Some(facts) = slurmctld.node_facts(&config.enforcement.runtime_dir) {
        who.account = known(&facts.account);
        who.partition = known(&facts.partition);
        who.qos = known(&facts.qos);
        return Ok(who);
    }
    match slurmctld.get() {
        Ok(job) => {
            who.account = known(&job.account);
            who.partition = known(&job.partition);
            who.qos = known(&job.qos);
        }
        Err(e) => log::error(&format!(
            "job {job_id}: cannot read the job's account, partition and QOS from slurmctld ({e}): \
             the strictest cap that may apply is enforced"
        )),
    }
    Ok(who)
}

fn job_label(spank: &Spank) -> String {
    spank
        .job_id()
        .map(|id| id.to_string())
        .unwrap_or_else(|_| "?".into())
}
