//! The scenario files an admin or a test writes: `devices.toml` (the GPUs) and `faults.toml` (what
//! should go wrong). Pure: text in, checked plain data out, errors that name the bad entry.

use serde::Deserialize;

use crate::codes::{error_by_name, Return};
use crate::size::parse_bytes;

/// Driver version reported when `devices.toml` names none: an NVML 13 (R580) driver.
pub const DEFAULT_DRIVER_VERSION: &str = "580.95.05";
/// Real A100/H100 GPUs have at most 7 MIG devices.
pub const MAX_MIG_DEVICES: usize = 7;
/// More GPUs than any node has; keeps handles small.
pub const MAX_GPUS: usize = 64;
/// A bound on `procs_grow_between_calls`, so a typo cannot make a caller allocate gigabytes.
pub const MAX_GROWTH: u32 = 1000;

/// The exported functions a `transient` fault may name (nvmlShutdown and nvmlErrorString are not
/// fault-injectable).
pub const FAULTABLE_FUNCTIONS: &[&str] = &[
    "nvmlInit_v2",
    "nvmlInitWithFlags",
    "nvmlDeviceSetMemoryLimits_v1",
    "nvmlDeviceGetMemoryLimits_v1",
    "nvmlSystemGetDriverVersion",
    "nvmlSystemGetNVMLVersion",
    "nvmlDeviceGetCount_v2",
    "nvmlDeviceGetHandleByIndex_v2",
    "nvmlDeviceGetHandleByUUID",
    "nvmlDeviceGetUUID",
    "nvmlDeviceGetIndex",
    "nvmlDeviceGetName",
    "nvmlDeviceGetMinorNumber",
    "nvmlDeviceGetPciInfo_v3",
    "nvmlDeviceGetMemoryInfo",
    "nvmlDeviceGetMemoryInfo_v2",
    "nvmlDeviceGetComputeRunningProcesses_v3",
    "nvmlDeviceGetGraphicsRunningProcesses_v3",
    "nvmlDeviceGetMigMode",
    "nvmlDeviceGetMaxMigDeviceCount",
    "nvmlDeviceGetMigDeviceHandleByIndex",
    "nvmlDeviceIsMigDeviceHandle",
    "nvmlDeviceGetDeviceHandleFromMigDeviceHandle",
    "nvmlDeviceGetGpuInstanceId",
    "nvmlDeviceGetComputeInstanceId",
];

/// All the GPUs of the node, in index order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Devices {
    pub driver_version: String,
    pub gpus: Vec<Gpu>,
}

