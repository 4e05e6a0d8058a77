//! What the plugin tells a job's watchdog: the watchdog's public interface.
//!
//! - `params`: the watchdog's command line, written by the plugin and read by `gpu-mem-quota
//!   watchdog` (one definition for both sides). gmq-node's `spawn` starts the watchdog with it
//!   from inside slurmstepd, as a detached daemon.
//!
//! The plugin (`spank`) and the watchdog (`watchdog`, `cli`) both depend on this module; neither
//! depends on the other.

pub(crate) mod params;

pub use params::Params;
