//! The job prolog and epilog (`slurmstepd spank prolog|epilog`, root, run by slurmd on each of the
//! job's nodes): the watchdog's lifetime, which Slurm guarantees.
//!
//! - `job_prolog` (before the job's first step here; at allocation with `PrologFlags=Alloc` or
//!   `Contain`): start the job's watchdog, with facts slurmd took from the job credential that
//!   slurmctld signed: the job's GPUs on this node (`SLURM_JOB_GPUS`, written by the gres plugins),
//!   its account and partition (and QOS from 25.11 on), the node's name. A watchdog of the job's
//!   previous run still here (self-healing) is stopped first (review G14).
//! - `job_epilog` (after the job's last step here, with or without those flags): stop the watchdog,
//!   then deal with what the job left in its cgroups (review G7).
//!
//! Neither hook ever fails: a failing prolog drains the node. This process's environment is the one
//! slurmd built for the script (`prep_script_slurmd.c`, `_build_env`): user-set variables reach it
//! only with a `SPANK_` prefix, so the names read here are slurmd's. The quota option is the user's
//! input and is checked against the policy here, as in every step.

use std::path::Path;
use std::time::Duration;

use super::{say, HookPhase, Say, SpankHandle, PREEMPTIBLE, QUOTA};
use crate::attribute::{signal, sweep_leftovers, JobOnNode, LeftoverOutcome, SWEEP_BUDGET};
use crate::preempt_registry;
use crate::runtime::{self, EarlierWatchdog};
use crate::spawn;
use gmq_core::config;
use gmq_core::launch;
use gmq_core::node_files::PrologWord;
use gmq_core::plugin_args::parse_plugin_args;
use gmq_core::prolog::{decide_prolog, PrologAction, PrologFacts};
use gmq_core::size::ByteSize;
use gmq_core::sluid::Sluid;

const PROC_ROOT: &str = "/proc";

/// How long the prolog waits for the watchdog of the job's previous run to leave.
const EARLIER_RUN_WAIT: Duration = Duration::from_secs(5);

/// The job's SLUID, which slurmd sets from the job's step id from 25.11 on (`_build_env`): on
/// 26.05 its cgroup/v2 directory's name. A user's `SLURM_JOB_SLUID` reaches this environment only
/// as `SPANK_SLURM_JOB_SLUID` (`valid_spank_job_env`), so this one is slurmd's.
fn job_sluid(spank: &impl SpankHandle, job_id: u32) -> Option<Sluid> {
    let text = spank.own_env("SLURM_JOB_SLUID")?;
    let sluid = Sluid::parse(&text);
    if sluid.is_none() {
        say(spank, HookPhase::Epilog).error(&format!(
            "job {job_id}: SLURM_JOB_SLUID '{text}' is not a SLUID: ignored"
        ));
    }
    sluid
}

