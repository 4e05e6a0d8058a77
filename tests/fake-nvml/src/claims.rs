//! Processes "allocating" GPU memory: one file per process, `procs/<gpu-index>/<pid>`.
//!
//! The directory is writable by every job (mode 1777), so reading it is defensive: names must be
//! canonical pids, files are opened with O_NOFOLLOW|O_NONBLOCK (no symlinks, no hanging on a FIFO),
//! only regular files of at most [`MAX_FILE_BYTES`] are read, a file counts only if its owner is
//! root or owns the process, and anything malformed is skipped (and reported once on stderr).

use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

use crate::size::parse_bytes;
use crate::warn::warn_once;

/// Linux pids are below 2^22 (PID_MAX_LIMIT).
pub const PID_LIMIT: u32 = 1 << 22;
/// A claim is a size and a keyword or two; anything longer is not a claim.
pub const MAX_FILE_BYTES: u64 = 256;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Compute,
    Graphics,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Used {
    Bytes(u64),
    /// Listed as NVML_VALUE_NOT_AVAILABLE; still counts `counted` bytes towards the GPU's used memory.
    Unavailable {
        counted: u64,
    },
}

/// What one file says about one live process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Claim {
    pub pid: u32,
    pub used: Used,
    pub kind: Kind,
    /// Index of the MIG device the process runs in (`mig=K`), if any.
    pub mig: Option<usize>,
}

impl Claim {
    /// What the process adds to its GPU's used memory.
    pub fn counted_bytes(&self) -> u64 {
        match self.used {
            Used::Bytes(bytes) | Used::Unavailable { counted: bytes } => bytes,
        }
    }
}

/// A file name that is a pid as the kernel writes it: decimal, no sign, no leading zero, 1..2^22.
pub fn pid_from_name(name: &str) -> Option<u32> {
    let canonical = !name.is_empty() && !name.starts_with('0') && name.bytes().all(|b| b.is_ascii_digit());
    let pid: u32 = if canonical {
        name.parse().ok()?
    } else {
        return None;
    };
    (pid < PID_LIMIT).then_some(pid)
}

/// Parses a claim file: first line a size (`30G`, `1234`), `unavailable` or `unavailable <size>`;
/// each further line one keyword: `graphics` or `mig=<index>`.
pub fn parse_claim(pid: u32, text: &str) -> Result<Claim, String> {
    let mut lines = text.lines().map(str::trim).filter(|line| !line.is_empty());
    let first = lines.next().ok_or("empty file")?;
    let used = match first.strip_prefix("unavailable") {
        Some("") => Used::Unavailable { counted: 0 },
        Some(rest) if rest.starts_with(char::is_whitespace) => Used::Unavailable {
            counted: parse_bytes(rest)?,
        },
        _ => Used::Bytes(parse_bytes(first)?),
    };
    let mut claim = Claim {
        pid,
        used,
        kind: Kind::Compute,
        mig: None,
    };
    for keyword in lines {
        match keyword {
            "graphics" => claim.kind = Kind::Graphics,
            _ => match keyword.strip_prefix("mig=").map(str::parse::<usize>) {
                Some(Ok(index)) => claim.mig = Some(index),
                _ => {
                    return Err(format!(
                        "unknown keyword '{keyword}' (expected graphics or mig=N)"
                    ))
                }
            },
        }
    }
    Ok(claim)
}

/// The claims in `gpu_dir` of processes still alive under `proc_root`, sorted by pid.
/// A missing directory means no process uses the GPU.
pub fn read_claims(gpu_dir: &Path, proc_root: &Path) -> Vec<Claim> {
    let Ok(entries) = std::fs::read_dir(gpu_dir) else {
        return Vec::new();
    };
    let mut claims: Vec<Claim> = entries
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let pid = entry.file_name().to_str().and_then(pid_from_name)?;
            read_claim(&entry.path(), pid, proc_root)
        })
        .collect();
    claims.sort_unstable_by_key(|claim| claim.pid);
    claims
}

