//! A directory that only we (root, in production) can change, held open by its descriptor.
//!
//! Root writes and unlinks files in a few directories that an admin names in the policy
//! (`runtime_dir`, `[metrics] textfile_dir`) and in the ones we make inside them. A path checked
//! with `lstat` and then used by name can be swapped for a symlink in between by whoever can write
//! the parent; a descriptor cannot. So each directory is opened `O_DIRECTORY|O_NOFOLLOW`, checked
//! with `fstat` on that descriptor, and everything inside is made relative to it (`mkdirat`,
//! `openat`, `renameat`, `unlinkat`), never by following a symlink. The calls are nix's, on
//! borrowed descriptors: nothing here is `unsafe`.
//!
//! The refusal rule for a directory we are handed ([`gmq_core::dir_rule`]): a real directory (not
//! a symlink), owned by us, not writable by group or others, no sticky bit. Such a directory is never chowned or chmodded:
//! it is the admin's, and a shared one (`/tmp`) must stay exactly as it was. Directories we create
//! inside it are ours: their owner and mode are set on the descriptor to what we want.

use std::fs::File;
use std::io;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use nix::dir::Dir;
use nix::errno::Errno;
use nix::fcntl::{self, AtFlags, OFlag};
use nix::sys::stat::{self, FileStat, Mode};
use nix::unistd::{self, UnlinkatFlags};

use gmq_core::dir_rule::{not_owned_by, refusal, Inode};

/// An open directory that passed the refusal rule; `path` only names it in messages.
#[derive(Debug)]
pub struct TrustedDir {
    fd: OwnedFd,
    path: PathBuf,
}

/// What the refusal rule reads of a file, from `fstat` on its descriptor.
fn inode_of(stat: &FileStat) -> Inode {
    Inode {
        mode: stat.st_mode,
        uid: stat.st_uid,
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
fn at_path(path: &Path, e: impl Into<io::Error>) -> io::Error {
    let e = e.into();
    io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

/// `O_NOFOLLOW` on a symlink fails with `ELOOP`, or `ENOTDIR` with `O_DIRECTORY`; say what it
/// means when the path is a symlink.
fn open_error(path: &Path, e: Errno) -> io::Error {
    let maybe_link = matches!(e, Errno::ELOOP | Errno::ENOTDIR);
    if maybe_link && std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink()) {
        refused(path, "is a symlink")
    } else {
        at_path(path, e)
    }
}

/// `path`, refused with our own message when it holds a NUL (nix would say only `EINVAL`).
fn nul_free(path: &Path) -> io::Result<&Path> {
    if path.as_os_str().as_encoded_bytes().contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{path:?} contains NUL"),
        ));
    }
    Ok(path)
}

/// A name inside a directory: one plain component, nothing that walks elsewhere.
fn plain_name(name: &str) -> io::Result<&str> {
    if name.is_empty() || name == "." || name == ".." || name.contains(['/', '\0']) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("not a plain file name: {name:?}"),
        ));
    }
    Ok(name)
}

pub fn euid() -> u32 {
    unistd::geteuid().as_raw()
}

const DIR_FLAGS: OFlag = OFlag::O_RDONLY
    .union(OFlag::O_DIRECTORY)
    .union(OFlag::O_NOFOLLOW)
    .union(OFlag::O_CLOEXEC);

