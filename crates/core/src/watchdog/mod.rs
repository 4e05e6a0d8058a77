//! The per-job watchdog's engine: one per job per node, in the process the plugin starts (see
//! `crate::launch`; the process and its edges are `gpu-mem-quota`'s `watchdog`).
//!
//! Each interval: sample the job's GPUs (`gpu`), keep the processes that are provably the job's
//! (`attribute`), track current/peak per GPU, feed the ladder (`ladder`), write the job's status
//! file, and when the job stayed over its quota past the grace period, record the event in the
//! job's AdminComment and act (`control`). It talks to the world only through the traits below
//! and `Controller`, so tests drive it with tables; the daemon wires the real edges.
//!
//! Fail-safe: when NVML, attribution or Slurm fails, the watchdog logs, backs off and leaves the
//! job running. It acts only on its own job, and only on a fresh confirmation of the overuse.

pub mod gpu;
pub mod hard_limit;
pub mod heal;
pub(crate) mod ladder;
pub mod lifetime;
pub mod shared_record;
pub mod status;

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::config::{Action, Enforcement, Prediction};
use crate::controller::{AdminComment, ControlError, Controller, RECORD_ATTEMPTS};
use crate::job_telemetry::Shown;
use crate::metrics::{GpuMetrics, JobMetrics};
use crate::predict::{self, PredictParams, Sample};
use crate::record::{self, EventKind};
use crate::size::ByteSize;
use gpu::{GpuSample, GpuSource};
use ladder::{ActFacts, Ladder, LadderStep};
use shared_record::{count_action, record_first, requeues_caused, Recorded};

/// Which processes are the job's. `None`: the process is gone.
pub trait Attributor {
    /// Whether `pid`, listed by NVML on a GPU that is (`on_job_gpu`: the sample's `listed`) or is
    /// not one of the job's GPUs, counts against the job. A process in no job (or only in cgroups
    /// its user made) counts for the job of its user on the job's own GPUs only.
    fn is_ours(&mut self, pid: u32, on_job_gpu: bool) -> Option<bool>;
    /// A new sample begins. `strict`: look at every process afresh (before acting), instead of
    /// trusting what the previous sample established for a process that is still listed.
    fn new_sample(&mut self, _strict: bool) {}
}

/// Where the watchdog reports.
pub trait Reporter {
    fn info(&mut self, message: &str);
    fn warning(&mut self, message: &str);
    fn error(&mut self, message: &str);
    /// The job's status changed (or time passed): write it where the job can read it.
    fn status(&mut self, status: &status::Status);
}

/// Per GPU of the job: what it uses now and at most.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GpuUsage {
    pub(crate) uuid: String,
    pub(crate) total: u64,
    pub used: u64,
    pub peak: u64,
    /// Processes of the job whose usage NVML could not tell.
    pub(crate) unavailable: u32,
}

/// Why an action did not happen now: the line to log, and slurmctld's failure under it.
struct NotDone {
    line: String,
    cause: ControlError,
}

/// What the loop should do next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    Continue,
    /// The job is done here (ended, requeued, cancelled): clean up and exit.
    Stop,
}

pub struct Watchdog {
    pub(crate) job_id: u32,
    pub(crate) node: String,
    pub quota: Option<ByteSize>,
    pub(crate) settings: Enforcement,
    usage: BTreeMap<u32, GpuUsage>,
    ladder: Ladder,
    /// The restart count of the run this watchdog watches; another count means a new run.
    run: Option<u32>,
    entry: Option<record::Entry>,
    acted: Option<Action>,
    sample_errors: u32,
    state: status::JobHealth,
    prediction: Prediction,
    /// The highest usage over the job's GPUs, sample by sample, for the trend.
    history: VecDeque<Sample>,
    started: Option<Instant>,
    predicted: Option<status::PredictionStatus>,
    /// Set when a new prediction fired and the site wants the job signalled; taken by the daemon.
    signal_due: Option<i32>,
    /// The job's processes on its GPUs at the last sample.
    job_pids: Vec<u32>,
    /// Other nodes write the same AdminComment (a multi-node job): read each write back.
    record_shared: bool,
    /// When the entry was last put there, and the entry as it was then (its peak says when the
    /// next write is due; the plugin's final write is needed only when the entry has changed since,
    /// [`Watchdog::unrecorded_text`]).
    record_written: Option<(Instant, record::Entry)>,
    /// When to look for that write again (a multi-node job's: another node's write from an older
    /// read may replace it after it was read back); `None` once it has settled there.
    record_confirm_at: Option<Instant>,
    /// When the write that armed those looks was made: they are counted from it, and a write a
    /// look makes arms none (review K4).
    record_looks_from: Option<Instant>,
    /// A failure to put it there was logged (once per job).
    record_failure_logged: bool,
    /// After a failed AdminComment update: how many in a row, and when the next may be tried
    /// ([`shared_record::retry_after`]): never again at every sample (G3).
    record_failures: u32,
    record_retry_at: Option<Instant>,
    /// The driver's hard limit set for the job's cgroup, where one is in force.
    hard_limit: Option<hard_limit::InForce>,
    /// What the job's tasks here last said of their allocators (`crate::job_telemetry`): shown in
    /// the status file and the metrics as the job's word, never read by a decision; at most
    /// `job_telemetry::MAX_TASKS_SHOWN` tasks, the rest counted.
    job_reported: Shown,
}

pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

impl Watchdog {
    pub fn new(job_id: u32, node: &str, quota: Option<ByteSize>, settings: Enforcement) -> Watchdog {
        Watchdog {
            job_id,
            node: node.to_string(),
            quota,
            settings,
            usage: BTreeMap::new(),
            ladder: Ladder::default(),
            run: None,
            entry: None,
            acted: None,
            sample_errors: 0,
            state: status::JobHealth::Ok,
            prediction: Prediction {
                enabled: false,
                ..Prediction::default()
            },
            history: VecDeque::new(),
            started: None,
            predicted: None,
            signal_due: None,
            job_pids: Vec::new(),
            record_shared: false,
            record_written: None,
            record_confirm_at: None,
            record_looks_from: None,
            record_failure_logged: false,
            record_failures: 0,
            record_retry_at: None,
            hard_limit: None,
            job_reported: Shown::default(),
        }
    }

    /// The job's own allocator telemetry, as last read by the daemon: shown, never decided on.
    /// Held to the cap here too (`job_telemetry::shown`), whatever the caller passed: what is shown
    /// stays bounded.
    pub fn set_job_reported(&mut self, reported: Shown) {
        self.job_reported = reported.finish();
    }

    /// The job's processes on its GPUs at the last sample, as attributed (cgroup or ancestry, never
    /// the job's own say): where the daemon looks for the job's telemetry.
    pub fn attributed_pids(&self) -> &[u32] {
        &self.job_pids
    }

    /// The driver's hard limit is in force for the job (shown in the status file).
    pub fn set_hard_limit(&mut self, in_force: Option<hard_limit::InForce>) {
        self.hard_limit = in_force;
    }

    /// The signal to send to the job's processes now (a new prediction fired), if any.
    pub fn take_signal(&mut self) -> Option<(i32, Vec<u32>)> {
        self.signal_due
            .take()
            .map(|signal| (signal, self.job_pids.clone()))
    }

    /// Turns on the early warning from the usage trend.
    pub fn with_prediction(mut self, prediction: Prediction) -> Watchdog {
        self.prediction = prediction;
        self
    }

    fn predict_params(&self) -> PredictParams {
        PredictParams {
            horizon: self.prediction.horizon,
            ..PredictParams::default()
        }
    }

    /// Keeps the trend's history and, when it predicts a crossing within the horizon, says so once
    /// per episode. The predictor is built not to fire on the saw-tooth of training steps.
    fn predict(&mut self, now: Instant, worst_gpu: u32, worst: u64, quota: u64, report: &mut dyn Reporter) {
        let started = *self.started.get_or_insert(now);
        let params = self.predict_params();
        self.history.push_back(Sample {
            at: now - started,
            used_bytes: worst,
        });
        let keep = params.history + params.window;
        while self
            .history
            .front()
            .is_some_and(|s| (now - started).saturating_sub(s.at) > keep)
        {
            self.history.pop_front();
        }
        if !self.prediction.enabled {
            return;
        }
        let samples: Vec<Sample> = self.history.iter().copied().collect();
        let Some(eta) = predict::warning(&samples, ByteSize::from_bytes(quota), &params) else {
            self.predicted = None;
            return;
        };
        let projected = predict::fit_trend(&samples, &params)
            .map(|t| t.peak_after(params.horizon).max(0.0) as u64)
            .unwrap_or(worst)
            .max(worst);
        let scale = crate::hints::batch_scale(
            ByteSize::from_bytes(projected.max(1)),
            ByteSize::from_bytes(quota),
            None,
            0.10,
        );
        if self.predicted.is_none() {
            self.signal_due = self.prediction.signal;
            report.warning(&format!(
                "GPU memory grows toward its {} quota: predicted to cross it in {}s (suggested batch scale {scale})",
                ByteSize::from_bytes(quota),
                eta.as_secs()
            ));
        }
        self.predicted = Some(status::PredictionStatus {
            gpu_index: worst_gpu,
            seconds_to_quota: eta.as_secs(),
            suggested_batch_scale: scale.get(),
        });
    }

