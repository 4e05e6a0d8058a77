//! The stop signals (SIGTERM from the job epilog, SIGINT, SIGHUP), and the waits they cut short.
//! The handler only stores to atomics; the loop looks at them between samples.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// Set by the first stop signal: ends the watch.
static STOP: AtomicBool = AtomicBool::new(false);
/// How many stop signals came: the first ends the watch, a second one self-healing's wait too.
static STOP_SIGNALS: AtomicU32 = AtomicU32::new(0);

extern "C" fn on_stop_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
    STOP_SIGNALS.fetch_add(1, Ordering::SeqCst);
}

pub(super) fn install_signal_handlers() {
    use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
    let action = SigAction::new(
        SigHandler::Handler(on_stop_signal),
        SaFlags::empty(),
        SigSet::empty(),
    );
    for signal in [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP] {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe. A failure
        // (only EINVAL, impossible for these signals) leaves the default, as before.
        let _ = unsafe { sigaction(signal, &action) };
    }
}

/// Sleeps up to `duration`, waking early when asked to stop. Returns whether to stop.
pub(super) fn sleep_or_stop(duration: Duration) -> bool {
    let end = Instant::now() + duration;
    while !STOP.load(Ordering::SeqCst) {
        let now = Instant::now();
        if now >= end {
            return false;
        }
        std::thread::sleep((end - now).min(Duration::from_millis(50)));
    }
    true
}

/// Whether a stop signal came.
pub(super) fn stop_requested() -> bool {
    STOP.load(Ordering::SeqCst)
}

/// A wait for self-healing (`gmq_core::watchdog::heal`): it runs past the stop signal that ended
/// the watch, and another one (the job prolog of the job's next run here, G14) ends it. The
/// closure sleeps up to the pause and says whether it slept it out.
pub(super) fn until_stopped_again() -> impl FnMut(Duration) -> bool {
    let signals = STOP_SIGNALS.load(Ordering::SeqCst);
    move |pause: Duration| {
        let end = Instant::now() + pause;
        while Instant::now() < end {
            if STOP_SIGNALS.load(Ordering::SeqCst) > signals.max(1) {
                return false;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        true
    }
}
