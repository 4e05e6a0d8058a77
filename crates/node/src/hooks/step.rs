//! slurmstepd on a compute node, for one step.
//!
//! - `user_init` (once per step, in slurmstepd): decide the step's quota from the option value, the
//!   policy and the job's identity. It never fails: a failed `user_init` makes slurmd report
//!   "could not execve job" and drain the node.
//! - `task_init_privileged` (each task's child, as root): whether the job may run here: the job
//!   prolog's word, and its watchdog running.
//! - `task_init` (each task's child, as the user, just before exec): apply the decisions: write the
//!   environment, or fail the task (exit code 1) with the reason.
//!
//! The job's watchdog on this node is started and stopped by the job prolog and epilog
//! (`super::job_script`); the batch step's end writes the run's record (`super::job_end`).
//!
//! The option value reaches this process through the job's environment, which the user controls:
//! it is validated again here.

use std::cell::OnceCell;
use std::path::Path;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use super::{say, HookPhase, SpankHandle, BATCH, QUOTA};
use crate::runtime;
use crate::slurmctl::SlurmTools;
use gmq_core::config;
use gmq_core::node_files::{NodeFacts, PrologWord};
use gmq_core::plugin_args::{parse_plugin_args, PluginArgs};
use gmq_core::slurm_text::JobRecord;
use gmq_core::step::{self, Said, Step, StepDecision, StepSources, BATCH_STEP};

/// What `user_init` decided for this step; every task child inherits it (they are forks).
#[derive(Clone)]
struct Decided {
    decision: StepDecision,
    /// The restart hints of a requeued job (decided once per step, from slurmctld's record).
    restart_hints: Vec<(&'static str, String)>,
}

/// What one slurmstepd keeps from hook to hook: the step's decision (`user_init`), and why a task
/// may not start (its child, as root, before `task_init` as the user). The plugin keeps one in a
/// static; plain process state, which every task child inherits.
pub struct StepMemory {
    decided: Mutex<Option<Decided>>,
    refused: OnceLock<String>,
}

impl StepMemory {
    pub const fn new() -> StepMemory {
        StepMemory {
            decided: Mutex::new(None),
            refused: OnceLock::new(),
        }
    }

