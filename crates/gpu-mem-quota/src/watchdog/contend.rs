//! Preemption on a contended GPU, the watchdog's side (issue 7; design in docs/PREEMPTION.md).
//!
//! Each interval every watchdog on the node refreshes its job's entry in the node registry, then,
//! for each of its GPUs, builds the same snapshot the others build (NVML's processes attributed to
//! their jobs, the registry's entries for the jobs on the GPU) and runs the same pure decision. Only
//! the victim's watchdog acts, on its own job, after claiming the GPU's cooldown; a victim whose
//! watchdog is dead (stale heartbeat, process gone) is acted for by one other watchdog, once, under
//! the registry's lock.
//!
//! A Slurm job with memory on the GPU that never registers (no watchdog here) is looked up once in
//! slurmctld's record: one that Slurm gave no GPU at all reaches this one only because cgroup.conf
//! does not constrain devices (review G9). It is reported, and on contention it is the first victim,
//! cancelled by one of the GPU's watchdogs under the GPU's cooldown claim.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use gmq_core::config::Action;
use gmq_core::controller::{AdminComment, ControlError, Controller};
use gmq_core::node_files;
use gmq_core::preempt::{decide, rank_of, Decision, JobPriority, NotGiven, PreemptSettings, Rank};
use gmq_core::record::{self, EventKind};
use gmq_core::size::ByteSize;
use gmq_core::slurm_text::JobRecord;
use gmq_core::watchdog::gpu::GpuSample;
use gmq_core::watchdog::shared_record::{count_action, record_first, Recorded};
use gmq_core::watchdog::{unix_now, Reporter};
use gmq_node::attribute::{self, ProcessIdentity};
use gmq_node::preempt_registry::{DeadClaim, GpuRef, Registry, RegistryEntry};
use gmq_node::slurm_controller::SlurmController;
use gmq_node::slurmctl::SlurmTools;

/// What the watchdog knows of its job for the registry.
pub(crate) struct RegistryFacts {
    pub(crate) user: String,
    pub(crate) quota: Option<u64>,
    pub(crate) priority: JobPriority,
    pub(crate) preemptible: bool,
    pub(crate) requeueable: bool,
    /// Preemptions in earlier runs (from the job's record).
    pub(crate) preemptions: u32,
}

pub(crate) struct Contender {
    job_id: u32,
    node: String,
    settings: PreemptSettings,
    registry: Registry,
    entry: RegistryEntry,
    runtime_dir: PathBuf,
    proc_root: PathBuf,
    cgroup_root: PathBuf,
    /// User names of the uids seen on the job's GPUs (the registry knows users by name), looked
    /// up once per watchdog rather than once per process and sample.
    user_names: BTreeMap<u32, Option<String>>,
    /// Slurm jobs seen with memory on one of this job's GPUs without a registry entry, and when
    /// first seen (unix seconds): they count as arriving for a heartbeat timeout, then not. Kept
    /// for the watchdog's life: a job that leaves the GPU and comes back is not new again (G8).
    unregistered_since: BTreeMap<u32, u64>,
    /// Per GPU (uuid), since when its contention has been waiting for arriving jobs: one wait
    /// lasts a heartbeat timeout at most, however many jobs arrive during it (G8).
    waiting_since: BTreeMap<String, u64>,
    /// What slurmctld's record says of the Slurm jobs on this job's GPUs that never registered
    /// (asked once per job; again a minute after a failed read).
    unregistered_jobs: BTreeMap<u32, Allocation>,
    /// Set once this watchdog preempted its own job: nothing more to decide.
    done: bool,
}

/// Whether a Slurm job without a watchdog here was given GPUs, as slurmctld's record says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Allocation {
    /// Given a GPU or shards somewhere: its watchdog failed to start, or it has none on this node.
    /// Not ours to act on.
    GivenGpus,
    /// Given none (review G9).
    NotGiven,
    /// Its record could not be read; asked again from then on (unix seconds).
    Unknown { ask_again_at: u64 },
}

/// How long after a failed read of a job's record it is asked for again.
const RECORD_RETRY_SECS: u64 = 60;

/// The allocation a job's record shows.
fn allocation_of(record: &JobRecord) -> Allocation {
    if record.given_gpus {
        Allocation::GivenGpus
    } else {
        Allocation::NotGiven
    }
}

