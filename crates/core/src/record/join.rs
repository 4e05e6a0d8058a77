//! Reconciling two reports of the same facts: every field takes the larger value.
//!
//! Each (node, run) entry has one writer, whose counters only grow, so the larger value is the newer
//! one. Taking the maximum is commutative, associative and idempotent: merging the same update twice,
//! or two writers' views in either order, gives the same record.

use super::{Entry, Facts, Folded, GpuPeak, GpuPeaks, Record};

impl Facts {
    pub(super) fn join(&mut self, other: &Facts) {
        self.over_warn_secs = self.over_warn_secs.max(other.over_warn_secs);
        self.events = self.events.max(&other.events);
        self.restarts = self.restarts.max(other.restarts);
        self.last_event = self.last_event.max(other.last_event);
        self.updated_at = self.updated_at.max(other.updated_at);
    }

    /// Adds the counters of another node or run (folding, not reconciling).
    fn accumulate(&mut self, other: &Facts) {
        self.over_warn_secs = self.over_warn_secs.saturating_add(other.over_warn_secs);
        self.events = self.events.sum(&other.events);
        self.restarts = self.restarts.saturating_add(other.restarts);
        self.last_event = self.last_event.max(other.last_event);
        self.updated_at = self.updated_at.max(other.updated_at);
    }
}

impl GpuPeaks {
    fn join(&mut self, other: &GpuPeaks) {
        match (&mut *self, other) {
            (GpuPeaks::Each(mine), GpuPeaks::Each(theirs)) => {
                for gpu in theirs {
                    join_gpu(mine, gpu);
                }
            }
            // Detail once dropped stays dropped: the entry keeps its place in the size budget.
            _ => *self = GpuPeaks::Max(self.highest().max(other.highest())),
        }
    }
}

fn join_gpu(gpus: &mut Vec<GpuPeak>, gpu: &GpuPeak) {
    match gpus.binary_search_by_key(&gpu.index, |g| g.index) {
        Ok(at) => {
            let mine = &mut gpus[at];
            mine.peak = mine.peak.max(gpu.peak);
            // Two different ids for one index cannot come from one writer; pick one deterministically.
            mine.id = mine.id.take().max(gpu.id.clone());
        }
        Err(at) => gpus.insert(at, gpu.clone()),
    }
}

impl Entry {
    /// Reconciles two reports of the same (node, run).
    pub(super) fn join(&mut self, other: &Entry) {
        debug_assert_eq!(self.key(), other.key());
        self.quota = self.quota.max(other.quota);
        self.peaks.join(&other.peaks);
        self.facts.join(&other.facts);
    }
}

impl Folded {
    /// Reconciles two writers' summaries. Exact when they folded the same entries, which they do
    /// when they saw the same record (folding is deterministic); see docs/ACCOUNTING.md.
    pub(super) fn join(&mut self, other: &Folded) {
        self.entries = self.entries.max(other.entries);
        self.peak = self.peak.max(other.peak);
        self.facts.join(&other.facts);
    }

    /// Adds one entry's counts to the summary.
    pub fn absorb(&mut self, entry: &Entry) {
        self.entries = self.entries.saturating_add(1);
        self.peak = self.peak.max(entry.peak());
        self.facts.accumulate(&entry.facts);
    }
}

impl Record {
    /// Reconciles another view of the same job's record into this one.
    pub(super) fn join(&mut self, other: &Record) {
        for entry in &other.entries {
            self.insert(entry.clone());
        }
        match (&mut self.folded, &other.folded) {
            (Some(mine), Some(theirs)) => mine.join(theirs),
            (None, Some(theirs)) => self.folded = Some(*theirs),
            (_, None) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::EventKind;
    use crate::size::ByteSize;

    fn entry(peaks: GpuPeaks, warns: u32, at: u64) -> Entry {
        let mut e = Entry::new("n1", 0, ByteSize::from_bytes(1 << 30));
        e.peaks = peaks;
        e.facts.events.set(EventKind::Warn, warns);
        e.facts.updated_at = at;
        e
    }

    fn gpu(index: u32, id: Option<&str>, peak: u64) -> GpuPeak {
        GpuPeak {
            index,
            id: id.map(str::to_string),
            peak,
        }
    }

    #[test]
    fn join_is_commutative_and_idempotent() {
        let a = entry(
            GpuPeaks::Each(vec![gpu(0, Some("aa"), 5), gpu(2, None, 7)]),
            3,
            10,
        );
        let b = entry(
            GpuPeaks::Each(vec![gpu(0, None, 9), gpu(1, Some("bb"), 1)]),
            1,
            20,
        );
        let mut ab = a.clone();
        ab.join(&b);
        let mut ba = b.clone();
        ba.join(&a);
        assert_eq!(ab, ba);
        let mut abb = ab.clone();
        abb.join(&b);
        assert_eq!(abb, ab);
        assert_eq!(
            ab.peaks,
            GpuPeaks::Each(vec![
                gpu(0, Some("aa"), 9),
                gpu(1, Some("bb"), 1),
                gpu(2, None, 7)
            ])
        );
        assert_eq!(ab.facts.events.get(EventKind::Warn), 3);
        assert_eq!(ab.facts.updated_at, 20);
    }

    #[test]
    fn collapsed_peaks_absorb_detail() {
        let mut a = entry(GpuPeaks::Max(4), 0, 0);
        a.join(&entry(GpuPeaks::Each(vec![gpu(0, Some("aa"), 6)]), 0, 0));
        assert_eq!(a.peaks, GpuPeaks::Max(6));
        let mut b = entry(GpuPeaks::Each(vec![gpu(0, Some("aa"), 3)]), 0, 0);
        b.join(&entry(GpuPeaks::Max(2), 0, 0));
        assert_eq!(b.peaks, GpuPeaks::Max(3));
    }

    #[test]
    fn folding_sums_counts() {
        let mut f = Folded::default();
        f.absorb(&entry(GpuPeaks::Max(4), 2, 5));
        f.absorb(&entry(GpuPeaks::Max(9), 3, 1));
        assert_eq!(f.entries, 2);
        assert_eq!(f.peak, 9);
        assert_eq!(f.facts.events.get(EventKind::Warn), 5);
        assert_eq!(f.facts.updated_at, 5);
    }
}
