//! The fake driven through the real nvml-wrapper, as the watchdog drives it.

use crate::common;

use common::*;
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::struct_wrappers::device::ProcessInfo;

fn used(bytes: u64) -> UsedGpuMemory {
    UsedGpuMemory::Used(bytes)
}

/// (pid, memory, gpu instance, compute instance) of each listed process.
fn summary(list: Result<Vec<ProcessInfo>, NvmlError>) -> Vec<(u32, UsedGpuMemory, Option<u32>, Option<u32>)> {
    list.expect("process list")
        .into_iter()
        .map(|p| (p.pid, p.used_gpu_memory, p.gpu_instance_id, p.compute_instance_id))
        .collect()
}

fn pids(list: Result<Vec<ProcessInfo>, NvmlError>) -> Vec<u32> {
    summary(list).into_iter().map(|p| p.0).collect()
}

#[test]
fn devices_by_index_and_by_uuid() {
    let scenario = Scenario::new(Some(TWO_GPUS));
    let nvml = scenario.nvml();
    assert_eq!(nvml.device_count().unwrap(), 2);
    assert_eq!(nvml.sys_driver_version().unwrap(), "580.95.05");
    assert_eq!(nvml.sys_nvml_version().unwrap(), "13.580.95.05");

    let second = nvml.device_by_index(1).unwrap();
    assert_eq!(second.uuid().unwrap(), UUID1);
    assert_eq!(second.name().unwrap(), "NVIDIA H100 80GB HBM3");
    assert_eq!(second.minor_number().unwrap(), 1);
    assert_eq!(second.pci_info().unwrap().bus_id, "00000000:02:00.0");
    assert_eq!(nvml.device_by_uuid(UUID1).unwrap().index().unwrap(), 1);
    assert_eq!(nvml.device_by_uuid(UUID0).unwrap().index().unwrap(), 0);

    assert!(matches!(nvml.device_by_index(2), Err(NvmlError::InvalidArg)));
    assert!(matches!(
        nvml.device_by_uuid("GPU-99999999-1111-2222-3333-444444444444"),
        Err(NvmlError::NotFound)
    ));
}

#[test]
fn memory_info_is_v2() {
    let scenario = Scenario::new(Some(TWO_GPUS));
    scenario.claim(0, 100, "30G\n");
    scenario.claim(0, 101, "2G\ngraphics\n");
    scenario.claim(0, 102, "unavailable 1G\n");
    let nvml = scenario.nvml();

    let info = nvml.device_by_index(0).unwrap().memory_info().unwrap();
    // v2: `used` is what processes hold, without the driver's reserve.
    assert_eq!(
        (info.total, info.reserved, info.used),
        (80 * GIB, 512 * MIB, 33 * GIB)
    );
    assert_eq!(info.free, 80 * GIB - 512 * MIB - 33 * GIB);

    let idle = nvml.device_by_index(1).unwrap().memory_info().unwrap();
    assert_eq!(
        (idle.reserved, idle.used),
        (409 * MIB, 0),
        "default reserve: 0.5% of total, whole MiB"
    );
    assert_eq!(idle.free, 80 * GIB - 409 * MIB);
}

#[test]
fn extra_used_counts_but_lists_no_process() {
    let scenario = Scenario::new(Some(
        &TWO_GPUS.replace("reserved = \"512M\"", "reserved = 0\nextra_used = \"3G\""),
    ));
    let nvml = scenario.nvml();
    let gpu = nvml.device_by_index(0).unwrap();
    assert_eq!(gpu.memory_info().unwrap().used, 3 * GIB);
    assert_eq!(gpu.running_compute_processes().unwrap().len(), 0);
}