    /// The job's figures for Prometheus (node_exporter's textfile collector). The SLUID is the
    /// caller's to add: slurmd gives it to the watchdog process, not to this state.
    pub fn metrics(&self, user: &str) -> JobMetrics {
        JobMetrics {
            job_id: self.job_id,
            sluid: None,
            user: user.to_string(),
            gpus: self
                .usage
                .iter()
                .map(|(&index, u)| GpuMetrics {
                    index,
                    uuid: u.uuid.clone(),
                    used_bytes: u.used,
                    quota_bytes: self.quota.map_or(0, ByteSize::bytes),
                    peak_bytes: u.peak,
                })
                .collect(),
            events: self.entry.as_ref().map(|e| e.facts.events).unwrap_or_default(),
            job_reported: self.job_reported.tasks.clone(),
            job_reported_not_shown: self.job_reported.not_shown,
        }
    }

    pub fn usage(&self) -> &BTreeMap<u32, GpuUsage> {
        &self.usage
    }

    /// Remembers which run this is (from slurmctld), for the record and to notice a requeue.
    pub fn set_run(&mut self, restarts: u32) {
        self.run = Some(restarts);
        if let Some(quota) = self.quota {
            self.entry = Some(record::Entry::new(&self.node, restarts, quota));
        }
    }

    /// What this watchdog recorded of the run so far (peaks, events); `None` without a quota.
    pub fn entry(&self) -> Option<&record::Entry> {
        self.entry.as_ref()
    }

    /// The job's processes on its GPUs, as attributed.
    fn job_pids(samples: &[GpuSample], attributor: &mut dyn Attributor) -> Vec<u32> {
        let mut pids: Vec<u32> = samples
            .iter()
            .flat_map(|gpu| gpu.processes.iter().map(move |p| (p.pid, gpu.listed)))
            .filter(|&(pid, listed)| attributor.is_ours(pid, listed) == Some(true))
            .map(|(pid, _)| pid)
            .collect();
        pids.sort_unstable();
        pids.dedup();
        pids
    }

    /// The job's memory on each GPU: the sum over the job's own processes only.
    /// GPUs Slurm did not list for the job appear only where the job's processes hold memory.
    fn job_usage(
        samples: &[GpuSample],
        attributor: &mut dyn Attributor,
    ) -> Vec<(u32, String, u64, u64, u32)> {
        samples
            .iter()
            .filter_map(|gpu| {
                let mut used = 0u64;
                let mut unavailable = 0;
                for p in &gpu.processes {
                    if attributor.is_ours(p.pid, gpu.listed) == Some(true) {
                        match p.used {
                            Some(bytes) => used = used.saturating_add(bytes),
                            None => unavailable += 1,
                        }
                    }
                }
                (gpu.listed || used > 0 || unavailable > 0)
                    .then(|| (gpu.index, gpu.uuid.clone(), gpu.total, used, unavailable))
            })
            .collect()
    }

