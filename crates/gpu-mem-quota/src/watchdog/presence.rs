//! Whether the job still runs anything on this node, from the kernel: the watchdog's own way to
//! end with its job should the job epilog's SIGTERM never come (slurmd killed or restarted while
//! the job ended, an epilog that timed out).
//!
//! The watchdog starts from the job prolog, before Slurm has made the job's cgroup: it looks for
//! the directory by the job's id, uid and SLUID (26.05's cgroup/v2 names it after the SLUID) until
//! it is there ([`attribute::find_job_dir`]); the job
//! may have left once none of its steps has a process ([`attribute::job_active_on_node`]). Only a
//! job seen active once is taken as gone: the prolog runs before the first step. A cgroup that
//! cannot be read keeps the watchdog watching: stopping on a doubt would leave the job unwatched.
//!
//! Empty steps are not proof: where Slurm makes a step's v1 directories the user's (22.05), a job
//! can move all its processes into a cgroup of its own below another job's step. So the caller asks
//! slurmctld before it stops ([`Presence::recheck_after`] holds the next look off while slurmctld
//! says the job runs).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use gmq_node::attribute::{self, JobOnNode};

/// How often the job's cgroup is looked at: a few directory reads each time.
pub const CHECK_EVERY: Duration = Duration::from_secs(2);

/// How long a job's steps stay empty before slurmctld is asked whether its run is over. The job
/// epilog's SIGTERM normally comes within a second or two of the job's last process, and then the
/// end costs slurmctld nothing: asking at once raced it, and the request it won was the one above
/// the 5 a job that never acts may cost (issue 23, `slurm/bench-cluster cost`). A watchdog the
/// signal never reaches (slurmd killed) ends this much later.
pub const EPILOG_GRACE: Duration = Duration::from_secs(5);

/// How long the next look waits once slurmctld has said twice that a job with empty steps runs
/// on: its processes were moved out of its steps, and slurmctld is not to be asked every 2 s. (The
/// first time may be the moment between the job's last process and slurmctld hearing of it.)
pub const RECHECK_AFTER_DENIAL: Duration = Duration::from_secs(30);

/// What a [`Presence::check`] found.
#[derive(Debug, PartialEq, Eq)]
pub enum Check {
    /// The job runs here, or it cannot be told otherwise: watch on.
    Here,
    /// Its steps here are empty and slurmctld says this run is over: stop.
    Left,
    /// Watch on, and log this warning.
    HereBut(String),
}

/// The job's presence on this node, as its cgroup shows it.
#[derive(Debug)]
pub struct Presence {
    /// `None`: not found (yet): never concludes.
    job_dir: Option<PathBuf>,
    /// Where to look for it while it is not found: the cgroup mount, and the job's names there.
    find: Option<(PathBuf, JobOnNode)>,
    /// The watchdog itself, which may live in a step's cgroup (v2) and is not the job's.
    own_pid: u32,
    seen_active: bool,
    /// The earliest next look: [`CHECK_EVERY`] after the last, later after slurmctld said the job
    /// runs on.
    next_look: Option<Instant>,
    /// How many times slurmctld has said so.
    denials: u32,
    /// Since when the steps have been seen empty (reset when a process is seen again).
    empty_since: Option<Instant>,
    /// [`EPILOG_GRACE`]; zero in some tests.
    epilog_grace: Duration,
}

impl Presence {
    /// The job, whose cgroup Slurm makes below `cgroup_root` (perhaps later).
    pub fn of_job(cgroup_root: &Path, job: JobOnNode) -> Presence {
        let mut presence = Presence::in_cgroup(None, std::process::id());
        presence.find = Some((cgroup_root.to_path_buf(), job));
        presence.look(Instant::now());
        presence
    }

    /// The job whose cgroup directory is `job_dir`, watched by the process `own_pid`.
    /// Looks once at once: a watchdog starts while the step that started it runs, and a job that
    /// ends before the next look (a second later) is then known to have been here.
    pub fn in_cgroup(job_dir: Option<PathBuf>, own_pid: u32) -> Presence {
        let mut presence = Presence {
            job_dir,
            find: None,
            own_pid,
            seen_active: false,
            next_look: None,
            denials: 0,
            empty_since: None,
            epilog_grace: EPILOG_GRACE,
        };
        presence.look(Instant::now());
        presence
    }

    /// Concludes as soon as the steps are empty: for tests of what comes after the grace.
    #[cfg(test)]
    fn without_epilog_grace(mut self) -> Presence {
        self.epilog_grace = Duration::ZERO;
        self
    }

    /// The job's cgroup directory, where known.
    pub fn job_dir(&self) -> Option<&Path> {
        self.job_dir.as_deref()
    }

    /// The job's cgroup directory, looked for now if not found yet (whatever the time of the next
    /// look): the driver's hard limit waits for it.
    pub fn find_job_dir_now(&mut self) -> Option<&Path> {
        if self.job_dir.is_none() {
            let (root, job) = self.find.as_ref()?;
            self.job_dir = attribute::find_job_dir(root, job);
        }
        self.job_dir.as_deref()
    }

