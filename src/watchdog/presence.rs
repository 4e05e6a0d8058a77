//! Whether the job still runs anything on this node, from the kernel: the watchdog's own way to
//! end with its job. The plugin's SIGTERM at the job's end is the usual one; this is what ends a
//! watchdog whose signal never came (the exit hook found no usable policy or pid file, or slurmstepd
//! was killed), within [`CHECK_EVERY`] rather than at the next slurmctld check (30 s).
//!
//! The job's cgroup is the watchdog's own (the plugin starts it inside, the kernel says which:
//! [`attribute::job_cgroup`]); the job has left once none of its steps has a process other than the
//! watchdog ([`attribute::job_active_on_node`]). Only a job seen active once is taken as gone: a
//! watchdog may start before the first task is in its step's cgroup. A cgroup that cannot be read
//! keeps the watchdog watching: stopping on a doubt would leave the job unwatched.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::attribute;

/// How often the job's cgroup is looked at: a few directory reads each time.
pub const CHECK_EVERY: Duration = Duration::from_secs(2);

/// The job's presence on this node, as its cgroup shows it.
#[derive(Debug)]
pub struct Presence {
    /// `None`: the watchdog is in no job's cgroup (no cgroup tracking): never concludes.
    job_dir: Option<PathBuf>,
    /// The watchdog itself, which may live in a step's cgroup (v2) and is not the job's.
    own_pid: u32,
    seen_active: bool,
    last_check: Option<Instant>,
}

impl Presence {
    /// The job whose cgroup holds this process.
    pub fn of_own_job(proc_root: &Path, cgroup_root: &Path) -> Presence {
        let own_pid = std::process::id();
        let job_dir = attribute::job_cgroup(proc_root, cgroup_root, own_pid).map(|cgroup| cgroup.dir);
        Presence::in_cgroup(job_dir, own_pid)
    }

    /// The job whose cgroup directory is `job_dir`, watched by the process `own_pid`.
    /// Looks once at once: a watchdog starts while the step that started it runs, and a job that
    /// ends before the next look (a second later) is then known to have been here.
    pub fn in_cgroup(job_dir: Option<PathBuf>, own_pid: u32) -> Presence {
        let mut presence = Presence {
            job_dir,
            own_pid,
            seen_active: false,
            last_check: None,
        };
        presence.look(Instant::now());
        presence
    }

    /// The job's cgroup directory, where known.
    pub fn job_dir(&self) -> Option<&Path> {
        self.job_dir.as_deref()
    }

    /// Whether the job has left this node: seen active before, and no step has a process now.
    /// Looks at most every [`CHECK_EVERY`] (`now` tells); in between, `false`.
    pub fn job_left(&mut self, now: Instant) -> bool {
        if self.job_dir.is_none() {
            return false;
        }
        if self
            .last_check
            .is_some_and(|last| now.saturating_duration_since(last) < CHECK_EVERY)
        {
            return false;
        }
        self.look(now) == Some(false) && self.seen_active
    }

    /// One look at the job's cgroup: whether a step has a process; `None` where it cannot tell.
    fn look(&mut self, now: Instant) -> Option<bool> {
        let dir = self.job_dir.as_ref()?;
        self.last_check = Some(now);
        let active = attribute::job_active_on_node(dir, &[self.own_pid]).ok()?;
        self.seen_active |= active;
        Some(active)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn job_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("gmq-presence-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(dir.join("step_0")).unwrap();
        dir
    }

    #[test]
    fn a_job_seen_running_has_left_once_its_steps_hold_only_the_watchdog() {
        let dir = job_dir("left");
        let procs = dir.join("step_0/cgroup.procs");
        // v2: the watchdog lives below a step, with the step's task.
        fs::write(&procs, "230\n231\n").unwrap();
        let mut presence = Presence::in_cgroup(Some(dir.clone()), 230);
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
        let dir = job_dir("early");
        fs::write(dir.join("step_0/cgroup.procs"), "").unwrap();
        let mut presence = Presence::in_cgroup(Some(dir.clone()), 230);
        let t0 = Instant::now();
        assert!(!presence.job_left(t0));
        fs::write(dir.join("step_0/cgroup.procs"), "231\n").unwrap();
        assert!(!presence.job_left(t0 + CHECK_EVERY));
        fs::write(dir.join("step_0/cgroup.procs"), "").unwrap();
        assert!(presence.job_left(t0 + 2 * CHECK_EVERY));
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn without_a_job_cgroup_it_never_concludes() {
        let mut presence = Presence::in_cgroup(None, 230);
        assert!(!presence.job_left(Instant::now()));
        assert!(presence.job_dir().is_none());
    }
}
