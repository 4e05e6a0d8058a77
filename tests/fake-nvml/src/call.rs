//! What every exported function does first: is NVML initialised, what does the scenario say right
//! now, is a fault due, which device does the handle name.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use crate::cache::Cache;
use crate::claims::{read_claims, Claim};
use crate::codes::{self, Return};
use crate::growth;
use crate::handle::Handle;
use crate::scenario::{parse_devices, parse_faults, Devices, Faults, Gpu, Mig, MigDevice};
use crate::transient;
use crate::warn::warn_once;

/// The scenario directory when `FAKE_NVML_DIR` is unset or empty.
pub const DEFAULT_DIR: &str = "/var/lib/fake-nvml";
/// Where live processes are looked up when `FAKE_NVML_PROC` is unset or empty.
pub const DEFAULT_PROC_ROOT: &str = "/proc";

static DEVICES: Cache<Devices> = Cache::new();
static FAULTS: Cache<Faults> = Cache::new();
/// nvmlInit/nvmlShutdown nest, as in real NVML: the library is initialised while this is > 0.
static INIT_COUNT: Mutex<u32> = Mutex::new(0);

fn init_count() -> std::sync::MutexGuard<'static, u32> {
    INIT_COUNT.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The directories the scenario lives in, from the environment at each call.
pub struct Paths {
    pub dir: PathBuf,
    pub proc_root: PathBuf,
}

impl Paths {
    pub fn from_env() -> Paths {
        let var = |name, default| match std::env::var_os(name) {
            Some(value) if !value.is_empty() => PathBuf::from(value),
            _ => PathBuf::from(default),
        };
        Paths {
            dir: var("FAKE_NVML_DIR", DEFAULT_DIR),
            proc_root: var("FAKE_NVML_PROC", DEFAULT_PROC_ROOT),
        }
    }
}

/// nvmlInit_v2 / nvmlInitWithFlags.
pub fn init(function: &str) -> Result<(), Return> {
    let paths = Paths::from_env();
    let faults = load_faults(&paths)?;
    inject_transient(&paths, &faults, function)?;
    if let Some(code) = faults.init {
        return Err(code);
    }
    load_devices(&paths)?;
    *init_count() += 1;
    Ok(())
}

/// nvmlShutdown: undoes one nvmlInit; UNINITIALIZED if there is none to undo.
pub fn shutdown() -> Result<(), Return> {
    let mut count = init_count();
    if *count == 0 {
        return Err(codes::UNINITIALIZED);
    }
    *count -= 1;
    if *count == 0 {
        growth::disarm_all();
    }
    Ok(())
}

/// The state of the world for one call of an initialised-only function.
pub struct Call {
    pub paths: Paths,
    pub devices: Arc<Devices>,
    pub faults: Arc<Faults>,
}

/// The device a handle names, as the scenario describes it now.
pub struct Target<'a> {
    pub handle: Handle,
    pub gpu: &'a Gpu,
    pub mig: Option<&'a MigDevice>,
}

impl Call {
    pub fn begin(function: &str) -> Result<Call, Return> {
        if *init_count() == 0 {
            return Err(codes::UNINITIALIZED);
        }
        let paths = Paths::from_env();
        let faults = load_faults(&paths)?;
        inject_transient(&paths, &faults, function)?;
        let devices = load_devices(&paths)?;
        Ok(Call {
            paths,
            devices,
            faults,
        })
    }

    /// The device `raw` names: INVALID_ARGUMENT if it names none (now), GPU_IS_LOST if its GPU is.
    pub fn target(&self, raw: *mut libc::c_void) -> Result<Target<'_>, Return> {
        let handle = Handle::decode(raw as u64).ok_or(codes::INVALID_ARGUMENT)?;
        let gpu = self.devices.gpus.get(handle.gpu).ok_or(codes::INVALID_ARGUMENT)?;
        let mig = match (handle.mig, &gpu.mig) {
            (None, _) => None,
            (Some(k), Mig::Enabled(devices)) => Some(devices.get(k).ok_or(codes::INVALID_ARGUMENT)?),
            (Some(_), _) => return Err(codes::INVALID_ARGUMENT),
        };
        if gpu.lost {
            return Err(codes::GPU_IS_LOST);
        }
        Ok(Target { handle, gpu, mig })
    }

    /// The whole-GPU handle of GPU `index`, if the GPU is there and not lost.
    pub fn gpu_handle(&self, index: usize) -> Result<Handle, Return> {
        let gpu = self.devices.gpus.get(index).ok_or(codes::INVALID_ARGUMENT)?;
        if gpu.lost {
            return Err(codes::GPU_IS_LOST);
        }
        Ok(Handle {
            gpu: index,
            mig: None,
        })
    }

    /// The live processes that claim memory on GPU `index`.
    pub fn claims(&self, index: usize) -> Vec<Claim> {
        read_claims(
            &self.paths.dir.join("procs").join(index.to_string()),
            &self.paths.proc_root,
        )
    }
}

/// The GPUs `devices.toml` describes now (cached): DRIVER_NOT_LOADED when it is missing, UNKNOWN
/// when it is invalid (reported on stderr once).
pub fn load_devices(paths: &Paths) -> Result<Arc<Devices>, Return> {
    match DEVICES.load(&paths.dir.join("devices.toml"), parse_devices) {
        Ok(Some(devices)) => Ok(devices),
        Ok(None) => Err(codes::DRIVER_NOT_LOADED), // no devices.toml: as if no driver
        Err(e) => Err(reported(e)),
    }
}

fn load_faults(paths: &Paths) -> Result<Arc<Faults>, Return> {
    match FAULTS.load(&paths.dir.join("faults.toml"), parse_faults) {
        Ok(Some(faults)) => Ok(faults),
        Ok(None) => Ok(Arc::new(Faults::default())),
        Err(e) => Err(reported(e)),
    }
}

/// A broken scenario file fails every call with UNKNOWN, and says why on stderr (once).
fn reported(message: String) -> Return {
    warn_once(message.clone(), format_args!("{message}"));
    codes::UNKNOWN
}

fn inject_transient(paths: &Paths, faults: &Faults, function: &str) -> Result<(), Return> {
    match &faults.transient {
        Some(fault) => match transient::take(&paths.dir.join("faults.state"), fault, function) {
            Some(code) => Err(code),
            None => Ok(()),
        },
        None => Ok(()),
    }
}
