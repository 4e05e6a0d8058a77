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

use super::handle::Spank;
use super::{log, options};
use gmq_core::config;
use gmq_core::launch;
use gmq_core::node_files::PrologWord;
use gmq_core::plugin_args::parse_plugin_args;
use gmq_core::prolog::{decide_prolog, PrologAction, PrologFacts};
use gmq_core::size::ByteSize;
use gmq_core::sluid::Sluid;
use gmq_node::attribute::{signal, sweep_leftovers, JobOnNode, LeftoverOutcome, SWEEP_BUDGET};
use gmq_node::preempt_registry;
use gmq_node::runtime::{self, EarlierWatchdog};
use gmq_node::spawn;

const PROC_ROOT: &str = "/proc";

/// How long the prolog waits for the watchdog of the job's previous run to leave.
const EARLIER_RUN_WAIT: Duration = Duration::from_secs(5);

/// A variable of slurmd's script environment, when set and not empty.
fn slurmd_var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|value| !value.is_empty())
}

/// The job's SLUID, which slurmd sets from the job's step id from 25.11 on (`_build_env`): on
/// 26.05 its cgroup/v2 directory's name. A user's `SLURM_JOB_SLUID` reaches this environment only
/// as `SPANK_SLURM_JOB_SLUID` (`valid_spank_job_env`), so this one is slurmd's.
fn job_sluid(job_id: u32) -> Option<Sluid> {
    let text = slurmd_var("SLURM_JOB_SLUID")?;
    let sluid = Sluid::parse(&text);
    if sluid.is_none() {
        log::error(&format!(
            "job {job_id}: SLURM_JOB_SLUID '{text}' is not a SLUID: ignored"
        ));
    }
    sluid
}

pub(super) fn prolog(spank: &Spank) -> Result<(), String> {
    let job_id = spank.job_id().map_err(|e| e.to_string())?;
    // The job's GPUs on this node, from the credential; none: nothing to watch here.
    let Some(gpus) = slurmd_var("SLURM_JOB_GPUS").filter(|g| g != "NoDevFiles") else {
        return Ok(());
    };
    let args = parse_plugin_args(spank.plugin_args()).map_err(|e| e.to_string())?;
    let policy = config::load_for_job(&args.config, args.on_config_error);
    let uid = spank.job_uid().map_err(|e| e.to_string())?;
    let request = spank.getopt(&options::QUOTA).map_err(|e| e.to_string())?;
    let sluid = slurmd_var("SLURM_JOB_SLUID");
    let gpus = gmq_core::job_env::parse_gpu_list(&gpus).unwrap_or_default();
    let runtime_dir = policy.as_ref().ok().map(|config| &config.enforcement.runtime_dir);
    let facts = PrologFacts {
        job_id,
        uid,
        gid: spank.job_gid().map_err(|e| e.to_string())?,
        user: gmq_node::passwd::user_name(uid),
        account: slurmd_var("SLURM_JOB_ACCOUNT"),
        partition: slurmd_var("SLURM_JOB_PARTITION"),
        qos: slurmd_var("SLURM_JOB_QOS"),
        gpu_total: runtime_dir
            .and_then(|dir| runtime::gpu_total(dir, &gpus))
            .map(ByteSize::from_bytes),
        gpus,
        request: request.as_deref(),
        preemptible: spank.getopt(&options::PREEMPTIBLE).ok().flatten().is_some(),
        sluid: sluid.as_deref(),
        policy: &policy,
        config: &args.config,
    };
    let decision = decide_prolog(&facts);
    for problem in &decision.problems {
        log::error(&format!("job {job_id}: {problem}"));
    }
    let (runtime_dir, params, note) = match (decision.action, runtime_dir) {
        (PrologAction::Watch { params, note }, Some(dir)) => (dir, params, note),
        (PrologAction::Refuse(refusal), Some(dir)) => {
            // A watchdog of the job's previous run must not outlive this one's start (at its exit
            // it removes the job's directory, and with it this run's word).
            stop_earlier_run(job_id, dir);
            log::error(&format!(
                "job {job_id}: every task of the job on this node is refused: {refusal}"
            ));
            if let Err(e) = runtime::write_prolog_word(dir, job_id, &PrologWord::Refused(refusal)) {
                // Without the word each task finds no watchdog, and is refused for that.
                log::error(&format!("job {job_id}: cannot write the prolog's word: {e}"));
            }
            return Ok(());
        }
        (PrologAction::Nothing(why), _) => {
            log::error(&format!("job {job_id}: {why}"));
            return Ok(());
        }
        // Only a usable policy (one with a runtime directory) watches or refuses.
        (_, None) => return Ok(()),
    };
    stop_earlier_run(job_id, runtime_dir);
    if let Err(e) = runtime::write_prolog_word(runtime_dir, job_id, &PrologWord::Watched) {
        log::error(&format!(
            "job {job_id}: cannot write the prolog's word ({e}): the job's tasks here will be refused"
        ));
        return Ok(());
    }
    log::verbose(&format!(
        "job {job_id}: starting its watchdog here (GPU(s) {}, {note})",
        params.gpus.join(","),
    ));
    let mut env = spawn::clean_environment(
        slurmd_var("SLURM_CONF").as_deref(),
        slurmd_var("SLURMD_NODENAME").as_deref(),
    );
    // The slurmd running this prolog: should it die while the job runs, no epilog will stop the
    // watchdog, and the watchdog is to find out for itself (gmq_node::slurmd); with what tells
    // it, or a slurmd started again, from a process that merely takes its name (review K6).
    if let Some(slurmd) = gmq_node::slurmd::prolog_parent(Path::new(PROC_ROOT)) {
        env.push(format!(
            "{}={}",
            launch::SLURMD_VAR,
            launch::slurmd_var_value(&slurmd)
        ));
    }
    // A failure to start the watchdog must not fail the prolog: logged; the job's tasks here find
    // no watchdog and are refused.
    if let Err(e) = spawn::spawn_detached(&args.watchdog, &params.to_args(), &env) {
        log::error(&format!(
            "job {job_id}: cannot start the watchdog {}: {e}",
            args.watchdog.display()
        ));
    }
    Ok(())
}

