//! Writing our facts into an AdminComment that other tools and other nodes share.

use std::ops::Range;

use super::budget::fit;
use super::locate::segments;
use super::text::{parse_body, render_unbounded};
use super::{Entry, Record, RecordError, FORMAT_VERSION, MAX_NODE_NAME_BYTES};

/// The AdminComment to write back, and what was thrown away to produce it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Merged {
    pub admin_comment: String,
    /// A segment of ours that could not be read (broken, or an older version) and was replaced.
    /// Worth a log line: its facts are lost.
    pub replaced: Option<RecordError>,
}

/// Merges one node's entry for one run into an AdminComment.
///
/// - Text that is not ours stays byte for byte where it was; so do segments of newer versions.
/// - Our segment keeps its place; an entry of the same node and run is reconciled field by field
///   (the larger value wins), every other entry is kept. The writer's entry, should the summary
///   list it as folded, is taken out of the summary (its counts with it) and written as an entry:
///   no entry is counted twice, and the writer's is never left folded. A writer asks
///   [`is_recorded`] first, and writes nothing when its entry is held already, folded or not.
/// - Several segments of ours become one, at the first one's place.
/// - With no segment of ours, the record is appended after a space.
/// - The segment stays within [`super::MAX_RECORD_BYTES`] (see the `budget` module).
pub fn merge(existing: &str, update: &Entry) -> Merged {
    let mut record = Record::default();
    let mut replaced = None;
    let mut ours: Vec<Range<usize>> = Vec::new();
    for segment in segments(existing) {
        if segment.version > FORMAT_VERSION {
            continue;
        }
        ours.push(segment.span);
        let read = if segment.version < FORMAT_VERSION {
            Err(RecordError::OlderVersion(segment.version))
        } else {
            segment.body.and_then(|(body, offset)| parse_body(body, offset))
        };
        match read {
            Ok(found) => record.join(&found),
            Err(e) => replaced = replaced.or(Some(e)),
        }
    }
    let mut update = update.clone();
    update.node = bounded_node_name(&update.node);
    if let Some(counts) = record
        .folded
        .as_mut()
        .and_then(|f| f.unfold(update.run, &update.node))
    {
        update.facts.join_counts(&counts);
        record.drop_empty_summary();
    }
    record.insert(update.clone());
    fit(&mut record, Some(update.key()));
    Merged {
        admin_comment: splice(existing, &ours, &render_unbounded(&record)),
        replaced,
    }
}

/// Whether `admin_comment` already holds everything `update` says ([`super::Record::holds`]): by
/// what our record in it means, not by its bytes, so that detail another writer dropped to fit
/// the size bound, or an entry it folded, never reads as missing (review K4). A writer reads the
/// AdminComment back after writing and retries while this is false; when it is true, the writer
/// has nothing to write. A segment of ours that cannot be read holds nothing.
pub fn is_recorded(admin_comment: &str, update: &Entry) -> bool {
    let mut update = update.clone();
    update.node = bounded_node_name(&update.node);
    match super::parse(admin_comment) {
        Ok(Some(record)) => record.holds(&update),
        _ => false,
    }
}

/// Node names longer than [`MAX_NODE_NAME_BYTES`] are cut (at a character boundary). Slurm's
/// own names are far shorter; the cut guarantees that the writer's entry always fits the bound, so
/// it is never folded, and merging the same update twice changes nothing.
fn bounded_node_name(node: &str) -> String {
    let mut end = node.len().min(MAX_NODE_NAME_BYTES);
    while !node.is_char_boundary(end) {
        end -= 1;
    }
    node[..end].to_string()
}

/// Puts `segment` in place of the first span, removes the other spans, and appends it when there
/// is no span. A removed span that stood alone as a word takes one space that separated it with
/// it; one glued to text on both sides leaves a space, so that the text around it neither fuses
/// into one word nor forms a new marker.
fn splice(text: &str, spans: &[Range<usize>], segment: &str) -> String {
    let Some(first) = spans.first() else {
        let separator = if text.is_empty() || text.ends_with(char::is_whitespace) {
            ""
        } else {
            " "
        };
        return format!("{text}{separator}{segment}");
    };
    let mut out = String::with_capacity(text.len() + segment.len());
    out.push_str(&text[..first.start]);
    out.push_str(segment);
    let mut pos = first.end;
    for span in &spans[1..] {
        out.push_str(&text[pos..span.start]);
        pos = span.end;
        let space_before = out.ends_with(char::is_whitespace);
        let space_after = pos == text.len() || text[pos..].starts_with(char::is_whitespace);
        match (space_before, space_after) {
            (true, true) if out.ends_with(' ') => {
                out.pop();
            }
            (true, true) if text[pos..].starts_with(' ') => pos += 1,
            // `gpu-mem-quota` SPAN `:v1{` must not become a segment.
            (false, false) => out.push(' '),
            // Glued on one side only: the space on the other side keeps the words apart.
            _ => {}
        }
    }
    out.push_str(&text[pos..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[allow(clippy::single_range_in_vec_init)] // one span is a case, not a range to expand
    fn splice_places_and_removes() {
        let table: &[(&str, &[Range<usize>], &str)] = &[
            ("", &[], "S"),
            ("foo", &[], "foo S"),
            ("foo ", &[], "foo S"),
            ("a XX b", &[2..4], "a S b"),
            ("a XX b YY c", &[2..4, 7..9], "a S b c"),
            ("XX YY c", &[0..2, 3..5], "S c"),
            ("XXYY", &[0..2, 2..4], "S"),
            // Found by fuzzing: a span glued to the word before it kept that word apart from the
            // next one only through the space after it.
            ("XX a YY b", &[0..2, 5..7], "S a b"),
            ("XX aYY b", &[0..2, 4..6], "S a b"),
            ("XX a YYb", &[0..2, 5..7], "S a b"),
            ("XX aYYb", &[0..2, 4..6], "S a b"),
            ("XX gpu-mem-quotaYY:v1{", &[0..2, 16..18], "S gpu-mem-quota :v1{"),
        ];
        for (text, spans, want) in table {
            assert_eq!(splice(text, spans, "S"), *want, "{text:?}");
        }
    }
}
