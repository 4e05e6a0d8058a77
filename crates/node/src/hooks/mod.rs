//! The plugin's hook bodies, generic over [`SpankHandle`]: what each hook gathers from Slurm, the one
//! gmq-core decision it makes, and what it does with it. The cdylib (`gpu-mem-quota-spank`) is the
//! symbol table, the panic guard and the real handle over `spank_t`; the tests here run every body
//! with a fake handle, without Slurm.
//!
//! - `submit`: sbatch, salloc and srun on the submit host (options, the policy's caps);
//! - `job_script`: the job prolog (start the job's watchdog) and epilog (stop it, sweep the job's
//!   cgroups);
//! - `step`: slurmstepd, once per step (`user_init`) and in each task's child
//!   (`task_init_privileged`, `task_init`);
//! - `job_end`: the batch step's end (`exit`): the run's final record; an srun step's tasks'
//!   end (`task_exit`): a multi-node job's entry another node's merge replaced.

// These run inside slurmd and slurmstepd: the plugin's guard catches a panic, but no code here may
// unwrap, expect or panic on its own (the tests may).
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::panic))]

use std::ffi::CStr;
use std::fmt;

pub mod job_end;
pub mod job_script;
pub mod step;
pub mod submit;

#[cfg(test)]
mod fake;

/// What a hook asks of Slurm: the handle it was passed, its plugstack arguments, and Slurm's
/// logger. Errors are Slurm's words for why a call failed.
pub trait SpankHandle {
    /// The words after the plugin's path on its plugstack.conf line.
    fn plugin_args(&self) -> &[String];
    /// Registers one of the plugin's options (`sbatch --help` lists it).
    fn register_option(&self, option: &PluginOption) -> Result<(), String>;
    /// The option's value if the job was given it (`Some("")` for a flag); `None` if not.
    fn getopt(&self, option: &PluginOption) -> Result<Option<String>, String>;
    /// The option's value given on this submit host's command line, where `getopt` does not work
    /// (the allocator context): the option callback keeps it.
    fn given(&self, option: &PluginOption) -> Option<String>;
    /// A variable of the job's environment.
    fn getenv(&self, name: &str) -> Result<Option<String>, String>;
    /// Sets a variable in the job's environment, replacing any value.
    fn setenv(&self, name: &str, value: &str) -> Result<(), String>;
    /// Removes a variable from the job's environment; one that is not there is fine.
    fn unsetenv(&self, name: &str) -> Result<(), String>;
    /// A variable of this process's own environment, when set and not empty: in the job prolog
    /// and epilog the one slurmd built for them (user-set variables reach it only with a `SPANK_`
    /// prefix).
    fn own_env(&self, name: &str) -> Option<String>;
    fn job_id(&self) -> Result<u32, String>;
    /// The job owner's uid and primary gid (remote and job-script contexts).
    fn job_uid(&self) -> Result<u32, String>;
    fn job_gid(&self) -> Result<u32, String>;
    /// The step id: a number, or Slurm's special ids for the batch and extern steps.
    fn step_id(&self) -> Result<u32, String>;
    /// The task's rank in the step (0 on one node of the step only) and on this node (0 once per
    /// node of the step).
    fn task_global_id(&self) -> Result<u32, String>;
    fn task_local_id(&self) -> Result<i32, String>;
    /// How many times the job was requeued, as slurmstepd knows it from slurmctld (Slurm 22.05
    /// answers 0 in the batch step).
    fn restart_count(&self) -> Result<u32, String>;
    /// `SLURM_VERSION_NUMBER` of the Slurm the plugin was built for (and runs in).
    fn slurm_version(&self) -> u32;
    /// One line to Slurm's logger (the plugin's name in front): in sbatch, srun and salloc the
    /// user's terminal, in slurmd and slurmstepd their log.
    fn log(&self, level: LogLevel, line: &str);
    /// One line to the job's own output (the task's stderr).
    fn tell_job(&self, line: &str);
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogLevel {
    Info,
    Verbose,
    Error,
}

/// Where a line comes from, the word after the plugin's name in every line (as pyxis writes
/// `pyxis: epilog: ...`): `gpu-mem-quota: prolog: job 12: ...`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HookPhase {
    /// slurmd loading the plugin, or any context registering the options.
    Init,
    /// sbatch, salloc and srun checking the options and the request.
    Submit,
    Prolog,
    Epilog,
    /// slurmstepd deciding a step (`user_init`).
    Step,
    /// A task of a step about to start (`task_init_privileged`, `task_init`).
    Task,
    /// The end of a step's tasks (`task_exit`) and of the step (`exit`): the record's writes.
    Exit,
}

