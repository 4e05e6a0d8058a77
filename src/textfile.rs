//! Writing a file that another process reads while we write it (node_exporter's textfile
//! collector): the reader sees the old file or the new one, never half of one.
//!
//! The text goes to a hidden temporary file beside the target, created exclusively and without
//! following symlinks, then is renamed over the target (rename replaces a symlink, never writes
//! through it). The collector ignores the temporary file: it reads only `*.prom`. One writer per file
//! is assumed (one watchdog per job per node); a temporary file left by a crashed writer is removed.

use std::fs::{self, File, OpenOptions, Permissions};
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// Readable by node_exporter whatever user it runs as; written only by us.
const MODE: u32 = 0o644;

/// Replaces `dir/name` with `text`, atomically. `name` must be a plain file name.
pub fn write_atomically(dir: &Path, name: &str, text: &str) -> io::Result<()> {
    check_name(name)?;
    let temp = dir.join(format!(".{name}.tmp"));
    let mut file = match create_exclusive(&temp) {
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            // Left by a writer that died between create and rename (or planted: unlink never follows).
            fs::remove_file(&temp)?;
            create_exclusive(&temp)?
        }
        other => other?,
    };
    let written = write_and_rename(&mut file, text, &temp, &dir.join(name));
    if written.is_err() {
        let _ = fs::remove_file(&temp);
    }
    written
}

/// Removes `dir/name`; a file that is already gone is fine.
pub fn remove(dir: &Path, name: &str) -> io::Result<()> {
    check_name(name)?;
    match fs::remove_file(dir.join(name)) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

fn create_exclusive(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(MODE)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
}

fn write_and_rename(file: &mut File, text: &str, temp: &Path, target: &Path) -> io::Result<()> {
    file.write_all(text.as_bytes())?;
    // The creation mode was filtered by the umask; set it exactly.
    file.set_permissions(Permissions::from_mode(MODE))?;
    // No fsync: the file is rewritten every interval and means nothing after a crash.
    fs::rename(temp, target)
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
