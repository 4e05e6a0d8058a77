//! A directory that only we (root, in production) can change, held open by its descriptor.
//!
//! Root writes and unlinks files in a few directories that an admin names in the policy
//! (`runtime_dir`, `[metrics] textfile_dir`) and in the ones we make inside them. A path checked
//! with `lstat` and then used by name can be swapped for a symlink in between by whoever can write
//! the parent; a descriptor cannot. So each directory is opened `O_DIRECTORY|O_NOFOLLOW`, checked
//! with `fstat` on that descriptor, and everything inside is made relative to it (`mkdirat`,
//! `openat`, `renameat`, `unlinkat`), never by following a symlink.
//!
//! The refusal rule for a directory we are handed: a real directory (not a symlink), owned by us,
//! not writable by group or others, no sticky bit. Such a directory is never chowned or chmodded:
//! it is the admin's, and a shared one (`/tmp`) must stay exactly as it was. Directories we create
//! inside it are ours: their owner and mode are set on the descriptor to what we want.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// An open directory that passed the refusal rule; `path` only names it in messages.
#[derive(Debug)]
pub struct TrustedDir {
    fd: OwnedFd,
    path: PathBuf,
}

/// What is wrong with a directory we were handed, if anything: the reason, for a message.
fn refusal(stat: &libc::stat, owner: u32) -> Option<String> {
    let mode = stat.st_mode & 0o7777;
    if stat.st_mode & libc::S_IFMT != libc::S_IFDIR {
        Some("is not a directory".into())
    } else if stat.st_uid != owner {
        Some(format!(
            "is owned by uid {}, not {}",
            stat.st_uid,
            owner_name(owner)
        ))
    } else if mode & (libc::S_IWGRP | libc::S_IWOTH) != 0 {
        Some(format!("is writable by group or others (mode {mode:04o})"))
    } else if mode & libc::S_ISVTX != 0 {
        Some(format!(
            "has the sticky bit, a shared directory (mode {mode:04o})"
        ))
    } else {
        None
    }
}

fn owner_name(uid: u32) -> String {
    if uid == 0 {
        "root".into()
    } else {
        format!("uid {uid}")
    }
}

/// The error for a refused directory: names it, says why, and that it was left alone.
fn refused(path: &Path, why: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::PermissionDenied,
        format!("{} {why}: refused, left as it is", path.display()),
    )
}

/// An I/O error with the path it concerns in front.
fn at_path(path: &Path, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

/// `O_NOFOLLOW` on a symlink fails with `ELOOP`, or `ENOTDIR` with `O_DIRECTORY`; say what it
/// means when the path is a symlink.
fn open_error(path: &Path, e: io::Error) -> io::Error {
    let maybe_link = matches!(e.raw_os_error(), Some(libc::ELOOP | libc::ENOTDIR));
    if maybe_link && std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink()) {
        refused(path, "is a symlink")
    } else {
        at_path(path, e)
    }
}

fn c_path(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, format!("{path:?} contains NUL")))
}

/// A name inside a directory: one plain component, nothing that walks elsewhere.
fn c_name(name: &str) -> io::Result<CString> {
    if name.is_empty() || name == "." || name == ".." || name.contains(['/', '\0']) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("not a plain file name: {name:?}"),
        ));
    }
    CString::new(name).map_err(|_| io::Error::other("unreachable: NUL checked"))
}

fn fstat(fd: libc::c_int) -> io::Result<libc::stat> {
    // SAFETY: a zeroed stat is a valid buffer for fstat to fill.
    let mut stat: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fd is open; stat is a valid, writable buffer.
    if unsafe { libc::fstat(fd, &mut stat) } == 0 {
        Ok(stat)
    } else {
        Err(io::Error::last_os_error())
    }
}

fn check(ret: libc::c_int) -> io::Result<()> {
    if ret == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

pub(crate) fn euid() -> u32 {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() }
}

fn egid() -> u32 {
    // SAFETY: getegid cannot fail.
    unsafe { libc::getegid() }
}

