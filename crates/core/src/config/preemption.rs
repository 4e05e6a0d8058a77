//! The `[preemption]` table of the config: the policy that gmq-node's `preempt` applies. The settings
//! live here, with the rest of the policy, so that the config does not depend on the code that
//! acts on it (`preempt` depends on `config`, never the reverse).

use std::collections::BTreeMap;
use std::time::Duration;

use super::Amount;
use crate::size::ByteSize;

/// What a configured rank is keyed by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RankKind {
    Qos,
    Partition,
    Account,
}

impl RankKind {
    /// In the order they are consulted.
    pub const ALL: [RankKind; 3] = [RankKind::Qos, RankKind::Partition, RankKind::Account];

    /// The name in the config (`[preemption.ranks] qos = {...}`).
    pub fn name(self) -> &'static str {
        match self {
            RankKind::Qos => "qos",
            RankKind::Partition => "partition",
            RankKind::Account => "account",
        }
    }
}

/// The admin's ranks: (kind, name) to rank. Jobs the map does not name have rank 0.
pub type Ranks = BTreeMap<(RankKind, String), i32>;

/// What happens to a job already preempted `max_preemptions_per_job` times when it is the victim
/// again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterMax {
    /// Requeue it held (`scontrol requeuehold`): it stops coming back until someone releases it.
    Hold,
    /// Never preempt it again; the next job in line goes instead.
    LeaveAlone,
}

/// What preemption does with a job that cannot be requeued (`--no-requeue`, srun and salloc jobs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NonRequeueable {
    /// Never its victim: the next job in line goes instead. Any user can opt out of preemption
    /// this way (review G13), and a job within its quota may go for theirs.
    Skip,
    /// A victim like any other, cancelled (`scancel`) where another would be requeued.
    Cancel,
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
    pub non_requeueable: NonRequeueable,
    /// A registry entry whose heartbeat is older than this, and whose watchdog is gone, is stale.
    pub heartbeat_timeout: Duration,
    /// Preemption ranks by QOS, partition or account: lower goes first.
    pub ranks: Ranks,
}

impl Default for PreemptSettings {
    fn default() -> Self {
        PreemptSettings {
            enabled: false,
            reserve: super::values::parse_amount("5%").expect("a valid percent"),
            horizon: Duration::from_secs(30),
            cooldown: Duration::from_secs(300),
            max_preemptions_per_job: 3,
            after_max: AfterMax::Hold,
            non_requeueable: NonRequeueable::Skip,
            // 15 intervals of the default 2 s: a busy node does not make a live watchdog stale.
            heartbeat_timeout: Duration::from_secs(30),
            ranks: Ranks::new(),
        }
    }
}

impl PreemptSettings {
    /// The reserve in bytes on a GPU of `total` bytes.
    pub(crate) fn reserve_bytes(&self, total: u64) -> u64 {
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
