//! Our record in a job's Slurm AdminComment: what the watchdog saw and did, kept where it survives a
//! requeue and where `sacct` shows it.
//!
//! The record is one whitespace-free segment, `gpu-mem-quota:v1{...}`, placed among whatever other
//! tools wrote to the same AdminComment. It holds one entry per node and run of the job (a "run" is
//! one start of the job: Slurm's restart count), so each node's watchdog owns exactly one entry and
//! concurrent writers never need to agree on a shared counter. Entries reconcile by taking the
//! maximum of each field, which makes merging order-free and repeatable. The rendered segment is at
//! most [`MAX_RECORD_BYTES`]; when it would be larger, detail goes first (GPU ids, then per-GPU peaks,
//! oldest runs first), then whole entries are folded into a `*` summary that keeps their counts.
//! The grammar, an example and the rules for concurrent writers are in docs/ACCOUNTING.md.
//!
//! Everything here is pure: the watchdog reads the AdminComment (`scontrol show job`), calls
//! [`merge()`], writes the result back (`scontrol update JobId=N AdminComment=...`, one argv word) and
//! checks the write with [`is_recorded`].

mod atoms;
mod budget;
mod error;
mod event;
mod join;
mod ledger;
mod locate;
mod merge;
mod text;

pub use budget::{render, MAX_NODES_WITH_IDS};
pub use error::RecordError;
pub use event::LastEvent;
pub use event::{EventCounts, EventKind};
pub(crate) use ledger::Counts;
pub use merge::{is_recorded, merge};
pub use text::parse;

use crate::size::ByteSize;

/// The version this code writes and reads. Older versions are replaced by [`merge()`]; newer ones
/// are left alone as if they were another tool's text.
const FORMAT_VERSION: u32 = 1;

/// What every segment starts with, followed by the version and `{`.
pub const MARKER: &str = "gpu-mem-quota:v";

/// The most bytes a rendered segment takes, marker and braces included.
pub const MAX_RECORD_BYTES: usize = 1024;

/// The longest node name a record keeps; [`merge()`] cuts longer ones (`HOST_NAME_MAX` is 64).
pub const MAX_NODE_NAME_BYTES: usize = 64;

const MIB: u64 = 1 << 20;

/// Everything our segment says about one job, across its nodes and runs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Record {
    /// One entry per (run, node), sorted by run then node: add with [`Record::insert`].
    entries: Vec<Entry>,
    /// Entries that were folded away to keep the record within its size bound.
    pub folded: Option<Folded>,
}

/// What one node's watchdog saw and did during one run of the job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The Slurm node name (`SLURMD_NODENAME`), at most [`MAX_NODE_NAME_BYTES`] once merged.
    pub node: String,
    /// Slurm's restart count for this run (`SLURM_RESTART_COUNT`, 0 for the first run).
    pub run: u32,
    /// The quota per GPU in force during the run.
    pub quota: ByteSize,
    pub peaks: GpuPeaks,
    pub facts: Facts,
}

/// The peak memory the job used on a node's GPUs, in as much detail as the size bound allows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GpuPeaks {
    /// One peak per GPU, sorted by index, each index once.
    Each(Vec<GpuPeak>),
    /// Only the largest peak over the node's GPUs (detail dropped to fit the size bound).
    Max(u64),
}

impl GpuPeaks {
    /// The largest peak (0 when no GPU was sampled yet).
    pub(crate) fn highest(&self) -> u64 {
        match self {
            GpuPeaks::Each(gpus) => gpus.iter().map(|g| g.peak).max().unwrap_or(0),
            GpuPeaks::Max(max) => *max,
        }
    }
}

/// The peak of one GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuPeak {
    /// The GPU's index as the job sees it (its position in `CUDA_VISIBLE_DEVICES`).
    pub index: u32,
    /// A short, stable id of the physical GPU ([`short_gpu_id`]); dropped first when space is short.
    pub id: Option<String>,
    /// Peak bytes used by the job's processes on this GPU.
    pub peak: u64,
}