#[test]
fn compute_and_graphics_processes() {
    let scenario = Scenario::new(Some(TWO_GPUS));
    scenario.claim(0, 300, "unavailable\n");
    scenario.claim(0, 200, "30G\n");
    scenario.claim(0, 250, "1073741824\ngraphics\n");
    scenario.claim(1, 400, "5G\n");
    let nvml = scenario.nvml();
    let gpu = nvml.device_by_index(0).unwrap();

    assert_eq!(
        summary(gpu.running_compute_processes()),
        [
            (200, used(30 * GIB), None, None),
            (300, UsedGpuMemory::Unavailable, None, None)
        ]
    );
    assert_eq!(
        summary(gpu.running_graphics_processes()),
        [(250, used(GIB), None, None)]
    );
    assert_eq!(
        pids(nvml.device_by_index(1).unwrap().running_compute_processes()),
        [400]
    );
    assert_eq!(
        pids(nvml.device_by_index(1).unwrap().running_graphics_processes()),
        []
    );
}

#[test]
fn claims_and_processes_change_between_calls() {
    let scenario = Scenario::new(Some(TWO_GPUS));
    let nvml = scenario.nvml();
    let gpu = nvml.device_by_index(0).unwrap();
    assert_eq!(pids(gpu.running_compute_processes()), []);

    let claim = scenario.claim(0, 500, "30G");
    scenario.claim(0, 501, "10G");
    assert_eq!(pids(gpu.running_compute_processes()), [500, 501]);
    assert_eq!(gpu.memory_info().unwrap().used, 40 * GIB);

    std::fs::write(&claim, "35G").unwrap(); // the job grew
    assert_eq!(gpu.memory_info().unwrap().used, 45 * GIB);

    scenario.dies(501); // the driver frees a dead process's memory, file or no file
    assert_eq!(pids(gpu.running_compute_processes()), [500]);
    assert_eq!(gpu.memory_info().unwrap().used, 35 * GIB);

    std::fs::remove_file(&claim).unwrap(); // the job freed its memory
    assert_eq!(pids(gpu.running_compute_processes()), []);
    assert_eq!(gpu.memory_info().unwrap().used, 0);
}

#[test]
fn dead_pids_are_dropped_under_the_real_proc() {
    let scenario = Scenario::new(Some(TWO_GPUS));
    scenario.use_real_proc();
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let dead = child.id();
    child.wait().unwrap();
    let me = std::process::id();
    for pid in [me, dead] {
        std::fs::write(scenario.gpu_dir(0).join(pid.to_string()), "1G").unwrap();
    }
    let nvml = scenario.nvml();
    let gpu = nvml.device_by_index(0).unwrap();
    assert_eq!(pids(gpu.running_compute_processes()), [me]);
    assert_eq!(gpu.memory_info().unwrap().used, GIB);
}

#[test]
fn processes_appearing_between_the_count_and_the_fill_call() {
    let scenario = Scenario::new(Some(TWO_GPUS));
    scenario.claim(0, 600, "1G");
    scenario.claim(0, 601, "1G");
    let nvml = scenario.nvml();
    let gpu = nvml.device_by_index(0).unwrap();

    // Up to 5 newcomers fit the headroom nvml-wrapper allocates (count + 5): the full list comes back.
    scenario.faults("procs_grow_between_calls = 3");
    let listed = summary(gpu.running_compute_processes());
    let phantom = 1 << 22;
    assert_eq!(
        listed.iter().map(|p| p.0).collect::<Vec<_>>(),
        [600, 601, phantom, phantom + 1, phantom + 2]
    );
    assert_eq!(listed[2].1, used(MIB));

    // More than 5: nvml-wrapper passes NVML's INSUFFICIENT_SIZE on, as documented.
    scenario.faults("procs_grow_between_calls = 8");
    assert!(matches!(
        gpu.running_compute_processes(),
        Err(NvmlError::InsufficientSize(None))
    ));
    assert!(matches!(gpu.running_graphics_processes(), Ok(list) if list.is_empty()));

    scenario.faults("");
    assert_eq!(pids(gpu.running_compute_processes()), [600, 601]);
}