impl Contender {
    pub(crate) fn new(
        job_id: u32,
        node: &str,
        settings: PreemptSettings,
        runtime_dir: &Path,
        facts: RegistryFacts,
        gpus: Vec<GpuRef>,
        me: ProcessIdentity,
    ) -> std::io::Result<Contender> {
        let registry = Registry::open(runtime_dir)?;
        let rank: Rank = rank_of(&settings.ranks, &facts.priority);
        let entry = RegistryEntry {
            job_id,
            user: facts.user,
            quota: facts.quota,
            rank,
            preemptible: facts.preemptible,
            requeueable: facts.requeueable,
            preemptions: facts.preemptions,
            start_time: unix_now(),
            gpus,
            watchdog: me,
            heartbeat: unix_now(),
            acted_by: None,
        };
        registry.write(&entry)?;
        Ok(Contender {
            job_id,
            node: node.to_string(),
            settings,
            registry,
            entry,
            runtime_dir: runtime_dir.to_path_buf(),
            proc_root: PathBuf::from("/proc"),
            cgroup_root: PathBuf::from("/sys/fs/cgroup"),
            user_names: BTreeMap::new(),
            unregistered_since: BTreeMap::new(),
            waiting_since: BTreeMap::new(),
            unregistered_jobs: BTreeMap::new(),
            done: false,
        })
    }

    /// One interval: heartbeat, then decide for each of the job's GPUs. Returns true when this
    /// watchdog preempted its own job. `record` is what the watchdog recorded of this run so far
    /// (peaks included): a preemption records it with the event, so the restart's hints know that
    /// the job stayed within its quota.
    pub(crate) fn tick(
        &mut self,
        samples: &[GpuSample],
        record: Option<&record::Entry>,
        control: &mut dyn Controller,
        report: &mut dyn Reporter,
    ) -> bool {
        if self.done {
            return false;
        }
        let now = unix_now();
        if let Err(e) = self.registry.heartbeat(&mut self.entry, now) {
            report.error(&format!("cannot refresh the node registry: {e}"));
        }
        let Ok(entries) = self.registry.list() else {
            return false;
        };
        let mine: Vec<&GpuSample> = samples.iter().filter(|g| self.entry.uses_gpu(&g.uuid)).collect();
        let timeout = self.settings.heartbeat_timeout.as_secs();
        for gpu in mine {
            let on_gpu: Vec<&RegistryEntry> = entries.iter().filter(|e| e.uses_gpu(&gpu.uuid)).collect();
            let (used_by, unregistered_use) = self.usage_by_job(gpu, &on_gpu, &entries);
            let unregistered: Vec<u32> = unregistered_use.keys().copied().collect();
            let new_arrival = unregistered
                .iter()
                .any(|job| !self.unregistered_since.contains_key(job));
            let mut arriving = still_arriving(&unregistered, &mut self.unregistered_since, now, timeout);
            // Those whose wait is over: what slurmctld gave them decides whether they go first.
            let not_given: Vec<NotGiven> = unregistered_use
                .iter()
                .filter(|(job, _)| !arriving.contains(job))
                .filter(|(&job, &used)| self.not_given(job, gpu.index, used, now, report))
                .map(|(&job_id, &used)| NotGiven { job_id, used })
                .collect();
            let waited = self.waiting_since.get(&gpu.uuid).copied();
            if waited.is_some_and(|since| now.saturating_sub(since) >= timeout) {
                arriving.clear();
            }
            let jobs = on_gpu
                .iter()
                .map(|e| e.on_gpu(used_by.get(&e.job_id).copied().unwrap_or(0)))
                .collect();
            let snapshot = gmq_core::preempt::GpuSnapshot {
                index: gpu.index,
                total: gpu.total,
                used: gpu.used,
                seconds_to_full: None,
                jobs,
                arriving,
                not_given: not_given.clone(),
            };
            let cooldown = match self.registry.gpu_cooldown(&gpu.uuid) {
                Ok(c) => c,
                Err(e) => {
                    report.error(&format!("cannot read GPU {}'s cooldown: {e}", gpu.index));
                    continue;
                }
            };
            let decision = decide(&snapshot, &self.settings, &cooldown, now);
            // The episode lasts while the GPU is contended: a wait cut short stays cut short.
            match decision {
                Decision::Waiting { .. } => {
                    self.waiting_since.entry(gpu.uuid.clone()).or_insert(now);
                }
                Decision::Calm => {
                    self.waiting_since.remove(&gpu.uuid);
                }
                _ => {}
            }
            let (contention, victim) = match decision {
                Decision::Preempt {
                    contention, victim, ..
                } => (contention, victim),
                Decision::Waiting { contention, arriving } => {
                    // Once per arriving job, not every interval it is waited for.
                    if new_arrival {
                        report.info(&format!(
                        "GPU {} contended ({contention}): waiting for job(s) {} to register before choosing whom to preempt",
                            gpu.index,
                            job_list(&arriving)
                        ));
                    }
                    continue;
                }
                _ => continue,
            };
            let why = format!("GPU {} contended ({contention}): {}", gpu.index, victim.why);
            if victim.job_id == self.job_id {
                if self.preempt(&gpu.uuid, victim.action, &why, record, control, report, now) {
                    self.done = true;
                    return true;
                }
            } else if not_given.iter().any(|job| job.job_id == victim.job_id) {
                self.act_for_not_given(victim.job_id, &gpu.uuid, victim.action, &why, report, now);
            } else if let Some(entry) = entries.iter().find(|e| e.job_id == victim.job_id) {
                if entry.is_stale(now, self.settings.heartbeat_timeout, &self.proc_root) {
                    self.act_for_dead(entry, &gpu.uuid, victim.action, &why, report, now);
                }
            }
        }
        false
    }

