//! The option callback, and the values given on this submit host's command line. The option
//! table itself is `gmq_node::hooks::OPTIONS`.

use std::ffi::{c_char, c_int, CStr};
use std::sync::Mutex;

use super::guard::guard;
use super::sys;
use gmq_node::hooks::{HookPhase, PluginOption, OPTIONS};

/// The option as Slurm's `struct spank_option`, with [`on_option`] as its callback.
pub(crate) fn to_raw(option: &PluginOption) -> sys::spank_option {
    sys::spank_option {
        name: option.name.as_ptr() as *mut c_char,
        arginfo: if option.has_arg {
            option.arginfo.as_ptr() as *mut c_char
        } else {
            std::ptr::null_mut()
        },
        usage: option.usage.as_ptr() as *mut c_char,
        has_arg: c_int::from(option.has_arg),
        val: option.val,
        cb: Some(on_option),
    }
}

/// The values given on this submit host's command line (by option `val`), kept for the policy check
/// in `init_post_opt`: Slurm's getopt does not work in the allocator context. Plain process state:
/// sbatch/srun/salloc are single-threaded while they parse options.
static GIVEN: Mutex<Vec<(c_int, String)>> = Mutex::new(Vec::new());

/// The value of `option` given on this submit host's command line, if any.
pub(crate) fn given(option: &PluginOption) -> Option<String> {
    let given = GIVEN.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    given
        .iter()
        .rev()
        .find(|(val, _)| *val == option.val)
        .map(|(_, value)| value.clone())
}

/// Slurm calls this when an option is given: on the submit host (`remote == 0`) while it parses the
/// command line, where an error stops sbatch/srun/salloc before anything is submitted; and in
/// slurmstepd (`remote == 1`), where Slurm only logs a failure, so the remote context re-validates
/// the value itself in `user_init` and refuses the step there.
extern "C" fn on_option(val: c_int, optarg: *const c_char, remote: c_int) -> c_int {
    guard("option", HookPhase::Submit, || {
        if remote != 0 {
            return Ok(());
        }
        let Some(option) = OPTIONS.iter().find(|o| o.val == val) else {
            return Err(format!("unknown option value {val}"));
        };
        let value = if optarg.is_null() {
            String::new()
        } else {
            // SAFETY: Slurm passes the option's argument as a NUL-terminated string.
            unsafe { CStr::from_ptr(optarg) }.to_string_lossy().into_owned()
        };
        (option.validate)(&value)?;
        GIVEN
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .push((val, value));
        Ok(())
    })
}
