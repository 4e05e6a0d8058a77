//! Hard limits where the driver offers them: MPS v3 memory partitioning (driver r615 / CUDA 13.4,
//! cgroup v2) lets root cap the GPU memory of a cgroup, per GPU, with
//! `nvmlDeviceSetMemoryLimits_v1(device, &nvmlSetMemoryLimits_v1_t)`. An allocation past the hard
//! limit fails in that cgroup's process alone, and `cuMemGetInfo` there reports the capped size: no
//! neighbour can be OOM-killed by the job's growth, however fast it is. The watchdog sets it for the
//! job's cgroup on each of the job's GPUs at start, and stays what it was (the fallback where the
//! driver has no such function, and the record keeper everywhere).
//!
//! nvml-wrapper 0.13 has no binding for it and older drivers lack it, so the function is looked up
//! at run time in the NVML library the watchdog loaded. The struct is nvml.h's (CUDA 13.4):
//! no version field, versioned by the function's `_v1` name. Clearing is soft 0 with hard
//! `NVML_DEVICE_MEMORY_LIMIT_MAX` (removing the cgroup clears the limits too).

use std::ffi::{c_char, c_int, c_void, CString};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use libloading::os::unix::{Library, RTLD_LOCAL, RTLD_NOW};

use super::gpu::DeviceHandle;
use gmq_core::watchdog::hard_limit::SET_MEMORY_LIMITS;

/// `nvmlSetMemoryLimits_v1_t`.
#[repr(C)]
struct SetMemoryLimitsV1 {
    name_space: *const c_char,
    soft_limit: u64,
    hard_limit: u64,
}

type SetMemoryLimits = unsafe extern "C" fn(*mut c_void, *const SetMemoryLimitsV1) -> c_int;

/// The setter, found in the loaded NVML library.
pub struct Setter {
    function: SetMemoryLimits,
    /// The library, held open so that the function stays mapped.
    _library: Library,
}

impl Setter {
    /// Looks the setter up in `library` (already loaded by nvml-wrapper: dlopen finds the same
    /// copy, initialised). `Err`: the library has no such function (an older driver).
    pub fn find(library: &Path) -> Result<Setter, String> {
        if library.as_os_str().as_bytes().contains(&0) {
            return Err(format!("{} has a NUL in its path", library.display()));
        }
        // SAFETY: opening runs a library's initialisers; this is the NVML library nvml-wrapper
        // already loaded from this path, so dlopen hands back that copy and runs nothing anew.
        let opened = unsafe { Library::open(Some(library), RTLD_NOW | RTLD_LOCAL) };
        let Ok(opened) = opened else {
            return Err(format!("cannot open {}", library.display()));
        };
        let name = format!("{SET_MEMORY_LIMITS}\0");
        // SAFETY: nvml.h declares it `nvmlReturn_t (nvmlDevice_t, nvmlSetMemoryLimits_v1_t *)`;
        // `Option` reads a symbol that resolves to NULL as `None`, never as a function. The
        // pointer is copied out, and `_library` keeps it mapped as long as the setter lives.
        let found = unsafe { opened.get::<Option<SetMemoryLimits>>(name.as_bytes()) }
            .ok()
            .and_then(|symbol| *symbol);
        let Some(function) = found else {
            return Err(format!(
                "the driver's NVML ({}) has no {SET_MEMORY_LIMITS}",
                library.display()
            ));
        };
        Ok(Setter {
            function,
            _library: opened,
        })
    }

    /// Sets soft and hard limit of `namespace` on one device (of the source that loaded this
    /// library); the NVML return code.
    pub fn set(&self, device: DeviceHandle<'_>, namespace: &Path, soft: u64, hard: u64) -> c_int {
        let Ok(name) = CString::new(namespace.as_os_str().as_bytes()) else {
            return 2; // NVML_ERROR_INVALID_ARGUMENT
        };
        let limits = SetMemoryLimitsV1 {
            name_space: name.as_ptr(),
            soft_limit: soft,
            hard_limit: hard,
        };
        // SAFETY: the struct and the string live across the call; the device handle is NVML's,
        // valid while its source lives (the handle borrows it).
        unsafe { (self.function)(device.raw(), &limits) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_library_without_the_function_is_an_old_driver() {
        // libc has no NVML functions: the look-up fails, it does not crash.
        let e = Setter::find(Path::new("libc.so.6"))
            .err()
            .expect("no setter in libc");
        assert!(e.contains("has no nvmlDeviceSetMemoryLimits_v1"), "{e}");
        assert!(Setter::find(Path::new("/nonexistent/libnvidia-ml.so.1")).is_err());
    }
}
