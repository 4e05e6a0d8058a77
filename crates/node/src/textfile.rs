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

/// Who may read the file once it is in place. The file is always ours (root's): a user is given
/// read access through an ACL entry, never the inode. An owner could chmod the file, keep it open
/// for writing after we renamed a new one over it, and fill the filesystem through the unlinked
/// inode (review G4); a reader named in an ACL can do none of that.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Access {
    /// The file's mode; with a `reader`, the mode its ACL gives it (0440), set by the ACL.
    pub mode: u32,
    /// A user who may read the file besides its owner (the job's status file).
    pub reader: Option<u32>,
}

impl Access {
    /// Readable by node_exporter (or the plugin in the job's task) whatever user it runs as.
    const EVERYONE: Access = Access {
        mode: 0o644,
        reader: None,
    };
    /// Only root: the record, the registry.
    pub const ROOT_ONLY: Access = Access {
        mode: 0o600,
        reader: None,
    };

    /// Ours, and readable by `uid` too, through the ACL entry `user:UID:r--`. The mode shows 0440:
    /// with an ACL, the group bits are the mask, and the owning group (root's) has no entry.
    pub fn readable_by(uid: u32) -> Access {
        Access {
            mode: 0o440,
            reader: Some(uid),
        }
    }
}

/// The temporary files' counter; with the pid it makes every temporary name unique.
static NEXT_TEMPORARY: AtomicU64 = AtomicU64::new(0);

/// Rewrites `dir/name` (0644) from what it holds now (empty when it is not there), holding a lock
/// that every other caller for the same file takes too: `dir/name.lock`, an empty root-only file
/// that stays. For a file several watchdogs of a node update (the node's event counters).
pub fn update_locked(dir: &Path, name: &str, update: impl FnOnce(&str) -> String) -> io::Result<()> {
    check_name(name)?;
    let trusted = TrustedDir::open(dir)?;
    let lock = trusted.open_file(
        &format!("{name}.lock"),
        nix::fcntl::OFlag::O_RDWR | nix::fcntl::OFlag::O_CREAT,
        0o600,
    )?;
    // Released when `lock` closes, on every path out.
    lock.lock()?;
    let old = match trusted.open_file(name, nix::fcntl::OFlag::O_RDONLY, 0) {
        Ok(mut file) => {
            let mut text = String::new();
            io::Read::read_to_string(&mut file, &mut text)?;
            text
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(e),
    };
    write_atomically(dir, name, &update(&old))
}

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
pub fn remove_in(dir: &TrustedDir, name: &str) -> io::Result<()> {
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
    match access.reader {
        // The ACL sets the mode bits too (the group bits become its mask).
        Some(uid) => set_reader_acl(&file, uid)?,
        // The creation mode was 0600 filtered by the umask; set it exactly, on the descriptor.
        None => file.set_permissions(std::fs::Permissions::from_mode(access.mode))?,
    }
    // No fsync: the file is rewritten every interval and means nothing after a crash.
    dir.rename(temp, target)
}

/// Gives `file` the access ACL `user::rw- user:UID:r-- group::--- mask::r-- other::---` (mode
/// 0440 but readable by `uid`), on the descriptor, in the kernel's `system.posix_acl_access` form:
/// a version word, then (tag, permissions, id) entries sorted by tag and id (`posix_acl_xattr.h`).
fn set_reader_acl(file: &std::fs::File, uid: u32) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    const VERSION: u32 = 2;
    const USER_OBJ: u16 = 0x01;
    const USER: u16 = 0x02;
    const GROUP_OBJ: u16 = 0x04;
    const MASK: u16 = 0x10;
    const OTHER: u16 = 0x20;
    const READ: u16 = 4;
    const NO_ID: u32 = u32::MAX;
    let entries = [
        (USER_OBJ, READ, NO_ID),
        (USER, READ, uid),
        (GROUP_OBJ, 0, NO_ID),
        (MASK, READ, NO_ID),
        (OTHER, 0, NO_ID),
    ];
    let mut value = VERSION.to_le_bytes().to_vec();
    for (tag, perm, id) in entries {
        value.extend_from_slice(&tag.to_le_bytes());
        value.extend_from_slice(&perm.to_le_bytes());
        value.extend_from_slice(&id.to_le_bytes());
    }
    // SAFETY: the name is a NUL-terminated literal and `value` outlives the call.
    let rc = unsafe {
        libc::fsetxattr(
            file.as_raw_fd(),
            c"system.posix_acl_access".as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    if rc == 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::EOPNOTSUPP) {
        return Err(io::Error::new(
            e.kind(),
            format!("cannot give uid {uid} read access: the filesystem has no POSIX ACLs ({e})"),
        ));
    }
    Err(e)
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

    #[test]
    fn a_reader_gets_an_acl_entry_and_never_the_file() {
        let scratch = tempfile::Builder::new()
            .prefix("gmq-textfile-acl-")
            .tempdir()
            .unwrap();
        let dir = scratch.path();
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        write_atomically_as(dir, "status.json", "{}", Access::readable_by(4242)).unwrap();
        let path = dir.join("status.json");
        let meta = std::fs::metadata(&path).unwrap();
        use std::os::unix::fs::MetadataExt;
        assert_eq!(meta.uid(), euid(), "the file stays ours");
        assert_eq!(meta.mode() & 0o7777, 0o440);
        let mut acl = [0u8; 64];
        let name = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: both buffers are valid for the lengths given.
        let n = unsafe {
            libc::getxattr(
                name.as_ptr(),
                c"system.posix_acl_access".as_ptr(),
                acl.as_mut_ptr().cast(),
                acl.len(),
            )
        };
        assert_eq!(n, 4 + 5 * 8);
        let named_user = &acl[4 + 8..4 + 16];
        assert_eq!(named_user, [2, 0, 4, 0, 0x92, 0x10, 0, 0]);
    }
}
