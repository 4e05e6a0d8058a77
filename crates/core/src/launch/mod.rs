//! What the plugin tells a job's watchdog: the watchdog's public interface.
//!
//! - `params`: the watchdog's command line, written by the plugin and read by `gpu-mem-quota
//!   watchdog` (one definition for both sides). gmq-node's `spawn` starts the watchdog with it
//!   from inside slurmstepd, as a detached daemon.
//! - [`SLURMD_VAR`]: the slurmd that ran the job prolog, in the watchdog's environment (which the
//!   plugin builds from nothing: never the job's).
//!
//! The plugin (`spank`) and the watchdog (`watchdog`, `cli`) both depend on this module; neither
//! depends on the other.

pub(crate) mod params;

pub use params::{Params, Provisional};

/// The watchdog's environment variable naming the slurmd that ran the job prolog which started
/// it ([`Slurmd`]), as `PID:START_TIME` (`/proc/PID/stat`'s field 22), then, from this version
/// on, `:MOUNT_NS:EXE_DEV:EXE_INO:EXE_PATH` ([`SlurmdMarks`]). In the environment, not on the
/// command line, so that a watchdog and a plugin of different versions still agree: an older
/// watchdog ignores it, a newer one reads an older value (no marks), and a watchdog without it
/// does not look at slurmd.
pub const SLURMD_VAR: &str = "GMQ_SLURMD";

/// The slurmd that ran the job prolog, as the prolog saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slurmd {
    pub pid: u32,
    /// Field 22 of `/proc/PID/stat`: with the pid, this very process.
    pub start_time: u64,
    /// What tells the node's slurmd from any process that takes its name (review K6), to find a
    /// restarted one by; `None` in a value an older plugin wrote.
    pub marks: Option<SlurmdMarks>,
}

/// What a slurmd started again on the node shares with the one that ran the prolog: its mount
/// namespace (the node's, which the prolog may have left for the job's: `job_container/tmpfs`)
/// and its executable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlurmdMarks {
    /// The inode of `/proc/PID/ns/mnt` (`mnt:[INODE]`).
    pub mount_ns: u64,
    /// The executable file (`stat` of `/proc/PID/exe`): its device and inode.
    pub exe: FileId,
    /// Where it was run from (`readlink /proc/PID/exe`): a slurmd installed anew there (a package
    /// upgrade, then a restart) is another file at the same place.
    pub exe_path: String,
}

/// A file, by its device and inode numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileId {
    pub dev: u64,
    pub ino: u64,
}

/// [`SLURMD_VAR`]'s value for `slurmd`.
pub fn slurmd_var_value(slurmd: &Slurmd) -> String {
    let Slurmd {
        pid,
        start_time,
        marks,
    } = slurmd;
    match marks {
        None => format!("{pid}:{start_time}"),
        Some(m) => format!(
            "{pid}:{start_time}:{}:{}:{}:{}",
            m.mount_ns, m.exe.dev, m.exe.ino, m.exe_path
        ),
    }
}

/// The slurmd from [`SLURMD_VAR`]'s value: `PID:START_TIME` (an older plugin's: no marks), or
/// with the marks after it (the path last: it may hold `:`). `None` for anything else (pid 0, an
/// empty path included).
pub fn parse_slurmd_var(text: &str) -> Option<Slurmd> {
    let fields: Vec<&str> = text.splitn(6, ':').collect();
    let number = |at: usize| fields.get(at).and_then(|f| f.parse::<u64>().ok());
    let pid = fields[0].parse::<u32>().ok().filter(|&p| p > 0)?;
    let start_time = number(1)?;
    let marks = match fields.len() {
        2 => None,
        6 => Some(SlurmdMarks {
            mount_ns: number(2)?,
            exe: FileId {
                dev: number(3)?,
                ino: number(4)?,
            },
            exe_path: Some(fields[5]).filter(|p| !p.is_empty())?.to_string(),
        }),
        _ => return None,
    };
    Some(Slurmd {
        pid,
        start_time,
        marks,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_slurmd_variable_round_trips_and_rejects_the_rest() {
        let old = Slurmd {
            pid: 4242,
            start_time: 171676,
            marks: None,
        };
        assert_eq!(slurmd_var_value(&old), "4242:171676");
        assert_eq!(parse_slurmd_var("4242:171676"), Some(old.clone()));
        let new = Slurmd {
            marks: Some(SlurmdMarks {
                mount_ns: 4026531841,
                exe: FileId { dev: 2049, ino: 786 },
                exe_path: "/opt/slurm:24.11/sbin/slurmd".into(),
            }),
            ..old
        };
        let text = slurmd_var_value(&new);
        assert_eq!(
            text,
            "4242:171676:4026531841:2049:786:/opt/slurm:24.11/sbin/slurmd"
        );
        assert_eq!(parse_slurmd_var(&text), Some(new));
        for bad in [
            "",
            "4242",
            "4242:",
            ":1",
            "0:1",
            "-1:1",
            "x:1",
            "1:y",
            "1:2:3",
            "1:2:3:4",
            "1:2:3:4:5",
            "1:2:3:4:5:",
            "1:2:x:4:5:/s",
            "1:2:3:-4:5:/s",
            "1:2:3:4:5 :/s",
        ] {
            assert_eq!(parse_slurmd_var(bad), None, "{bad}");
        }
    }
}
