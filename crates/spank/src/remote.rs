//! slurmstepd on a compute node.
//!
//! - `user_init` (once per step, in slurmstepd): decide the step's quota from the option value, the
//!   policy and the job's identity. It never fails: a failed `user_init` makes slurmd report
//!   "could not execve job" and drain the node.
//! - `task_init_privileged` (each task's child, as root): whether the job may run here: the job
//!   prolog's word, and its watchdog running.
//! - `task_init` (each task's child, as the user, just before exec): apply the decisions: write the
//!   environment, or fail the task (exit code 1) with the reason.
//! - `exit` of the batch step (the batch script ended): write the run's final record.
//!
//! The job's watchdog on this node is started and stopped by the job prolog and epilog
//! (`super::job_script`).
//!
//! The option value reaches this process through the job's environment, which the user controls:
//! it is validated again here.

use std::cell::OnceCell;
use std::io::Write;
use std::path::Path;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use super::handle::Spank;
use super::{log, options};
use gmq_core::config;
use gmq_core::controller::{record_entry, AdminComment, ControlError, Controller};
use gmq_core::node_files;
use gmq_core::node_files::{NodeFacts, PrologWord};
use gmq_core::plugin_args::{parse_plugin_args, PluginArgs};
use gmq_core::slurm_text::JobRecord;
use gmq_core::step::{self, Said, Step, StepDecision, StepSources, BATCH_STEP};
use gmq_node::runtime;
use gmq_node::slurm_controller::SlurmController;
use gmq_node::slurmctl::SlurmTools;

