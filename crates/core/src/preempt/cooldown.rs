//! Anti-thrash, pure: the rules that keep preemption from turning into a requeue loop.
//!
//! 1. After a preemption on a GPU, no other preemption on that GPU for one cooldown: the victim
//!    needs time to leave and free its memory, and the freed memory must be seen before anyone
//!    else is judged.
//! 2. A job that was preempted before (by us, counted in its record) is protected for one cooldown
//!    after it starts again: the contention that requeued it is not allowed to requeue it again
//!    before it has had a chance to run.
//! 3. Per job, at most `max_preemptions_per_job`; then `after_max` (held, or left alone): see
//!    `victim`.
//!
//! A GPU's cooldown is shared by all watchdogs on the node (the registry keeps it), so every
//! watchdog applies the same gate; [`GpuCooldown::try_record`] is the one place a preemption is
//! admitted.

use std::time::Duration;

/// The last preemption on one GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Preemption {
    pub victim: u32,
    /// Unix seconds.
    pub at: u64,
}

/// One GPU's anti-thrash state: idle, or cooling down since its last preemption.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GpuCooldown {
    pub last: Option<Preemption>,
}

/// Whether a preemption may happen on the GPU now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Gate {
    Open,
    /// Preempted recently: nothing until `until` (unix seconds).
    CoolingDown {
        until: u64,
    },
}

impl GpuCooldown {
    pub(crate) fn gate(&self, now: u64, cooldown: Duration) -> Gate {
        match self.last {
            // A clock stepped back (now < at) keeps the GPU cooling: until is after at.
            Some(last) if now < until(last.at, cooldown) => Gate::CoolingDown {
                until: until(last.at, cooldown),
            },
            _ => Gate::Open,
        }
    }

    /// Admits one preemption of `victim` at `now`, or refuses it while the GPU cools down
    /// (returning when it stops).
    pub fn try_record(&mut self, victim: u32, now: u64, cooldown: Duration) -> Result<(), u64> {
        match self.gate(now, cooldown) {
            Gate::CoolingDown { until } => Err(until),
            Gate::Open => {
                self.last = Some(Preemption { victim, at: now });
                Ok(())
            }
        }
    }
}

/// Until when a job is protected from preemption: one cooldown after its start, when it was
/// preempted before; `None` for a job never preempted.
pub(crate) fn protected_until(preemptions: u32, start_time: u64, cooldown: Duration) -> Option<u64> {
    (preemptions > 0).then(|| until(start_time, cooldown))
}

fn until(since: u64, cooldown: Duration) -> u64 {
    since.saturating_add(cooldown.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    const COOLDOWN: Duration = Duration::from_secs(300);

    #[test]
    fn one_preemption_per_cooldown() {
        let mut gpu = GpuCooldown::default();
        assert_eq!(gpu.gate(1000, COOLDOWN), Gate::Open);
        // (now, victim, admitted?)
        let table: &[(u64, u32, Result<(), u64>)] = &[
            (1000, 7, Ok(())),
            (1000, 8, Err(1300)), // the same decision on another watchdog: refused
            (1299, 8, Err(1300)),
            (900, 8, Err(1300)), // the clock stepped back: still cooling
            (1300, 8, Ok(())),
            (1301, 9, Err(1600)),
        ];
        for &(now, victim, want) in table {
            assert_eq!(
                gpu.try_record(victim, now, COOLDOWN),
                want,
                "t={now} victim={victim}"
            );
        }
        assert_eq!(gpu.last, Some(Preemption { victim: 8, at: 1300 }));
        assert_eq!(gpu.gate(1599, COOLDOWN), Gate::CoolingDown { until: 1600 });
        assert_eq!(gpu.gate(1600, COOLDOWN), Gate::Open);
    }

    #[test]
    fn zero_cooldown_admits_every_time() {
        let mut gpu = GpuCooldown::default();
        assert_eq!(gpu.try_record(1, 5, Duration::ZERO), Ok(()));
        assert_eq!(gpu.try_record(2, 5, Duration::ZERO), Ok(()));
    }

    #[test]
    fn protection_after_a_restart() {
        assert_eq!(protected_until(0, 1000, COOLDOWN), None);
        assert_eq!(protected_until(1, 1000, COOLDOWN), Some(1300));
        assert_eq!(protected_until(3, u64::MAX - 5, COOLDOWN), Some(u64::MAX));
    }
}
