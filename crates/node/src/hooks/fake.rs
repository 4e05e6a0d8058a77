//! A handle for the hooks' tests: Slurm's answers from tables, its logger and the job's
//! environment kept for the test to read.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::PathBuf;

use super::{LogLevel, PluginOption, SpankHandle};
use gmq_core::step::BATCH_STEP;

/// The fake's job id: one Slurm never gives (its ids stay below 2^26), so that what the hooks
/// look for on this machine (the epilog's sweep of the job's cgroups) is never a real job's.
pub(crate) const JOB: u32 = 4_000_000_012;

/// A scratch directory standing for the node: a policy capped at 30G whose runtime directory is
/// below it. Removed when dropped.
pub(crate) struct ScratchNode {
    pub(crate) dir: tempfile::TempDir,
}

impl ScratchNode {
    pub(crate) fn new() -> ScratchNode {
        let dir = tempfile::Builder::new().prefix("gmq-hooks-").tempdir().unwrap();
        let policy = format!(
            "[defaults]\nmax = \"30G\"\n[enforcement]\nruntime_dir = \"{}\"\n",
            dir.path().join("run").display()
        );
        std::fs::write(dir.path().join("policy.toml"), policy).unwrap();
        ScratchNode { dir }
    }

    pub(crate) fn policy(&self) -> PathBuf {
        self.dir.path().join("policy.toml")
    }

    pub(crate) fn runtime_dir(&self) -> PathBuf {
        self.dir.path().join("run")
    }
}

pub(crate) struct FakeSpank {
    pub(crate) args: Vec<String>,
    /// Option values by name, as `getopt` (and `given`) answer them.
    pub(crate) options: BTreeMap<&'static str, String>,
    pub(crate) registered: RefCell<Vec<String>>,
    /// The job's environment, which the hooks may change.
    pub(crate) env: RefCell<BTreeMap<String, String>>,
    /// This process's environment (slurmd's, in the job prolog and epilog).
    pub(crate) own_env: BTreeMap<&'static str, String>,
    pub(crate) job_id: u32,
    pub(crate) uid: u32,
    pub(crate) step_id: u32,
    pub(crate) task_global_id: u32,
    pub(crate) task_local_id: i32,
    /// slurmstepd's restart count of the job.
    pub(crate) restart_count: u32,
    pub(crate) logged: RefCell<Vec<(LogLevel, String)>>,
    pub(crate) told: RefCell<Vec<String>>,
}

impl FakeSpank {
    /// Job [`JOB`] of root (a passwd entry every test machine has), its batch step, with this
    /// policy.
    pub(crate) fn new(policy: &std::path::Path) -> FakeSpank {
        FakeSpank {
            args: vec![
                format!("config={}", policy.display()),
                "watchdog=/bin/true".to_string(),
            ],
            options: BTreeMap::new(),
            registered: RefCell::new(Vec::new()),
            env: RefCell::new(BTreeMap::new()),
            own_env: BTreeMap::new(),
            job_id: JOB,
            uid: 0,
            step_id: BATCH_STEP,
            task_global_id: 0,
            task_local_id: 0,
            restart_count: 0,
            logged: RefCell::new(Vec::new()),
            told: RefCell::new(Vec::new()),
        }
    }

    pub(crate) fn with_option(mut self, option: &PluginOption, value: &str) -> FakeSpank {
        self.options
            .insert(option.name.to_str().unwrap_or_default(), value.to_string());
        self
    }

    pub(crate) fn with_env(self, name: &str, value: &str) -> FakeSpank {
        self.env.borrow_mut().insert(name.to_string(), value.to_string());
        self
    }

    pub(crate) fn with_own_env(mut self, name: &'static str, value: &str) -> FakeSpank {
        self.own_env.insert(name, value.to_string());
        self
    }

    /// The lines logged at `level`.
    pub(crate) fn lines(&self, level: LogLevel) -> Vec<String> {
        let logged = self.logged.borrow();
        logged
            .iter()
            .filter(|(l, _)| *l == level)
            .map(|(_, line)| line.clone())
            .collect()
    }
}

impl SpankHandle for FakeSpank {
    fn plugin_args(&self) -> &[String] {
        &self.args
    }
    fn register_option(&self, option: &PluginOption) -> Result<(), String> {
        let name = option.name.to_string_lossy().into_owned();
        self.registered.borrow_mut().push(name);
        Ok(())
    }
    fn getopt(&self, option: &PluginOption) -> Result<Option<String>, String> {
        Ok(self
            .options
            .get(option.name.to_str().unwrap_or_default())
            .cloned())
    }
    fn given(&self, option: &PluginOption) -> Option<String> {
        self.getopt(option).ok().flatten()
    }
    fn getenv(&self, name: &str) -> Result<Option<String>, String> {
        Ok(self.env.borrow().get(name).cloned())
    }
    fn setenv(&self, name: &str, value: &str) -> Result<(), String> {
        self.env.borrow_mut().insert(name.to_string(), value.to_string());
        Ok(())
    }
    fn unsetenv(&self, name: &str) -> Result<(), String> {
        self.env.borrow_mut().remove(name);
        Ok(())
    }
    fn own_env(&self, name: &str) -> Option<String> {
        self.own_env.get(name).filter(|v| !v.is_empty()).cloned()
    }
    fn job_id(&self) -> Result<u32, String> {
        Ok(self.job_id)
    }
    fn job_uid(&self) -> Result<u32, String> {
        Ok(self.uid)
    }
    fn job_gid(&self) -> Result<u32, String> {
        Ok(self.uid)
    }
    fn step_id(&self) -> Result<u32, String> {
        Ok(self.step_id)
    }
    fn task_global_id(&self) -> Result<u32, String> {
        Ok(self.task_global_id)
    }
    fn task_local_id(&self) -> Result<i32, String> {
        Ok(self.task_local_id)
    }
    fn restart_count(&self) -> Result<u32, String> {
        Ok(self.restart_count)
    }
    fn slurm_version(&self) -> u32 {
        (22 << 16) | (5 << 8)
    }
    fn log(&self, level: LogLevel, line: &str) {
        self.logged.borrow_mut().push((level, line.to_string()));
    }
    fn tell_job(&self, line: &str) {
        self.told.borrow_mut().push(line.to_string());
    }
}
