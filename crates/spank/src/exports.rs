//! What Slurm's plugin loader looks up by name: the data symbols and the hooks the plugin uses,
//! each hook a dispatch on the context to a body in `gmq_node::hooks`.
//!
//! Only the hooks we need are exported. job_prolog and job_epilog make slurmd run a spank prolog and
//! epilog stepd for every job: the price of a watchdog lifetime that Slurm guarantees. Every hook
//! runs behind `guard`, which turns an error or a panic into a logged line and a SPANK error code.

use std::ffi::{c_char, c_int};

use super::guard::guard;
use super::handle::{Context, Spank};
use super::sys;
use gmq_node::hooks::step::StepMemory;
use gmq_node::hooks::{job_end, job_script, step, submit, HookPhase};

#[no_mangle]
#[used]
pub static plugin_name: [u8; 14] = *b"gpu-mem-quota\0";

#[no_mangle]
#[used]
pub static plugin_type: [u8; 6] = *b"spank\0";

/// Must match the running Slurm's major.minor, so it comes from the headers we were built against.
#[no_mangle]
#[used]
pub static plugin_version: u32 = sys::SLURM_VERSION_NUMBER;

/// What Slurm 25.05 and later report when `slurm_spank_init` of this required plugin fails (earlier
/// Slurm does not look the symbol up): ESPANK_NODE_FAILURE, 3011 in 25.05's `<slurm/slurm_errno.h>`
/// (ESPANK_ERROR 3000 + 11; the 22.05 and 24.11 headers have no such name). `init` fails only on what
/// the node's admin wrote (plugstack arguments) or an internal error, never on a user's option
/// (see `options::on_option`): the node is misconfigured and would fail every job, so it is drained
/// rather than left to eat jobs, which is also what 22.05 and 24.11 do. ESPANK_JOB_FAILURE would fail
/// the job and keep the node in service.
#[no_mangle]
#[used]
pub static slurm_spank_init_failure_mode: c_int = ESPANK_NODE_FAILURE;

/// ESPANK_NODE_FAILURE of 25.05's `<slurm/slurm_errno.h>` (see [`slurm_spank_init_failure_mode`]).
pub(crate) const ESPANK_NODE_FAILURE: c_int = 3011;

/// What this slurmstepd keeps from `user_init` to its tasks' hooks.
static STEP: StepMemory = StepMemory::new();

fn run(
    hook: &'static str,
    phase: HookPhase,
    sp: sys::spank_t,
    ac: c_int,
    av: *mut *mut c_char,
    body: impl FnOnce(&Spank) -> Result<(), String>,
) -> c_int {
    guard(hook, phase, || {
        // SAFETY: these are the arguments Slurm passed to this hook.
        let spank = unsafe { Spank::from_hook(sp, ac, av) };
        body(&spank)
    })
}

/// [`run`] for the job prolog and epilog, whose failure drains the node: an error or a panic is
/// logged, and the hook still returns 0. Their context is checked, so a call from elsewhere does
/// nothing.
fn run_never_failing(
    hook: &'static str,
    phase: HookPhase,
    sp: sys::spank_t,
    ac: c_int,
    av: *mut *mut c_char,
    body: fn(&Spank) -> Result<(), String>,
) -> c_int {
    let _ = run(hook, phase, sp, ac, av, |spank| match spank.context() {
        Context::JobScript => body(spank),
        _ => Ok(()),
    });
    0
}

/// Every context: check the plugstack arguments, register the options (not in slurmd, which parses none).
#[no_mangle]
pub extern "C" fn slurm_spank_init(sp: sys::spank_t, ac: c_int, av: *mut *mut c_char) -> c_int {
    run("init", HookPhase::Init, sp, ac, av, |spank| {
        match spank.context() {
            Context::Slurmd => submit::slurmd_init(spank),
            Context::Local | Context::Allocator | Context::Remote => submit::register_options(spank),
            Context::JobScript | Context::Unknown => Ok(()),
        }
    })
}

/// Submit host, after the command line is parsed: check the request against the policy's caps.
#[no_mangle]
pub extern "C" fn slurm_spank_init_post_opt(sp: sys::spank_t, ac: c_int, av: *mut *mut c_char) -> c_int {
    run(
        "init_post_opt",
        HookPhase::Submit,
        sp,
        ac,
        av,
        |spank| match spank.context() {
            Context::Local | Context::Allocator => submit::check_request(spank),
            _ => Ok(()),
        },
    )
}