    fn decided(&self) -> Option<Decided> {
        self.decided
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }
}

impl Default for StepMemory {
    fn default() -> Self {
        StepMemory::new()
    }
}

pub fn user_init(spank: &impl SpankHandle, memory: &StepMemory) -> Result<(), String> {
    let log = say(spank, HookPhase::Step);
    let job = job_label(spank);
    let plan = decide(spank);
    match &plan.decision.verdict {
        Ok(v) => {
            if let Some(alarm) = &v.alarm {
                log.error(&format!("job {job}: {alarm}"));
            }
            // A quota lowered against what the user asked for is worth the admin's default level.
            match v.lowered {
                Some(_) => log.info(&format!("job {job}: {}", v.note)),
                None => log.verbose(&format!("job {job}: {}", v.note)),
            }
        }
        Err(refusal) => log.error(&format!("job {job}: refusing the step's tasks: {refusal}")),
    }
    *memory
        .decided
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(plan);
    Ok(())
}

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
pub fn task_init_privileged(spank: &impl SpankHandle, memory: &StepMemory) -> Result<(), String> {
    let log = say(spank, HookPhase::Task);
    let Some(plan) = memory.decided() else {
        return Ok(());
    };
    let Some(dir) = plan.decision.watchdog_dir() else {
        return Ok(());
    };
    let first = spank.task_local_id()? == 0;
    let began = Instant::now();
    let Some(not_here) = refusal_here(dir) else {
        // How long the task waited for its watchdog and the hard limit: the bound its start pays.
        if first {
            log.verbose(&format!(
                "job {}: the watchdog's word on the hard limit came {} ms after the first task's start",
                job_label(spank),
                began.elapsed().as_millis()
            ));
        }
        return Ok(());
    };
    let mut refusal = not_here.to_string();
    // Once per step and node: the requeue, and the line in slurmd's log; each task says it in the
    // job's output.
    if first {
        if not_here == NotHere::NoProlog {
            refusal = format!("{refusal}; {}", requeue_for_a_prolog(spank));
        }
        log.error(&format!(
            "job {}: refusing the step's tasks on node {}: {refusal}",
            job_label(spank),
            crate::slurmctl::this_node()
        ));
    }
    let _ = memory.refused.set(refusal);
    Ok(())
}

/// How many restarts a job may have had and still be requeued for a run whose prolog Slurm
/// skipped: each such requeue is one more, so a node that never runs the prolog ends the job
/// after this many (failed, as without the requeue), never in a loop.
const MISSED_PROLOG_RESTARTS: u32 = 8;

/// A run for which Slurm ran no job prolog here: requeue the job, so that its next run has one,
/// rather than fail it, which is all refusing its tasks would do. Slurm before 23.02 skips the
/// prolog of a requeued job's next run on a node now and then (SchedMD bug 15656, fixed by
/// "Remove backoff from cred removal logic": slurmd purged the earlier run's credential state at
/// most every 2 s, so a relaunch within 2 s of another purge looked like a step of the old run),
/// and a slurmd restarted under the job's earlier run does the same. Bounded by
/// [`MISSED_PROLOG_RESTARTS`]; a job Slurm will not requeue (`--no-requeue`, an allocation without
/// a batch script) fails as before. What was done, for the refusal's line.
fn requeue_for_a_prolog(spank: &impl SpankHandle) -> String {
    let (job, restarts) = match (spank.job_id(), spank.restart_count()) {
        (Ok(job), Ok(restarts)) => (job, restarts),
        _ => return "the job is not requeued (Slurm does not say its id or restarts)".to_string(),
    };
    if restarts >= MISSED_PROLOG_RESTARTS {
        return format!(
            "the job is not requeued again: it has restarted {restarts} times, the most for a run \
             without its prolog ({MISSED_PROLOG_RESTARTS})"
        );
    }
    match slurm_tools(spank, Duration::from_secs(5)).requeue(job) {
        Ok(()) => "the job is requeued, so that its next run has its prolog and its watchdog".to_string(),
        Err(e) => format!("the job could not be requeued ({e})"),
    }
}

/// Why the job's tasks may not start on this node.
#[derive(Debug, PartialEq, Eq)]
enum NotHere {
    /// The job prolog left no word: it did not run for this run of the job.
    NoProlog,
    Refused(String),
}

impl std::fmt::Display for NotHere {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotHere::NoProlog => f.write_str(
                "the job prolog left no word on this node, and started no watchdog: Slurm ran no \
                 prolog for this run of the job (a requeued job's next run on Slurm before 23.02, \
                 or a slurmd that restarted under the job's earlier run), or it could not write it \
                 (the node's slurmd log says); the job's GPU memory quota cannot be enforced here",
            ),
            NotHere::Refused(why) => f.write_str(why),
        }
    }
}

/// Why the job's tasks may not start on this node, from the job's directory there; `None`: they may.
fn refusal_here(job_dir: &Path) -> Option<NotHere> {
    let refused = |why: String| Some(NotHere::Refused(why));
    match runtime::read_prolog_word(job_dir) {
        Some(PrologWord::Refused(why)) => refused(format!(
            "the job prolog refused the job's request on this node: {why}"
        )),
        Some(PrologWord::Watched)
            if runtime::watchdog_runs(Path::new("/proc"), job_dir, WATCHDOG_START_WAIT) =>
        {
            // Nothing of the job is allocated before the driver's limit is set, where it can be.
            (!runtime::hard_limit_said(job_dir, HARD_LIMIT_WAIT)).then(|| {
                NotHere::Refused(format!(
                    "the job's watchdog has not said within {} s whether the driver's hard limit \
                     is in force (the node's syslog says why): no task starts before it",
                    HARD_LIMIT_WAIT.as_secs()
                ))
            })
        }
        Some(PrologWord::Watched) => refused(
            "no watchdog of the job runs on this node (it has died, or could not start): its GPU \
             memory quota cannot be enforced here"
                .to_string(),
        ),
        // A prolog that ran could not write where the jobs' directories live: no requeue helps.
        None if !jobs_dir_usable(job_dir) => refused(
            "the job prolog left no word on this node, and the runtime directory's jobs/ is not a \
             directory of root's (the node's slurmd log says why): the job's GPU memory quota \
             cannot be enforced here"
                .to_string(),
        ),
        None => Some(NotHere::NoProlog),
    }
}