    /// One interval: sample, attribute, decide, act.
    pub fn tick(
        &mut self,
        now: Instant,
        gpus: &mut dyn GpuSource,
        attributor: &mut dyn Attributor,
        control: &mut dyn Controller,
        report: &mut dyn Reporter,
    ) -> Flow {
        let samples = match gpus.sample() {
            Ok(samples) => {
                if self.sample_errors > 0 {
                    report.info(&format!(
                        "NVML answers again after {} failed sample(s)",
                        self.sample_errors
                    ));
                    self.sample_errors = 0;
                }
                samples
            }
            Err(e) => {
                // Log the first failure and then every 100th: a lost GPU must not flood the log.
                if self.sample_errors.is_multiple_of(100) {
                    report.error(&format!(
                        "cannot sample GPU memory: {e}; the job keeps running unchecked"
                    ));
                }
                self.sample_errors += 1;
                return Flow::Continue;
            }
        };
        attributor.new_sample(false);
        self.job_pids = Self::job_pids(&samples, attributor);
        let mut worst = 0u64;
        let mut worst_gpu = 0u32;
        for (index, uuid, total, used, unavailable) in Self::job_usage(&samples, attributor) {
            let entry = self.usage.entry(index).or_default();
            entry.uuid = uuid;
            entry.total = total;
            entry.used = used;
            entry.peak = entry.peak.max(used);
            entry.unavailable = unavailable;
            if used >= worst {
                worst = used;
                worst_gpu = index;
            }
            if let Some(record) = &mut self.entry {
                record.observe_gpu(index, Some(&record::short_gpu_id(&entry.uuid)), used);
            }
        }
        let Some(quota) = self.quota.map(ByteSize::bytes) else {
            report.status(&self.status(None));
            return Flow::Continue;
        };
        if self.acted.is_some() {
            return Flow::Continue;
        }
        self.predict(now, worst_gpu, worst, quota, report);
        let step = self.ladder.observe(worst, quota, now, &self.settings);
        // The status shows where the job stands at every sample; only the log lines are limited.
        self.state = if self.ladder.is_over() {
            status::JobHealth::OverQuota
        } else if self.ladder.is_warned() {
            status::JobHealth::Warn
        } else {
            status::JobHealth::Ok
        };
        let flow = match step {
            LadderStep::Nothing | LadderStep::Over { .. } => Flow::Continue,
            LadderStep::Warn => {
                if let Some(record) = &mut self.entry {
                    record.count_event(EventKind::Warn, unix_now());
                }
                if let Some(not_logged) = self.ladder.lines.admit(ladder::Crossing::Warn, now) {
                    report.warning(&format!(
                        "GPU memory {} of its {} quota ({:.0}%): warning the job{}",
                        ByteSize::from_bytes(worst).floor_mib(),
                        ByteSize::from_bytes(quota),
                        worst as f64 * 100.0 / quota as f64,
                        ladder::not_logged_note(not_logged)
                    ));
                }
                Flow::Continue
            }
            LadderStep::Recovered => {
                if let Some(not_logged) = self.ladder.lines.admit(ladder::Crossing::Recovered, now) {
                    report.info(&format!(
                        "GPU memory back under {:.0}% of the warn threshold{}",
                        ladder::RECOVER_SHARE_OF_WARN * 100.0,
                        ladder::not_logged_note(not_logged)
                    ));
                }
                Flow::Continue
            }
            LadderStep::Act => self.act(gpus, attributor, control, report, quota),
        };
        report.status(&self.status(Some(quota)));
        flow
    }

    /// Over the quota past the grace period: confirm on a fresh sample, record, then act. What
    /// slurmctld could not do now is logged and tried again a grace period later (the job keeps
    /// running); a job slurmctld says is gone stops the watchdog.
    fn act(
        &mut self,
        gpus: &mut dyn GpuSource,
        attributor: &mut dyn Attributor,
        control: &mut dyn Controller,
        report: &mut dyn Reporter,
        quota: u64,
    ) -> Flow {
        // Never act on a stale picture: processes may have exited or PIDs been reused since.
        attributor.new_sample(true);
        let confirmed = gpus
            .sample()
            .map(|s| {
                Self::job_usage(&s, attributor)
                    .iter()
                    .map(|u| u.3)
                    .max()
                    .unwrap_or(0)
            })
            .unwrap_or(0);
        if confirmed <= quota {
            report.info("over the quota no more on a fresh sample: nothing done yet");
            self.ladder.unconfirmed();
            return Flow::Continue;
        }
        match self.act_confirmed(confirmed, control, report, quota) {
            Ok(()) => Flow::Continue,
            Err(NotDone { cause, .. }) if cause.job_gone() => {
                report.info(&format!(
                    "the job is gone from slurmctld ({cause}): nothing to act on, the watchdog stops"
                ));
                Flow::Stop
            }
            Err(NotDone { line, .. }) => {
                report.error(&line);
                self.ladder.retry_later();
                Flow::Continue
            }
        }
    }

