//! Priority preemption on a contended GPU: when several jobs share a GPU (shards, MPS,
//! oversubscription) and its memory runs short, the least important job is requeued before anyone
//! runs out of memory. The design and its reasons are in docs/PREEMPTION.md.
//!
//! - `rank`: how important a job is, from the admin's config and slurmctld only (never the user).
//! - `victim`: pure; one GPU's snapshot in, at most one victim out, the same on every watchdog.
//! - `cooldown`: pure; the anti-thrash rules (per-GPU cooldown, protection of a restarted job).
//! - gmq-node's `preempt_registry`: the I/O edge; the node-local files through which the watchdogs
//!   of a node see each other's jobs, notice a dead watchdog, and agree on who acts.
//!
//! Each watchdog acts only on its own job: all compute the same victim, and only the victim's
//! watchdog requeues itself. The exception is a victim whose watchdog died (see `registry`).
//!
//! Times are unix seconds: they are compared across processes, which share no `Instant`.

pub mod cooldown;
pub(crate) mod rank;
pub mod victim;

pub use crate::config::{AfterMax, PreemptSettings};
pub use cooldown::GpuCooldown;
pub use rank::{rank_of, JobPriority};
pub use rank::{Rank, RankKind, Ranks};
pub use victim::{
    contention, decide, victim_order, CannotPreempt, Contention, Decision, GpuSnapshot, JobOnGpu, NotGiven,
    Skipped, Victim, Why,
};