fn read_claim(path: &Path, pid: u32, proc_root: &Path) -> Option<Claim> {
    // The driver frees a dead process's memory: a claim outlives its process only on disk.
    let process_owner = std::fs::metadata(proc_root.join(pid.to_string())).ok()?.uid();
    let skip = |why: String| {
        warn_once(
            path.display().to_string(),
            format_args!("ignoring {}: {why}", path.display()),
        );
        None
    };
    let file = match open_no_follow(path) {
        Ok(file) => file,
        Err(e) => return skip(e),
    };
    let meta = match file.metadata() {
        Ok(meta) => meta,
        Err(e) => return skip(e.to_string()),
    };
    if !meta.is_file() {
        return skip("not a regular file".to_string());
    }
    if meta.uid() != 0 && meta.uid() != process_owner {
        return skip(format!(
            "owned by uid {}, but process {pid} is uid {process_owner}",
            meta.uid()
        ));
    }
    if meta.len() > MAX_FILE_BYTES {
        return skip(format!(
            "{} bytes, a claim has at most {MAX_FILE_BYTES}",
            meta.len()
        ));
    }
    // One read: the file is small and regular. A short read means it is being rewritten.
    let mut buffer = [0u8; MAX_FILE_BYTES as usize];
    let length = match (&file).read(&mut buffer) {
        Ok(length) => length,
        Err(e) => return skip(e.to_string()),
    };
    let Ok(text) = std::str::from_utf8(&buffer[..length]) else {
        return skip("not UTF-8 text".to_string());
    };
    if text.trim().is_empty() {
        return None; // being written right now (`echo 30G > file` truncates first)
    }
    match parse_claim(pid, text) {
        Ok(claim) => Some(claim),
        Err(e) => skip(e),
    }
}

fn open_no_follow(path: &Path) -> Result<File, String> {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => "a symbolic link".to_string(),
            _ => e.to_string(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pid_names() {
        let cases = [
            ("1", Some(1)),
            ("4194303", Some(4194303)),
            ("4194304", None),
            ("0", None),
            ("0123", None),
            ("+12", None),
            ("12.tmp", None),
            (".12", None),
            ("", None),
            ("99999999999", None),
        ];
        for (name, want) in cases {
            assert_eq!(pid_from_name(name), want, "{name:?}");
        }
    }

    #[test]
    fn claim_files() {
        let claim = |used, kind, mig| {
            Some(Claim {
                pid: 9,
                used,
                kind,
                mig,
            })
        };
        let cases = [
            ("30G\n", claim(Used::Bytes(30 << 30), Kind::Compute, None)),
            ("1234", claim(Used::Bytes(1234), Kind::Compute, None)),
            (
                "unavailable\n",
                claim(Used::Unavailable { counted: 0 }, Kind::Compute, None),
            ),
            (
                "unavailable 2G\n",
                claim(Used::Unavailable { counted: 2 << 30 }, Kind::Compute, None),
            ),
            (
                "1G\ngraphics\n",
                claim(Used::Bytes(1 << 30), Kind::Graphics, None),
            ),
            (
                "\n 1G \n\n mig=2\n",
                claim(Used::Bytes(1 << 30), Kind::Compute, Some(2)),
            ),
            (
                "1G\nmig=1\ngraphics",
                claim(Used::Bytes(1 << 30), Kind::Graphics, Some(1)),
            ),
            ("", None),
            ("lots", None),
            ("unavailablee", None),
            ("1G\ncompute", None),
            ("1G\nmig=x", None),
            ("-5", None),
        ];
        for (text, want) in cases {
            assert_eq!(parse_claim(9, text).ok(), want, "{text:?}");
        }
    }

    #[test]
    fn counted_bytes() {
        let claim = |used| Claim {
            pid: 1,
            used,
            kind: Kind::Compute,
            mig: None,
        };
        assert_eq!(claim(Used::Bytes(5)).counted_bytes(), 5);
        assert_eq!(claim(Used::Unavailable { counted: 7 }).counted_bytes(), 7);
    }
}
