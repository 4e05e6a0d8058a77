//! Slurm step names, as they appear in cgroup directories (`step_batch`) and in slurmstepd's
//! process title (`[12.batch]`).

use std::fmt;

/// A step of a job, by the name Slurm gives it (`batch`, `extern`, `0`). Pure data.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum StepName {
    /// The batch script (`batch`).
    Batch,
    /// The external step that holds processes adopted into the job (`extern`, `PrologFlags=Contain`).
    Extern,
    /// The interactive step of `salloc` (`interactive`, Slurm 20.11+ with `use_interactive_step`).
    Interactive,
    /// An srun step (`0`, `1`, ...).
    Numbered(u32),
    /// A name this code does not know (e.g. a heterogeneous step `0+1`), kept as Slurm wrote it.
    Other(String),
}

impl StepName {
    /// The step named `name` (the part after `step_` or after `<job>.`). `None` for an empty name.
    pub(crate) fn from_name(name: &str) -> Option<StepName> {
        Some(match name {
            "" => return None,
            "batch" => StepName::Batch,
            "extern" => StepName::Extern,
            "interactive" => StepName::Interactive,
            _ => match canonical_decimal(name) {
                Some(n) => StepName::Numbered(n),
                None => StepName::Other(name.to_owned()),
            },
        })
    }
}

/// Slurm's spelling: `batch`, `extern`, `interactive`, `0`.
impl fmt::Display for StepName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StepName::Batch => f.write_str("batch"),
            StepName::Extern => f.write_str("extern"),
            StepName::Interactive => f.write_str("interactive"),
            StepName::Numbered(n) => write!(f, "{n}"),
            StepName::Other(name) => f.write_str(name),
        }
    }
}

/// `text` as a number, only when written the way Slurm writes numbers (`%u`): ASCII digits, no
/// sign, no leading zero. So `12` matches and `012`, `+12`, `12 ` do not: a path component either
/// is exactly what Slurm would have created or it is not Slurm's.
pub(crate) fn canonical_decimal(text: &str) -> Option<u32> {
    let canonical = !text.is_empty()
        && text.bytes().all(|b| b.is_ascii_digit())
        && (text == "0" || !text.starts_with('0'));
    if canonical {
        text.parse().ok()
    } else {
        None
    }
}

/// A job id: canonical decimal and not 0 (Slurm never gives out job 0).
pub(crate) fn job_id(text: &str) -> Option<u32> {
    canonical_decimal(text).filter(|&id| id != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        let cases = [
            ("batch", Some(StepName::Batch)),
            ("extern", Some(StepName::Extern)),
            ("interactive", Some(StepName::Interactive)),
            ("0", Some(StepName::Numbered(0))),
            ("17", Some(StepName::Numbered(17))),
            ("0+1", Some(StepName::Other("0+1".into()))),
            ("007", Some(StepName::Other("007".into()))),
            ("", None),
        ];
        for (name, want) in cases {
            assert_eq!(StepName::from_name(name), want, "{name:?}");
            if let Some(step) = want {
                assert_eq!(step.to_string(), name);
            }
        }
    }

    #[test]
    fn job_ids() {
        let cases = [
            ("12", Some(12)),
            ("4294967295", Some(u32::MAX)),
            ("4294967296", None),
            ("0", None),
            ("012", None),
            ("+12", None),
            ("12a", None),
            (" 12", None),
            ("", None),
        ];
        for (text, want) in cases {
            assert_eq!(job_id(text), want, "{text:?}");
        }
    }
}