/// Counters and times shared by entries and the folded summary.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Facts {
    /// Seconds during which usage was above the warn threshold.
    pub over_warn_secs: u64,
    pub events: EventCounts,
    /// Restarts of the job that we caused (successful requeues, held or not).
    pub restarts: u32,
    pub last_event: Option<LastEvent>,
    /// When the entry was last written (Unix seconds); orders entries from oldest to newest.
    pub updated_at: u64,
}

/// The sum of entries that no longer fit the size bound.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Folded {
    /// How many (node, run) entries were folded in.
    pub entries: u32,
    /// The largest peak among them.
    pub peak: u64,
    /// Their counters summed, the latest of their times.
    pub facts: Facts,
    /// Which of them are listed by (run, node), with the counts each brought (all of them, unless
    /// even the list did not fit): an entry is folded once ([`ledger`]).
    listed: ledger::Ledger,
}

/// The job-level view of a record, for reports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Totals {
    /// The quota of the latest run recorded.
    pub quota: Option<ByteSize>,
    /// The largest peak on any GPU of any node and run.
    pub peak: u64,
    pub events: EventCounts,
    pub restarts: u32,
    pub last_event: Option<LastEvent>,
    /// The highest run recorded.
    pub latest_run: Option<u32>,
}

impl Entry {
    /// A fresh entry for this node and run: no peaks, no events yet.
    pub fn new(node: &str, run: u32, quota: ByteSize) -> Entry {
        Entry {
            node: node.to_string(),
            run,
            quota,
            peaks: GpuPeaks::Each(Vec::new()),
            facts: Facts::default(),
        }
    }

    /// Raises the peak of one GPU to `used_bytes` if that is higher. Peaks are kept rounded up to
    /// a whole MiB, which keeps the record short and never under-reports.
    pub fn observe_gpu(&mut self, index: u32, id: Option<&str>, used_bytes: u64) {
        let peak = round_up_to_mib(used_bytes);
        match &mut self.peaks {
            GpuPeaks::Max(max) => *max = (*max).max(peak),
            GpuPeaks::Each(gpus) => match gpus.binary_search_by_key(&index, |g| g.index) {
                Ok(at) => {
                    let gpu = &mut gpus[at];
                    gpu.peak = gpu.peak.max(peak);
                    if gpu.id.is_none() {
                        gpu.id = id.map(str::to_string);
                    }
                }
                Err(at) => gpus.insert(
                    at,
                    GpuPeak {
                        index,
                        id: id.map(str::to_string),
                        peak,
                    },
                ),
            },
        }
    }

    /// Counts one event and makes it the last one.
    pub fn count_event(&mut self, kind: EventKind, at: u64) {
        self.facts.events.add(kind, 1);
        self.facts.last_event = self.facts.last_event.max(Some(LastEvent { at, kind }));
    }

    /// Whether this entry says at least what `other` (of the same node and run) says: a quota,
    /// peaks and counts as high, events as late. GPU ids are not looked at, and neither is
    /// per-GPU detail once this entry has only its largest peak.
    pub(crate) fn covers(&self, other: &Entry) -> bool {
        let peaks = match (&self.peaks, &other.peaks) {
            (GpuPeaks::Each(mine), GpuPeaks::Each(theirs)) => theirs.iter().all(|gpu| {
                mine.binary_search_by_key(&gpu.index, |g| g.index)
                    .is_ok_and(|at| mine[at].peak >= gpu.peak)
            }),
            _ => self.peak() >= other.peak(),
        };
        let (mine, theirs) = (&self.facts, &other.facts);
        self.quota >= other.quota
            && peaks
            && Counts::of(mine).covers(&Counts::of(theirs))
            && mine.last_event >= theirs.last_event
            && mine.updated_at >= theirs.updated_at
    }

    /// The largest peak over this entry's GPUs (0 before any sample).
    pub fn peak(&self) -> u64 {
        self.peaks.highest()
    }