    /// Whether `job`, a Slurm job on GPU `index` with no registry entry past its arrival, was
    /// given no GPU: slurmctld's record, read once per job (a failed read is asked again a minute
    /// later, and says nothing meanwhile). Said in the log once, when first known.
    fn not_given(&mut self, job: u32, index: u32, used: u64, now: u64, report: &mut dyn Reporter) -> bool {
        let known = self.unregistered_jobs.get(&job).copied();
        let allocation = match known {
            Some(Allocation::Unknown { ask_again_at }) if now < ask_again_at => return false,
            Some(Allocation::GivenGpus) => return false,
            Some(Allocation::NotGiven) => return true,
            _ => match SlurmTools::find_configured()
                .with_json_job_reads_detected()
                .job_record(job)
            {
                Ok(record) => allocation_of(&record),
                Err(e) => {
                    if known.is_none() {
                        report.warning(&format!(
                            "GPU {index}: job {job} holds {} here without a watchdog on this node, \
                             and its record cannot be read ({e}): left alone",
                            ByteSize::from_bytes(used).floor_mib()
                        ));
                    }
                    Allocation::Unknown {
                        ask_again_at: now + RECORD_RETRY_SECS,
                    }
                }
            },
        };
        self.unregistered_jobs.insert(job, allocation);
        match allocation {
            Allocation::NotGiven => {
                report.warning(&format!(
                    "GPU {index}: job {job} holds {} here, but Slurm gave it no GPU (cgroup.conf does \
                     not constrain devices: docs/SAFETY.md, G9): no quota holds it; on contention it \
                     is cancelled first",
                    ByteSize::from_bytes(used).floor_mib()
                ));
                true
            }
            Allocation::GivenGpus => {
                report.info(&format!(
                    "GPU {index}: job {job} holds {} here without a watchdog on this node (Slurm gave \
                     it GPUs: its watchdog did not start, or they are on another node): left alone",
                    ByteSize::from_bytes(used).floor_mib()
                ));
                false
            }
            Allocation::Unknown { .. } => false,
        }
    }

    /// Bytes each job on this GPU (`on_gpu`, from the registry) is held to: a process counts for
    /// a job by the same rule as the job's own watchdog applies (`attribute::counts_for_job`),
    /// so a process moved between a user's jobs counts for each, and one that left its job (a
    /// daemon under linuxproc) counts for its user's jobs on this GPU. The registry knows users by
    /// name: the process's uid is named through passwd. Also the Slurm jobs (by their cgroup
    /// claims) with memory on the GPU that have no entry in `registered` at all, with the bytes of
    /// their processes there.
    fn usage_by_job(
        &mut self,
        gpu: &GpuSample,
        on_gpu: &[&RegistryEntry],
        registered: &[RegistryEntry],
    ) -> (BTreeMap<u32, u64>, BTreeMap<u32, u64>) {
        let mut used = BTreeMap::new();
        let mut unregistered = BTreeMap::new();
        for p in &gpu.processes {
            let owner = attribute::owner_of(&self.proc_root, &self.cgroup_root, p.pid);
            let attribute::Owner::Process { real_uid, claims, .. } = &owner else {
                continue;
            };
            if p.used.unwrap_or(0) > 0 {
                // Only a cgroup Slurm made says a job is arriving: one the user made can name
                // any of their jobs, to keep preemption waiting (G8).
                for claim in claims.iter().filter(|c| c.level == attribute::Level::Slurm) {
                    if !registered.iter().any(|e| e.job_id == claim.job_id) {
                        let bytes: &mut u64 = unregistered.entry(claim.job_id).or_insert(0);
                        *bytes = bytes.saturating_add(p.used.unwrap_or(0));
                    }
                }
            }
            let user = self
                .user_names
                .entry(*real_uid)
                .or_insert_with(|| gmq_node::passwd::user_name(*real_uid));
            for job in on_gpu {
                // Rule 2 only for the jobs of the process's own user (every listed GPU here is
                // the job's: `on_gpu`).
                let same_user = user.as_deref() == Some(job.user.as_str());
                let counts = attribute::claimed_by(&owner, job.job_id)
                    || (same_user && attribute::unclaimed_process_of(&owner, *real_uid));
                if counts {
                    let bytes = used.entry(job.job_id).or_insert(0u64);
                    *bytes = bytes.saturating_add(p.used.unwrap_or(0));
                }
            }
        }
        (used, unregistered)
    }