impl TrustedDir {
    /// Opens the existing directory `path` and applies the refusal rule; changes nothing.
    pub fn open(path: &Path) -> io::Result<TrustedDir> {
        let fd = fcntl::open(nul_free(path)?, DIR_FLAGS, Mode::empty()).map_err(|e| open_error(path, e))?;
        let stat = stat::fstat(&fd).map_err(|e| at_path(path, e))?;
        if let Some(why) = refusal(inode_of(&stat), euid()) {
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
        let created = match unistd::mkdir(nul_free(path)?, Mode::S_IRWXU) {
            Ok(()) => true,
            Err(Errno::EEXIST) => false,
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

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `self/name` as a directory of ours with `mode`: made when missing; when there, it must be
    /// a real directory owned by us, and its owner (us, our group) and mode are set to ours.
    pub(crate) fn child_dir(&self, name: &str, mode: u32) -> io::Result<TrustedDir> {
        let name = plain_name(name)?;
        let path = self.path.join(name);
        match stat::mkdirat(&self.fd, name, Mode::S_IRWXU) {
            Ok(()) | Err(Errno::EEXIST) => {}
            Err(e) => return Err(at_path(&path, e)),
        }
        let child = self.open_child(name)?.ok_or_else(|| {
            at_path(
                &path,
                io::Error::new(io::ErrorKind::NotFound, "removed while being made"),
            )
        })?;
        unistd::fchown(&child.fd, Some(unistd::geteuid()), Some(unistd::getegid()))
            .map_err(|e| at_path(&path, e))?;
        child.set_mode(mode)?;
        Ok(child)
    }

    /// Opens the existing directory `self/name` when it is a real directory owned by us;
    /// `Ok(None)` when there is none. Its mode is not checked here: it is ours to set.
    pub(crate) fn open_child(&self, name: &str) -> io::Result<Option<TrustedDir>> {
        let name = plain_name(name)?;
        let path = self.path.join(name);
        let fd = match fcntl::openat(&self.fd, name, DIR_FLAGS, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::ENOENT) => return Ok(None),
            Err(e) => return Err(open_error(&path, e)),
        };
        let stat = stat::fstat(&fd).map_err(|e| at_path(&path, e))?;
        if let Some(why) = not_owned_by(stat.st_uid, euid()) {
            return Err(refused(&path, &why));
        }
        Ok(Some(TrustedDir { fd, path }))
    }

    fn set_mode(&self, mode: u32) -> io::Result<()> {
        stat::fchmod(&self.fd, Mode::from_bits_retain(mode)).map_err(|e| at_path(&self.path, e))
    }

    /// Creates `self/name` exclusively (never through a symlink) for writing, with `mode` before
    /// the umask.
    pub(crate) fn create_new_file(&self, name: &str, mode: u32) -> io::Result<File> {
        let flags = OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL;
        self.open_file(name, flags, mode)
    }

    /// `openat(self, name, flags, mode)`, `O_NOFOLLOW` and `O_CLOEXEC` always added; errors name
    /// the file.
    pub fn open_file(&self, name: &str, flags: OFlag, mode: u32) -> io::Result<File> {
        let name = plain_name(name)?;
        let flags = flags | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        // Keep the kind (AlreadyExists, NotFound) for callers that act on it.
        fcntl::openat(&self.fd, name, flags, Mode::from_bits_retain(mode))
            .map(File::from)
            .map_err(|e| at_path(&self.path.join(name), e))
    }

    /// Renames `self/from` over `self/to` (a symlink at `to` is replaced, never followed).
    pub fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        let (from, to) = (plain_name(from)?, plain_name(to)?);
        fcntl::renameat(&self.fd, from, &self.fd, to).map_err(|e| at_path(&self.path.join(to), e))
    }

    /// Removes the file `self/name` (a symlink is removed, not followed); `NotFound` is an error.
    pub(crate) fn unlink(&self, name: &str) -> io::Result<()> {
        let name = plain_name(name)?;
        unistd::unlinkat(&self.fd, name, UnlinkatFlags::NoRemoveDir)
            .map_err(|e| at_path(&self.path.join(name), e))
    }

    /// `lstat` of `self/name`, relative to the descriptor; `Ok(None)` when there is none.
    pub fn stat_child(&self, name: &str) -> io::Result<Option<FileStat>> {
        let name = plain_name(name)?;
        match stat::fstatat(&self.fd, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(stat) => Ok(Some(stat)),
            Err(Errno::ENOENT) => Ok(None),
            Err(e) => Err(at_path(&self.path.join(name), e)),
        }
    }

    /// The names in the directory, read through the descriptor, not the path: `.` opened relative
    /// to it is the directory itself whatever happened to its path since.
    pub fn names(&self) -> io::Result<Vec<String>> {
        let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
        let mut listing =
            Dir::openat(&self.fd, ".", flags, Mode::empty()).map_err(|e| at_path(&self.path, e))?;
        let mut names = Vec::new();
        for dirent in listing.iter() {
            let dirent = dirent.map_err(|e| at_path(&self.path, e))?;
            let Ok(name) = dirent.file_name().to_str() else {
                continue;
            };
            if name != "." && name != ".." {
                names.push(name.to_string());
            }
        }
        Ok(names)
    }
}
