//! The C ABI below nvml-wrapper, called through nvml-wrapper-sys's own bindings (its struct
//! layouts and signatures): what nvml-wrapper never exercises but the fake must get right.

use crate::common;

use std::ffi::{c_char, c_uint, CStr};
use std::ptr::{null, null_mut};

use common::*;
use nvml_wrapper_sys::bindings::*;

const SUCCESS: u32 = 0;
const UNINITIALIZED: u32 = 1;
const INVALID_ARGUMENT: u32 = 2;
const NOT_SUPPORTED: u32 = 3;
const INSUFFICIENT_SIZE: u32 = 7;
const ARGUMENT_VERSION_MISMATCH: u32 = 25;

fn load() -> NvmlLib {
    // SAFETY: the fake's initialisers do nothing but set up Rust statics.
    unsafe { NvmlLib::new(lib_path()) }.expect("load the fake library")
}

/// A function pointer the bindings looked up; every one the tests use must be exported.
fn f<T: Copy>(symbol: &Result<T, libloading::Error>) -> T {
    *symbol.as_ref().expect("symbol exported")
}

fn handle(lib: &NvmlLib, index: u32) -> nvmlDevice_t {
    let mut device = null_mut();
    assert_eq!(
        unsafe { f(&lib.nvmlDeviceGetHandleByIndex_v2)(index, &mut device) },
        SUCCESS
    );
    device
}

