//! `gpu-mem-quota watchdog`: the process the plugin starts, the engine (`gmq_core::watchdog`)
//! wired to the real edges. This file is its life (start, watch, heal, leave); `edges` holds the
//! outside calls, `outputs` what it writes, `stop` the signals.
//!
//! Lifetime: it takes the job's lock (a second watchdog for the same job exits at once), records
//! its pid, and runs until SIGTERM (the job epilog, when the job ends on this node), until the
//! job's cgroup on this node has no step left (`presence`, every 2 s), or until slurmctld says the
//! job left RUNNING or was restarted (asked only after an action, every 5 minutes where there is
//! no job cgroup to look at, or every 10 s while the node's slurmd is dead and no epilog can come:
//! `gmq_core::watchdog::lifetime`). On the way out it removes the job's runtime directory: no file
//! outlives the job.
//!
//! A node whose slurmd died (`gmq_node::slurmd`, looked at every 2 s): the job's tasks here run on
//! and the watchdog enforces on, until slurmctld requeues or ends the job for the node failure.
//! Then this run is over with nobody here to end it: the watchdog stops, without acting, and kills
//! what the run left in the job's cgroups and on its GPUs, as the epilog would have.

mod edges;
mod outputs;
mod stop;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use super::contend::Contender;
use super::gpu::{NvmlSource, Recording};
use super::gpu_leftovers;
use super::hard_limit::Setter;
use super::log::Log;
use super::presence::Presence;
use edges::{
    hard_limit_setter, join_registry, left_node, load_policy, open_nvml, reset_hard_limit, say_hard_limit,
    set_hard_limit, signal_job, sweep_leftovers, take_job_lock, write_pid_file, Registration,
};
use gmq_core::admission;
use gmq_core::config;
use gmq_core::controller::{ControlError, Controller, SlurmJob};
use gmq_core::launch::{self, Params, Provisional};
use gmq_core::metrics::JobMetrics;
use gmq_core::node_files;
use gmq_core::quota::Identity;
use gmq_core::size::ByteSize;
use gmq_core::sluid::Sluid;
use gmq_core::slurm_text::JobRecord;
use gmq_core::watchdog::gpu::GpuSource;
use gmq_core::watchdog::hard_limit::{self, InForce, Outcome};
use gmq_core::watchdog::heal::{self, HealPolicy};
use gmq_core::watchdog::lifetime::{
    is_this_run, record_retry_after, slurmctld_check_every, slurmd_gone_check_every, slurmd_gone_run,
    still_running, stopping_line, Jitter, SlurmdGoneRun,
};
use gmq_core::watchdog::{unix_now, Flow, Reporter, Watchdog};
use gmq_node::attribute::{self, JobOnNode, LeftoverOutcome, ProcAttributor, ProcessIdentity};
use gmq_node::runtime;
use gmq_node::slurm_controller::SlurmController;
use gmq_node::telemetry::{TelemetryReader, READ_EVERY};
use gmq_node::textfile;
use outputs::{LogReporter, MetricsWriter};
use stop::{install_signal_handlers, sleep_or_stop, stop_requested};

pub(super) const PROC_ROOT: &str = "/proc";
pub(super) const CGROUP_ROOT: &str = "/sys/fs/cgroup";

/// How often the watchdog looks whether the node's slurmd still runs: one read of its
/// `/proc/PID/stat`.
const SLURMD_LOOK_EVERY: Duration = Duration::from_secs(2);

/// How often the job's cgroup is looked for while the hard limit waits for it: the job's first task
/// waits for the limit, so this bounds the delay its start takes (one directory walk a look).
const HARD_LIMIT_LOOK_EVERY: Duration = Duration::from_millis(20);

/// How long the watchdog waits for the processes it killed of a run orphaned by slurmd's death
/// to be gone (reaped by their slurmstepd) before it looks at the job's GPUs.
const ORPHAN_EXIT_WAIT: Duration = Duration::from_secs(2);

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

