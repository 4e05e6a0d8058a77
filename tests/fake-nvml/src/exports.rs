//! The C ABI: the `nvml*` functions nvml-wrapper dlsyms. Each one checks its pointers, asks
//! [`Call`] for the scenario and the device, and writes the answer. No panic crosses the ABI: every
//! body runs under `catch_unwind` and a panic reads as NVML_ERROR_UNKNOWN.

#![allow(non_snake_case)]

use std::ffi::{c_char, c_uint, c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::call::{self, Call, Target};
use crate::claims::Kind;
use crate::codes::{self, Return};
use crate::growth;
use crate::handle::Handle;
use crate::model::{claims_of, list_reply, memory_info, phantom_rows, process_rows, ListReply, MemoryV2};
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
        None => memory_info(&target.gpu.memory, claims.iter()),
        Some(mig) => memory_info(&mig.memory, claims_of(&claims, target.handle.mig)),
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