impl fmt::Display for HookPhase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            HookPhase::Init => "init",
            HookPhase::Submit => "submit",
            HookPhase::Prolog => "prolog",
            HookPhase::Epilog => "epilog",
            HookPhase::Step => "step",
            HookPhase::Task => "task",
            HookPhase::Exit => "exit",
        })
    }
}

/// A hook's logger: every line with its phase.
struct Say<'h, H: ?Sized> {
    spank: &'h H,
    phase: HookPhase,
}

impl<H: SpankHandle + ?Sized> Say<'_, H> {
    fn info(&self, message: &str) {
        self.spank
            .log(LogLevel::Info, &format!("{}: {message}", self.phase));
    }
    fn verbose(&self, message: &str) {
        self.spank
            .log(LogLevel::Verbose, &format!("{}: {message}", self.phase));
    }
    fn error(&self, message: &str) {
        self.spank
            .log(LogLevel::Error, &format!("{}: {message}", self.phase));
    }
}

fn say<H: SpankHandle + ?Sized>(spank: &H, phase: HookPhase) -> Say<'_, H> {
    Say { spank, phase }
}

/// One of the plugin's command-line options, as the cdylib registers it.
pub struct PluginOption {
    pub name: &'static CStr,
    /// What `--help` shows as the value (`SIZE`); unused for a flag.
    pub arginfo: &'static CStr,
    pub usage: &'static CStr,
    /// Whether the option takes a value (`--opt=VALUE`) or is a flag.
    pub has_arg: bool,
    /// The value Slurm hands back to the option callback, to tell options apart.
    pub val: i32,
    /// Checks a value on the submit host; the message names the option and the value.
    pub validate: fn(&str) -> Result<(), String>,
}

pub const QUOTA: PluginOption = PluginOption {
    name: c"gpu-mem-quota",
    arginfo: c"SIZE",
    usage: c"GPU memory the job may use on each of its GPUs: a size as for --mem (40G, 40960M; bare number = MiB). \
        Over it the job is requeued or cancelled as the site configures.",
    has_arg: true,
    val: 1,
    validate: |value| gmq_core::request::parse_quota_option(value).map(drop).map_err(|e| e.to_string()),
};

pub const BATCH: PluginOption = PluginOption {
    name: c"gpu-mem-batch",
    arginfo: c"MICRO[xACCUM]",
    usage: c"The job's batch geometry (e.g. 8x8: micro-batch 8, gradient accumulation 8). After a requeue for GPU \
        memory the job is told a micro-batch and accumulation that keep the effective batch and fit its quota.",
    has_arg: true,
    val: 2,
    validate: |value| gmq_core::batch::parse_batch_option(value).map(drop).map_err(|e| e.to_string()),
};

pub const PREEMPTIBLE: PluginOption = PluginOption {
    name: c"gpu-mem-preemptible",
    arginfo: c"",
    usage: c"Volunteer this job to be requeued first when a shared GPU runs short of memory.",
    has_arg: false,
    val: 3,
    validate: |_| Ok(()),
};

/// The plugin's options, in one table.
pub const OPTIONS: &[PluginOption] = &[QUOTA, BATCH, PREEMPTIBLE];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_option_table_uses_the_documented_names() {
        assert_eq!(QUOTA.name.to_str().unwrap(), gmq_core::request::QUOTA_OPTION);
        assert_eq!(BATCH.name.to_str().unwrap(), gmq_core::batch::BATCH_OPTION);
        // Slurm truncates option names longer than SPANK_OPTION_MAXLEN.
        assert!(OPTIONS.iter().all(|o| o.name.to_bytes().len() <= 75));
        let mut vals: Vec<i32> = OPTIONS.iter().map(|o| o.val).collect();
        vals.dedup();
        assert_eq!(vals.len(), OPTIONS.len());
    }
}