    /// What identifies an entry: its run, then its node. Also the order entries are listed in.
    pub(crate) fn key(&self) -> (u32, &str) {
        (self.run, &self.node)
    }
}

impl Record {
    /// Adds an entry, reconciling it with an existing entry of the same node and run.
    pub fn insert(&mut self, entry: Entry) {
        match self.entries.binary_search_by(|e| e.key().cmp(&entry.key())) {
            Ok(at) => self.entries[at].join(&entry),
            Err(at) => self.entries.insert(at, entry),
        }
    }

    /// Every entry, by run then node.
    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// The entry of one node and run, if recorded.
    pub fn entry(&self, node: &str, run: u32) -> Option<&Entry> {
        self.entries.iter().find(|e| e.key() == (run, node))
    }

    /// Whether the record already says everything `update` says, in its entry of the same node
    /// and run (GPU ids and per-GPU detail dropped to fit do not count: see [`Entry::covers`]) or
    /// folded into the summary with counts as high. What a writer checks before and after it
    /// writes: the meaning, not the bytes, so that another writer's folding or dropping of
    /// detail never makes an entry look missing (review K4).
    pub(crate) fn holds(&self, update: &Entry) -> bool {
        if let Some(stored) = self.entry(&update.node, update.run) {
            return stored.covers(update);
        }
        let Some(folded) = &self.folded else {
            return false;
        };
        folded
            .listed
            .get(&(update.run, update.node.clone()))
            .is_some_and(|counts| {
                counts.covers(&Counts::of(&update.facts))
                    && folded.peak >= update.peak()
                    && folded.facts.last_event >= update.facts.last_event
                    && folded.facts.updated_at >= update.facts.updated_at
            })
    }

    /// How many nodes the record names or counts: every node of an entry or listed in the
    /// summary, and every entry folded without being listed.
    pub fn node_count(&self) -> usize {
        let mut nodes: std::collections::BTreeSet<&str> =
            self.entries.iter().map(|e| e.node.as_str()).collect();
        let mut unlisted = 0;
        if let Some(folded) = &self.folded {
            nodes.extend(folded.listed.keys().map(|(_, node)| node.as_str()));
            unlisted = (folded.entries as usize).saturating_sub(folded.listed.len());
        }
        nodes.len() + unlisted
    }

    /// One node-run counted once: an entry that is also listed in the summary (two writers'
    /// views joined, a hand edit) is taken out of the summary, its counts joined into the entry.
    pub(super) fn normalize(&mut self) {
        let Some(folded) = &mut self.folded else {
            return;
        };
        let mut unfolded = false;
        for entry in &mut self.entries {
            if let Some(counts) = folded.unfold(entry.run, &entry.node) {
                entry.facts.join_counts(&counts);
                unfolded = true;
            }
        }
        if unfolded {
            self.drop_empty_summary();
        }
    }

    /// Every folded entry taken back out: the summary goes (its peak and times are the entries').
    pub(super) fn drop_empty_summary(&mut self) {
        if self
            .folded
            .as_ref()
            .is_some_and(|f| f.entries == 0 && Counts::of(&f.facts) == Counts::default())
        {
            self.folded = None;
        }
    }

    /// Sums over every entry and the folded summary.
    pub fn totals(&self) -> Totals {
        let mut totals = Totals::default();
        for e in &self.entries {
            totals.peak = totals.peak.max(e.peak());
            totals.events = totals.events.sum(&e.facts.events);
            totals.restarts = totals.restarts.saturating_add(e.facts.restarts);
            totals.last_event = totals.last_event.max(e.facts.last_event);
            match totals.latest_run {
                Some(run) if e.run < run => {}
                Some(run) if e.run == run => totals.quota = totals.quota.max(Some(e.quota)),
                _ => {
                    totals.latest_run = Some(e.run);
                    totals.quota = Some(e.quota);
                }
            }
        }
        if let Some(f) = &self.folded {
            totals.peak = totals.peak.max(f.peak);
            totals.events = totals.events.sum(&f.facts.events);
            totals.restarts = totals.restarts.saturating_add(f.facts.restarts);
            totals.last_event = totals.last_event.max(f.facts.last_event);
        }
        totals
    }
}