/// A started watchdog: its job's lock held, its edges open.
struct Daemon {
    params: Params,
    policy: config::Config,
    settings: config::Enforcement,
    /// `[hints] near_margin`: what near out of memory means, for self-healing.
    near_margin: f64,
    /// The job's runtime directory (status, record, pid and lock files).
    dir: PathBuf,
    /// Held while the watchdog runs: a second watchdog for the job exits at once.
    _lock: std::fs::File,
    user: String,
    /// This node's name as slurmctld has it.
    node: String,
    /// The watchdog's own process (its pid file), for the preemption registry.
    me: Option<ProcessIdentity>,
    control: SlurmController,
    reporter: LogReporter,
    metrics: MetricsWriter,
    /// `None`: NVML never loaded (the job ended first, or the watchdog was stopped).
    gpus: Option<NvmlSource>,
    watchdog: Watchdog,
    attributor: ProcAttributor,
    /// `None`: preemption is off, or this job takes no part in it.
    contender: Option<Contender>,
    /// The driver's hard limit set for the job's cgroup, cleared on the way out.
    hard_limit: Option<(Setter, InForce)>,
    /// The hard limit still to be set, with the driver's setter: once the job's cgroup exists.
    hard_limit_due: Option<Setter>,
    /// Tried once with the first quota (in force, failed, not offered, switched off, no quota):
    /// from then on only a limit in force is set again, for a new quota.
    hard_limit_tried: bool,
    /// Whether the job still runs anything here (its cgroup): ends a watch no signal ended.
    presence: Presence,
    /// The job's own allocator telemetry, read through its processes' working directories: shown
    /// in the status file and the metrics as the job's word, never enforced with.
    telemetry: TelemetryReader,
    /// The job's run here is known to be over: the epilog's signal came, or its cgroup is empty
    /// and slurmctld says so. Only then is what it left on its GPUs dealt with.
    run_over: bool,
    /// slurmctld's record of the job could not be read yet: when to ask again, and how many reads
    /// have failed (review K7).
    record_due: Option<(Instant, u32)>,
    /// The node's slurmd, as the job prolog named it ([`launch::SLURMD_VAR`]); `None`: not known,
    /// and not looked at.
    slurmd: Option<ProcessIdentity>,
    /// What tells a slurmd started again here from other processes of that name (review K6).
    slurmd_wanted: Option<gmq_node::slurmd::Wanted>,
    /// It is gone and none runs here: how many times slurmctld has said since that the run goes on.
    slurmd_gone: Option<u32>,
    /// How many times slurmctld has said since that the run is over but not yet why
    /// ([`SlurmdGoneRun::Unsettled`]).
    slurmd_unsettled: u32,
    next_slurmd_look: Instant,
    /// The run was requeued or ended while the node's slurmd was gone: no epilog will come, and
    /// what the run left here is the watchdog's to end.
    orphaned: bool,
    /// And slurmctld said it was for this node's failure ([`SlurmdGoneRun::Over`]): the record
    /// counts a `node_fail`, and self-healing leaves the run alone.
    node_failure: bool,
    /// The job's names on this node, for the sweep of its cgroups.
    on_node: JobOnNode,
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
        let on_node = JobOnNode {
            job_id: params.job_id,
            uid: params.uid,
            sluid: params.sluid,
        };
        let mut presence = Presence::of_job(Path::new(CGROUP_ROOT), on_node.clone());
        sweep_leftovers(&policy, &mut log);
        let mut control = SlurmController::from_env(params.job_id);
        let node = gmq_node::slurmctl::this_node();
        let user = gmq_node::passwd::user_name(params.uid).unwrap_or_else(|| params.uid.to_string());
        let metrics = MetricsWriter::new(policy.metrics.textfile_dir.clone(), params.job_id, &mut log);

