//! What the job's record (our segment of its AdminComment) says about the run before this one.

use super::restart::{PreviousRun, RestartCause};
use crate::record::{self, EventKind};
use crate::size::ByteSize;

/// The previous run as the record tells it; `None` when the AdminComment holds no record of ours.
/// Requeues and holds caused by us are counted; the latest run's busiest GPU gives the peak.
pub fn previous_run(admin_comment: &str) -> Option<PreviousRun> {
    let record = record::parse(admin_comment).ok().flatten()?;
    let totals = record.totals();
    let restarts = totals
        .events
        .get(EventKind::Requeued)
        .saturating_add(totals.events.get(EventKind::Held));
    let latest = record.entries().iter().map(|e| e.run).max();
    let peak = record
        .entries()
        .iter()
        .filter(|e| Some(e.run) == latest)
        .map(|e| e.peak())
        .max();
    // A requeue to heal a failed near-OOM run is told by the entry that holds the last event.
    let healed = totals.last_event.is_some_and(|last| {
        record
            .entries()
            .iter()
            .any(|e| e.facts.last_event == Some(last) && e.facts.events.get(EventKind::Oom) > 0)
    });
    let requeued_for = match totals.last_event.map(|e| e.kind) {
        Some(EventKind::Requeued | EventKind::Oom) if healed => Some(RestartCause::NearOom),
        Some(EventKind::Requeued | EventKind::Held) if totals.events.get(EventKind::Preempted) > 0 => {
            Some(RestartCause::Preempted)
        }
        Some(EventKind::Requeued | EventKind::Held | EventKind::OverQuota) => Some(RestartCause::OverQuota),
        Some(EventKind::Preempted) => Some(RestartCause::Preempted),
        _ => None,
    };
    Some(PreviousRun {
        restarts,
        requeued_for,
        peak: peak.filter(|&p| p > 0).map(ByteSize::from_bytes),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const G: u64 = 1 << 30;

    #[test]
    fn a_run_requeued_for_overuse() {
        let mut entry = record::Entry::new("node1", 0, ByteSize::from_bytes(40 * G));
        entry.observe_gpu(0, None, 52 * G);
        entry.count_event(EventKind::OverQuota, 10);
        entry.count_event(EventKind::Requeued, 10);
        let comment = record::merge("other-tool:x", &entry).admin_comment;
        let previous = previous_run(&comment).unwrap();
        assert_eq!(previous.restarts, 1);
        assert_eq!(previous.requeued_for, Some(RestartCause::OverQuota));
        assert_eq!(previous.peak, Some(ByteSize::from_bytes(52 * G)));
    }

    #[test]
    fn a_run_requeued_to_heal_a_near_oom_failure() {
        let mut entry = record::Entry::new("node1", 0, ByteSize::from_bytes(16 * G));
        entry.observe_gpu(0, None, 15 * G);
        entry.count_event(EventKind::Oom, 10);
        entry.count_event(EventKind::Requeued, 10);
        let comment = record::merge("", &entry).admin_comment;
        let previous = previous_run(&comment).unwrap();
        assert_eq!(previous.restarts, 1);
        assert_eq!(previous.requeued_for, Some(RestartCause::NearOom));
        assert_eq!(previous.peak, Some(ByteSize::from_bytes(15 * G)));
    }

    #[test]
    fn an_over_quota_requeue_after_an_earlier_heal_is_over_quota() {
        let mut first = record::Entry::new("node1", 0, ByteSize::from_bytes(16 * G));
        first.observe_gpu(0, None, 15 * G);
        first.count_event(EventKind::Oom, 10);
        first.count_event(EventKind::Requeued, 10);
        let comment = record::merge("", &first).admin_comment;
        let mut second = record::Entry::new("node1", 1, ByteSize::from_bytes(16 * G));
        second.observe_gpu(0, None, 20 * G);
        second.count_event(EventKind::OverQuota, 20);
        second.count_event(EventKind::Requeued, 20);
        let comment = record::merge(&comment, &second).admin_comment;
        let previous = previous_run(&comment).unwrap();
        assert_eq!(previous.restarts, 2);
        assert_eq!(previous.requeued_for, Some(RestartCause::OverQuota));
    }

    #[test]
    fn no_record_no_previous_run() {
        assert_eq!(previous_run(""), None);
        assert_eq!(previous_run("someone else's words"), None);
    }
}
