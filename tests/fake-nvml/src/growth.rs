//! `procs_grow_between_calls`: processes that start between a caller's count query and its fill
//! call. A count query (re)arms the device's list; until the next count query, fill calls see the
//! extra processes. So "query, then count + 5" keeps failing when more than 5 appear, while
//! retrying with the count an INSUFFICIENT_SIZE reply gave succeeds, as with a real busy GPU.
//! Kept in memory: both calls come from the same process.

use std::sync::Mutex;

use crate::claims::Kind;

static ARMED: Mutex<Vec<(u64, Kind)>> = Mutex::new(Vec::new());

fn armed() -> std::sync::MutexGuard<'static, Vec<(u64, Kind)>> {
    ARMED.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

pub fn arm(handle: u64, kind: Kind) {
    let mut armed = armed();
    if !armed.contains(&(handle, kind)) {
        armed.push((handle, kind));
    }
}

pub fn is_armed(handle: u64, kind: Kind) -> bool {
    armed().contains(&(handle, kind))
}

pub fn disarm_all() {
    armed().clear();
}
