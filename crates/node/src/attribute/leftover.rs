//! What a job leaves on the node after its end, and stopping it (reviews G7, K2, K10).
//!
//! On cgroup v1 the job's step directories belong to its user, who may `mkdir` below them, as deep
//! as they like, and move a process there. proctrack/cgroup signals only the step's own
//! `cgroup.procs`, so that process outlives the job, keeps its GPU memory, and Slurm hands the
//! GPU's shards out again. By the job epilog every step has ended: whatever of the job's user is
//! still in the job's cgroups is left over.
//!
//! **By claim, not by walk.** The sweep does not walk the job's directories (a walk needs a depth
//! limit, and the user chooses the depth: K2). It lists `/proc` and takes every process of the
//! job's user one of whose threads has a `/proc/PID[/task/TID]/cgroup` line under the job's
//! directory, at any depth, in any hierarchy (`job_<id>`, or the job's SLUID on 26.05's cgroup/v2).
//! A process the user parked below *another* job's step names that job, not this one: it is the
//! GPU look's (`AtJobEnd`: a user-made level of another job is no claim), at the end of the job
//! whose GPU it is on, and this sweep's at the end of the job whose cgroup it is in.
//!
//! **Pinned, then re-read** (K10). A pid listed is pinned with a pidfd, and everything is read
//! again: the same start time, the job's user still, a cgroup that still names the job. Only then
//! is SIGKILL sent, through the pidfd: a pid reused between the listing and the signal, or a
//! process that left the job's cgroups meanwhile, is never signalled.
//!
//! **Never Slurm's, never root's.** A root-owned slurmstepd (still tearing down in the job's v2
//! cgroup) is left alone, and so is every root process of a job run as root: the sweep signals only
//! an ordinary user's processes.
//!
//! **Bounded.** It runs in the job epilog in slurmd's context: reads of kernel files only, one
//! `status` read for each process on the node, the rest only for the job's user's processes, and
//! it stops after [`SWEEP_BUDGET`] whatever it has looked at.

use std::fs;
use std::io;
use std::path::Path;
use std::time::{Duration, Instant};

use gmq_core::sluid::Sluid;

use super::cgroup::{lines, slurm_cgroup, JobKey};
use super::identity::Pinned;
use super::job_cgroup::JobOnNode;
use super::procfs::{read_cgroup, read_real_uid, read_stat};

/// The most a sweep takes: far more than a node's `/proc` needs (milliseconds), and short enough
/// that a job epilog never holds slurmd long.
pub const SWEEP_BUDGET: Duration = Duration::from_secs(5);

/// The most threads whose cgroups are read for one process (a v1 thread may sit in a cgroup of its
/// own); more is a process nobody runs in a job, and the budget bounds the sweep anyway.
const MAX_THREADS: usize = 65_536;

/// What was found and done about one leftover process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leftover {
    pub pid: u32,
    pub outcome: LeftoverOutcome,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeftoverOutcome {
    Killed,
    /// `kill = false`: left running, only reported.
    Reported,
    /// A root-owned slurmstepd: Slurm's own (on its way out), never touched.
    Slurmstepd,
    /// Root's, in the cgroups of a job run as root: left alone (root's processes are root's to end).
    Root,
    /// No longer in the job's cgroups when looked at again: left alone.
    LeftTheJob,
    /// Not the job's user's when looked at again (this uid now): left alone.
    NotTheUsers(u32),
    /// Gone before it could be signalled, or its pid another process's by then.
    Gone,
    /// Pinning or the kill failed.
    Failed(String),
}

/// What one sweep found and did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Sweep {
    /// In pid order.
    pub leftovers: Vec<Leftover>,
    /// The budget ran out before every process was looked at.
    pub cut_short: bool,
}

/// Finds the processes of the job's user still in the job's cgroups (`job_<id>` or, on 26.05's
/// cgroup/v2, its SLUID) anywhere on the node and, with `kill`, SIGKILLs each through a pidfd of
/// the very process checked again after pinning. `proc_root` is `/proc` (pids are pinned in this
/// process's pid namespace).
pub fn sweep_leftovers(proc_root: &Path, job: &JobOnNode, kill: bool) -> Sweep {
    let deadline = Instant::now() + SWEEP_BUDGET;
    sweep_with(proc_root, job, kill, &mut Pidfds, deadline)
}

