//! The text of a segment: `gpu-mem-quota:v1{ITEM;ITEM;...}`. Grammar in docs/ACCOUNTING.md.
//!
//! The alphabet is chosen so that no layer between us and a reader changes the text: no whitespace
//! or `|` (sacct --parsable2 separates fields with `|`, `scontrol show -o` tokens with spaces), no
//! quotes or backslashes (slurmdbd escapes them for SQL), no braces inside. Names that need other
//! characters are percent-encoded.

use std::fmt::Write as _;

use super::atoms::{decode, encode, is_unreserved, number};
use super::error::bad_item;
use super::ledger;
use super::locate::segments;
use super::{
    Entry, EventCounts, EventKind, Facts, Folded, GpuPeak, GpuPeaks, LastEvent, Record, RecordError,
    FORMAT_VERSION, MARKER,
};
use crate::size::{parse_size, ByteSize, MAX_SIZE};

/// Reads our record from a whole AdminComment. `Ok(None)` when no segment of ours is there.
/// Several segments of this version (left by an interrupted writer or pasted by hand) are
/// reconciled into one record, as [`super::merge()`] would.
pub fn parse(admin_comment: &str) -> Result<Option<Record>, RecordError> {
    let mut record: Option<Record> = None;
    let mut other_version = None;
    for segment in segments(admin_comment) {
        if segment.version != FORMAT_VERSION {
            other_version = other_version.or(Some(segment.version));
            continue;
        }
        let (body, offset) = segment.body?;
        let found = parse_body(body, offset)?;
        match &mut record {
            Some(r) => r.join(&found),
            None => record = Some(found),
        }
    }
    match (record, other_version) {
        (Some(r), _) => Ok(Some(r)),
        (None, Some(v)) if v > FORMAT_VERSION => Err(RecordError::NewerVersion(v)),
        (None, Some(v)) => Err(RecordError::OlderVersion(v)),
        (None, None) => Ok(None),
    }
}

/// Renders a record in its canonical form, whatever its length.
pub(super) fn render_unbounded(record: &Record) -> String {
    let mut out = format!("{MARKER}{FORMAT_VERSION}{{");
    // Entries are kept in canonical order by Record::insert, so equal records render equally.
    let mut items = record.entries.iter().map(render_entry).collect::<Vec<_>>();
    if let Some(folded) = &record.folded {
        items.push(render_folded(folded));
    }
    out.push_str(&items.join(";"));
    out.push('}');
    out
}

fn render_entry(entry: &Entry) -> String {
    let mut out = format!(
        "{}/{}:q={}",
        encode(&entry.node),
        entry.run,
        size_text(entry.quota.bytes())
    );
    match &entry.peaks {
        GpuPeaks::Each(gpus) => {
            for gpu in gpus {
                let _ = write!(out, ",g{}={}", gpu.index, size_text(gpu.peak));
                if let Some(id) = &gpu.id {
                    let _ = write!(out, "/{}", encode(id));
                }
            }
        }
        GpuPeaks::Max(peak) => {
            let _ = write!(out, ",pk={}", size_text(*peak));
        }
    }
    render_facts(&mut out, &entry.facts);
    out
}

fn render_folded(folded: &Folded) -> String {
    let mut out = format!("*:n={},pk={}", folded.entries, size_text(folded.peak));
    render_facts(&mut out, &folded.facts);
    for field in ledger::render(&folded.listed) {
        out.push(',');
        out.push_str(&field);
    }
    out
}

/// Zero counters and unknown times are left out: they are the defaults when reading.
fn render_facts(out: &mut String, facts: &Facts) {
    if facts.over_warn_secs > 0 {
        let _ = write!(out, ",ws={}", facts.over_warn_secs);
    }
    for (kind, count) in facts.events.iter() {
        if count > 0 {
            let _ = write!(out, ",{kind}={count}");
        }
    }
    if facts.restarts > 0 {
        let _ = write!(out, ",restarts={}", facts.restarts);
    }
    if let Some(last) = facts.last_event {
        let _ = write!(out, ",last={}@{}", last.kind, last.at);
    }
    if facts.updated_at > 0 {
        let _ = write!(out, ",t={}", facts.updated_at);
    }
}