/// What `user_init` decided for this step; every task child inherits it (they are forks).
#[derive(Clone)]
struct StepPlan {
    decision: StepDecision,
    /// The restart hints of a requeued job (decided once per step, from slurmctld's record).
    restart_hints: Vec<(&'static str, String)>,
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
    match &plan.decision.verdict {
        Ok(v) => {
            if let Some(alarm) = &v.alarm {
                log::error(&format!("job {job}: {alarm}"));
            }
            // A quota lowered against what the user asked for is worth the admin's default level.
            match v.lowered {
                Some(_) => log::info(&format!("job {job}: {}", v.note)),
                None => log::verbose(&format!("job {job}: {}", v.note)),
            }
        }
        Err(refusal) => log::error(&format!("job {job}: refusing the step's tasks: {refusal}")),
    }
    *STEP.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(plan);
    Ok(())
}

/// Why this task may not start, found in its child (as root) before `task_init` (as the user).
static REFUSED: OnceLock<String> = OnceLock::new();

/// How long a task waits for the job's watchdog to show itself: the job prolog, which started it
/// detached, has returned before any step starts, and it writes its pid file at once.
const WATCHDOG_START_WAIT: Duration = Duration::from_secs(2);

/// How long a task waits, once the watchdog runs, for its word on the driver's hard limit: the
/// watchdog gives it right after NVML is loaded and the job's cgroup found, before it asks slurmctld
/// anything (a few hundred ms; NVML's first load on a GPU without persistence mode takes seconds).
const HARD_LIMIT_WAIT: Duration = Duration::from_secs(15);

/// Each task's child, as root, before `task_init`: whether the job may run here. Only where the
/// job prolog said it started the job's watchdog, and that watchdog runs: a refused request, a
/// dead watchdog, or a run for which Slurm ran no prolog here (a slurmd that restarted under the
/// job's earlier run takes the restart's steps for that run's) refuses the task, rather than
/// running it unwatched (review K1). Here and not in `user_init`, which runs with the user's
/// privileges and cannot read the job's files. Never fails itself: `task_init` refuses the task.
pub(super) fn task_init_privileged(spank: &Spank) -> Result<(), String> {
    let Some(plan) = step_plan() else {
        return Ok(());
    };
    let Some(dir) = plan.decision.watchdog_dir() else {
        return Ok(());
    };
    let first = spank.task_local_id().map_err(|e| e.to_string())? == 0;
    let began = Instant::now();
    let Some(refusal) = refusal_here(dir) else {
        // How long the task waited for its watchdog and the hard limit: the bound its start pays.
        if first {
            log::verbose(&format!(
                "job {}: the watchdog's word on the hard limit came {} ms after the first task's start",
                job_label(spank),
                began.elapsed().as_millis()
            ));
        }
        return Ok(());
    };
    // Once per step and node in slurmd's log; each task says it in the job's output.
    if first {
        log::error(&format!(
            "job {}: refusing the step's tasks on node {}: {refusal}",
            job_label(spank),
            gmq_node::slurmctl::this_node()
        ));
    }
    let _ = REFUSED.set(refusal);
    Ok(())
}

/// Why the job's tasks may not start on this node, from the job's directory there; `None`: they may.
fn refusal_here(job_dir: &Path) -> Option<String> {
    match runtime::read_prolog_word(job_dir) {
        Some(PrologWord::Refused(why)) => Some(format!(
            "the job prolog refused the job's request on this node: {why}"
        )),
        Some(PrologWord::Watched)
            if runtime::watchdog_runs(Path::new("/proc"), job_dir, WATCHDOG_START_WAIT) =>
        {
            // Nothing of the job is allocated before the driver's limit is set, where it can be.
            (!runtime::hard_limit_said(job_dir, HARD_LIMIT_WAIT)).then(|| {
                format!(
                    "the job's watchdog has not said within {} s whether the driver's hard limit \
                     is in force (the node's syslog says why): no task starts before it",
                    HARD_LIMIT_WAIT.as_secs()
                )
            })
        }
        Some(PrologWord::Watched) => Some(
            "no watchdog of the job runs on this node (it has died, or could not start): its GPU \
             memory quota cannot be enforced here"
                .to_string(),
        ),
        None => Some(
            "the job prolog left no word on this node, and started no watchdog: it did not run \
             for this run of the job (a slurmd that restarted under the job's earlier run takes \
             the restart's steps for that run's), or could not write it (the node's slurmd log \
             says); the job's GPU memory quota cannot be enforced here"
                .to_string(),
        ),
    }
}

pub(super) fn task_init(spank: &Spank) -> Result<(), String> {
    // Should user_init not have run in this process, decide here: the same inputs, the same answer.
    let plan = step_plan().unwrap_or_else(|| plan(spank));
    let job = job_label(spank);
    let verdict = plan
        .decision
        .verdict
        .as_ref()
        .map_err(|refusal| format!("job {job}: refusing to start the task: {refusal}"))?;
    if let Some(refusal) = REFUSED.get() {
        return Err(format!("job {job}: refusing to start the task: {refusal}"));
    }
    let sources = FromSlurm::new(spank)?;
    let mut hints = plan.restart_hints.clone();
    // The batch step's hints are decided here, in its one task, where slurmd's
    // SLURM_RESTART_COUNT is in the environment already; it is not yet at user_init.
    if let (Ok(BATCH_STEP), Some(quota), Some(tuning)) =
        (spank.step_id(), verdict.quota, &plan.decision.tuning)
    {
        hints = restart_hints(spank, &sources, quota, tuning);
    }
    // Told once per step, in the job's own output: the first task's stderr is the step's.
    if let (Some(lowered), Ok(0)) = (&verdict.lowered, spank.task_global_id()) {
        let _ = writeln!(
            std::io::stderr(),
            "{}: job {job}: {lowered}",
            gmq_node::PLUGIN_NAME
        );
    }
    let (set, unset) = step::task_env(&plan.decision, verdict, &sources, &hints);
    for (name, value) in &set {
        spank
            .setenv(name, value)
            .map_err(|e| format!("job {job}: cannot set {name}: {e}"))?;
    }
    for name in unset {
        spank
            .unsetenv(name)
            .map_err(|e| format!("job {job}: cannot unset {name}: {e}"))?;
    }
    Ok(())
}

/// Slurm's commands as root may run them from slurmstepd: `SLURM_CONF` from slurmstepd's own
/// environment (slurmd's), never the job's (in an srun step the user's srun writes it, and could
/// point root's queries at a controller of their own). Quick: `timeout` per attempt, one retry.
fn slurm_tools(timeout: std::time::Duration) -> SlurmTools {
    let mut tools = SlurmTools::find_configured();
    tools.timeout = timeout;
    // The plugin is built for the Slurm that loads it (slurmd checks major.minor).
    let (major, minor) = gmq_node::slurmctl::JSON_JOB_READS_FROM;
    tools.json_job_reads = super::sys::SLURM_VERSION_NUMBER >= (major << 16) | (minor << 8);
    tools.backoff.pauses = vec![std::time::Duration::from_millis(500)];
    tools
}

/// What a step's decision reads, from SPANK, the job's watchdog's files and slurmctld: each file
/// and slurmctld's record of the job read at most once per step.
struct FromSlurm<'a> {
    spank: &'a Spank,
    job_id: u32,
    facts: OnceCell<Option<NodeFacts>>,
    record: OnceCell<Result<JobRecord, String>>,
}

