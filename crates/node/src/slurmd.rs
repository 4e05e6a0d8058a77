//! The node's slurmd, as the job prolog finds it and the watchdog keeps an eye on it.
//!
//! slurmd runs the job prolog (`slurmstepd spank prolog`) as its own child, so the prolog's parent
//! is the slurmd that will also run the job's epilog, the one thing that ends a watchdog when the
//! job leaves the node. If that slurmd dies while the job runs, no epilog comes: the job's tasks
//! and its watchdog run on, and slurmctld, once `SlurmdTimeout` has passed, marks the node down
//! and requeues or ends the job without this node hearing of it. The watchdog notices the death
//! here, by one read of `/proc/PID/stat` (`gmq_core::launch::SLURMD_VAR` carries the identity from
//! the prolog), and only then asks slurmctld about its run.
//!
//! A slurmd restarted on purpose (or re-forked by `scontrol reconfigure`, 24.11 on) is another
//! process, found again by [`find`]: by what the prolog saw of the first one (its executable and
//! its mount namespace, [`SlurmdMarks`]) and by its owner, root. Never by its name alone, which
//! any user can give a process (review K6: `cp /bin/sleep ~/slurmd; ~/slurmd 1d &`).

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use crate::attribute::procfs::{read_real_uid, read_stat, read_state};
use crate::attribute::{identify, same_process, ProcessIdentity};
use gmq_core::launch::{FileId, Slurmd, SlurmdMarks};

/// The slurmd running this process (a job prolog): its parent, when that is a process named
/// `slurmd`, with its marks where they can be read. `None` elsewhere (a prolog run by something
/// else, a test).
pub fn prolog_parent(proc_root: &Path) -> Option<Slurmd> {
    let parent = std::os::unix::process::parent_id();
    let stat = read_stat(proc_root, parent)?;
    (stat.comm == "slurmd").then_some(())?;
    let ProcessIdentity { pid, start_time } = identify(proc_root, parent)?;
    let seen = look_at(proc_root, parent);
    let marks = match (seen.mount_ns, seen.exe, seen.exe_path) {
        (Some(mount_ns), Some(exe), Some(exe_path)) => Some(SlurmdMarks {
            mount_ns,
            exe,
            exe_path,
        }),
        _ => None,
    };
    Some(Slurmd {
        pid,
        start_time,
        marks,
    })
}

/// What tells the node's slurmd from other processes named so: the mount namespace it runs in
/// and, where the prolog could see it, its executable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wanted {
    /// `None`: not known (no candidate is taken).
    pub mount_ns: Option<u64>,
    /// The executable file and its path; `None`: a value from an older plugin, which named none
    /// (then root's processes named `slurmd` are taken).
    pub exe: Option<(FileId, String)>,
}

impl Wanted {
    /// From the prolog's word: its marks, or for an older value pid 1's mount namespace (the
    /// node's, never the watchdog's own, which may be a job's: `job_container/tmpfs`).
    pub fn from_prolog(proc_root: &Path, slurmd: &Slurmd) -> Wanted {
        match &slurmd.marks {
            Some(m) => Wanted {
                mount_ns: Some(m.mount_ns),
                exe: Some((m.exe, m.exe_path.clone())),
            },
            None => Wanted {
                mount_ns: mount_ns(proc_root, 1),
                exe: None,
            },
        }
    }
}

/// What `/proc` says of one process that [`find`] looks at.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Seen {
    /// The real uid.
    pub uid: Option<u32>,
    pub mount_ns: Option<u64>,
    pub exe: Option<FileId>,
    pub exe_path: Option<String>,
    /// A zombie, or dead.
    pub ended: bool,
}

/// Whether `seen` (a process named `slurmd`) is the node's slurmd as `wanted` describes it: root's
/// (a user's process is never taken, whatever it is named or runs), alive, in the node's mount
/// namespace, and running the same executable: the same file, or whatever is installed at the
/// same place now.
pub fn is_the_nodes_slurmd(seen: &Seen, wanted: &Wanted) -> bool {
    let same_exe = match &wanted.exe {
        None => true,
        Some((file, path)) => seen.exe == Some(*file) || seen.exe_path.as_deref() == Some(path.as_str()),
    };
    seen.uid == Some(0)
        && !seen.ended
        && wanted.mount_ns.is_some()
        && seen.mount_ns == wanted.mount_ns
        && same_exe
}

