//! The plugin's command-line options, in one table. Registered in `slurm_spank_init`, so
//! `sbatch --help`, `srun --help` and `salloc --help` list them under "Options provided by plugins".

use std::ffi::{c_char, c_int, CStr};
use std::sync::Mutex;

use super::{exports::guard, sys};
use gmq_core::request;

pub(crate) struct SpankOption {
    pub(crate) name: &'static CStr,
    arginfo: &'static CStr,
    pub(crate) usage: &'static CStr,
    /// Whether the option takes a value (`--opt=VALUE`) or is a flag.
    has_arg: bool,
    /// The value Slurm hands back to the callback, to tell options apart.
    val: c_int,
    /// Checks a value on the submit host; the message names the option and the value.
    pub(crate) validate: fn(&str) -> Result<(), String>,
}

impl SpankOption {
    pub(crate) fn to_raw(&self) -> sys::spank_option {
        sys::spank_option {
            name: self.name.as_ptr() as *mut c_char,
            arginfo: if self.has_arg {
                self.arginfo.as_ptr() as *mut c_char
            } else {
                std::ptr::null_mut()
            },
            usage: self.usage.as_ptr() as *mut c_char,
            has_arg: c_int::from(self.has_arg),
            val: self.val,
            cb: Some(on_option),
        }
    }
}

pub(super) const QUOTA: SpankOption = SpankOption {
    name: c"gpu-mem-quota",
    arginfo: c"SIZE",
    usage: c"GPU memory the job may use on each of its GPUs: a size as for --mem (40G, 40960M; bare number = MiB). \
        Over it the job is requeued or cancelled as the site configures.",
    has_arg: true,
    val: 1,
    validate: |value| request::parse_quota_option(value).map(drop).map_err(|e| e.to_string()),
};

pub(crate) const BATCH: SpankOption = SpankOption {
    name: c"gpu-mem-batch",
    arginfo: c"MICRO[xACCUM]",
    usage: c"The job's batch geometry (e.g. 8x8: micro-batch 8, gradient accumulation 8). After a requeue for GPU \
        memory the job is told a micro-batch and accumulation that keep the effective batch and fit its quota.",
    has_arg: true,
    val: 2,
    validate: |value| gmq_core::batch::parse_batch_option(value).map(drop).map_err(|e| e.to_string()),
};

pub(crate) const PREEMPTIBLE: SpankOption = SpankOption {
    name: c"gpu-mem-preemptible",
    arginfo: c"",
    usage: c"Volunteer this job to be requeued first when a shared GPU runs short of memory.",
    has_arg: false,
    val: 3,
    validate: |_| Ok(()),
};

pub(super) const ALL: &[SpankOption] = &[QUOTA, BATCH, PREEMPTIBLE];

/// The values given on this submit host's command line (by option `val`), kept for the policy check
/// in `init_post_opt`: Slurm's getopt does not work in the allocator context. Plain process state:
/// sbatch/srun/salloc are single-threaded while they parse options.
static GIVEN: Mutex<Vec<(c_int, String)>> = Mutex::new(Vec::new());

/// The value of `option` given on this submit host's command line, if any.
pub(super) fn given(option: &SpankOption) -> Option<String> {
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
    guard("option", || {
        if remote != 0 {
            return Ok(());
        }
        let Some(option) = ALL.iter().find(|o| o.val == val) else {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_uses_the_documented_names() {
        assert_eq!(QUOTA.name.to_str().unwrap(), request::QUOTA_OPTION);
        assert_eq!(BATCH.name.to_str().unwrap(), gmq_core::batch::BATCH_OPTION);
        // Slurm truncates option names longer than SPANK_OPTION_MAXLEN.
        assert!(ALL.iter().all(|o| o.name.to_bytes().len() <= 75));
        let mut vals: Vec<c_int> = ALL.iter().map(|o| o.val).collect();
        vals.dedup();
        assert_eq!(vals.len(), ALL.len());
    }
}