const DIR_FLAGS: libc::c_int = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC;

impl TrustedDir {
    /// Opens the existing directory `path` and applies the refusal rule; changes nothing.
    pub fn open(path: &Path) -> io::Result<TrustedDir> {
        let c = c_path(path)?;
        // SAFETY: c is a NUL-terminated path; the result is checked.
        let fd = unsafe { libc::open(c.as_ptr(), DIR_FLAGS) };
        if fd < 0 {
            return Err(open_error(path, io::Error::last_os_error()));
        }
        // SAFETY: fd was just opened and is owned by nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let stat = fstat(fd.as_raw_fd()).map_err(|e| at_path(path, e))?;
        if let Some(why) = refusal(&stat, euid()) {
            return Err(refused(path, &why));
        }
        Ok(TrustedDir {
            fd,
            path: path.to_path_buf(),
        })
    }

    /// [`TrustedDir::open`], creating the directory with `mode` (owned by us) when it is missing.
    /// Only the last component is created: its parent must exist.
    pub(crate) fn open_or_create(path: &Path, mode: u32) -> io::Result<TrustedDir> {
        let c = c_path(path)?;
        // SAFETY: c is a NUL-terminated path.
        let created = match check(unsafe { libc::mkdir(c.as_ptr(), 0o700) }) {
            Ok(()) => true,
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => false,
            Err(e) => return Err(at_path(path, e)),
        };
        if !created {
            return TrustedDir::open(path);
        }
        // Made 0700 so nobody else can get in before it has its mode; opened without following a
        // symlink, in case the parent let someone replace it meanwhile (then the check refuses).
        let dir = TrustedDir::open(path)?;
        dir.set_mode(mode)?;
        Ok(dir)
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    pub(crate) fn as_raw_fd(&self) -> libc::c_int {
        self.fd.as_raw_fd()
    }

    /// `self/name` as a directory of ours with `mode`: made when missing; when there, it must be
    /// a real directory owned by us, and its owner (us, our group) and mode are set to ours.
    pub(crate) fn child_dir(&self, name: &str, mode: u32) -> io::Result<TrustedDir> {
        let c = c_name(name)?;
        let path = self.path.join(name);
        // SAFETY: the fd is open; c is a plain NUL-terminated name.
        match check(unsafe { libc::mkdirat(self.as_raw_fd(), c.as_ptr(), 0o700) }) {
            Err(e) if e.raw_os_error() != Some(libc::EEXIST) => return Err(at_path(&path, e)),
            _ => {}
        }
        let child = self.open_child(name)?.ok_or_else(|| {
            at_path(
                &path,
                io::Error::new(io::ErrorKind::NotFound, "removed while being made"),
            )
        })?;
        // SAFETY: the fd is open.
        check(unsafe { libc::fchown(child.as_raw_fd(), euid(), egid()) }).map_err(|e| at_path(&path, e))?;
        child.set_mode(mode)?;
        Ok(child)
    }

    /// Opens the existing directory `self/name` when it is a real directory owned by us;
    /// `Ok(None)` when there is none. Its mode is not checked here: it is ours to set.
    pub(crate) fn open_child(&self, name: &str) -> io::Result<Option<TrustedDir>> {
        let c = c_name(name)?;
        let path = self.path.join(name);
        // SAFETY: the fd is open; c is a plain NUL-terminated name.
        let fd = unsafe { libc::openat(self.as_raw_fd(), c.as_ptr(), DIR_FLAGS) };
        if fd < 0 {
            let e = io::Error::last_os_error();
            return match e.raw_os_error() {
                Some(libc::ENOENT) => Ok(None),
                _ => Err(open_error(&path, e)),
            };
        }
        // SAFETY: fd was just opened and is owned by nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let stat = fstat(fd.as_raw_fd()).map_err(|e| at_path(&path, e))?;
        if stat.st_uid != euid() {
            let why = format!("is owned by uid {}, not {}", stat.st_uid, owner_name(euid()));
            return Err(refused(&path, &why));
        }
        Ok(Some(TrustedDir { fd, path }))
    }

    fn set_mode(&self, mode: u32) -> io::Result<()> {
        // SAFETY: the fd is open.
        check(unsafe { libc::fchmod(self.as_raw_fd(), mode as libc::mode_t) })
            .map_err(|e| at_path(&self.path, e))
    }

    /// Creates `self/name` exclusively (never through a symlink) for writing, with `mode` before
    /// the umask.
    pub(crate) fn create_new_file(&self, name: &str, mode: u32) -> io::Result<File> {
        let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC;
        self.open_file(name, flags, mode)
    }

    /// `openat(self, name, flags, mode)`, `O_NOFOLLOW` always added; errors name the file.
    pub(crate) fn open_file(&self, name: &str, flags: libc::c_int, mode: u32) -> io::Result<File> {
        let c = c_name(name)?;
        let flags = flags | libc::O_NOFOLLOW | libc::O_CLOEXEC;
        // SAFETY: the fd is open; c is a plain NUL-terminated name; the result is checked.
        let fd = unsafe { libc::openat(self.as_raw_fd(), c.as_ptr(), flags, mode as libc::c_uint) };
        if fd < 0 {
            let e = io::Error::last_os_error();
            // Keep the kind (AlreadyExists, NotFound) for callers that act on it.
            return Err(at_path(&self.path.join(name), e));
        }
        // SAFETY: fd was just opened and is owned by nothing else.
        Ok(unsafe { File::from_raw_fd(fd) })
    }

    /// Renames `self/from` over `self/to` (a symlink at `to` is replaced, never followed).
    pub fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        let (c_from, c_to) = (c_name(from)?, c_name(to)?);
        let fd = self.as_raw_fd();
        // SAFETY: the fd is open; both names are plain and NUL-terminated.
        check(unsafe { libc::renameat(fd, c_from.as_ptr(), fd, c_to.as_ptr()) })
            .map_err(|e| at_path(&self.path.join(to), e))
    }

