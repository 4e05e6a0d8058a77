//! Why an AdminComment's record could not be read.

use std::fmt;

/// A record that is present but unreadable. The AdminComment is written only by root, but by more
/// than one tool and sometimes by hand, so anything can be there; reading it never panics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordError {
    /// The marker at this byte offset has no closing `}` before whitespace or the end of the text.
    Unterminated { at: usize },
    /// The segment is longer than any writer of this version produces.
    TooLong { bytes: usize },
    /// A version this code no longer reads; [`super::merge()`] replaces it.
    OlderVersion(u32),
    /// A version newer than this code; [`super::merge()`] leaves it alone.
    NewerVersion(u32),
    /// A character the format never contains, at this byte offset of the AdminComment.
    BadCharacter { at: usize, found: char },
    /// An item (`NODE/RUN:fields` or `*:fields`) that does not follow the grammar.
    BadItem { item: String, reason: &'static str },
}

impl fmt::Display for RecordError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RecordError::Unterminated { at } => {
                write!(f, "gpu-mem-quota record at byte {at} has no closing '}}'")
            }
            RecordError::TooLong { bytes } => write!(
                f,
                "gpu-mem-quota record is {bytes} bytes, longer than any writer produces"
            ),
            RecordError::OlderVersion(v) => {
                write!(f, "gpu-mem-quota record version {v} is no longer read")
            }
            RecordError::NewerVersion(v) => write!(
                f,
                "gpu-mem-quota record version {v} is newer than this program (version {})",
                super::FORMAT_VERSION
            ),
            RecordError::BadCharacter { at, found } => write!(
                f,
                "gpu-mem-quota record has an unexpected character {:?} at byte {at}",
                found
            ),
            RecordError::BadItem { item, reason } => {
                write!(f, "gpu-mem-quota record item '{}': {reason}", item.escape_debug())
            }
        }
    }
}

impl std::error::Error for RecordError {}

/// Builds a [`RecordError::BadItem`], keeping at most 60 characters of the item for the message.
pub(super) fn bad_item(item: &str, reason: &'static str) -> RecordError {
    const SHOWN: usize = 60;
    let mut shown: String = item.chars().take(SHOWN).collect();
    if item.chars().count() > SHOWN {
        shown.push_str("...");
    }
    RecordError::BadItem { item: shown, reason }
}
