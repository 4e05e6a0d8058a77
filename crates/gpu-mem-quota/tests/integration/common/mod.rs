//! What several of the test modules share.

#[path = "../../../../core/tests/integration/common/config_errors.rs"]
pub(crate) mod config_errors;
#[path = "../../../../core/tests/integration/common/watchdog_fakes.rs"]
pub(crate) mod watchdog_fakes;