    /// Removes the file `self/name` (a symlink is removed, not followed); `NotFound` is an error.
    pub(crate) fn unlink(&self, name: &str) -> io::Result<()> {
        let c = c_name(name)?;
        // SAFETY: the fd is open; c is plain and NUL-terminated.
        check(unsafe { libc::unlinkat(self.as_raw_fd(), c.as_ptr(), 0) })
            .map_err(|e| at_path(&self.path.join(name), e))
    }

    /// `lstat` of `self/name`, relative to the descriptor; `Ok(None)` when there is none.
    pub(crate) fn stat_child(&self, name: &str) -> io::Result<Option<libc::stat>> {
        let c = c_name(name)?;
        // SAFETY: a zeroed stat is a valid buffer.
        let mut stat: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: the fd is open; c is plain; stat is writable.
        match check(unsafe {
            libc::fstatat(self.as_raw_fd(), c.as_ptr(), &mut stat, libc::AT_SYMLINK_NOFOLLOW)
        }) {
            Ok(()) => Ok(Some(stat)),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(None),
            Err(e) => Err(at_path(&self.path.join(name), e)),
        }
    }

    /// The names in the directory (read through the descriptor, not the path).
    pub fn names(&self) -> io::Result<Vec<String>> {
        // /proc/self/fd/N is the directory itself whatever happened to its path since.
        let by_fd = PathBuf::from(format!("/proc/self/fd/{}", self.as_raw_fd()));
        let listing = std::fs::read_dir(&by_fd).or_else(|_| std::fs::read_dir(&self.path));
        let mut names = Vec::new();
        for dirent in listing.map_err(|e| at_path(&self.path, e))? {
            let dirent = dirent.map_err(|e| at_path(&self.path, e))?;
            if let Some(name) = dirent.file_name().to_str() {
                names.push(name.to_string());
            }
        }
        Ok(names)
    }
}
