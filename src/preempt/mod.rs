//! Priority preemption on a contended GPU: when several jobs share a GPU (shards, MPS,
//! oversubscription) and its memory runs short, the least important job is requeued before anyone
//! runs out of memory. The design and its reasons are in docs/PREEMPTION.md.
//!
//! - `rank`: how important a job is, from the admin's config and slurmctld only (never the user).
//! - `victim`: pure; one GPU's snapshot in, at most one victim out, the same on every watchdog.
//! - `cooldown`: pure; the anti-thrash rules (per-GPU cooldown, protection of a restarted job).
//! - `registry`: the I/O edge; the node-local files through which the watchdogs of a node see
//!   each other's jobs, notice a dead watchdog, and agree on who acts.
//!
//! Each watchdog acts only on its own job: all compute the same victim, and only the victim's
//! watchdog requeues itself. The exception is a victim whose watchdog died (see `registry`).
//!
//! Times are unix seconds: they are compared across processes, which share no `Instant`.

pub mod cooldown;
pub mod rank;
pub mod registry;
pub mod victim;

use std::time::Duration;

use crate::config::Amount;
use crate::size::ByteSize;

pub use cooldown::{protected_until, Gate, GpuCooldown};
pub use rank::{rank_of, JobPriority, Rank, RankKind, Ranks};
pub use victim::{
    contention, decide, victim_order, CannotPreempt, Contention, Decision, GpuSnapshot, JobOnGpu, Skipped,
    Victim, Why,
};

/// What happens to a job already preempted `max_preemptions_per_job` times when it is the victim
/// again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterMax {
    /// Requeue it held (`scontrol requeuehold`): it stops coming back until someone releases it.
    Hold,
    /// Never preempt it again; the next job in line goes instead.
    LeaveAlone,
}

/// The preemption policy (the `[preemption]` table of the config).
#[derive(Debug, Clone, PartialEq)]
pub struct PreemptSettings {
    /// Off by default: preemption requeues jobs that did nothing wrong, an admin must ask for it.
    pub enabled: bool,
    /// Free memory a GPU keeps: a size, or a percent of the GPU (the syntax of quotas).
    pub reserve: Amount,
    /// Contended too when the trend predicts the GPU full within this time.
    pub horizon: Duration,
    /// After a preemption on a GPU, none on that GPU for this long; a preempted job that restarts
    /// is protected for this long after its start.
    pub cooldown: Duration,
    pub max_preemptions_per_job: u32,
    pub after_max: AfterMax,
    /// A registry entry whose heartbeat is older than this, and whose watchdog is gone, is stale.
    pub heartbeat_timeout: Duration,
    /// Preemption ranks by QOS, partition or account: lower goes first.
    pub ranks: Ranks,
}

impl Default for PreemptSettings {
    fn default() -> Self {
        PreemptSettings {
            enabled: false,
            reserve: crate::config::values::parse_amount("5%").expect("a valid percent"),
            horizon: Duration::from_secs(30),
            cooldown: Duration::from_secs(300),
            max_preemptions_per_job: 3,
            after_max: AfterMax::Hold,
            // 15 intervals of the default 2 s: a busy node does not make a live watchdog stale.
            heartbeat_timeout: Duration::from_secs(30),
            ranks: Ranks::new(),
        }
    }
}

impl PreemptSettings {
    /// The reserve in bytes on a GPU of `total` bytes.
    pub fn reserve_bytes(&self, total: u64) -> u64 {
        self.reserve
            .resolve(Some(ByteSize::from_bytes(total)))
            .map_or(0, ByteSize::bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::values::parse_amount;

    #[test]
    fn reserve_in_bytes() {
        const G: u64 = 1 << 30;
        let cases = [
            ("4G", 80 * G, 4 * G),
            ("5%", 80 * G, 4 * G),
            ("100%", 80 * G, 80 * G),
            ("1%", 10 << 20, 1 << 20), // never below 1 MiB
        ];
        for (reserve, total, want) in cases {
            let settings = PreemptSettings {
                reserve: parse_amount(reserve).unwrap(),
                ..PreemptSettings::default()
            };
            assert_eq!(settings.reserve_bytes(total), want, "{reserve} of {total}");
        }
    }
}
