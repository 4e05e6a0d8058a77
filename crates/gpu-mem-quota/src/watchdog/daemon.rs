//! `gpu-mem-quota watchdog`: the process the plugin starts, wired to the real edges.
//!
//! Lifetime: it takes the job's lock (a second watchdog for the same job exits at once), records
//! its pid, and runs until SIGTERM (the plugin, when the job ends on this node), until slurmctld
//! says the job left RUNNING or was restarted (checked every 30 s, and every interval once it has
//! acted), or until the job's cgroup on this node has no step left (`super::presence`, every
//! 2 s). On the way out it removes the job's runtime directory: no file outlives the job.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};

use super::contend::{Contender, JobFacts};
use super::gpu::{NvmlSource, Recording};
use super::hard_limit::Setter;
use super::log::Log;
use super::presence::{Check, Presence, CHECK_EVERY};
use gmq_core::admission;
use gmq_core::config;
use gmq_core::controller::{ControlError, Controller, JobState};
use gmq_core::launch::Params;
use gmq_core::node_files;
use gmq_core::preempt::JobPriority;
use gmq_core::quota::Identity;
use gmq_core::size::ByteSize;
use gmq_core::watchdog::gpu::GpuSource;
use gmq_core::watchdog::hard_limit::{self, Answer, InForce, Outcome};
use gmq_core::watchdog::heal::{self, HealPolicy};
use gmq_core::watchdog::status::Status;
use gmq_core::watchdog::{backoff, Flow, Reporter, Watchdog};
use gmq_node::attribute::ProcAttributor;
use gmq_node::attribute::{self, ProcessIdentity};
use gmq_node::preempt_registry::GpuRef;
use gmq_node::runtime;
use gmq_node::slurm_controller::SlurmController;
use gmq_node::textfile;

static STOP: AtomicBool = AtomicBool::new(false);
/// How many stop signals came: the first ends the watch, a second one self-healing's wait too.
static STOP_SIGNALS: AtomicU32 = AtomicU32::new(0);

extern "C" fn on_stop_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
    STOP_SIGNALS.fetch_add(1, Ordering::SeqCst);
}

fn install_signal_handlers() {
    use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
    let action = SigAction::new(
        SigHandler::Handler(on_stop_signal),
        SaFlags::empty(),
        SigSet::empty(),
    );
    for signal in [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP] {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe. A failure
        // (only EINVAL, impossible for these signals) leaves the default, as before.
        let _ = unsafe { sigaction(signal, &action) };
    }
}

/// Sleeps up to `duration`, waking early when asked to stop. Returns whether to stop.
fn sleep_or_stop(duration: Duration) -> bool {
    let end = Instant::now() + duration;
    while !STOP.load(Ordering::SeqCst) {
        let now = Instant::now();
        if now >= end {
            return false;
        }
        std::thread::sleep((end - now).min(Duration::from_millis(50)));
    }
    true
}

/// Each wait between samples is the interval times a factor drawn uniformly from
/// `[1 - INTERVAL_JITTER, 1 + INTERVAL_JITTER]`, so that a job cycling its memory cannot stay
/// phase-locked to the samples (review F7); ±10 % keeps the interval what the policy says.
const INTERVAL_JITTER: f64 = 0.1;

/// xorshift64*: cheap, and enough to spread sample times. Nothing secret depends on it; its state
/// lives in root's process, where the job cannot read it.
struct Jitter {
    state: u64,
}

impl Jitter {
    /// Seeded from the clock and the pid: watchdogs started in the same instant still differ.
    fn seeded() -> Jitter {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let seed = nanos ^ (u64::from(std::process::id()) << 32) ^ 0x9E37_79B9_7F4A_7C15;
        // xorshift stays at 0 once there.
        Jitter { state: seed.max(1) }
    }