    /// This watchdog's job is the victim: claim the GPU, record, requeue.
    #[allow(clippy::too_many_arguments)]
    fn preempt(
        &mut self,
        uuid: &str,
        action: Action,
        why: &str,
        record: Option<&record::Entry>,
        control: &mut dyn Controller,
        report: &mut dyn Reporter,
        now: u64,
    ) -> bool {
        match self
            .registry
            .claim_gpu(uuid, self.job_id, now, self.settings.cooldown)
        {
            Ok(Ok(())) => {}
            Ok(Err(_)) => return false, // another job was preempted on this GPU just now
            Err(e) => {
                report.error(&format!("cannot claim the GPU for a preemption: {e}"));
                return false;
            }
        }
        let run = RunRecord {
            node: &self.node,
            quota: self.entry.quota,
            so_far: record.cloned(),
        };
        match record_and_act(control, run, action, why, report) {
            Ok(()) => {
                report.warning(&format!("preempted: {why}; {}", action.name()));
                true
            }
            Err(e) => {
                report.error(&format!("preemption failed: {e}"));
                // A job slurmctld says is gone has nothing left to preempt.
                self.done = e.job_gone();
                false
            }
        }
    }

    /// The victim's watchdog is gone: act for it, once, under the registry's lock.
    fn act_for_dead(
        &mut self,
        victim: &RegistryEntry,
        uuid: &str,
        action: Action,
        why: &str,
        report: &mut dyn Reporter,
        now: u64,
    ) {
        let claim = self.registry.claim_for_dead(
            victim.job_id,
            self.job_id,
            now,
            self.settings.heartbeat_timeout,
            &self.proc_root,
        );
        let Ok(DeadClaim::Granted(_)) = claim else { return };
        if !matches!(
            self.registry
                .claim_gpu(uuid, victim.job_id, now, self.settings.cooldown),
            Ok(Ok(()))
        ) {
            let _ = self.registry.withdraw_claim(victim.job_id, self.job_id);
            return;
        }
        let mut control = SlurmController::from_env(victim.job_id);
        let why = format!("{why} (acting for job {}, whose watchdog is gone)", victim.job_id);
        // What the dead watchdog last recorded of the run (its record file outlives it).
        let so_far = std::fs::read_to_string(
            node_files::job_dir(&self.runtime_dir, victim.job_id).join(node_files::RECORD_FILE),
        )
        .ok()
        .and_then(|text| record::parse(&text).ok().flatten())
        .and_then(|r| r.entries().first().cloned());
        let run = RunRecord {
            node: &self.node,
            quota: victim.quota,
            so_far,
        };
        match record_and_act(&mut control, run, action, &why, report) {
            Ok(()) => report.warning(&format!("preempted job {}: {why}", victim.job_id)),
            Err(e) => {
                let _ = self.registry.withdraw_claim(victim.job_id, self.job_id);
                report.error(&format!(
                    "could not preempt job {} for its dead watchdog: {e}",
                    victim.job_id
                ));
            }
        }
    }

    /// The victim is a job Slurm gave no GPU (review G9): one of the GPU's watchdogs cancels it,
    /// the one that claims the GPU's cooldown first; the others find it claimed. The cancel is
    /// recorded in that job's AdminComment first, as every preemption is.
    fn act_for_not_given(
        &mut self,
        job: u32,
        uuid: &str,
        action: Action,
        why: &str,
        report: &mut dyn Reporter,
        now: u64,
    ) {
        match self.registry.claim_gpu(uuid, job, now, self.settings.cooldown) {
            Ok(Ok(())) => {}
            Ok(Err(_)) => return,
            Err(e) => {
                report.error(&format!("cannot claim the GPU for a preemption: {e}"));
                return;
            }
        }
        let mut control = SlurmController::from_env(job);
        let run = RunRecord {
            node: &self.node,
            quota: None,
            so_far: None,
        };
        match record_and_act(&mut control, run, action, why, report) {
            Ok(()) => report.warning(&format!("preempted job {job}: {why}; {}", action.name())),
            Err(e) => report.error(&format!("could not preempt job {job}: {e}")),
        }
    }

