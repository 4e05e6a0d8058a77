//! The GPUs as NVML sees them, through nvml-wrapper: which devices are the job's, and one sample of
//! each (memory and the processes holding it). The only module that talks to NVML.

use std::ffi::OsStr;
use std::path::Path;

use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::struct_wrappers::device::ProcessInfo;
use nvml_wrapper::{Device, Nvml};

use gmq_core::watchdog::gpu::{GpuProcess, GpuSample, GpuSource};

/// A source that keeps its last sample, for the code that looks at the same sample after the loop.
pub(crate) struct Recording<'a> {
    pub(crate) inner: &'a mut dyn GpuSource,
    pub(crate) last: Vec<GpuSample>,
}

impl GpuSource for Recording<'_> {
    fn sample(&mut self) -> Result<Vec<GpuSample>, String> {
        let sample = self.inner.sample()?;
        self.last = sample.clone();
        Ok(sample)
    }

    fn gpu_total(&self) -> Option<u64> {
        self.inner.gpu_total()
    }
}

/// A GPU of the node, found in NVML.
#[derive(Debug, Clone)]
struct NodeGpu {
    index: u32,
    nvml_index: u32,
    uuid: String,
    total: u64,
    listed: bool,
}

pub struct NvmlSource {
    nvml: Nvml,
    gpus: Vec<NodeGpu>,
    /// Only the job's GPUs are sampled ([`NvmlSource::sample_listed_only`]).
    listed_only: bool,
}

fn describe(e: NvmlError) -> String {
    match e {
        NvmlError::LibloadingError(e) => format!("cannot load the NVML library: {e}"),
        other => other.to_string(),
    }
}

impl NvmlSource {
    /// Loads NVML from `library` and finds the node's GPUs, marking the job's (`gpus`, see
    /// [`NvmlSource::mark_listed`]). A GPU that is not on the node is no reason to fail: every GPU
    /// is sampled (until [`NvmlSource::sample_listed_only`]), and the job's own processes are found
    /// wherever they are.
    pub fn open(library: &Path, gpus: &[String]) -> Result<NvmlSource, String> {
        let nvml = Nvml::builder()
            .lib_path(OsStr::new(library))
            .init()
            .map_err(describe)?;
        let count = nvml.device_count().map_err(describe)?;
        let mut devices = Vec::new();
        for nvml_index in 0..count {
            let device = nvml.device_by_index(nvml_index).map_err(describe)?;
            let minor = device.minor_number().ok();
            let uuid = device.uuid().map_err(describe)?;
            let total = device.memory_info().map_err(describe)?.total;
            devices.push((nvml_index, minor, uuid, total));
        }
        let found: Vec<NodeGpu> = devices
            .iter()
            .map(|&(nvml_index, minor, ref uuid, total)| NodeGpu {
                index: minor.unwrap_or(nvml_index),
                nvml_index,
                uuid: uuid.clone(),
                total,
                listed: false,
            })
            .collect();
        let mut source = NvmlSource {
            nvml,
            gpus: found,
            listed_only: false,
        };
        source.mark_listed(gpus);
        Ok(source)
    }

    /// Marks the job's GPUs (as Slurm lists them: indices match a device's minor number, the N of
    /// /dev/nvidiaN, else NVML's own index; UUIDs match exactly), unmarking the others. Returns
    /// the names that match no GPU of the node.
    pub(crate) fn mark_listed(&mut self, gpus: &[String]) -> Vec<String> {
        for gpu in &mut self.gpus {
            gpu.listed = false;
        }
        let mut unknown = Vec::new();
        for wanted in gpus {
            let hit = self
                .gpus
                .iter_mut()
                .find(|g| &g.uuid == wanted || wanted.parse() == Ok(g.index));
            match hit {
                Some(gpu) => gpu.listed = true,
                None => unknown.push(wanted.clone()),
            }
        }
        unknown
    }

    /// From now on, samples only the job's GPUs: where Slurm constrains the job's devices, its
    /// processes can be on no other, and a node's cost then grows with its GPUs, not with jobs x
    /// GPUs.
    pub fn sample_listed_only(&mut self) {
        self.listed_only = true;
    }

