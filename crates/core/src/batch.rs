//! `--gpu-mem-batch=MICRO[xACCUM]`: the job's batch geometry, so that restart hints can shrink the
//! micro-batch while keeping the effective batch (micro × accumulation) exactly.
//!
//! `8x8` is a micro-batch of 8 with 8 gradient-accumulation steps (effective batch 64); `16` alone is
//! a micro-batch of 16 without accumulation. Both numbers are whole, at least 1 and at most
//! [`MAX_BATCH_FACTOR`]. The separator is a lower-case `x`, nothing else.

use std::fmt;

/// `--gpu-mem-batch=MICRO[xACCUM]`.
pub const BATCH_OPTION: &str = "gpu-mem-batch";

/// The largest micro-batch or accumulation count accepted. Real jobs use a few hundred at most;
/// anything larger is a typo, and the bound keeps `micro × accum` far inside `u64`.
pub const MAX_BATCH_FACTOR: u32 = 65536;

/// A micro-batch and its gradient-accumulation count, both in `1..=MAX_BATCH_FACTOR`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BatchGeometry {
    /// Samples per forward/backward pass: what per-step GPU memory scales with.
    pub micro: u32,
    /// Passes whose gradients are summed before each optimizer step.
    pub accum: u32,
}

impl BatchGeometry {
    /// Samples per optimizer step: micro × accum. The quantity training results depend on.
    pub const fn effective(self) -> u64 {
        self.micro as u64 * self.accum as u64
    }
}

/// Always `MICROxACCUM` (`16x1` for a plain `16`): one canonical form for logs and the environment.
impl fmt::Display for BatchGeometry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}x{}", self.micro, self.accum)
    }
}

/// Which of the two numbers a [`BatchError`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BatchPart {
    Micro,
    Accum,
}

impl fmt::Display for BatchPart {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BatchPart::Micro => "the micro-batch",
            BatchPart::Accum => "the gradient accumulation",
        })
    }
}

/// Why a batch geometry was refused. The message completes "invalid --gpu-mem-batch 'VALUE': ...".
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum BatchError {
    Empty,
    /// A part that is missing or not a plain whole number (`x8`, `8x`, `8*8`, `-1`, `8x8x8`).
    NotANumber(BatchPart),
    Zero(BatchPart),
    TooLarge(BatchPart),
}

impl fmt::Display for BatchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BatchError::Empty => write!(f, "empty; give MICRO or MICROxACCUM, e.g. 8x8"),
            BatchError::NotANumber(part) => write!(
                f,
                "{part} is not a whole number; expected MICRO or MICROxACCUM, e.g. 8x8"
            ),
            BatchError::Zero(part) => write!(f, "{part} must be at least 1"),
            BatchError::TooLarge(part) => {
                write!(f, "{part} is larger than the maximum of {MAX_BATCH_FACTOR}")
            }
        }
    }
}

impl std::error::Error for BatchError {}

/// A bad `--gpu-mem-batch` value; the message names the option and the value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchOptionError {
    pub(crate) value: String,
    pub(crate) reason: BatchError,
}

impl fmt::Display for BatchOptionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid --{} '{}': {}",
            BATCH_OPTION,
            self.value.escape_debug(),
            self.reason
        )
    }
}

impl std::error::Error for BatchOptionError {}

/// Validates the value of `--gpu-mem-batch`.
pub fn parse_batch_option(value: &str) -> Result<BatchGeometry, BatchOptionError> {
    parse_geometry(value).map_err(|reason| BatchOptionError {
        value: value.to_string(),
        reason,
    })
}

fn parse_geometry(text: &str) -> Result<BatchGeometry, BatchError> {
    if text.is_empty() {
        return Err(BatchError::Empty);
    }
    let (micro, accum) = match text.split_once('x') {
        Some((micro, accum)) => (micro, Some(accum)),
        None => (text, None),
    };
    Ok(BatchGeometry {
        micro: parse_factor(micro, BatchPart::Micro)?,
        accum: match accum {
            Some(accum) => parse_factor(accum, BatchPart::Accum)?,
            None => 1,
        },
    })
}

/// A whole number in `1..=MAX_BATCH_FACTOR`, digits only (no sign, no spaces, no second `x`).
fn parse_factor(digits: &str, part: BatchPart) -> Result<u32, BatchError> {
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(BatchError::NotANumber(part));
    }
    // Digits only, so a parse failure can only be overflow.
    let n: u64 = digits.parse().map_err(|_| BatchError::TooLarge(part))?;
    match n {
        0 => Err(BatchError::Zero(part)),
        n if n > MAX_BATCH_FACTOR as u64 => Err(BatchError::TooLarge(part)),
        n => Ok(n as u32),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn geometry(micro: u32, accum: u32) -> BatchGeometry {
        BatchGeometry { micro, accum }
    }

    #[test]
    fn accepts_geometries() {
        let table = [
            ("8x8", geometry(8, 8)),
            ("16", geometry(16, 1)),
            ("1x1", geometry(1, 1)),
            ("08x002", geometry(8, 2)),
            ("65536x65536", geometry(65536, 65536)),
        ];
        for (text, want) in table {
            assert_eq!(parse_batch_option(text), Ok(want), "{text}");
        }
    }

    #[test]
    fn refuses_bad_geometries() {
        use BatchError::*;
        use BatchPart::*;
        let table = [
            ("", Empty),
            ("x8", NotANumber(Micro)),
            ("8x", NotANumber(Accum)),
            ("8x8x8", NotANumber(Accum)),
            ("8X8", NotANumber(Micro)),
            ("8*8", NotANumber(Micro)),
            ("-1", NotANumber(Micro)),
            ("+8", NotANumber(Micro)),
            (" 8", NotANumber(Micro)),
            ("8x 8", NotANumber(Accum)),
            ("1.5", NotANumber(Micro)),
            ("0", Zero(Micro)),
            ("0x8", Zero(Micro)),
            ("8x0", Zero(Accum)),
            ("65537", TooLarge(Micro)),
            ("8x65537", TooLarge(Accum)),
            ("99999999999999999999999", TooLarge(Micro)),
        ];
        for (text, reason) in table {
            assert_eq!(parse_batch_option(text).unwrap_err().reason, reason, "{text:?}");
        }
    }

    #[test]
    fn messages_name_option_and_value() {
        let table = [
            ("8x0", "invalid --gpu-mem-batch '8x0': the gradient accumulation must be at least 1"),
            ("0", "invalid --gpu-mem-batch '0': the micro-batch must be at least 1"),
            (
                "eight",
                "invalid --gpu-mem-batch 'eight': the micro-batch is not a whole number; \
                 expected MICRO or MICROxACCUM, e.g. 8x8",
            ),
            (
                "8x70000",
                "invalid --gpu-mem-batch '8x70000': the gradient accumulation is larger than the maximum of 65536",
            ),
            ("8\nx8", "invalid --gpu-mem-batch '8\\nx8': the micro-batch is not a whole number; expected MICRO or MICROxACCUM, e.g. 8x8"),
        ];
        for (text, message) in table {
            assert_eq!(parse_batch_option(text).unwrap_err().to_string(), message);
        }
    }

    #[test]
    fn displays_canonically() {
        assert_eq!(geometry(8, 8).to_string(), "8x8");
        assert_eq!(parse_batch_option("16").unwrap().to_string(), "16x1");
        assert_eq!(geometry(65536, 65536).effective(), 1 << 32);
    }
}
