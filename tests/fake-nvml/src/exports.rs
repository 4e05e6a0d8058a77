//! The C ABI: the `nvml*` functions nvml-wrapper dlsyms. Each one checks its pointers, asks
//! [`Call`] for the scenario and the device, and writes the answer. No panic crosses the ABI: every
//! body runs under `catch_unwind` and a panic reads as NVML_ERROR_UNKNOWN.

#![allow(non_snake_case)]

use std::ffi::{c_char, c_uint, c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::call::{self, Call, Target};
use crate::claims::{Claim, Kind};
use crate::codes::{self, Return};
use crate::growth;
use crate::handle::Handle;
use crate::limits;
use crate::model::{
    self, claims_of, list_reply, memory_info, phantom_rows, process_rows, ListReply, MemoryV2,
};
use crate::scenario::{Mig, MAX_MIG_DEVICES};

type Device = *mut c_void;

/// `nvmlMemory_t`.
#[repr(C)]
pub struct MemoryV1Out {
    pub total: u64,
    pub free: u64,
    pub used: u64,
}

/// `nvmlMemory_v2_t`.
#[repr(C)]
pub struct MemoryV2Out {
    pub version: c_uint,
    pub total: u64,
    pub reserved: u64,
    pub free: u64,
    pub used: u64,
}

/// NVML_STRUCT_VERSION(Memory, 2): sizeof(nvmlMemory_v2_t) | 2 << 24 = 0x02000028.
pub const MEMORY_V2_VERSION: c_uint = std::mem::size_of::<MemoryV2Out>() as c_uint | 2 << 24;

/// `nvmlProcessInfo_t` (= `nvmlProcessInfo_v2_t`, what the `_v3` functions fill), 24 bytes.
#[repr(C)]
pub struct ProcessInfoOut {
    pub pid: c_uint,
    pub used_gpu_memory: u64,
    pub gpu_instance_id: c_uint,
    pub compute_instance_id: c_uint,
}

/// `nvmlPciInfo_t`.
#[repr(C)]
pub struct PciInfoOut {
    pub bus_id_legacy: [c_char; 16],
    pub domain: c_uint,
    pub bus: c_uint,
    pub device: c_uint,
    pub pci_device_id: c_uint,
    pub pci_sub_system_id: c_uint,
    pub bus_id: [c_char; 32],
}

fn guard(body: impl FnOnce() -> Result<(), Return>) -> Return {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => codes::SUCCESS,
        Ok(Err(code)) => code,
        Err(_) => codes::UNKNOWN,
    }
}

/// An out-parameter: INVALID_ARGUMENT when NULL.
unsafe fn out<'a, T>(pointer: *mut T) -> Result<&'a mut T, Return> {
    pointer.as_mut().ok_or(codes::INVALID_ARGUMENT)
}

/// Copies `text` and its NUL into the caller's buffer of `length` bytes; INSUFFICIENT_SIZE if it
/// does not fit.
unsafe fn write_c_string(buffer: *mut c_char, length: c_uint, text: &str) -> Result<(), Return> {
    if buffer.is_null() {
        return Err(codes::INVALID_ARGUMENT);
    }
    if (length as usize) < text.len() + 1 {
        return Err(codes::INSUFFICIENT_SIZE);
    }
    std::ptr::copy_nonoverlapping(text.as_ptr().cast::<c_char>(), buffer, text.len());
    *buffer.add(text.len()) = 0;
    Ok(())
}

fn whole_gpu_only(target: &Target<'_>) -> Result<(), Return> {
    match target.mig {
        Some(_) => Err(codes::NOT_SUPPORTED),
        None => Ok(()),
    }
}

