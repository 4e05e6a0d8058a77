//! A job's SLUID (Slurm Lexicographically-sortable Unique ID, 25.11 on), as Slurm prints it.
//!
//! Slurm 26.05's cgroup/v2 names a job's cgroup after its SLUID, not `job_<id>` (commit de2b2dd918;
//! `CgroupJobIdPaths=yes` in cgroup.conf restores the old names), and slurmd puts it in the job
//! prolog's and epilog's environment as `SLURM_JOB_SLUID` (`prep_script_slurmd.c`, `_build_env`).
//! The text is `print_sluid` (`src/common/sluid.c`): a lowercase `s`, then the 64-bit value in 13
//! Crockford base32 digits, most significant first (`0123456789ABCDEFGHJKMNPQRSTVWXYZ`); the first
//! digit holds only the top 4 bits, so it is `0`..`F`. 14 characters in all, e.g. `s0K2Q6ZC8M4T00`.
//!
//! Only that printed form is taken: a cgroup directory is matched by its exact name, and
//! `str2sluid`'s leniency (lowercase, `O`/`I`/`L` for `0`/`1`/`1`) would let two spellings name one
//! job. The value holds no job id (cluster, milliseconds, sequence), so a job's number is not
//! derived from it.

use std::fmt;

/// `cb32map` in sluid.c.
const DIGITS: &[u8; 32] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";

/// The length of a printed SLUID: `s` and 13 digits (`SLUID_STR_BYTES` less the NUL).
pub(crate) const SLUID_LEN: usize = 14;

/// A job's SLUID; its [`Display`](fmt::Display) is Slurm's printed form.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Sluid(u64);

impl Sluid {
    /// The SLUID `text` is in Slurm's printed form, or `None` (any other text, 0 included: Slurm
    /// prints no SLUID for a job that has none).
    pub fn parse(text: &str) -> Option<Sluid> {
        let bytes = text.as_bytes();
        if bytes.len() != SLUID_LEN || bytes[0] != b's' {
            return None;
        }
        let mut value: u64 = 0;
        for (i, &c) in bytes[1..].iter().enumerate() {
            let digit = DIGITS.iter().position(|&d| d == c)? as u64;
            // The first digit carries bits 60..63 only: 16 and up would not fit in 64 bits.
            if i == 0 && digit > 0xf {
                return None;
            }
            value = (value << 5) | digit;
        }
        (value != 0).then_some(Sluid(value))
    }

    /// The 64-bit value.
    #[cfg(test)]
    fn value(self) -> u64 {
        self.0
    }
}

impl fmt::Display for Sluid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut text = [0u8; SLUID_LEN];
        text[0] = b's';
        for i in 0..13 {
            let shift = 5 * (12 - i);
            text[1 + i] = DIGITS[((self.0 >> shift) & 0x1f) as usize];
        }
        // Every byte is ASCII from DIGITS or `s`.
        f.write_str(std::str::from_utf8(&text).unwrap_or("s?"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `print_sluid` of Slurm's sluid.c, transcribed: the reference the parser must agree with.
    fn print_sluid(sluid: u64) -> String {
        let mut buffer = [b's'; 14];
        for i in 0..13u32 {
            let shift = 5 * i;
            let mask = 0x1fu64.checked_shl(shift).unwrap_or(0);
            buffer[13 - i as usize] = DIGITS[((sluid & mask) >> shift) as usize];
        }
        String::from_utf8(buffer.to_vec()).unwrap()
    }

    #[test]
    fn slurms_printed_form_round_trips() {
        // generate_sluid: cluster id (2..4095) << 52 | milliseconds << 10 | sequence.
        let made = |cluster: u64, ms: u64, seq: u64| (cluster << 52) | (ms << 10) | seq;
        for value in [
            made(2, 1_780_000_000_000, 0),
            made(4095, 1_780_000_000_123, 1023),
            made(1234, 0x3ff_ffff_ffff, 7),
            1,
            u64::MAX,
        ] {
            let text = print_sluid(value);
            let sluid = Sluid::parse(&text).unwrap_or_else(|| panic!("{text}"));
            assert_eq!(sluid.value(), value, "{text}");
            assert_eq!(sluid.to_string(), text);
        }
    }

    #[test]
    fn refuses_what_slurm_does_not_print() {
        let good = print_sluid((77 << 52) | (1_780_000_000_000 << 10) | 3);
        assert!(Sluid::parse(&good).is_some());
        let cases = [
            String::new(),
            "s".into(),
            "s0000000000000".into(), // 0: no SLUID
            good.to_uppercase(),     // `S`: str2sluid takes it, print_sluid never writes it
            good.to_lowercase(),
            good[..13].to_string(),
            format!("{good}0"),
            format!("job_{good}"),
            "sG000000000000".into(), // a first digit over 15 does not fit in 64 bits
            "s00000000000O0".into(), // O, I, L, U are not digits
            "s00000000000I0".into(),
            "s00000000000U0".into(),
            "s0000000000000\n".into(),
            "s000000000000é".into(),
        ];
        for text in &cases {
            assert_eq!(Sluid::parse(text), None, "{text:?}");
        }
    }
}
