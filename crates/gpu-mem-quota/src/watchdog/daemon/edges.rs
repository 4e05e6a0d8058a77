//! The watchdog's start-up and outside calls: the policy, the job's lock and pid file, NVML (with
//! backoff), the driver's hard limit, the node registry, the early-warning signal, the sweep of
//! what gone jobs left, and whether the job left the node.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use super::super::contend::{Contender, RegistryFacts};
use super::super::gpu::NvmlSource;
use super::super::hard_limit::Setter;
use super::super::log::Log;
use super::super::presence::{Check, Presence, CHECK_EVERY};
use super::outputs::{write_inventory, LogReporter};
use super::stop::sleep_or_stop;
use super::PROC_ROOT;
use gmq_core::config;
use gmq_core::controller::{Controller, SlurmJob};
use gmq_core::launch::Params;
use gmq_core::node_files;
use gmq_core::preempt::JobPriority;
use gmq_core::size::ByteSize;
use gmq_core::watchdog::hard_limit::{self, Answer, InForce, Outcome};
use gmq_core::watchdog::lifetime::still_running;
use gmq_core::watchdog::{backoff, Reporter};
use gmq_node::attribute::{self, ProcessIdentity};
use gmq_node::preempt_registry::GpuRef;
use gmq_node::runtime;
use gmq_node::slurm_controller::SlurmController;
use gmq_node::textfile;

/// Whether the job's run here is over ([`Presence::check`]; slurmctld asked only when the job's
/// steps here are empty), logged.
pub(super) fn left_node(
    presence: &mut Presence,
    control: &mut dyn Controller,
    run: Option<u32>,
    report: &mut dyn Reporter,
) -> bool {
    let runs_on = || still_running(control, run).map_err(|e| e.to_string());
    match presence.check(Instant::now(), runs_on) {
        Check::Here => false,
        Check::HereBut(line) => {
            report.warning(&line);
            false
        }
        Check::Left => {
            report.info("the job has no process left on this node (its cgroup): the watchdog stops");
            true
        }
    }
}

/// The driver's setter of hard limits, where it has one; where it has none, says so (the word
/// the job's tasks wait for): the limit needs nothing else, not even the job's cgroup.
pub(super) fn hard_limit_setter(library: &Path, dir: &Path, report: &mut LogReporter) -> Option<Setter> {
    Setter::find(library)
        .map_err(|why| say_hard_limit(dir, &Outcome::NotOffered(why).log_line(), report))
        .ok()
}

/// Sets the driver's hard limit (the quota) for the job's cgroup on each of its GPUs
/// (`super::hard_limit`), logs which path is in force, and gives the job's tasks the word they
/// wait for (`dir`, the job's runtime directory).
pub(super) fn set_hard_limit(
    setter: Setter,
    source: &NvmlSource,
    job_cgroup: &Path,
    quota: u64,
    dir: &Path,
    report: &mut LogReporter,
) -> Option<(Setter, InForce)> {
    let answers: Vec<Answer> = source
        .listed_handles()
        .into_iter()
        .map(|(gpu, device)| Answer {
            gpu,
            code: setter.set(device, job_cgroup, quota, quota),
        })
        .collect();
    let outcome = hard_limit::outcome(job_cgroup, quota, &answers);
    say_hard_limit(dir, &outcome.log_line(), report);
    match outcome {
        Outcome::InForce(in_force) => Some((setter, in_force)),
        Outcome::NotOffered(_) | Outcome::Failed(_) | Outcome::SwitchedOff => {
            // A limit some GPUs took and another refused is taken off again: one path only.
            for (_, device) in source.listed_handles() {
                let _ = setter.set(device, job_cgroup, 0, hard_limit::LIMIT_MAX);
            }
            None
        }
    }
}

/// Logs `line`, the watchdog's word on the hard limit, and leaves it where the job's tasks wait
/// for it (`node_files::HARD_LIMIT_FILE`): each starts once it is there.
pub(super) fn say_hard_limit(dir: &Path, line: &str, report: &mut LogReporter) {
    report.info(line);
    let access = textfile::Access::ROOT_ONLY;
    if let Err(e) =
        textfile::write_atomically_as(dir, node_files::HARD_LIMIT_FILE, &format!("{line}\n"), access)
    {
        report.error(&format!(
            "cannot leave the word on the hard limit in {}: {e}; the job's tasks wait for it, then are refused",
            dir.display()
        ));
    }
}

