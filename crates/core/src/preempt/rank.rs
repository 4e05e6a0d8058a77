//! How important a job is when a GPU runs short: its preemption rank.
//!
//! The rank comes from the admin's config (a rank per QOS, partition or account; the first that
//! names the job's wins, in that order) and from slurmctld's own job priority, which breaks ties
//! between equal ranks and is the whole answer where the config names nothing. Every input is what
//! slurmctld says about the job, never the job's environment or options: a user can choose only
//! among the QOS, partitions and accounts the admin lets them use, and can only lower their
//! Slurm priority (`--nice`). Volunteering (`--gpu-mem-preemptible`) is not a rank: it only moves
//! a job earlier in line (see `victim`).

use std::fmt;

pub use crate::config::{RankKind, Ranks};

/// What slurmctld says about the job (through `squeue`), the only inputs to its rank.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobPriority {
    pub qos: String,
    pub partition: String,
    pub account: String,
    /// Slurm's `Priority=`.
    pub slurm_priority: u32,
}

/// Lower goes first. Ordered by the configured rank, then by Slurm's priority.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct Rank {
    pub value: i32,
    pub slurm_priority: u32,
}

impl fmt::Display for Rank {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "rank {} (Slurm priority {})", self.value, self.slurm_priority)
    }
}

/// The job's rank: the configured rank of its QOS, else of its partition, else of its account,
/// else 0; with its Slurm priority for ties.
pub fn rank_of(ranks: &Ranks, job: &JobPriority) -> Rank {
    let value = RankKind::ALL
        .iter()
        .find_map(|&kind| {
            let name = match kind {
                RankKind::Qos => &job.qos,
                RankKind::Partition => &job.partition,
                RankKind::Account => &job.account,
            };
            ranks.get(&(kind, name.clone())).copied()
        })
        .unwrap_or(0);
    Rank {
        value,
        slurm_priority: job.slurm_priority,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(qos: &str, partition: &str, account: &str, slurm_priority: u32) -> JobPriority {
        JobPriority {
            qos: qos.into(),
            partition: partition.into(),
            account: account.into(),
            slurm_priority,
        }
    }

    #[test]
    fn qos_then_partition_then_account_then_zero() {
        let ranks: Ranks = [
            ((RankKind::Qos, "production".to_string()), 100),
            ((RankKind::Qos, "scavenger".to_string()), -10),
            ((RankKind::Partition, "gpu-shared".to_string()), 5),
            ((RankKind::Account, "physics".to_string()), 50),
        ]
        .into_iter()
        .collect();
        let cases = [
            (
                job("production", "gpu-shared", "physics", 7),
                100,
                "QOS wins over all",
            ),
            (
                job("scavenger", "gpu-shared", "physics", 7),
                -10,
                "a low QOS wins too",
            ),
            (
                job("normal", "gpu-shared", "physics", 7),
                5,
                "partition before account",
            ),
            (job("normal", "gpu", "physics", 7), 50, "account last"),
            (job("normal", "gpu", "chemistry", 7), 0, "nothing configured: 0"),
            (job("", "", "", 7), 0, "empty names match nothing"),
            (
                job("Production", "gpu", "x", 7),
                0,
                "names are case-sensitive, as in Slurm",
            ),
        ];
        for (job, value, why) in cases {
            assert_eq!(
                rank_of(&ranks, &job),
                Rank {
                    value,
                    slurm_priority: 7
                },
                "{why}"
            );
        }
    }

    #[test]
    fn slurm_priority_breaks_ties_and_is_the_fallback() {
        let none = Ranks::new();
        let low = rank_of(&none, &job("normal", "gpu", "a", 1000));
        let high = rank_of(&none, &job("normal", "gpu", "a", 5000));
        assert!(low < high);
        // A configured rank outweighs any Slurm priority.
        let ranks: Ranks = [((RankKind::Qos, "high".to_string()), 1)].into_iter().collect();
        assert!(rank_of(&ranks, &job("normal", "", "", u32::MAX)) < rank_of(&ranks, &job("high", "", "", 0)));
        assert_eq!(low.to_string(), "rank 0 (Slurm priority 1000)");
    }
}
