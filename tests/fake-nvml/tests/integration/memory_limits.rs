//! MPS v3 memory partitioning in the fake (README: limits/<gpu>): `nvmlDeviceSetMemoryLimits_v1`,
//! `nvmlDeviceGetMemoryLimits_v1` and the fake's `fakeNvmlClaim`, through the C ABI. The tests run
//! as root (the setter's privilege), like the rest of the suite on the dev machine.

use crate::common;

use std::ffi::{c_char, c_uint, c_void, CString};
use std::path::Path;

use common::*;

#[repr(C)]
struct SetLimits {
    name_space: *const c_char,
    soft: u64,
    hard: u64,
}

#[repr(C)]
struct GetLimits {
    name_space: *const c_char,
    soft: u64,
    hard: u64,
    used: u64,
}

const SUCCESS: u32 = 0;
const INVALID_ARGUMENT: u32 = 2;
const FUNCTION_NOT_FOUND: u32 = 13;
const MEMORY: u32 = 20;

struct Fake {
    lib: libloading::Library,
}

impl Fake {
    fn load() -> Fake {
        // SAFETY: the fake's initialisers only set up Rust statics.
        let lib = unsafe { libloading::Library::new(lib_path()) }.expect("load the fake library");
        let fake = Fake { lib };
        assert_eq!(
            unsafe { fake.sym::<unsafe extern "C" fn() -> u32>(b"nvmlInit_v2")() },
            SUCCESS
        );
        fake
    }

    unsafe fn sym<T: Copy>(&self, name: &[u8]) -> T {
        *self.lib.get::<T>(name).expect("exported")
    }

    fn device(&self, index: c_uint) -> *mut c_void {
        let mut device = std::ptr::null_mut();
        let get: unsafe extern "C" fn(c_uint, *mut *mut c_void) -> u32 =
            unsafe { self.sym(b"nvmlDeviceGetHandleByIndex_v2") };
        assert_eq!(unsafe { get(index, &mut device) }, SUCCESS);
        device
    }

    fn set(&self, gpu: c_uint, namespace: &str, soft: u64, hard: u64) -> u32 {
        let name = CString::new(namespace).unwrap();
        let limits = SetLimits {
            name_space: name.as_ptr(),
            soft,
            hard,
        };
        let set: unsafe extern "C" fn(*mut c_void, *const SetLimits) -> u32 =
            unsafe { self.sym(b"nvmlDeviceSetMemoryLimits_v1") };
        unsafe { set(self.device(gpu), &limits) }
    }

    fn get(&self, gpu: c_uint, namespace: &str) -> (u32, u64, u64, u64) {
        let name = CString::new(namespace).unwrap();
        let mut limits = GetLimits {
            name_space: name.as_ptr(),
            soft: 1,
            hard: 1,
            used: 1,
        };
        let get: unsafe extern "C" fn(*mut c_void, *mut GetLimits) -> u32 =
            unsafe { self.sym(b"nvmlDeviceGetMemoryLimits_v1") };
        let code = unsafe { get(self.device(gpu), &mut limits) };
        (code, limits.soft, limits.hard, limits.used)
    }

    fn claim(&self, gpu: c_uint, bytes: u64) -> u32 {
        let claim: unsafe extern "C" fn(c_uint, u64) -> u32 = unsafe { self.sym(b"fakeNvmlClaim") };
        unsafe { claim(gpu, bytes) }
    }
}

impl Drop for Fake {
    fn drop(&mut self) {
        let _ = unsafe { self.sym::<unsafe extern "C" fn() -> u32>(b"nvmlShutdown")() };
    }
}

const JOB: &str = "/sys/fs/cgroup/system.slice/slurmstepd.scope/job_7";

/// This test process and pid 4000 in job 7's cgroup (v2 lines under the scenario's proc root).
fn in_job(scenario: &Scenario, pid: u32) {
    let dir = scenario.proc_root.join(pid.to_string());
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("cgroup"),
        "0::/system.slice/slurmstepd.scope/job_7/step_0\n",
    )
    .unwrap();
}

