//! The boundary every hook and option callback runs behind: an unwinding panic across `extern "C"`
//! would abort slurmstepd.

use std::ffi::c_int;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Once;

use gmq_node::hooks::HookPhase;

use super::log;

/// Runs a hook body: `Ok` → 0; `Err` → logged, -1; panic → logged as an internal error, -1.
///
/// Only 0 and -1, on every Slurm: 22.05 and 24.11 take some hooks' results as failed only when
/// negative (slurmstepd: `spank_init(step) < 0`), 25.05 takes any non-zero result of a required
/// plugin as failed (`_do_call_stack`, `rc = spank_init(step)`); -1 is a failure to all of them.
pub(crate) fn guard(hook: &str, phase: HookPhase, body: impl FnOnce() -> Result<(), String>) -> c_int {
    static QUIET_PANICS: Once = Once::new();
    // The default panic hook writes to stderr (the user's terminal, or nowhere in slurmstepd);
    // the guard logs the panic itself. This std is the plugin's own copy: the host is unaffected.
    QUIET_PANICS.call_once(|| std::panic::set_hook(Box::new(|_| {})));
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => 0,
        Ok(Err(message)) => {
            log::error(&format!("{phase}: {message}"));
            -1
        }
        Err(payload) => {
            let what = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".to_string());
            log::error(&format!(
                "{phase}: internal error in {hook}: {what}; refusing this step rather than guessing"
            ));
            -1
        }
    }
}
