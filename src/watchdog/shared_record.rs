//! The record of a job that several writers share: a multi-node job's nodes all merge their
//! entries into one AdminComment, which Slurm can only replace whole. See docs/ACCOUNTING.md,
//! "Who writes, and when".

use std::time::{Duration, Instant};

use super::{AdminComment, Controller, Reporter, Watchdog};
use crate::record;

/// How often, at most, a watchdog of a multi-node job puts its entry into the AdminComment while
/// the job runs; and by how much (percent) its peak must have grown since the last time.
pub const RECORD_EVERY: Duration = Duration::from_secs(60);
pub const RECORD_GROWTH_PERCENT: u64 = 10;

/// Writes after which a record that keeps losing to other writers is given up for now.
pub const RECORD_ATTEMPTS: u32 = 3;

/// Merges `entry` into the job's AdminComment (`existing`, as read). For a job on more than one
/// node (`shared`), whose other nodes write the same text, reads it back and writes again when
/// another node's write, based on an older read, replaced ours (see docs/ACCOUNTING.md); a
/// single-node job has no other writer while it runs, and its actions do not wait for the read.
/// `Ok(false)`: still not there after [`RECORD_ATTEMPTS`]. Text that cannot be read back (a job
/// name imitating an AdminComment: it was written afresh over it) counts as written.
pub fn record_entry(
    control: &mut dyn Controller,
    existing: &str,
    entry: &record::Entry,
    shared: bool,
) -> Result<bool, String> {
    let mut existing = existing.to_string();
    for _ in 0..RECORD_ATTEMPTS {
        if !record::is_recorded(&existing, entry) {
            control.set_admin_comment(&record::merge(&existing, entry).admin_comment)?;
        }
        if !shared {
            return Ok(true);
        }
        match control.admin_comment()? {
            AdminComment::Read(text) if record::is_recorded(&text, entry) => return Ok(true),
            AdminComment::Read(text) => existing = text,
            AdminComment::Unreadable(_) => return Ok(true),
        }
    }
    Ok(false)
}

/// Whether an entry with `peak` is worth another AdminComment update, given the last one.
fn record_due(last: Option<(Instant, u64)>, now: Instant, peak: u64) -> bool {
    match last {
        None => peak > 0,
        Some((at, written)) => {
            now.saturating_duration_since(at) >= RECORD_EVERY
                && peak > written
                && peak - written >= written / 100 * RECORD_GROWTH_PERCENT
        }
    }
}

impl Watchdog {
    /// How many nodes the job runs on: with more than one, other nodes' watchdogs write the same
    /// AdminComment, and every write is read back ([`record_entry`]).
    pub fn set_node_count(&mut self, nodes: u32) {
        self.record_shared = nodes > 1;
    }

    /// Keeps this node's entry in the AdminComment while the job runs: when the job first uses GPU
    /// memory, then when its peak has grown by [`RECORD_GROWTH_PERCENT`] since the last time, at
    /// most every [`RECORD_EVERY`] (a handful of updates per node and job: peaks settle early).
    /// The end of the run cannot be relied on for the record: slurmctld refuses updates once the
    /// job is completing, which is already so when the batch script of a cancelled job ends, and
    /// always so when the other nodes of a multi-node job learn that it ended. Other nodes merge
    /// into the same text at about the same time, so their writes are read back and repeated
    /// ([`record_entry`]), and tried again at the next sample if they still lost. Never acts on
    /// the job; a failure is logged once.
    pub fn keep_record_current(
        &mut self,
        now: Instant,
        control: &mut dyn Controller,
        report: &mut dyn Reporter,
    ) {
        if self.acted.is_some() {
            return;
        }
        // Cloned only when due: this runs every sample.
        let entry = match &self.entry {
            Some(entry) if record_due(self.record_written, now, entry.peak()) => entry.clone(),
            _ => return,
        };
        let peak = entry.peak();
        let written = match control.admin_comment() {
            Ok(AdminComment::Read(existing)) => record_entry(control, &existing, &entry, self.record_shared),
            // Left alone: text that cannot be read is never written over.
            Ok(AdminComment::Unreadable(_)) => {
                Err("the AdminComment cannot be read unambiguously".to_string())
            }
            Err(e) => Err(e),
        };
        match written {
            Ok(true) => self.record_written = Some((now, peak)),
            Ok(false) => {} // other nodes' writes won every time: again at the next sample
            Err(e) if !self.record_failure_logged => {
                self.record_failure_logged = true;
                report.warning(&format!(
                    "cannot keep this node's record in the AdminComment while the job runs ({e}); \
                     will try again"
                ));
            }
            Err(_) => {}
        }
    }
}
