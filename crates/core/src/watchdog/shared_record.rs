//! The record of a job that several writers share: a multi-node job's nodes all merge their
//! entries into one AdminComment, which Slurm can only replace whole. See docs/ACCOUNTING.md,
//! "Who writes, and when". The merge itself is `crate::controller::record_entry`, which the plugin
//! uses too; here is when the watchdog writes, and the rule that an action is recorded first.

use std::time::{Duration, Instant};

use super::{Reporter, Watchdog};
use crate::config::Action;
use crate::controller::{record_entry, AdminComment, ControlError, Controller};
use crate::record::{self, EventKind};

/// How often, at most, a watchdog of a multi-node job puts its entry into the AdminComment while
/// the job runs; and by how much (percent) its peak must have grown since the last time.
const RECORD_EVERY: Duration = Duration::from_secs(60);

/// The longest pause between two tries of an AdminComment update that keeps failing.
const RETRY_AT_MOST: Duration = Duration::from_secs(600);

/// How long to wait before the next try after `failures` failed AdminComment updates in a row:
/// 2 s, doubling, at most [`RETRY_AT_MOST`]. Every try costs slurmctld a request (two, with the
/// write), and a user can make their own AdminComment unwritable (G3): a failure is never retried
/// at every sample.
pub(crate) fn retry_after(failures: u32) -> Duration {
    Duration::from_secs(2)
        .saturating_mul(1 << failures.saturating_sub(1).min(16))
        .min(RETRY_AT_MOST)
}
const RECORD_GROWTH_PERCENT: u64 = 10;

/// When, after a write to a shared AdminComment, its entry is looked for again. Another node
/// that read the text before our write and wrote its merge after our read-back has replaced our
/// entry, and nothing else would put it back until our peak grew again. Such a write comes within
/// one read-merge-write of the other node: well under a second with a slurmctld that answers
/// (the first look, soon enough for a job that ends seconds after its nodes' first writes, which
/// all come at once), seconds at most with a busy one (the second). One read more per look, for
/// multi-node jobs only, a handful of times per job: the looks are counted from the write that was
/// due (a new peak), and a write a look makes adds none, so each due write costs slurmctld at
/// most `1 + RECORD_SETTLE.len()` read-merge-writes however the other nodes write (review K4).
const RECORD_SETTLE: [Duration; 2] = [Duration::from_secs(3), Duration::from_secs(15)];

/// The next look for an entry written at `written` that is due after `now`, if any is left:
/// [`RECORD_SETTLE`] after the write, and [`look_stagger`] later on this node.
fn next_look(written: Instant, now: Instant, stagger: Duration) -> Option<Instant> {
    RECORD_SETTLE
        .iter()
        .map(|after| written + *after + stagger)
        .find(|at| *at > now)
}

/// How much later than [`RECORD_SETTLE`] says a node looks for its entry, and retries a write
/// that lost: 0 to 1.9 s in steps of 100 ms, by the node's name. The nodes of a job write their
/// first entries in the same second (they start, and warn, together); looks at the same moments
/// on every node collided again, and at 16 nodes most nodes spent their whole budget
/// (BENCHMARKS.md, section 12). A write takes tens of milliseconds, so 100 ms apart they pass.
fn look_stagger(node: &str) -> Duration {
    // FNV-1a: stable across runs and builds, unlike std's hasher.
    let hash = node.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    Duration::from_millis(hash % 20 * 100)
}

/// Counts an action in the run's entry: its `cause` (over quota, preempted) and what was done;
/// a requeue starts the next run.
pub fn count_action(entry: &mut record::Entry, cause: EventKind, action: Action, at: u64) {
    entry.count_event(cause, at);
    entry.count_event(event_of(action), at);
    if action == Action::Requeue {
        entry.facts.restarts = entry.facts.restarts.saturating_add(1);
    }
}

/// The requeues (and holds) for GPU memory the job's record counts: what `max_requeues` bounds.
/// `None`: the AdminComment cannot be read, so the job's history is unknown.
pub(crate) fn requeues_caused(comment: &AdminComment) -> Option<u32> {
    let AdminComment::Read(_) = comment else {
        return None;
    };
    Some(comment.record().map_or(0, |r| {
        let events = r.totals().events;
        events
            .get(EventKind::Requeued)
            .saturating_add(events.get(EventKind::Held))
    }))
}

