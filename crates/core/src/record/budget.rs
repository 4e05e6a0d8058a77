//! Keeping a record within [`MAX_RECORD_BYTES`].
//!
//! When the rendered segment is too long, one step at a time is taken until it fits, always on the
//! oldest entry that still allows the step (oldest = lowest run, then earliest update, then node
//! name; the entry being written is treated as the newest):
//! 1. drop the GPU ids of an entry;
//! 2. replace an entry's per-GPU peaks by its largest peak (`pk=`);
//! 3. fold an entry into the `*` summary, which keeps its counts and peak and lists its node and
//!    run with its counts (so that it is folded once, see the `ledger` module);
//! 4. stop listing folded entries, those of the oldest run first (their counts stay in the sums).
//!
//! Before any of these, a record of more than [`MAX_NODES_WITH_IDS`] nodes leaves every GPU id
//! out, the writer's own too: ids are worth their bytes in a small job's record only, and an entry
//! whose ids the bound dropped would otherwise get them back from its writer's next merge and
//! push another entry's out (review K4). A record's nodes only grow, so this stays so.
//!
//! Every step is idempotent and every writer takes the same steps on the same record, so writers
//! that saw the same record produce the same text, and a record that fits is left as it is.

/// The most nodes a record may name and still keep its GPU ids.
pub const MAX_NODES_WITH_IDS: usize = 4;

use super::text::render_unbounded;
use super::{Entry, Folded, GpuPeaks, Record, MAX_RECORD_BYTES};

/// Renders a record as a segment of at most [`super::MAX_RECORD_BYTES`], dropping detail and folding
/// the oldest entries when needed (see docs/ACCOUNTING.md, "Size bound").
pub fn render(record: &Record) -> String {
    let mut fitted = record.clone();
    fit(&mut fitted, None);
    render_unbounded(&fitted)
}

/// Shrinks `record` until it renders within the bound. `newest` names the (run, node) entry being
/// written, which is folded only if it alone cannot fit.
pub(super) fn fit(record: &mut Record, newest: Option<(u32, &str)>) {
    ids_only_for_a_few_nodes(record);
    while render_unbounded(record).len() > MAX_RECORD_BYTES {
        let order = oldest_first(record, newest);
        let is_newest = |at: usize| Some(record.entries[at].key()) == newest;
        if let Some(&at) = order.iter().find(|&&at| has_ids(&record.entries[at])) {
            drop_ids(&mut record.entries[at]);
        } else if let Some(&at) = order
            .iter()
            .find(|&&at| matches!(record.entries[at].peaks, GpuPeaks::Each(_)))
        {
            let entry = &mut record.entries[at];
            entry.peaks = GpuPeaks::Max(entry.peak());
        } else if let Some(&at) = order.iter().find(|&&at| !is_newest(at)) {
            let entry = record.entries.remove(at);
            record.folded.get_or_insert_with(Folded::default).absorb(&entry);
        } else if record.folded.as_mut().is_some_and(Folded::unlist_one) {
            // The list of folded entries outgrew the bound: its oldest run goes first.
        } else if let Some(&at) = order.first() {
            // The writer's own entry alone does not fit: node names are cut to keep this
            // from happening.
            let entry = record.entries.remove(at);
            record.folded.get_or_insert_with(Folded::default).absorb(&entry);
        } else {
            // Only the summary is left, and it is far below the bound: numbers only. Never loop.
            break;
        }
    }
    // Entries no longer listed may count as more nodes: fitting a fitted record changes nothing.
    ids_only_for_a_few_nodes(record);
}

fn ids_only_for_a_few_nodes(record: &mut Record) {
    if record.node_count() > MAX_NODES_WITH_IDS {
        for entry in &mut record.entries {
            drop_ids(entry);
        }
    }
}

/// Indices of the entries, oldest first, `newest` last.
fn oldest_first(record: &Record, newest: Option<(u32, &str)>) -> Vec<usize> {
    let mut order: Vec<usize> = (0..record.entries.len()).collect();
    order.sort_by_key(|&at| {
        let e = &record.entries[at];
        (
            Some(e.key()) == newest,
            e.run,
            e.facts.updated_at,
            e.node.as_str(),
        )
    });
    order
}

fn has_ids(entry: &Entry) -> bool {
    matches!(&entry.peaks, GpuPeaks::Each(gpus) if gpus.iter().any(|g| g.id.is_some()))
}

fn drop_ids(entry: &mut Entry) {
    if let GpuPeaks::Each(gpus) = &mut entry.peaks {
        for gpu in gpus {
            gpu.id = None;
        }
    }
}
