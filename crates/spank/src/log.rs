//! Slurm's logger. In sbatch/srun/salloc it prints to the user's terminal; in slurmd and slurmstepd it
//! goes to their log with the job and step in front. Every line starts with `gpu-mem-quota: ` and
//! the phase (`gmq_node::hooks::HookPhase`).

use std::ffi::CString;

use super::sys;
use gmq_node::hooks::LogLevel;
use gmq_node::PLUGIN_NAME;

fn line(message: &str) -> CString {
    let text = format!("{PLUGIN_NAME}: {message}");
    // Interior NULs (from a forged value) would truncate the line; show them instead.
    CString::new(text.replace('\0', "\\0").replace('\n', " / ")).unwrap_or_default()
}

pub(crate) fn log(level: LogLevel, message: &str) {
    let line = line(message);
    // SAFETY: "%s" with one valid NUL-terminated string is a well-formed printf call.
    unsafe {
        match level {
            LogLevel::Info => sys::slurm_info(c"%s".as_ptr(), line.as_ptr()),
            LogLevel::Verbose => sys::slurm_verbose(c"%s".as_ptr(), line.as_ptr()),
            LogLevel::Error => sys::slurm_error(c"%s".as_ptr(), line.as_ptr()),
        }
    }
}

pub(crate) fn error(message: &str) {
    log(LogLevel::Error, message);
}