#[test]
fn a_lost_gpu_fails_every_call_on_it() {
    let scenario = Scenario::new(Some(TWO_GPUS));
    let nvml = scenario.nvml();
    let gpu0 = nvml.device_by_index(0).unwrap();
    let gpu1 = nvml.device_by_index(1).unwrap();

    // GPU 0 falls off the bus while the watchdog holds its handle.
    scenario.devices(&TWO_GPUS.replacen("reserved = \"512M\"", "reserved = \"512M\"\nlost = true", 1));
    assert!(matches!(gpu0.memory_info(), Err(NvmlError::GpuLost)));
    assert!(matches!(
        gpu0.running_compute_processes(),
        Err(NvmlError::GpuLost)
    ));
    assert!(matches!(gpu0.uuid(), Err(NvmlError::GpuLost)));
    assert!(matches!(nvml.device_by_index(0), Err(NvmlError::GpuLost)));
    assert!(matches!(nvml.device_by_uuid(UUID0), Err(NvmlError::GpuLost)));
    assert_eq!(nvml.device_count().unwrap(), 2);
    assert_eq!(gpu1.uuid().unwrap(), UUID1);

    scenario.devices(TWO_GPUS); // back after a reset
    assert_eq!(gpu0.uuid().unwrap(), UUID0);
}

#[test]
fn a_gpu_removed_from_the_scenario_makes_its_handle_invalid() {
    let scenario = Scenario::new(Some(TWO_GPUS));
    let nvml = scenario.nvml();
    let gpu1 = nvml.device_by_index(1).unwrap();
    scenario.devices(&TWO_GPUS[..TWO_GPUS.rfind("[[gpu]]").unwrap()]);
    assert_eq!(nvml.device_count().unwrap(), 1);
    assert!(matches!(gpu1.memory_info(), Err(NvmlError::InvalidArg)));
}

#[test]
fn init_failures() {
    let scenario = Scenario::new(None);
    assert!(
        matches!(scenario.try_nvml(), Err(NvmlError::DriverNotLoaded)),
        "no devices.toml"
    );

    scenario.devices(TWO_GPUS);
    let cases = [
        ("DRIVER_NOT_LOADED", NvmlError::DriverNotLoaded),
        ("NO_PERMISSION", NvmlError::NoPermission),
        ("LIB_RM_VERSION_MISMATCH", NvmlError::LibRmVersionMismatch),
        ("UNKNOWN", NvmlError::Unknown),
    ];
    for (name, want) in cases {
        scenario.faults(&format!("init = \"{name}\""));
        let got = scenario.try_nvml().err().map(|e| e.to_string());
        assert_eq!(got, Some(want.to_string()), "{name}");
    }

    scenario.faults("");
    scenario.devices("[[gpu]]\nuuid = \"not a uuid\"\nname = \"x\"\ntotal = \"1G\"\n");
    assert!(
        matches!(scenario.try_nvml(), Err(NvmlError::Unknown)),
        "malformed devices.toml"
    );
    scenario.devices(TWO_GPUS);
    scenario.faults("init = \"NOPE\"");
    assert!(
        matches!(scenario.try_nvml(), Err(NvmlError::Unknown)),
        "malformed faults.toml"
    );
    scenario.faults("");
    assert!(scenario.try_nvml().is_ok());
}

