//! Slurm's memory-size syntax, as `--mem` reads it, for GPU memory.
//!
//! A size is a whole number with an optional binary suffix: `K`, `M`, `G`, `T` (case-insensitive,
//! optionally written `KiB`, `MiB`, `GiB`, `TiB`). A bare number is MiB, as with `--mem`.
//! `40G` = `40GiB` = `40960M` = 42949672960 bytes. Fractions are refused (Slurm refuses them too);
//! `GB`-style suffixes are refused because users mean different things by them.

use std::fmt;

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;
const TIB: u64 = 1 << 40;
const PIB: u64 = 1 << 50;

/// The largest size anyone can ask for. Larger than any GPU for a long while; anything above is a typo.
pub const MAX_SIZE: ByteSize = ByteSize(PIB);

/// An amount of memory in bytes, non-zero and at most [`MAX_SIZE`] when it came from [`parse_size`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ByteSize(u64);

impl ByteSize {
    pub const fn from_bytes(bytes: u64) -> ByteSize {
        ByteSize(bytes)
    }

    pub const fn bytes(self) -> u64 {
        self.0
    }

    /// Rounds down to a whole MiB, so that a size computed from a fraction prints in Slurm syntax.
    pub const fn floor_mib(self) -> ByteSize {
        ByteSize(self.0 / MIB * MIB)
    }
}

/// The normalised human form: the largest binary unit that divides the size exactly (`40G`, `1536M`).
/// Sizes that are no whole number of KiB (only computed ones) print as bytes with a `B` suffix.
impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        for (unit, suffix) in [(TIB, 'T'), (GIB, 'G'), (MIB, 'M'), (KIB, 'K')] {
            if b != 0 && b.is_multiple_of(unit) {
                return write!(f, "{}{}", b / unit, suffix);
            }
        }
        write!(f, "{b}B")
    }
}

/// Why a size was refused. The message completes "invalid --OPTION 'VALUE': ...".
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SizeError {
    Empty,
    Negative,
    Zero,
    Fraction,
    NotANumber,
    UnknownSuffix(String),
    DecimalSuffix(String),
    TooLarge,
}

impl fmt::Display for SizeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SizeError::Empty => write!(f, "empty; give a size such as 40G"),
            SizeError::Negative => write!(f, "a size cannot be negative"),
            SizeError::Zero => write!(f, "a size must be greater than zero"),
            SizeError::Fraction => {
                write!(
                    f,
                    "fractions are not supported; use a smaller unit (1536M, not 1.5G)"
                )
            }
            SizeError::NotANumber => write!(
                f,
                "not a size; expected a whole number with an optional K, M, G or T suffix (e.g. 40G)"
            ),
            SizeError::UnknownSuffix(s) => {
                write!(f, "unknown suffix '{s}'; use K, M, G or T (binary, as in --mem)")
            }
            SizeError::DecimalSuffix(s) => write!(
                f,
                "ambiguous suffix '{s}'; use {} or {}iB (binary: 1G = 1024M, as in --mem)",
                &s[..1],
                &s[..1]
            ),
            SizeError::TooLarge => write!(f, "larger than the maximum of {MAX_SIZE}"),
        }
    }
}

impl std::error::Error for SizeError {}

/// Parses a size in Slurm's syntax. See the module documentation.
pub fn parse_size(text: &str) -> Result<ByteSize, SizeError> {
    if text.is_empty() {
        return Err(SizeError::Empty);
    }
    if text.starts_with('-') {
        return Err(SizeError::Negative);
    }
    let digits_end = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (digits, suffix) = text.split_at(digits_end);
    if digits.is_empty() {
        return Err(SizeError::NotANumber);
    }
    if suffix.starts_with(['.', ',']) {
        return Err(SizeError::Fraction);
    }
    let unit = unit_of(suffix)?;
    // More digits than u64 holds is simply too large; a parse error here can only be overflow.
    let number: u64 = digits.parse().map_err(|_| SizeError::TooLarge)?;
    if number == 0 {
        return Err(SizeError::Zero);
    }
    let bytes = number.checked_mul(unit).ok_or(SizeError::TooLarge)?;
    if bytes > MAX_SIZE.0 {
        return Err(SizeError::TooLarge);
    }
    Ok(ByteSize(bytes))
}

