//! slurmstepd's process title: which step a slurmstepd manages. Pure.
//!
//! slurmstepd rewrites its argv with `setproctitle("%s", "[<job>.<step>]")` (slurmstepd.c,
//! `_set_job_log_prefix`); Slurm's setproctitle prefixes the program name, so `/proc/PID/cmdline`
//! reads `slurmstepd: [12.batch]`, `slurmstepd: [12.extern]` or `slurmstepd: [12.0]`, padded with
//! NULs to the length of the original argv (seen on Slurm 22.05). Newer Slurm writes a
//! heterogeneous step as `[12.0+1]`. The spank prolog/epilog stepd (`slurmstepd spank prolog`)
//! keeps its argv and manages no step.

use super::step::{job_id, StepName};

/// The job and step in a slurmstepd's `cmdline`, or `None` when it is not a step's title.
pub(crate) fn parse_title(cmdline: &[u8]) -> Option<(u32, StepName)> {
    // Arguments are NUL-separated; a title may be one argument or padded, so NULs read as spaces.
    let text: String = String::from_utf8_lossy(cmdline).replace('\0', " ");
    let bracketed = text.trim().strip_prefix("slurmstepd:")?.trim_start();
    let inner = bracketed.strip_prefix('[')?.strip_suffix(']')?;
    let (job, step) = inner.split_once('.')?;
    Some((job_id(job)?, StepName::from_name(step)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A command line and the job and step it names.
    type Case = (&'static [u8], Option<(u32, StepName)>);

    #[test]
    fn titles() {
        use StepName::*;
        let cases: &[Case] = &[
            (b"slurmstepd: [42.batch]\0", Some((42, Batch))),
            (b"slurmstepd: [42.extern]\0", Some((42, Extern))),
            (b"slurmstepd: [42.0]\0\0\0", Some((42, Numbered(0)))),
            (b"slurmstepd:\0[42.17]", Some((42, Numbered(17)))),
            (b"slurmstepd: [42.interactive]   ", Some((42, Interactive))),
            (b"slurmstepd: [42.0+1]", Some((42, Other("0+1".into())))),
            (b"slurmstepd: [123.0]", Some((123, Numbered(0)))),
            // not a step's title
            (b"/usr/sbin/slurmstepd\0spank\0prolog\0", None),
            (b"slurmstepd\0", None),
            (b"", None),
            (b"slurmstepd: [42]", None),
            (b"slurmstepd: [42.]", None),
            (b"slurmstepd: [.0]", None),
            (b"slurmstepd: [042.0]", None),
            (b"slurmstepd: [0.0]", None),
            (b"slurmstepd: [42.0] x", None),
            (b"slurmstepd: 42.0", None),
            (b"xslurmstepd: [42.0]", None),
            (b"slurmstepd: [4294967296.0]", None),
            (b"slurmstepd: [42.0]\xff", None),
        ];
        for (cmdline, want) in cases {
            assert_eq!(
                &parse_title(cmdline),
                want,
                "{:?}",
                String::from_utf8_lossy(cmdline)
            );
        }
    }
}