    /// Uniform in [0, 1).
    fn next_unit(&mut self) -> f64 {
        let mut x = self.state;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.state = x;
        (x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64
    }

    fn around(&mut self, interval: Duration) -> Duration {
        jittered(interval, self.next_unit())
    }
}

/// `interval` scaled by `1 ± INTERVAL_JITTER`; `unit`, in [0, 1], chooses where in that range.
fn jittered(interval: Duration, unit: f64) -> Duration {
    let factor = 1.0 + INTERVAL_JITTER * (2.0 * unit.clamp(0.0, 1.0) - 1.0);
    Duration::try_from_secs_f64(interval.as_secs_f64() * factor).unwrap_or(interval)
}

/// The log plus the job's status file.
struct LogReporter {
    log: Log,
    dir: PathBuf,
    /// The job's user: the status file is theirs to read, and nobody else's.
    status_reader: u32,
    last_status: Option<Status>,
    last_written: Option<Instant>,
}

impl Reporter for LogReporter {
    fn info(&mut self, message: &str) {
        self.log.info(message)
    }

    fn warning(&mut self, message: &str) {
        self.log.warning(message)
    }

    fn error(&mut self, message: &str) {
        self.log.error(message)
    }

    fn status(&mut self, status: &Status) {
        // Write on change, and at least every 5 s so `updated_at` shows the watchdog is alive.
        let unchanged = self.last_status.as_ref().is_some_and(|last| {
            Status {
                updated_at: status.updated_at,
                ..last.clone()
            } == *status
        });
        if unchanged
            && self
                .last_written
                .is_some_and(|t| t.elapsed() < Duration::from_secs(5))
        {
            return;
        }
        let access = textfile::Access::readable_by(self.status_reader);
        if let Err(e) =
            textfile::write_atomically_as(&self.dir, node_files::STATUS_FILE, &status.to_json(), access)
        {
            self.log.error(&format!(
                "cannot write the status file in {}: {e}",
                self.dir.display()
            ));
        }
        self.last_status = Some(status.clone());
        self.last_written = Some(Instant::now());
    }
}

/// Whether slurmctld's view says this run of the job is still going on this node. A job slurmctld
/// says is gone is not; `Err`: slurmctld gave no usable answer (or refused), ask again later.
fn still_running(control: &mut dyn Controller, run: Option<u32>) -> Result<bool, ControlError> {
    let job = match control.job() {
        Ok(job) => job,
        Err(e) if e.job_gone() => return Ok(false),
        Err(e) => return Err(e),
    };
    Ok(job.is_running() && run.is_none_or(|r| r == job.restarts))
}

/// Whether the job's run here is over ([`Presence::check`]; slurmctld asked only when the job's
/// steps here are empty), logged.
fn left_node(
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

/// The watchdog, from start to exit, as the README describes it: load the policy, take the job's
/// lock, read the job's facts from slurmctld, open NVML, join the node registry; then each interval
/// sample, decide, act, record and write the metrics; then leave, removing what it made.
pub(crate) fn run(params: Params) -> ExitCode {
    let mut daemon = match Daemon::start(params) {
        Ok(daemon) => daemon,
        Err(code) => return code,
    };
    daemon.watch();
    daemon.heal();
    daemon.leave();
    ExitCode::SUCCESS
}

const PROC_ROOT: &str = "/proc";
/// How often a watchdog that has no job cgroup to look at asks slurmctld whether its job still runs.
const NO_CGROUP_CHECK_EVERY: Duration = Duration::from_secs(300);
const CGROUP_ROOT: &str = "/sys/fs/cgroup";

/// A started watchdog: its job's lock held, its edges open.
struct Daemon {
    params: Params,
    settings: config::Enforcement,
    /// `[hints] near_margin`: what near out of memory means, for self-healing.
    near_margin: f64,
    /// The job's runtime directory (status, record, pid and lock files).
    dir: PathBuf,
    /// Held while the watchdog runs: a second watchdog for the job exits at once.
    _lock: std::fs::File,
    user: String,
    control: SlurmController,
    reporter: LogReporter,
    metrics: Metrics,
    /// `None`: NVML never loaded (the job ended first, or the watchdog was stopped).
    gpus: Option<NvmlSource>,
    watchdog: Watchdog,
    attributor: ProcAttributor,
    /// `None`: preemption is off, or this job takes no part in it.
    contender: Option<Contender>,
    /// The driver's hard limit set for the job's cgroup, cleared on the way out.
    hard_limit: Option<(Setter, InForce)>,
    /// The hard limit is still to be set: once the job's cgroup exists (its first step here).
    hard_limit_due: bool,
    /// Whether the job still runs anything here (its cgroup): ends a watch no signal ended.
    presence: Presence,
}

impl Daemon {
    fn start(params: Params) -> Result<Daemon, ExitCode> {
        let policy = load_policy(&params)?;
        let settings = policy.enforcement.clone();
        let mut log = Log::open(params.job_id, settings.state_dir.clone());
        let (dir, lock) = take_job_lock(&settings, params.job_id, &mut log)?;
        install_signal_handlers();
        let me = write_pid_file(&dir, &mut log);
        // The job's cgroup, once Slurm has made it (the prolog that started this watchdog runs first).
        let mut presence = Presence::of_job(Path::new(CGROUP_ROOT), params.job_id, params.uid);
        sweep_leftovers(&policy, &mut log);
        let mut control = SlurmController::from_env(params.job_id);
        let node = gmq_node::slurmctl::this_node();
        let user = gmq_node::passwd::user_name(params.uid).unwrap_or_else(|| params.uid.to_string());
        let metrics = Metrics::new(policy.metrics.textfile_dir.clone(), params.job_id, &mut log);

        // The job's GPUs here are the credential's (the prolog's `SLURM_JOB_GPUS`). What the
        // credential lacks (the shards, the QOS before 25.11, the priority and requeue facts) is
        // in slurmctld's record of the job: one single-job request, once per watchdog.
        let record = control.tools.job_record(params.job_id);
        let job = record
            .as_ref()
            .map_err(|e| ControlError::from(e.clone()))
            .and_then(JobState::of_record);
        if let Err(e) = &job {
            log.error(&format!("cannot read the job from slurmctld: {e}"));
        }
        // Kept for the job's srun steps, so that they need not each ask slurmctld again.
        if let Ok(record) = &record {
            let facts = node_files::NodeFacts {
                account: record.account.clone(),
                partition: record.partition.clone(),
                qos: record.qos.clone(),
                shards: record.shards_on(&node),
            };
            let access = textfile::Access::readable_by(params.uid);
            if let Err(e) =
                textfile::write_atomically_as(&dir, node_files::FACTS_FILE, &facts.render(), access)
            {
                log.error(&format!("cannot keep the job's facts in {}: {e}", dir.display()));
            }
        }

        let mut reporter = LogReporter {
            log,
            dir: dir.clone(),
            status_reader: params.uid,
            last_status: None,
            last_written: None,
        };
        let source = open_nvml(
            &settings,
            &params.gpus,
            &mut control,
            &mut presence,
            &mut reporter,
        );
        // The plugin decided the quota from what the step's environment said, which the user's own
        // srun writes: held here to what slurmctld's record of the job allows.
        let quota = match (&record, &source) {
            (Ok(record), Some(source)) => {
                let who = Identity::named(&user, &record.account, &record.partition, &record.qos);
                let (quota, said) = admission::held_by_watchdog(
                    &policy,
                    params.quota,
                    &who,
                    record.shards_on(&node),
                    source.gpu_total().map(ByteSize::from_bytes),
                );
                for line in said {
                    reporter.warning(&line);
                }
                quota
            }
            _ => params.quota,
        };
        let mut watchdog = Watchdog::new(params.job_id, &node, quota, settings.clone())
            .with_prediction(policy.prediction.clone());
        let hard_limit_due = match (&source, quota) {
            (Some(_), Some(_)) if settings.hard_limit => true,
            (Some(_), Some(_)) => {
                reporter.info(&Outcome::SwitchedOff.log_line());
                false
            }
            _ => false,
        };
        if let Ok(job) = &job {
            watchdog.set_run(job.restarts);
            watchdog.set_node_count(job.node_count);
        }
        reporter.info(&format!(
            "watching GPU(s) {} with quota {} per GPU (interval {:?}, warn at {:.0}%, grace {:?}, action {})",
            params.gpus.join(","),
            quota
                .map(|q| q.to_string())
                .unwrap_or_else(|| "none (recording only)".into()),
            settings.interval,
            settings.warn_threshold * 100.0,
            settings.grace,
            settings.action.name(),
        ));
        let attributor = ProcAttributor::new(
            params.job_id,
            params.uid,
            PathBuf::from(PROC_ROOT),
            PathBuf::from(CGROUP_ROOT),
        );
        let contender = match (&source, &job, me) {
            (Some(source), Ok(job), Some(me)) if policy.preemption.enabled => {
                let registry = Registration {
                    node: &node,
                    user: &user,
                    quota,
                    job,
                    me,
                };
                join_registry(&policy, &params, registry, source, &mut control, &mut reporter)
            }
            _ => None,
        };
        Ok(Daemon {
            params,
            settings,
            near_margin: policy.hints.near_margin,
            dir,
            _lock: lock,
            user,
            control,
            reporter,
            metrics,
            gpus: source,
            watchdog,
            attributor,
            contender,
            hard_limit: None,
            hard_limit_due,
            presence,
        })
    }

    /// Each interval: sample, decide and act ([`Watchdog::tick`]), take part in preemption, keep
    /// the record and the metrics, check the job with slurmctld; until the job is done here or the
    /// watchdog is asked to stop.
    fn watch(&mut self) {
        let Some(mut gpus) = self.gpus.take() else {
            return;
        };
        let mut last_check = Instant::now();
        let mut last_record: Option<String> = None;
        let mut jitter = Jitter::seeded();
        while !STOP.load(Ordering::SeqCst) {
            let mut recording = Recording {
                inner: &mut gpus,
                last: Vec::new(),
            };
            let watchdog = &mut self.watchdog;
            let flow = watchdog.tick(
                Instant::now(),
                &mut recording,
                &mut self.attributor,
                &mut self.control,
                &mut self.reporter,
            );
            if flow == Flow::Stop {
                break;
            }
            if let Some(contender) = self.contender.as_mut() {
                if !watchdog.has_acted()
                    && contender.tick(
                        &recording.last,
                        watchdog.entry(),
                        &mut self.control,
                        &mut self.reporter,
                    )
                {
                    watchdog.mark_preempted();
                }
            }
            self.record(&mut last_record);
            if let Some((signal, pids)) = self.watchdog.take_signal() {
                let job = (self.params.job_id, self.params.uid);
                signal_job(
                    Path::new(PROC_ROOT),
                    Path::new(CGROUP_ROOT),
                    job,
                    signal,
                    &pids,
                    &mut self.reporter,
                );
            }
            // The job epilog ends the watch. slurmctld is asked only where that may not be
            // enough: after an action (to see the job leave RUNNING), and on a node without a
            // job cgroup to look at (no cgroup tracking), should the epilog's signal never come.
            let check_every = if self.watchdog.has_acted() {
                Some(self.settings.interval)
            } else if self.presence.job_dir().is_none() {
                Some(NO_CGROUP_CHECK_EVERY)
            } else {
                None
            };
            if check_every.is_some_and(|every| last_check.elapsed() >= every) {
                last_check = Instant::now();
                match still_running(&mut self.control, self.watchdog.run()) {
                    Ok(false) => break,
                    Ok(true) => {}
                    Err(e) => self
                        .reporter
                        .warning(&format!("cannot check the job with slurmctld: {e}")),
                }
            }
            if left_node(
                &mut self.presence,
                &mut self.control,
                self.watchdog.run(),
                &mut self.reporter,
            ) {
                break;
            }
            // After the look at the job's cgroup, which finds it once Slurm has made it.
            self.set_hard_limit_when_due(&gpus);
            if sleep_or_stop(jitter.around(self.settings.interval)) {
                break;
            }
        }
        self.gpus = Some(gpus);
    }

    /// Sets the quota as the driver's hard limit on the job's cgroup, once that cgroup exists: the
    /// watchdog starts from the prolog, before the job's first step, and the limit is the cgroup's.
    fn set_hard_limit_when_due(&mut self, gpus: &NvmlSource) {
        let (true, Some(job_dir), Some(quota)) =
            (self.hard_limit_due, self.presence.job_dir(), self.watchdog.quota)
        else {
            return;
        };
        self.hard_limit_due = false;
        self.hard_limit = set_hard_limit(
            &self.settings.nvml_library,
            gpus,
            Some(job_dir),
            quota.bytes(),
            &mut self.reporter,
        );
        self.watchdog
            .set_hard_limit(self.hard_limit.as_ref().map(|(_, f)| f.clone()));
    }

    /// The run ended here: requeue a batch job that failed near out of memory (`super::heal`).
    fn heal(&mut self) {
        let policy = HealPolicy {
            enabled: self.settings.requeue_near_oom,
            max_requeues: self.settings.max_requeues,
            near_margin: self.near_margin,
        };
        // The stop signal that ended the watch is what this waits past; another one (the job
        // prolog of the job's next run here, G14) ends the wait.
        let signals = STOP_SIGNALS.load(Ordering::SeqCst);
        let mut wait = |pause: Duration| {
            let end = Instant::now() + pause;
            while Instant::now() < end {
                if STOP_SIGNALS.load(Ordering::SeqCst) > signals.max(1) {
                    return false;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            true
        };
        heal::after_run(
            &mut self.watchdog,
            &policy,
            &mut self.control,
            &mut self.reporter,
            &mut wait,
        );
    }

    /// Keeps the record (in the AdminComment, and in the job's runtime directory for the plugin's
    /// final write) and the metrics current.
    fn record(&mut self, last_record: &mut Option<String>) {
        let watchdog = &mut self.watchdog;
        watchdog.keep_record_current(Instant::now(), &mut self.control, &mut self.reporter);
        self.metrics
            .write(&watchdog.metrics(&self.user), &mut self.reporter);
        // The record file holds the entry while the AdminComment lacks it as it is now: the
        // plugin writes it there when the batch script ends, and asks slurmctld nothing when the
        // file is not there.
        let unrecorded = watchdog.unrecorded_text();
        if unrecorded == *last_record {
            return;
        }
        let kept = match &unrecorded {
            Some(text) => textfile::write_atomically_as(
                &self.dir,
                node_files::RECORD_FILE,
                text,
                textfile::Access::ROOT_ONLY,
            ),
            None => textfile::remove(&self.dir, node_files::RECORD_FILE),
        };
        if let Err(e) = kept {
            self.reporter
                .error(&format!("cannot keep the record in {}: {e}", self.dir.display()));
        }
        *last_record = unrecorded;
    }

    /// Logs the peaks, and removes what the watchdog made: the metrics file, the registry entry,
    /// the job's runtime directory.
    fn leave(mut self) {
        let peaks: Vec<String> = self
            .watchdog
            .usage()
            .iter()
            .map(|(i, u)| format!("GPU {i} peak {}", ByteSize::from_bytes(u.peak).floor_mib()))
            .collect();
        self.reporter.info(&format!(
            "stopping: {}",
            if peaks.is_empty() {
                "no GPU memory seen".into()
            } else {
                peaks.join(", ")
            }
        ));
        self.metrics.remove(&mut self.reporter);
        self.clear_hard_limit();
        if let Some(contender) = &self.contender {
            contender.leave();
        }
        if let Err(e) = runtime::remove_job_dir(&self.settings.runtime_dir, self.params.job_id) {
            self.reporter
                .error(&format!("cannot remove {}: {e}", self.dir.display()));
        }
    }

    /// Takes the hard limit off the job's cgroup (where its run ended and the cgroup may be reused
    /// by the next run of the job, or where a v1 cgroup outlives its job).
    fn clear_hard_limit(&mut self) {
        let (Some((setter, in_force)), Some(gpus)) = (self.hard_limit.take(), self.gpus.as_ref()) else {
            return;
        };
        for (gpu, device) in gpus.listed_handles() {
            let code = setter.set(device, &in_force.namespace, 0, hard_limit::LIMIT_MAX);
            if code != 0 {
                self.reporter.warning(&format!(
                    "cannot clear the hard limit on GPU {gpu} (NVML error {code}); it goes with the cgroup"
                ));
            }
        }
    }
}

/// Sets the driver's hard limit (the quota) for the job's cgroup on each of its GPUs, where the
/// driver offers it (`super::hard_limit`), and logs which path is in force. The job's cgroup is
/// the watchdog's own (the plugin starts it inside the job's cgroup; the kernel says which).
fn set_hard_limit(
    library: &Path,
    source: &NvmlSource,
    job_cgroup: Option<&Path>,
    quota: u64,
    report: &mut LogReporter,
) -> Option<(Setter, InForce)> {
    let setter = match Setter::find(library) {
        Ok(setter) => setter,
        Err(why) => {
            report.info(&Outcome::NotOffered(why).log_line());
            return None;
        }
    };
    let Some(cgroup) = job_cgroup else {
        let why = "the job's cgroup cannot be found from the watchdog's own".to_string();
        report.info(&Outcome::Failed(why).log_line());
        return None;
    };
    let answers: Vec<Answer> = source
        .listed_handles()
        .into_iter()
        .map(|(gpu, device)| Answer {
            gpu,
            code: setter.set(device, cgroup, quota, quota),
        })
        .collect();
    let outcome = hard_limit::outcome(cgroup, quota, &answers);
    report.info(&outcome.log_line());
    match outcome {
        Outcome::InForce(in_force) => Some((setter, in_force)),
        Outcome::NotOffered(_) | Outcome::Failed(_) | Outcome::SwitchedOff => {
            // A limit some GPUs took and another refused is taken off again: one path only.
            for (_, device) in source.listed_handles() {
                let _ = setter.set(device, cgroup, 0, hard_limit::LIMIT_MAX);
            }
            None
        }
    }
}

/// The admin's policy; without a usable one there is no watchdog (logged where the default state
/// directory says).
fn load_policy(params: &Params) -> Result<config::Config, ExitCode> {
    config::load(&params.config).map_err(|e| {
        let mut log = Log::open(params.job_id, PathBuf::from(config::limits::STATE_DIR));
        log.error(&format!("the policy is unusable ({e}): no watchdog for this job"));
        ExitCode::FAILURE
    })
}

/// Creates the job's runtime directory and takes its lock. `Err(SUCCESS)`: another watchdog
/// already has it.
fn take_job_lock(
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
fn write_pid_file(dir: &Path, log: &mut Log) -> Option<ProcessIdentity> {
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
fn sweep_leftovers(policy: &config::Config, log: &mut Log) {
    let (removed, errors) = super::leftovers::sweep(
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
struct Registration<'a> {
    node: &'a str,
    user: &'a str,
    quota: Option<ByteSize>,
    job: &'a JobState,
    me: ProcessIdentity,
}

/// Joins the node's preemption registry; `None` (logged): this job takes no part in preemption.
fn join_registry(
    policy: &config::Config,
    params: &Params,
    registration: Registration,
    source: &NvmlSource,
    control: &mut SlurmController,
    report: &mut LogReporter,
) -> Option<Contender> {
    let job = registration.job;
    let facts = JobFacts {
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

/// The job's Prometheus textfile, rewritten atomically at most once a second, removed at the end.
struct Metrics {
    dir: Option<PathBuf>,
    name: String,
    last: Option<Instant>,
}

impl Metrics {
    fn new(dir: Option<PathBuf>, job_id: u32, log: &mut Log) -> Metrics {
        // A directory that is not there means no node_exporter here: no metrics, no noise. One
        // that someone else could change (a symlink, not root's, group/other-writable) is refused:
        // root's writes and unlinks there could be pointed anywhere (gmq_node::trusted_dir).
        let dir = dir.filter(|d| match gmq_node::trusted_dir::TrustedDir::open(d) {
            Ok(_) => true,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
            Err(e) => {
                log.warning(&format!("metrics off for this job: {e}"));
                false
            }
        });
        Metrics {
            dir,
            name: gmq_core::metrics::file_name(job_id),
            last: None,
        }
    }

    fn write(&mut self, job: &gmq_core::metrics::JobMetrics, report: &mut LogReporter) {
        let Some(dir) = &self.dir else { return };
        if self.last.is_some_and(|t| t.elapsed() < Duration::from_secs(1)) {
            return;
        }
        self.last = Some(Instant::now());
        if let Err(e) = textfile::write_atomically(dir, &self.name, &gmq_core::metrics::render(job)) {
            report.error(&format!(
                "cannot write metrics to {}: {e}; metrics off for this job",
                dir.display()
            ));
            self.dir = None;
        }
    }

    fn remove(&mut self, report: &mut LogReporter) {
        if let Some(dir) = &self.dir {
            if let Err(e) = textfile::remove(dir, &self.name) {
                report.error(&format!("cannot remove {}/{}: {e}", dir.display(), self.name));
            }
        }
    }
}

/// Sends the early-warning signal to the job's processes (`job`: id and uid), each re-checked to
/// still count for the job. The pids come from the last sample, where each was listed on one of
/// the job's GPUs (or claimed by the job): the re-check keeps that, and re-reads the rest (a
/// reused pid, a process now only another job's, a slurmstepd).
fn signal_job(
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
fn open_nvml(
    settings: &config::Enforcement,
    gpus: &[String],
    control: &mut SlurmController,
    presence: &mut Presence,
    report: &mut LogReporter,
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

/// `<runtime_dir>/gpus`: the node's GPUs and their sizes, so the plugin can resolve percent quotas
/// against the real GPU (it does no NVML itself).
fn write_inventory(runtime_dir: &Path, source: &NvmlSource, report: &mut LogReporter) {
    let text: String = source
        .inventory()
        .iter()
        .map(|(index, uuid, total)| format!("{index} {uuid} {total}\n"))
        .collect();
    if let Err(e) = textfile::write_atomically(runtime_dir, node_files::INVENTORY_FILE, &text) {
        report.warning(&format!("cannot write the GPU inventory: {e}"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_jitter_stays_within_ten_percent_of_the_interval() {
        let interval = Duration::from_secs(2);
        assert_eq!(jittered(interval, 0.0), Duration::from_millis(1800));
        assert_eq!(jittered(interval, 0.5), interval);
        assert_eq!(jittered(interval, 1.0), Duration::from_millis(2200));
        assert_eq!(jittered(interval, f64::NAN), interval);
        let mut jitter = Jitter::seeded();
        let waits: Vec<Duration> = (0..10_000).map(|_| jitter.around(interval)).collect();
        assert!(waits
            .iter()
            .all(|w| (Duration::from_millis(1800)..=Duration::from_millis(2200)).contains(w)));
        // Spread over the whole range, not stuck: every tenth of it is hit, the mean is the interval.
        let mut tenths = [0u32; 10];
        for w in &waits {
            let tenth = ((w.as_secs_f64() - 1.8) / 0.04) as usize;
            tenths[tenth.min(9)] += 1;
        }
        assert!(tenths.iter().all(|&n| n > 800), "{tenths:?}");
        let mean = waits.iter().sum::<Duration>() / waits.len() as u32;
        assert!((mean.as_secs_f64() - 2.0).abs() < 0.01, "{mean:?}");
    }
}
