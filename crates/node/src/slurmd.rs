//! The node's slurmd, as the job prolog finds it and the watchdog keeps an eye on it.
//!
//! slurmd runs the job prolog (`slurmstepd spank prolog`) as its own child, so the prolog's parent
//! is the slurmd that will also run the job's epilog, the one thing that ends a watchdog when the
//! job leaves the node. If that slurmd dies while the job runs, no epilog comes: the job's tasks
//! and its watchdog run on, and slurmctld, once `SlurmdTimeout` has passed, marks the node down
//! and requeues or ends the job without this node hearing of it. The watchdog notices the death
//! here, by one read of `/proc/PID/stat` (`gmq_core::launch::SLURMD_VAR` carries the identity from
//! the prolog), and only then asks slurmctld about its run.

use std::path::Path;

use crate::attribute::procfs::{read_stat, read_state};
use crate::attribute::{identify, same_process, ProcessIdentity};

/// The slurmd running this process (a job prolog): its parent, when that is a process named
/// `slurmd`. `None` elsewhere (a prolog run by something else, a test).
pub fn prolog_parent(proc_root: &Path) -> Option<ProcessIdentity> {
    let parent = std::os::unix::process::parent_id();
    let stat = read_stat(proc_root, parent)?;
    (stat.comm == "slurmd").then_some(())?;
    identify(proc_root, parent)
}

/// The node's slurmd, looked for once the one the prolog named is gone (a slurmd restarted on
/// purpose runs on, and will run the job's epilog): the one process named `slurmd` whose parent is
/// not a slurmd (slurmd's own children are named so until they exec) and which shares this
/// process's mount namespace (a node's, where several share a machine as in the multi-node lab).
/// `None` where there is none, or more than one (a multiple-slurmd build): no telling which.
pub fn find(proc_root: &Path) -> Option<ProcessIdentity> {
    let own_mounts = std::fs::read_link(proc_root.join("self/ns/mnt")).ok();
    let mut found = None;
    for entry in std::fs::read_dir(proc_root).ok()?.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let Some(stat) = read_stat(proc_root, pid).filter(|s| s.comm == "slurmd") else {
            continue;
        };
        if read_stat(proc_root, stat.ppid).is_some_and(|parent| parent.comm == "slurmd") {
            continue;
        }
        let mounts = std::fs::read_link(entry.path().join("ns/mnt")).ok();
        if mounts != own_mounts || matches!(read_state(proc_root, pid), Some(b'Z' | b'X')) {
            continue;
        }
        if found.is_some() {
            return None;
        }
        found = Some(ProcessIdentity {
            pid,
            start_time: stat.start_time,
        });
    }
    found
}

/// Whether `slurmd` is still running: the same process (its pid not reused) and not a zombie.
pub fn alive(proc_root: &Path, slurmd: &ProcessIdentity) -> bool {
    same_process(proc_root, slurmd) && !matches!(read_state(proc_root, slurmd.pid), Some(b'Z' | b'X'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    #[test]
    fn the_one_slurmd_in_this_mount_namespace_is_found() {
        let root = tempfile::Builder::new()
            .prefix("gmq-slurmd-find-")
            .tempdir()
            .unwrap();
        let dir = root.path();
        let process = |pid: u32, comm: &str, ppid: u32, state: char, mounts: &str| {
            fs::create_dir_all(dir.join(format!("{pid}/ns"))).unwrap();
            let mut fields = vec![state.to_string(), ppid.to_string()];
            fields.extend((5..22).map(|_| "0".to_string()));
            fields.push((pid * 10).to_string());
            fs::write(
                dir.join(format!("{pid}/stat")),
                format!("{pid} ({comm}) {}\n", fields.join(" ")),
            )
            .unwrap();
            let _ = fs::remove_file(dir.join(format!("{pid}/ns/mnt")));
            std::os::unix::fs::symlink(mounts, dir.join(format!("{pid}/ns/mnt"))).unwrap();
        };
        std::os::unix::fs::symlink("7", dir.join("self")).unwrap();
        process(7, "gpu-mem-quota", 1, 'S', "mnt:[100]");
        assert_eq!(find(dir), None, "no slurmd");
        // Another node's slurmd (another mount namespace), a slurmd's child, a dead one.
        process(20, "slurmd", 1, 'S', "mnt:[200]");
        process(31, "slurmd", 20, 'S', "mnt:[200]");
        process(40, "slurmd", 1, 'Z', "mnt:[100]");
        assert_eq!(find(dir), None);
        process(30, "slurmd", 1, 'S', "mnt:[100]");
        process(32, "slurmd", 30, 'R', "mnt:[100]");
        assert_eq!(
            find(dir),
            Some(ProcessIdentity {
                pid: 30,
                start_time: 300
            })
        );
        // Two of them: no telling which.
        process(50, "slurmd", 1, 'S', "mnt:[100]");
        assert_eq!(find(dir), None);
    }

    fn proc_tree(name: &str, stat: &str) -> tempfile::TempDir {
        let root = tempfile::Builder::new()
            .prefix(&format!("gmq-slurmd-{name}-"))
            .tempdir()
            .unwrap();
        fs::create_dir_all(root.path().join("42")).unwrap();
        fs::write(root.path().join("42/stat"), stat).unwrap();
        root
    }

    fn stat_line(state: char, start: u64) -> String {
        let mut fields = vec![state.to_string(), "1".into()];
        fields.extend((5..22).map(|_| "0".to_string()));
        fields.push(start.to_string());
        format!("42 (slurmd) {}\n", fields.join(" "))
    }

    #[test]
    fn slurmd_is_alive_while_its_pid_is_its_own_and_not_a_zombie() {
        let root = proc_tree("alive", &stat_line('S', 1000));
        let slurmd = ProcessIdentity {
            pid: 42,
            start_time: 1000,
        };
        assert!(alive(root.path(), &slurmd));
        // Killed, not yet reaped.
        fs::write(root.path().join("42/stat"), stat_line('Z', 1000)).unwrap();
        assert!(!alive(root.path(), &slurmd));
        // Its pid reused by a later process, or gone.
        fs::write(root.path().join("42/stat"), stat_line('S', 2000)).unwrap();
        assert!(!alive(root.path(), &slurmd));
        fs::remove_dir_all(root.path().join("42")).unwrap();
        assert!(!alive(root.path(), &slurmd));
    }
}
