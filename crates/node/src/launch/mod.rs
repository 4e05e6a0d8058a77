//! How the plugin starts a job's watchdog, and what it tells it: the watchdog's public interface.
//!
//! - `params`: the watchdog's command line, written by the plugin and read by `gpu-mem-quota
//!   watchdog` (one definition for both sides).
//! - `spawn`: starting the watchdog from inside slurmstepd as a detached daemon.
//!
//! The plugin (`spank`) and the watchdog (`watchdog`, `cli`) both depend on this module; neither
//! depends on the other.

pub(crate) mod params;
pub mod spawn;

pub use params::Params;
