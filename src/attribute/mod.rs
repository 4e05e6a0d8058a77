//! Which job a process belongs to: the edge between NVML's host pids and Slurm jobs.
//!
//! NVML tells the watchdog which pids use GPU memory; the watchdog counts a pid toward its job only
//! when Slurm itself put the process there, by evidence a user cannot forge:
//! 1. **cgroups** (`proctrack/cgroup`, cgroup v1 or v2, hybrid hosts too): `/proc/PID/cgroup`
//!    names Slurm's job cgroup (only root creates them and moves processes between them; the
//!    exact paths accepted are in `cgroup.rs`);
//! 2. else **ancestry** (`proctrack/linuxproc`): the nearest root-owned `slurmstepd` above the
//!    process, whose title names its step (`slurmstepd: [12.0]`).
//!
//! The job environment (`/proc/PID/environ`) is never used: a process can set `SLURM_JOB_ID` to
//! anything. When the evidence is missing or contradicts itself the answer is [`Owner::NotAJob`]:
//! not counted, never guessed. A slurmstepd is not a process of its job.
//!
//! Pids are reused. [`Owner::Job`] carries the [`ProcessIdentity`] it was established for
//! (re-checked after the reads), and [`same_process`] tells later whether that process still
//! runs: attribute at sample time, re-check before acting.
//!
//! Every function takes its roots as parameters (`/proc`, `/sys/fs/cgroup` in production; fixture
//! trees in tests), never fails on a process that vanished, and never panics.
//!
//! Cost (the watchdog samples every 100 ms .. seconds, up to 8 GPUs x 64 processes):
//! - [`identify`], [`same_process`]: one read of `/proc/PID/stat`.
//! - [`owner_of`] on a cgroup node: three reads (`stat`, `cgroup`, `stat` again); on a linuxproc
//!   node add one `stat` per ancestor and `status` + `cmdline` of the slurmstepd (typically 5–8
//!   reads). Every call reads afresh; nothing is cached, so nothing goes stale. Measured on a
//!   2-vCPU VM: about 45 µs per pid (one `stat` read: 12 µs), so 512 pids cost ~25 ms.
//! - [`job_cgroup`]: a few reads and `stat` calls; once at start.
//! - [`job_active_on_node`]: a few directory listings; every few seconds is plenty.

mod ancestry;
mod cgroup;
mod identity;
mod job_cgroup;
mod procfs;
mod step;
mod stepd;

use std::path::Path;

pub use identity::{identify, same_process, ProcessIdentity};
pub use job_cgroup::{job_active_on_node, job_cgroup, JobCgroup};
pub use step::Step;

use ancestry::{is_root_stepd, lineage, Lineage};
use cgroup::{membership, Membership};
use procfs::{read_cgroup, read_stat};

/// Who a process belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Owner {
    /// Slurm put `process` in this job (and step, where one is known).
    Job {
        job_id: u32,
        step: Option<Step>,
        process: ProcessIdentity,
        evidence: Evidence,
    },
    /// Not provably a process of any job: outside Slurm, a slurmstepd, a process that left its step
    /// (linuxproc), or evidence that contradicts itself.
    NotAJob,
    /// No such process (it exited, or its pid was reused while it was being read).
    Gone,
}

/// How a process was attributed (for logs: it tells which proctrack layout was seen).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Evidence {
    /// Its `/proc/PID/cgroup` is in the job's cgroup.
    Cgroup,
    /// It descends from the step's root-owned slurmstepd.
    Ancestry,
}

impl Owner {
    /// The job, when the process has one.
    pub fn job_id(&self) -> Option<u32> {
        match self {
            Owner::Job { job_id, .. } => Some(*job_id),
            Owner::NotAJob | Owner::Gone => None,
        }
    }
}

/// Who the process with `pid` belongs to: cgroups first, then ancestry.
pub fn owner_of(proc_root: &Path, pid: u32) -> Owner {
    let Some(process) = read_stat(proc_root, pid) else {
        return Owner::Gone;
    };
    let identity = ProcessIdentity {
        pid,
        start_time: process.start_time,
    };
    if is_root_stepd(proc_root, &process) {
        return Owner::NotAJob;
    }
    let Some(cgroups) = read_cgroup(proc_root, pid) else {
        return Owner::Gone;
    };
    let (job_id, step, evidence) = match membership(&cgroups) {
        Membership::Job { job_id, step } => (job_id, step, Evidence::Cgroup),
        Membership::Conflict => return Owner::NotAJob,
        Membership::NoJob => match lineage(proc_root, &process) {
            Lineage::Step { job_id, step } => (job_id, Some(step), Evidence::Ancestry),
            Lineage::NoStep => return Owner::NotAJob,
        },
    };
    // Everything above must have been read from one process: the pid was not reused meanwhile.
    if !same_process(proc_root, &identity) {
        return Owner::Gone;
    }
    Owner::Job {
        job_id,
        step,
        process: identity,
        evidence,
    }
}

/// [`owner_of`] for each pid, in the same order (e.g. NVML's process list of one GPU).
pub fn owners_of(proc_root: &Path, pids: &[u32]) -> Vec<Owner> {
    pids.iter().map(|&pid| owner_of(proc_root, pid)).collect()
}
