//! Hard limits where the driver offers them (issue 17): the fake NVML exports
//! `nvmlDeviceSetMemoryLimits_v1`; the watchdog sets the quota as the job's cgroup's hard limit on
//! its GPU, and a claim past it (through the fake's `fakeNvmlClaim`, its cudaMalloc) fails for that
//! job alone. With the function answering FUNCTION_NOT_FOUND (an older driver) the watchdog path
//! runs as before, and the log says which; so it does with the function there and the policy's
//! `[enforcement] hard_limit = false`.

use std::path::Path;
use std::time::Duration;

use crate::support::*;

fn policy() -> String {
    "[defaults]\ndefault = \"none\"\ngpu_memory = \"80G\"\n\n[enforcement]\ninterval = \"500ms\"\n\
     grace = \"2s\"\naction = \"cancel\"\nrequeue_near_oom = false\n"
        .to_string()
}

/// An 18G claim under a 16G quota with no hard limit: granted, then the watchdog cancels the job.
fn claim_past_the_quota_unlimited(name: &str) -> u32 {
    let dir = user_dir(name);
    let client = client(&dir);
    let script = format!("GPU=${{SLURM_JOB_GPUS%%,*}}; sleep 2; {client} claim $GPU 18 60");
    let job = sbatch(&dir, &["--gres=gpu:1", "--gpu-mem-quota=16G"], &script);
    assert!(
        wait_until(Duration::from_secs(60), || job_field(job, "JobState")
            == "CANCELLED"),
        "job {job} is {}",
        job_field(job, "JobState")
    );
    let out = std::fs::read_to_string(dir.join(format!("job-{job}.out"))).unwrap_or_default();
    assert!(out.contains("claim 18 G: 0"), "no limit refuses it: {out}");
    let log = syslog();
    assert!(
        log.contains(&format!("job {job}: GPU memory 18G over its 16G quota")),
        "{log}"
    );
    // CANCELLED comes before the job's processes are gone, and Slurm may give the GPU to the next
    // test's job at once: that job's watchdog would see the 18G of a process in no cgroup any more.
    assert!(watchdog_stopped(job), "job {job}: its watchdog did not stop");
    job
}

/// A stdlib-only client of the fake library: `claim GPU SIZE_GIB [HOLD_SECONDS]` (prints the NVML
/// code, then holds the claim that long: a claim counts while its process lives) and
/// `total GPU` (nvmlDeviceGetMemoryInfo's total as this process sees it, in GiB).
const CLIENT: &str = r#"import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
what, gpu = sys.argv[2], int(sys.argv[3])
if what == "claim":
    lib.fakeNvmlClaim.argtypes = [ctypes.c_uint, ctypes.c_uint64]
    print("claim", sys.argv[4], "G:", lib.fakeNvmlClaim(gpu, int(sys.argv[4]) << 30), flush=True)
    if len(sys.argv) > 5:
        import time
        time.sleep(float(sys.argv[5]))
else:
    class Memory(ctypes.Structure):
        _fields_ = [("total", ctypes.c_uint64), ("free", ctypes.c_uint64), ("used", ctypes.c_uint64)]
    device, memory = ctypes.c_void_p(), Memory()
    assert lib.nvmlInit_v2() == 0
    assert lib.nvmlDeviceGetHandleByIndex_v2(gpu, ctypes.byref(device)) == 0
    assert lib.nvmlDeviceGetMemoryInfo(device, ctypes.byref(memory)) == 0
    print("total", memory.total >> 30, "G", flush=True)
"#;

fn client(dir: &Path) -> String {
    let path = dir.join("nvml_client.py");
    std::fs::write(&path, CLIENT).unwrap();
    run_checked(std::process::Command::new("chmod").arg("0644").arg(&path));
    format!(
        "python3 {} {}",
        path.display(),
        lab().join("lib/libnvidia-ml.so.1").display()
    )
}

/// Removes `faults.toml` again when dropped.
struct Faults;

impl Drop for Faults {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(fake_nvml_dir().join("faults.toml"));
        let _ = std::fs::remove_file(fake_nvml_dir().join("faults.state"));
    }
}