/// Whether the directory holding the jobs' directories (`<runtime_dir>/jobs`) is a real directory
/// of root's, where a prolog that ran would have left its word.
fn jobs_dir_usable(job_dir: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    job_dir
        .parent()
        .and_then(|jobs| std::fs::symlink_metadata(jobs).ok())
        .is_some_and(|m| m.is_dir() && m.uid() == 0)
}

pub fn task_init(spank: &impl SpankHandle, memory: &StepMemory) -> Result<(), String> {
    // Should user_init not have run in this process, decide here: the same inputs, the same answer.
    let plan = memory.decided().unwrap_or_else(|| decide(spank));
    let job = job_label(spank);
    let verdict = plan
        .decision
        .verdict
        .as_ref()
        .map_err(|refusal| format!("job {job}: refusing to start the task: {refusal}"))?;
    if let Some(refusal) = memory.refused.get() {
        return Err(format!("job {job}: refusing to start the task: {refusal}"));
    }
    let sources = FromSlurm::new(spank)?;
    let mut hints = plan.restart_hints.clone();
    // The batch step's hints are decided here, in its one task, where slurmd's
    // SLURM_RESTART_COUNT is in the environment already; it is not yet at user_init.
    if let (Ok(BATCH_STEP), Some(quota), Some(tuning)) =
        (spank.step_id(), verdict.quota, &plan.decision.tuning)
    {
        hints = restart_hints(spank, &sources, quota, tuning, HookPhase::Task);
    }
    // Told once per step, in the job's own output: the first task's stderr is the step's.
    if let (Some(lowered), Ok(0)) = (&verdict.lowered, spank.task_global_id()) {
        spank.tell_job(&format!(
            "{}: {}: job {job}: {lowered}",
            crate::PLUGIN_NAME,
            HookPhase::Task
        ));
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
pub(super) fn slurm_tools(spank: &impl SpankHandle, timeout: Duration) -> SlurmTools {
    let mut tools = SlurmTools::find_configured();
    tools.timeout = timeout;
    // The plugin is built for the Slurm that loads it (slurmd checks major.minor).
    let (major, minor) = crate::slurmctl::JSON_JOB_READS_FROM;
    tools.json_job_reads = spank.slurm_version() >= (major << 16) | (minor << 8);
    tools.backoff.pauses = vec![std::time::Duration::from_millis(500)];
    tools
}

/// What a step's decision reads, from SPANK, the job's watchdog's files and slurmctld: each file
/// and slurmctld's record of the job read at most once per step.
struct FromSlurm<'a, H> {
    spank: &'a H,
    job_id: u32,
    facts: OnceCell<Option<NodeFacts>>,
    record: OnceCell<Result<JobRecord, String>>,
}

impl<H: SpankHandle> FromSlurm<'_, H> {
    fn new(spank: &H) -> Result<FromSlurm<'_, H>, String> {
        Ok(FromSlurm {
            spank,
            job_id: spank.job_id()?,
            facts: OnceCell::new(),
            record: OnceCell::new(),
        })
    }
}

