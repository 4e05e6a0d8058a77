//! The watchdog's NVML path against a real driver and a real CUDA process: what the fake NVML
//! stands in for everywhere else. Needs an NVIDIA GPU and its driver (libnvidia-ml.so.1 and
//! libcuda.so.1), no Slurm and no CUDA toolkit; every test is ignored elsewhere. Run by
//! `slurm/gpu-check` (see BENCHMARKS.md, "On a GPU node").
//!
//! The CUDA process is this test binary run again as `cuda_holder` with `GMQ_CUDA_HOLD_BYTES`
//! set: it calls the driver API directly (cuInit, cuCtxCreate, cuMemAlloc, cuMemGetInfo, through
//! dlopen), says `holding` and keeps the memory until its stdin closes.
//!
//! `GMQ_NVML_LIB` names another NVML library: the fake one (with `FAKE_NVML_DIR`) runs the tests
//! that need no CUDA process as far as they go without one (BENCHMARKS.md, "On a GPU node").

use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use gmq_commands::watchdog::gpu::{DeviceHandle, NvmlSource};
use gmq_commands::watchdog::hard_limit::Setter;
use gmq_core::config::Enforcement;
use gmq_core::record;
use gmq_core::size::ByteSize;
use gmq_core::watchdog::gpu::{GpuSample, GpuSource};
use gmq_core::watchdog::hard_limit::{self, Answer, Outcome};
use gmq_core::watchdog::{Attributor, Watchdog};

use crate::common::watchdog_fakes::{FakeSlurm, Lines};

const GIB: u64 = 1 << 30;
const HOLD_VAR: &str = "GMQ_CUDA_HOLD_BYTES";

/// The real NVML: `GMQ_NVML_LIB`, else the driver's soname, found by the dynamic loader.
fn nvml_library() -> PathBuf {
    std::env::var_os("GMQ_NVML_LIB").map_or_else(|| PathBuf::from("libnvidia-ml.so.1"), PathBuf::from)
}

/// A CUDA process holding `bytes` on the GPU of CUDA ordinal 0 (PCI bus order, as NVML's).
struct Holder {
    child: Child,
    stdin: Option<ChildStdin>,
    /// The GPU's total memory as `cuMemGetInfo` reports it inside the process.
    total: u64,
}

impl Holder {
    fn start(bytes: u64) -> Holder {
        Holder::spawn(bytes, None).unwrap_or_else(|e| panic!("the CUDA holder failed: {e}"))
    }

