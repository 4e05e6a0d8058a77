//! What several of the test modules share.

pub(crate) mod attribution_world;
#[path = "../../../../core/tests/integration/common/watchdog_fakes.rs"]
pub(crate) mod watchdog_fakes;