impl<H: SpankHandle> StepSources for FromSlurm<'_, H> {
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
                slurm_tools(self.spank, Duration::from_secs(5))
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
fn restart_hints<H: SpankHandle>(
    spank: &H,
    sources: &FromSlurm<H>,
    quota: gmq_core::size::ByteSize,
    tuning: &step::Tuning,
    phase: HookPhase,
) -> Vec<(&'static str, String)> {
    let batch = spank.getopt(&BATCH).ok().flatten();
    let (hints, said) = step::restart_hints(
        sources,
        spank.restart_count().unwrap_or(0),
        quota,
        tuning,
        batch.as_deref(),
    );
    let job = sources.job_id;
    let log = say(spank, phase);
    for line in said {
        match line {
            Said::Info(line) => log.info(&format!("job {job}: {line}")),
            Said::Error(line) => log.error(&format!("job {job}: {line}")),
        }
    }
    hints
}

pub(super) fn plugin_args(spank: &impl SpankHandle) -> Result<PluginArgs, String> {
    parse_plugin_args(spank.plugin_args()).map_err(|e| e.to_string())
}

/// Decides the step ([`step::decide_step`]) from what slurmstepd knows; a hook that cannot read
/// its own handle refuses the step's tasks.
fn decide(spank: &impl SpankHandle) -> Decided {
    let decided = (|| {
        let args = plugin_args(spank)?;
        let request = spank.getopt(&QUOTA)?;
        let policy = config::load_for_job(&args.config, args.on_config_error);
        let uid = spank.job_uid()?;
        let user = crate::passwd::user_name(uid).ok_or_else(|| format!("uid {uid} has no passwd entry"))?;
        let sources = FromSlurm::new(spank)?;
        let step = Step {
            job_id: sources.job_id,
            step_id: spank.step_id()?,
            user,
            request: request.as_deref(),
            policy: &policy,
            node: &crate::slurmctl::this_node(),
        };
        let decision = step::decide_step(&step, &sources);
        for problem in &decision.problems {
            say(spank, HookPhase::Step).error(&format!("job {}: {problem}", step.job_id));
        }
        // Once per step; the batch step's in its task (see task_init).
        let restart_hints = match (&decision.verdict, &decision.tuning) {
            (Ok(verdict), Some(tuning)) if !step.is_batch() => match verdict.quota {
                Some(quota) => restart_hints(spank, &sources, quota, tuning, HookPhase::Step),
                None => Vec::new(),
            },
            _ => Vec::new(),
        };
        Ok(Decided {
            decision,
            restart_hints,
        })
    })();
    decided.unwrap_or_else(|refusal: String| Decided {
        decision: StepDecision {
            verdict: Err(refusal),
            status_file: None,
            tuning: None,
            problems: Vec::new(),
        },
        restart_hints: Vec::new(),
    })
}