pub fn prolog(spank: &impl SpankHandle) -> Result<(), String> {
    let log = say(spank, HookPhase::Prolog);
    let job_id = spank.job_id()?;
    // The job's GPUs on this node, from the credential; none: nothing to watch here.
    let Some(gpus) = spank.own_env("SLURM_JOB_GPUS").filter(|g| g != "NoDevFiles") else {
        return Ok(());
    };
    let args = parse_plugin_args(spank.plugin_args()).map_err(|e| e.to_string())?;
    let policy = config::load_for_job(&args.config, args.on_config_error);
    let uid = spank.job_uid()?;
    let request = spank.getopt(&QUOTA)?;
    let sluid = spank.own_env("SLURM_JOB_SLUID");
    let gpus = gmq_core::job_env::parse_gpu_list(&gpus).unwrap_or_default();
    let runtime_dir = policy.as_ref().ok().map(|config| &config.enforcement.runtime_dir);
    let facts = PrologFacts {
        job_id,
        uid,
        gid: spank.job_gid()?,
        user: crate::passwd::user_name(uid),
        account: spank.own_env("SLURM_JOB_ACCOUNT"),
        partition: spank.own_env("SLURM_JOB_PARTITION"),
        qos: spank.own_env("SLURM_JOB_QOS"),
        gpu_total: runtime_dir
            .and_then(|dir| runtime::gpu_total(dir, &gpus))
            .map(ByteSize::from_bytes),
        gpus,
        request: request.as_deref(),
        preemptible: spank.getopt(&PREEMPTIBLE).ok().flatten().is_some(),
        sluid: sluid.as_deref(),
        policy: &policy,
        config: &args.config,
    };
    let decision = decide_prolog(&facts);
    for problem in &decision.problems {
        log.error(&format!("job {job_id}: {problem}"));
    }
    let (runtime_dir, params, note) = match (decision.action, runtime_dir) {
        (PrologAction::Watch { params, note }, Some(dir)) => (dir, params, note),
        (PrologAction::Refuse(refusal), Some(dir)) => {
            // A watchdog of the job's previous run must not outlive this one's start (at its exit
            // it removes the job's directory, and with it this run's word).
            stop_earlier_run(&log, job_id, dir);
            log.error(&format!(
                "job {job_id}: every task of the job on this node is refused: {refusal}"
            ));
            if let Err(e) = runtime::write_prolog_word(dir, job_id, &PrologWord::Refused(refusal)) {
                // Without the word each task finds no watchdog, and is refused for that.
                log.error(&format!("job {job_id}: cannot write the prolog's word: {e}"));
            }
            return Ok(());
        }
        (PrologAction::Nothing(why), _) => {
            log.error(&format!("job {job_id}: {why}"));
            return Ok(());
        }
        // Only a usable policy (one with a runtime directory) watches or refuses.
        (_, None) => return Ok(()),
    };
    stop_earlier_run(&log, job_id, runtime_dir);
    if let Err(e) = runtime::write_prolog_word(runtime_dir, job_id, &PrologWord::Watched) {
        log.error(&format!(
            "job {job_id}: cannot write the prolog's word ({e}): the job's tasks here will be refused"
        ));
        return Ok(());
    }
    log.verbose(&format!(
        "job {job_id}: starting its watchdog here (GPU(s) {}, {note})",
        params.gpus.join(","),
    ));
    let mut env = spawn::clean_environment(
        spank.own_env("SLURM_CONF").as_deref(),
        spank.own_env("SLURMD_NODENAME").as_deref(),
    );
    // The slurmd running this prolog: should it die while the job runs, no epilog will stop the
    // watchdog, and the watchdog is to find out for itself (gmq_node::slurmd); with what tells
    // it, or a slurmd started again, from a process that merely takes its name (review K6).
    if let Some(slurmd) = crate::slurmd::prolog_parent(Path::new(PROC_ROOT)) {
        env.push(format!(
            "{}={}",
            launch::SLURMD_VAR,
            launch::slurmd_var_value(&slurmd)
        ));
    }
    // A failure to start the watchdog must not fail the prolog: logged; the job's tasks here find
    // no watchdog and are refused.
    if let Err(e) = spawn::spawn_detached(&args.watchdog, &params.to_args(), &env) {
        log.error(&format!(
            "job {job_id}: cannot start the watchdog {}: {e}",
            args.watchdog.display()
        ));
    }
    Ok(())
}

/// The watchdog of the job's previous run, still self-healing when the job restarts here (G14):
/// stopped (SIGTERM, then SIGKILL after a grace period), so that the new run's watchdog gets the
/// job's lock and the old one cannot clear the new run's hard limit or remove its files.
fn stop_earlier_run(log: &Say<impl SpankHandle>, job_id: u32, runtime_dir: &Path) {
    match runtime::stop_earlier_watchdog(Path::new(PROC_ROOT), runtime_dir, job_id, EARLIER_RUN_WAIT) {
        EarlierWatchdog::None => {}
        EarlierWatchdog::Stopped { pid } => log.info(&format!(
            "job {job_id}: the watchdog of its previous run (pid {pid}) was still here: stopped it"
        )),
        EarlierWatchdog::Killed { pid } => log.error(&format!(
            "job {job_id}: the watchdog of its previous run (pid {pid}) did not leave within {}s of \
             SIGTERM: killed it",
            EARLIER_RUN_WAIT.as_secs()
        )),
        EarlierWatchdog::StillThere { pid } => log.error(&format!(
            "job {job_id}: the watchdog of its previous run (pid {pid}) could not be stopped: the new \
             run's watchdog may find the job's lock taken and leave the run unwatched"
        )),
    }
}

