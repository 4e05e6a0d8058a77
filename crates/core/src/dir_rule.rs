//! The one rule for a directory root is handed (`runtime_dir`, `[metrics] textfile_dir`): a real
//! directory (not a symlink), owned by its user, not writable by group or others, no sticky bit.
//! gmq-node's `trusted_dir` applies it to what it opens; `check-config` to the policy's
//! directories (`config::check_directories_here`). Pure: it judges what it is given.

/// What the refusal rule reads of a file: its type and permission bits (`st_mode`) and its owner
/// (from `fstat` on a descriptor, or from std's metadata).
#[derive(Debug, Clone, Copy)]
pub struct Inode {
    pub mode: u32,
    pub uid: u32,
}

impl From<&std::fs::Metadata> for Inode {
    fn from(meta: &std::fs::Metadata) -> Inode {
        use std::os::unix::fs::MetadataExt;
        Inode {
            mode: meta.mode(),
            uid: meta.uid(),
        }
    }
}

/// What is wrong with a directory we were handed, if anything: the reason, for a message. The
/// one rule: `check-config` judges the policy's directories by it too, for root (`owner` 0).
pub fn refusal(inode: Inode, owner: u32) -> Option<String> {
    let mode = inode.mode & 0o7777;
    if inode.mode & libc::S_IFMT != libc::S_IFDIR {
        Some("is not a directory".into())
    } else if let Some(why) = not_owned_by(inode.uid, owner) {
        Some(why)
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

pub fn not_owned_by(uid: u32, owner: u32) -> Option<String> {
    (uid != owner).then(|| format!("is owned by uid {uid}, not {}", owner_name(owner)))
}

fn owner_name(uid: u32) -> String {
    if uid == 0 {
        "root".into()
    } else {
        format!("uid {uid}")
    }
}