/// The hard limit in force set again to `quota` (decided since from slurmctld's record: lower, or
/// higher where the prolog could not know the job's QOS).
pub(super) fn reset_hard_limit(
    source: &NvmlSource,
    setter: &Setter,
    in_force: &mut InForce,
    quota: ByteSize,
    report: &mut LogReporter,
) {
    if quota.bytes() == in_force.bytes {
        return;
    }
    let refused: Vec<String> = source
        .listed_handles()
        .into_iter()
        .filter_map(|(gpu, device)| {
            let code = setter.set(device, &in_force.namespace, quota.bytes(), quota.bytes());
            (code != hard_limit::NVML_SUCCESS).then(|| format!("GPU {gpu}: NVML error {code}"))
        })
        .collect();
    let was = ByteSize::from_bytes(in_force.bytes);
    if refused.is_empty() {
        in_force.bytes = quota.bytes();
        report.info(&format!("hard limit now {quota} (was {was}), as the job's quota"));
    } else {
        report.warning(&format!(
            "cannot set the hard limit again ({}): it stays {was}; the watchdog enforces the quota",
            refused.join(", ")
        ));
    }
}

/// The admin's policy; without a usable one there is no watchdog (logged where the default state
/// directory says).
pub(super) fn load_policy(params: &Params) -> Result<config::Config, ExitCode> {
    config::load(&params.config).map_err(|e| {
        let mut log = Log::open(params.job_id, PathBuf::from(config::limits::STATE_DIR));
        log.error(&format!("the policy is unusable ({e}): no watchdog for this job"));
        ExitCode::FAILURE
    })
}

/// Creates the job's runtime directory and takes its lock. `Err(SUCCESS)`: another watchdog
/// already has it.
pub(super) fn take_job_lock(
    settings: &config::Enforcement,
    job_id: u32,
    log: &mut Log,
) -> Result<(PathBuf, std::fs::File), ExitCode> {
    let dir = match runtime::create_job_dir(&settings.runtime_dir, job_id) {
        Ok(dir) => dir,
        Err(e) => {
            log.error(&format!(
                "cannot create the job's runtime directory {}: {e}; the job runs unwatched",
                node_files::job_dir(&settings.runtime_dir, job_id).display()
            ));
            return Err(ExitCode::FAILURE);
        }
    };
    match runtime::try_lock(&dir) {
        Ok(Some(lock)) => Ok((dir, lock)),
        Ok(None) => {
            // Two steps of the job started at once and both started a watchdog: the other won.
            log.info("another watchdog already watches this job on this node: this one exits");
            Err(ExitCode::SUCCESS)
        }
        Err(e) => {
            log.error(&format!(
                "cannot lock {}: {e}; the job runs unwatched",
                dir.display()
            ));
            Err(ExitCode::FAILURE)
        }
    }
}

/// Records this process (pid and start time) for the plugin; returns who it is, when known.
pub(super) fn write_pid_file(dir: &Path, log: &mut Log) -> Option<ProcessIdentity> {
    let me = attribute::identify(Path::new(PROC_ROOT), std::process::id());
    if let Err(e) = me
        .ok_or_else(|| std::io::Error::other("cannot read /proc/self/stat"))
        .and_then(|me| runtime::write_pid_file(dir, me))
    {
        log.error(&format!("cannot write the pid file: {e}"));
    }
    me
}

/// Removes what watchdogs of gone jobs left behind.
pub(super) fn sweep_leftovers(policy: &config::Config, log: &mut Log) {
    let (removed, errors) = super::super::leftovers::sweep(
        &policy.enforcement.runtime_dir,
        policy.metrics.textfile_dir.as_deref(),
    );
    for what in removed {
        log.info(&format!("removed the {what}"));
    }
    for e in errors {
        log.warning(&format!("sweeping what gone jobs left: {e}"));
    }
}

/// What the job brings to the node registry.
pub(super) struct Registration<'a> {
    pub(super) node: &'a str,
    pub(super) user: &'a str,
    pub(super) quota: Option<ByteSize>,
    pub(super) job: &'a SlurmJob,
    pub(super) me: ProcessIdentity,
}

