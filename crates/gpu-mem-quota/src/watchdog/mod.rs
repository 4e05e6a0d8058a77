//! The per-job watchdog process: its edges around the engine in `gmq_core::watchdog`. NVML
//! (`gpu`), the hard-limit call (`hard_limit`), preemption on a contended GPU (`contend`), the
//! job's presence on the node (`presence`), the logs (`log`), the files gone jobs left
//! (`leftovers`), the processes a job left on its GPUs (`gpu_leftovers`), and the loop that wires
//! them from prolog to epilog (`daemon`).

pub(crate) mod contend;
pub(crate) mod daemon;
pub mod gpu;
pub(crate) mod gpu_leftovers;
pub mod hard_limit;
pub mod leftovers;
pub(crate) mod log;
pub mod presence;
