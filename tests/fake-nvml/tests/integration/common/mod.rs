//! A scenario directory per test, and the path of the fake library under test.
//!
//! The fake reads `FAKE_NVML_DIR` / `FAKE_NVML_PROC` from the environment, which is per process,
//! and its init count is per loaded library: tests in one binary therefore run one at a time
//! (each holds [`Scenario`], which holds a global lock).

#![allow(dead_code)] // each test binary uses a different part

use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};

use nvml_wrapper::Nvml;

pub const GIB: u64 = 1 << 30;
pub const MIB: u64 = 1 << 20;

pub const UUID0: &str = "GPU-00000000-1111-2222-3333-444444444444";
pub const UUID1: &str = "GPU-11111111-1111-2222-3333-444444444444";
pub const MIG_UUID0: &str = "MIG-aaaaaaaa-1111-2222-3333-444444444444";
pub const MIG_UUID1: &str = "MIG-bbbbbbbb-1111-2222-3333-444444444444";

/// Two 80 GiB GPUs; GPU 0 with an explicit reserve, GPU 1 with the default one.
pub const TWO_GPUS: &str = r#"
driver_version = "580.95.05"

[[gpu]]
uuid = "GPU-00000000-1111-2222-3333-444444444444"
name = "NVIDIA H100 80GB HBM3"
total = "80G"
reserved = "512M"

[[gpu]]
uuid = "GPU-11111111-1111-2222-3333-444444444444"
name = "NVIDIA H100 80GB HBM3"
total = 85899345920
"#;

static SERIAL: Mutex<()> = Mutex::new(());

/// The library cargo built next to this test binary (`target/<profile>/deps/`), or `$FAKE_NVML_LIB`.
pub fn lib_path() -> PathBuf {
    if let Some(path) = std::env::var_os("FAKE_NVML_LIB") {
        return PathBuf::from(path);
    }
    let exe = std::env::current_exe().expect("test binary path");
    let deps = exe.parent().expect("test binary directory");
    [deps.join("libnvidia_ml.so"), deps.join("../libnvidia_ml.so")]
        .into_iter()
        .find(|path| path.is_file())
        .unwrap_or_else(|| {
            panic!(
                "libnvidia_ml.so not found beside {}; set FAKE_NVML_LIB",
                exe.display()
            )
        })
}

/// A fresh scenario directory, made current through the environment; removed on drop (even when
/// the test fails), before the next test may take the lock.
pub struct Scenario {
    pub dir: PathBuf,
    pub proc_root: PathBuf,
    // Fields drop in this order: the directory goes, then the lock.
    _scratch: tempfile::TempDir,
    _serial: MutexGuard<'static, ()>,
}

impl Scenario {
    /// With this devices.toml (`None`: none, as on a machine without a driver).
    pub fn new(devices: Option<&str>) -> Scenario {
        let serial = SERIAL.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let scratch = tempfile::Builder::new()
            .prefix("fake-nvml-test-")
            .tempdir()
            .unwrap();
        let dir = scratch.path().to_path_buf();
        let proc_root = dir.join("proc");
        std::fs::create_dir_all(&proc_root).unwrap();
        std::env::set_var("FAKE_NVML_DIR", &dir);
        std::env::set_var("FAKE_NVML_PROC", &proc_root);
        let scenario = Scenario {
            dir,
            proc_root,
            _scratch: scratch,
            _serial: serial,
        };
        if let Some(text) = devices {
            scenario.devices(text);
        }
        scenario
    }

    pub fn devices(&self, text: &str) {
        std::fs::write(self.dir.join("devices.toml"), text).unwrap();
    }

    pub fn faults(&self, text: &str) {
        std::fs::write(self.dir.join("faults.toml"), text).unwrap();
    }

    pub fn gpu_dir(&self, gpu: usize) -> PathBuf {
        let dir = self.dir.join("procs").join(gpu.to_string());
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// Process `pid` (alive from now on) writes `text` as its claim on `gpu`.
    pub fn claim(&self, gpu: usize, pid: u32, text: &str) -> PathBuf {
        self.alive(pid);
        let path = self.gpu_dir(gpu).join(pid.to_string());
        std::fs::write(&path, text).unwrap();
        path
    }

    pub fn alive(&self, pid: u32) {
        std::fs::create_dir_all(self.proc_root.join(pid.to_string())).unwrap();
    }

    pub fn dies(&self, pid: u32) {
        std::fs::remove_dir(self.proc_root.join(pid.to_string())).unwrap();
    }

    /// Use the real /proc instead of the scenario's own.
    pub fn use_real_proc(&self) {
        std::env::set_var("FAKE_NVML_PROC", "/proc");
    }

    pub fn nvml(&self) -> Nvml {
        self.try_nvml().expect("nvml init")
    }

    pub fn try_nvml(&self) -> Result<Nvml, nvml_wrapper::error::NvmlError> {
        let path = lib_path();
        Nvml::builder().lib_path(path.as_os_str()).init()
    }

    pub fn path(&self, relative: &str) -> PathBuf {
        self.dir.join(relative)
    }
}