/// What the sweep reads of one process (`look`), all from one process (its start time read
/// before and after).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ProcSnapshot {
    pub(crate) start_time: u64,
    pub(crate) real_uid: u32,
    /// Its command name is `slurmstepd`.
    pub(crate) stepd: bool,
    /// A cgroup of the process or of one of its threads names the job, at any depth (read only
    /// for the job user's processes: `false` otherwise).
    pub(crate) in_job: bool,
}

/// What to do about a process, from one look at it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SweepAction {
    /// The job's user's ordinary process in the job's cgroups.
    Act,
    LeaveAlone(LeftoverOutcome),
}

/// [`SweepAction`] for a process seen as `seen`, after job `job`'s end. Pure.
pub(crate) fn verdict(job: &JobOnNode, seen: &ProcSnapshot) -> SweepAction {
    use LeftoverOutcome::*;
    match seen {
        ProcSnapshot { real_uid, .. } if *real_uid != job.uid => {
            SweepAction::LeaveAlone(NotTheUsers(*real_uid))
        }
        ProcSnapshot { in_job: false, .. } => SweepAction::LeaveAlone(LeftTheJob),
        ProcSnapshot {
            real_uid: 0,
            stepd: true,
            ..
        } => SweepAction::LeaveAlone(Slurmstepd),
        ProcSnapshot { real_uid: 0, .. } => SweepAction::LeaveAlone(Root),
        _ => SweepAction::Act,
    }
}

/// What is done about a process listed as `listed` (whose verdict was [`SweepAction::Act`]), seen
/// again as `again` once pinned (`None`: gone): `Ok` to go on (kill or report it), else what it
/// is. Pure.
pub(crate) fn after_pinning(
    job: &JobOnNode,
    listed: &ProcSnapshot,
    again: Option<&ProcSnapshot>,
) -> Result<(), LeftoverOutcome> {
    let Some(again) = again else {
        return Err(LeftoverOutcome::Gone);
    };
    // Another start time: the pid is another process's now.
    if again.start_time != listed.start_time {
        return Err(LeftoverOutcome::Gone);
    }
    match verdict(job, again) {
        SweepAction::Act => Ok(()),
        SweepAction::LeaveAlone(outcome) => Err(outcome),
    }
}

/// Whether a `/proc/PID/cgroup` text names the job: a line under its `job_<id>` directory, or
/// under its SLUID (26.05's cgroup/v2), at any depth below it, in any hierarchy. Pure.
pub(crate) fn names_job(text: &str, job_id: u32, sluid: Option<Sluid>) -> bool {
    lines(text)
        .filter_map(|line| slurm_cgroup(&line))
        .any(|cgroup| match cgroup.job {
            JobKey::Id(id) => id == job_id,
            JobKey::Sluid(named) => Some(named) == sluid,
        })
}

/// How the sweep holds a process from its last look to its signal: a pidfd in production.
pub(crate) trait Pins {
    type Pin;
    /// Holds the process that has `pid` now (`ESRCH`: none).
    fn pin(&mut self, pid: u32) -> io::Result<Self::Pin>;
    /// SIGKILLs the pinned process (`ESRCH`: it has exited).
    fn kill(&mut self, pin: &Self::Pin) -> io::Result<()>;
}

struct Pidfds;

impl Pins for Pidfds {
    type Pin = Pinned;

    fn pin(&mut self, pid: u32) -> io::Result<Pinned> {
        Pinned::open(pid)
    }

    fn kill(&mut self, pin: &Pinned) -> io::Result<()> {
        pin.send(libc::SIGKILL)
    }
}