fn event_of(action: Action) -> EventKind {
    match action {
        Action::Requeue => EventKind::Requeued,
        Action::RequeueHold => EventKind::Held,
        Action::Cancel => EventKind::Cancelled,
        Action::WarnOnly => EventKind::Warn,
    }
}

/// What recording an action before carrying it out came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recorded {
    Written,
    /// Written, then replaced by other writers each time (`crate::controller::RECORD_ATTEMPTS`).
    Lost,
    /// The AdminComment cannot be read: it is left as it is, the action goes unrecorded.
    Unreadable,
}

/// The rule for every action the watchdog takes on a job (over its quota, or preempted): the
/// record goes first, then the action. The record must survive the requeue, and tells the next run
/// what happened. `entry`, its events counted ([`count_action`]), is merged into `comment` (the
/// AdminComment as read); text that cannot be read is never written over, and the action goes
/// ahead unrecorded. The caller acts (`Controller::perform`) once this returns `Ok`.
pub fn record_first(
    control: &mut dyn Controller,
    comment: &AdminComment,
    entry: &record::Entry,
    shared: bool,
) -> Result<Recorded, ControlError> {
    let Some(existing) = comment.readable() else {
        return Ok(Recorded::Unreadable);
    };
    Ok(match record_entry(control, existing, entry, shared)? {
        true => Recorded::Written,
        false => Recorded::Lost,
    })
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
    /// ([`record_entry`]), tried again soon if they still lost, and looked for again
    /// [`RECORD_SETTLE`] after they were kept, since a slower node's merge may still replace them
    /// (a look that finds the entry gone writes it again, and arms no further look). Whether the
    /// entry is there is judged by what the record says ([`record::is_recorded`]), not by its
    /// bytes. Never acts on the job; a failure is logged once.
    pub fn keep_record_current(
        &mut self,
        now: Instant,
        control: &mut dyn Controller,
        report: &mut dyn Reporter,
    ) {
        if self.acted.is_some() {
            return;
        }
        if self.record_retry_at.is_some_and(|at| now < at) {
            return;
        }
        let Some(entry) = &self.entry else {
            return;
        };
        let due = record_due(self.last_record_write(), now, entry.peak());
        let looking = !due && self.record_confirm_at.is_some_and(|at| now >= at);
        if !due && !looking {
            return;
        }
        // Cloned only when due: this runs every sample.
        let entry = entry.clone();
        let comment = control.admin_comment();
        if looking {
            // The looks are a fixed budget counted from the write that armed them: whatever this
            // one finds, and whether or not it writes, it never adds a look (review K4).
            let armed = self.record_looks_from.unwrap_or(now);
            self.record_confirm_at = next_look(armed, now, look_stagger(&self.node));
            if let (Ok(AdminComment::Read(text)), Some((_, written))) = (&comment, &self.record_written) {
                if record::is_recorded(text, written) {
                    return;
                }
            }
        }
        let written = comment.and_then(|comment| record_first(control, &comment, &entry, self.record_shared));
        let failure = match written {
            Ok(Recorded::Written) => {
                self.record_written = Some((now, entry));
                self.record_failures = 0;
                self.record_retry_at = None;
                if due && self.record_shared {
                    self.record_looks_from = Some(now);
                    self.record_confirm_at = next_look(now, now, look_stagger(&self.node));
                }
                return;
            }
            // Other nodes' writes won every time: again soon, but not at every sample.
            Ok(Recorded::Lost) => {
                self.back_off_record(now);
                return;
            }
            // Left alone: text that cannot be read is never written over.
            Ok(Recorded::Unreadable) => "the AdminComment cannot be read unambiguously".to_string(),
            // The job has ended: slurmctld takes no more updates, and the watchdog leaves at its
            // next check of the job. Nothing worth a warning.
            Err(e) if e.job_gone() => return,
            Err(e) => e.to_string(),
        };
        self.back_off_record(now);
        if !self.record_failure_logged {
            self.record_failure_logged = true;
            report.warning(&format!(
                "cannot keep this node's record in the AdminComment while the job runs ({failure}); \
                 will try again"
            ));
        }
    }

    /// The run ended with nobody else on this node to record it: slurmctld requeued or ended the
    /// job after this node's slurmd died (`at`: when the watchdog learned so, Unix seconds).
    /// Counts [`EventKind::NodeFail`] in this node's entry and puts the entry into the
    /// AdminComment, due or not. An earlier write may also have been replaced by another node's
    /// writing at the same moment (each write is read back, but a later writer may still have read
    /// the text before it), and this node's part of the run would be missing from the job's
    /// record. Not after an action, which recorded itself first. Says so when it cannot be done.
    pub fn record_node_fail(&mut self, at: u64, control: &mut dyn Controller, report: &mut dyn Reporter) {
        if self.acted.is_some() {
            return;
        }
        let Some(entry) = self.entry.as_mut() else {
            return;
        };
        entry.count_event(EventKind::NodeFail, at);
        let entry = entry.clone();
        let written = control
            .admin_comment()
            .and_then(|comment| record_first(control, &comment, &entry, self.record_shared));
        let failure = match written {
            Ok(Recorded::Written) => {
                self.record_written = Some((Instant::now(), entry));
                return;
            }
            Ok(Recorded::Lost) => "other writers replaced it every time".to_string(),
            Ok(Recorded::Unreadable) => "the AdminComment cannot be read unambiguously".to_string(),
            // Ended rather than requeued (`--no-requeue`, JobRequeue=0): slurmctld takes no
            // update of a finished job, and its own state says what happened.
            Err(e) if e.job_gone() => {
                report.info(&format!(
                    "the job has ended ({e}): its record keeps what was written while it ran, and \
                     Slurm's job state (NODE_FAIL in sacct) records the node failure"
                ));
                return;
            }
            Err(e) => e.to_string(),
        };
        report.warning(&format!(
            "cannot put this node's record of the run into the AdminComment ({failure})"
        ));
    }

    /// [`Watchdog::record_text`] while this node's entry may be missing from the shared
    /// AdminComment and the watchdog may not look again in time: it is due and not yet written,
    /// or written and another node's merge may still have replaced it ([`RECORD_SETTLE`]'s looks
    /// are pending). A run that ends seconds after its nodes' first writes ends before the looks,
    /// and then slurmctld takes no more updates: the plugin puts the entry back when a step's task
    /// ends here, before srun (and so the batch script) learns of the end. `None` otherwise, and
    /// then a step's end asks slurmctld nothing: after an action (recorded first), with writes
    /// that keep failing (the watchdog's backoff governs those), or for a job of one node (the
    /// batch script's end writes its record).
    pub fn settling_text(&self) -> Option<String> {
        let used = self.entry.as_ref().is_some_and(|e| e.peak() > 0);
        let settling = self.record_shared
            && self.acted.is_none()
            && used
            && self.record_failures == 0
            && (self.record_written.is_none() || self.record_confirm_at.is_some());
        settling.then(|| self.record_text()).flatten()
    }

    /// When the entry was last put there, and with which peak.
    fn last_record_write(&self) -> Option<(Instant, u64)> {
        self.record_written
            .as_ref()
            .map(|(at, entry)| (*at, entry.peak()))
    }

    fn back_off_record(&mut self, now: Instant) {
        self.record_failures = self.record_failures.saturating_add(1);
        self.record_retry_at = Some(now + retry_after(self.record_failures) + look_stagger(&self.node));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_nodes_of_a_job_look_at_different_moments() {
        let staggers: std::collections::BTreeSet<Duration> =
            (1..=16).map(|n| look_stagger(&format!("n{n}"))).collect();
        assert!(staggers.len() >= 10, "{staggers:?}");
        assert!(staggers.iter().all(|s| *s < Duration::from_secs(2)));
        assert_eq!(look_stagger("n1"), look_stagger("n1"));
    }

    #[test]
    fn failed_updates_are_retried_ever_later() {
        let pauses: Vec<u64> = (1..=12).map(|n| retry_after(n).as_secs()).collect();
        assert_eq!(pauses, [2, 4, 8, 16, 32, 64, 128, 256, 512, 600, 600, 600]);
        assert_eq!(retry_after(u32::MAX), RETRY_AT_MOST);
    }
}
