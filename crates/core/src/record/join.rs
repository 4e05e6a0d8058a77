//! Reconciling two reports of the same facts: every field takes the larger value.
//!
//! Each (node, run) entry has one writer, whose counters only grow, so the larger value is the newer
//! one. Taking the maximum is commutative, associative and idempotent: merging the same update twice,
//! or two writers' views in either order, gives the same record.

use super::ledger::{Counts, Ledger};
use super::{Entry, Facts, Folded, GpuPeak, GpuPeaks, Record};

impl Facts {
    pub(super) fn join(&mut self, other: &Facts) {
        self.over_warn_secs = self.over_warn_secs.max(other.over_warn_secs);
        self.events = self.events.max(&other.events);
        self.restarts = self.restarts.max(other.restarts);
        self.last_event = self.last_event.max(other.last_event);
        self.updated_at = self.updated_at.max(other.updated_at);
    }

    /// Reconciles the counters with another report of them (the larger wins).
    pub(super) fn join_counts(&mut self, counts: &Counts) {
        let joined = Counts::of(self).max(counts);
        self.events = joined.events;
        self.restarts = joined.restarts;
        self.over_warn_secs = joined.over_warn_secs;
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
    /// A summary as read: `listed` may not list every entry counted, and never counts more than
    /// the sums say (a hand-edited text that does is read as if the sums were that high).
    pub(super) fn read(entries: u32, peak: u64, facts: Facts, listed: Ledger) -> Folded {
        let mut folded = Folded {
            entries,
            peak,
            facts,
            listed,
        };
        let (listed_entries, listed_counts) = folded.listed_sum();
        folded.entries = folded.entries.max(listed_entries);
        folded.facts.join_counts(&listed_counts);
        folded
    }

    /// How many entries are listed, and their counts summed.
    fn listed_sum(&self) -> (u32, Counts) {
        let mut sum = Facts::default();
        for counts in self.listed.values() {
            sum.add_counts(counts);
        }
        let entries = u32::try_from(self.listed.len()).unwrap_or(u32::MAX);
        (entries, Counts::of(&sum))
    }

    /// How many folded entries the summary does not list (their list outgrew the size bound, or
    /// a release that kept no list folded them): a writer of one of them cannot tell that it is
    /// counted, and one that writes again is counted again.
    pub fn unlisted_entries(&self) -> u32 {
        self.unlisted().0
    }

    /// What the summary counts beyond its list: entries folded by a writer whose list did not fit
    /// (or by a release that kept no list).
    fn unlisted(&self) -> (u32, Facts) {
        let (entries, counts) = self.listed_sum();
        let mut facts = self.facts;
        facts.sub_counts(&counts);
        (self.entries.saturating_sub(entries), facts)
    }

    /// Reconciles two writers' summaries (two segments of ours in one text): every listed entry
    /// once, with the larger of its counts; of what is not listed, the larger of the two. Exact
    /// when the lists hold every folded entry, which they do unless even the list outgrew the
    /// size bound; see docs/ACCOUNTING.md.
    pub(super) fn join(&mut self, other: &Folded) {
        let (mine_n, mine) = self.unlisted();
        let (theirs_n, theirs) = other.unlisted();
        for (key, counts) in &other.listed {
            let joined = self.listed.get(key).map_or(*counts, |c| c.max(counts));
            self.listed.insert(key.clone(), joined);
        }
        let mut facts = mine;
        facts.join(&theirs);
        let (listed_n, listed) = self.listed_sum();
        facts.add_counts(&listed);
        self.facts = facts;
        self.entries = mine_n.max(theirs_n).saturating_add(listed_n);
        self.peak = self.peak.max(other.peak);
        self.facts.last_event = self.facts.last_event.max(other.facts.last_event);
        self.facts.updated_at = self.facts.updated_at.max(other.facts.updated_at);
    }

    /// Folds one entry into the summary: its counts added and its (run, node) listed. Idempotent:
    /// an entry listed already is counted once, with the larger of its counts.
    pub fn absorb(&mut self, entry: &Entry) {
        let counts = Counts::of(&entry.facts);
        let counts = match self.unfold(entry.run, &entry.node) {
            Some(before) => before.max(&counts),
            None => counts,
        };
        self.entries = self.entries.saturating_add(1);
        self.peak = self.peak.max(entry.peak());
        self.facts.add_counts(&counts);
        self.facts.last_event = self.facts.last_event.max(entry.facts.last_event);
        self.facts.updated_at = self.facts.updated_at.max(entry.facts.updated_at);
        self.listed.insert((entry.run, entry.node.clone()), counts);
    }

    /// Takes a listed entry back out of the summary: its counts, which the summary no longer
    /// includes. The peak and times stay (they are maxima, the entry's own keeps them too).
    pub(super) fn unfold(&mut self, run: u32, node: &str) -> Option<Counts> {
        let counts = self.listed.remove(&(run, node.to_string()))?;
        self.entries = self.entries.saturating_sub(1);
        self.facts.sub_counts(&counts);
        Some(counts)
    }

    /// Stops listing one entry (its counts stay in the sums), to fit the size bound: of the
    /// oldest run first, whose writers are done. `false` when none is listed.
    pub(super) fn unlist_one(&mut self) -> bool {
        let Some(key) = self.listed.keys().next().cloned() else {
            return false;
        };
        let oldest_run = key.0;
        let last_of_run = self
            .listed
            .keys()
            .take_while(|(run, _)| *run == oldest_run)
            .last()
            .cloned()
            .unwrap_or(key);
        self.listed.remove(&last_of_run);
        true
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
            (None, Some(theirs)) => self.folded = Some(theirs.clone()),
            (_, None) => {}
        }
        self.normalize();
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
        let mut other = entry(GpuPeaks::Max(9), 3, 1);
        other.node = "n2".into();
        f.absorb(&other);
        assert_eq!(f.entries, 2);
        assert_eq!(f.peak, 9);
        assert_eq!(f.facts.events.get(EventKind::Warn), 5);
        assert_eq!(f.facts.updated_at, 5);
    }

    #[test]
    fn an_entry_is_folded_once() {
        // K4: a node folded, written again by its writer and folded again was summed again.
        let mut f = Folded::default();
        f.absorb(&entry(GpuPeaks::Max(4), 2, 5));
        let before = f.clone();
        f.absorb(&entry(GpuPeaks::Max(4), 2, 5));
        assert_eq!(f, before);
        // Folded again with more: counted once, with its larger counts.
        f.absorb(&entry(GpuPeaks::Max(6), 3, 6));
        assert_eq!(f.entries, 1);
        assert_eq!(f.facts.events.get(EventKind::Warn), 3);
        // Taken back out: the summary no longer counts it.
        let counts = f.unfold(0, "n1").unwrap();
        assert_eq!(counts.events.get(EventKind::Warn), 3);
        assert_eq!((f.entries, f.facts.events.get(EventKind::Warn)), (0, 0));
        assert_eq!(f.unfold(0, "n1"), None);
    }

    #[test]
    fn joined_summaries_count_each_listed_entry_once() {
        let mut other = entry(GpuPeaks::Max(9), 1, 1);
        other.node = "n2".into();
        let mut a = Folded::default();
        a.absorb(&entry(GpuPeaks::Max(4), 2, 5));
        let mut b = a.clone();
        b.absorb(&other);
        let mut ab = a.clone();
        ab.join(&b);
        let mut ba = b.clone();
        ba.join(&a);
        assert_eq!(ab, ba);
        assert_eq!(ab, b);
        assert_eq!(ab.facts.events.get(EventKind::Warn), 3);
    }
}