/// The sweep, pinning and killing with `pins`, stopping at `deadline`. Without `kill` nothing is
/// pinned: the second look is the report's.
pub(crate) fn sweep_with<P: Pins>(
    proc_root: &Path,
    job: &JobOnNode,
    kill: bool,
    pins: &mut P,
    deadline: Instant,
) -> Sweep {
    let mut sweep = Sweep::default();
    let mut pids = listed_pids(proc_root);
    pids.sort_unstable();
    for pid in pids {
        if Instant::now() >= deadline {
            sweep.cut_short = true;
            break;
        }
        // One read for every other process on the node.
        if read_real_uid(proc_root, pid) != Some(job.uid) {
            continue;
        }
        let Some(listed) = look(proc_root, pid, job) else {
            continue;
        };
        if !listed.in_job {
            continue;
        }
        let outcome = match verdict(job, &listed) {
            SweepAction::LeaveAlone(outcome) => outcome,
            SweepAction::Act if !kill => {
                match after_pinning(job, &listed, look(proc_root, pid, job).as_ref()) {
                    Ok(()) => LeftoverOutcome::Reported,
                    Err(outcome) => outcome,
                }
            }
            SweepAction::Act => pin_and_kill(proc_root, job, pid, &listed, pins),
        };
        sweep.leftovers.push(Leftover { pid, outcome });
    }
    sweep
}

fn pin_and_kill<P: Pins>(
    proc_root: &Path,
    job: &JobOnNode,
    pid: u32,
    listed: &ProcSnapshot,
    pins: &mut P,
) -> LeftoverOutcome {
    let esrch = |e: &io::Error| e.raw_os_error() == Some(libc::ESRCH);
    let pin = match pins.pin(pid) {
        Ok(pin) => pin,
        Err(e) if esrch(&e) => return LeftoverOutcome::Gone,
        Err(e) => return LeftoverOutcome::Failed(format!("cannot pin it: {e}")),
    };
    // Read after pinning: the pinned process's, or it has exited (and the signal reaches nobody).
    if let Err(outcome) = after_pinning(job, listed, look(proc_root, pid, job).as_ref()) {
        return outcome;
    }
    match pins.kill(&pin) {
        Ok(()) => LeftoverOutcome::Killed,
        Err(e) if esrch(&e) => LeftoverOutcome::Gone,
        Err(e) => LeftoverOutcome::Failed(e.to_string()),
    }
}

/// The process directories of `proc_root` (`/proc/<pid>`, canonical numbers only: not `self`).
fn listed_pids(proc_root: &Path) -> Vec<u32> {
    fs::read_dir(proc_root)
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let name = entry.file_name();
            let name = name.to_str()?;
            let canonical =
                !name.is_empty() && !name.starts_with('0') && name.bytes().all(|b| b.is_ascii_digit());
            canonical.then(|| name.parse().ok()).flatten()
        })
        .collect()
}

/// One look at the process with `pid`: `None` when it is gone or its pid was reused while it was
/// read. Its cgroups (and its threads') are read only when it is the job user's.
fn look(proc_root: &Path, pid: u32, job: &JobOnNode) -> Option<ProcSnapshot> {
    let before = read_stat(proc_root, pid)?;
    let real_uid = read_real_uid(proc_root, pid)?;
    let in_job = real_uid == job.uid && in_job_cgroups(proc_root, pid, job);
    let after = read_stat(proc_root, pid)?;
    (after.start_time == before.start_time).then(|| ProcSnapshot {
        start_time: before.start_time,
        real_uid,
        stepd: before.comm == "slurmstepd",
        in_job,
    })
}

