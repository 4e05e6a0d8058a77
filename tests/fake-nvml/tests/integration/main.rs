//! The fake libnvidia-ml's tests: its C ABI, the real nvml-wrapper over it, MPS memory limits,
//! and what one sample costs (`sample_cost`, ignored: a measurement). One binary; each file a
//! module.

mod common;

mod capacity;
mod memory_limits;
mod nvml_wrapper;
mod raw_abi;
mod sample_cost;