    /// How many GPUs NVML lists on the node.
    pub(crate) fn device_count(&self) -> usize {
        self.gpus.len()
    }

    fn sample_one(&self, gpu: &NodeGpu) -> Result<GpuSample, NvmlError> {
        let device = self.nvml.device_by_index(gpu.nvml_index)?;
        let memory = device.memory_info()?;
        let mut processes = Vec::new();
        for info in processes_of(&device, |d| d.running_compute_processes())?
            .into_iter()
            .chain(processes_of(&device, |d| d.running_graphics_processes())?)
        {
            let used = match info.used_gpu_memory {
                UsedGpuMemory::Used(bytes) => Some(bytes),
                UsedGpuMemory::Unavailable => None,
            };
            processes.push(GpuProcess { pid: info.pid, used });
        }
        Ok(GpuSample {
            index: gpu.index,
            uuid: gpu.uuid.clone(),
            total: memory.total,
            used: memory.used,
            processes,
            listed: gpu.listed,
        })
    }
}

/// NVML's process lists may grow between its count and fill calls; nvml-wrapper then reports
/// `InsufficientSize`. Ask again a few times before giving the sample up.
fn processes_of<'d, 'n>(
    device: &'d Device<'n>,
    list: impl Fn(&'d Device<'n>) -> Result<Vec<ProcessInfo>, NvmlError>,
) -> Result<Vec<ProcessInfo>, NvmlError> {
    let mut attempt = 0;
    loop {
        match list(device) {
            Err(NvmlError::InsufficientSize(_)) if attempt < 3 => attempt += 1,
            Err(NvmlError::NotSupported) => return Ok(Vec::new()),
            other => return other,
        }
    }
}

impl GpuSource for NvmlSource {
    fn sample(&mut self) -> Result<Vec<GpuSample>, String> {
        self.gpus
            .iter()
            .filter(|gpu| gpu.listed || !self.listed_only)
            .map(|gpu| {
                self.sample_one(gpu)
                    .map_err(|e| format!("GPU {} ({}): {}", gpu.index, gpu.uuid, describe(e)))
            })
            .collect()
    }

    fn gpu_total(&self) -> Option<u64> {
        self.gpus.iter().filter(|g| g.listed).map(|g| g.total).min()
    }
}

/// An `nvmlDevice_t` of a live [`NvmlSource`]: only the source makes one, and it cannot outlive it
/// (NVML stays initialised, so the handle stays valid).
#[derive(Debug, Clone, Copy)]
pub struct DeviceHandle<'a> {
    raw: *mut std::ffi::c_void,
    _source: std::marker::PhantomData<&'a NvmlSource>,
}

impl DeviceHandle<'_> {
    pub(crate) fn raw(self) -> *mut std::ffi::c_void {
        self.raw
    }
}

impl NvmlSource {
    /// The job's GPUs (those Slurm listed) as `(index, uuid)`.
    pub fn listed(&self) -> Vec<(u32, String)> {
        self.gpus
            .iter()
            .filter(|g| g.listed)
            .map(|g| (g.index, g.uuid.clone()))
            .collect()
    }

    /// The job's GPUs (those Slurm listed) as `(index, handle)`, for calls nvml-wrapper has no
    /// binding for (`super::hard_limit`).
    pub fn listed_handles(&self) -> Vec<(u32, DeviceHandle<'_>)> {
        self.gpus
            .iter()
            .filter(|g| g.listed)
            .filter_map(|g| {
                let device = self.nvml.device_by_index(g.nvml_index).ok()?;
                // SAFETY: the raw handle is only passed back to the same NVML library.
                let raw = unsafe { device.handle() }.cast::<std::ffi::c_void>();
                Some((
                    g.index,
                    DeviceHandle {
                        raw,
                        _source: std::marker::PhantomData,
                    },
                ))
            })
            .collect()
    }

    /// The node's GPUs as `(index, uuid, total bytes)`, for the inventory file the plugin reads.
    pub fn inventory(&self) -> Vec<(u32, String, u64)> {
        self.gpus
            .iter()
            .map(|g| (g.index, g.uuid.clone(), g.total))
            .collect()
    }
}