impl Devices {
    /// What nvmlSystemGetNVMLVersion says: the NVML major of the driver branch, then the driver
    /// version ("13.580.95.05"). R580 shipped NVML 13, R525 NVML 12, earlier ones NVML 11.
    pub fn nvml_version(&self) -> String {
        let branch: u32 = self
            .driver_version
            .split('.')
            .next()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let major = match branch {
            580.. => 13,
            525..=579 => 12,
            _ => 11,
        };
        format!("{major}.{}", self.driver_version)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gpu {
    pub uuid: String,
    pub name: String,
    pub memory: Memory,
    pub mig: Mig,
    /// Fallen off the bus: every call on it answers NVML_ERROR_GPU_IS_LOST.
    pub lost: bool,
    /// N in /dev/nvidiaN.
    pub minor: u32,
}

/// The memory of a GPU or of one MIG device, before any process is counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Memory {
    pub total: u64,
    /// Held by the driver and firmware; `memory_info` v2 reports it apart from `used`.
    pub reserved: u64,
    /// Used, but by no listed process (e.g. another container's context).
    pub extra_used: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mig {
    /// The GPU cannot do MIG (pre-Ampere): MIG queries answer NOT_SUPPORTED.
    Unsupported,
    /// MIG-capable, MIG off.
    Disabled,
    /// MIG on, with these MIG devices (indexes 0..).
    Enabled(Vec<MigDevice>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigDevice {
    pub uuid: String,
    pub name: String,
    pub memory: Memory,
    pub gpu_instance_id: u32,
}

/// Everything `faults.toml` can ask for; the default is a healthy node.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Faults {
    /// nvmlInit fails with this.
    pub init: Option<Return>,
    pub transient: Option<Transient>,
    /// After each count query, this many more processes are listed until the next count query.
    pub procs_grow_between_calls: u32,
    /// Like drivers older than R510: nvmlDeviceGetMemoryInfo_v2 answers FUNCTION_NOT_FOUND.
    pub memory_info_v1_only: bool,
    /// Like drivers older than r615 (no MPS v3 memory partitioning): the memory-limit functions
    /// answer FUNCTION_NOT_FOUND and `fakeNvmlClaim` enforces no hard limit.
    pub memory_limits_absent: bool,
    /// `fakeNvmlClaim` grants a claim that takes the GPU past its capacity (default: refused with
    /// NVML_ERROR_MEMORY, as a real GPU's allocation fails).
    pub claims_past_capacity_granted: bool,
}

/// The next `times` calls of `function` fail with `error` (counted in `faults.state`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transient {
    pub function: String,
    pub error: Return,
    pub times: u32,
}

/// A size as TOML gives it: an integer of bytes or a string such as "80G".
#[derive(Deserialize)]
#[serde(untagged)]
enum SizeField {
    Bytes(u64),
    Text(String),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DevicesFile {
    driver_version: Option<String>,
    #[serde(default)]
    gpu: Vec<GpuEntry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GpuEntry {
    uuid: String,
    name: String,
    total: SizeField,
    reserved: Option<SizeField>,
    extra_used: Option<SizeField>,
    #[serde(default)]
    mig: bool,
    #[serde(default = "yes")]
    mig_capable: bool,
    #[serde(default)]
    lost: bool,
    minor: Option<u32>,
    #[serde(default)]
    mig_device: Vec<MigEntry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct MigEntry {
    uuid: String,
    name: Option<String>,
    total: SizeField,
    reserved: Option<SizeField>,
    gpu_instance_id: Option<u32>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FaultsFile {
    init: Option<String>,
    transient: Option<TransientEntry>,
    #[serde(default)]
    procs_grow_between_calls: u32,
    memory_info_version: Option<String>,
    memory_limits: Option<String>,
    claims_past_capacity: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TransientEntry {
    function: String,
    error: String,
    #[serde(default = "one")]
    times: u32,
}

fn yes() -> bool {
    true
}

fn one() -> u32 {
    1
}

/// The driver keeps back about 0.5% of a GPU's memory; real figures are 0.4–0.8%.
/// Rounded down to whole MiB.
pub fn default_reserved(total: u64) -> u64 {
    total / 200 / (1 << 20) * (1 << 20)
}

pub fn parse_devices(text: &str) -> Result<Devices, String> {
    let file: DevicesFile = toml::from_str(text).map_err(|e| e.to_string())?;
    if file.gpu.len() > MAX_GPUS {
        return Err(format!("{} GPUs, at most {MAX_GPUS}", file.gpu.len()));
    }
    let mut gpus = Vec::with_capacity(file.gpu.len());
    for (index, entry) in file.gpu.into_iter().enumerate() {
        let gpu = check_gpu(index, entry).map_err(|e| format!("[[gpu]] {index}: {e}"))?;
        gpus.push(gpu);
    }
    let mut uuids: Vec<&str> = gpus.iter().flat_map(all_uuids).collect();
    uuids.sort_unstable();
    if let Some(pair) = uuids.windows(2).find(|pair| pair[0] == pair[1]) {
        return Err(format!("uuid {} appears twice", pair[0]));
    }
    Ok(Devices {
        driver_version: file
            .driver_version
            .unwrap_or_else(|| DEFAULT_DRIVER_VERSION.to_string()),
        gpus,
    })
}

fn all_uuids(gpu: &Gpu) -> impl Iterator<Item = &str> {
    let migs = match &gpu.mig {
        Mig::Enabled(devices) => devices.as_slice(),
        _ => &[],
    };
    std::iter::once(gpu.uuid.as_str()).chain(migs.iter().map(|m| m.uuid.as_str()))
}

fn check_gpu(index: usize, entry: GpuEntry) -> Result<Gpu, String> {
    check_uuid(&entry.uuid, "GPU-")?;
    let memory = check_memory(&entry.total, entry.reserved.as_ref(), entry.extra_used.as_ref())?;
    let mig = match (entry.mig_capable, entry.mig) {
        (false, true) => return Err("mig = true needs mig_capable = true".to_string()),
        (false, false) => Mig::Unsupported,
        (true, false) => Mig::Disabled,
        (true, true) => Mig::Enabled(Vec::new()),
    };
    let mig = match mig {
        Mig::Enabled(_) => Mig::Enabled(check_mig_devices(&entry.name, &memory, entry.mig_device)?),
        other if entry.mig_device.is_empty() => other,
        _ => return Err("[[gpu.mig_device]] needs mig = true".to_string()),
    };
    Ok(Gpu {
        uuid: entry.uuid,
        name: entry.name,
        memory,
        mig,
        lost: entry.lost,
        minor: entry.minor.unwrap_or(index as u32),
    })
}

fn check_mig_devices(gpu_name: &str, gpu: &Memory, entries: Vec<MigEntry>) -> Result<Vec<MigDevice>, String> {
    if entries.len() > MAX_MIG_DEVICES {
        return Err(format!(
            "{} MIG devices, a GPU has at most {MAX_MIG_DEVICES}",
            entries.len()
        ));
    }
    let mut devices = Vec::with_capacity(entries.len());
    for (k, entry) in entries.into_iter().enumerate() {
        let device = (|| {
            check_uuid(&entry.uuid, "MIG-")?;
            let memory = check_memory(&entry.total, entry.reserved.as_ref(), None)?;
            let total_gib = memory.total >> 30;
            Ok::<_, String>(MigDevice {
                name: entry
                    .name
                    .unwrap_or_else(|| format!("{gpu_name} MIG {total_gib}gb")),
                uuid: entry.uuid,
                memory,
                gpu_instance_id: entry.gpu_instance_id.unwrap_or(k as u32 + 1),
            })
        })()
        .map_err(|e| format!("[[gpu.mig_device]] {k}: {e}"))?;
        devices.push(device);
    }
    let sliced: u64 = devices.iter().map(|d| d.memory.total).sum();
    if sliced > gpu.total {
        return Err(format!(
            "MIG devices total {sliced} bytes, more than the GPU's {}",
            gpu.total
        ));
    }
    Ok(devices)
}

fn check_memory(
    total: &SizeField,
    reserved: Option<&SizeField>,
    extra_used: Option<&SizeField>,
) -> Result<Memory, String> {
    let total = size_of_field("total", total)?;
    let reserved = match reserved {
        Some(field) => size_of_field("reserved", field)?,
        None => default_reserved(total),
    };
    let extra_used = extra_used
        .map(|f| size_of_field("extra_used", f))
        .transpose()?
        .unwrap_or(0);
    if total == 0 {
        return Err("total must be more than 0".to_string());
    }
    if reserved > total {
        return Err(format!(
            "reserved ({reserved} bytes) is more than total ({total} bytes)"
        ));
    }
    Ok(Memory {
        total,
        reserved,
        extra_used,
    })
}

fn size_of_field(key: &str, field: &SizeField) -> Result<u64, String> {
    match field {
        SizeField::Bytes(bytes) => Ok(*bytes),
        SizeField::Text(text) => parse_bytes(text).map_err(|e| format!("{key}: {e}")),
    }
}

/// `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx` (or `MIG-...`), x a hex digit, as NVML prints them.
fn check_uuid(uuid: &str, prefix: &str) -> Result<(), String> {
    let groups: Option<Vec<&str>> = uuid.strip_prefix(prefix).map(|rest| rest.split('-').collect());
    let well_formed = groups.is_some_and(|groups| {
        groups.iter().map(|g| g.len()).eq([8, 4, 4, 4, 12])
            && groups.iter().all(|g| g.bytes().all(|b| b.is_ascii_hexdigit()))
    });
    if well_formed {
        Ok(())
    } else {
        Err(format!(
            "uuid '{uuid}' is not of the form {prefix}xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"
        ))
    }
}

pub fn parse_faults(text: &str) -> Result<Faults, String> {
    let file: FaultsFile = toml::from_str(text).map_err(|e| e.to_string())?;
    let init = file
        .init
        .as_deref()
        .map(|name| named_error("init", name))
        .transpose()?;
    let transient = file.transient.map(check_transient).transpose()?;
    if file.procs_grow_between_calls > MAX_GROWTH {
        return Err(format!(
            "procs_grow_between_calls = {} is more than {MAX_GROWTH}",
            file.procs_grow_between_calls
        ));
    }
    let memory_info_v1_only = match file.memory_info_version.as_deref() {
        None | Some("v2") => false,
        Some("v1-only") => true,
        Some(other) => {
            return Err(format!(
                "memory_info_version = '{other}', expected 'v2' or 'v1-only'"
            ))
        }
    };
    let memory_limits_absent = match file.memory_limits.as_deref() {
        None | Some("present") => false,
        Some("absent") => true,
        Some(other) => {
            return Err(format!(
                "memory_limits = '{other}', expected 'present' or 'absent'"
            ))
        }
    };
    let claims_past_capacity_granted = match file.claims_past_capacity.as_deref() {
        None | Some("refused") => false,
        Some("granted") => true,
        Some(other) => {
            return Err(format!(
                "claims_past_capacity = '{other}', expected 'refused' or 'granted'"
            ))
        }
    };
    Ok(Faults {
        init,
        transient,
        procs_grow_between_calls: file.procs_grow_between_calls,
        memory_info_v1_only,
        memory_limits_absent,
        claims_past_capacity_granted,
    })
}

fn check_transient(entry: TransientEntry) -> Result<Transient, String> {
    if !FAULTABLE_FUNCTIONS.contains(&entry.function.as_str()) {
        return Err(format!(
            "transient.function '{}' is not one of: {}",
            entry.function,
            FAULTABLE_FUNCTIONS.join(", ")
        ));
    }
    Ok(Transient {
        error: named_error("transient.error", &entry.error)?,
        function: entry.function,
        times: entry.times,
    })
}

fn named_error(key: &str, name: &str) -> Result<Return, String> {
    error_by_name(name).ok_or_else(|| {
        format!("{key} = '{name}' is not an NVML error name (e.g. DRIVER_NOT_LOADED, UNKNOWN)")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const A100: &str = r#"
        driver_version = "535.104.05"
        [[gpu]]
        uuid = "GPU-12345678-1234-1234-1234-123456789abc"
        name = "NVIDIA A100-SXM4-80GB"
        total = "80G"
        reserved = "512M"
        extra_used = 1048576
        [[gpu]]
        uuid = "GPU-22345678-1234-1234-1234-123456789abc"
        name = "NVIDIA A100-SXM4-80GB"
        total = 85899345920
        mig = true
        lost = true
        minor = 7
        [[gpu.mig_device]]
        uuid = "MIG-32345678-1234-1234-1234-123456789abc"
        total = "10G"
        [[gpu.mig_device]]
        uuid = "MIG-42345678-1234-1234-1234-123456789abc"
        name = "NVIDIA A100-SXM4-80GB MIG 3g.40gb"
        total = "40G"
        reserved = 0
        gpu_instance_id = 2
    "#;

    #[test]
    fn a_full_devices_file() {
        let devices = parse_devices(A100).unwrap();
        assert_eq!(devices.driver_version, "535.104.05");
        assert_eq!(devices.nvml_version(), "12.535.104.05");
        let [first, second] = devices.gpus.as_slice() else {
            panic!("two GPUs")
        };
        assert_eq!(
            first.memory,
            Memory {
                total: 80 << 30,
                reserved: 512 << 20,
                extra_used: 1 << 20
            }
        );
        assert_eq!(
            (first.mig.clone(), first.lost, first.minor),
            (Mig::Disabled, false, 0)
        );
        assert_eq!(second.memory.reserved, default_reserved(80 << 30));
        assert_eq!((second.lost, second.minor), (true, 7));
        let Mig::Enabled(migs) = &second.mig else {
            panic!("MIG on")
        };
        assert_eq!(migs[0].name, "NVIDIA A100-SXM4-80GB MIG 10gb");
        assert_eq!((migs[0].gpu_instance_id, migs[1].gpu_instance_id), (1, 2));
        assert_eq!(
            migs[1].memory,
            Memory {
                total: 40 << 30,
                reserved: 0,
                extra_used: 0
            }
        );
    }

    #[test]
    fn defaults() {
        let devices = parse_devices("").unwrap();
        assert_eq!(
            (devices.driver_version.as_str(), devices.gpus.len()),
            (DEFAULT_DRIVER_VERSION, 0)
        );
        assert_eq!(devices.nvml_version(), "13.580.95.05");
        // 0.5% of 80 GiB is 409.6 MiB: rounded down to 409 MiB.
        assert_eq!(default_reserved(80 << 30), 409 << 20);
        assert_eq!(default_reserved(100 << 20), 0);
    }

    #[test]
    fn bad_devices_files_name_the_problem() {
        let gpu = |extra: &str| {
            format!(
                "[[gpu]]\nuuid = \"GPU-12345678-1234-1234-1234-123456789abc\"\nname = \"x\"\ntotal = \"80G\"\n{extra}"
            )
        };
        let cases = [
            (gpu("reserved = \"81G\""), "reserved"),
            (gpu("total2 = 1"), "total2"),
            (gpu("mig_capable = false\nmig = true"), "mig_capable"),
            (gpu("[[gpu.mig_device]]\nuuid = \"MIG-12345678-1234-1234-1234-123456789abd\"\ntotal = \"1G\""), "mig = true"),
            (gpu("mig = true\n[[gpu.mig_device]]\nuuid = \"GPU-1\"\ntotal = \"1G\""), "'GPU-1'"),
            (gpu("mig = true\n[[gpu.mig_device]]\nuuid = \"MIG-12345678-1234-1234-1234-123456789abd\"\ntotal = \"81G\""), "more than the GPU"),
            (gpu("extra_used = \"lots\""), "'lots'"),
            (gpu("") + &gpu(""), "appears twice"),
            ("[[gpu]]\nuuid = \"GPU-1234\"\nname = \"x\"\ntotal = \"80G\"".to_string(), "'GPU-1234'"),
            ("[[gpu]]\nuuid = \"GPU-12345678-1234-1234-1234-123456789abX\"\nname = \"x\"\ntotal = 1".to_string(), "form GPU-"),
            ("[[gpu]]\nname = \"x\"\ntotal = 1".to_string(), "uuid"),
            ("[[gpu]\n".to_string(), "TOML parse error"),
        ];
        for (text, needle) in cases {
            let err = parse_devices(&text).unwrap_err();
            assert!(err.contains(needle), "{text:?}: {err}");
        }
    }

    #[test]
    fn faults_files() {
        let faults = parse_faults(
            r#"
            init = "NO_PERMISSION"
            procs_grow_between_calls = 8
            memory_info_version = "v1-only"
            transient = { function = "nvmlDeviceGetComputeRunningProcesses_v3", error = "NVML_ERROR_UNKNOWN", times = 3 }
            "#,
        )
        .unwrap();
        assert_eq!(
            faults,
            Faults {
                init: Some(4),
                transient: Some(Transient {
                    function: "nvmlDeviceGetComputeRunningProcesses_v3".to_string(),
                    error: 999,
                    times: 3
                }),
                procs_grow_between_calls: 8,
                memory_info_v1_only: true,
                memory_limits_absent: false,
                claims_past_capacity_granted: false,
            }
        );
        assert!(
            parse_faults("claims_past_capacity = \"granted\"")
                .unwrap()
                .claims_past_capacity_granted
        );
        assert!(
            !parse_faults("claims_past_capacity = \"refused\"")
                .unwrap()
                .claims_past_capacity_granted
        );
        assert!(
            parse_faults("memory_limits = \"absent\"")
                .unwrap()
                .memory_limits_absent
        );
        assert!(parse_faults("memory_limits = \"gone\"")
            .unwrap_err()
            .contains("'present' or 'absent'"));
        assert_eq!(parse_faults("").unwrap(), Faults::default());
        let once = parse_faults("[transient]\nfunction = \"nvmlInit_v2\"\nerror = \"GPU_IS_LOST\"").unwrap();
        assert_eq!(once.transient.unwrap().times, 1);
    }

    #[test]
    fn bad_faults_files_name_the_problem() {
        let cases = [
            ("init = \"NOPE\"", "'NOPE'"),
            ("init = \"SUCCESS\"", "'SUCCESS'"),
            ("memory_info_version = \"v3\"", "'v3'"),
            ("claims_past_capacity = \"yes\"", "'refused' or 'granted'"),
            ("procs_grow_between_calls = 1000000", "1000000"),
            (
                "transient = { function = \"nvmlFoo\", error = \"UNKNOWN\" }",
                "'nvmlFoo'",
            ),
            (
                "transient = { function = \"nvmlShutdown\", error = \"UNKNOWN\" }",
                "'nvmlShutdown'",
            ),
            (
                "transient = { function = \"nvmlInit_v2\", error = \"BAD\" }",
                "'BAD'",
            ),
            ("initt = \"UNKNOWN\"", "initt"),
        ];
        for (text, needle) in cases {
            let err = parse_faults(text).unwrap_err();
            assert!(err.contains(needle), "{text:?}: {err}");
        }
    }
}
