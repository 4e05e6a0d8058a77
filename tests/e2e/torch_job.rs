//! A real PyTorch job under its quota (issue 28): examples/train_torch.py on the python/ package, its
//! small model trained on the CPU against a memory budget of its quota that raises the real
//! `torch.cuda.OutOfMemoryError`, and what that budget's allocator holds shown on the job's fake GPU,
//! where the watchdog measures it as NVML would.
//!
//! They need a Python with torch and the package installed, which `slurm/dev-cluster test` makes
//! under target/python-venv (`GMQ_TORCH_PYTHON` names another). The job runs it as the test user, on
//! this machine's Slurm only: a chrooted lab's jobs run the root's Python, which has no torch.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::support::*;

/// The Python that runs the jobs, or `None` (with the reason on stderr).
fn torch_python() -> Option<String> {
    if slurm_root().is_some() || !nodes().is_empty() {
        eprintln!("skipped: the jobs of a chrooted or multi-node lab have no Python with torch");
        return None;
    }
    venv_python()
}

/// The venv's Python with torch and the package (its path is this machine's, which the nodes of a
/// multi-node lab on this machine's Slurm share), or `None` (with the reason on stderr).
pub(crate) fn venv_python() -> Option<String> {
    let python = std::env::var_os("GMQ_TORCH_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/python-venv/bin/python"));
    let usable = std::process::Command::new(&python)
        .args(["-c", "import torch, gpu_mem_quota"])
        .status()
        .is_ok_and(|s| s.success());
    if !usable {
        eprintln!(
            "skipped: {} cannot import torch and gpu_mem_quota (slurm/dev-cluster test installs them)",
            python.display()
        );
        return None;
    }
    Some(python.display().to_string())
}

/// examples/train_torch.py in the test's directory; its path.
pub(crate) fn copy_torch_example(dir: &Path) -> String {
    let example = dir.join("train_torch.py");
    std::fs::copy(
        concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/train_torch.py"),
        &example,
    )
    .unwrap();
    run_checked(
        std::process::Command::new("/usr/bin/chmod")
            .arg("0644")
            .arg(&example),
    );
    example.display().to_string()
}

fn output(dir: &Path, job: u32) -> String {
    std::fs::read_to_string(dir.join(format!("job-{job}.out"))).unwrap_or_default()
}

/// The quota of these jobs, and so their budget: micro-batch 8 of the declared 8x4 does not fit in it
/// at the first step's 64 tokens (it needs about 3.2 MiB); micro-batch 1 fits at the last step's 192.
const QUOTA: &str = "3M";

/// The job's script: the example under `quota`, 24 optimizer steps of at least `step_seconds`, its
/// checkpoint in `dir`; the GPU_MEM_QUOTA_ hints it was started with first. The shell `exec`s the
/// loop, as a batch script must for the loop to see the SIGTERM of a requeue: a shell that waits for
/// it dies of that signal at once, and Slurm then kills the rest of the batch step with SIGKILL.
fn train_script(python: &str, example: &str, dir: &Path, step_seconds: f64) -> String {
    format!(
        "env | grep '^GPU_MEM_QUOTA_\\(RESTARTS\\|LAST_EVENT\\|MICRO_BATCH\\)=' | sort; \
         exec {python} {example} --batch 8x4 --steps 24 --seq-from 64 --seq-to 192 --simulate-budget {QUOTA} \
         --fake-gpu --step-seconds {step_seconds} --checkpoint {}",
        dir.join("train-torch.pt").display()
    )
}

/// Under a quota smaller than its first micro-batch needs, the job adapts in the process: it starts
/// smaller or retries the step that ran out of memory at a smaller micro-batch, keeps the effective
/// batch, and ends COMPLETED without a requeue, never over its quota on the GPU. The watchdog
/// measured it there, and its metrics carry what the job's allocator reported, marked as the job's.
#[test]
#[ignore = "needs the dev cluster: slurm/dev-cluster test"]
fn a_pytorch_job_under_a_quota_below_its_first_micro_batch_adapts_without_a_requeue() {
    let Some(python) = torch_python() else { return };
    let _policy = install_policy(
        "[defaults]\ndefault = \"none\"\n\n[enforcement]\ninterval = \"500ms\"\ngrace = \"1s\"\n\
         action = \"requeue\"\nmax_requeues = 1\n",
    );
    fresh_gpus();
    let dir = user_dir("torch-adapt");
    let example = copy_torch_example(&dir);
    let quota = format!("--gpu-mem-quota={QUOTA}");
    let job = sbatch(
        &dir,
        &[
            "--gres=gpu:1",
            &quota,
            "--gpu-mem-batch=8x4",
            "--chdir",
            &dir.display().to_string(),
        ],
        &train_script(&python, &example, &dir, 1.0),
    );
    // While it runs, the node's metrics carry what its allocator reported (the watchdog reads the
    // telemetry file in its working directory at most every 15 s), marked as the job's word.
    let prom = lab().join(format!("gmq/metrics/gpu_mem_quota_job_{job}.prom"));
    let mut metrics = String::new();
    let reported = wait_until(Duration::from_secs(90), || {
        metrics = std::fs::read_to_string(&prom).unwrap_or_default();
        metrics.contains("gpu_mem_quota_job_reported_allocated_bytes{")
    });
    assert!(reported, "{}: {metrics}", prom.display());
    assert!(
        metrics.contains("as reported by the job, not measured"),
        "{metrics}"
    );
    assert!(
        metrics.contains("gpu_mem_quota_job_reported_fragmentation_ratio{"),
        "{metrics}"
    );
    let done = final_state(job, Duration::from_secs(180)).is_some();
    let out = output(&dir, job);
    let log = watchdog_lines(job);
    assert!(done, "job {job} did not end: {out}");
    assert_eq!(job_field(job, "JobState"), "COMPLETED", "{out} {log:#?}");
    assert_eq!(job_field(job, "Restarts"), "0", "{out}");
    // It changed its geometry in the process, the effective batch kept: 8 x 4 = 32.
    assert!(out.contains("done: 24 steps"), "{out}");
    let shrank = out
        .lines()
        .filter(|l| l.contains(": oom-retry 8x4 -> ") || l.contains(": shrink 8x4 -> "))
        .count();
    assert!(shrank >= 1, "it never left 8x4: {out}");
    // The watchdog saw its memory and never found it over the quota.
    assert!(
        log.iter().any(|l| l.contains("watching GPU(s)")),
        "no watchdog: {log:#?}"
    );
    assert!(!log.iter().any(|l| l.contains("over its")), "{log:#?}");
    let comment = job_field(job, "AdminComment");
    assert!(comment.contains("gpu-mem-quota:v1{"), "no record: {comment}");
}

