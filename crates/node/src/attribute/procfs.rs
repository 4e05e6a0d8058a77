//! Reading one process's files under a proc root (`/proc`, or a fixture tree in tests).
//!
//! Processes exit at any moment, so every reader returns `None` for a file that is missing,
//! unreadable or not what the kernel writes: the callers treat that as "gone" or "cannot tell",
//! never as an error. Files are read as bytes: a process chooses its own name (`comm`), and a
//! name that is not UTF-8 must not make it unreadable (and so invisible to attribution).

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

/// The fields of `/proc/PID/stat` attribution uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ProcStat {
    pub(crate) pid: u32,
    /// The command name (at most 15 bytes, chosen by the process; lossily decoded).
    pub(crate) comm: String,
    pub(crate) ppid: u32,
    /// Field 22: when the process started, in clock ticks since boot.
    pub(crate) start_time: u64,
}

/// The most of `cmdline` read: a slurmstepd title is short, and other processes' argv can be huge.
const CMDLINE_LIMIT: u64 = 4096;

pub(crate) fn read_stat(proc_root: &Path, pid: u32) -> Option<ProcStat> {
    let stat = parse_stat(&read(proc_root, pid, "stat", u64::MAX)?)?;
    (stat.pid == pid).then_some(stat)
}

/// The process's state (field 3 of `/proc/PID/stat`: `R`, `S`, `Z` for a zombie, ...).
pub(crate) fn read_state(proc_root: &Path, pid: u32) -> Option<u8> {
    let bytes = read(proc_root, pid, "stat", u64::MAX)?;
    let close = bytes.iter().rposition(|&b| b == b')')?;
    bytes[close + 1..]
        .iter()
        .copied()
        .find(|b| !b.is_ascii_whitespace())
}

/// The real uid (the first number of the `Uid:` line of `/proc/PID/status`).
pub(crate) fn read_real_uid(proc_root: &Path, pid: u32) -> Option<u32> {
    parse_real_uid(&read(proc_root, pid, "status", u64::MAX)?)
}

pub(crate) fn read_cgroup(proc_root: &Path, pid: u32) -> Option<String> {
    // Paths are Slurm's ASCII names or not Slurm's; a lossy decoding cannot forge a match.
    Some(String::from_utf8_lossy(&read(proc_root, pid, "cgroup", u64::MAX)?).into_owned())
}

pub(crate) fn read_cmdline(proc_root: &Path, pid: u32) -> Option<Vec<u8>> {
    read(proc_root, pid, "cmdline", CMDLINE_LIMIT)
}

fn read(proc_root: &Path, pid: u32, file: &str, limit: u64) -> Option<Vec<u8>> {
    let path: PathBuf = proc_root.join(pid.to_string()).join(file);
    let mut bytes = Vec::new();
    File::open(path).ok()?.take(limit).read_to_end(&mut bytes).ok()?;
    Some(bytes)
}

/// Parses `/proc/PID/stat`: `pid (comm) state ppid ... starttime ...`. `comm` may contain spaces
/// and parentheses, so it ends at the *last* `)`; the fields after it are plain numbers.
fn parse_stat(bytes: &[u8]) -> Option<ProcStat> {
    let open = bytes.iter().position(|&b| b == b'(')?;
    let close = bytes.iter().rposition(|&b| b == b')')?;
    if close < open {
        return None;
    }
    let pid = std::str::from_utf8(&bytes[..open]).ok()?.trim().parse().ok()?;
    let comm = String::from_utf8_lossy(&bytes[open + 1..close]).into_owned();
    let rest = std::str::from_utf8(&bytes[close + 1..]).ok()?;
    // Counting from field 3 (state): ppid is field 4, starttime field 22.
    let fields: Vec<&str> = rest.split_ascii_whitespace().collect();
    let ppid = fields.get(4 - 3)?.parse().ok()?;
    let start_time = fields.get(22 - 3)?.parse().ok()?;
    Some(ProcStat {
        pid,
        comm,
        ppid,
        start_time,
    })
}

