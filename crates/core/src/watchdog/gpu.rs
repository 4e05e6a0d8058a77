//! What the watchdog sees of the GPUs: one sample of each (memory and the processes holding it),
//! from a source that is NVML on a node and a table in tests.

/// One process holding memory on a GPU. `used: None`: NVML cannot say (`Unavailable`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuProcess {
    pub pid: u32,
    pub used: Option<u64>,
}

/// One GPU at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuSample {
    /// The job's name for the GPU: its gres index (the N of /dev/nvidiaN).
    pub index: u32,
    pub uuid: String,
    pub total: u64,
    /// Memory in use on the whole device (every process, every job).
    pub used: u64,
    pub processes: Vec<GpuProcess>,
    /// Slurm gave this GPU to the job. The watchdog samples every GPU of the node all the same:
    /// the job's processes count wherever they are (the list comes from the job's environment).
    pub listed: bool,
}

/// Where the watchdog gets its samples: NVML on a node, a table in tests.
pub trait GpuSource {
    /// Samples the job's GPUs. An error means this sample is lost; the next may work.
    fn sample(&mut self) -> Result<Vec<GpuSample>, String>;
    /// The size of the job's GPUs (the smallest, if they differ).
    fn gpu_total(&self) -> Option<u64>;
}