#[test]
#[ignore = "needs the dev cluster: slurm/dev-cluster test"]
fn a_claim_beyond_the_hard_limit_fails_for_that_job_alone() {
    let _policy = install_policy(&policy());
    let dir = user_dir("hard-limit");
    let client = client(&dir);
    let ready = dir.join("ready");
    let script = format!(
        "GPU=${{SLURM_JOB_GPUS%%,*}}; echo gpu=$GPU; sleep 3; {client} claim $GPU 12; {client} claim $GPU 18; \
         {client} total $GPU; touch {}; sleep 6; {client} claim $GPU 0",
        ready.display()
    );
    let job = sbatch(&dir, &["--gres=gpu:1", "--gpu-mem-quota=16G"], &script);
    assert!(
        wait_until(Duration::from_secs(60), || ready.exists()),
        "job {job} never got there"
    );
    let out = std::fs::read_to_string(dir.join(format!("job-{job}.out"))).unwrap_or_default();
    let gpu = out
        .lines()
        .find_map(|l| l.strip_prefix("gpu="))
        .unwrap_or_else(|| panic!("{out}"))
        .to_string();
    assert!(out.contains("claim 12 G: 0"), "within the hard limit: {out}");
    assert!(
        out.contains("claim 18 G: 20"),
        "past it: NVML_ERROR_MEMORY: {out}"
    );
    assert!(out.contains("total 16 G"), "the job sees the capped size: {out}");
    // Another process of the same user on the same GPU, outside the job, is not held to it.
    let outside = as_user("bash", &["-c", &format!("{client} claim {gpu} 30")], &[]);
    assert!(
        String::from_utf8_lossy(&outside.stdout).contains("claim 30 G: 0"),
        "{outside:?}"
    );
    // The status file and `status` say a hard limit is in force.
    let status = admin(
        lab().join("bin/gpu-mem-quota").to_str().unwrap(),
        &[
            "status",
            "--config",
            lab().join("etc/gpu-mem-quota.toml").to_str().unwrap(),
        ],
    );
    assert!(
        status.contains(&format!(
            "Job {job}: the driver's hard limit is in force (GPU {gpu} at 16G)"
        )),
        "{status}"
    );
    assert!(wait_until(Duration::from_secs(60), || job_field(job, "JobState")
        == "COMPLETED"));
    let log = syslog();
    assert!(
        log.contains(&format!(
            "job {job}: hard limit in force: nvmlDeviceSetMemoryLimits_v1 caps cgroup "
        )),
        "{log}"
    );
    // Cleared on the way out (the watchdog leaves after the job is COMPLETED).
    let limits = || std::fs::read_to_string(fake_nvml_dir().join("limits").join(&gpu)).unwrap_or_default();
    let cleared = wait_until(Duration::from_secs(20), || {
        !limits().contains(&format!("job_{job}"))
    });
    assert!(cleared, "{}", limits());
}

#[test]
#[ignore = "needs the dev cluster: slurm/dev-cluster test"]
fn without_the_function_the_watchdog_enforces_as_before_and_the_log_says_so() {
    let _policy = install_policy(&policy());
    std::fs::write(
        fake_nvml_dir().join("faults.toml"),
        "memory_limits = \"absent\"\n",
    )
    .unwrap();
    let _faults = Faults;
    let job = claim_past_the_quota_unlimited("hard-limit-absent");
    let log = syslog();
    assert!(
        log.contains(&format!(
            "job {job}: no hard limit (the driver answers nvmlDeviceSetMemoryLimits_v1 on GPU "
        )) && log.contains("the watchdog alone enforces the quota"),
        "{log}"
    );
}

#[test]
#[ignore = "needs the dev cluster: slurm/dev-cluster test"]
fn switched_off_by_the_policy_the_watchdog_enforces_and_the_log_says_so() {
    // The fake driver offers the function (no faults.toml): only the policy keeps it unset.
    let _policy = install_policy(&format!("{}hard_limit = false\n", policy()));
    let job = claim_past_the_quota_unlimited("hard-limit-off");
    let log = syslog();
    assert!(
        log.contains(&format!(
            "job {job}: no hard limit (switched off by the policy: [enforcement] hard_limit = false): \
             the watchdog alone enforces the quota"
        )),
        "{log}"
    );
    assert!(!log.contains(&format!("job {job}: hard limit in force")), "{log}");
}

/// The hard limit is in force before the job's first task runs (issue 39): the task waits for the
/// watchdog's word on it. A job whose first command claims past its quota, within its first
/// milliseconds, is refused by the driver's limit; within the quota it is granted. The wait is the
/// bound the task's start pays, from slurmd's log.
#[test]
#[ignore = "needs the dev cluster: slurm/dev-cluster test"]
fn the_hard_limit_is_in_force_before_the_first_task_runs() {
    let _policy = install_policy(&policy());
    let dir = user_dir("hard-limit-first");
    let client = client(&dir);
    let script = format!(
        "GPU=${{SLURM_JOB_GPUS%%,*}}; {client} claim $GPU 18; {client} claim $GPU 12; {client} claim $GPU 0"
    );
    let job = sbatch_wait(&dir, &["--gres=gpu:1", "--gpu-mem-quota=16G"], &script);
    assert!(
        job.output.contains("claim 18 G: 20"),
        "job {}: the first claim, past the quota, was not refused by the limit: {}",
        job.id,
        job.output
    );
    assert!(
        job.output.contains("claim 12 G: 0"),
        "job {}: {}",
        job.id,
        job.output
    );
    assert_eq!(ended_state(job.id), "COMPLETED");
    let waited = slurmd_log()
        .lines()
        .filter_map(|l| {
            let (_, after) = l.split_once(&format!(
                "job {}: the watchdog's word on the hard limit came ",
                job.id
            ))?;
            after.split_once(" ms")?.0.parse::<u64>().ok()
        })
        .collect::<Vec<_>>();
    assert!(!waited.is_empty(), "job {}: no wait line in slurmd.log", job.id);
    eprintln!(
        "hard limit before the first task: job {}: the task waited {waited:?} ms for it",
        job.id
    );
}