/// Defines an exported NVML function whose body returns `Result<(), Return>`; `$function` is
/// bound to the function's own name (what faults.toml's `transient.function` matches).
macro_rules! export {
    ($(#[$doc:meta])* fn $name:ident($($arg:ident: $ty:ty),* $(,)?) as $function:ident $body:block) => {
        $(#[$doc])*
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> Return {
            let $function: &'static str = stringify!($name);
            guard(move || $body)
        }
    };
}

export! {
    /// Fails like a machine without a driver when devices.toml is missing.
    fn nvmlInit_v2() as function {
        call::init(function)
    }
}

export! {
    fn nvmlInitWithFlags(_flags: c_uint) as function {
        call::init(function)
    }
}

/// Not fault-injectable: nvml-wrapper calls it from Drop.
#[no_mangle]
pub extern "C" fn nvmlShutdown() -> Return {
    guard(call::shutdown)
}

/// Works before nvmlInit, as in real NVML.
#[no_mangle]
pub extern "C" fn nvmlErrorString(result: Return) -> *const c_char {
    catch_unwind(|| codes::error_string(result))
        .unwrap_or(c"Unknown Error")
        .as_ptr()
}

export! {
    fn nvmlSystemGetDriverVersion(version: *mut c_char, length: c_uint) as function {
        let call = Call::begin(function)?;
        write_c_string(version, length, &call.devices.driver_version)
    }
}

export! {
    fn nvmlSystemGetNVMLVersion(version: *mut c_char, length: c_uint) as function {
        let call = Call::begin(function)?;
        write_c_string(version, length, &call.devices.nvml_version())
    }
}

export! {
    fn nvmlDeviceGetCount_v2(device_count: *mut c_uint) as function {
        let call = Call::begin(function)?;
        *out(device_count)? = call.devices.gpus.len() as c_uint;
        Ok(())
    }
}

export! {
    fn nvmlDeviceGetHandleByIndex_v2(index: c_uint, device: *mut Device) as function {
        let call = Call::begin(function)?;
        let device = out(device)?;
        *device = call.gpu_handle(index as usize)?.encode() as Device;
        Ok(())
    }
}

export! {
    /// Takes GPU and MIG UUIDs.
    fn nvmlDeviceGetHandleByUUID(uuid: *const c_char, device: *mut Device) as function {
        let call = Call::begin(function)?;
        let device = out(device)?;
        if uuid.is_null() {
            return Err(codes::INVALID_ARGUMENT);
        }
        let wanted = CStr::from_ptr(uuid).to_bytes();
        for (index, gpu) in call.devices.gpus.iter().enumerate() {
            if gpu.uuid.as_bytes() == wanted {
                *device = call.gpu_handle(index)?.encode() as Device;
                return Ok(());
            }
            if let Mig::Enabled(migs) = &gpu.mig {
                if let Some(k) = migs.iter().position(|m| m.uuid.as_bytes() == wanted) {
                    call.gpu_handle(index)?; // a lost GPU loses its MIG devices too
                    *device = Handle { gpu: index, mig: Some(k) }.encode() as Device;
                    return Ok(());
                }
            }
        }
        Err(codes::NOT_FOUND)
    }
}

export! {
    fn nvmlDeviceGetUUID(device: Device, uuid: *mut c_char, length: c_uint) as function {
        let call = Call::begin(function)?;
        let target = call.target(device)?;
        let text = target.mig.map_or(&target.gpu.uuid, |mig| &mig.uuid);
        write_c_string(uuid, length, text)
    }
}

export! {
    fn nvmlDeviceGetName(device: Device, name: *mut c_char, length: c_uint) as function {
        let call = Call::begin(function)?;
        let target = call.target(device)?;
        let text = target.mig.map_or(&target.gpu.name, |mig| &mig.name);
        write_c_string(name, length, text)
    }
}

export! {
    fn nvmlDeviceGetIndex(device: Device, index: *mut c_uint) as function {
        let call = Call::begin(function)?;
        let target = call.target(device)?;
        whole_gpu_only(&target)?;
        *out(index)? = target.handle.gpu as c_uint;
        Ok(())
    }
}

export! {
    fn nvmlDeviceGetMinorNumber(device: Device, minor_number: *mut c_uint) as function {
        let call = Call::begin(function)?;
        let target = call.target(device)?;
        whole_gpu_only(&target)?;
        *out(minor_number)? = target.gpu.minor;
        Ok(())
    }
}

export! {
    /// Bus N+1 for GPU index N, domain 0, device 0: `00000000:01:00.0` for GPU 0.
    fn nvmlDeviceGetPciInfo_v3(device: Device, pci: *mut PciInfoOut) as function {
        let call = Call::begin(function)?;
        let target = call.target(device)?;
        whole_gpu_only(&target)?;
        let pci = out(pci)?;
        let bus = target.handle.gpu as c_uint + 1;
        *pci = PciInfoOut {
            bus_id_legacy: [0; 16],
            domain: 0,
            bus,
            device: 0,
            pci_device_id: 0,
            pci_sub_system_id: 0,
            bus_id: [0; 32],
        };
        write_c_string(pci.bus_id_legacy.as_mut_ptr(), 16, &format!("0000:{bus:02X}:00.0"))?;
        write_c_string(pci.bus_id.as_mut_ptr(), 32, &format!("00000000:{bus:02X}:00.0"))
    }
}

fn memory_of(call: &Call, target: &Target<'_>) -> MemoryV2 {
    let claims = call.claims(target.handle.gpu);
    match target.mig {
        None => capped_for_caller(call, target.handle.gpu, &claims)
            .unwrap_or_else(|| memory_info(&target.gpu.memory, claims.iter())),
        Some(mig) => memory_info(&mig.memory, claims_of(&claims, target.handle.mig)),
    }
}

/// Inside a namespace with a hard limit, the GPU reads as that limit (as `cuMemGetInfo` does under
/// MPS v3 partitioning): total = hard, used = what the namespace's processes hold. Only for callers
/// that are not root: the watchdog (root) sees the whole GPU wherever it runs.
fn capped_for_caller(call: &Call, gpu: usize, claims: &[Claim]) -> Option<MemoryV2> {
    if call.faults.memory_limits_absent || unsafe { libc::geteuid() } == 0 {
        return None;
    }
    let limits = read_limits(&call.paths, gpu);
    let me = caller_dirs(&call.paths, std::process::id())?;
    let limit = limits::limit_for(&limits, &me)?;
    let used = namespace_usage(&call.paths, limit, claims, None).min(limit.hard);
    Some(MemoryV2 {
        total: limit.hard,
        reserved: 0,
        free: limit.hard - used,
        used,
    })
}

fn limits_dir(paths: &call::Paths) -> std::path::PathBuf {
    paths.dir.join("limits")
}

fn read_limits(paths: &call::Paths, gpu: usize) -> Vec<limits::Limit> {
    std::fs::read_to_string(limits_dir(paths).join(gpu.to_string()))
        .map(|text| limits::parse_limits(&text))
        .unwrap_or_default()
}

/// The cgroup directories of process `pid`, from `<proc>/<pid>/cgroup`.
fn caller_dirs(paths: &call::Paths, pid: u32) -> Option<Vec<std::path::PathBuf>> {
    let text = std::fs::read_to_string(paths.proc_root.join(pid.to_string()).join("cgroup")).ok()?;
    Some(limits::cgroup_dirs(
        &text,
        std::path::Path::new(limits::CGROUP_ROOT),
    ))
}

/// What the processes in `limit`'s namespace hold on the GPU, `except` one of them.
fn namespace_usage(paths: &call::Paths, limit: &limits::Limit, claims: &[Claim], except: Option<u32>) -> u64 {
    claims
        .iter()
        .filter(|c| Some(c.pid) != except)
        .filter(|c| {
            caller_dirs(paths, c.pid).is_some_and(|dirs| dirs.iter().any(|d| d.starts_with(&limit.namespace)))
        })
        .map(Claim::counted_bytes)
        .sum()
}

/// `nvmlSetMemoryLimits_v1_t` (nvml.h, CUDA 13.4): no version field; versioned by the function name.
#[repr(C)]
pub struct SetMemoryLimitsIn {
    pub name_space: *const c_char,
    pub soft_limit: u64,
    pub hard_limit: u64,
}

/// `nvmlGetMemoryLimits_v1_t`.
#[repr(C)]
pub struct GetMemoryLimitsOut {
    pub name_space: *const c_char,
    pub soft_limit: u64,
    pub hard_limit: u64,
    pub current_used: u64,
}

unsafe fn namespace_arg(name_space: *const c_char) -> Result<std::path::PathBuf, Return> {
    if name_space.is_null() {
        return Err(codes::INVALID_ARGUMENT);
    }
    let text = CStr::from_ptr(name_space)
        .to_str()
        .map_err(|_| codes::INVALID_ARGUMENT)?;
    if !limits::valid_namespace(text) {
        return Err(codes::INVALID_ARGUMENT);
    }
    Ok(std::path::PathBuf::from(text))
}

export! {
    /// Sets (soft 0 and hard NVML_DEVICE_MEMORY_LIMIT_MAX: clears) the limits of one cgroup on a
    /// whole GPU. Root only (NO_PERMISSION otherwise), as the real setter.
    fn nvmlDeviceSetMemoryLimits_v1(device: Device, limits: *const SetMemoryLimitsIn) as function {
        let call = Call::begin(function)?;
        if call.faults.memory_limits_absent {
            return Err(codes::FUNCTION_NOT_FOUND);
        }
        let target = call.target(device)?;
        whole_gpu_only(&target)?;
        let wanted = limits.as_ref().ok_or(codes::INVALID_ARGUMENT)?;
        let namespace = namespace_arg(wanted.name_space)?;
        if wanted.soft_limit > wanted.hard_limit {
            return Err(codes::INVALID_ARGUMENT);
        }
        if libc::geteuid() != 0 {
            return Err(codes::NO_PERMISSION);
        }
        let mut current = read_limits(&call.paths, target.handle.gpu);
        limits::apply(
            &mut current,
            limits::Limit { namespace, soft: wanted.soft_limit, hard: wanted.hard_limit },
        );
        write_limits(&call.paths, target.handle.gpu, &limits::render_limits(&current))
    }
}

export! {
    /// The limits of one cgroup on a whole GPU (none: soft 0, hard MAX) and what it holds there.
    fn nvmlDeviceGetMemoryLimits_v1(device: Device, limits: *mut GetMemoryLimitsOut) as function {
        let call = Call::begin(function)?;
        if call.faults.memory_limits_absent {
            return Err(codes::FUNCTION_NOT_FOUND);
        }
        let target = call.target(device)?;
        whole_gpu_only(&target)?;
        let out = out(limits)?;
        let namespace = namespace_arg(out.name_space)?;
        let found = read_limits(&call.paths, target.handle.gpu)
            .into_iter()
            .find(|l| l.namespace == namespace)
            .unwrap_or(limits::Limit { namespace, soft: 0, hard: limits::LIMIT_MAX });
        let claims = call.claims(target.handle.gpu);
        out.soft_limit = found.soft;
        out.hard_limit = found.hard;
        out.current_used = namespace_usage(&call.paths, &found, &claims, None);
        Ok(())
    }
}

/// Root's file in the scenario directory, replaced whole (write aside, rename).
fn write_limits(paths: &call::Paths, gpu: usize, text: &str) -> Result<(), Return> {
    use std::os::unix::fs::DirBuilderExt;
    let dir = limits_dir(paths);
    let _ = std::fs::DirBuilder::new().mode(0o755).create(&dir);
    let path = dir.join(gpu.to_string());
    let tmp = dir.join(format!(".{gpu}.{}", std::process::id()));
    std::fs::write(&tmp, text)
        .and_then(|()| std::fs::rename(&tmp, &path))
        .map_err(|_| codes::UNKNOWN)
}

/// Not NVML: the fake's `cudaMalloc`. The calling process asks to hold `bytes` on GPU `index` in
/// all (what its claim file says afterwards; its previous claim is replaced, not added to). It is
/// refused with NVML_ERROR_MEMORY, changing nothing, for this process alone, when it would take
/// - the GPU past its capacity: what `nvmlDeviceGetMemoryInfo_v2` reports as reserved + used
///   without the caller's own claim (every other live claim and `extra_used`), plus `bytes`, above
///   `total` (unless faults.toml says `claims_past_capacity = "granted"`);
/// - or its cgroup's namespace past a hard limit set by `nvmlDeviceSetMemoryLimits_v1` there.
///
/// A claim that does not grow is always granted. Otherwise the claim file `procs/<index>/<pid>` is
/// written (aside, then renamed). Read, checks and write hold an exclusive flock on the
/// `procs/<index>` directory, so two processes claiming at once cannot both fit past either bound.
/// An index that `devices.toml` does not list answers INVALID_ARGUMENT; without a valid
/// `devices.toml` the capacity is unknown and only the hard limit is checked. Needs no nvmlInit.
#[no_mangle]
pub extern "C" fn fakeNvmlClaim(index: c_uint, bytes: u64) -> Return {
    guard(|| {
        let paths = call::Paths::from_env();
        let faults = std::fs::read_to_string(paths.dir.join("faults.toml"))
            .ok()
            .and_then(|text| crate::scenario::parse_faults(&text).ok())
            .unwrap_or_default();
        let gpu = index as usize;
        // Without a (valid) devices.toml the GPU's size is unknown: no capacity check.
        let memory = match call::load_devices(&paths) {
            Ok(devices) => Some(devices.gpus.get(gpu).ok_or(codes::INVALID_ARGUMENT)?.memory),
            Err(_) => None,
        };
        let pid = std::process::id();
        let procs = paths.dir.join("procs").join(gpu.to_string());
        let _lock = lock_dir(&procs)?;
        let claims = crate::claims::read_claims(&procs, &paths.proc_root);
        if let Some(memory) = memory.filter(|_| !faults.claims_past_capacity_granted) {
            if !model::claim_fits(&memory, &claims, pid, bytes) {
                return Err(codes::MEMORY);
            }
        }
        let grows = bytes > model::held_by(&claims, pid);
        if grows && !faults.memory_limits_absent {
            let limits = read_limits(&paths, gpu);
            if let Some(limit) =
                caller_dirs(&paths, pid).and_then(|me| limits::limit_for(&limits, &me).cloned())
            {
                let others = namespace_usage(&paths, &limit, &claims, Some(pid));
                if !limits::fits(&limit, others, bytes) {
                    return Err(codes::MEMORY);
                }
            }
        }
        let tmp = procs.join(format!("{pid}.claim"));
        std::fs::write(&tmp, format!("{bytes}\n"))
            .and_then(|()| std::fs::rename(&tmp, procs.join(pid.to_string())))
            .map_err(|_| codes::UNKNOWN)
    })
}

/// An exclusive flock on a GPU's `procs/<index>` directory (shared by all users, mode 1777: no lock
/// file needed), released when the returned descriptor is dropped. UNKNOWN if it cannot be had
/// (e.g. no such directory, where the claim could not be written either).
fn lock_dir(dir: &std::path::Path) -> Result<std::fs::File, Return> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
        .open(dir)
        .map_err(|_| codes::UNKNOWN)?;
    loop {
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } == 0 {
            return Ok(file);
        }
        if std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return Err(codes::UNKNOWN);
        }
    }
}