    /// The holder, in the cgroup whose `cgroup.procs` is given before it runs any CUDA call
    /// (so its context and allocation are that cgroup's). `Err`: the CUDA error it reported.
    fn spawn(bytes: u64, cgroup_procs: Option<&File>) -> Result<Holder, String> {
        let mut command = Command::new(std::env::current_exe().unwrap());
        command
            .args([
                "--exact",
                "real_gpu::cuda_holder",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(HOLD_VAR, bytes.to_string())
            .env("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        if let Some(procs) = cgroup_procs {
            let fd = procs.as_raw_fd();
            // SAFETY: between fork and exec only write(2), which is async-signal-safe; "0" moves
            // the writing process itself. The fd is the parent's, open for the child's life.
            unsafe {
                command.pre_exec(move || {
                    if libc::write(fd, b"0".as_ptr().cast(), 1) == 1 {
                        Ok(())
                    } else {
                        Err(std::io::Error::last_os_error())
                    }
                });
            }
        }
        let mut child = command.spawn().expect("cannot run the CUDA holder");
        let stdin = child.stdin.take();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let total = loop {
            // libtest writes the test's name before its output on the same line.
            let said = |line: &str| line.trim_start_matches("test cuda_holder ... ").to_string();
            match lines.next().map(|line| line.map(|l| said(&l))) {
                Some(Ok(line)) if line.starts_with("holding") => {
                    let total = line.rsplit(' ').next().and_then(|t| t.parse().ok());
                    break total.unwrap_or_else(|| panic!("the CUDA holder said {line:?}"));
                }
                Some(Ok(line)) if line.starts_with("cuda error") => {
                    let _ = child.wait();
                    return Err(line);
                }
                Some(Ok(_)) => continue,
                _ => panic!(
                    "the CUDA holder ended before it held its memory: {:?}",
                    child.wait()
                ),
            }
        };
        // Keep its stdout drained so it never blocks on a full pipe.
        std::thread::spawn(move || lines.for_each(drop));
        Ok(Holder { child, stdin, total })
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        drop(self.stdin.take()); // EOF: the holder frees its memory and exits
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The helper process (only with `GMQ_CUDA_HOLD_BYTES` set; a no-op in a plain test run).
#[test]
#[ignore = "needs an NVIDIA GPU: slurm/gpu-check"]
fn cuda_holder() {
    let Ok(bytes) = std::env::var(HOLD_VAR) else {
        return;
    };
    let bytes: usize = bytes.parse().expect("GMQ_CUDA_HOLD_BYTES is a byte count");
    let out = &mut std::io::stdout();
    match cuda::hold(bytes) {
        Ok(held) => {
            writeln!(out, "holding {bytes} bytes, GPU total {}", held.total).unwrap();
            out.flush().unwrap();
            let _ = std::io::stdin().read_to_end(&mut Vec::new());
            // The process exits and the driver frees the context with it.
        }
        Err(e) => {
            writeln!(out, "cuda error: {e}").unwrap();
            out.flush().unwrap();
        }
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU: slurm/gpu-check"]
fn nvml_sees_every_gpu_and_a_cuda_process_with_its_memory() {
    let mut source = NvmlSource::open(&nvml_library(), &[]).unwrap_or_else(|e| panic!("NVML: {e}"));
    let inventory = source.inventory();
    assert!(!inventory.is_empty(), "NVML lists no GPU");
    for (index, uuid, total) in &inventory {
        println!("gpu-check: GPU {index} {uuid} {}", ByteSize::from_bytes(*total));
        assert!(uuid.starts_with("GPU-") || uuid.starts_with("MIG-"), "{uuid}");
    }
    let before = gpu0(&source.sample().unwrap()).used;

    let holder = Holder::start(2 * GIB);
    let sample = source.sample().unwrap_or_else(|e| panic!("sample: {e}"));
    let gpu = gpu0(&sample);
    let listed: Vec<_> = gpu.processes.iter().map(|p| (p.pid, p.used)).collect();
    println!(
        "gpu-check: GPU {} used {} -> {}, processes {listed:?}",
        gpu.index, before, gpu.used
    );
    let ours = gpu
        .processes
        .iter()
        .find(|p| p.pid == holder.pid())
        .unwrap_or_else(|| {
            panic!(
                "NVML does not list the CUDA process {} (listed: {listed:?}); a container without the \
             host's pid namespace would show host pids",
                holder.pid()
            )
        });
    let used = ours.used.expect("NVML says Unavailable for a bare-metal process");
    // The allocation plus the context (a few hundred MiB on recent GPUs).
    assert!(used >= 2 * GIB, "the process holds {used} bytes");
    assert!(
        gpu.used >= before + 2 * GIB,
        "the device's used memory did not grow by 2 GiB"
    );
    println!(
        "gpu-check: the CUDA process holds {} for a 2G allocation",
        ByteSize::from_bytes(used)
    );

    drop(holder);
    let gone = wait_for(|| {
        let sample = source.sample().unwrap();
        !gpu0(&sample)
            .processes
            .iter()
            .any(|p| p.used.is_some_and(|u| u >= 2 * GIB))
    });
    assert!(gone, "the CUDA process's memory was not freed");
}

#[test]
#[ignore = "needs an NVIDIA GPU: slurm/gpu-check"]
fn the_watchdog_requeues_a_real_cuda_process_over_its_quota() {
    let mut source = NvmlSource::open(&nvml_library(), &["0".to_string()]).unwrap();
    let settings = Enforcement {
        interval: Duration::from_millis(100),
        grace: Duration::from_millis(300),
        ..Enforcement::default()
    };
    let mut watchdog = Watchdog::new(7, "gpu-check", Some(ByteSize::from_bytes(GIB)), settings);
    watchdog.set_run(0);
    let holder = Holder::start(2 * GIB);
    let mut slurm = FakeSlurm {
        requeueable: true,
        ..FakeSlurm::default()
    };
    let mut lines = Lines::default();
    let mut attributor = OnlyPid(holder.pid());
    let started = Instant::now();
    while !watchdog.has_acted() && started.elapsed() < Duration::from_secs(10) {
        watchdog.tick(
            Instant::now(),
            &mut source,
            &mut attributor,
            &mut slurm,
            &mut lines,
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    println!("gpu-check: watchdog lines {:?}", lines.lines);
    assert_eq!(slurm.calls, ["comment", "requeue"], "{:?}", lines.lines);
    let record = record::parse(&slurm.admin_comment).unwrap().unwrap();
    assert!(record.totals().peak >= 2 * GIB, "{}", slurm.admin_comment);
    println!(
        "gpu-check: requeue chosen {:?} after the first sample over the quota (grace 300 ms)",
        started.elapsed()
    );
}

#[test]
#[ignore = "needs an NVIDIA GPU: slurm/gpu-check"]
fn prints_what_one_real_sample_costs() {
    let mut source = NvmlSource::open(&nvml_library(), &[]).unwrap();
    let _holder = Holder::start(GIB);
    let mut times: Vec<Duration> = (0..200)
        .map(|_| {
            let t = Instant::now();
            source.sample().unwrap();
            t.elapsed()
        })
        .collect();
    times.sort();
    println!(
        "gpu-check: NvmlSource::sample on {} GPU(s) with a CUDA process: median {:?}, p95 {:?}, max {:?} (200 samples)",
        source.inventory().len(),
        times[100],
        times[190],
        times[199]
    );
}

/// Hard limits (MPS v3 memory partitioning), looked up in the driver's NVML as the watchdog does
/// (`watchdog::hard_limit`). Where the driver lacks them one line says so and the test passes (the
/// watchdog alone enforces there). Where it has them: a real CUDA process in a cgroup with a 2G hard
/// limit cannot allocate 3G, can allocate 1G and sees the capped size; a process outside the cgroup
/// is not held to it; once the limit is cleared the 3G allocation is granted in the cgroup too.
#[test]
#[ignore = "needs an NVIDIA GPU: slurm/gpu-check"]
fn a_hard_limit_caps_a_real_cuda_process_in_its_cgroup_where_the_driver_offers_it() {
    let library = nvml_library();
    let setter = match Setter::find(&library) {
        Ok(setter) => setter,
        Err(why) => return println!("gpu-check: {}", Outcome::NotOffered(why).log_line()),
    };
    let source = NvmlSource::open(&library, &["0".to_string()]).unwrap_or_else(|e| panic!("NVML: {e}"));
    let [(gpu, device)] = source.listed_handles()[..] else {
        panic!("NVML has no GPU 0");
    };
    let cgroup = ScratchCgroup::create(Path::new("/sys/fs/cgroup"));
    let limit = 2 * GIB;
    let mut limit_set = LimitSet {
        setter: &setter,
        device,
        namespace: &cgroup.dir,
        cleared: false,
    };
    let code = setter.set(device, &cgroup.dir, limit, limit);
    match hard_limit::outcome(&cgroup.dir, limit, &[Answer { gpu, code }]) {
        Outcome::InForce(_) => {}
        not_offered @ Outcome::NotOffered(_) => return println!("gpu-check: {}", not_offered.log_line()),
        other => panic!(
            "the driver has {}: {}",
            hard_limit::SET_MEMORY_LIMITS,
            other.log_line()
        ),
    }
    let procs = File::options()
        .write(true)
        .open(cgroup.dir.join("cgroup.procs"))
        .unwrap_or_else(|e| panic!("{}: {e}", cgroup.dir.display()));

    match Holder::spawn(3 * GIB, Some(&procs)) {
        Err(e) => assert!(
            e.contains("cuMemAlloc returned CUresult 2"),
            "3G under a 2G hard limit should be CUDA_ERROR_OUT_OF_MEMORY: {e}"
        ),
        Ok(h) => panic!(
            "3G under a 2G hard limit was granted (cuMemGetInfo total {})",
            h.total
        ),
    }
    let below = Holder::spawn(GIB, Some(&procs))
        .unwrap_or_else(|e| panic!("1G under a 2G hard limit was refused: {e}"));
    assert!(
        below.total <= limit,
        "under a 2G hard limit cuMemGetInfo reports a total of {} bytes",
        below.total
    );
    let outside = Holder::spawn(3 * GIB, None)
        .unwrap_or_else(|e| panic!("3G outside the limited cgroup was refused: {e}"));
    drop((outside, below));
    assert_eq!(limit_set.clear(), 0, "clearing the hard limit");
    let cleared = Holder::spawn(3 * GIB, Some(&procs))
        .unwrap_or_else(|e| panic!("3G after the hard limit was cleared was refused: {e}"));
    drop(cleared);
    println!(
        "gpu-check: hard limit 2G on {} (GPU {gpu}): 3G refused with CUDA_ERROR_OUT_OF_MEMORY, 1G \
         granted (cuMemGetInfo total {}), 3G outside the cgroup granted; cleared, 3G granted",
        cgroup.dir.display(),
        ByteSize::from_bytes(limit),
    );
}

/// A cgroup of this test's own in the v2 hierarchy, removed when dropped (after its processes).
struct ScratchCgroup {
    dir: PathBuf,
}

impl ScratchCgroup {
    fn create(cgroup_root: &Path) -> ScratchCgroup {
        let v2 = gmq_node::attribute::v2_mount(cgroup_root).unwrap_or_else(|| {
            panic!(
                "the driver has {} but {} holds no cgroup v2 hierarchy (hard limits need one): not proven",
                hard_limit::SET_MEMORY_LIMITS,
                cgroup_root.display()
            )
        });
        let dir = v2.join(format!("gmq-gpu-check-{}", std::process::id()));
        std::fs::create_dir(&dir).unwrap_or_else(|e| {
            panic!(
                "cannot make the cgroup {} to prove the hard limit with (root, a writable cgroup v2): {e}",
                dir.display()
            )
        });
        ScratchCgroup { dir }
    }
}

impl Drop for ScratchCgroup {
    fn drop(&mut self) {
        // A process that exited leaves its cgroup a moment later.
        let removed = wait_for(|| std::fs::remove_dir(&self.dir).is_ok());
        if !removed {
            eprintln!("gpu-check: cannot remove {}", self.dir.display());
        }
    }
}

/// The hard limit set on one GPU for one cgroup, cleared when dropped if not before.
struct LimitSet<'a> {
    setter: &'a Setter,
    device: DeviceHandle<'a>,
    namespace: &'a Path,
    cleared: bool,
}

impl LimitSet<'_> {
    /// Soft 0 and hard `NVML_DEVICE_MEMORY_LIMIT_MAX`, as the watchdog clears it: the NVML code.
    fn clear(&mut self) -> c_int {
        self.cleared = true;
        self.setter
            .set(self.device, self.namespace, 0, hard_limit::LIMIT_MAX)
    }
}

impl Drop for LimitSet<'_> {
    fn drop(&mut self) {
        if !self.cleared {
            self.clear();
        }
    }
}

fn gpu0(sample: &[GpuSample]) -> &GpuSample {
    sample
        .iter()
        .min_by_key(|g| g.index)
        .expect("no GPU in the sample")
}

fn wait_for(mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if check() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    check()
}

struct OnlyPid(u32);

impl Attributor for OnlyPid {
    fn is_ours(&mut self, pid: u32, _on_job_gpu: bool) -> Option<bool> {
        Some(pid == self.0)
    }
}

/// The CUDA driver API, just enough to hold memory: loaded with dlopen so that the test builds
/// and links on machines without a driver.
mod cuda {
    use super::*;

    type CuResult = c_int;

    /// A context with `bytes` allocated, kept for the life of the process.
    pub(crate) struct Held {
        /// `cuMemGetInfo`'s total: the GPU's size, or the hard limit where one caps the process.
        pub total: u64,
    }

    pub(crate) fn hold(bytes: usize) -> Result<Held, String> {
        // SAFETY: dlopen/dlsym with NUL-terminated names; each symbol is called with the
        // signature the CUDA driver API documents for it, on this thread only.
        unsafe {
            let lib = libc::dlopen(c"libcuda.so.1".as_ptr(), libc::RTLD_NOW);
            if lib.is_null() {
                return Err(format!("cannot load libcuda.so.1: {}", dl_error()));
            }
            let init: extern "C" fn(c_uint) -> CuResult = symbol(lib, c"cuInit")?;
            let device_get: extern "C" fn(*mut c_int, c_int) -> CuResult = symbol(lib, c"cuDeviceGet")?;
            let ctx_create: extern "C" fn(*mut *mut c_void, c_uint, c_int) -> CuResult =
                symbol(lib, c"cuCtxCreate_v2")?;
            let mem_alloc: extern "C" fn(*mut u64, usize) -> CuResult = symbol(lib, c"cuMemAlloc_v2")?;
            let mem_get_info: extern "C" fn(*mut usize, *mut usize) -> CuResult =
                symbol(lib, c"cuMemGetInfo_v2")?;
            check("cuInit", init(0))?;
            let mut device = 0;
            check("cuDeviceGet", device_get(&mut device, 0))?;
            let mut context = std::ptr::null_mut();
            check("cuCtxCreate", ctx_create(&mut context, 0, device))?;
            let mut pointer = 0u64;
            check("cuMemAlloc", mem_alloc(&mut pointer, bytes))?;
            let (mut free, mut total) = (0usize, 0usize);
            check("cuMemGetInfo", mem_get_info(&mut free, &mut total))?;
            Ok(Held { total: total as u64 })
        }
    }

    /// # Safety
    /// `lib` is a live dlopen handle and `T` the C function pointer type of `name`.
    unsafe fn symbol<T: Copy>(lib: *mut c_void, name: &CStr) -> Result<T, String> {
        // SAFETY: as the caller promised; `name` is NUL-terminated.
        let found = unsafe { libc::dlsym(lib, name.as_ptr()) };
        if found.is_null() {
            return Err(format!("libcuda.so.1 has no {name:?}"));
        }
        // SAFETY: a non-null symbol of type `T` (the caller's contract), a pointer-sized copy.
        Ok(unsafe { std::mem::transmute_copy(&found) })
    }

    fn check(call: &str, result: CuResult) -> Result<(), String> {
        match result {
            0 => Ok(()),
            code => Err(format!("{call} returned CUresult {code}")),
        }
    }

    fn dl_error() -> String {
        // SAFETY: dlerror takes no arguments; its string lives until the next dl call, here.
        let text: *const c_char = unsafe { libc::dlerror() };
        if text.is_null() {
            return "unknown error".into();
        }
        // SAFETY: a non-null dlerror result is a NUL-terminated string, copied at once.
        unsafe { CStr::from_ptr(text) }.to_string_lossy().into_owned()
    }
}
