//! Nothing: the suite is the `e2e` test (`main.rs`); see slurm/dev-cluster test.