export! {
    /// v1: `used` includes the reserved memory.
    fn nvmlDeviceGetMemoryInfo(device: Device, memory: *mut MemoryV1Out) as function {
        let call = Call::begin(function)?;
        let target = call.target(device)?;
        let memory = out(memory)?;
        let (total, free, used) = memory_of(&call, &target).v1();
        *memory = MemoryV1Out { total, free, used };
        Ok(())
    }
}

export! {
    /// v2: `used` excludes `reserved`. The caller sets `version` to [`MEMORY_V2_VERSION`].
    fn nvmlDeviceGetMemoryInfo_v2(device: Device, memory: *mut MemoryV2Out) as function {
        let call = Call::begin(function)?;
        if call.faults.memory_info_v1_only {
            return Err(codes::FUNCTION_NOT_FOUND);
        }
        let memory = out(memory)?;
        if memory.version != MEMORY_V2_VERSION {
            return Err(codes::ARGUMENT_VERSION_MISMATCH);
        }
        let target = call.target(device)?;
        let MemoryV2 { total, reserved, free, used } = memory_of(&call, &target);
        *memory = MemoryV2Out { version: MEMORY_V2_VERSION, total, reserved, free, used };
        Ok(())
    }
}

/// The two-call protocol of nvmlDevice*RunningProcesses: `*info_count` = 0 asks for the count
/// (INSUFFICIENT_SIZE with the count, SUCCESS if there is none); a buffer too small gets
/// INSUFFICIENT_SIZE with the count needed; otherwise the list is written and counted.
unsafe fn running_processes(
    function: &str,
    kind: Kind,
    device: Device,
    info_count: *mut c_uint,
    infos: *mut ProcessInfoOut,
) -> Result<(), Return> {
    let call = Call::begin(function)?;
    let target = call.target(device)?;
    let capacity = out(info_count)?;
    let claims = call.claims(target.handle.gpu);
    let mut rows = process_rows(target.gpu, target.handle.mig, &claims, kind);

    let handle = target.handle.encode();
    let growth = call.faults.procs_grow_between_calls;
    let is_count_query = *capacity == 0;
    if growth > 0 && !is_count_query && growth::is_armed(handle, kind) {
        rows.extend(phantom_rows(growth));
    }
    match list_reply(rows.len(), *capacity, !infos.is_null()) {
        ListReply::Count { count, is_query } => {
            if is_query && growth > 0 {
                growth::arm(handle, kind);
            }
            *capacity = count;
            if count == 0 {
                Ok(())
            } else {
                Err(codes::INSUFFICIENT_SIZE)
            }
        }
        ListReply::Fill { count } => {
            let buffer = std::slice::from_raw_parts_mut(infos, count as usize);
            for (slot, row) in buffer.iter_mut().zip(&rows) {
                *slot = ProcessInfoOut {
                    pid: row.pid,
                    used_gpu_memory: row.used_gpu_memory,
                    gpu_instance_id: row.gpu_instance_id,
                    compute_instance_id: row.compute_instance_id,
                };
            }
            *capacity = count;
            Ok(())
        }
        ListReply::MissingBuffer => Err(codes::INVALID_ARGUMENT),
    }
}

