//! The `proctrack/linuxproc` way: a process belongs to the step whose slurmstepd it descends from.
//!
//! A user cannot forge this: a process cannot choose its parent, and the slurmstepd that counts
//! must be owned by root (anyone can name a process `slurmstepd`). What it cannot see: a process
//! that left its step by daemonizing (double fork: it is reparented to init or a subreaper). Slurm's
//! own linuxproc tracking loses such processes too.

use std::path::Path;

use super::procfs::{read_cmdline, read_real_uid, read_stat, ProcStat};
use super::step::StepName;
use super::stepd::parse_title;

/// How many ancestors are looked at: real chains are a handful deep (stepd → shell → launcher →
/// task); the bound also ends a loop, which a consistent /proc never has but a racing read might.
const MAX_DEPTH: usize = 64;

/// What a process's ancestry says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Lineage {
    /// The nearest root-owned slurmstepd above the process manages this step.
    Step { job_id: u32, step: StepName },
    /// No root-owned slurmstepd above it, or one that manages no step, or the chain broke.
    NoStep,
}

/// The ancestry of `process` (already read) up to the first root-owned slurmstepd.
pub(crate) fn lineage(proc_root: &Path, process: &ProcStat) -> Lineage {
    let mut child = process.clone();
    for _ in 0..MAX_DEPTH {
        if child.ppid <= 1 {
            return Lineage::NoStep;
        }
        let Some(parent) = read_stat(proc_root, child.ppid) else {
            return Lineage::NoStep;
        };
        // A parent starts before its children. A later start means the pid was reused after the
        // real parent exited: the chain is broken here.
        if parent.start_time > child.start_time {
            return Lineage::NoStep;
        }
        if is_root_stepd(proc_root, &parent) {
            // The boundary: a step's stepd names its step; any other stepd (spank prolog) none.
            return match read_cmdline(proc_root, parent.pid)
                .as_deref()
                .and_then(parse_title)
            {
                Some((job_id, step)) => Lineage::Step { job_id, step },
                None => Lineage::NoStep,
            };
        }
        child = parent;
    }
    Lineage::NoStep
}

/// Whether `process` is a slurmstepd owned by root (real uid 0). Reads `status` only for a
/// process named `slurmstepd`.
pub(crate) fn is_root_stepd(proc_root: &Path, process: &ProcStat) -> bool {
    process.comm == "slurmstepd" && read_real_uid(proc_root, process.pid) == Some(0)
}