    /// Whether the job may have left this node: seen active before, and no step has had a process
    /// for [`EPILOG_GRACE`]. Looks at most every [`CHECK_EVERY`] (`now` tells), and not before a
    /// hold-off ([`Presence::recheck_after`]); in between, `false`.
    pub fn job_left(&mut self, now: Instant) -> bool {
        if self.next_look.is_some_and(|next| now < next) {
            return false;
        }
        if self.look(now) != Some(false) || !self.seen_active {
            self.empty_since = None;
            return false;
        }
        let since = *self.empty_since.get_or_insert(now);
        now.saturating_duration_since(since) >= self.epilog_grace
    }

    /// slurmctld says the job runs on although its steps here are empty (or could not say): the
    /// next look comes after [`CHECK_EVERY`] the first time, [`RECHECK_AFTER_DENIAL`] after.
    /// Returns whether this is the second time: the one to say (processes moved out of the steps).
    pub fn recheck_after(&mut self, now: Instant) -> bool {
        self.denials += 1;
        if self.denials > 1 {
            self.next_look = Some(now + RECHECK_AFTER_DENIAL);
        }
        self.denials == 2
    }

    /// Whether the job's run here is over: its steps hold no process ([`Presence::job_left`]) and
    /// `runs_on` (slurmctld: is this run still running? asked only then) says no. While slurmctld
    /// says it runs, the watch goes on, said once (at the second answer: the first may come before
    /// slurmctld has heard of the job's end); where slurmctld cannot say, the watch goes on too.
    pub fn check(&mut self, now: Instant, runs_on: impl FnOnce() -> Result<bool, String>) -> Check {
        if !self.job_left(now) {
            return Check::Here;
        }
        match runs_on() {
            Ok(false) => Check::Left,
            Ok(true) if self.recheck_after(now) => Check::HereBut(
                "the job's steps on this node hold no process, yet slurmctld says it runs (its \
                 processes were moved out of its cgroup?): watching on"
                    .to_string(),
            ),
            Ok(true) => Check::Here,
            Err(e) => {
                self.recheck_after(now);
                Check::HereBut(format!("cannot check the job with slurmctld: {e}"))
            }
        }
    }