impl FromSlurm<'_> {
    fn new(spank: &Spank) -> Result<FromSlurm<'_>, String> {
        Ok(FromSlurm {
            spank,
            job_id: spank.job_id().map_err(|e| e.to_string())?,
            facts: OnceCell::new(),
            record: OnceCell::new(),
        })
    }
}

impl StepSources for FromSlurm<'_> {
    fn env(&self, name: &str) -> Option<String> {
        self.spank.getenv(name).ok().flatten()
    }

    fn node_facts(&self, runtime_dir: &Path) -> Option<NodeFacts> {
        self.facts
            .get_or_init(|| runtime::read_node_facts(runtime_dir, self.job_id))
            .clone()
    }

    /// One single-job squeue (never the whole cluster, G1), bounded: 5 s per attempt, one retry.
    fn job_record(&self) -> Result<JobRecord, String> {
        self.record
            .get_or_init(|| {
                slurm_tools(std::time::Duration::from_secs(5))
                    .job_record(self.job_id)
                    .map_err(|e| e.to_string())
            })
            .clone()
    }

    fn gpu_total(&self, runtime_dir: &Path, gpus: &[String]) -> Option<u64> {
        // The real GPU size, from the inventory the node's watchdogs keep (no NVML in slurmstepd).
        runtime::gpu_total(runtime_dir, gpus)
    }

    fn prolog_word_here(&self, runtime_dir: &Path) -> bool {
        runtime::prolog_word_here(runtime_dir, self.job_id)
    }
}

/// On a restart, the hints [`step::restart_hints`] gives, its lines logged.
fn restart_hints(
    spank: &Spank,
    sources: &FromSlurm,
    quota: gmq_core::size::ByteSize,
    tuning: &step::Tuning,
) -> Vec<(&'static str, String)> {
    let batch = spank.getopt(&options::BATCH).ok().flatten();
    let (hints, said) = step::restart_hints(
        sources,
        spank.restart_count().unwrap_or(0),
        quota,
        tuning,
        batch.as_deref(),
    );
    let job = sources.job_id;
    for line in said {
        match line {
            Said::Info(line) => log::info(&format!("job {job}: {line}")),
            Said::Error(line) => log::error(&format!("job {job}: {line}")),
        }
    }
    hints
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
    let path = node_files::job_dir(runtime_dir, job).join(node_files::RECORD_FILE);
    let Ok(text) = std::fs::read_to_string(&path) else {
        return;
    };
    let Some(entry) = gmq_core::record::parse(&text)
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

/// Decides the step ([`step::decide_step`]) from what slurmstepd knows; a hook that cannot read
/// its own handle refuses the step's tasks.
fn plan(spank: &Spank) -> StepPlan {
    let decided = (|| {
        let args = plugin_args(spank)?;
        let request = spank.getopt(&options::QUOTA).map_err(|e| e.to_string())?;
        let policy = config::load_for_job(&args.config, args.on_config_error);
        let uid = spank.job_uid().map_err(|e| e.to_string())?;
        let user =
            gmq_node::passwd::user_name(uid).ok_or_else(|| format!("uid {uid} has no passwd entry"))?;
        let sources = FromSlurm::new(spank)?;
        let step = Step {
            job_id: sources.job_id,
            step_id: spank.step_id().map_err(|e| e.to_string())?,
            user,
            request: request.as_deref(),
            policy: &policy,
            node: &gmq_node::slurmctl::this_node(),
        };
        let decision = step::decide_step(&step, &sources);
        for problem in &decision.problems {
            log::error(&format!("job {}: {problem}", step.job_id));
        }
        // Once per step; the batch step's in its task (see task_init).
        let restart_hints = match (&decision.verdict, &decision.tuning) {
            (Ok(verdict), Some(tuning)) if !step.is_batch() => match verdict.quota {
                Some(quota) => restart_hints(spank, &sources, quota, tuning),
                None => Vec::new(),
            },
            _ => Vec::new(),
        };
        Ok(StepPlan {
            decision,
            restart_hints,
        })
    })();
    decided.unwrap_or_else(|refusal: String| StepPlan {
        decision: StepDecision {
            verdict: Err(refusal),
            status_file: None,
            tuning: None,
            problems: Vec::new(),
        },
        restart_hints: Vec::new(),
    })
}

fn job_label(spank: &Spank) -> String {
    spank
        .job_id()
        .map(|id| id.to_string())
        .unwrap_or_else(|_| "?".into())
}