/// Joins the node's preemption registry; `None` (logged): this job takes no part in preemption.
pub(super) fn join_registry(
    policy: &config::Config,
    params: &Params,
    registration: Registration,
    source: &NvmlSource,
    control: &mut SlurmController,
    report: &mut LogReporter,
) -> Option<Contender> {
    let job = registration.job;
    let facts = RegistryFacts {
        user: registration.user.to_string(),
        quota: registration.quota.map(|q| q.bytes()),
        priority: JobPriority {
            qos: job.qos.clone(),
            partition: job.partition.clone(),
            account: job.account.clone(),
            slurm_priority: job.priority,
        },
        preemptible: params.preemptible,
        requeueable: job.requeueable,
        preemptions: control
            .admin_comment()
            .ok()
            .and_then(|comment| comment.record())
            .map_or(0, |r| {
                r.totals().events.get(gmq_core::record::EventKind::Preempted)
            }),
    };
    let gpu_refs = source
        .listed()
        .into_iter()
        .map(|(index, uuid)| GpuRef { index, uuid })
        .collect();
    match Contender::new(
        params.job_id,
        registration.node,
        policy.preemption.clone(),
        &policy.enforcement.runtime_dir,
        facts,
        gpu_refs,
        registration.me,
    ) {
        Ok(contender) => Some(contender),
        Err(e) => {
            report.error(&format!(
                "cannot join the node registry ({e}): this job takes no part in preemption"
            ));
            None
        }
    }
}

/// Sends the early-warning signal to the job's processes (`job`: id and uid), each re-checked to
/// still count for the job. The pids come from the last sample, where each was listed on one of
/// the job's GPUs (or claimed by the job): the re-check keeps that, and re-reads the rest (a
/// reused pid, a process now only another job's, a slurmstepd).
pub(super) fn signal_job(
    proc_root: &Path,
    cgroup_root: &Path,
    (job_id, uid): (u32, u32),
    signal: i32,
    pids: &[u32],
    report: &mut LogReporter,
) {
    let mut sent = 0;
    for &pid in pids {
        let owner = attribute::owner_of(proc_root, cgroup_root, pid);
        if !attribute::counts_for_job(&owner, job_id, uid, true) {
            continue;
        }
        // Through a pidfd, to the very process just checked (H3).
        if let Some(process) = owner.process() {
            if attribute::signal(proc_root, &process, signal).is_ok() {
                sent += 1;
            }
        }
    }
    report.info(&format!("sent signal {signal} to {sent} process(es) of the job"));
}

/// Loads NVML, retrying with backoff: a driver that is not there yet may come. Gives up when the
/// job is no longer running here (asked of slurmctld every 30 s while waiting): a watchdog must
/// never outlive its job, even where no exit hook stops it.
pub(super) fn open_nvml(
    settings: &config::Enforcement,
    gpus: &[String],
    control: &mut SlurmController,
    presence: &mut Presence,
    report: &mut LogReporter,
    dir: &Path,
) -> Option<NvmlSource> {
    let mut attempt = 0;
    let mut last_check = Instant::now();
    loop {
        match NvmlSource::open(&settings.nvml_library, gpus) {
            Ok(mut source) => {
                if attempt > 0 {
                    report.info("NVML loaded");
                }
                let unknown = source.mark_listed(gpus);
                if !unknown.is_empty() {
                    report.warning(&format!(
                        "the job's GPU(s) {} are not among NVML's {} device(s): ignored (every GPU \
                         is sampled; the job's processes count wherever they are)",
                        unknown.join(","),
                        source.device_count()
                    ));
                } else if crate::slurm_layout::devices_constrained_here() {
                    source.sample_listed_only();
                } else {
                    report.info(
                        "cgroup.conf does not constrain devices: every GPU of the node is sampled, \
                         the job's processes count wherever they are (docs/SAFETY.md, G9)",
                    );
                }
                write_inventory(&settings.runtime_dir, &source, report);
                return Some(source);
            }
            Err(e) => {
                if attempt == 0 {
                    report.error(&format!(
                        "{e}: the job runs unchecked until NVML answers (retrying with backoff)"
                    ));
                    // The job's tasks are not to wait for a limit that needs NVML.
                    say_hard_limit(dir, "no hard limit while NVML cannot be loaded", report);
                }
                // The backoff grows to a minute: the job's end here is looked for meanwhile.
                let retry_at = Instant::now() + backoff(attempt);
                while let Some(left) = retry_at.checked_duration_since(Instant::now()) {
                    if sleep_or_stop(left.min(CHECK_EVERY)) {
                        return None;
                    }
                    if left_node(presence, control, None, report) {
                        return None;
                    }
                }
                attempt += 1;
                if last_check.elapsed() >= Duration::from_secs(30) {
                    last_check = Instant::now();
                    match still_running(control, None) {
                        Ok(false) => {
                            report.info("the job is no longer running here: no NVML was needed after all");
                            return None;
                        }
                        Ok(true) => {}
                        Err(e) => report.warning(&format!("cannot check the job with slurmctld: {e}")),
                    }
                }
            }
        }
    }
}