/// The real uid from `/proc/PID/status` (`Uid:\treal\teffective\tsaved\tfs`).
fn parse_real_uid(status: &[u8]) -> Option<u32> {
    status
        .split(|&b| b == b'\n')
        .find_map(|line| line.strip_prefix(b"Uid:"))
        .and_then(|uids| std::str::from_utf8(uids).ok())
        .and_then(|uids| uids.split_ascii_whitespace().next())
        .and_then(|real| real.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stat line as the kernel writes it, with `comm` and the three fields we read.
    fn stat_line(pid: u32, comm: &[u8], ppid: u32, start_time: u64) -> Vec<u8> {
        let mut line = format!("{pid} (").into_bytes();
        line.extend_from_slice(comm);
        line.extend_from_slice(
            format!(
                ") S {ppid} {pid} 20847 0 -1 4194304 76 0 0 0 0 0 0 0 20 0 1 0 {start_time} \
                 2990080 420 18446744073709551615 94512867586048 0 0 0 0 0 0 0 17 0 0 0 0 0 0\n"
            )
            .as_bytes(),
        );
        line
    }

    #[test]
    fn stat_lines() {
        let cases: &[(&[u8], &str)] = &[
            (b"sleep", "sleep"),
            (b"slurmstepd", "slurmstepd"),
            (b"a b", "a b"),
            (b"x) S 1 2 (", "x) S 1 2 ("),
            (b"(((", "((("),
            (b")))", ")))"),
            (b"", ""),
            (b"\xff\xfe", "\u{fffd}\u{fffd}"),
        ];
        for (comm, want) in cases {
            let parsed = parse_stat(&stat_line(20855, comm, 20853, 171677)).unwrap();
            let expected = ProcStat {
                pid: 20855,
                comm: want.to_string(),
                ppid: 20853,
                start_time: 171677,
            };
            assert_eq!(parsed, expected, "{:?}", String::from_utf8_lossy(comm));
        }
    }

    #[test]
    fn real_stat_line() {
        // A batch script's stat from the dev cluster.
        let line = b"20853 (slurm_script) S 20848 20853 20847 0 -1 4194560 258 0 0 0 0 0 0 0 20 0 1 0 \
            171676 2654208 374 18446744073709551615 94014144393216 94014144469945 140720958751184 0 0 0 \
            0 0 65538 1 0 0 17 0 0 0 0 0 0 94014144499248 94014144504384 94014248239104 \
            140720958752563 140720958752628 140720958752628 140720958754751 0\n";
        let want = ProcStat {
            pid: 20853,
            comm: "slurm_script".into(),
            ppid: 20848,
            start_time: 171676,
        };
        assert_eq!(parse_stat(line), Some(want));
    }

    #[test]
    fn broken_stat_lines() {
        let cases: &[&[u8]] = &[
            b"",
            b"12 sleep S 1",
            b"12 (sleep S 1 2 3",
            b"12 )sleep( S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20",
            b"12 (sleep) S 1 2 3",
            b"x (sleep) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20",
            b"12 (sleep) S one 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20",
        ];
        for bytes in cases {
            assert_eq!(parse_stat(bytes), None, "{:?}", String::from_utf8_lossy(bytes));
        }
    }

    #[test]
    fn uids() {
        let cases: &[(&[u8], Option<u32>)] = &[
            (
                b"Name:\tsleep\nPPid:\t1\nUid:\t2001\t2001\t2001\t2001\nGid:\t2001\n",
                Some(2001),
            ),
            (b"Name:\tslurmstepd\nUid:\t0\t0\t0\t0\n", Some(0)),
            (b"Name:\tsu\nUid:\t2001\t0\t0\t0\n", Some(2001)),
            // `Name:` is the process's own choice; only a line that starts with `Uid:` counts.
            (b"Name:\tx\\nUid:\t0\nUid:\t2001\t2001\t2001\t2001\n", Some(2001)),
            (b"Name:\tsleep\n", None),
            (b"Uid:\t\n", None),
        ];
        for (status, want) in cases {
            assert_eq!(
                parse_real_uid(status),
                *want,
                "{:?}",
                String::from_utf8_lossy(status)
            );
        }
    }
}
