//! End-to-end tests against the real one-node cluster (`slurm/dev-cluster test` runs them).
//! Every job is submitted by the ordinary test user with the real sbatch, srun and salloc.

mod abi;
mod admission;
mod hard_limit;
mod heal;
mod hints;
mod jobstats;
mod namespace;
mod nodes;
mod plugin;
mod policy;
mod preempt;
mod prometheus;
mod report;
mod security;
mod shards;
mod support;
mod torch_job;
mod watchdog;