export! {
    fn nvmlDeviceGetComputeRunningProcesses_v3(
        device: Device,
        info_count: *mut c_uint,
        infos: *mut ProcessInfoOut,
    ) as function {
        running_processes(function, Kind::Compute, device, info_count, infos)
    }
}

export! {
    fn nvmlDeviceGetGraphicsRunningProcesses_v3(
        device: Device,
        info_count: *mut c_uint,
        infos: *mut ProcessInfoOut,
    ) as function {
        running_processes(function, Kind::Graphics, device, info_count, infos)
    }
}

export! {
    /// NOT_SUPPORTED on GPUs with `mig_capable = false`; (0, 0) when MIG is off, (1, 1) when on.
    fn nvmlDeviceGetMigMode(device: Device, current_mode: *mut c_uint, pending_mode: *mut c_uint) as function {
        let call = Call::begin(function)?;
        let target = call.target(device)?;
        whole_gpu_only(&target)?;
        let (current, pending) = (out(current_mode)?, out(pending_mode)?);
        let mode = match target.gpu.mig {
            Mig::Unsupported => return Err(codes::NOT_SUPPORTED),
            Mig::Disabled => 0,
            Mig::Enabled(_) => 1,
        };
        (*current, *pending) = (mode, mode);
        Ok(())
    }
}

