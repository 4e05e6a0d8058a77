//! What the watchdog can do or see happen to a job, and how often it did.
//!
//! The names are stable: they appear in the AdminComment record, in the `kind` label of the
//! Prometheus event counter and in reports, and must not change without a format version bump.

use std::fmt;

/// One kind of event in a job's life under a GPU-memory quota.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum EventKind {
    /// Usage crossed the warn threshold.
    Warn,
    /// Usage stayed over the quota for longer than the grace period.
    OverQuota,
    /// The job was chosen as the victim on a contended GPU.
    Preempted,
    /// The job's batch script failed (non-zero exit) after its run peaked near its quota or the
    /// GPU's memory: requeued for self-healing (`watchdog::heal`). Declared before `Requeued` so that
    /// of the two, counted in the same second, `Requeued` is the last event.
    Oom,
    /// We requeued the job (`scontrol requeue`).
    Requeued,
    /// We cancelled the job (`scancel`).
    Cancelled,
    /// We requeued the job held (`scontrol requeuehold`).
    Held,
    /// The node's slurmd died while the run went on, and slurmctld requeued or ended the run for
    /// it (Slurm's NODE_FAIL): counted by that node's watchdog, which stopped without acting and
    /// ended what the run had left running there.
    NodeFail,
}

impl EventKind {
    /// Every kind, in the order records and metrics list them.
    pub const ALL: [EventKind; 8] = [
        EventKind::Warn,
        EventKind::OverQuota,
        EventKind::Preempted,
        EventKind::Requeued,
        EventKind::Cancelled,
        EventKind::Held,
        EventKind::Oom,
        EventKind::NodeFail,
    ];

    /// The stable name: lowercase, `[a-z_]` only.
    pub const fn name(self) -> &'static str {
        match self {
            EventKind::Warn => "warn",
            EventKind::OverQuota => "over_quota",
            EventKind::Preempted => "preempted",
            EventKind::Requeued => "requeued",
            EventKind::Cancelled => "cancelled",
            EventKind::Held => "held",
            EventKind::Oom => "oom",
            EventKind::NodeFail => "node_fail",
        }
    }

    pub(crate) fn from_name(name: &str) -> Option<EventKind> {
        EventKind::ALL.into_iter().find(|kind| kind.name() == name)
    }

    const fn slot(self) -> usize {
        self as usize
    }
}

impl fmt::Display for EventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How many times each kind of event happened. Counts saturate instead of wrapping.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EventCounts {
    counts: [u32; EventKind::ALL.len()],
}

impl EventCounts {
    pub fn get(&self, kind: EventKind) -> u32 {
        self.counts[kind.slot()]
    }

    pub fn set(&mut self, kind: EventKind, count: u32) {
        self.counts[kind.slot()] = count;
    }

    pub fn add(&mut self, kind: EventKind, count: u32) {
        let slot = &mut self.counts[kind.slot()];
        *slot = slot.saturating_add(count);
    }

    /// Every kind with its count, zeros included, in [`EventKind::ALL`] order.
    pub fn iter(&self) -> impl Iterator<Item = (EventKind, u32)> + '_ {
        EventKind::ALL.into_iter().map(|kind| (kind, self.get(kind)))
    }

    /// The larger count of each kind: how two reports of the same counters are reconciled.
    pub(crate) fn max(&self, other: &EventCounts) -> EventCounts {
        let mut out = *self;
        for (kind, count) in other.iter() {
            out.set(kind, out.get(kind).max(count));
        }
        out
    }

    /// The sum of each kind: how counters of different nodes or runs are totalled.
    pub fn sum(&self, other: &EventCounts) -> EventCounts {
        let mut out = *self;
        for (kind, count) in other.iter() {
            out.add(kind, count);
        }
        out
    }
}

/// The most recent event: its kind and when it happened (Unix seconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct LastEvent {
    // Field order matters: the derived `Ord` compares time first, so `max` picks the later event.
    pub at: u64,
    pub kind: EventKind,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_are_label_safe() {
        for kind in EventKind::ALL {
            assert_eq!(EventKind::from_name(kind.name()), Some(kind));
            assert!(kind.name().bytes().all(|b| b.is_ascii_lowercase() || b == b'_'));
        }
        assert_eq!(EventKind::from_name("Warn"), None);
    }

    #[test]
    fn a_requeue_counted_with_its_cause_in_one_second_is_the_last_event() {
        let at = |kind| LastEvent { at: 5, kind };
        for cause in [EventKind::OverQuota, EventKind::Preempted, EventKind::Oom] {
            assert_eq!(at(cause).max(at(EventKind::Requeued)).kind, EventKind::Requeued);
        }
    }

    #[test]
    fn counts_max_sum_saturate() {
        let mut a = EventCounts::default();
        a.add(EventKind::Warn, 2);
        a.add(EventKind::Requeued, 1);
        let mut b = EventCounts::default();
        b.add(EventKind::Warn, 5);
        b.add(EventKind::Held, u32::MAX);
        assert_eq!(a.max(&b).get(EventKind::Warn), 5);
        assert_eq!(a.max(&b).get(EventKind::Requeued), 1);
        assert_eq!(a.sum(&b).get(EventKind::Warn), 7);
        assert_eq!(a.sum(&b).sum(&b).get(EventKind::Held), u32::MAX);
    }

    #[test]
    fn later_event_is_greater() {
        let early = LastEvent {
            at: 10,
            kind: EventKind::Requeued,
        };
        let late = LastEvent {
            at: 11,
            kind: EventKind::Warn,
        };
        assert_eq!(early.max(late), late);
    }
}