/// A short id for a GPU from its NVML UUID: the first 8 hex digits after the `GPU-` or `MIG-`
/// prefix (`GPU-1a2b3c4d-...` → `1a2b3c4d`). Enough to tell a node's GPUs apart in a record.
pub(crate) fn short_gpu_id(uuid: &str) -> String {
    let rest = uuid
        .strip_prefix("GPU-")
        .or_else(|| uuid.strip_prefix("MIG-"))
        .unwrap_or(uuid);
    rest.chars().filter(char::is_ascii_hexdigit).take(8).collect()
}

fn round_up_to_mib(bytes: u64) -> u64 {
    bytes.div_ceil(MIB).saturating_mul(MIB)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::size::parse_size;

    fn gib(n: u64) -> u64 {
        n << 30
    }

    #[test]
    fn observe_keeps_the_highest_peak_per_gpu_rounded_up() {
        let mut e = Entry::new("gpu01", 0, parse_size("40G").unwrap());
        e.observe_gpu(1, Some("bbbb"), gib(2));
        e.observe_gpu(0, Some("aaaa"), gib(30));
        e.observe_gpu(0, None, gib(10));
        e.observe_gpu(1, None, gib(3) + 1);
        assert_eq!(
            e.peaks,
            GpuPeaks::Each(vec![
                GpuPeak {
                    index: 0,
                    id: Some("aaaa".into()),
                    peak: gib(30)
                },
                GpuPeak {
                    index: 1,
                    id: Some("bbbb".into()),
                    peak: gib(3) + MIB
                },
            ])
        );
        assert_eq!(e.peak(), gib(30));
    }

    #[test]
    fn events_count_and_the_latest_is_last() {
        let mut e = Entry::new("gpu01", 0, parse_size("40G").unwrap());
        e.count_event(EventKind::Warn, 100);
        e.count_event(EventKind::Requeued, 200);
        e.count_event(EventKind::Warn, 150);
        assert_eq!(e.facts.events.get(EventKind::Warn), 2);
        assert_eq!(
            e.facts.last_event,
            Some(LastEvent {
                at: 200,
                kind: EventKind::Requeued
            })
        );
    }

    #[test]
    fn short_ids() {
        let table = [
            ("GPU-1a2b3c4d-0000-1111-2222-333344445555", "1a2b3c4d"),
            ("MIG-aabbccdd-0000-1111-2222-333344445555", "aabbccdd"),
            ("GPU-12", "12"),
            ("", ""),
        ];
        for (uuid, want) in table {
            assert_eq!(short_gpu_id(uuid), want, "{uuid}");
        }
    }

    #[test]
    fn totals_sum_counts_and_take_the_latest_quota() {
        let mut r = Record::default();
        let mut a = Entry::new("a", 0, parse_size("40G").unwrap());
        a.count_event(EventKind::Requeued, 10);
        a.facts.restarts = 1;
        a.observe_gpu(0, None, gib(50));
        let mut b = Entry::new("a", 1, parse_size("60G").unwrap());
        b.observe_gpu(0, None, gib(45));
        b.count_event(EventKind::Warn, 20);
        r.insert(b);
        r.insert(a);
        let t = r.totals();
        assert_eq!(t.quota, Some(parse_size("60G").unwrap()));
        assert_eq!(t.latest_run, Some(1));
        assert_eq!(t.peak, gib(50));
        assert_eq!(t.restarts, 1);
        assert_eq!(t.events.get(EventKind::Requeued), 1);
        assert_eq!(
            t.last_event,
            Some(LastEvent {
                at: 20,
                kind: EventKind::Warn
            })
        );
    }
}