#[test]
fn transient_errors_then_recovery() {
    let scenario = Scenario::new(Some(TWO_GPUS));
    scenario.claim(0, 700, "1G");
    scenario.faults(
        "transient = { function = \"nvmlDeviceGetComputeRunningProcesses_v3\", error = \"UNKNOWN\", times = 3 }",
    );
    {
        let nvml = scenario.nvml();
        let gpu = nvml.device_by_index(0).unwrap();
        assert!(matches!(gpu.running_compute_processes(), Err(NvmlError::Unknown)));
        assert!(matches!(gpu.running_compute_processes(), Err(NvmlError::Unknown)));
        assert_eq!(
            gpu.memory_info().unwrap().used,
            GIB,
            "other functions are unaffected"
        );
    }
    // The count is on disk: a new process (here: a new init) sees the one failure left.
    let state = std::fs::read_to_string(scenario.path("faults.state")).unwrap();
    assert_eq!(state, "nvmlDeviceGetComputeRunningProcesses_v3 999 3 2\n");
    let nvml = scenario.nvml();
    let gpu = nvml.device_by_index(0).unwrap();
    assert!(matches!(gpu.running_compute_processes(), Err(NvmlError::Unknown)));
    assert_eq!(pids(gpu.running_compute_processes()), [700]);
    assert_eq!(pids(gpu.running_compute_processes()), [700]);
}

#[test]
fn transient_gpu_lost_on_init() {
    let scenario = Scenario::new(Some(TWO_GPUS));
    scenario.faults("[transient]\nfunction = \"nvmlInit_v2\"\nerror = \"GPU_IS_LOST\"\n");
    assert!(matches!(scenario.try_nvml(), Err(NvmlError::GpuLost)));
    assert!(scenario.try_nvml().is_ok());
}

#[test]
fn old_driver_without_memory_info_v2() {
    let scenario = Scenario::new(Some(TWO_GPUS));
    scenario.faults("memory_info_version = \"v1-only\"");
    let nvml = scenario.nvml();
    assert!(matches!(
        nvml.device_by_index(0).unwrap().memory_info(),
        Err(NvmlError::FunctionNotFound)
    ));
}

const MIG_GPUS: &str = r#"
[[gpu]]
uuid = "GPU-00000000-1111-2222-3333-444444444444"
name = "NVIDIA A100-SXM4-80GB"
total = "80G"
reserved = 0
mig = true

[[gpu.mig_device]]
uuid = "MIG-aaaaaaaa-1111-2222-3333-444444444444"
name = "NVIDIA A100-SXM4-80GB MIG 1g.10gb"
total = "10G"
reserved = 0
gpu_instance_id = 9

[[gpu.mig_device]]
uuid = "MIG-bbbbbbbb-1111-2222-3333-444444444444"
total = "40G"
reserved = 0

[[gpu]]
uuid = "GPU-11111111-1111-2222-3333-444444444444"
name = "NVIDIA A100-SXM4-80GB"
total = "80G"

[[gpu]]
uuid = "GPU-22222222-1111-2222-3333-444444444444"
name = "Tesla V100-SXM2-32GB"
total = "32G"
mig_capable = false
"#;

