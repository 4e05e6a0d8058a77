//! The per-job watchdog: one process per job per node, started by the plugin (see `spawn`).
//!
//! Each interval: sample the job's GPUs (`gpu`), keep the processes that are provably the job's
//! (`attribute`), track current/peak per GPU, feed the ladder (`ladder`), write the job's status
//! file, and when the job stayed over its quota past the grace period, record the event in the
//! job's AdminComment and act (`control`). It talks to the world only through the traits below,
//! so tests drive it with tables; `run` wires the real edges.
//!
//! Fail-safe: when NVML, attribution or Slurm fails, the watchdog logs, backs off and leaves the
//! job running. It acts only on its own job, and only on a fresh confirmation of the overuse.

pub mod control;
pub mod daemon;
pub mod gpu;
pub mod ladder;
pub mod log;
pub mod params;
pub mod spawn;
pub mod status;

use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::config::{Action, Enforcement};
use crate::record::{self, EventKind};
use crate::size::ByteSize;
use gpu::{GpuSample, GpuSource};
use ladder::{JobFacts, Ladder, Step};

/// Which processes are the job's. `None`: the process is gone.
pub trait Attributor {
    fn is_ours(&mut self, pid: u32) -> Option<bool>;
}

/// The job as slurmctld knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobState {
    pub state: String,
    pub restarts: u32,
    pub requeueable: bool,
    pub admin_comment: String,
}

/// The watchdog's only way to Slurm: read its job, write its record, act on it.
pub trait Controller {
    fn job(&mut self) -> Result<JobState, String>;
    fn set_admin_comment(&mut self, text: &str) -> Result<(), String>;
    fn perform(&mut self, action: Action) -> Result<(), String>;
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
    pub uuid: String,
    pub total: u64,
    pub used: u64,
    pub peak: u64,
    /// Processes of the job whose usage NVML could not tell.
    pub unavailable: u32,
}

/// What the loop should do next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    Continue,
    /// The job is done here (ended, requeued, cancelled): clean up and exit.
    Stop,
}

pub struct Watchdog {
    pub job_id: u32,
    pub node: String,
    pub quota: Option<ByteSize>,
    pub settings: Enforcement,
    usage: BTreeMap<u32, GpuUsage>,
    ladder: Ladder,
    /// The restart count of the run this watchdog watches; another count means a new run.
    run: Option<u32>,
    entry: Option<record::Entry>,
    acted: Option<Action>,
    sample_errors: u32,
    state: status::JobHealth,
}

fn unix_now() -> u64 {
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
                    if attributor.is_ours(p.pid) == Some(true) {
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
                if self.sample_errors % 100 == 0 {
                    report.error(&format!(
                        "cannot sample GPU memory: {e}; the job keeps running unchecked"
                    ));
                }
                self.sample_errors += 1;
                return Flow::Continue;
            }
        };
        let mut worst = 0u64;
        for (index, uuid, total, used, unavailable) in Self::job_usage(&samples, attributor) {
            let entry = self.usage.entry(index).or_default();
            entry.uuid = uuid;
            entry.total = total;
            entry.used = used;
            entry.peak = entry.peak.max(used);
            entry.unavailable = unavailable;
            worst = worst.max(used);
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
        let step = self.ladder.observe(
            worst,
            quota,
            now,
            self.settings.warn_threshold,
            self.settings.grace,
        );
        match step {
            Step::Nothing => {}
            Step::Warn => {
                self.state = status::JobHealth::Warn;
                if let Some(record) = &mut self.entry {
                    record.count_event(EventKind::Warn, unix_now());
                }
                report.warning(&format!(
                    "GPU memory {} of its {} quota ({:.0}%): warning the job",
                    ByteSize::from_bytes(worst).floor_mib(),
                    ByteSize::from_bytes(quota),
                    worst as f64 * 100.0 / quota as f64
                ));
            }
            Step::Recovered => {
                self.state = status::JobHealth::Ok;
                report.info("GPU memory back under the warn threshold");
            }
            Step::Over { .. } => self.state = status::JobHealth::OverQuota,
            Step::Act => {
                self.state = status::JobHealth::OverQuota;
                self.act(gpus, attributor, control, report, quota);
            }
        }
        report.status(&self.status(Some(quota)));
        Flow::Continue
    }

    /// Over the quota past the grace period: confirm on a fresh sample, record, then act.
    fn act(
        &mut self,
        gpus: &mut dyn GpuSource,
        attributor: &mut dyn Attributor,
        control: &mut dyn Controller,
        report: &mut dyn Reporter,
        quota: u64,
    ) {
        // Never act on a stale picture: processes may have exited or PIDs been reused since.
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
            report.info("over the quota no more on a fresh sample: nothing done");
            self.ladder = Ladder::default();
            return;
        }
        let job = match control.job() {
            Ok(job) => job,
            Err(e) => {
                report.error(&format!(
                    "cannot read the job from slurmctld ({e}); will try again, the job keeps running"
                ));
                self.ladder = Ladder::default();
                return;
            }
        };
        let requeues_by_us = record::parse(&job.admin_comment)
            .ok()
            .flatten()
            .map(|r| r.totals().events.get(EventKind::Requeued) + r.totals().events.get(EventKind::Held))
            .unwrap_or(0);
        let facts = JobFacts {
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
            return;
        }
        // The record goes first: it must survive the requeue (and tells the next run what happened).
        if let Some(record) = &mut self.entry {
            let at = unix_now();
            record.count_event(EventKind::OverQuota, at);
            record.count_event(event_of(action), at);
            if action == Action::Requeue {
                record.facts.restarts += 1;
            }
            let merged = record::merge(&job.admin_comment, record);
            if let Err(e) = control.set_admin_comment(&merged.admin_comment) {
                report.error(&format!(
                    "{what}, but the record cannot be written ({e}): not acting blind; will try again"
                ));
                self.ladder = Ladder::default();
                return;
            }
        }
        match control.perform(action) {
            Ok(()) => {
                report.warning(&format!("{what}: {}", action_done(action)));
                self.acted = Some(action);
                self.state = status::JobHealth::Acted;
            }
            Err(e) => {
                report.error(&format!(
                    "{what}, but {} failed: {e}; will try again",
                    action_name(action)
                ));
                self.ladder = Ladder::default();
            }
        }
    }

    /// The status the job can read.
    pub fn status(&self, quota: Option<u64>) -> status::Status {
        status::Status {
            job_id: self.job_id,
            updated_at: unix_now(),
            health: self.state,
            quota_bytes: quota,
            action: self.acted.map(action_name),
            gpus: self
                .usage
                .iter()
                .map(|(&index, u)| status::GpuStatus {
                    index,
                    uuid: u.uuid.clone(),
                    used_bytes: u.used,
                    peak_bytes: u.peak,
                    total_bytes: u.total,
                })
                .collect(),
        }
    }

    /// Whether this watchdog already acted (then it only waits for its job to leave the node).
    pub fn has_acted(&self) -> bool {
        self.acted.is_some_and(|a| a != Action::WarnOnly)
    }

    pub fn run(&self) -> Option<u32> {
        self.run
    }
}

fn event_of(action: Action) -> EventKind {
    match action {
        Action::Requeue => EventKind::Requeued,
        Action::RequeueHold => EventKind::Held,
        Action::Cancel => EventKind::Cancelled,
        Action::WarnOnly => EventKind::Warn,
    }
}

pub fn action_name(action: Action) -> &'static str {
    match action {
        Action::Requeue => "requeue",
        Action::RequeueHold => "requeue-hold",
        Action::Cancel => "cancel",
        Action::WarnOnly => "warn-only",
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