export! {
    /// 7 with MIG on, else 0 (as documented: "zero if MIG is not supported or enabled").
    fn nvmlDeviceGetMaxMigDeviceCount(device: Device, count: *mut c_uint) as function {
        let call = Call::begin(function)?;
        let target = call.target(device)?;
        whole_gpu_only(&target)?;
        *out(count)? = match target.gpu.mig {
            Mig::Enabled(_) => MAX_MIG_DEVICES as c_uint,
            _ => 0,
        };
        Ok(())
    }
}

export! {
    /// NOT_FOUND where no MIG device has that index (also with MIG off).
    fn nvmlDeviceGetMigDeviceHandleByIndex(device: Device, index: c_uint, mig_device: *mut Device) as function {
        let call = Call::begin(function)?;
        let target = call.target(device)?;
        whole_gpu_only(&target)?;
        let mig_device = out(mig_device)?;
        let exists = match &target.gpu.mig {
            Mig::Unsupported => return Err(codes::NOT_SUPPORTED),
            Mig::Disabled => false,
            Mig::Enabled(migs) => (index as usize) < migs.len(),
        };
        if !exists {
            return Err(codes::NOT_FOUND);
        }
        *mig_device = Handle { gpu: target.handle.gpu, mig: Some(index as usize) }.encode() as Device;
        Ok(())
    }
}

