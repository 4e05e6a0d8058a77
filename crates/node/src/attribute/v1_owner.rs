//! The kernel's fact that tells Slurm's v1 cgroups from a user's: who owns the files that move
//! processes.
//!
//! On cgroup v1 a process may be moved into a cgroup by anyone who can write its `cgroup.procs`
//! (or `tasks`); there is no common-ancestor rule. Slurm 22.05 chowns a step's (and task's)
//! *directory* to the job's user, which lets the user `mkdir` below it; the kernel then gives the
//! new cgroup's files to the user. Slurm's own levels keep root-owned files that only root can
//! write. So a v1 cgroup is Slurm's when its `cgroup.procs` and `tasks` have the owner of the
//! hierarchy's root cgroup (root on any real host) and are not group/other writable; a user-made
//! name that copies Slurm's (`mkdir job_B/step_0/task_9`) fails here.
//!
//! Comparing with the hierarchy root's owner rather than with uid 0 keeps the fact testable on
//! fixture trees written by an ordinary user (the cgroup root is a parameter, like /proc).

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use super::job_cgroup::v1_mount;

/// Whether the v1 cgroup at `path` (relative to its hierarchy, as in `/proc/PID/cgroup`) of the
/// hierarchy `controllers`, mounted under `cgroup_root`, can only have been filled by the
/// hierarchy's owner. `false` whenever it cannot be told (mount not found, files gone, renamed
/// meanwhile): a claim that cannot be proven Slurm's is treated as the user's. Three `stat` calls.
pub(crate) fn made_by_slurm(cgroup_root: &Path, controllers: &str, path: &str) -> bool {
    let Some(mount) = v1_mount(cgroup_root, controllers) else {
        return false;
    };
    let Some(owner) = fs::metadata(mount.join("cgroup.procs")).ok().map(|m| m.uid()) else {
        return false;
    };
    let dir = mount.join(path.trim_start_matches('/'));
    ["cgroup.procs", "tasks"].iter().all(|file| {
        fs::symlink_metadata(dir.join(file)).is_ok_and(|m| only_owner_writes(m.uid(), m.mode(), owner))
    })
}

/// A file only `owner` can write: owned by it, no write bit for group or others. Pure.
fn only_owner_writes(file_uid: u32, mode: u32, owner: u32) -> bool {
    file_uid == owner && mode & 0o022 == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writers() {
        assert!(only_owner_writes(0, 0o100644, 0));
        assert!(only_owner_writes(0, 0o100444, 0));
        assert!(!only_owner_writes(2001, 0o100644, 0), "the user's mkdir");
        assert!(!only_owner_writes(0, 0o100664, 0), "group writable");
        assert!(!only_owner_writes(0, 0o100646, 0), "world writable");
    }
}