    /// The overuse is confirmed (`confirmed` bytes on the worst GPU): read the job and its record,
    /// choose the action, record it, carry it out.
    fn act_confirmed(
        &mut self,
        confirmed: u64,
        control: &mut dyn Controller,
        report: &mut dyn Reporter,
        quota: u64,
    ) -> Result<(), NotDone> {
        let job = control.job().map_err(|e| NotDone {
            line: format!("cannot read the job from slurmctld ({e}); will try again, the job keeps running"),
            cause: e,
        })?;
        // A run slurmctld has ended or requeued is no longer this watchdog's to act for: its
        // tasks may run on here after a node failure (slurmd died, no epilog came), and a
        // requeue or cancel now would hit the job's next run, which runs elsewhere.
        if !lifetime::is_this_run(&job, self.run) {
            let cause = ControlError::JobGone(format!(
                "slurmctld no longer runs this run of the job: it is {} after {} restart(s)",
                job.state, job.restarts
            ));
            return Err(NotDone {
                line: cause.to_string(),
                cause,
            });
        }
        let comment = control.admin_comment().map_err(|e| NotDone {
            line: format!("cannot read the job's AdminComment ({e}); will try again, the job keeps running"),
            cause: e,
        })?;
        let requeues_by_us = match &comment {
            // The record is written before each action, so it may count a requeue slurmctld never
            // carried out (it did not answer); its restart count says how many happened (G12).
            AdminComment::Read(_) => requeues_caused(&comment).unwrap_or(0).min(job.restarts),
            // Unknown history must not buy the job more requeues: count every restart as ours.
            AdminComment::Unreadable(why) => {
                report.warning(&format!(
                    "the job's AdminComment cannot be read ({why}): counting all {} restart(s) as \
                     requeues for over-quota, and acting without writing the record (the \
                     AdminComment is left as it is)",
                    job.restarts
                ));
                job.restarts
            }
        };
        let facts = ActFacts {
            requeueable: job.requeueable,
            requeues_by_us,
        };
        let (action, why) = ladder::choose_action(&self.settings, facts);
        let used = ByteSize::from_bytes(confirmed).floor_mib();
        let what = format!(
            "GPU memory {used} over its {} quota for longer than {:?}",
            ByteSize::from_bytes(quota),
            self.settings.grace
        );
        if let Some(why) = &why {
            report.info(why);
        }
        if action == Action::WarnOnly {
            report.warning(&format!("{what}: warn-only, the job keeps running"));
            self.acted = Some(action);
            return Ok(());
        }
        // The record as it stood before this action: restored should the action fail, so that an
        // action slurmctld refused is never counted as done (G12).
        let uncounted = self.entry.clone();
        if let Some(record) = &mut self.entry {
            count_action(record, EventKind::OverQuota, action, unix_now());
            let recorded =
                record_first(control, &comment, record, job.node_count > 1).map_err(|e| NotDone {
                    line: format!(
                        "{what}, but the record cannot be written ({e}): not acting blind; will try again"
                    ),
                    cause: e,
                })?;
            // Written, then replaced by other nodes' writes each time: act all the same (the
            // writes worked; the next of ours carries the event again).
            if recorded == Recorded::Lost {
                report.warning(&format!(
                    "{what}: the record was written but other writers replaced it {RECORD_ATTEMPTS} times"
                ));
            }
        }
        let action = match control.perform(action) {
            Ok(()) => action,
            // slurmctld will not requeue this job (a heterogeneous job's later component, G5: only
            // its leader can be): what is done to a job that cannot be requeued, at once, rather
            // than asking again every grace period while the job stays over its quota.
            Err(ControlError::Refused(why))
                if matches!(action, Action::Requeue | Action::RequeueHold)
                    && !matches!(
                        self.settings.no_requeue_action,
                        Action::Requeue | Action::RequeueHold
                    ) =>
            {
                let fallback = self.settings.no_requeue_action;
                report.warning(&format!(
                    "{what}, but slurmctld refused to {} it ({why}): no_requeue_action = {fallback}",
                    action.name()
                ));
                self.entry = uncounted.clone();
                if let Some(record) = &mut self.entry {
                    count_action(record, EventKind::OverQuota, fallback, unix_now());
                    // Best effort: the first write already carries the event.
                    let now = comment_after(control);
                    let _ = record_first(control, &now, record, job.node_count > 1);
                }
                if fallback == Action::WarnOnly {
                    self.acted = Some(fallback);
                    return Ok(());
                }
                match control.perform(fallback) {
                    Ok(()) => fallback,
                    Err(e) => {
                        self.entry = uncounted;
                        return Err(NotDone {
                            line: format!("{what}, but {} failed too: {e}; will try again", fallback.name()),
                            cause: e,
                        });
                    }
                }
            }
            Err(e) => {
                self.entry = uncounted;
                return Err(NotDone {
                    line: format!("{what}, but {} failed: {e}; will try again", action.name()),
                    cause: e,
                });
            }
        };
        report.warning(&format!("{what}: {}", action_done(action)));
        self.acted = Some(action);
        self.state = status::JobHealth::Acted;
        Ok(())
    }