fn my_claim(scenario: &Scenario) -> String {
    std::fs::read_to_string(scenario.gpu_dir(0).join(std::process::id().to_string())).unwrap_or_default()
}

#[test]
fn a_claim_past_the_hard_limit_is_refused_for_the_cgroup_alone() {
    let scenario = Scenario::new(Some(TWO_GPUS));
    let me = std::process::id();
    in_job(&scenario, me);
    scenario.claim(0, 4000, "10G\n");
    in_job(&scenario, 4000);
    let fake = Fake::load();
    assert_eq!(fake.set(0, JOB, 16 * GIB, 16 * GIB), SUCCESS);
    let file = std::fs::read_to_string(scenario.path("limits/0")).unwrap();
    assert_eq!(file, format!("{} {} {JOB}\n", 16 * GIB, 16 * GIB));
    assert_eq!(fake.get(0, JOB), (SUCCESS, 16 * GIB, 16 * GIB, 10 * GIB));

    // 10G held by the job's other process: 6G more fits, 7G does not, and changes nothing.
    assert_eq!(fake.claim(0, 6 * GIB), SUCCESS);
    assert_eq!(my_claim(&scenario).trim(), (6 * GIB).to_string());
    assert_eq!(fake.claim(0, 7 * GIB), MEMORY);
    assert_eq!(my_claim(&scenario).trim(), (6 * GIB).to_string());
    // The other process grows past the limit by writing its file (unchecked): 12G + my 6G. Giving
    // memory back still works, though 12G + 5G is past the limit too.
    scenario.claim(0, 4000, "12G\n");
    assert_eq!(fake.claim(0, 5 * GIB), SUCCESS);
    assert_eq!(fake.claim(0, 5 * GIB + 1), MEMORY);
    // GPU 1 has no limit for the job.
    scenario.gpu_dir(1);
    assert_eq!(fake.claim(1, 30 * GIB), SUCCESS);

    // Outside the job's cgroup (job_70 is not below job_7) nothing is refused.
    std::fs::write(
        scenario.proc_root.join(me.to_string()).join("cgroup"),
        "0::/system.slice/slurmstepd.scope/job_70\n",
    )
    .unwrap();
    assert_eq!(fake.claim(0, 30 * GIB), SUCCESS);

    // Cleared: soft 0, hard NVML_DEVICE_MEMORY_LIMIT_MAX.
    assert_eq!(fake.set(0, JOB, 0, u64::MAX), SUCCESS);
    assert_eq!(fake.get(0, JOB).2, u64::MAX);
    assert!(std::fs::read_to_string(scenario.path("limits/0"))
        .unwrap()
        .is_empty());
}

#[test]
fn bad_arguments_and_an_older_driver() {
    let scenario = Scenario::new(Some(TWO_GPUS));
    in_job(&scenario, std::process::id());
    let fake = Fake::load();
    assert_eq!(fake.set(0, "relative/job_7", 0, GIB), INVALID_ARGUMENT);
    assert_eq!(fake.set(0, "/sys/fs/cgroup/../etc", 0, GIB), INVALID_ARGUMENT);
    assert_eq!(
        fake.set(0, JOB, 2 * GIB, GIB),
        INVALID_ARGUMENT,
        "soft above hard"
    );
    assert!(!Path::new(&scenario.path("limits/0")).exists());

    assert_eq!(fake.set(0, JOB, GIB, GIB), SUCCESS);
    scenario.faults("memory_limits = \"absent\"\n");
    assert_eq!(fake.set(0, JOB, GIB, GIB), FUNCTION_NOT_FOUND);
    assert_eq!(fake.get(0, JOB).0, FUNCTION_NOT_FOUND);
    // Without the driver's partitioning the limit written before binds nothing.
    scenario.gpu_dir(0);
    assert_eq!(fake.claim(0, 2 * GIB), SUCCESS);
}
