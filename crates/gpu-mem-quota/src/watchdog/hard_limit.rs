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
use std::path::{Path, PathBuf};

use libloading::os::unix::{Library, RTLD_LOCAL, RTLD_NOW};

use super::gpu::DeviceHandle;
use gmq_core::size::ByteSize;

/// The setter's name in libnvidia-ml.
pub const SET_MEMORY_LIMITS: &str = "nvmlDeviceSetMemoryLimits_v1";

/// `NVML_DEVICE_MEMORY_LIMIT_MAX`: with a soft limit of 0, "no limit".
pub const LIMIT_MAX: u64 = u64::MAX;

/// `nvmlSetMemoryLimits_v1_t`.
#[repr(C)]
struct SetMemoryLimitsV1 {
    name_space: *const c_char,
    soft_limit: u64,
    hard_limit: u64,
}

type SetMemoryLimits = unsafe extern "C" fn(*mut c_void, *const SetMemoryLimitsV1) -> c_int;

/// NVML return codes the outcome depends on.
const NVML_SUCCESS: c_int = 0;
const NVML_ERROR_NOT_SUPPORTED: c_int = 3;
const NVML_ERROR_FUNCTION_NOT_FOUND: c_int = 13;

/// The hard limit in force for the job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InForce {
    /// The job's cgroup directory, the limit's namespace.
    pub namespace: PathBuf,
    /// The job's GPUs (node indices) it is set on: all of them.
    pub gpus: Vec<u32>,
    /// Soft and hard limit: the quota.
    pub bytes: u64,
}

/// What setting the hard limit came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    InForce(InForce),
    /// The driver does not offer it (no such function, or it says not supported): the watchdog
    /// alone enforces the quota, as before.
    NotOffered(String),
    /// It is offered but could not be set (no job cgroup, a refusal): the watchdog alone.
    Failed(String),
    /// The policy switched it off (`[enforcement] hard_limit = false`): not asked for, so the
    /// driver is not even looked at; the watchdog alone.
    SwitchedOff,
}

impl Outcome {
    /// The log line that says which path is in force.
    pub fn log_line(&self) -> String {
        match self {
            Outcome::InForce(f) => format!(
                "hard limit in force: {SET_MEMORY_LIMITS} caps cgroup {} at {} on GPU(s) {} (the \
                 watchdog keeps the record and stays the fallback)",
                f.namespace.display(),
                ByteSize::from_bytes(f.bytes),
                f.gpus.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
            ),
            Outcome::NotOffered(why) => {
                format!("no hard limit ({why}): the watchdog alone enforces the quota")
            }
            Outcome::Failed(why) => {
                format!("no hard limit: {why}; the watchdog alone enforces the quota")
            }
            Outcome::SwitchedOff => "no hard limit (switched off by the policy: [enforcement] \
                hard_limit = false): the watchdog alone enforces the quota"
                .to_string(),
        }
    }
}

/// What one GPU's call answered, as plain data: the rule below decides from these.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Answer {
    pub gpu: u32,
    pub code: c_int,
}

/// The outcome of setting the limit on every GPU of the job.
pub fn outcome(namespace: &Path, bytes: u64, answers: &[Answer]) -> Outcome {
    if answers.is_empty() {
        return Outcome::Failed("the job has no GPU here to set it on".into());
    }
    let refused: Vec<&Answer> = answers.iter().filter(|a| a.code != NVML_SUCCESS).collect();
    match refused.first() {
        None => Outcome::InForce(InForce {
            namespace: namespace.to_path_buf(),
            gpus: answers.iter().map(|a| a.gpu).collect(),
            bytes,
        }),
        Some(a) if matches!(a.code, NVML_ERROR_NOT_SUPPORTED | NVML_ERROR_FUNCTION_NOT_FOUND) => {
            Outcome::NotOffered(format!(
                "the driver answers {SET_MEMORY_LIMITS} on GPU {} with NVML error {} (not supported)",
                a.gpu, a.code
            ))
        }
        Some(a) => Outcome::Failed(format!(
            "{SET_MEMORY_LIMITS} on GPU {} failed with NVML error {}",
            a.gpu, a.code
        )),
    }
}

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

    const G: u64 = 1 << 30;

    #[test]
    fn in_force_only_when_every_gpu_took_it() {
        let ns = Path::new("/sys/fs/cgroup/system.slice/slurmstepd.scope/job_7");
        let ok = |gpu| Answer { gpu, code: 0 };
        let Outcome::InForce(f) = outcome(ns, 16 * G, &[ok(0), ok(2)]) else {
            panic!("not in force");
        };
        assert_eq!((f.gpus, f.bytes), (vec![0, 2], 16 * G));
        let old = outcome(ns, 16 * G, &[ok(0), Answer { gpu: 2, code: 13 }]);
        assert!(
            matches!(old, Outcome::NotOffered(ref why) if why.contains("GPU 2")),
            "{old:?}"
        );
        let refused = outcome(ns, 16 * G, &[Answer { gpu: 0, code: 4 }]);
        assert!(
            matches!(refused, Outcome::Failed(ref why) if why.contains("error 4")),
            "{refused:?}"
        );
        assert!(matches!(outcome(ns, 16 * G, &[]), Outcome::Failed(_)));
    }

    #[test]
    fn the_log_says_which_path_is_in_force() {
        let ns = Path::new("/sys/fs/cgroup/job_7");
        let line = outcome(ns, 16 * G, &[Answer { gpu: 0, code: 0 }]).log_line();
        assert!(line.starts_with("hard limit in force: nvmlDeviceSetMemoryLimits_v1 caps cgroup /sys/fs/cgroup/job_7 at 16G on GPU(s) 0"), "{line}");
        let line = Outcome::NotOffered("x".into()).log_line();
        assert!(line.ends_with("the watchdog alone enforces the quota"), "{line}");
        assert_eq!(
            Outcome::SwitchedOff.log_line(),
            "no hard limit (switched off by the policy: [enforcement] hard_limit = false): the \
             watchdog alone enforces the quota"
        );
    }

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
