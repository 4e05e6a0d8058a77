//! Warnings on stderr, each at most once per process: a bad file is re-read on every call and must
//! not flood the caller's log.

use std::fmt::Arguments;
use std::sync::Mutex;

/// After this many distinct warnings, stay quiet.
const MAX_WARNINGS: usize = 64;

static WARNED: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Prints `fake-nvml: <message>` unless a warning with the same `key` was printed before.
pub fn warn_once(key: String, message: Arguments<'_>) {
    let mut warned = WARNED.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if warned.len() < MAX_WARNINGS && !warned.contains(&key) {
        warned.push(key);
        eprintln!("fake-nvml: {message}");
    }
}