/// A job that is requeued anyway (a higher-priority job takes the GPU they share, and the watchdog
/// preempts it) saves its checkpoint on the SIGTERM, and its restart resumes there with the hints:
/// no optimizer step is lost or done twice.
#[test]
#[ignore = "needs the dev cluster: slurm/dev-cluster test"]
fn a_preempted_pytorch_job_resumes_from_its_checkpoint_with_the_hints() {
    let Some(python) = torch_python() else { return };
    let _policy = install_policy(
        "[defaults]\ndefault = \"none\"\n\n[enforcement]\ninterval = \"500ms\"\ngrace = \"1s\"\n\n\
         [preemption]\nenabled = true\nreserve = \"10G\"\ncooldown = \"1m\"\nheartbeat_timeout = \"3s\"\n\n\
         [preemption.ranks]\naccount = { physics = 10, chemistry = 0 }\n",
    );
    fresh_gpus();
    let dir = user_dir("torch-preempt");
    let example = copy_torch_example(&dir);
    let quota = format!("--gpu-mem-quota={QUOTA}");
    let chdir = dir.display().to_string();
    let job = sbatch(
        &dir,
        &[
            "--gres=shard:1",
            "--account=chemistry",
            &quota,
            "--gpu-mem-batch=8x4",
            "--open-mode=append",
            "--chdir",
            &chdir,
        ],
        &format!(
            "echo gpu=${{CUDA_VISIBLE_DEVICES%%,*}}; {}",
            train_script(&python, &example, &dir, 1.0)
        ),
    );
    let stop = dir.join("stop");
    // Training: its first step ran out of memory and was retried in place.
    let training = wait_until(Duration::from_secs(60), || {
        output(&dir, job).contains(": oom-retry ")
    });
    assert!(
        training,
        "job {job} is {}: {}",
        job_field(job, "JobState"),
        output(&dir, job)
    );
    let physics = sbatch(
        &dir,
        &["--gres=shard:1", "--account=physics", "--gpu-mem-quota=78G"],
        &format!(
            "G=${{CUDA_VISIBLE_DEVICES%%,*}}; echo physics gpu=$G; f=/var/lib/fake-nvml/procs/$G/$$; \
             trap 'rm -f $f' EXIT; echo 75G > $f; while [ ! -e {} ]; do sleep 0.2; done",
            stop.display()
        ),
    );
    let _cancel = CancelOnDrop(vec![job, physics]);
    let requeued = wait_until(Duration::from_secs(60), || job_field(job, "Restarts") == "1");
    let physics_out = output(&dir, physics);
    assert!(
        requeued,
        "job {job} was not preempted: {} {physics_out}",
        output(&dir, job)
    );
    std::fs::write(&stop, "").unwrap();
    let done = wait_until(Duration::from_secs(180), || {
        job_field(job, "JobState") == "COMPLETED"
    });
    let out = output(&dir, job);
    assert!(done, "job {job} is {}: {out}", job_field(job, "JobState"));
    assert_eq!(job_field(job, "Restarts"), "1", "{out}");
    // The first run saved on the SIGTERM; the second started from there with the hints.
    let saved: u32 = out
        .lines()
        .find_map(|l| l.split("SIGTERM: saved at step ").nth(1))
        .and_then(|rest| rest.split(';').next())
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no save on SIGTERM: {out}"));
    assert!(out.contains(&format!("resumed at step {saved}/24")), "{out}");
    assert!(out.contains("GPU_MEM_QUOTA_RESTARTS=1"), "{out}");
    assert!(out.contains("GPU_MEM_QUOTA_LAST_EVENT=preempted"), "{out}");
    assert!(out.contains("restart 1 after preempted"), "{out}");
    assert!(out.contains("done: 24 steps"), "{out}");
}

/// Cancels the jobs when dropped (a failed assertion leaves nothing running on the lab).
struct CancelOnDrop(Vec<u32>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        let _ = lab_command("scancel")
            .args(self.0.iter().map(u32::to_string))
            .env("SLURM_CONF", slurm_conf())
            .status();
    }
}
