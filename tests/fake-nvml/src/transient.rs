//! Transient faults: "the next N calls of F fail". The count of failures already delivered lives
//! in `faults.state` next to `faults.toml`, so that it holds across the processes that load the
//! library (the watchdog restarts, several jobs share a node). The file is one line,
//! `<function> <error> <times> <delivered>`; when faults.toml names another fault the count starts
//! over. Delete faults.state to re-arm the same fault. Updates are serialised with flock(2).

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::AsRawFd;
use std::path::Path;

use crate::codes::Return;
use crate::scenario::Transient;
use crate::warn::warn_once;

/// Whether this call of `function` must fail, and with what. Counts the failure if so.
/// If the state file cannot be written the fault is not injected (an uncountable "transient"
/// fault would never end), and that is reported once.
pub fn take(state_path: &Path, fault: &Transient, function: &str) -> Option<Return> {
    if fault.function != function || fault.times == 0 {
        return None;
    }
    match count_one(state_path, fault) {
        Ok(inject) => inject.then_some(fault.error),
        Err(e) => {
            warn_once(
                format!("state {}", state_path.display()),
                format_args!("transient fault not injected: {}: {e}", state_path.display()),
            );
            None
        }
    }
}

/// Increments the delivered count if it is below `times`; true if it was.
fn count_one(state_path: &Path, fault: &Transient) -> std::io::Result<bool> {
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW)
        .open(state_path)?;
    lock_exclusive(&file)?;
    let mut text = String::new();
    file.read_to_string(&mut text)?;
    let key = format!("{} {} {}", fault.function, fault.error, fault.times);
    let delivered: u32 = text
        .trim()
        .rsplit_once(' ')
        .filter(|(recorded_key, _)| *recorded_key == key)
        .and_then(|(_, count)| count.parse().ok())
        .unwrap_or(0);
    if delivered >= fault.times {
        return Ok(false);
    }
    file.set_len(0)?;
    file.rewind()?;
    writeln!(file, "{key} {}", delivered + 1)?;
    Ok(true)
}

/// Holds until `file` is closed, at the end of [`count_one`].
fn lock_exclusive(file: &File) -> std::io::Result<()> {
    // SAFETY: flock on a descriptor that stays open for the call.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_down_then_stops_and_restarts_for_a_new_fault() {
        let dir = tempfile::Builder::new()
            .prefix("fake-nvml-transient-")
            .tempdir()
            .unwrap();
        let state = dir.path().join("faults.state");
        let fault = |times| Transient {
            function: "nvmlDeviceGetCount_v2".to_string(),
            error: 999,
            times,
        };

        let two = fault(2);
        let got: Vec<_> = (0..4)
            .map(|_| take(&state, &two, "nvmlDeviceGetCount_v2"))
            .collect();
        assert_eq!(got, [Some(999), Some(999), None, None]);
        assert_eq!(take(&state, &two, "nvmlDeviceGetName"), None);
        assert_eq!(
            std::fs::read_to_string(&state).unwrap(),
            "nvmlDeviceGetCount_v2 999 2 2\n"
        );

        let one = fault(1);
        assert_eq!(take(&state, &one, "nvmlDeviceGetCount_v2"), Some(999));
        assert_eq!(take(&state, &one, "nvmlDeviceGetCount_v2"), None);
    }
}
