//! The grammar's atoms, shared by the segment's text and the summary's ledger: names
//! percent-encoded, numbers in plain digits.

use std::fmt::Write as _;

/// Characters names keep as they are; all others are written `%XX`.
pub(super) fn is_unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-')
}

/// `name` with every character but [`is_unreserved`] ones written `%XX`.
pub(super) fn encode(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for b in name.bytes() {
        if is_unreserved(b) {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// The name [`encode`] wrote as `text`; `None` when `text` is not such a name.
pub(super) fn decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = bytes.get(i + 1..i + 3)?;
                if !hex.iter().all(u8::is_ascii_hexdigit) {
                    return None;
                }
                out.push(u8::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()?);
                i += 3;
            }
            b if is_unreserved(b) => {
                out.push(b);
                i += 1;
            }
            _ => return None,
        }
    }
    String::from_utf8(out).ok()
}

/// A whole number in plain decimal digits (no sign, no spaces), if it fits in a u64.
pub(super) fn number(text: &str) -> Option<u64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_survive_encoding() {
        for name in ["gpu01", "a.b-c_d", "", "odd name|x", "ü", "%", "a/b:c"] {
            let encoded = encode(name);
            assert!(
                encoded.bytes().all(|b| is_unreserved(b) || b == b'%'),
                "{encoded}"
            );
            assert_eq!(decode(&encoded).as_deref(), Some(name));
        }
        for bad in ["%", "%4", "%zz", "%+F", "a=b", "%FF"] {
            assert_eq!(decode(bad), None, "{bad}");
        }
    }

    #[test]
    fn numbers_are_plain_digits() {
        assert_eq!(number("42"), Some(42));
        for bad in ["", "+1", "-1", " 1", "1e3", "18446744073709551616"] {
            assert_eq!(number(bad), None, "{bad}");
        }
    }
}
