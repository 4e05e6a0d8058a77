//! One node's watchdog writing its entry into an AdminComment that other tools share.
//!
//! Input: the first [`HEADER`] bytes describe the entry (through `arbitrary`), the rest is the
//! AdminComment as found. Whatever was found, the merged text:
//! - reads back as a record holding the writer's entry (never folded, never lost);
//! - keeps every word of other tools' text, in order;
//! - stays within the size bound, and holds the entry by `is_recorded`'s reading (what the
//!   record says, not its bytes), so that its writer has nothing more to write.
#![no_main]

use arbitrary::{Arbitrary, Unstructured};
use gmq_core::record::{self, is_recorded, merge, Entry, EventKind, MARKER, MAX_NODE_NAME_BYTES};
use gmq_core::size::{ByteSize, MAX_SIZE};
use libfuzzer_sys::fuzz_target;

/// Bytes of input that describe the entry; the AdminComment follows.
const HEADER: usize = 64;

#[derive(Arbitrary, Debug)]
struct Update {
    /// Take node and run from the entry at this position of the record already there (the usual
    /// case: the same watchdog writing again), when there is one.
    reuse: Option<u8>,
    node: String,
    run: u32,
    quota_kib: u32,
    gpus: Vec<(u8, Option<String>, u64)>,
    events: Vec<(u8, u64)>,
    restarts: u32,
    over_warn_secs: u64,
    updated_at: u64,
}

impl Update {
    fn entry(&self, existing: &str) -> Entry {
        let found = record::parse(existing).ok().flatten();
        let reused = match (self.reuse, &found) {
            (Some(at), Some(r)) if !r.entries().is_empty() => {
                let e = &r.entries()[usize::from(at) % r.entries().len()];
                Some((e.node.clone(), e.run))
            }
            _ => None,
        };
        let (node, run) = reused.unwrap_or_else(|| (self.node.clone(), self.run));
        // A quota as parse_size gives them: a whole number of KiB, at most MAX_SIZE.
        let kib = u64::from(self.quota_kib).min(MAX_SIZE.bytes() >> 10).max(1);
        let mut entry = Entry::new(&node, run, ByteSize::from_bytes(kib << 10));
        for (index, id, used) in &self.gpus {
            entry.observe_gpu(u32::from(*index), id.as_deref(), *used);
        }
        for &(kind, at) in &self.events {
            entry.count_event(EventKind::ALL[usize::from(kind) % EventKind::ALL.len()], at);
        }
        entry.facts.restarts = self.restarts;
        entry.facts.over_warn_secs = self.over_warn_secs;
        entry.facts.updated_at = self.updated_at;
        entry
    }
}

/// Words of other tools' text: those that do not even mention our marker.
fn foreign_words(text: &str) -> Vec<&str> {
    text.split_whitespace().filter(|w| !w.contains(MARKER)).collect()
}

fn is_subsequence(small: &[&str], big: &[&str]) -> bool {
    let mut big = big.iter();
    small.iter().all(|w| big.any(|b| b == w))
}

fuzz_target!(|data: &[u8]| {
    if data.len() < HEADER {
        return;
    }
    let (header, rest) = data.split_at(HEADER);
    let Ok(existing) = std::str::from_utf8(rest) else {
        return;
    };
    let Ok(update) = Update::arbitrary(&mut Unstructured::new(header)) else {
        return;
    };
    let entry = update.entry(existing);

    let merged = merge(existing, &entry).admin_comment;
    let found = record::parse(&merged)
        .unwrap_or_else(|e| panic!("merging into {existing:?} gave {merged:?}, which fails: {e}"))
        .unwrap_or_else(|| panic!("merging into {existing:?} gave {merged:?}, which has no record"));
    let mut node = entry.node.as_str();
    let mut end = node.len().min(MAX_NODE_NAME_BYTES);
    while !node.is_char_boundary(end) {
        end -= 1;
    }
    node = &node[..end];
    let ours = found.entry(node, entry.run).unwrap_or_else(|| {
        panic!(
            "merging into {existing:?} gave {merged:?}, without {node:?}/{}",
            entry.run
        )
    });
    assert!(ours.peak() >= entry.peak().min(MAX_SIZE.bytes()), "{merged:?}");
    assert!(ours.facts.updated_at >= entry.facts.updated_at, "{merged:?}");

    assert!(
        is_subsequence(&foreign_words(existing), &foreign_words(&merged)),
        "merging into {existing:?} gave {merged:?}: other text changed"
    );
    assert!(
        merged.len() <= existing.len() + record::MAX_RECORD_BYTES + 1,
        "{merged:?}"
    );
    assert!(
        is_recorded(&merged, &entry),
        "{merged:?} does not hold the entry merged into it"
    );
});