/// Sizes in Slurm's syntax (`40G`, `1536M`), rounded up to a whole KiB, at most [`MAX_SIZE`].
/// Zero is written `0` (Slurm's syntax has no zero).
fn size_text(bytes: u64) -> String {
    if bytes == 0 {
        return "0".into();
    }
    let kib = bytes.min(MAX_SIZE.bytes()).div_ceil(1024) * 1024;
    ByteSize::from_bytes(kib).to_string()
}

fn parse_size_text(text: &str) -> Option<u64> {
    if text == "0" {
        return Some(0);
    }
    // A bare number would mean MiB in Slurm's syntax; we never write one, so refuse it.
    if text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    parse_size(text).ok().map(ByteSize::bytes)
}

/// The only other characters a body contains: the grammar's punctuation.
fn is_punctuation(b: u8) -> bool {
    matches!(b, b';' | b':' | b',' | b'=' | b'/' | b'@' | b'*' | b'%')
}

/// Parses the text between the braces; `offset` is where it starts in the AdminComment.
pub(super) fn parse_body(body: &str, offset: usize) -> Result<Record, RecordError> {
    if let Some((at, found)) = body
        .char_indices()
        .find(|&(_, c)| !(c.is_ascii() && (is_unreserved(c as u8) || is_punctuation(c as u8))))
    {
        return Err(RecordError::BadCharacter {
            at: offset + at,
            found,
        });
    }
    let mut record = Record::default();
    if body.is_empty() {
        return Ok(record);
    }
    for item in body.split(';') {
        let Some((head, fields)) = item.split_once(':') else {
            return Err(bad_item(item, "expected NODE/RUN: or *: before the fields"));
        };
        let fields = Fields::split(item, fields)?;
        if head == "*" {
            let folded = parse_folded(item, &fields)?;
            match &mut record.folded {
                Some(f) => f.join(&folded),
                None => record.folded = Some(folded),
            }
        } else {
            record.insert(parse_entry(item, head, &fields)?);
        }
    }
    record.normalize();
    Ok(record)
}

/// The `key=value` fields of one item, each key at most once.
struct Fields<'a>(Vec<(&'a str, &'a str)>);

impl<'a> Fields<'a> {
    fn split(item: &str, text: &'a str) -> Result<Fields<'a>, RecordError> {
        let mut fields: Vec<(&str, &str)> = Vec::new();
        for field in text.split(',') {
            let Some((key, value)) = field.split_once('=') else {
                return Err(bad_item(item, "a field is not KEY=VALUE"));
            };
            if key.is_empty()
                || !key
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
            {
                return Err(bad_item(
                    item,
                    "a field name is not lowercase letters, digits and _",
                ));
            }
            if fields.iter().any(|(k, _)| *k == key) {
                return Err(bad_item(item, "a field appears twice"));
            }
            fields.push((key, value));
        }
        Ok(Fields(fields))
    }

    fn get(&self, key: &str) -> Option<&'a str> {
        self.0.iter().find(|(k, _)| *k == key).map(|(_, v)| *v)
    }
}