    /// One look at the job's cgroup: whether a step has a process; `None` where it cannot tell.
    fn look(&mut self, now: Instant) -> Option<bool> {
        if self.job_dir.is_none() {
            let (root, job) = self.find.as_ref()?;
            self.next_look = Some(now + CHECK_EVERY);
            self.job_dir = attribute::find_job_dir(root, job);
        }
        let dir = self.job_dir.as_ref()?;
        self.next_look = Some(now + CHECK_EVERY);
        let active = attribute::job_active_on_node(dir, &[self.own_pid]).ok()?;
        self.seen_active |= active;
        Some(active)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    /// A job's cgroup directory with an empty `step_0`, inside a temporary directory removed
    /// when the first is dropped.
    fn job_dir(name: &str) -> (tempfile::TempDir, PathBuf) {
        let scratch = tempfile::Builder::new()
            .prefix(&format!("gmq-presence-{name}-"))
            .tempdir()
            .unwrap();
        let dir = scratch.path().join("job_12");
        fs::create_dir_all(dir.join("step_0")).unwrap();
        (scratch, dir)
    }

    #[test]
    fn a_job_seen_running_has_left_once_its_steps_hold_only_the_watchdog() {
        let (_scratch, dir) = job_dir("left");
        let procs = dir.join("step_0/cgroup.procs");
        // v2: the watchdog lives below a step, with the step's task.
        fs::write(&procs, "230\n231\n").unwrap();
        let mut presence = Presence::in_cgroup(Some(dir.clone()), 230).without_epilog_grace();
        let t0 = Instant::now();
        assert!(!presence.job_left(t0));
        fs::write(&procs, "230\n").unwrap();
        // Not looked at again before CHECK_EVERY.
        assert!(!presence.job_left(t0 + Duration::from_millis(500)));
        assert!(presence.job_left(t0 + CHECK_EVERY));
        fs::remove_dir_all(&dir).unwrap();
        assert!(presence.job_left(t0 + 2 * CHECK_EVERY), "its cgroup is gone");
    }

    #[test]
    fn a_job_never_seen_running_is_not_taken_as_gone() {
        // The watchdog started before the step's first task was in its cgroup.
        let (_scratch, dir) = job_dir("early");
        fs::write(dir.join("step_0/cgroup.procs"), "").unwrap();
        let mut presence = Presence::in_cgroup(Some(dir.clone()), 230).without_epilog_grace();
        let t0 = Instant::now();
        assert!(!presence.job_left(t0));
        fs::write(dir.join("step_0/cgroup.procs"), "231\n").unwrap();
        assert!(!presence.job_left(t0 + CHECK_EVERY));
        fs::write(dir.join("step_0/cgroup.procs"), "").unwrap();
        assert!(presence.job_left(t0 + 2 * CHECK_EVERY));
    }

    #[test]
    fn once_slurmctld_says_the_job_runs_the_next_look_waits() {
        let (_scratch, dir) = job_dir("denied");
        fs::write(dir.join("step_0/cgroup.procs"), "231\n").unwrap();
        let mut presence = Presence::in_cgroup(Some(dir.clone()), 230).without_epilog_grace();
        let t0 = Instant::now();
        fs::write(dir.join("step_0/cgroup.procs"), "").unwrap();
        // The first denial may be slurmctld not knowing yet: looked at again soon.
        let t1 = t0 + CHECK_EVERY;
        assert!(presence.job_left(t1));
        assert!(!presence.recheck_after(t1));
        let t2 = t1 + CHECK_EVERY;
        assert!(presence.job_left(t2));
        assert!(presence.recheck_after(t2), "the second one is said");
        assert!(!presence.job_left(t2 + 3 * CHECK_EVERY));
        assert!(presence.job_left(t2 + RECHECK_AFTER_DENIAL));
        assert!(!presence.recheck_after(t2 + RECHECK_AFTER_DENIAL), "said once");
    }

    #[test]
    fn empty_steps_end_the_watch_only_when_slurmctld_says_the_run_is_over() {
        let (_scratch, dir) = job_dir("check");
        fs::write(dir.join("step_0/cgroup.procs"), "231\n").unwrap();
        let mut presence = Presence::in_cgroup(Some(dir.clone()), 230).without_epilog_grace();
        let t0 = Instant::now();
        let never = || -> Result<bool, String> { panic!("slurmctld asked while the job runs here") };
        assert_eq!(presence.check(t0 + CHECK_EVERY, never), Check::Here);
        // Its processes moved out of its steps: slurmctld says it runs, twice; said the second time.
        fs::write(dir.join("step_0/cgroup.procs"), "").unwrap();
        let t1 = t0 + 2 * CHECK_EVERY;
        assert_eq!(presence.check(t1, || Ok(true)), Check::Here);
        let t2 = t1 + CHECK_EVERY;
        assert!(
            matches!(presence.check(t2, || Ok(true)), Check::HereBut(l) if l.contains("yet slurmctld says it runs"))
        );
        // slurmctld out of reach: watched on, said.
        let t3 = t2 + RECHECK_AFTER_DENIAL;
        assert_eq!(
            presence.check(t3, || Err("Unable to contact slurm controller".into())),
            Check::HereBut("cannot check the job with slurmctld: Unable to contact slurm controller".into())
        );
        let t4 = t3 + RECHECK_AFTER_DENIAL;
        assert_eq!(presence.check(t4, || Ok(false)), Check::Left);
    }

    #[test]
    fn a_job_cgroup_made_after_the_watchdog_started_is_found() {
        let scratch = tempfile::Builder::new()
            .prefix("gmq-presence-late-")
            .tempdir()
            .unwrap();
        let root = scratch.path();
        fs::create_dir_all(root.join("freezer/slurm_vm/uid_2001")).unwrap();
        let job = JobOnNode {
            job_id: 12,
            uid: 2001,
            sluid: None,
        };
        let mut presence = Presence::of_job(root, job).without_epilog_grace();
        let t0 = Instant::now();
        assert!(presence.job_dir().is_none() && !presence.job_left(t0));
        let step = root.join("freezer/slurm_vm/uid_2001/job_12/step_extern");
        fs::create_dir_all(&step).unwrap();
        fs::write(step.join("cgroup.procs"), "231\n").unwrap();
        assert!(!presence.job_left(t0 + CHECK_EVERY));
        assert_eq!(
            presence.job_dir(),
            Some(root.join("freezer/slurm_vm/uid_2001/job_12").as_path())
        );
        fs::write(step.join("cgroup.procs"), "").unwrap();
        assert!(presence.job_left(t0 + 2 * CHECK_EVERY));
    }

    #[test]
    fn empty_steps_wait_for_the_epilog_before_slurmctld_is_asked() {
        let (_scratch, dir) = job_dir("grace");
        let procs = dir.join("step_0/cgroup.procs");
        fs::write(&procs, "231\n").unwrap();
        let mut presence = Presence::in_cgroup(Some(dir.clone()), 230);
        let t0 = Instant::now();
        fs::write(&procs, "").unwrap();
        let never = || -> Result<bool, String> { panic!("slurmctld asked within the epilog's grace") };
        let t1 = t0 + CHECK_EVERY;
        assert_eq!(presence.check(t1, never), Check::Here, "first seen empty");
        assert_eq!(presence.check(t1 + CHECK_EVERY, never), Check::Here);
        // A process again (a new step): the wait starts over.
        fs::write(&procs, "232\n").unwrap();
        assert_eq!(presence.check(t1 + 2 * CHECK_EVERY, never), Check::Here);
        fs::write(&procs, "").unwrap();
        let t2 = t1 + 3 * CHECK_EVERY;
        assert_eq!(presence.check(t2, never), Check::Here);
        assert_eq!(presence.check(t2 + EPILOG_GRACE, || Ok(false)), Check::Left);
    }

    #[test]
    fn without_a_job_cgroup_it_never_concludes() {
        let mut presence = Presence::in_cgroup(None, 230);
        assert!(!presence.job_left(Instant::now()));
        assert!(presence.job_dir().is_none());
    }
}