export! {
    fn nvmlDeviceIsMigDeviceHandle(device: Device, is_mig_device: *mut c_uint) as function {
        let call = Call::begin(function)?;
        let target = call.target(device)?;
        *out(is_mig_device)? = target.mig.is_some() as c_uint;
        Ok(())
    }
}

export! {
    /// INVALID_ARGUMENT for a whole-GPU handle.
    fn nvmlDeviceGetDeviceHandleFromMigDeviceHandle(mig_device: Device, device: *mut Device) as function {
        let call = Call::begin(function)?;
        let target = call.target(mig_device)?;
        let device = out(device)?;
        if target.mig.is_none() {
            return Err(codes::INVALID_ARGUMENT);
        }
        *device = Handle { gpu: target.handle.gpu, mig: None }.encode() as Device;
        Ok(())
    }
}

export! {
    /// MIG handles only (NOT_SUPPORTED for a whole GPU).
    fn nvmlDeviceGetGpuInstanceId(device: Device, id: *mut c_uint) as function {
        let call = Call::begin(function)?;
        let target = call.target(device)?;
        let mig = target.mig.ok_or(codes::NOT_SUPPORTED)?;
        *out(id)? = mig.gpu_instance_id;
        Ok(())
    }
}

export! {
    /// MIG handles only; each MIG device here has one compute instance, id 0.
    fn nvmlDeviceGetComputeInstanceId(device: Device, id: *mut c_uint) as function {
        let call = Call::begin(function)?;
        let target = call.target(device)?;
        target.mig.ok_or(codes::NOT_SUPPORTED)?;
        *out(id)? = 0;
        Ok(())
    }
}