/// The watchdog of the job's previous run, still self-healing when the job restarts here (G14):
/// stopped (SIGTERM, then SIGKILL after a grace period), so that the new run's watchdog gets the
/// job's lock and the old one cannot clear the new run's hard limit or remove its files.
fn stop_earlier_run(job_id: u32, runtime_dir: &Path) {
    match runtime::stop_earlier_watchdog(Path::new(PROC_ROOT), runtime_dir, job_id, EARLIER_RUN_WAIT) {
        EarlierWatchdog::None => {}
        EarlierWatchdog::Stopped { pid } => log::info(&format!(
            "job {job_id}: the watchdog of its previous run (pid {pid}) was still here: stopped it"
        )),
        EarlierWatchdog::Killed { pid } => log::error(&format!(
            "job {job_id}: the watchdog of its previous run (pid {pid}) did not leave within {}s of \
             SIGTERM: killed it",
            EARLIER_RUN_WAIT.as_secs()
        )),
        EarlierWatchdog::StillThere { pid } => log::error(&format!(
            "job {job_id}: the watchdog of its previous run (pid {pid}) could not be stopped: the new \
             run's watchdog may find the job's lock taken and leave the run unwatched"
        )),
    }
}

pub(super) fn epilog(spank: &Spank) -> Result<(), String> {
    let job_id = spank.job_id().map_err(|e| e.to_string())?;
    let uid = spank.job_uid().map_err(|e| e.to_string())?;
    let args = parse_plugin_args(spank.plugin_args()).map_err(|e| e.to_string())?;
    let policy = config::load(&args.config);
    match &policy {
        Ok(policy) => stop_watchdog(job_id, policy),
        Err(e) => log::verbose(&format!(
            "job {job_id}: the policy is unusable ({e}): no watchdog to stop"
        )),
    }
    // Without a usable policy the built-in setting holds: Slurm has ended every step by now.
    let kill = policy.as_ref().map_or(true, |p| p.enforcement.kill_leftovers);
    let job = JobOnNode {
        job_id,
        uid,
        sluid: job_sluid(job_id),
    };
    let sweep = sweep_leftovers(Path::new(PROC_ROOT), &job, kill);
    for leftover in sweep.leftovers {
        let pid = leftover.pid;
        match leftover.outcome {
            LeftoverOutcome::Killed => log::error(&format!(
                "job {job_id}: process {pid} was still in the job's cgroup after its end (moved \
                 into a cgroup below its step?): killed"
            )),
            LeftoverOutcome::Reported => log::error(&format!(
                "job {job_id}: process {pid} is still in the job's cgroup after its end \
                 (kill_leftovers = false: left running)"
            )),
            // Slurm's own, on its way out: never the job's to answer for.
            LeftoverOutcome::Slurmstepd => log::verbose(&format!(
                "job {job_id}: slurmstepd {pid} is still in the job's cgroup after its end: Slurm's, left alone"
            )),
            LeftoverOutcome::Root => log::verbose(&format!(
                "job {job_id}: process {pid} (root) is still in the cgroup of the job run as root after \
                 its end: root's processes are never killed, left alone"
            )),
            LeftoverOutcome::NotTheUsers(uid) => log::verbose(&format!(
                "job {job_id}: process {pid} left the job's user (uid {uid} now) before it could be \
                 killed: left alone"
            )),
            LeftoverOutcome::LeftTheJob | LeftoverOutcome::Gone => {}
            LeftoverOutcome::Failed(e) => log::error(&format!(
                "job {job_id}: process {pid} left in the job's cgroup could not be killed: {e}"
            )),
        }
    }
    if sweep.cut_short {
        log::error(&format!(
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
fn stop_watchdog(job_id: u32, policy: &config::Config) {
    let runtime_dir = &policy.enforcement.runtime_dir;
    let proc_root = Path::new(PROC_ROOT);
    let watchdog = runtime::read_pid_file(runtime_dir, job_id);
    // Through a pidfd, to the very process the pid file names (pid and start time).
    match watchdog.map(|w| (w, signal(proc_root, &w, libc::SIGTERM))) {
        Some((watchdog, Ok(()))) => log::verbose(&format!(
            "job {job_id}: stopping its watchdog (pid {})",
            watchdog.pid
        )),
        signalled => {
            log::verbose(&format!(
                "job {job_id}: no watchdog to stop ({}): removing its files",
                match signalled {
                    Some((w, Err(e))) => format!("pid {}: {e}", w.pid),
                    _ => "no pid file".to_string(),
                }
            ));
            let _ = runtime::remove_job_dir(runtime_dir, job_id);
            if let Some(dir) = &policy.metrics.textfile_dir {
                let _ = gmq_node::textfile::remove(dir, &gmq_core::metrics::file_name(job_id));
            }
            if let Ok(Some(registry)) = preempt_registry::Registry::open_existing(runtime_dir) {
                let _ = registry.remove(job_id);
            }
        }
    }
}