        let mut reporter = LogReporter::new(log, dir.clone(), params.uid);
        let source = open_nvml(
            &settings,
            &params.gpus,
            &mut control,
            &mut presence,
            &mut reporter,
            &dir,
        );
        // The job's GPUs here are the credential's (the prolog's `SLURM_JOB_GPUS`). What the
        // credential lacks (the shards, the QOS before 26.05, the priority and requeue facts) is
        // in slurmctld's record of the job: one single-job request, after the hard limit (below);
        // asked again later, rarely, while it fails (`take_record`).
        let watchdog = Watchdog::new(params.job_id, &node, params.quota, settings.clone())
            .with_prediction(policy.prediction.clone());
        let attributor = ProcAttributor::new(
            params.job_id,
            params.uid,
            PathBuf::from(PROC_ROOT),
            PathBuf::from(CGROUP_ROOT),
        );
        let telemetry = TelemetryReader::new(PathBuf::from(PROC_ROOT), params.job_id, params.uid, READ_EVERY);
        let slurmd = slurmd_from_env();
        let slurmd_wanted = slurmd
            .as_ref()
            .map(|s| gmq_node::slurmd::Wanted::from_prolog(Path::new(PROC_ROOT), s));
        let mut daemon = Daemon {
            near_margin: policy.hints.near_margin,
            policy,
            params,
            settings,
            dir,
            _lock: lock,
            user,
            node,
            me,
            control,
            reporter,
            metrics,
            gpus: None,
            watchdog,
            attributor,
            contender: None,
            hard_limit: None,
            hard_limit_due: None,
            hard_limit_tried: false,
            presence,
            telemetry,
            run_over: false,
            record_due: None,
            slurmd: slurmd.map(|s| ProcessIdentity {
                pid: s.pid,
                start_time: s.start_time,
            }),
            slurmd_wanted,
            slurmd_gone: None,
            slurmd_unsettled: 0,
            next_slurmd_look: Instant::now(),
            orphaned: false,
            node_failure: false,
            on_node,
        };
        // The driver's hard limit first, with the quota the prolog gave: the job's tasks wait for
        // the watchdog's word on it before they start, and slurmctld, asked next, may be slow.
        daemon.enforce(daemon.params.quota, source.as_ref());
        let record = daemon.control.tools.job_record(daemon.params.job_id);
        match record {
            Ok(record) => daemon.take_record(&record, source.as_ref()),
            Err(e) => {
                let failures = 1;
                daemon.reporter.error(&format!(
                    "cannot read the job from slurmctld: {e}; the quota is the job prolog's until it \
                     can (asked again in {}s)",
                    record_retry_after(failures).as_secs()
                ));
                daemon.record_due = Some((Instant::now() + record_retry_after(failures), failures));
            }
        }
        daemon.gpus = source;
        let settings = &daemon.settings;
        let watching = format!(
            "watching GPU(s) {} with quota {} per GPU (interval {:?}, warn at {:.0}%, grace {:?}, action {})",
            daemon.params.gpus.join(","),
            daemon
                .watchdog
                .quota
                .map(|q| q.to_string())
                .unwrap_or_else(|| "none (recording only)".into()),
            settings.interval,
            settings.warn_threshold * 100.0,
            settings.grace,
            settings.action.name(),
        );
        daemon.reporter.info(&watching);
        Ok(daemon)
    }

    /// slurmctld's record of the job, read at start or, where that failed, later (review K7): one
    /// code path for both. Keeps the job's facts for its srun steps; holds the quota to what the
    /// record allows (the job's shards and caps: lowered, never raised; a provisional quota the
    /// prolog gave without the job's QOS is settled first, and may rise to the job's real one),
    /// and the driver's hard limit with it; learns which run this is and on how many nodes; and
    /// joins preemption, which needs the job's priority.
    fn take_record(&mut self, record: &JobRecord, gpus: Option<&NvmlSource>) {
        self.record_due = None;
        // Kept for the job's srun steps, so that they need not each ask slurmctld again.
        let facts = node_files::NodeFacts {
            account: record.account.clone(),
            partition: record.partition.clone(),
            qos: record.qos.clone(),
            shards: record.shards_on(&self.node),
        };
        let access = textfile::Access::readable_by(self.params.uid);
        if let Err(e) =
            textfile::write_atomically_as(&self.dir, node_files::FACTS_FILE, &facts.render(), access)
        {
            self.reporter.error(&format!(
                "cannot keep the job's facts in {}: {e}",
                self.dir.display()
            ));
        }
        // The plugin decided the quota from what the step's environment said, which the user's own
        // srun writes: held here to what slurmctld's record of the job allows.
        let quota = match gpus {
            Some(source) => {
                let gpu_total = source.gpu_total().map(ByteSize::from_bytes);
                quota_from_record(
                    &self.policy,
                    &self.params,
                    record,
                    &self.user,
                    &self.node,
                    gpu_total,
                    &self.dir,
                    &mut self.reporter,
                )
            }
            None => self.params.quota,
        };
        self.enforce(quota, gpus);
        let job = match SlurmJob::of_record(record) {
            Ok(job) => job,
            Err(e) => {
                self.reporter
                    .error(&format!("cannot read the job from slurmctld: {e}"));
                return;
            }
        };
        self.watchdog.set_run(job.restarts);
        self.watchdog.set_node_count(job.node_count);
        if let (Some(source), Some(me), None, true) =
            (gpus, self.me, &self.contender, self.policy.preemption.enabled)
        {
            let registry = Registration {
                node: &self.node,
                user: &self.user,
                quota: self.watchdog.quota,
                job: &job,
                me,
            };
            self.contender = join_registry(
                &self.policy,
                &self.params,
                registry,
                source,
                &mut self.control,
                &mut self.reporter,
            );
        }
    }

    /// Where the record could not be read at start: asks slurmctld again when due
    /// ([`record_retry_after`]), until it answers; then applies it as start would have
    /// ([`Daemon::take_record`]) and says what changed.
    fn retry_record(&mut self, gpus: &NvmlSource) {
        let Some((due, failures)) = self.record_due else {
            return;
        };
        if Instant::now() < due {
            return;
        }
        match self.control.tools.job_record(self.params.job_id) {
            Ok(record) => {
                let before = self.watchdog.quota;
                self.take_record(&record, Some(gpus));
                let shown = |q: Option<ByteSize>| q.map_or("none".to_string(), |q| q.to_string());
                self.reporter.info(&format!(
                    "slurmctld's record of the job, read at last (after {failures} failed read(s)): quota {} \
                     per GPU (the job prolog's: {}), run {}",
                    shown(self.watchdog.quota),
                    shown(before),
                    self.watchdog
                        .run()
                        .map_or("unknown".to_string(), |r| r.to_string()),
                ));
            }
            Err(e) => {
                let failures = failures.saturating_add(1);
                let again = record_retry_after(failures);
                if ControlError::from(e.clone()).job_gone() {
                    self.record_due = None;
                    return;
                }
                self.reporter.warning(&format!(
                    "still cannot read the job from slurmctld ({e}): asking again in {}s",
                    again.as_secs()
                ));
                self.record_due = Some((Instant::now() + again, failures));
            }
        }
    }

    /// Enforces `quota` from now on: the watchdog's, and the driver's hard limit with it. The first
    /// time (before slurmctld is asked anything) the limit is set, or its absence said: the word
    /// the job's tasks wait for; where the job's cgroup is not there yet, it is set once it is
    /// (`Daemon::set_hard_limit_when_due`). Later, a limit in force is set again to a new quota.
    fn enforce(&mut self, quota: Option<ByteSize>, gpus: Option<&NvmlSource>) {
        self.watchdog.quota = quota;
        let Some(gpus) = gpus else {
            return;
        };
        match (self.hard_limit.as_mut(), quota) {
            (Some((setter, in_force)), Some(quota)) => {
                reset_hard_limit(gpus, setter, in_force, quota, &mut self.reporter);
                self.watchdog.set_hard_limit(Some(in_force.clone()));
                return;
            }
            (Some((_, in_force)), None) => {
                let was = ByteSize::from_bytes(in_force.bytes);
                clear_hard_limit(self.hard_limit.take(), gpus, &mut self.reporter);
                self.reporter
                    .info(&format!("hard limit of {was} taken off: the job has no quota"));
                self.watchdog.set_hard_limit(None);
                return;
            }
            (None, _) => {}
        }
        if self.hard_limit_tried {
            return;
        }
        self.hard_limit_tried = true;
        if quota.is_none() {
            say_hard_limit(
                &self.dir,
                "no hard limit: the job has no quota",
                &mut self.reporter,
            );
            return;
        }
        if !self.settings.hard_limit {
            say_hard_limit(&self.dir, &Outcome::SwitchedOff.log_line(), &mut self.reporter);
            return;
        }
        // Set now where the job's cgroup is there; otherwise looked for often until it is.
        self.hard_limit_due = hard_limit_setter(&self.settings.nvml_library, &self.dir, &mut self.reporter);
        self.set_hard_limit_when_due(gpus);
    }

    /// Each interval: sample, decide and act ([`Watchdog::tick`]), take part in preemption, keep
    /// the record and the metrics, check the job with slurmctld; until the job is done here or the
    /// watchdog is asked to stop.
    fn watch(&mut self) {
        let Some(mut gpus) = self.gpus.take() else {
            return;
        };
        let mut last_check = Instant::now();
        let mut kept = KeptRecord::default();
        let mut jitter = Jitter::from_seed(jitter_seed());
        while !stop_requested() {
            // First: the job's tasks wait for it (`Daemon::pause` returns once its cgroup is there).
            self.set_hard_limit_when_due(&gpus);
            self.read_job_telemetry();
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
                // slurmctld has no run of the job for this watchdog any more; with slurmd gone,
                // nobody else will end what the run left here (not said to be a node failure).
                if self.slurmd_gone.is_some() {
                    self.run_over = true;
                    self.orphaned = true;
                }
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
            self.record(&mut kept);
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
            // enough: after an action (to see the job leave RUNNING), on a node without a job
            // cgroup to look at (no cgroup tracking), should the epilog's signal never come, and
            // while the node's slurmd is dead, when it cannot come.
            self.look_at_slurmd();
            let check_every = slurmctld_check_every(
                self.watchdog.has_acted(),
                self.presence.job_dir().is_some(),
                self.slurmd_gone,
                self.settings.interval,
            );
            if check_every.is_some_and(|every| last_check.elapsed() >= every) && !self.slurmd_came_back() {
                last_check = Instant::now();
                if self.slurmd_gone.is_some() {
                    if let Some(node_failure) = self.orphaned_run() {
                        self.run_over = true;
                        self.orphaned = true;
                        self.node_failure = node_failure;
                        break;
                    }
                } else {
                    match still_running(&mut self.control, self.watchdog.run()) {
                        Ok(false) => {
                            self.run_over = true;
                            break;
                        }
                        Ok(true) => {}
                        Err(e) => self
                            .reporter
                            .warning(&format!("cannot check the job with slurmctld: {e}")),
                    }
                }
            }
            if left_node(
                &mut self.presence,
                &mut self.control,
                self.watchdog.run(),
                &mut self.reporter,
            ) {
                self.run_over = true;
                break;
            }
            self.retry_record(&gpus);
            if self.pause(jitter.around(self.settings.interval)) {
                break;
            }
        }
        self.gpus = Some(gpus);
    }

    /// The job's telemetry, when due (`gmq_node::telemetry`), from the working directories of the
    /// processes the last sample attributed to the job; the read itself runs on a thread of its
    /// own, and its tasks are shown once it has ended. Each failure is said once; none changes
    /// anything the watchdog does.
    fn read_job_telemetry(&mut self) {
        let pids = self.watchdog.attributed_pids();
        let Some((shown, said)) = self.telemetry.poll(Instant::now(), pids) else {
            return;
        };
        for line in said {
            self.reporter.info(&format!(
                "the job's telemetry not shown: {line} (the job's word only: enforcement never reads it)"
            ));
        }
        self.watchdog.set_job_reported(shown);
    }

    /// Sets the quota as the driver's hard limit on the job's cgroup, once that cgroup exists (where
    /// the job prolog runs before Slurm makes it: no `PrologFlags=Contain`).
    fn set_hard_limit_when_due(&mut self, gpus: &NvmlSource) {
        if self.hard_limit_due.is_none() {
            return;
        }
        let Some(quota) = self.watchdog.quota else {
            self.hard_limit_due = None;
            say_hard_limit(
                &self.dir,
                "no hard limit: the job has no quota",
                &mut self.reporter,
            );
            return;
        };
        let Some(job_dir) = self.presence.find_job_dir_now() else {
            return;
        };
        let Some(setter) = self.hard_limit_due.take() else {
            return;
        };
        self.hard_limit = set_hard_limit(
            setter,
            gpus,
            job_dir,
            quota.bytes(),
            &self.dir,
            &mut self.reporter,
        );
        self.watchdog
            .set_hard_limit(self.hard_limit.as_ref().map(|(_, f)| f.clone()));
    }

    /// Sleeps `pause`, or until asked to stop (`true`); while the hard limit waits for the job's
    /// cgroup, looks for it every [`HARD_LIMIT_LOOK_EVERY`] and returns as soon as it is there:
    /// the job's first task waits for the limit.
    fn pause(&mut self, pause: Duration) -> bool {
        let until = Instant::now() + pause;
        while self.hard_limit_due.is_some() {
            if self.presence.find_job_dir_now().is_some() {
                return false;
            }
            let Some(left) = until.checked_duration_since(Instant::now()) else {
                return false;
            };
            if sleep_or_stop(left.min(HARD_LIMIT_LOOK_EVERY)) {
                return true;
            }
        }
        until
            .checked_duration_since(Instant::now())
            .is_some_and(sleep_or_stop)
    }

    /// Whether the slurmd the job prolog named is gone: looked at every [`SLURMD_LOOK_EVERY`];
    /// said once, when first seen.
    fn look_at_slurmd(&mut self) {
        let now = Instant::now();
        let (Some(slurmd), None) = (&self.slurmd, self.slurmd_gone) else {
            return;
        };
        if now < self.next_slurmd_look {
            return;
        }
        self.next_slurmd_look = now + SLURMD_LOOK_EVERY;
        if gmq_node::slurmd::alive(Path::new(PROC_ROOT), slurmd) {
            return;
        }
        self.slurmd_gone = Some(0);
        self.reporter.warning(&format!(
            "slurmd on this node (pid {}) is gone: no job epilog will end this watch; enforcing on, and \
             asking slurmctld every {}s whether this run of the job goes on",
            slurmd.pid,
            slurmd_gone_check_every(0).as_secs()
        ));
    }

    /// While slurmd is gone, before each ask: whether a slurmd runs here again (restarted; it
    /// runs the job's epilog when the job ends here, and the watch goes on as before).
    fn slurmd_came_back(&mut self) -> bool {
        if self.slurmd_gone.is_none() {
            return false;
        }
        let Some(back) = self
            .slurmd_wanted
            .as_ref()
            .and_then(|wanted| gmq_node::slurmd::find(Path::new(PROC_ROOT), wanted))
        else {
            return false;
        };
        self.reporter.info(&format!(
            "slurmd runs on this node again (pid {}): the job epilog ends the watch as before",
            back.pid
        ));
        self.slurmd = Some(back);
        self.slurmd_gone = None;
        self.slurmd_unsettled = 0;
        true
    }

    /// slurmd is gone: whether slurmctld has requeued or ended this run of the job (one
    /// single-job request), which nobody here will be told; and if so, whether for this node's
    /// failure (one more request, for this node's state: [`slurmd_gone_run`]). Says so when it has.
    fn orphaned_run(&mut self) -> Option<bool> {
        let answered = self.slurmd_gone.unwrap_or(0);
        let run = self.watchdog.run();
        let job = self.control.job();
        let node_down = match &job {
            Ok(job) if !is_this_run(job, run) => match self.control.tools.node_down(&self.node) {
                Ok(down) => Some(down),
                Err(e) => {
                    self.reporter
                        .warning(&format!("cannot read this node's state from slurmctld: {e}"));
                    None
                }
            },
            _ => None,
        };
        let said = match &job {
            Ok(job) => format!("it is {} after {} restart(s)", job.state, job.restarts),
            Err(e) => format!("it is gone ({e})"),
        };
        match slurmd_gone_run(job.as_ref(), run, node_down, self.slurmd_unsettled) {
            SlurmdGoneRun::GoesOn => {
                // Cut off from slurmctld too: watched on, said at the first ask only.
                if let (Err(e), 0) = (&job, answered) {
                    self.reporter
                        .warning(&format!("cannot check the job with slurmctld: {e}"));
                }
                self.slurmd_gone = Some(answered.saturating_add(1));
                None
            }
            SlurmdGoneRun::Unsettled => {
                self.slurmd_unsettled += 1;
                None
            }
            SlurmdGoneRun::Over { node_failure: true } => {
                self.reporter.warning(&format!(
                    "slurmctld no longer runs this run of the job ({said}, this node DOWN) and slurmd \
                     on this node is gone: the watchdog stops without acting, and ends what the run \
                     left on this node"
                ));
                Some(true)
            }
            SlurmdGoneRun::Over { node_failure: false } => {
                self.reporter.warning(&format!(
                    "slurmctld no longer runs this run of the job ({said}), not for a failure of this \
                     node (slurmctld does not have it DOWN), and no slurmd is seen on this node: the \
                     watchdog stops and ends what the run left on this node, as the job epilog would"
                ));
                Some(false)
            }
        }
    }

    /// The run ended while slurmd was gone: the job's processes still in its cgroups here (its
    /// tasks, which no slurmstepd will signal now) are killed, as the job epilog's sweep kills
    /// what outlives a job (`kill_leftovers`), one line each.
    fn end_orphaned_run(&mut self) {
        let kill = self.settings.kill_leftovers;
        let sweep = attribute::sweep_leftovers(Path::new(PROC_ROOT), &self.on_node, kill);
        let killed: Vec<u32> = sweep
            .leftovers
            .iter()
            .filter(|l| l.outcome == LeftoverOutcome::Killed)
            .map(|l| l.pid)
            .collect();
        for leftover in sweep.leftovers {
            let what = format!(
                "process {} of the ended run is still in the job's cgroup on this node, which its slurmd left",
                leftover.pid
            );
            match leftover.outcome {
                LeftoverOutcome::Killed => self.reporter.error(&format!("{what}: killed")),
                LeftoverOutcome::Reported => self
                    .reporter
                    .error(&format!("{what} (kill_leftovers = false: left running)")),
                // Slurm's (a slurmstepd, which the returning slurmd ends), root's in a job run as
                // root, or no longer the job's.
                LeftoverOutcome::Slurmstepd
                | LeftoverOutcome::Root
                | LeftoverOutcome::NotTheUsers(_)
                | LeftoverOutcome::LeftTheJob
                | LeftoverOutcome::Gone => {}
                LeftoverOutcome::Failed(e) => self.reporter.error(&format!("{what}: cannot kill it: {e}")),
            }
        }
        if sweep.cut_short {
            self.reporter.error(&format!(
                "the look for what the ended run left on this node stopped after {}s, before every \
                 process was looked at",
                attribute::SWEEP_BUDGET.as_secs()
            ));
        }
        // Gone before the look at the job's GPUs that follows, which would name them again.
        let end = Instant::now() + ORPHAN_EXIT_WAIT;
        let proc_root = Path::new(PROC_ROOT);
        while Instant::now() < end && killed.iter().any(|pid| proc_root.join(pid.to_string()).exists()) {
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The run ended here: requeue a batch job that failed near out of memory (`super::heal`).
    /// Not a run slurmctld requeued or ended for this node's failure: it did not fail by itself.
    fn heal(&mut self) {
        if self.node_failure {
            return;
        }
        let policy = HealPolicy {
            enabled: self.settings.requeue_near_oom,
            max_requeues: self.settings.max_requeues,
            near_margin: self.near_margin,
        };
        let mut wait = stop::until_stopped_again();
        heal::after_run(
            &mut self.watchdog,
            &policy,
            &mut self.control,
            &mut self.reporter,
            &mut wait,
        );
    }

    /// Keeps the record (in the AdminComment, and in the job's runtime directory for the plugin's
    /// writes at a step's or the batch script's end) and the metrics current.
    fn record(&mut self, kept: &mut KeptRecord) {
        let watchdog = &mut self.watchdog;
        watchdog.keep_record_current(Instant::now(), &mut self.control, &mut self.reporter);
        let metrics = job_metrics(watchdog, &self.user, self.params.sluid);
        self.metrics.write(&metrics, &mut self.reporter);
        // Each file holds the entry only while the plugin has something to do with it, which then
        // asks slurmctld nothing when the file is not there: `record` while the AdminComment lacks
        // the entry as it is now, `record-settling` while another node may have replaced it.
        let unrecorded = watchdog.unrecorded_text();
        let settling = watchdog.settling_text();
        for (name, text, last) in [
            (node_files::RECORD_FILE, unrecorded, &mut kept.unrecorded),
            (node_files::SETTLING_RECORD_FILE, settling, &mut kept.settling),
        ] {
            if text == *last {
                continue;
            }
            let written = match &text {
                Some(text) => {
                    textfile::write_atomically_as(&self.dir, name, text, textfile::Access::ROOT_ONLY)
                }
                None => textfile::remove(&self.dir, name),
            };
            if let Err(e) = written {
                self.reporter
                    .error(&format!("cannot keep the record in {}: {e}", self.dir.display()));
            }
            *last = text;
        }
    }

    /// Logs the peaks, deals with what the job left on its GPUs outside its cgroups
    /// (`super::gpu_leftovers`), and removes what the watchdog made: the metrics file, the registry entry,
    /// the job's runtime directory.
    fn leave(mut self) {
        self.reporter.info(&stopping_line(self.watchdog.usage()));
        self.clear_hard_limit();
        if self.orphaned {
            // This node's part of the run, which no epilog or batch step here will write.
            if self.node_failure {
                self.watchdog
                    .record_node_fail(unix_now(), &mut self.control, &mut self.reporter);
            }
            self.end_orphaned_run();
        }
        // A signal is the epilog's (or the next run's prolog's): root's, sent once the run ended here.
        if let (Some(gpus), true) = (self.gpus.as_mut(), self.run_over || stop_requested()) {
            let job = (self.params.job_id, self.params.uid);
            let roots = (
                self.settings.runtime_dir.as_path(),
                Path::new(PROC_ROOT),
                Path::new(CGROUP_ROOT),
            );
            let kill = self.settings.kill_leftovers;
            gpu_leftovers::sweep(gpus, job, &self.user, roots, kill, &mut self.reporter);
        }
        let metrics = job_metrics(&self.watchdog, &self.user, self.params.sluid);
        self.metrics.remove(&metrics, &mut self.reporter);
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
        if let Some(gpus) = self.gpus.as_ref() {
            clear_hard_limit(self.hard_limit.take(), gpus, &mut self.reporter);
        }
    }
}

/// What the job's runtime directory holds of the record, as last written there.
#[derive(Default)]
struct KeptRecord {
    unrecorded: Option<String>,
    settling: Option<String>,
}

/// The job's metrics, with the SLUID slurmd gave the watchdog (26.05), so that a site joins them
/// with jobstats' cgroup series, whose `jobid` is the SLUID there.
fn job_metrics(watchdog: &Watchdog, user: &str, sluid: Option<Sluid>) -> JobMetrics {
    JobMetrics {
        sluid: sluid.map(|s| s.to_string()),
        ..watchdog.metrics(user)
    }
}

/// Takes `limit` off the job's cgroup on each of its GPUs, if one is in force.
fn clear_hard_limit(limit: Option<(Setter, InForce)>, gpus: &NvmlSource, report: &mut LogReporter) {
    let Some((setter, in_force)) = limit else {
        return;
    };
    for (gpu, device) in gpus.listed_handles() {
        let code = setter.set(device, &in_force.namespace, 0, hard_limit::LIMIT_MAX);
        if code != 0 {
            report.warning(&format!(
                "cannot clear the hard limit on GPU {gpu} (NVML error {code}); it goes with the cgroup"
            ));
        }
    }
}

/// The quota slurmctld's `record` of the job allows ([`Daemon::take_record`]): the prolog's
/// (`params.quota`), settled first where it was provisional ([`settle`]), then held to the job's
/// shards on this node and to its caps (`admission::held_by_watchdog`: lowered, never raised), each
/// change said.
#[allow(clippy::too_many_arguments)]
fn quota_from_record(
    policy: &config::Config,
    params: &Params,
    record: &JobRecord,
    user: &str,
    node: &str,
    gpu_total: Option<ByteSize>,
    dir: &Path,
    report: &mut dyn Reporter,
) -> Option<ByteSize> {
    let who = Identity::named(user, &record.account, &record.partition, &record.qos);
    let given = match &params.provisional {
        Some(provisional) => settle(policy, provisional, &who, gpu_total, params.quota, dir, report),
        None => params.quota,
    };
    let (quota, said) = admission::held_by_watchdog(policy, given, &who, record.shards_on(node), gpu_total);
    for line in said {
        report.warning(&line);
    }
    quota
}

/// The job prolog could not know the job's QOS (before 26.05) and gave a provisional quota: decided
/// again here, as the job's steps decide, from the job's request and slurmctld's record (`who`).
/// A request that the job's real QOS refuses keeps the provisional quota (the strictest accepted
/// for any QOS) and leaves the refusal as the prolog's word, so that every later task of the job
/// here is refused too (its steps refuse their tasks on their own as well).
fn settle(
    policy: &config::Config,
    provisional: &Provisional,
    who: &Identity,
    gpu_total: Option<ByteSize>,
    quota: Option<ByteSize>,
    dir: &Path,
    report: &mut dyn Reporter,
) -> Option<ByteSize> {
    let qos = who.qos.as_deref().unwrap_or("");
    let policy = Ok(policy.clone());
    match admission::on_node(provisional.request.as_deref(), &policy, who, gpu_total, None) {
        Ok(verdict) => {
            report.info(&format!(
                "the job's QOS '{}' from slurmctld: {}",
                qos.escape_debug(),
                verdict.note
            ));
            verdict.quota
        }
        Err(refusal) => {
            report.error(&format!(
                "the job's QOS '{}' from slurmctld refuses its request ({refusal}): its tasks here \
                 are refused; the quota stays {}",
                qos.escape_debug(),
                quota.map_or("none".to_string(), |q| q.to_string())
            ));
            let word = node_files::PrologWord::Refused(refusal).render();
            if let Err(e) = textfile::write_atomically_as(
                dir,
                node_files::PROLOG_FILE,
                &word,
                textfile::Access::ROOT_ONLY,
            ) {
                report.error(&format!("cannot leave the refusal in {}: {e}", dir.display()));
            }
            quota
        }
    }
}

/// The slurmd the job prolog named ([`launch::SLURMD_VAR`]), if it did.
fn slurmd_from_env() -> Option<launch::Slurmd> {
    launch::parse_slurmd_var(&std::env::var(launch::SLURMD_VAR).ok()?)
}

/// The jitter's seed: the clock and the pid, so that watchdogs started in the same instant differ.
fn jitter_seed() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    nanos ^ (u64::from(std::process::id()) << 32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use gmq_core::size::parse_size;
    use gmq_core::watchdog::status;

    /// What the watchdog would log, level and line.
    #[derive(Default)]
    struct Said(Vec<String>);

    impl Reporter for Said {
        fn info(&mut self, message: &str) {
            self.0.push(format!("info: {message}"));
        }
        fn warning(&mut self, message: &str) {
            self.0.push(format!("warning: {message}"));
        }
        fn error(&mut self, message: &str) {
            self.0.push(format!("error: {message}"));
        }
        fn status(&mut self, _: &status::Status) {}
    }

    const POLICY: &str = r#"
[defaults]
default = "50%"
max = "64G"
gpu_memory = "80G"

[account.chemistry]
max = "30G"

[qos.debug]
max = "8G"

[qos.long]
default = "24G"

[scheduling]
shard_unit = "1G"
"#;

    fn params(quota: &str, provisional: Option<Option<&str>>) -> Params {
        Params {
            job_id: 77,
            uid: 2001,
            gid: 2001,
            quota: Some(parse_size(quota).unwrap()),
            gpus: vec!["0".into()],
            config: PathBuf::from("/etc/gpu-mem-quota.toml"),
            preemptible: false,
            sluid: None,
            provisional: provisional.map(|request| Provisional {
                request: request.map(str::to_string),
            }),
        }
    }

    fn record(account: &str, qos: &str, shards: u64) -> JobRecord {
        JobRecord {
            job_id: 77,
            admin_comment: String::new(),
            account: account.into(),
            partition: "gpu".into(),
            qos: qos.into(),
            user_id: 2001,
            priority: 1,
            nodes: vec!["n1".into(), "n2".into()],
            shards_by_node: vec![shards, 80],
            given_gpus: true,
            end: None,
            het_leader: None,
        }
    }

    /// K7: the quota slurmctld's record allows, as the watchdog applies it at start and, the same
    /// way, when the record arrives late: held to the job's shards and caps (lowered, never
    /// raised); a provisional quota settled first (it may rise to the job's real one); a request
    /// the job's real QOS refuses keeps the provisional quota and leaves the refusal for the job's
    /// later tasks.
    #[test]
    fn the_record_lowers_the_quota_and_settles_a_provisional_one() {
        let policy = config::parse(POLICY, "test.toml").unwrap();
        let gpu = Some(ByteSize::from_bytes(80 << 30));
        let dir = tempfile::tempdir().unwrap();
        let cases: Vec<(&str, Params, JobRecord, &str, &str)> = vec![
            // (what, the prolog's word, the record, the quota, a line said)
            (
                "K7's example: --gres=shard:1, the default 40G held to 1G",
                params("40G", None),
                record("biology", "normal", 1),
                "1G",
                "exceeds its 1 shard(s) x 1G",
            ),
            (
                "the account's cap",
                params("40G", None),
                record("chemistry", "normal", 0),
                "30G",
                "exceeds the 30G cap for account 'chemistry'",
            ),
            (
                "within everything: kept",
                params("20G", None),
                record("biology", "normal", 40),
                "20G",
                "",
            ),
            (
                "never raised: the prolog's 10G stays under 40 shards",
                params("10G", None),
                record("biology", "long", 40),
                "10G",
                "",
            ),
            (
                "provisional, no request: the real QOS's default, raised from the strictest cap",
                params("8G", Some(None)),
                record("biology", "long", 0),
                "24G",
                "the job's QOS 'long' from slurmctld",
            ),
            (
                "provisional, settled, then held to the shards",
                params("8G", Some(None)),
                record("biology", "long", 16),
                "16G",
                "exceeds its 16 shard(s) x 1G",
            ),
            (
                "provisional, refused by the real QOS: the provisional quota stays",
                params("8G", Some(Some("20G"))),
                record("biology", "debug", 0),
                "8G",
                "refuses its request",
            ),
        ];
        for (what, params, record, quota, line) in cases {
            let mut said = Said::default();
            let _ = std::fs::remove_file(dir.path().join(node_files::PROLOG_FILE));
            let got = quota_from_record(
                &policy,
                &params,
                &record,
                "gmq-user",
                "n1",
                gpu,
                dir.path(),
                &mut said,
            );
            assert_eq!(got, Some(parse_size(quota).unwrap()), "{what}: {:#?}", said.0);
            match line {
                "" => assert!(said.0.is_empty(), "{what}: {:#?}", said.0),
                line => assert!(said.0.iter().any(|l| l.contains(line)), "{what}: {:#?}", said.0),
            }
            let refused = dir.path().join(node_files::PROLOG_FILE).exists();
            assert_eq!(refused, line == "refuses its request", "{what}");
        }
    }
}
