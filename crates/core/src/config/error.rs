//! What is wrong with a policy file, said so an admin can go to the line and fix it:
//! `FILE:LINE:COLUMN: KEY: MESSAGE`, one line per problem.

use std::fmt;
use std::ops::Range;
use std::path::PathBuf;

/// One problem in the policy file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// 1-based line and column (in characters) of the offending text; 0 when the parser gave no place.
    pub(crate) line: usize,
    pub(crate) column: usize,
    /// Where in the policy, as an admin writes it: `[account.physics] max`, `[enforcement]`;
    /// empty when not known (a syntax error before any table).
    pub(crate) key: String,
    pub(crate) message: String,
}

/// Every problem found in one file, in file order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigErrors {
    /// The file as named in messages.
    pub(crate) file: String,
    pub errors: Vec<ConfigError>,
}

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.errors.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{}", self.file)?;
            if e.line > 0 {
                write!(f, ":{}:{}", e.line, e.column)?;
            }
            if !e.key.is_empty() {
                write!(f, ": {}", e.key)?;
            }
            write!(f, ": {}", e.message)?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

/// Why no policy could be loaded. The plugin treats each kind according to `on_config_error`
/// (a missing file is told apart: it is often a node that was not set up, not a typo).
#[derive(Debug)]
pub enum LoadError {
    Missing { path: PathBuf },
    Unreadable { path: PathBuf, reason: std::io::Error },
    Invalid(ConfigErrors),
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LoadError::Missing { path } => {
                write!(
                    f,
                    "{}: no such file: the GPU memory policy is missing",
                    path.display()
                )
            }
            LoadError::Unreadable { path, reason } => {
                write!(
                    f,
                    "{}: cannot read the GPU memory policy: {reason}",
                    path.display()
                )
            }
            LoadError::Invalid(errors) => errors.fmt(f),
        }
    }
}

impl std::error::Error for LoadError {}

/// 1-based line and column (in characters) of a byte offset in `text`.
pub(crate) fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let offset = floor_char_boundary(text, offset.min(text.len()));
    let before = &text[..offset];
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let line = before.bytes().filter(|&b| b == b'\n').count() + 1;
    (line, before[line_start..].chars().count() + 1)
}

fn floor_char_boundary(text: &str, mut offset: usize) -> usize {
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    offset
}

/// An error from the TOML parser (syntax, unknown key, wrong shape), placed in the file.
/// The parser names no key path, so it is read back from the text: the last `[table]` header
/// at or above the error, and the bare key under the error's span.
pub(crate) fn from_toml(text: &str, error: &toml::de::Error) -> ConfigError {
    let message = error.message().trim_end().replace('\n', "; ");
    let Some(span) = error.span() else {
        return ConfigError {
            line: 0,
            column: 0,
            key: String::new(),
            message,
        };
    };
    let (line, column) = line_column(text, span.start);
    ConfigError {
        line,
        column,
        key: key_path_at(text, span, line),
        message,
    }
}

/// The `[table] key` an error at `span` (on 1-based `line`) is about, as well as it can be told.
fn key_path_at(text: &str, span: Range<usize>, line: usize) -> String {
    let header = text
        .lines()
        .take(line)
        .map(str::trim_start)
        .filter(|l| l.starts_with('['))
        .last()
        .and_then(|l| {
            l.find(']')
                .map(|end| l[..=end].trim_start_matches('[').trim_end_matches(']'))
        })
        .map(|name| format!("[{}]", name.trim()));
    let error_line = text.lines().nth(line - 1).unwrap_or("");
    if error_line.trim_start().starts_with('[') {
        // The error is about the header itself (an unknown table).
        return header.unwrap_or_default();
    }
    // On a `key = value` line the key is what comes before the `=`; otherwise (a key whose value
    // is still missing) the key under the span, if it is a bare key.
    let start = floor_char_boundary(text, span.start.min(text.len()));
    let end = floor_char_boundary(text, span.end.min(text.len())).max(start);
    let spanned = text[start..end].trim();
    let is_bare_key = !spanned.is_empty()
        && spanned
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    let key = match error_line.split_once('=') {
        Some((k, _)) if !k.trim().is_empty() => Some(k.trim()),
        _ => is_bare_key.then_some(spanned),
    };
    match (header, key) {
        (Some(h), Some(k)) => format!("{h} {k}"),
        (Some(h), None) => h,
        (None, Some(k)) => k.to_string(),
        (None, None) => String::new(),
    }
}

/// Writes a table name as a TOML key: bare when it can be, quoted otherwise (`"j.doe"`).
pub fn toml_key(name: &str) -> String {
    let bare = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if bare {
        name.to_string()
    } else {
        format!("\"{}\"", name.escape_debug())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_and_columns() {
        let text = "a = 1\n[b]\nkey = \"é\" x\n";
        assert_eq!(line_column(text, 0), (1, 1));
        assert_eq!(line_column(text, 6), (2, 1));
        let x = text.find('x').unwrap();
        assert_eq!(line_column(text, x), (3, 11)); // é is one column
        assert_eq!(line_column(text, text.len() + 10), (4, 1));
    }

    #[test]
    fn display_is_file_line_column_key_message() {
        let errors = ConfigErrors {
            file: "/etc/slurm/gpu-mem-quota.toml".into(),
            errors: vec![
                ConfigError {
                    line: 12,
                    column: 7,
                    key: "[account.physics] max".into(),
                    message: "invalid size 'banana'".into(),
                },
                ConfigError {
                    line: 0,
                    column: 0,
                    key: String::new(),
                    message: "no place".into(),
                },
            ],
        };
        assert_eq!(
            errors.to_string(),
            "/etc/slurm/gpu-mem-quota.toml:12:7: [account.physics] max: invalid size 'banana'\n\
             /etc/slurm/gpu-mem-quota.toml: no place"
        );
    }

    #[test]
    fn table_keys() {
        assert_eq!(toml_key("physics"), "physics");
        assert_eq!(toml_key("gmq-user"), "gmq-user");
        assert_eq!(toml_key("j.doe"), "\"j.doe\"");
        assert_eq!(toml_key(""), "\"\"");
    }
}
