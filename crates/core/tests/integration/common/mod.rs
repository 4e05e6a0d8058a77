//! What several of the test modules share.

pub(crate) mod config_errors;
pub(crate) mod watchdog_fakes;
