//! What one watchdog sample costs, against the fake NVML (tests/fake-nvml) and the real /proc.
//!
//! For 1 and 8 GPUs with 1, 16 and 64 live processes on each (real `sleep` children with claim
//! files), it times:
//! - the fake alone: `NvmlSource::sample` (memory and both process lists of every GPU, through
//!   nvml-wrapper). The fake re-reads its claim files on every call, so this is mostly the fake's
//!   own file I/O; a real driver answers from an ioctl instead.
//! - one full interval: `Watchdog::tick` = that sample + attribution (`ProcAttributor::is_ours`
//!   for every pid, /proc) + the decision, with a no-op Controller and Reporter.
//!
//! The difference between the two is the watchdog's own share. Run it (see BENCHMARKS.md):
//!
//! ```sh
//! cargo build --release -p fake-nvml && cargo bench --bench watchdog_sample
//! ```
//!
//! `GMQ_BENCH_SAMPLES` (default 200) sets the samples per shape; `FAKE_NVML_LIB` names the library
//! if it is not at target/release/libnvidia_ml.so.

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use gmq_commands::watchdog::gpu::NvmlSource;
use gmq_core::config::Enforcement;
use gmq_core::size::ByteSize;
use gmq_core::watchdog::gpu::GpuSource;
use gmq_core::watchdog::status::Status;
use gmq_core::watchdog::{Attributor, Reporter, Watchdog};
use gmq_node::attribute::ProcAttributor;

// Slurm is never asked here: the sampled processes stay under the quota.
#[path = "../../core/tests/integration/common/watchdog_fakes.rs"]
mod watchdog_fakes;
use watchdog_fakes::FakeSlurm;

const SHAPES: [(u32, u32); 6] = [(1, 1), (1, 16), (1, 64), (8, 1), (8, 16), (8, 64)];
const WARMUP: usize = 10;
const JOB_ID: u32 = 4242;

struct Silent;

impl Reporter for Silent {
    fn info(&mut self, _: &str) {}
    fn warning(&mut self, _: &str) {}
    fn error(&mut self, _: &str) {}
    fn status(&mut self, _: &Status) {}
}

/// A scenario directory with `gpus` GPUs and `procs` sleeping processes claiming memory on each;
/// the processes are killed and then the directory removed on drop.
struct Scenario {
    dir: tempfile::TempDir,
    children: Vec<Child>,
}

impl Scenario {
    fn new(gpus: u32, procs: u32) -> Result<Scenario, String> {
        let dir = tempfile::Builder::new()
            .prefix(&format!("gmq-bench-{gpus}x{procs}-"))
            .tempdir()
            .map_err(|e| format!("cannot create a temporary directory: {e}"))?;
        let mut scenario = Scenario {
            dir,
            children: Vec::new(),
        };
        let devices: String = (0..gpus)
            .map(|i| {
                format!(
                    "[[gpu]]\nuuid = \"GPU-{i:08x}-1111-2222-3333-444444444444\"\n\
                     name = \"NVIDIA H100 80GB HBM3\"\ntotal = \"80G\"\n"
                )
            })
            .collect();
        let io = |what: &str, path: &Path, e: std::io::Error| format!("{what} {}: {e}", path.display());
        for gpu in 0..gpus {
            let procs_dir = scenario.dir.path().join(format!("procs/{gpu}"));
            fs::create_dir_all(&procs_dir).map_err(|e| io("cannot create", &procs_dir, e))?;
        }
        let devices_file = scenario.dir.path().join("devices.toml");
        fs::write(&devices_file, devices).map_err(|e| io("cannot write", &devices_file, e))?;
        for gpu in 0..gpus {
            for n in 0..procs {
                let child = Command::new("sleep")
                    .arg("3600")
                    .stdin(Stdio::null())
                    .spawn()
                    .map_err(|e| format!("cannot start sleep: {e}"))?;
                let claim = scenario.dir.path().join(format!("procs/{gpu}/{}", child.id()));
                scenario.children.push(child);
                fs::write(&claim, format!("{}M\n", 100 + n)).map_err(|e| io("cannot write", &claim, e))?;
            }
        }
        Ok(scenario)
    }
}

impl Drop for Scenario {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
        // Then `dir` goes, removed by its own drop.
    }
}

/// Median and 95th percentile.
fn spread(mut times: Vec<Duration>) -> (Duration, Duration) {
    times.sort();
    let n = times.len();
    (times[n / 2], times[(n * 95 / 100).min(n - 1)])
}

fn time_n(n: usize, mut f: impl FnMut()) -> Vec<Duration> {
    (0..n)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed()
        })
        .collect()
}