/// Whether the process's cgroup, or one of its threads' (cgroup v1 lets a thread sit in a cgroup
/// of its own), names the job.
fn in_job_cgroups(proc_root: &Path, pid: u32, job: &JobOnNode) -> bool {
    let names = |text: Option<String>| text.is_some_and(|t| names_job(&t, job.job_id, job.sluid));
    if names(read_cgroup(proc_root, pid)) {
        return true;
    }
    let tasks = proc_root.join(pid.to_string()).join("task");
    fs::read_dir(tasks)
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .take(MAX_THREADS)
        .filter(|entry| {
            entry
                .file_name()
                .to_str()
                .is_some_and(|tid| tid != pid.to_string())
        })
        .any(|entry| names(fs::read_to_string(entry.path().join("cgroup")).ok()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;
    use LeftoverOutcome::*;

    const UID: u32 = 2001;

    fn job(job_id: u32, uid: u32) -> JobOnNode {
        JobOnNode {
            job_id,
            uid,
            sluid: None,
        }
    }

    fn seen(real_uid: u32, stepd: bool, in_job: bool) -> ProcSnapshot {
        ProcSnapshot {
            start_time: 100,
            real_uid,
            stepd,
            in_job,
        }
    }

    #[test]
    fn what_is_done_about_a_process_in_the_jobs_cgroups() {
        let cases = [
            // the job's user's: acted on, whatever its name
            (job(7, UID), seen(UID, false, true), SweepAction::Act),
            (job(7, UID), seen(UID, true, true), SweepAction::Act),
            // not (or no longer) in the job's cgroups
            (
                job(7, UID),
                seen(UID, false, false),
                SweepAction::LeaveAlone(LeftTheJob),
            ),
            // another user's: never
            (
                job(7, UID),
                seen(2002, false, true),
                SweepAction::LeaveAlone(NotTheUsers(2002)),
            ),
            (
                job(7, UID),
                seen(0, true, true),
                SweepAction::LeaveAlone(NotTheUsers(0)),
            ),
            // a job run as root: its slurmstepd and root's other processes are left alone (K10)
            (
                job(7, 0),
                seen(0, true, true),
                SweepAction::LeaveAlone(Slurmstepd),
            ),
            (job(7, 0), seen(0, false, true), SweepAction::LeaveAlone(Root)),
            (
                job(7, 0),
                seen(UID, false, true),
                SweepAction::LeaveAlone(NotTheUsers(UID)),
            ),
        ];
        for (job, seen, want) in cases {
            assert_eq!(verdict(&job, &seen), want, "{job:?} {seen:?}");
        }
    }

    #[test]
    fn only_the_process_listed_and_still_in_the_job_is_killed() {
        let job = job(7, UID);
        let listed = seen(UID, false, true);
        let again = |start_time, real_uid, in_job| ProcSnapshot {
            start_time,
            real_uid,
            stepd: false,
            in_job,
        };
        let cases = [
            (Some(again(100, UID, true)), Ok(())),
            // exited before it was pinned
            (None, Err(Gone)),
            // its pid another process's, even one of the user's in the job's cgroup
            (Some(again(101, UID, true)), Err(Gone)),
            // moved out of the job's cgroups between the listing and the pin
            (Some(again(100, UID, false)), Err(LeftTheJob)),
            // became root's (su): left alone
            (Some(again(100, 0, true)), Err(NotTheUsers(0))),
        ];
        for (again, want) in cases {
            assert_eq!(after_pinning(&job, &listed, again.as_ref()), want, "{again:?}");
        }
    }

    #[test]
    fn a_cgroup_names_the_job_at_any_depth_in_any_hierarchy() {
        let sluid = Sluid::parse("s0K2Q6ZC8M4T00");
        let other_sluid = Sluid::parse("s0K2Q6ZC8M4T01");
        let deep = |top: &str, levels: usize| {
            let mut path = top.to_string();
            for level in 0..levels {
                path.push_str(&format!("/l{level}"));
            }
            path
        };
        let cases = [
            ("6:freezer:/slurm_n1/uid_2001/job_7/step_batch".to_string(), true),
            ("6:freezer:/slurm_n1/uid_2001/job_7".to_string(), true),
            // six and sixty levels below the step (K2 b)
            (format!("6:freezer:{}", deep("/slurm_n1/uid_2001/job_7/step_batch", 6)), true),
            (format!("4:memory:{}", deep("/slurm/uid_2001/job_7/step_0/task_0", 60)), true),
            // one hierarchy is enough: the others moved elsewhere
            (
                "6:freezer:/slurm/uid_2001/job_8/step_batch/park\n4:memory:/slurm/uid_2001/job_7/step_batch\n"
                    .to_string(),
                true,
            ),
            // parked below another job (K2 a): that job's, not this one's
            ("6:freezer:/slurm/uid_2001/job_8/step_batch/park".to_string(), false),
            ("6:freezer:/slurm/uid_2001/job_70/step_batch".to_string(), false),
            // v2, and 26.05's SLUID
            (
                format!("0::{}", deep("/system.slice/slurmstepd.scope/job_7/step_0/user/task_0", 6)),
                true,
            ),
            ("0::/system.slice/slurmstepd.scope/s0K2Q6ZC8M4T00/step_0/user/x/y/z/w/v".to_string(), true),
            ("0::/system.slice/slurmstepd.scope/s0K2Q6ZC8M4T01/step_0".to_string(), false),
            // look-alikes the user can make
            ("0::/user.slice/user-2001.slice/user@2001.service/slurmstepd.scope/job_7".to_string(), false),
            ("6:freezer:/user/slurm/uid_2001/job_7/step_0".to_string(), false),
            ("0::/".to_string(), false),
            (String::new(), false),
        ];
        for (text, want) in &cases {
            assert_eq!(names_job(text, 7, sluid), *want, "{text}");
        }
        assert!(!names_job(
            "0::/system.slice/slurmstepd.scope/s0K2Q6ZC8M4T00/step_0",
            7,
            other_sluid
        ));
        assert!(!names_job(
            "0::/system.slice/slurmstepd.scope/s0K2Q6ZC8M4T00/step_0",
            7,
            None
        ));
    }

    /// A /proc tree in a temporary directory, written as the kernel writes it.
    struct Procs {
        dir: tempfile::TempDir,
    }

    impl Procs {
        fn new() -> Procs {
            Procs {
                dir: tempfile::Builder::new().prefix("gmq-sweep-").tempdir().unwrap(),
            }
        }

        fn root(&self) -> PathBuf {
            self.dir.path().to_path_buf()
        }

        fn process(&self, pid: u32, comm: &str, uid: u32, start_time: u64, cgroup: &str) {
            write_process(&self.root(), pid, comm, uid, start_time, cgroup);
        }

        fn cgroup(&self, pid: u32, text: &str) {
            fs::write(self.root().join(pid.to_string()).join("cgroup"), text).unwrap();
        }

        fn thread(&self, pid: u32, tid: u32, cgroup: &str) {
            let dir = self
                .root()
                .join(pid.to_string())
                .join("task")
                .join(tid.to_string());
            fs::create_dir_all(&dir).unwrap();
            fs::write(dir.join("cgroup"), cgroup).unwrap();
        }
    }

    /// A process's `stat`, `status` and `cgroup` (its own and its main thread's) under `root`.
    fn write_process(root: &Path, pid: u32, comm: &str, uid: u32, start_time: u64, cgroup: &str) {
        let dir = root.join(pid.to_string());
        fs::create_dir_all(dir.join("task").join(pid.to_string())).unwrap();
        let stat = format!(
            "{pid} ({comm}) S 1 {pid} 1 0 -1 4194304 76 0 0 0 0 0 0 0 20 0 1 0 {start_time} \
             2990080 420 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0 0\n"
        );
        fs::write(dir.join("stat"), stat).unwrap();
        let status = format!("Name:\t{comm}\nPPid:\t1\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n");
        fs::write(dir.join("status"), status).unwrap();
        fs::write(dir.join("cgroup"), cgroup).unwrap();
        fs::write(dir.join("task").join(pid.to_string()).join("cgroup"), cgroup).unwrap();
    }

    /// Pins by pid and records the kills; `on_pin` changes the tree between listing and pinning.
    struct Recorder<F: FnMut(u32)> {
        on_pin: F,
        pinned: Vec<u32>,
        killed: Vec<u32>,
    }

    impl<F: FnMut(u32)> Pins for Recorder<F> {
        type Pin = u32;

        fn pin(&mut self, pid: u32) -> io::Result<u32> {
            (self.on_pin)(pid);
            self.pinned.push(pid);
            Ok(pid)
        }

        fn kill(&mut self, pin: &u32) -> io::Result<()> {
            self.killed.push(*pin);
            Ok(())
        }
    }

    fn recorder() -> Recorder<impl FnMut(u32)> {
        Recorder {
            on_pin: |_| {},
            pinned: Vec::new(),
            killed: Vec::new(),
        }
    }

    fn outcomes(sweep: &Sweep) -> Vec<(u32, LeftoverOutcome)> {
        assert!(!sweep.cut_short);
        sweep
            .leftovers
            .iter()
            .map(|l| (l.pid, l.outcome.clone()))
            .collect()
    }

    fn later() -> Instant {
        Instant::now() + SWEEP_BUDGET
    }

    /// The v1 lines of a process in `path` of the freezer and memory hierarchies.
    fn v1(path: &str) -> String {
        format!("9:name=systemd:/system.slice/slurmd.service\n6:freezer:{path}\n4:memory:{path}\n0::/\n")
    }

    #[test]
    fn every_process_of_the_user_in_the_jobs_cgroups_is_killed_at_any_depth() {
        let procs = Procs::new();
        let step = "/slurm_n1/uid_2001/job_7/step_batch";
        procs.process(300, "python3", UID, 10, &v1(step));
        procs.process(301, "sleep", UID, 11, &v1(&format!("{step}/a/b/c/d")));
        // K2 (b): six levels below the step, and sixteen
        procs.process(302, "sleep", UID, 12, &v1(&format!("{step}/a/b/c/d/e/f")));
        procs.process(
            303,
            "sleep",
            UID,
            13,
            &v1(&format!("{step}/{}", ["x"; 16].join("/"))),
        );
        // moved in the freezer only: memory still names the job
        procs.process(
            304,
            "sleep",
            UID,
            14,
            "6:freezer:/slurm_n1/uid_2001/job_8/step_batch/p\n4:memory:/slurm_n1/uid_2001/job_7/step_batch\n",
        );
        // a thread of a process outside the job left in the job's cgroup
        procs.process(305, "python3", UID, 15, &v1("/user.slice"));
        procs.thread(305, 3051, &v1(&format!("{step}/hidden")));
        // not the job's: another job's, outside Slurm, another user's, parked below job 8 (that
        // job's sweep, and the GPU look at job 7's end, see to it)
        procs.process(310, "sleep", UID, 20, &v1("/slurm_n1/uid_2001/job_8/step_0"));
        procs.process(311, "sleep", UID, 21, &v1("/user.slice"));
        procs.process(312, "sleep", 2002, 22, &v1(step));
        procs.process(
            313,
            "sleep",
            UID,
            23,
            &v1("/slurm_n1/uid_2001/job_8/step_batch/park"),
        );
        let mut pins = recorder();
        let sweep = sweep_with(&procs.root(), &job(7, UID), true, &mut pins, later());
        let killed = [300, 301, 302, 303, 304, 305];
        assert_eq!(outcomes(&sweep), killed.map(|pid| (pid, Killed)));
        assert_eq!(pins.killed, killed);
        // Report only: nothing pinned, nothing killed.
        let mut pins = recorder();
        let sweep = sweep_with(&procs.root(), &job(7, UID), false, &mut pins, later());
        assert_eq!(outcomes(&sweep), killed.map(|pid| (pid, Reported)));
        assert!(pins.pinned.is_empty() && pins.killed.is_empty());
        // Job 8's end takes its own and the one parked below it.
        let sweep = sweep_with(&procs.root(), &job(8, UID), true, &mut recorder(), later());
        assert_eq!(outcomes(&sweep), [(304, Killed), (310, Killed), (313, Killed)]);
    }

    #[test]
    fn a_process_that_changed_between_listing_and_pinning_is_not_killed() {
        let procs = Procs::new();
        let step = "/slurm_n1/uid_2001/job_7/step_0";
        for pid in [400, 401, 402, 403] {
            procs.process(pid, "python3", UID, 50, &v1(step));
        }
        let root = procs.root();
        let mut pins = Recorder {
            on_pin: |pid| match pid {
                // moved out (to another job of the user, say)
                400 => fs::write(root.join("400/cgroup"), v1("/slurm_n1/uid_2001/job_9/step_0")).unwrap(),
                // exited, and its pid taken by the user's next job's process
                401 => write_process(&root, 401, "python3", UID, 60, &v1(step)),
                // exited
                402 => fs::remove_dir_all(root.join("402")).unwrap(),
                _ => {}
            },
            pinned: Vec::new(),
            killed: Vec::new(),
        };
        let sweep = sweep_with(&procs.root(), &job(7, UID), true, &mut pins, later());
        assert_eq!(
            outcomes(&sweep),
            [(400, LeftTheJob), (401, Gone), (402, Gone), (403, Killed)]
        );
        assert_eq!(pins.pinned, [400, 401, 402, 403]);
        assert_eq!(pins.killed, [403]);
    }

    #[test]
    fn a_root_jobs_slurmstepd_and_roots_processes_are_never_touched() {
        // The dev cluster's job 12 (fixtures/proc/v1-hybrid), as if root had run it: its
        // slurmstepds (200, 210, 220), the extern step's sleep (201) and the watchdog (230), all root's.
        let tree = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/proc/v1-hybrid");
        let mut pins = recorder();
        let sweep = sweep_with(&tree, &job(12, 0), true, &mut pins, later());
        assert_eq!(
            outcomes(&sweep),
            [
                (200, Slurmstepd),
                (201, Root),
                (210, Slurmstepd),
                (220, Slurmstepd),
                (230, Root)
            ]
        );
        assert!(pins.pinned.is_empty(), "pinned {:?}", pins.pinned);
        // The same job of its real user: the user's processes only (420: the freezer names it;
        // 430: the memory hierarchy alone does), never root's.
        let mut pins = recorder();
        let sweep = sweep_with(&tree, &job(12, UID), true, &mut pins, later());
        let killed = [215, 216, 225, 226, 420, 430];
        assert_eq!(outcomes(&sweep), killed.map(|pid| (pid, Killed)));
        assert_eq!(pins.killed, killed);
    }

    #[test]
    fn a_spent_budget_stops_the_sweep() {
        let procs = Procs::new();
        procs.process(500, "sleep", UID, 1, &v1("/slurm_n1/uid_2001/job_7/step_0"));
        let mut pins = recorder();
        let sweep = sweep_with(&procs.root(), &job(7, UID), true, &mut pins, Instant::now());
        assert!(sweep.cut_short && sweep.leftovers.is_empty());
        assert!(pins.killed.is_empty());
    }

    #[test]
    fn the_real_sweep_pins_and_kills_a_real_process() {
        // A child of this test, in this test's cgroup: named as the job's by a /proc whose `cgroup`
        // files are rewritten, the rest the kernel's (links to the real /proc files).
        // As root, the child is nobody's (65534): the sweep never signals root's processes.
        // SAFETY: geteuid and getuid have no preconditions.
        let (euid, own) = unsafe { (libc::geteuid(), libc::getuid()) };
        let uid = if euid == 0 { 65534 } else { own };
        let mut command = std::process::Command::new("sleep");
        command.arg("30");
        if uid == 65534 {
            use std::os::unix::process::CommandExt;
            command.uid(uid).gid(uid);
        }
        let mut child = command.spawn().unwrap();
        let pid = child.id();
        let procs = Procs::new();
        let dir = procs.root().join(pid.to_string());
        fs::create_dir_all(&dir).unwrap();
        for file in ["stat", "status"] {
            std::os::unix::fs::symlink(
                Path::new("/proc").join(pid.to_string()).join(file),
                dir.join(file),
            )
            .unwrap();
        }
        procs.cgroup(pid, &v1("/slurm_n1/uid_0/job_7/step_0/a/b/c/d/e/f"));
        let sweep = sweep_with(&procs.root(), &job(7, uid), true, &mut Pidfds, later());
        assert_eq!(outcomes(&sweep), [(pid, Killed)]);
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(child.wait().unwrap().signal(), Some(libc::SIGKILL));
    }
}