/// slurmstepd, once per step: decide the step's quota (never fails: see `gmq_node::hooks::step`).
#[no_mangle]
pub extern "C" fn slurm_spank_user_init(sp: sys::spank_t, ac: c_int, av: *mut *mut c_char) -> c_int {
    run("user_init", HookPhase::Step, sp, ac, av, |spank| {
        match spank.context() {
            Context::Remote => step::user_init(spank, &STEP),
            _ => Ok(()),
        }
    })
}

/// The job prolog (root, before the job's first step on this node): start the job's watchdog.
/// Never fails: a failing prolog drains the node.
#[no_mangle]
pub extern "C" fn slurm_spank_job_prolog(sp: sys::spank_t, ac: c_int, av: *mut *mut c_char) -> c_int {
    run_never_failing("job_prolog", HookPhase::Prolog, sp, ac, av, job_script::prolog)
}

/// The job epilog (root, after the job's last step on this node): stop the watchdog, and deal with
/// what the job left in its cgroups. Never fails: a failing epilog drains the node.
#[no_mangle]
pub extern "C" fn slurm_spank_job_epilog(sp: sys::spank_t, ac: c_int, av: *mut *mut c_char) -> c_int {
    run_never_failing("job_epilog", HookPhase::Epilog, sp, ac, av, job_script::epilog)
}

/// The end of a step (every context calls it): in slurmstepd, the batch step's final record.
#[no_mangle]
pub extern "C" fn slurm_spank_exit(sp: sys::spank_t, ac: c_int, av: *mut *mut c_char) -> c_int {
    run("exit", HookPhase::Exit, sp, ac, av, |spank| {
        match spank.context() {
            Context::Remote => job_end::exit(spank),
            _ => Ok(()),
        }
    })
}

/// slurmstepd, as root, as each task's exit is collected and before srun hears of it: a
/// multi-node job's record entry that another node's merge replaced goes back. Never fails: the
/// task has ended, and its exit status is the job's.
#[no_mangle]
pub extern "C" fn slurm_spank_task_exit(sp: sys::spank_t, ac: c_int, av: *mut *mut c_char) -> c_int {
    let _ = run("task_exit", HookPhase::Exit, sp, ac, av, |spank| {
        match spank.context() {
            Context::Remote => job_end::task_exit(spank),
            _ => Ok(()),
        }
    });
    0
}

/// slurmstepd's task child, as root, before task_init: whether the job's watchdog runs here.
#[no_mangle]
pub extern "C" fn slurm_spank_task_init_privileged(
    sp: sys::spank_t,
    ac: c_int,
    av: *mut *mut c_char,
) -> c_int {
    let _ = run(
        "task_init_privileged",
        HookPhase::Task,
        sp,
        ac,
        av,
        |spank| match spank.context() {
            Context::Remote => step::task_init_privileged(spank, &STEP),
            _ => Ok(()),
        },
    );
    0
}

/// slurmstepd's task child, as the user, just before exec: apply the step's decision.
/// Failing here ends the task with exit code 1 (the job fails, the user sees why). Failing earlier, in
/// user_init, would make slurmd report "could not execve job" and drain the node: a forged value must
/// never let a user take a node out of service.
#[no_mangle]
pub extern "C" fn slurm_spank_task_init(sp: sys::spank_t, ac: c_int, av: *mut *mut c_char) -> c_int {
    run("task_init", HookPhase::Task, sp, ac, av, |spank| {
        match spank.context() {
            Context::Remote => step::task_init(spank, &STEP),
            _ => Ok(()),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_init_failure_mode_is_slurm_25_05s_node_failure() {
        // 25.05's slurm_errno.h: ESPANK_ERROR = 3000, then BAD_ARG, NOT_TASK, ENV_EXISTS, ENV_NOEXIST,
        // NOSPACE, NOT_REMOTE, NOEXIST, NOT_EXECD, NOT_AVAIL, NOT_LOCAL, NODE_FAILURE, JOB_FAILURE.
        assert_eq!(sys::slurm_err_t_ESPANK_ERROR, 3000);
        assert_eq!(sys::slurm_err_t_ESPANK_NOT_LOCAL, 3010);
        assert_eq!(
            slurm_spank_init_failure_mode,
            sys::slurm_err_t_ESPANK_NOT_LOCAL as c_int + 1
        );
    }
}
