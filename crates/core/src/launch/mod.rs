//! What the plugin tells a job's watchdog: the watchdog's public interface.
//!
//! - `params`: the watchdog's command line, written by the plugin and read by `gpu-mem-quota
//!   watchdog` (one definition for both sides). gmq-node's `spawn` starts the watchdog with it
//!   from inside slurmstepd, as a detached daemon.
//! - [`SLURMD_VAR`]: the slurmd that ran the job prolog, in the watchdog's environment (which the
//!   plugin builds from nothing: never the job's).
//!
//! The plugin (`spank`) and the watchdog (`watchdog`, `cli`) both depend on this module; neither
//! depends on the other.

pub(crate) mod params;

pub use params::{Params, Provisional};

/// The watchdog's environment variable naming the slurmd that ran the job prolog which started
/// it, as `PID:START_TIME` (`/proc/PID/stat`'s field 22). In the environment, not on the command
/// line, so that a watchdog and a plugin of different versions still agree: an older watchdog
/// ignores it, and a watchdog without it does not look at slurmd.
pub const SLURMD_VAR: &str = "GMQ_SLURMD";

/// [`SLURMD_VAR`]'s value for the process `pid` started at `start_time`.
pub fn slurmd_var_value(pid: u32, start_time: u64) -> String {
    format!("{pid}:{start_time}")
}

/// `(pid, start_time)` from [`SLURMD_VAR`]'s value; `None` for anything else (pid 0 included).
pub fn parse_slurmd_var(text: &str) -> Option<(u32, u64)> {
    let (pid, start) = text.split_once(':')?;
    let pid: u32 = pid.parse().ok().filter(|&p| p > 0)?;
    Some((pid, start.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_slurmd_variable_round_trips_and_rejects_the_rest() {
        assert_eq!(
            parse_slurmd_var(&slurmd_var_value(4242, 171676)),
            Some((4242, 171676))
        );
        for bad in ["", "4242", "4242:", ":1", "0:1", "-1:1", "x:1", "1:y", "1:2:3"] {
            assert_eq!(parse_slurmd_var(bad), None, "{bad}");
        }
    }
}