/// Reads what [`is_the_nodes_slurmd`] decides with.
fn look_at(proc_root: &Path, pid: u32) -> Seen {
    let exe = proc_root.join(pid.to_string()).join("exe");
    Seen {
        uid: read_real_uid(proc_root, pid),
        mount_ns: mount_ns(proc_root, pid),
        // `/proc/PID/exe` leads to the file even where it was deleted or lies in another root.
        exe: std::fs::metadata(&exe).ok().map(|m| FileId {
            dev: m.dev(),
            ino: m.ino(),
        }),
        exe_path: std::fs::read_link(&exe)
            .ok()
            .and_then(|p| p.to_str().map(str::to_string)),
        ended: matches!(read_state(proc_root, pid), Some(b'Z' | b'X') | None),
    }
}

/// The inode of the process's mount namespace (`mnt:[4026531841]`).
fn mount_ns(proc_root: &Path, pid: u32) -> Option<u64> {
    let link = std::fs::read_link(proc_root.join(pid.to_string()).join("ns/mnt")).ok()?;
    link.to_str()?
        .strip_prefix("mnt:[")?
        .strip_suffix(']')?
        .parse()
        .ok()
}

/// The node's slurmd, looked for once the one the prolog named is gone (a slurmd restarted on
/// purpose runs on, and will run the job's epilog): the one process named `slurmd` that
/// [`is_the_nodes_slurmd`] takes and whose parent it does not take too (slurmd's own children are
/// named so until they exec; 24.11's reconfigure forks the new slurmd from the old). `None` where
/// there is none, or more than one (a multiple-slurmd build): no telling which.
pub fn find(proc_root: &Path, wanted: &Wanted) -> Option<ProcessIdentity> {
    let is_slurmd = |pid: u32| {
        read_stat(proc_root, pid)
            .filter(|s| s.comm == "slurmd")
            .filter(|_| is_the_nodes_slurmd(&look_at(proc_root, pid), wanted))
    };
    let mut found = None;
    for entry in std::fs::read_dir(proc_root).ok()?.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let Some(stat) = is_slurmd(pid) else {
            continue;
        };
        if stat.ppid != pid && is_slurmd(stat.ppid).is_some() {
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
    use std::os::unix::fs::symlink;
    use std::path::PathBuf;

    const NODE_NS: u64 = 4026531841;
    const OTHER_NS: u64 = 4026532900;

    #[test]
    fn only_roots_live_slurmd_with_the_prologs_executable_in_the_nodes_namespace_is_taken() {
        let slurmd = FileId { dev: 2049, ino: 786 };
        let sleep = FileId { dev: 2049, ino: 913 };
        let path = "/usr/sbin/slurmd".to_string();
        let real = Seen {
            uid: Some(0),
            mount_ns: Some(NODE_NS),
            exe: Some(slurmd),
            exe_path: Some(path.clone()),
            ended: false,
        };
        let marked = Wanted {
            mount_ns: Some(NODE_NS),
            exe: Some((slurmd, path.clone())),
        };
        let unmarked = Wanted {
            mount_ns: Some(NODE_NS),
            exe: None,
        };
        let with = |f: &dyn Fn(&mut Seen)| {
            let mut seen = real.clone();
            f(&mut seen);
            seen
        };
        let cases: Vec<(&str, Seen, bool, bool)> = vec![
            // (what, the process, taken by a marked prolog value, taken by an older value)
            ("the real slurmd", real.clone(), true, true),
            (
                "a user's copy of sleep named slurmd",
                with(&|s| {
                    s.uid = Some(2001);
                    s.exe = Some(sleep);
                    s.exe_path = Some("/home/u/slurmd".into());
                }),
                false,
                false,
            ),
            (
                "a user running the real slurmd binary",
                with(&|s| s.uid = Some(2001)),
                false,
                false,
            ),
            (
                "root's copy of sleep named slurmd",
                with(&|s| {
                    s.exe = Some(sleep);
                    s.exe_path = Some("/root/slurmd".into());
                }),
                false,
                true,
            ),
            (
                "slurmd installed anew at its place (upgrade, restart)",
                with(&|s| s.exe = Some(FileId { dev: 2049, ino: 999 })),
                true,
                true,
            ),
            (
                "the same file, run from another path (a bind mount, a hard link)",
                with(&|s| s.exe_path = Some("/opt/slurm/sbin/slurmd".into())),
                true,
                true,
            ),
            (
                "another node's slurmd (another mount namespace)",
                with(&|s| s.mount_ns = Some(OTHER_NS)),
                false,
                false,
            ),
            ("a zombie", with(&|s| s.ended = true), false, false),
            ("uid unreadable", with(&|s| s.uid = None), false, false),
            ("namespace unreadable", with(&|s| s.mount_ns = None), false, false),
            (
                "executable unreadable",
                with(&|s| {
                    s.exe = None;
                    s.exe_path = None;
                }),
                false,
                true,
            ),
        ];
        for (what, seen, by_marked, by_unmarked) in cases {
            assert_eq!(is_the_nodes_slurmd(&seen, &marked), by_marked, "{what} (marked)");
            assert_eq!(
                is_the_nodes_slurmd(&seen, &unmarked),
                by_unmarked,
                "{what} (older value)"
            );
        }
        // No namespace known: nothing is taken.
        let lost = Wanted {
            mount_ns: None,
            exe: None,
        };
        assert!(!is_the_nodes_slurmd(&real, &lost));
    }

    /// The `linuxproc` fixture (pid 1 init, pid 100 slurmd, a job's stepds and tasks: see its
    /// README), copied with what [`find`] reads beside it: every process in the node's mount
    /// namespace, and slurmd's executable at `usr/sbin/slurmd` under the copy's `bin` directory.
    struct Node {
        dir: tempfile::TempDir,
        /// How many installed files were replaced (kept aside, see `install`).
        replaced: std::cell::Cell<u32>,
    }

    impl Node {
        fn new() -> Node {
            let dir = tempfile::Builder::new()
                .prefix("gmq-slurmd-find-")
                .tempdir()
                .unwrap();
            let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/proc/linuxproc");
            for entry in fs::read_dir(&fixture).unwrap().flatten() {
                let to = dir.path().join("proc").join(entry.file_name());
                fs::create_dir_all(&to).unwrap();
                for file in fs::read_dir(entry.path()).unwrap().flatten() {
                    fs::copy(file.path(), to.join(file.file_name())).unwrap();
                }
            }
            let node = Node {
                dir,
                replaced: std::cell::Cell::new(0),
            };
            for pid in node.pids() {
                node.namespace(pid, NODE_NS);
            }
            node.install("usr/sbin/slurmd");
            node.runs(100, "usr/sbin/slurmd");
            node
        }

        fn proc(&self) -> PathBuf {
            self.dir.path().join("proc")
        }

        fn pids(&self) -> Vec<u32> {
            fs::read_dir(self.proc())
                .unwrap()
                .flatten()
                .filter_map(|e| e.file_name().to_str()?.parse().ok())
                .collect()
        }

        /// A new file at `path` under `bin` (a new inode each time).
        fn install(&self, path: &str) -> PathBuf {
            let file = self.dir.path().join("bin").join(path);
            fs::create_dir_all(file.parent().unwrap()).unwrap();
            // The file it replaces is kept aside, not removed: a freed inode may be the next
            // file's, and the test would then take another program for slurmd's executable.
            if file.exists() {
                let kept = self.dir.path().join(format!("replaced-{}", self.replaced.get()));
                self.replaced.set(self.replaced.get() + 1);
                fs::rename(&file, kept).unwrap();
            }
            fs::write(&file, path).unwrap();
            file
        }

        fn runs(&self, pid: u32, path: &str) {
            let exe = self.proc().join(format!("{pid}/exe"));
            let _ = fs::remove_file(&exe);
            symlink(self.dir.path().join("bin").join(path), exe).unwrap();
        }

        fn namespace(&self, pid: u32, ns: u64) {
            let link = self.proc().join(format!("{pid}/ns/mnt"));
            fs::create_dir_all(link.parent().unwrap()).unwrap();
            let _ = fs::remove_file(&link);
            symlink(format!("mnt:[{ns}]"), link).unwrap();
        }

        /// A process `pid` named `comm`, child of `ppid`, of `uid`, running `exe`, in `ns`.
        fn process(&self, pid: u32, comm: &str, ppid: u32, uid: u32, exe: &str, ns: u64) {
            let dir = self.proc().join(pid.to_string());
            fs::create_dir_all(&dir).unwrap();
            let mut fields = vec!["S".to_string(), ppid.to_string()];
            fields.extend((5..22).map(|_| "0".to_string()));
            fields.push((pid * 10).to_string());
            fs::write(dir.join("stat"), format!("{pid} ({comm}) {}\n", fields.join(" "))).unwrap();
            fs::write(
                dir.join("status"),
                format!("Name:\t{comm}\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n"),
            )
            .unwrap();
            self.runs(pid, exe);
            self.namespace(pid, ns);
        }

        fn prolog_saw(&self) -> Slurmd {
            let exe = self.proc().join("100/exe");
            let meta = fs::metadata(&exe).unwrap();
            Slurmd {
                pid: 100,
                start_time: 0,
                marks: Some(SlurmdMarks {
                    mount_ns: NODE_NS,
                    exe: FileId {
                        dev: meta.dev(),
                        ino: meta.ino(),
                    },
                    exe_path: fs::read_link(&exe).unwrap().to_str().unwrap().to_string(),
                }),
            }
        }
    }

    fn found(node: &Node, wanted: &Wanted) -> Option<u32> {
        find(&node.proc(), wanted).map(|p| p.pid)
    }

    #[test]
    fn a_users_process_named_slurmd_neither_hides_the_node_slurmd_nor_passes_for_it() {
        let node = Node::new();
        let wanted = Wanted::from_prolog(&node.proc(), &node.prolog_saw());
        assert_eq!(found(&node, &wanted), Some(100));
        // K6's recipe: `cp /bin/sleep ~/slurmd; ~/slurmd 1d &`, in a job (child of its batch
        // script, 215) and in a login (parent: init).
        node.install("home/u/slurmd");
        node.process(700, "slurmd", 215, 2001, "home/u/slurmd", NODE_NS);
        node.process(701, "slurmd", 1, 2001, "home/u/slurmd", NODE_NS);
        // Running the real binary as the user, too.
        node.process(702, "slurmd", 1, 2001, "usr/sbin/slurmd", NODE_NS);
        assert_eq!(found(&node, &wanted), Some(100));
        // slurmd's own child, not yet exec'd; another node's slurmd (the multi-node lab).
        node.process(703, "slurmd", 100, 0, "usr/sbin/slurmd", NODE_NS);
        node.process(704, "slurmd", 1, 0, "usr/sbin/slurmd", OTHER_NS);
        assert_eq!(found(&node, &wanted), Some(100));
        // slurmd restarted: the prolog's is gone, the user's processes stay.
        fs::remove_dir_all(node.proc().join("100")).unwrap();
        fs::remove_dir_all(node.proc().join("703")).unwrap();
        assert_eq!(found(&node, &wanted), None);
        node.process(710, "slurmd", 1, 0, "usr/sbin/slurmd", NODE_NS);
        assert_eq!(found(&node, &wanted), Some(710));
        // 24.11's reconfigure: the old slurmd forks the new one, which execs.
        node.process(711, "slurmd", 710, 0, "usr/sbin/slurmd", NODE_NS);
        assert_eq!(found(&node, &wanted), Some(710));
        fs::remove_dir_all(node.proc().join("710")).unwrap();
        node.process(711, "slurmd", 1, 0, "usr/sbin/slurmd", NODE_NS);
        assert_eq!(found(&node, &wanted), Some(711));
        // Upgraded and restarted: another file at the same place.
        fs::remove_dir_all(node.proc().join("711")).unwrap();
        node.install("usr/sbin/slurmd");
        node.process(712, "slurmd", 1, 0, "usr/sbin/slurmd", NODE_NS);
        assert_eq!(found(&node, &wanted), Some(712));
        // Root running something else named slurmd: not the node's slurmd.
        node.install("root/slurmd");
        node.process(713, "slurmd", 1, 0, "root/slurmd", NODE_NS);
        assert_eq!(found(&node, &wanted), Some(712));
        // Two of them: no telling which.
        node.process(714, "slurmd", 1, 0, "usr/sbin/slurmd", NODE_NS);
        assert_eq!(found(&node, &wanted), None);
    }

    #[test]
    fn an_older_prolog_value_takes_roots_slurmd_in_pid_1s_namespace() {
        let node = Node::new();
        let older = Slurmd {
            pid: 100,
            start_time: 1000,
            marks: None,
        };
        // The watchdog itself in a job's mount namespace (job_container/tmpfs): not what counts.
        node.process(230, "gpu-mem-quota", 1, 0, "usr/sbin/slurmd", OTHER_NS);
        let wanted = Wanted::from_prolog(&node.proc(), &older);
        assert_eq!(
            wanted,
            Wanted {
                mount_ns: Some(NODE_NS),
                exe: None
            }
        );
        node.install("home/u/slurmd");
        node.process(700, "slurmd", 1, 2001, "home/u/slurmd", NODE_NS);
        assert_eq!(found(&node, &wanted), Some(100));
        node.process(704, "slurmd", 1, 0, "usr/sbin/slurmd", OTHER_NS);
        assert_eq!(found(&node, &wanted), Some(100));
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