#[test]
fn mig() {
    let scenario = Scenario::new(Some(MIG_GPUS));
    scenario.claim(0, 800, "4G\nmig=0");
    scenario.claim(0, 801, "20G\nmig=1");
    scenario.claim(0, 802, "1G\nmig=1\ngraphics");
    let nvml = scenario.nvml();
    let gpu = nvml.device_by_index(0).unwrap();

    let mode = gpu.mig_mode().unwrap();
    assert_eq!((mode.current, mode.pending), (1, 1));
    assert_eq!(gpu.mig_device_count().unwrap(), 7);
    assert!(!gpu.mig_is_mig_device_handle().unwrap());
    assert_eq!(gpu.memory_info().unwrap().used, 25 * GIB);
    assert_eq!(
        summary(gpu.running_compute_processes()),
        [
            (800, used(4 * GIB), Some(9), Some(0)),
            (801, used(20 * GIB), Some(2), Some(0))
        ]
    );

    let slice = gpu.mig_device_by_index(1).unwrap();
    assert!(slice.mig_is_mig_device_handle().unwrap());
    assert_eq!(slice.uuid().unwrap(), MIG_UUID1);
    assert_eq!(slice.name().unwrap(), "NVIDIA A100-SXM4-80GB MIG 40gb");
    assert_eq!(slice.mig_parent_device().unwrap().uuid().unwrap(), UUID0);
    let memory = slice.memory_info().unwrap();
    assert_eq!(
        (memory.total, memory.used, memory.free),
        (40 * GIB, 21 * GIB, 19 * GIB)
    );
    assert_eq!(pids(slice.running_compute_processes()), [801]);
    assert_eq!(pids(slice.running_graphics_processes()), [802]);
    assert!(matches!(slice.index(), Err(NvmlError::NotSupported)));

    let by_uuid = nvml.device_by_uuid(MIG_UUID0).unwrap();
    assert_eq!(by_uuid.name().unwrap(), "NVIDIA A100-SXM4-80GB MIG 1g.10gb");
    assert_eq!(pids(by_uuid.running_compute_processes()), [800]);
    assert!(matches!(gpu.mig_device_by_index(2), Err(NvmlError::NotFound)));
    assert!(matches!(gpu.mig_parent_device(), Err(NvmlError::InvalidArg)));

    let mig_off = nvml.device_by_index(1).unwrap();
    let mode = mig_off.mig_mode().unwrap();
    assert_eq!((mode.current, mode.pending), (0, 0));
    assert_eq!(mig_off.mig_device_count().unwrap(), 0);
    assert!(matches!(mig_off.mig_device_by_index(0), Err(NvmlError::NotFound)));

    let pre_ampere = nvml.device_by_index(2).unwrap();
    assert!(matches!(pre_ampere.mig_mode(), Err(NvmlError::NotSupported)));
}

#[test]
fn hostile_files_in_the_job_writable_directory_are_skipped() {
    use std::os::unix::fs::symlink;

    let scenario = Scenario::new(Some(TWO_GPUS));
    let dir = scenario.gpu_dir(0);
    scenario.claim(0, 900, "1G");
    for pid in 901..=908 {
        scenario.alive(pid);
    }
    symlink(scenario.path("devices.toml"), dir.join("901")).unwrap();
    symlink("/dev/zero", dir.join("902")).unwrap();
    let fifo = std::ffi::CString::new(dir.join("903").into_os_string().into_encoded_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(
        unsafe { libc::mkfifo(fifo.as_ptr(), 0o666) },
        0,
        "a FIFO must not hang the reader"
    );
    std::fs::create_dir(dir.join("904")).unwrap();
    std::fs::write(dir.join("905"), "1G\n".repeat(200)).unwrap();
    std::fs::write(dir.join("906"), "a lot").unwrap();
    std::fs::write(dir.join("907"), [0xff, 0xfe, 0x00]).unwrap();
    std::fs::write(dir.join("908"), "").unwrap(); // being written
    for name in ["0908", "+908", "908.tmp", ".908", "0", "4194304", "self"] {
        std::fs::write(dir.join(name), "1G").unwrap();
    }

    let nvml = scenario.nvml();
    let gpu = nvml.device_by_index(0).unwrap();
    assert_eq!(pids(gpu.running_compute_processes()), [900]);
    assert_eq!(gpu.memory_info().unwrap().used, GIB);
}

#[test]
fn a_claim_counts_only_if_its_owner_owns_the_process() {
    use std::os::unix::fs::chown;

    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: changing file owners needs root");
        return;
    }
    let scenario = Scenario::new(Some(TWO_GPUS));
    let framed = scenario.claim(0, 1000, "70G"); // another job's file, naming this process
    chown(&framed, Some(12345), None).unwrap();
    let own = scenario.claim(0, 1001, "1G");
    chown(&own, Some(12345), None).unwrap();
    chown(scenario.proc_root.join("1001"), Some(12345), None).unwrap();

    let nvml = scenario.nvml();
    assert_eq!(
        pids(nvml.device_by_index(0).unwrap().running_compute_processes()),
        [1001]
    );
}