#[test]
fn bindings_agree_on_layouts() {
    assert_eq!(std::mem::size_of::<nvmlProcessInfo_t>(), 24);
    assert_eq!(std::mem::size_of::<nvmlMemory_v2_t>(), 40);
    assert_eq!(nvidia_ml::MEMORY_V2_VERSION, 0x0200_0028);
    assert_eq!(
        nvidia_ml::codes::error_by_name("ARGUMENT_VERSION_MISMATCH"),
        Some(nvmlReturn_enum_NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
    );
    assert_eq!(
        nvidia_ml::codes::error_by_name("GPU_IS_LOST"),
        Some(nvmlReturn_enum_NVML_ERROR_GPU_IS_LOST)
    );
    assert_eq!(
        nvidia_ml::codes::error_by_name("UNKNOWN"),
        Some(nvmlReturn_enum_NVML_ERROR_UNKNOWN)
    );
}

#[test]
fn every_function_is_exported() {
    let _scenario = Scenario::new(Some(TWO_GPUS));
    // SAFETY: as in `load`.
    let library = unsafe { libloading::Library::new(lib_path()) }.unwrap();
    let names = nvidia_ml::scenario::FAULTABLE_FUNCTIONS
        .iter()
        .chain(&["nvmlShutdown", "nvmlErrorString"]);
    for name in names {
        // SAFETY: only the address is looked at.
        let symbol = unsafe { library.get::<*const ()>(name.as_bytes()) };
        assert!(symbol.is_ok(), "{name} is not exported");
    }
}

#[test]
fn calls_before_init_and_after_the_last_shutdown_are_uninitialized() {
    let _scenario = Scenario::new(Some(TWO_GPUS));
    let lib = load();
    let mut count: c_uint = 0;
    unsafe {
        assert_eq!(f(&lib.nvmlDeviceGetCount_v2)(&mut count), UNINITIALIZED);
        assert_eq!(f(&lib.nvmlShutdown)(), UNINITIALIZED);

        // Init nests: two inits need two shutdowns.
        assert_eq!(f(&lib.nvmlInit_v2)(), SUCCESS);
        assert_eq!(f(&lib.nvmlInitWithFlags)(0), SUCCESS);
        assert_eq!(f(&lib.nvmlShutdown)(), SUCCESS);
        assert_eq!(f(&lib.nvmlDeviceGetCount_v2)(&mut count), SUCCESS);
        assert_eq!(count, 2);
        assert_eq!(f(&lib.nvmlShutdown)(), SUCCESS);
        assert_eq!(f(&lib.nvmlDeviceGetCount_v2)(&mut count), UNINITIALIZED);
        assert_eq!(f(&lib.nvmlShutdown)(), UNINITIALIZED);
    }
}

#[test]
fn error_strings_work_without_init() {
    let _scenario = Scenario::new(None); // the environment is shared: one test at a time
    let lib = load();
    let text = |code| {
        unsafe { CStr::from_ptr(f(&lib.nvmlErrorString)(code)) }
            .to_str()
            .unwrap()
            .to_owned()
    };
    assert_eq!(text(0), "Success");
    assert_eq!(text(7), "Insufficient Size");
    assert_eq!(text(15), "GPU is lost");
    assert_eq!(text(25), "Argument version mismatch");
    assert_eq!(text(4242), "Unknown Error");
}

#[test]
fn memory_info_struct_versions() {
    let scenario = Scenario::new(Some(TWO_GPUS));
    scenario.claim(0, 100, "30G");
    let lib = load();
    unsafe {
        assert_eq!(f(&lib.nvmlInit_v2)(), SUCCESS);
        let gpu = handle(&lib, 0);

        let mut v2: nvmlMemory_v2_t = std::mem::zeroed();
        for wrong in [0, 0x0100_0028, 0x0200_0020, 0x0300_0028] {
            v2.version = wrong;
            assert_eq!(
                f(&lib.nvmlDeviceGetMemoryInfo_v2)(gpu, &mut v2),
                ARGUMENT_VERSION_MISMATCH,
                "{wrong:#x}"
            );
        }
        v2.version = 0x0200_0028;
        assert_eq!(f(&lib.nvmlDeviceGetMemoryInfo_v2)(gpu, &mut v2), SUCCESS);
        assert_eq!(
            (v2.total, v2.reserved, v2.used, v2.free),
            (80 * GIB, 512 * MIB, 30 * GIB, 50 * GIB - 512 * MIB)
        );
        assert_eq!(
            f(&lib.nvmlDeviceGetMemoryInfo_v2)(gpu, null_mut()),
            INVALID_ARGUMENT
        );

        // v1: `used` includes the reserve (nvml-wrapper#57).
        let mut v1: nvmlMemory_t = std::mem::zeroed();
        assert_eq!(f(&lib.nvmlDeviceGetMemoryInfo)(gpu, &mut v1), SUCCESS);
        assert_eq!(
            (v1.total, v1.used, v1.free),
            (80 * GIB, 30 * GIB + 512 * MIB, v2.free)
        );

        scenario.faults("memory_info_version = \"v1-only\"");
        assert_eq!(
            f(&lib.nvmlDeviceGetMemoryInfo_v2)(gpu, &mut v2),
            nvmlReturn_enum_NVML_ERROR_FUNCTION_NOT_FOUND
        );
        assert_eq!(f(&lib.nvmlDeviceGetMemoryInfo)(gpu, &mut v1), SUCCESS);
        assert_eq!(f(&lib.nvmlShutdown)(), SUCCESS);
    }
}

#[test]
fn bad_handles_are_invalid_arguments() {
    let scenario = Scenario::new(Some(TWO_GPUS));
    let lib = load();
    unsafe {
        assert_eq!(f(&lib.nvmlInit_v2)(), SUCCESS);
        let gpu1 = handle(&lib, 1);
        let mut stack_value = 0u64;
        let foreign = [
            null_mut(),
            1 as nvmlDevice_t,
            (&mut stack_value as *mut u64).cast(),
        ];
        let mut index: c_uint = 0;
        for device in foreign {
            assert_eq!(
                f(&lib.nvmlDeviceGetIndex)(device, &mut index),
                INVALID_ARGUMENT,
                "{device:p}"
            );
        }
        assert_eq!(f(&lib.nvmlDeviceGetIndex)(gpu1, &mut index), SUCCESS);
        assert_eq!(index, 1);
        assert_eq!(f(&lib.nvmlDeviceGetIndex)(gpu1, null_mut()), INVALID_ARGUMENT);

        scenario.devices(&TWO_GPUS[..TWO_GPUS.rfind("[[gpu]]").unwrap()]);
        assert_eq!(
            f(&lib.nvmlDeviceGetIndex)(gpu1, &mut index),
            INVALID_ARGUMENT,
            "GPU gone"
        );

        let mut device = null_mut();
        assert_eq!(
            f(&lib.nvmlDeviceGetHandleByUUID)(null(), &mut device),
            INVALID_ARGUMENT
        );
        assert_eq!(
            f(&lib.nvmlDeviceGetHandleByIndex_v2)(0, null_mut()),
            INVALID_ARGUMENT
        );
        // A whole GPU has no parent, and no instance ids.
        let gpu0 = handle(&lib, 0);
        assert_eq!(
            f(&lib.nvmlDeviceGetDeviceHandleFromMigDeviceHandle)(gpu0, &mut device),
            INVALID_ARGUMENT
        );
        assert_eq!(
            f(&lib.nvmlDeviceGetGpuInstanceId)(gpu0, &mut index),
            NOT_SUPPORTED
        );
        assert_eq!(f(&lib.nvmlShutdown)(), SUCCESS);
    }
}

#[test]
fn strings_need_room_for_their_nul() {
    let _scenario = Scenario::new(Some(TWO_GPUS));
    let lib = load();
    unsafe {
        assert_eq!(f(&lib.nvmlInit_v2)(), SUCCESS);
        let gpu = handle(&lib, 0);
        let mut buffer = [0 as c_char; 96];
        let exact = UUID0.len() as c_uint + 1;
        assert_eq!(
            f(&lib.nvmlDeviceGetUUID)(gpu, buffer.as_mut_ptr(), exact - 1),
            INSUFFICIENT_SIZE
        );
        assert_eq!(
            f(&lib.nvmlDeviceGetUUID)(gpu, buffer.as_mut_ptr(), exact),
            SUCCESS
        );
        assert_eq!(CStr::from_ptr(buffer.as_ptr()).to_str().unwrap(), UUID0);
        assert_eq!(
            f(&lib.nvmlSystemGetDriverVersion)(buffer.as_mut_ptr(), 4),
            INSUFFICIENT_SIZE
        );
        assert_eq!(f(&lib.nvmlDeviceGetName)(gpu, null_mut(), 96), INVALID_ARGUMENT);
        assert_eq!(f(&lib.nvmlShutdown)(), SUCCESS);
    }
}

/// Calls Get*RunningProcesses_v3 with `capacity` entries of room (none: NULL); returns the code,
/// the count it wrote back and the pids filled in.
unsafe fn list(lib: &NvmlLib, gpu: nvmlDevice_t, capacity: Option<u32>) -> (u32, u32, Vec<u32>) {
    let mut count = capacity.unwrap_or(0);
    let mut buffer: Vec<nvmlProcessInfo_t> = vec![std::mem::zeroed(); count as usize];
    let pointer = if capacity.is_some() {
        buffer.as_mut_ptr()
    } else {
        null_mut()
    };
    let code = f(&lib.nvmlDeviceGetComputeRunningProcesses_v3)(gpu, &mut count, pointer);
    let filled = if code == SUCCESS {
        buffer.iter().take(count as usize).map(|p| p.pid).collect()
    } else {
        vec![]
    };
    (code, count, filled)
}

#[test]
fn the_two_call_protocol() {
    let scenario = Scenario::new(Some(TWO_GPUS));
    let lib = load();
    unsafe {
        assert_eq!(f(&lib.nvmlInit_v2)(), SUCCESS);
        let gpu = handle(&lib, 0);
        assert_eq!(
            list(&lib, gpu, None),
            (SUCCESS, 0, vec![]),
            "no process: the count query succeeds"
        );

        for pid in [10, 11, 12] {
            scenario.claim(0, pid, "1G");
        }
        assert_eq!(list(&lib, gpu, None), (INSUFFICIENT_SIZE, 3, vec![]));
        assert_eq!(list(&lib, gpu, Some(0)), (INSUFFICIENT_SIZE, 3, vec![]));
        assert_eq!(list(&lib, gpu, Some(2)), (INSUFFICIENT_SIZE, 3, vec![]));
        assert_eq!(list(&lib, gpu, Some(3)), (SUCCESS, 3, vec![10, 11, 12]));
        assert_eq!(list(&lib, gpu, Some(8)), (SUCCESS, 3, vec![10, 11, 12]));

        let mut count = 4;
        let code = f(&lib.nvmlDeviceGetComputeRunningProcesses_v3)(gpu, &mut count, null_mut());
        assert_eq!(code, INVALID_ARGUMENT, "room announced, no buffer");
        let code = f(&lib.nvmlDeviceGetComputeRunningProcesses_v3)(gpu, null_mut(), null_mut());
        assert_eq!(code, INVALID_ARGUMENT, "no count");
        assert_eq!(f(&lib.nvmlShutdown)(), SUCCESS);
    }
}

#[test]
fn growth_between_calls_and_the_retry_that_works() {
    let scenario = Scenario::new(Some(TWO_GPUS));
    for pid in [10, 11] {
        scenario.claim(0, pid, "1G");
    }
    scenario.faults("procs_grow_between_calls = 8");
    let lib = load();
    unsafe {
        assert_eq!(f(&lib.nvmlInit_v2)(), SUCCESS);
        let gpu = handle(&lib, 0);
        let phantom = 1 << 22;

        assert_eq!(
            list(&lib, gpu, None),
            (INSUFFICIENT_SIZE, 2, vec![]),
            "the count query sees 2"
        );
        assert_eq!(
            list(&lib, gpu, Some(2 + 5)),
            (INSUFFICIENT_SIZE, 10, vec![]),
            "8 started since"
        );
        let (code, count, pids) = list(&lib, gpu, Some(10));
        assert_eq!(
            (code, count),
            (SUCCESS, 10),
            "retrying with the count given succeeds"
        );
        assert_eq!(pids[..3], [10, 11, phantom]);
        assert_eq!(
            list(&lib, gpu, None),
            (INSUFFICIENT_SIZE, 2, vec![]),
            "they are gone at the next query"
        );
        assert_eq!(f(&lib.nvmlShutdown)(), SUCCESS);
    }
}

#[test]
fn mig_handles_refuse_whole_gpu_queries() {
    let _scenario = Scenario::new(Some(
        "[[gpu]]\nuuid = \"GPU-00000000-1111-2222-3333-444444444444\"\nname = \"A100\"\ntotal = \"80G\"\nmig = true\n\
         [[gpu.mig_device]]\nuuid = \"MIG-aaaaaaaa-1111-2222-3333-444444444444\"\ntotal = \"10G\"\ngpu_instance_id = 5\n",
    ));
    let lib = load();
    unsafe {
        assert_eq!(f(&lib.nvmlInit_v2)(), SUCCESS);
        let gpu = handle(&lib, 0);
        let mut slice = null_mut();
        assert_eq!(
            f(&lib.nvmlDeviceGetMigDeviceHandleByIndex)(gpu, 0, &mut slice),
            SUCCESS
        );
        let mut value: c_uint = 0;
        assert_eq!(f(&lib.nvmlDeviceGetGpuInstanceId)(slice, &mut value), SUCCESS);
        assert_eq!(value, 5);
        assert_eq!(f(&lib.nvmlDeviceGetComputeInstanceId)(slice, &mut value), SUCCESS);
        assert_eq!(value, 0);
        let (mut current, mut pending) = (0, 0);
        assert_eq!(
            f(&lib.nvmlDeviceGetMigMode)(slice, &mut current, &mut pending),
            NOT_SUPPORTED
        );
        assert_eq!(f(&lib.nvmlDeviceGetMinorNumber)(slice, &mut value), NOT_SUPPORTED);
        let mut nested = null_mut();
        assert_eq!(
            f(&lib.nvmlDeviceGetMigDeviceHandleByIndex)(slice, 0, &mut nested),
            NOT_SUPPORTED
        );
        let mut memory: nvmlMemory_v2_t = std::mem::zeroed();
        memory.version = 0x0200_0028;
        assert_eq!(f(&lib.nvmlDeviceGetMemoryInfo_v2)(slice, &mut memory), SUCCESS);
        assert_eq!((memory.total, memory.reserved), (10 * GIB, 51 * MIB));
        assert_eq!(f(&lib.nvmlShutdown)(), SUCCESS);
    }
}