pub fn epilog(spank: &impl SpankHandle) -> Result<(), String> {
    let log = say(spank, HookPhase::Epilog);
    let job_id = spank.job_id()?;
    let uid = spank.job_uid()?;
    let args = parse_plugin_args(spank.plugin_args()).map_err(|e| e.to_string())?;
    let policy = config::load(&args.config);
    match &policy {
        Ok(policy) => stop_watchdog(&log, job_id, policy),
        Err(e) => log.verbose(&format!(
            "job {job_id}: the policy is unusable ({e}): no watchdog to stop"
        )),
    }
    // Without a usable policy the built-in setting holds: Slurm has ended every step by now.
    let kill = policy.as_ref().map_or(true, |p| p.enforcement.kill_leftovers);
    let job = JobOnNode {
        job_id,
        uid,
        sluid: job_sluid(spank, job_id),
    };
    let sweep = sweep_leftovers(Path::new(PROC_ROOT), &job, kill);
    for leftover in sweep.leftovers {
        let pid = leftover.pid;
        match leftover.outcome {
            LeftoverOutcome::Killed => log.error(&format!(
                "job {job_id}: process {pid} was still in the job's cgroup after its end (moved \
                 into a cgroup below its step?): killed"
            )),
            LeftoverOutcome::Reported => log.error(&format!(
                "job {job_id}: process {pid} is still in the job's cgroup after its end \
                 (kill_leftovers = false: left running)"
            )),
            // Slurm's own, on its way out: never the job's to answer for.
            LeftoverOutcome::Slurmstepd => log.verbose(&format!(
                "job {job_id}: slurmstepd {pid} is still in the job's cgroup after its end: Slurm's, left alone"
            )),
            LeftoverOutcome::Root => log.verbose(&format!(
                "job {job_id}: process {pid} (root) is still in the cgroup of the job run as root after \
                 its end: root's processes are never killed, left alone"
            )),
            LeftoverOutcome::NotTheUsers(uid) => log.verbose(&format!(
                "job {job_id}: process {pid} left the job's user (uid {uid} now) before it could be \
                 killed: left alone"
            )),
            LeftoverOutcome::LeftTheJob | LeftoverOutcome::Gone => {}
            LeftoverOutcome::Failed(e) => log.error(&format!(
                "job {job_id}: process {pid} left in the job's cgroup could not be killed: {e}"
            )),
        }
    }
    if sweep.cut_short {
        log.error(&format!(
            "job {job_id}: the look for what the job left on the node stopped after {}s, before \
             every process was looked at",
            SWEEP_BUDGET.as_secs()
        ));
    }
    Ok(())
}