fn job_label(spank: &impl SpankHandle) -> String {
    spank
        .job_id()
        .map(|id| id.to_string())
        .unwrap_or_else(|_| "?".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hooks::fake::{FakeSpank, ScratchNode, JOB};
    use crate::hooks::LogLevel;

    /// The batch step of a job with GPU 0 on the scratch node.
    fn batch_step(node: &ScratchNode, request: &str) -> FakeSpank {
        FakeSpank::new(&node.policy())
            .with_option(&QUOTA, request)
            .with_env("SLURM_JOB_GPUS", "0")
    }

    /// The step's hooks in the order slurmstepd runs them: user_init, then one task's child.
    fn run(spank: &FakeSpank) -> Result<(), String> {
        let memory = StepMemory::new();
        user_init(spank, &memory)?;
        task_init_privileged(spank, &memory)?;
        task_init(spank, &memory)
    }

    #[test]
    fn a_request_over_the_cap_refuses_the_steps_tasks() {
        let node = ScratchNode::new();
        let spank = batch_step(&node, "35G");
        let refusal = "--gpu-mem-quota=35G exceeds the 30G cap for this cluster (defaults.max)";
        assert_eq!(
            run(&spank),
            Err(format!("job {JOB}: refusing to start the task: {refusal}"))
        );
        assert_eq!(
            spank.lines(LogLevel::Error),
            vec![format!("step: job {JOB}: refusing the step's tasks: {refusal}")]
        );
        assert_eq!(spank.env.borrow().get("GPU_MEM_QUOTA"), None);
    }

    #[test]
    fn a_task_without_the_prologs_word_never_runs_unwatched() {
        // K1: the request is accepted, but no prolog said the job is watched here.
        let node = ScratchNode::new();
        let spank = batch_step(&node, "20G");
        let refused = run(&spank).unwrap_err();
        assert!(
            refused.starts_with(&format!(
                "job {JOB}: refusing to start the task: the job prolog left no word on this node"
            )),
            "{refused}"
        );
        let errors = spank.lines(LogLevel::Error);
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(
            errors[0].starts_with(&format!("task: job {JOB}: refusing the step's tasks on node ")),
            "{errors:?}"
        );
        // Where the prolog refused, the task says the prolog's reason.
        let runtime_dir = node.runtime_dir();
        let refusal = PrologWord::Refused("over the cap for QOS 'debug'".into());
        runtime::write_prolog_word(&runtime_dir, JOB, &refusal).unwrap();
        assert_eq!(
            run(&spank),
            Err(format!(
                "job {JOB}: refusing to start the task: the job prolog refused the job's request on \
                 this node: over the cap for QOS 'debug'"
            ))
        );
        // Where it watched and no watchdog runs: refused too, after the watchdog's start wait.
        runtime::write_prolog_word(&runtime_dir, JOB, &PrologWord::Watched).unwrap();
        let refused = run(&spank).unwrap_err();
        assert!(
            refused.contains("no watchdog of the job runs on this node"),
            "{refused}"
        );
    }

    #[test]
    fn a_run_without_its_prolog_is_told_apart_from_a_prolog_that_could_not_write() {
        let node = ScratchNode::new();
        let job_dir = gmq_core::node_files::job_dir(&node.runtime_dir(), JOB);
        // No jobs/ of root's: whatever ran, a requeue would find the same.
        let unusable = refusal_here(&job_dir).unwrap();
        assert!(matches!(unusable, NotHere::Refused(_)), "{unusable:?}");
        assert!(unusable
            .to_string()
            .starts_with("the job prolog left no word on this node"));
        // jobs/ is there (the tests run as root, as slurmstepd does): this run had no prolog.
        std::fs::create_dir_all(job_dir.parent().unwrap()).unwrap();
        assert_eq!(refusal_here(&job_dir), Some(NotHere::NoProlog));
        // A job that has restarted as often as a missed prolog may make it is not requeued again,
        // and nothing is asked of Slurm.
        let spank = FakeSpank {
            restart_count: MISSED_PROLOG_RESTARTS,
            ..batch_step(&node, "20G")
        };
        assert_eq!(
            requeue_for_a_prolog(&spank),
            "the job is not requeued again: it has restarted 8 times, the most for a run without \
             its prolog (8)"
        );
    }

    #[test]
    fn a_cpu_only_step_is_left_exactly_as_it_was() {
        let node = ScratchNode::new();
        let spank = FakeSpank {
            step_id: 0,
            ..batch_step(&node, "20G")
        }
        .with_env("SLURM_JOB_GPUS", "")
        .with_env("GPU_MEM_QUOTA", "999G");
        assert_eq!(run(&spank), Ok(()));
        assert_eq!(
            spank.lines(LogLevel::Verbose),
            vec![format!(
                "step: job {JOB}: no GPU of the job on this node: no quota here"
            )]
        );
        // Not even a variable of ours is touched: the step has no quota to speak of.
        let env = spank.env.borrow();
        assert_eq!(
            env.get("GPU_MEM_QUOTA").map(String::as_str),
            Some("999G"),
            "{env:?}"
        );
    }
}