fn unit_of(suffix: &str) -> Result<u64, SizeError> {
    let lower = suffix.to_ascii_lowercase();
    let unit = match lower.as_str() {
        "" => MIB,
        "k" | "kib" => KIB,
        "m" | "mib" => MIB,
        "g" | "gib" => GIB,
        "t" | "tib" => TIB,
        "kb" | "mb" | "gb" | "tb" => return Err(SizeError::DecimalSuffix(suffix.to_string())),
        _ if suffix.chars().all(|c| c.is_ascii_alphabetic()) => {
            return Err(SizeError::UnknownSuffix(suffix.to_string()))
        }
        _ => return Err(SizeError::NotANumber),
    };
    Ok(unit)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_slurm_sizes() {
        let table: &[(&str, u64)] = &[
            ("40G", 42949672960),
            ("40g", 42949672960),
            ("40GiB", 42949672960),
            ("40gib", 42949672960),
            ("40960M", 42949672960),
            ("40960", 42949672960),
            ("1", MIB),
            ("1K", 1024),
            ("1KiB", 1024),
            ("512M", 512 * MIB),
            ("80G", 80 * GIB),
            ("1T", TIB),
            ("1024T", PIB),
            ("007G", 7 * GIB),
        ];
        for &(text, bytes) in table {
            assert_eq!(parse_size(text), Ok(ByteSize(bytes)), "{text}");
        }
    }

    #[test]
    fn refuses_bad_sizes() {
        use SizeError::*;
        let table: Vec<(&str, SizeError)> = vec![
            ("", Empty),
            ("0", Zero),
            ("0G", Zero),
            ("-5G", Negative),
            ("-0", Negative),
            ("1.5G", Fraction),
            ("1,5G", Fraction),
            ("banana", NotANumber),
            ("G", NotANumber),
            (" 40G", NotANumber),
            ("40G ", NotANumber),
            ("4 0G", NotANumber),
            ("+40G", NotANumber),
            ("40GB", DecimalSuffix("GB".into())),
            ("40mb", DecimalSuffix("mb".into())),
            ("40X", UnknownSuffix("X".into())),
            ("40P", UnknownSuffix("P".into())),
            ("40Gi", UnknownSuffix("Gi".into())),
            ("40G5", NotANumber),
            ("40G\n", NotANumber),
            ("99999999T", TooLarge),
            ("1025T", TooLarge),
            ("18446744073709551616", TooLarge),
            ("99999999999999999999999999G", TooLarge),
            ("17592186044417K", TooLarge),
            ("٣G", NotANumber),
        ];
        for (text, err) in table {
            assert_eq!(parse_size(text), Err(err), "{text:?}");
        }
    }

    #[test]
    fn error_messages_are_specific() {
        assert_eq!(
            parse_size("40GB").unwrap_err().to_string(),
            "ambiguous suffix 'GB'; use G or GiB (binary: 1G = 1024M, as in --mem)"
        );
        assert!(parse_size("99999999T").unwrap_err().to_string().contains("1024T"));
    }

    #[test]
    fn displays_the_largest_exact_unit() {
        assert_eq!(parse_size("40960M").unwrap().to_string(), "40G");
        assert_eq!(parse_size("1536M").unwrap().to_string(), "1536M");
        assert_eq!(parse_size("2048G").unwrap().to_string(), "2T");
        assert_eq!(parse_size("1K").unwrap().to_string(), "1K");
        assert_eq!(ByteSize::from_bytes(1000).to_string(), "1000B");
        assert_eq!(ByteSize::from_bytes(GIB + 5).floor_mib().to_string(), "1G");
    }

    #[test]
    fn display_round_trips() {
        for text in ["40G", "1536M", "3K", "7T", "40961M"] {
            let size = parse_size(text).unwrap();
            assert_eq!(parse_size(&size.to_string()), Ok(size));
        }
    }
}