fn parse_entry(item: &str, head: &str, fields: &Fields) -> Result<Entry, RecordError> {
    let Some((node, run)) = head.split_once('/') else {
        return Err(bad_item(item, "expected NODE/RUN before ':'"));
    };
    let node = decode(node).ok_or_else(|| bad_item(item, "the node name is badly encoded"))?;
    let run = number(run).and_then(|n| u32::try_from(n).ok());
    let run = run.ok_or_else(|| bad_item(item, "the run is not a whole number"))?;
    let quota = fields
        .get("q")
        .ok_or_else(|| bad_item(item, "q= (the quota) is missing"))?;
    let quota = parse_size_text(quota).ok_or_else(|| bad_item(item, "q= is not a size"))?;

    let mut gpus = Vec::new();
    for (key, value) in &fields.0 {
        let Some(index) = key.strip_prefix('g') else {
            continue;
        };
        let index = number(index).and_then(|n| u32::try_from(n).ok());
        let index = index.ok_or_else(|| bad_item(item, "a GPU field is not gINDEX="))?;
        let (peak, id) = match value.split_once('/') {
            Some((peak, id)) => (
                peak,
                Some(decode(id).ok_or_else(|| bad_item(item, "a GPU id is badly encoded"))?),
            ),
            None => (*value, None),
        };
        let peak = parse_size_text(peak).ok_or_else(|| bad_item(item, "a GPU peak is not a size"))?;
        gpus.push(GpuPeak { index, id, peak });
    }
    gpus.sort_by_key(|g| g.index);
    // `g8=` and `g08=` are two keys for one GPU; each index is listed once.
    if gpus.windows(2).any(|pair| pair[0].index == pair[1].index) {
        return Err(bad_item(item, "a GPU index appears twice"));
    }
    let peaks = match fields.get("pk") {
        Some(_) if !gpus.is_empty() => {
            return Err(bad_item(item, "per-GPU peaks and pk= together"));
        }
        Some(pk) => GpuPeaks::Max(parse_size_text(pk).ok_or_else(|| bad_item(item, "pk= is not a size"))?),
        None => GpuPeaks::Each(gpus),
    };
    Ok(Entry {
        node,
        run,
        quota: ByteSize::from_bytes(quota),
        peaks,
        facts: parse_facts(item, fields)?,
    })
}

fn parse_folded(item: &str, fields: &Fields) -> Result<Folded, RecordError> {
    let entries = fields
        .get("n")
        .and_then(number)
        .and_then(|n| u32::try_from(n).ok());
    let entries = entries.ok_or_else(|| bad_item(item, "n= (entries folded) is missing or not a number"))?;
    let peak = fields.get("pk").map_or(Some(0), parse_size_text);
    let peak = peak.ok_or_else(|| bad_item(item, "pk= is not a size"))?;
    let mut listed = ledger::Ledger::new();
    for (key, value) in &fields.0 {
        ledger::parse_field(item, key, value, &mut listed)?;
    }
    Ok(Folded::read(entries, peak, parse_facts(item, fields)?, listed))
}

/// The fields entries and the folded summary share. Unknown fields are skipped: a later version
/// may add fields without changing the version number, as long as older readers may ignore them.
fn parse_facts(item: &str, fields: &Fields) -> Result<Facts, RecordError> {
    let count = |key: &str| -> Result<u64, RecordError> {
        fields
            .get(key)
            .map_or(Some(0), number)
            .ok_or_else(|| bad_item(item, "a counter is not a whole number"))
    };
    let small = |key: &str| -> Result<u32, RecordError> {
        u32::try_from(count(key)?).map_err(|_| bad_item(item, "a counter is too large"))
    };
    let mut events = EventCounts::default();
    for kind in EventKind::ALL {
        events.set(kind, small(kind.name())?);
    }
    let last_event = match fields.get("last") {
        None => None,
        Some(value) => {
            let (kind, at) = value
                .split_once('@')
                .ok_or_else(|| bad_item(item, "last= is not KIND@TIME"))?;
            let kind =
                EventKind::from_name(kind).ok_or_else(|| bad_item(item, "last= names an unknown event"))?;
            let at = number(at).ok_or_else(|| bad_item(item, "last= has a bad time"))?;
            Some(LastEvent { at, kind })
        }
    };
    Ok(Facts {
        over_warn_secs: count("ws")?,
        events,
        restarts: small("restarts")?,
        last_event,
        updated_at: count("t")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        let table: &[(u64, &str)] = &[
            (0, "0"),
            (1, "1K"),
            (1 << 20, "1M"),
            (30 << 30, "30G"),
            ((30 << 30) + (1 << 20), "30721M"),
            (u64::MAX, "1024T"),
        ];
        for &(bytes, text) in table {
            assert_eq!(size_text(bytes), text, "{bytes}");
        }
        assert_eq!(parse_size_text("30721M"), Some((30 << 30) + (1 << 20)));
        assert_eq!(parse_size_text("0"), Some(0));
        assert_eq!(parse_size_text("30"), None, "bare numbers are refused");
        assert_eq!(parse_size_text("-1G"), None);
    }
}