/// CPU time (user + system) this process has used so far.
fn cpu_time() -> Duration {
    // SAFETY: getrusage fills the struct we own.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

fn status_kib(key: &str) -> Option<u64> {
    let status = fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(key))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn fake_library() -> Result<PathBuf, String> {
    if let Some(path) = std::env::var_os("FAKE_NVML_LIB") {
        return Ok(PathBuf::from(path));
    }
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this program: {e}"))?;
    let deps = exe.parent().unwrap_or(Path::new("."));
    [deps.join("../libnvidia_ml.so"), deps.join("libnvidia_ml.so")]
        .into_iter()
        .find(|path| path.is_file())
        .ok_or_else(|| {
            format!(
                "libnvidia_ml.so not found beside {}: run `cargo build --release -p fake-nvml` first \
                 (or set FAKE_NVML_LIB)",
                exe.display()
            )
        })
}

struct Figures {
    fake: (Duration, Duration),
    tick: (Duration, Duration),
    attribution: (Duration, Duration),
    first_tick: Duration,
    cpu_per_tick: Duration,
}

/// Which of the node's GPUs the measured job holds, and which its watchdog samples.
#[derive(Clone, Copy)]
enum Job {
    /// All of them (the shapes table).
    EveryGpu,
    /// GPU 0 alone, every GPU sampled (a node whose cgroup.conf does not constrain devices).
    OneGpuSamplingAll,
    /// GPU 0 alone, and only it sampled (`ConstrainDevices=yes`).
    OneGpuSamplingItsOwn,
}

fn measure(library: &Path, gpus: u32, procs: u32, job: Job, samples: usize) -> Result<Figures, String> {
    let scenario = Scenario::new(gpus, procs)?;
    std::env::set_var("FAKE_NVML_DIR", scenario.dir.path());
    let listed: Vec<String> = match job {
        Job::EveryGpu => (0..gpus).map(|i| i.to_string()).collect(),
        Job::OneGpuSamplingAll | Job::OneGpuSamplingItsOwn => vec!["0".to_string()],
    };
    let mut source = NvmlSource::open(library, &listed)?;
    let seen: Vec<usize> = source.sample()?.iter().map(|g| g.processes.len()).collect();
    if seen != vec![procs as usize; gpus as usize] {
        return Err(format!(
            "the fake lists {seen:?} processes per GPU, not {procs} on each"
        ));
    }
    if let Job::OneGpuSamplingItsOwn = job {
        source.sample_listed_only();
    }

    let mut fake_error = None;
    for _ in 0..WARMUP {
        let _ = source.sample();
    }
    let fake = time_n(samples, || {
        if let Err(e) = source.sample() {
            fake_error = Some(e);
        }
    });
    if let Some(e) = fake_error {
        return Err(format!("a sample failed: {e}"));
    }

    let settings = Enforcement {
        interval: Duration::from_millis(100),
        ..Enforcement::default()
    };
    let mut watchdog = Watchdog::new(JOB_ID, "bench", Some(ByteSize::from_bytes(40 << 30)), settings);
    watchdog.set_run(0);
    // The job's user: this process's (the bench's processes in no job count as the job's, like a
    // daemonized process of the job's user on linuxproc).
    let uid = std::fs::metadata("/proc/self").map(|m| m.uid()).unwrap_or(0);
    let mut attributor = ProcAttributor::new(
        JOB_ID,
        uid,
        PathBuf::from("/proc"),
        PathBuf::from("/sys/fs/cgroup"),
    );
    let mut slurm = FakeSlurm::default();
    let mut tick = || {
        watchdog.tick(
            Instant::now(),
            &mut source,
            &mut attributor,
            &mut slurm,
            &mut Silent,
        );
    };
    // The first tick asks /proc who owns every pid; later ones find them in the attributor's cache.
    let first_tick = time_n(1, &mut tick)[0];
    for _ in 0..WARMUP {
        tick();
    }
    let cpu_before = cpu_time();
    let ticks = time_n(samples, &mut tick);
    let cpu_per_tick = (cpu_time() - cpu_before) / samples as u32;
    // The watchdog's own /proc work alone, in the steady state (the attributor's cache warm: one
    // start-time read per pid and sample).
    let pids: Vec<u32> = source
        .sample()?
        .iter()
        .flat_map(|g| g.processes.iter().map(|p| p.pid))
        .collect();
    let attribution = time_n(samples, || {
        attributor.new_sample(false);
        for &pid in &pids {
            std::hint::black_box(attributor.is_ours(pid, true));
        }
    });
    drop(source);
    drop(scenario);
    Ok(Figures {
        fake: spread(fake),
        tick: spread(ticks),
        attribution: spread(attribution),
        first_tick,
        cpu_per_tick,
    })
}

fn us(d: Duration) -> String {
    format!("{:.0}", d.as_secs_f64() * 1e6)
}

/// Share of one core when `cost` is spent every `interval`, in percent.
fn core_percent(cost: Duration, interval: Duration) -> String {
    format!("{:.2}", cost.as_secs_f64() / interval.as_secs_f64() * 100.0)
}

fn main() -> ExitCode {
    let library = match fake_library() {
        Ok(path) => path,
        Err(e) => {
            eprintln!("watchdog_sample: {e}");
            return ExitCode::FAILURE;
        }
    };
    let samples = std::env::var("GMQ_BENCH_SAMPLES")
        .ok()
        .and_then(|s| s.parse().ok())
        .filter(|&n: &usize| n > 0)
        .unwrap_or(200);
    println!(
        "watchdog sample cost, fake NVML {}, {samples} samples per shape",
        library.display()
    );
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "{} CPU(s), load average {} (other work on the machine shows in the figures)",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        load.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
    );
    println!("times in µs (median/p95); fake = NvmlSource::sample alone; full = Watchdog::tick (sample +");
    println!(
        "attribution + decision); own = ProcAttributor::is_ours for every pid (cache warm); first = first"
    );
    println!("tick (cache cold); CPU = user+sys per tick; % of one core = cost / interval, for full and own");
    println!(
        "{:>4} {:>5} | {:>11} | {:>11} {:>6} {:>6} | {:>9} | {:>8} {:>6} | {:>7} {:>7}",
        "GPUs", "procs", "fake", "full", "first", "CPU", "own", "full%100", "%1s", "own%100", "%1s"
    );
    for (gpus, procs) in SHAPES {
        let figures = match measure(&library, gpus, procs, Job::EveryGpu, samples) {
            Ok(figures) => figures,
            Err(e) => {
                eprintln!("watchdog_sample: {gpus} GPU(s) x {procs} process(es): {e}");
                return ExitCode::FAILURE;
            }
        };
        let pair = |(median, p95)| format!("{}/{}", us(median), us(p95));
        let (tick, own) = (figures.tick.0, figures.attribution.0);
        println!(
            "{:>4} {:>5} | {:>11} | {:>11} {:>6} {:>6} | {:>9} | {:>8} {:>6} | {:>7} {:>7}",
            gpus,
            procs,
            pair(figures.fake),
            pair(figures.tick),
            us(figures.first_tick),
            us(figures.cpu_per_tick),
            pair(figures.attribution),
            core_percent(tick, Duration::from_millis(100)),
            core_percent(tick, Duration::from_secs(1)),
            core_percent(own, Duration::from_millis(100)),
            core_percent(own, Duration::from_secs(1)),
        );
    }
    // A node: 8 jobs, one GPU each, 16 processes on every GPU; each job's watchdog samples every
    // GPU of the node, or (devices constrained) its own. The node's cost is 8 such watchdogs.
    let (jobs, interval) = (8u32, Duration::from_secs(1));
    println!(
        "a node of {jobs} jobs on {jobs} GPUs x 16 processes, one GPU each, at a {interval:?} interval \
         (fake = the fake's file reads; own = full - fake):"
    );
    for (job, what) in [
        (Job::OneGpuSamplingAll, "every watchdog samples every GPU"),
        (
            Job::OneGpuSamplingItsOwn,
            "every watchdog samples its own GPU (ConstrainDevices=yes)",
        ),
    ] {
        let figures = match measure(&library, jobs, 16, job, samples) {
            Ok(figures) => figures,
            Err(e) => {
                eprintln!("watchdog_sample: node of {jobs} jobs: {e}");
                return ExitCode::FAILURE;
            }
        };
        let full = figures.tick.0 * jobs;
        let own = figures.tick.0.saturating_sub(figures.fake.0) * jobs;
        println!(
            "  {what}: full {} µs, own {} µs per interval: {} % / {} % of one core",
            us(full),
            us(own),
            core_percent(full, interval),
            core_percent(own, interval)
        );
    }
    let kib = |key| status_kib(key).map_or("?".to_string(), |k| format!("{:.1} MiB", k as f64 / 1024.0));
    println!(
        "RSS of this bench process after the run: VmRSS {}, peak VmHWM {} \
         (an upper bound for the watchdog: it also holds the bench's timings and children)",
        kib("VmRSS:"),
        kib("VmHWM:")
    );
    ExitCode::SUCCESS
}
