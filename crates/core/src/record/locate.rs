//! Finding our segments inside an AdminComment that other tools share.
//!
//! A segment is `MARKER VERSION "{" body "}"`. Our bodies never contain whitespace, so a segment
//! whose `}` is missing ends at the next whitespace: a broken segment never swallows the text of
//! another tool that follows it.

use std::ops::Range;

use super::{RecordError, MARKER};

/// Bodies longer than this were not written by any version of this program.
const MAX_BODY_BYTES: usize = 16 * 1024;

/// One segment found in an AdminComment.
#[derive(Debug)]
pub(super) struct Segment<'a> {
    /// Where the segment lies in the AdminComment, marker to closing brace.
    pub(crate) span: Range<usize>,
    pub(crate) version: u32,
    /// The text between the braces, and its offset in the AdminComment.
    pub(crate) body: Result<(&'a str, usize), RecordError>,
}

/// Every segment of any version, in order. Text that merely mentions the marker without a version
/// and `{` is not a segment.
pub(super) fn segments(text: &str) -> Vec<Segment<'_>> {
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(rel) = text[from..].find(MARKER) {
        let start = from + rel;
        let after_marker = start + MARKER.len();
        from = after_marker;
        let digits = text[after_marker..]
            .bytes()
            .take_while(u8::is_ascii_digit)
            .count();
        let brace = after_marker + digits;
        if digits == 0 || digits > 9 || text.as_bytes().get(brace) != Some(&b'{') {
            continue;
        }
        let Ok(version) = text[after_marker..brace].parse::<u32>() else {
            continue;
        };
        let body_start = brace + 1;
        let rest = &text[body_start..];
        let (span, body) = match rest.find(|c: char| c == '}' || c.is_whitespace()) {
            Some(end) if rest[end..].starts_with('}') => {
                let body = if end > MAX_BODY_BYTES {
                    Err(RecordError::TooLong { bytes: end })
                } else {
                    Ok((&rest[..end], body_start))
                };
                (start..body_start + end + 1, body)
            }
            Some(end) => (
                start..body_start + end,
                Err(RecordError::Unterminated { at: start }),
            ),
            None => (start..text.len(), Err(RecordError::Unterminated { at: start })),
        };
        from = span.end;
        found.push(Segment { span, version, body });
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spans(text: &str) -> Vec<Found<'_>> {
        segments(text)
            .into_iter()
            .map(|s| (&text[s.span.clone()], s.version, s.body.is_ok()))
            .collect()
    }

    /// The segment's text, its version, and whether its body was readable.
    type Found<'a> = (&'a str, u32, bool);

    #[test]
    fn finds_segments_among_other_text() {
        let table: &[(&str, &[Found])] = &[
            ("", &[]),
            ("site note", &[]),
            ("gpu-mem-quota:v1{}", &[("gpu-mem-quota:v1{}", 1, true)]),
            (
                "a gpu-mem-quota:v1{x} b gpu-mem-quota:v2{y}",
                &[("gpu-mem-quota:v1{x}", 1, true), ("gpu-mem-quota:v2{y}", 2, true)],
            ),
            // Mentions without a version and brace are other people's prose.
            ("see gpu-mem-quota:v and gpu-mem-quota:vX{", &[]),
            // Unterminated: stops at whitespace, never eats the next tool's text.
            (
                "gpu-mem-quota:v1{q=1 other",
                &[("gpu-mem-quota:v1{q=1", 1, false)],
            ),
            ("x gpu-mem-quota:v1{q=1", &[("gpu-mem-quota:v1{q=1", 1, false)]),
            ("gpu-mem-quota:v1{a\nb}", &[("gpu-mem-quota:v1{a", 1, false)]),
            // Non-ASCII around or inside does not trip the byte arithmetic.
            ("é gpu-mem-quota:v1{é} ü", &[("gpu-mem-quota:v1{é}", 1, true)]),
            ("gpu-mem-quota:v99999999999{}", &[]),
        ];
        for (text, want) in table {
            assert_eq!(spans(text), *want, "{text:?}");
        }
    }

    #[test]
    fn bodies_have_a_length_limit() {
        let text = format!("gpu-mem-quota:v1{{{}}}", "x".repeat(MAX_BODY_BYTES + 1));
        let found = segments(&text);
        assert_eq!(found.len(), 1);
        assert!(matches!(found[0].body, Err(RecordError::TooLong { .. })));
    }
}
