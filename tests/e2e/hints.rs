//! OOM-rollback hints and framework caps on the cluster (issue 5), with examples/train_loop.py.

use std::time::Duration;

use crate::support::*;

fn policy() -> String {
    "[defaults]\ndefault = \"none\"\ngpu_memory = \"80G\"\n\n[enforcement]\ninterval = \"500ms\"\ngrace = \"0s\"\n"
        .to_string()
}

#[test]
#[ignore = "needs the dev cluster: slurm/dev-cluster test"]
fn framework_caps_merge_with_what_the_user_set() {
    let _policy = install_policy(&policy());
    let dir = user_dir("hints-caps");
    let show = "env | grep -E '^(PYTORCH|XLA|TF_FORCE)' | sort";
    let job = sbatch_wait_env(
        &dir,
        &["--gres=gpu:1", "--gpu-mem-quota=40G"],
        show,
        &[("PYTORCH_ALLOC_CONF", "max_split_size_mb:128")],
    );
    let expected = "PYTORCH_ALLOC_CONF=max_split_size_mb:128,expandable_segments:True\n\
                    PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:128,expandable_segments:True\n\
                    TF_FORCE_GPU_ALLOW_GROWTH=true\n\
                    XLA_CLIENT_MEM_FRACTION=0.49\n\
                    XLA_PYTHON_CLIENT_MEM_FRACTION=0.49\n";
    assert_eq!(job.output, expected, "job {}", job.id);
}

#[test]
#[ignore = "needs the dev cluster: slurm/dev-cluster test"]
fn a_job_requeued_for_memory_restarts_with_hints_and_then_fits() {
    let _policy = install_policy(&policy());
    let dir = user_dir("hints-restart");
    let example = copy_example(&dir);
    let checkpoints = dir.join("checkpoints");
    // 20G fixed + 4G per sample: micro-batch 8 peaks at 52G, over the 40G quota.
    let script = format!(
        "env | grep '^GPU_MEM_QUOTA_' | sort; python3 {} --batch 8x8 --fixed 20G --per-sample 4G --steps 6 \
         --step-seconds 0.3 --checkpoint-dir {}",
        example,
        checkpoints.display()
    );
    let job = sbatch_wait(
        &dir,
        &[
            "--gres=gpu:1",
            "--gpu-mem-quota=40G",
            "--gpu-mem-batch=8x8",
            "--open-mode=append",
        ],
        &script,
    );
    let out = &job.output;
    assert!(out.contains("GPU_MEM_QUOTA_RESTARTS=1"), "job {}: {out}", job.id);
    assert!(
        out.contains("GPU_MEM_QUOTA_LAST_EVENT=over-quota"),
        "job {}: {out}",
        job.id
    );
    let micro: u64 = env_value(out, "GPU_MEM_QUOTA_MICRO_BATCH").expect("micro-batch hint");
    let accum: u64 = env_value(out, "GPU_MEM_QUOTA_GRAD_ACCUM").expect("accumulation hint");
    assert_eq!(
        micro * accum,
        64,
        "the effective batch must stay 8x8: {micro}x{accum}"
    );
    assert!(
        micro < 8 && 20 + 4 * micro <= 40,
        "micro-batch {micro} does not fit 40G"
    );
    let state = admin("scontrol", &["show", "job", &job.id.to_string()]);
    assert!(
        state.contains("JobState=COMPLETED") && state.contains("Restarts=1"),
        "{state}"
    );
    assert!(wait_until(Duration::from_secs(5), || slurmd_log()
        .contains(&format!("job {}: restart hints after over-quota", job.id))));
}

fn env_value(text: &str, name: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}="))?.trim().parse().ok())
}