    /// The watchdog leaves: its entry goes with it.
    pub(crate) fn leave(&self) {
        let _ = self.registry.remove(self.job_id);
    }
}

/// The run a preemption is recorded for.
struct RunRecord<'a> {
    node: &'a str,
    quota: Option<u64>,
    /// What its watchdog recorded so far (peaks), when known.
    so_far: Option<record::Entry>,
}

/// Records the preemption in the job's AdminComment (first: it must survive the requeue and tells
/// the next run `preempted`, with the run's peaks; see [`record_first`]), then requeues (or holds)
/// the job. An AdminComment that cannot be read is left as it is: the preemption goes ahead
/// unrecorded.
fn record_and_act(
    control: &mut dyn Controller,
    run: RunRecord,
    action: Action,
    why: &str,
    report: &mut dyn Reporter,
) -> Result<(), ControlError> {
    let job = control.job()?;
    let mut entry = run.so_far.filter(|e| e.run == job.restarts).unwrap_or_else(|| {
        record::Entry::new(
            run.node,
            job.restarts,
            ByteSize::from_bytes(run.quota.unwrap_or(0)),
        )
    });
    count_action(&mut entry, EventKind::Preempted, action, unix_now());
    let comment = control.admin_comment()?;
    let recorded = record_first(control, &comment, &entry, job.node_count > 1)
        .map_err(|e| e.noting(&format!(" (while recording: {why})")))?;
    if let (Recorded::Unreadable, AdminComment::Unreadable(unreadable)) = (recorded, &comment) {
        report.warning(&format!(
            "the job's AdminComment cannot be read ({unreadable}): preempting without recording it, \
             the AdminComment left as it is"
        ));
    }
    control.perform(action)
}

/// Of the jobs on a GPU without a registry entry (`unregistered`), the ones still arriving: first
/// seen (`first_seen`) less than `timeout` seconds ago. A watchdog registers within its first
/// interval; one that has not by a heartbeat timeout is not coming, and the others may not wait
/// for it for ever. Records when each was first seen in `first_seen`, which keeps every job it
/// has seen: a job that left the GPU and came back is not waited for again (G8). At most
/// [`MAX_FIRST_SIGHTINGS`] are kept; past that, those whose wait is over are dropped.
fn still_arriving(
    unregistered: &[u32],
    first_seen: &mut BTreeMap<u32, u64>,
    now: u64,
    timeout: u64,
) -> Vec<u32> {
    if first_seen.len() > MAX_FIRST_SIGHTINGS {
        first_seen.retain(|_, since| now.saturating_sub(*since) < timeout);
    }
    unregistered
        .iter()
        .copied()
        .filter(|job| {
            let since = *first_seen.entry(*job).or_insert(now);
            now.saturating_sub(since) < timeout
        })
        .collect()
}

/// How many first sightings of unregistered jobs a watchdog keeps (a node runs far fewer jobs in
/// one job's life; the bound is for a flood of them).
const MAX_FIRST_SIGHTINGS: usize = 4096;

fn job_list(jobs: &[u32]) -> String {
    jobs.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unregistered_job_is_waited_for_a_heartbeat_timeout_then_not() {
        let (mut first_seen, timeout) = (BTreeMap::new(), 30);
        let mut tick =
            |now: u64, unregistered: &[u32]| still_arriving(unregistered, &mut first_seen, now, timeout);
        assert_eq!(tick(1000, &[7]), vec![7]);
        assert_eq!(tick(1010, &[7, 8]), vec![7, 8]);
        assert_eq!(tick(1029, &[7, 8]), vec![7, 8]);
        // 7 has had its 30 s; 8 is still arriving.
        assert_eq!(tick(1030, &[7, 8]), vec![8]);
        // A job that left the GPU and comes back is not new again (G8: two jobs taking turns on
        // the GPU kept preemption waiting for ever).
        assert_eq!(tick(1031, &[8]), vec![8]);
        assert_eq!(tick(1032, &[7]), Vec::<u32>::new());
        assert_eq!(tick(1100, &[8]), Vec::<u32>::new());
    }
}