/// The job has ended here: SIGTERM to its watchdog, which writes its last record and leaves. One
/// that is not running (it died, or never started) leaves files that must not outlive the job:
/// the runtime directory, the metrics file (node_exporter would export a dead job's last sample
/// for ever) and its preemption registry entry.
fn stop_watchdog(log: &Say<impl SpankHandle>, job_id: u32, policy: &config::Config) {
    let runtime_dir = &policy.enforcement.runtime_dir;
    let proc_root = Path::new(PROC_ROOT);
    let watchdog = runtime::read_pid_file(runtime_dir, job_id);
    // Through a pidfd, to the very process the pid file names (pid and start time).
    match watchdog.map(|w| (w, signal(proc_root, &w, libc::SIGTERM))) {
        Some((watchdog, Ok(()))) => log.verbose(&format!(
            "job {job_id}: stopping its watchdog (pid {})",
            watchdog.pid
        )),
        signalled => {
            log.verbose(&format!(
                "job {job_id}: no watchdog to stop ({}): removing its files",
                match signalled {
                    Some((w, Err(e))) => format!("pid {}: {e}", w.pid),
                    _ => "no pid file".to_string(),
                }
            ));
            let _ = runtime::remove_job_dir(runtime_dir, job_id);
            if let Some(dir) = &policy.metrics.textfile_dir {
                let _ = crate::textfile::remove(dir, &gmq_core::metrics::file_name(job_id));
            }
            if let Ok(Some(registry)) = preempt_registry::Registry::open_existing(runtime_dir) {
                let _ = registry.remove(job_id);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hooks::fake::{FakeSpank, ScratchNode as Node, JOB};
    use crate::hooks::LogLevel;
    use gmq_core::node_files;

    impl Node {
        /// The job's prolog, with GPU 0 here.
        fn job(&self) -> FakeSpank {
            FakeSpank::new(&self.policy()).with_own_env("SLURM_JOB_GPUS", "0")
        }
        fn word(&self) -> Option<PrologWord> {
            runtime::read_prolog_word(&node_files::job_dir(&self.runtime_dir(), JOB))
        }
    }

    #[test]
    fn a_job_without_gpus_here_is_left_alone() {
        let node = Node::new();
        for gpus in [None, Some("NoDevFiles")] {
            let mut spank = FakeSpank::new(&node.policy()).with_option(&QUOTA, "35G");
            if let Some(gpus) = gpus {
                spank = spank.with_own_env("SLURM_JOB_GPUS", gpus);
            }
            assert_eq!(prolog(&spank), Ok(()));
            assert!(spank.logged.borrow().is_empty(), "{:?}", spank.logged);
            assert_eq!(node.word(), None);
        }
    }

    #[test]
    fn a_refused_request_refuses_every_task_here_and_says_so() {
        let node = Node::new();
        let spank = node.job().with_option(&QUOTA, "35G");
        assert_eq!(prolog(&spank), Ok(()));
        let refusal = "--gpu-mem-quota=35G exceeds the 30G cap for this cluster (defaults.max)";
        assert_eq!(
            spank.lines(LogLevel::Error),
            vec![format!(
                "prolog: job {JOB}: every task of the job on this node is refused: {refusal}"
            )]
        );
        assert_eq!(node.word(), Some(PrologWord::Refused(refusal.to_string())));
    }

    #[test]
    fn an_unusable_policy_starts_nothing_and_says_why() {
        let node = Node::new();
        let spank = FakeSpank::new(&node.dir.path().join("missing.toml"))
            .with_own_env("SLURM_JOB_GPUS", "0")
            .with_option(&QUOTA, "20G");
        assert_eq!(prolog(&spank), Ok(()));
        let errors = spank.lines(LogLevel::Error);
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(
            errors[0].starts_with(&format!(
                "prolog: job {JOB}: no watchdog: the policy is unusable ("
            )),
            "{errors:?}"
        );
        assert_eq!(node.word(), None);
    }

    #[test]
    fn an_accepted_request_is_watched_and_the_watchdog_started() {
        let node = Node::new();
        let spank = node
            .job()
            .with_option(&QUOTA, "20G")
            .with_own_env("SLURM_JOB_SLUID", "not-a-sluid");
        assert_eq!(prolog(&spank), Ok(()));
        assert_eq!(node.word(), Some(PrologWord::Watched));
        // The watchdog here is /bin/true: started, and gone at once.
        assert_eq!(
            spank.lines(LogLevel::Error),
            vec![format!(
                "prolog: job {JOB}: SLURM_JOB_SLUID 'not-a-sluid' is not a SLUID: ignored"
            )]
        );
        let verbose = spank.lines(LogLevel::Verbose);
        assert!(
            verbose.iter().any(|l| l.starts_with(&format!(
                "prolog: job {JOB}: starting its watchdog here (GPU(s) 0, "
            ))),
            "{verbose:?}"
        );
    }

    #[test]
    fn the_epilog_removes_what_a_dead_watchdog_left() {
        let node = Node::new();
        let spank = node.job().with_option(&QUOTA, "20G");
        assert_eq!(prolog(&spank), Ok(()));
        let job_dir = node_files::job_dir(&node.runtime_dir(), JOB);
        assert!(job_dir.is_dir());
        let epilog_spank = FakeSpank::new(&node.policy());
        assert_eq!(epilog(&epilog_spank), Ok(()));
        assert!(!job_dir.exists(), "{}", job_dir.display());
        assert_eq!(
            epilog_spank.lines(LogLevel::Verbose),
            vec![format!(
                "epilog: job {JOB}: no watchdog to stop (no pid file): removing its files"
            )]
        );
        assert!(epilog_spank.lines(LogLevel::Error).is_empty());
    }
}
