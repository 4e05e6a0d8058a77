//! Writing a file that another process reads while we write it (node_exporter's textfile
//! collector, `gpu-mem-quota status`, the plugin): the reader sees the old file or the new one,
//! never half of one.
//!
//! The text goes to a hidden temporary file beside the target, `.NAME.PID.N.tmp` (this process's
//! pid and a counter: unique among all writers, so two watchdogs writing the same file at once, as
//! every watchdog does with the node's GPU inventory, never touch each other's temporary), created
//! exclusively and without following symlinks, given its owner and mode on the descriptor, then
//! renamed over the target (rename replaces a symlink, never writes through it). The collector
//! ignores the temporary file: it reads only `*.prom`. A temporary left by a writer that died
//! between create and rename is removed by [`remove_stale_temporaries`] (the leftovers sweep) once
//! it is older than any write takes, never by another writer.
//!
//! The directory must pass [`TrustedDir`]'s refusal rule (a real directory, ours, not writable by
//! group or others, no sticky bit); everything is done relative to its descriptor.

use std::io::{self, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::trusted_dir::{euid, TrustedDir};

/// Who may read the file once it is in place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Access {
    pub mode: u32,
    /// The file's owner when not us: a user who may read it (the job's status file).
    pub owner: Option<u32>,
}

impl Access {
    /// Readable by node_exporter (or the plugin in the job's task) whatever user it runs as.
    const EVERYONE: Access = Access {
        mode: 0o644,
        owner: None,
    };
    /// Only root: the record, the registry.
    pub const ROOT_ONLY: Access = Access {
        mode: 0o600,
        owner: None,
    };

    /// Owned by `uid` and readable by them alone. The owner could chmod and rewrite it, so root
    /// never reads such a file back as a fact: it only ever replaces it.
    pub fn read_only_by(uid: u32) -> Access {
        Access {
            mode: 0o400,
            owner: Some(uid),
        }
    }
}

/// The temporary files' counter; with the pid it makes every temporary name unique.
static NEXT_TEMPORARY: AtomicU64 = AtomicU64::new(0);

/// Replaces `dir/name` with `text`, atomically, readable by everyone (0644).
pub fn write_atomically(dir: &Path, name: &str, text: &str) -> io::Result<()> {
    write_atomically_as(dir, name, text, Access::EVERYONE)
}

/// Replaces `dir/name` with `text`, atomically, with `access`. `name` must be a plain file name.
pub fn write_atomically_as(dir: &Path, name: &str, text: &str, access: Access) -> io::Result<()> {
    check_name(name)?;
    write_in(&TrustedDir::open(dir)?, name, text, access)
}

/// [`write_atomically_as`] in a directory already open.
fn write_in(dir: &TrustedDir, name: &str, text: &str, access: Access) -> io::Result<()> {
    check_name(name)?;
    let pid = std::process::id();
    // A name already there is a leftover of an earlier process with our pid (or planted: with
    // O_EXCL|O_NOFOLLOW it is never opened): take the next number, never remove it here.
    for _ in 0..100 {
        let temp = format!(
            ".{name}.{pid}.{}.tmp",
            NEXT_TEMPORARY.fetch_add(1, Ordering::Relaxed)
        );
        let file = match dir.create_new_file(&temp, 0o600) {
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            other => other?,
        };
        let written = fill_and_rename(dir, file, text, access, &temp, name);
        if written.is_err() {
            let _ = dir.unlink(&temp);
        }
        return written;
    }
    Err(io::Error::new(
        io::ErrorKind::AlreadyExists,
        format!(
            "{}: 100 temporary names for {name} are taken",
            dir.path().display()
        ),
    ))
}

/// Removes `dir/name`; a file that is already gone is fine.
pub fn remove(dir: &Path, name: &str) -> io::Result<()> {
    check_name(name)?;
    remove_in(&TrustedDir::open(dir)?, name)
}

/// [`remove`] in a directory already open.
pub(crate) fn remove_in(dir: &TrustedDir, name: &str) -> io::Result<()> {
    check_name(name)?;
    match dir.unlink(name) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

/// The file a temporary name stands for: `.NAME.PID.N.tmp` (and `.NAME.tmp`, the fixed name of
/// earlier versions) give `NAME`; anything else `None`.
fn temporary_target(file_name: &str) -> Option<&str> {
    let inner = file_name.strip_prefix('.')?.strip_suffix(".tmp")?;
    let numbered = inner.rsplit_once('.').and_then(|(rest, n)| {
        let (target, pid) = rest.rsplit_once('.')?;
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        (digits(n) && digits(pid)).then_some(target)
    });
    Some(numbered.unwrap_or(inner)).filter(|target| check_name(target).is_ok())
}

/// Removes the temporary files of `dir` whose target `is_ours` and that are older than
/// `older_than` (no write takes that long: their writer died). Regular files we own only.
/// Returns the names removed.
pub fn remove_stale_temporaries(
    dir: &TrustedDir,
    is_ours: &dyn Fn(&str) -> bool,
    older_than: Duration,
) -> io::Result<Vec<String>> {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let mut removed = Vec::new();
    for name in dir.names()? {
        if !temporary_target(&name).is_some_and(is_ours) {
            continue;
        }
        let Some(stat) = dir.stat_child(&name)? else {
            continue;
        };
        let modified = u64::try_from(stat.st_mtime).unwrap_or(0);
        let regular = stat.st_mode & libc::S_IFMT == libc::S_IFREG;
        if regular && stat.st_uid == euid() && now.saturating_sub(modified) >= older_than.as_secs() {
            match dir.unlink(&name) {
                Ok(()) => removed.push(name),
                // Another sweep was first.
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(removed)
}

fn fill_and_rename(
    dir: &TrustedDir,
    mut file: std::fs::File,
    text: &str,
    access: Access,
    temp: &str,
    target: &str,
) -> io::Result<()> {
    file.write_all(text.as_bytes())?;
    if let Some(uid) = access.owner {
        // The group stays ours (root): the mode gives it nothing anyway.
        // On the descriptor; no gid leaves the group as it is.
        std::os::unix::fs::fchown(&file, Some(uid), None)?;
    }
    // The creation mode was 0600 filtered by the umask; set it exactly, on the descriptor.
    file.set_permissions(std::fs::Permissions::from_mode(access.mode))?;
    // No fsync: the file is rewritten every interval and means nothing after a crash.
    dir.rename(temp, target)
}

fn check_name(name: &str) -> io::Result<()> {
    let plain = !name.is_empty()
        && !name.starts_with('.')
        && !name.contains(['/', '\0'])
        && Path::new(name).file_name().is_some_and(|n| n == name);
    if plain {
        Ok(())
    } else {
        Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("not a plain file name for the textfile collector: {name:?}"),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temporary_names_give_their_target() {
        assert_eq!(temporary_target(".gpus.123.7.tmp"), Some("gpus"));
        assert_eq!(
            temporary_target(".gpu_mem_quota_job_1.prom.123.0.tmp"),
            Some("gpu_mem_quota_job_1.prom")
        );
        assert_eq!(temporary_target(".gpus.tmp"), Some("gpus"));
        assert_eq!(temporary_target(".5.tmp"), Some("5"));
        assert_eq!(temporary_target("gpus.tmp"), None);
        assert_eq!(temporary_target(".gpus"), None);
        assert_eq!(temporary_target("..tmp"), None);
    }
}