    /// The status the job can read.
    pub fn status(&self, quota: Option<u64>) -> status::Status {
        let gpu_health = |index: u32, used: u64| match quota {
            Some(q) if used > q => status::JobHealth::OverQuota,
            Some(q) if used as f64 >= q as f64 * self.settings.warn_threshold => status::JobHealth::Warn,
            _ if self.predicted.is_some_and(|p| p.gpu_index == index) => status::JobHealth::Warn,
            _ => status::JobHealth::Ok,
        };
        let health = match self.state {
            status::JobHealth::Ok if self.predicted.is_some() => status::JobHealth::Warn,
            state => state,
        };
        status::Status {
            version: status::VERSION,
            job_id: self.job_id,
            updated_at: Some(unix_now()),
            health: Some(health),
            quota_bytes: quota,
            prediction: self.predicted,
            action: self.acted.map(|a| a.name().to_string()),
            gpus: self
                .usage
                .iter()
                .map(|(&index, u)| status::GpuStatus {
                    index,
                    uuid: u.uuid.clone(),
                    used_bytes: u.used,
                    peak_bytes: u.peak,
                    quota_bytes: quota,
                    total_bytes: Some(u.total),
                    health: Some(gpu_health(index, u.used)),
                    hard_limit_bytes: self
                        .hard_limit
                        .as_ref()
                        .filter(|h| h.gpus.contains(&index))
                        .map(|h| h.bytes),
                })
                .collect(),
            job_reported: self.job_reported.tasks.clone(),
            job_reported_not_shown: self.job_reported.not_shown,
        }
    }

    /// The record so far (this node, this run), in the AdminComment format; `None` without a quota.
    pub fn record_text(&self) -> Option<String> {
        let mut record = record::Record::default();
        record.insert(self.entry.clone()?);
        Some(record::render(&record))
    }

    /// [`Watchdog::record_text`] while the AdminComment may lack this entry as it is now; `None`
    /// once the entry there is the current one and has settled (then the plugin's final write
    /// would ask slurmctld for nothing new). A multi-node job's write that another node may still
    /// have replaced has not settled: should the batch script end meanwhile, the plugin's final
    /// write looks for the entry and puts it back.
    pub fn unrecorded_text(&self) -> Option<String> {
        let written = self.record_written.as_ref().map(|(_, entry)| entry);
        if self.entry.is_some() && self.entry.as_ref() == written && self.record_confirm_at.is_none() {
            return None;
        }
        self.record_text()
    }

    /// The job was preempted (by the contention logic): from now on only wait for it to leave.
    pub fn mark_preempted(&mut self) {
        self.acted = Some(Action::Requeue);
        self.state = status::JobHealth::Acted;
    }

    /// Whether this watchdog already acted (then it only waits for its job to leave the node).
    pub fn has_acted(&self) -> bool {
        self.acted.is_some_and(|a| a != Action::WarnOnly)
    }

    pub fn run(&self) -> Option<u32> {
        self.run
    }
}

fn action_done(action: Action) -> &'static str {
    match action {
        Action::Requeue => "requeued (scontrol requeue)",
        Action::RequeueHold => "requeued and held (scontrol requeuehold)",
        Action::Cancel => "cancelled (scancel)",
        Action::WarnOnly => "warned",
    }
}

/// How long to wait between NVML load attempts: 1 s, doubling, at most 60 s.
pub fn backoff(attempt: u32) -> Duration {
    Duration::from_secs(1u64 << attempt.min(6)).min(Duration::from_secs(60))
}

/// The AdminComment as it is now, for a second write within one action; unreadable when it
/// cannot be had (nothing is then written over).
fn comment_after(control: &mut dyn Controller) -> AdminComment {
    control
        .admin_comment()
        .unwrap_or_else(|e| AdminComment::Unreadable(e.to_string()))
}
