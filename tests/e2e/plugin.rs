//! The foundation: `--gpu-mem-quota` from the command line to the job's environment.
//! These tests run under a policy without caps or defaults (`OPEN_POLICY`); tests/e2e/policy.rs
//! covers the admin policy.

use crate::support::*;

/// Prints every GPU_MEM_QUOTA* variable of the batch script and of an srun task, each with a marker.
const SHOW_BOTH: &str = "env | sed -n 's/^GPU_MEM_QUOTA/batch:GPU_MEM_QUOTA/p'; \
                         srun sh -c \"env | sed -n 's/^GPU_MEM_QUOTA/task:GPU_MEM_QUOTA/p'\"";

#[test]
#[ignore = "needs the dev cluster: slurm/dev-cluster test"]
fn quota_reaches_the_batch_script_and_every_srun_task() {
    let _policy = install_policy(OPEN_POLICY);
    let dir = user_dir("quota-env");
    let job = sbatch_wait(&dir, &["--gres=gpu:1", "--gpu-mem-quota=40G"], SHOW_BOTH);
    let expected = vec![
        "GPU_MEM_QUOTA=40G".to_string(),
        "GPU_MEM_QUOTA_BYTES=42949672960".to_string(),
    ];
    assert_eq!(
        quota_vars(&job.output, "batch:"),
        expected,
        "job {}: {}",
        job.id,
        job.output
    );
    assert_eq!(
        quota_vars(&job.output, "task:"),
        expected,
        "job {}: {}",
        job.id,
        job.output
    );
}

#[test]
#[ignore = "needs the dev cluster: slurm/dev-cluster test"]
fn equivalent_spellings_normalise_to_the_same_quota() {
    let _policy = install_policy(OPEN_POLICY);
    let dir = user_dir("quota-spellings");
    for spelling in ["40GiB", "40960M", "40960"] {
        let job = sbatch_wait(&dir, &[&format!("--gpu-mem-quota={spelling}")], SHOW_BOTH);
        assert!(
            job.output.contains("batch:GPU_MEM_QUOTA_BYTES=42949672960"),
            "{spelling}: {}",
            job.output
        );
        assert!(
            job.output.contains("batch:GPU_MEM_QUOTA=40G\n"),
            "{spelling}: {}",
            job.output
        );
    }
}

#[test]
#[ignore = "needs the dev cluster: slurm/dev-cluster test"]
fn bad_values_are_refused_before_anything_is_submitted() {
    let _policy = install_policy(OPEN_POLICY);
    let before = last_job_id();
    for (value, why) in [
        ("banana", "not a size"),
        ("0", "greater than zero"),
        ("-5G", "negative"),
        ("99999999T", "larger than the maximum"),
        ("1.5G", "fractions are not supported"),
        ("40GB", "ambiguous suffix"),
        ("", "empty"),
    ] {
        let out = as_user(
            "sbatch",
            &[&format!("--gpu-mem-quota={value}"), "--wrap", "true"],
            &[],
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{value:?} was accepted: {stderr}");
        let named = format!("gpu-mem-quota: submit: invalid --gpu-mem-quota '{value}': ");
        assert!(
            stderr.contains(&named) && stderr.contains(why),
            "{value:?}: {stderr}"
        );
        assert!(
            !String::from_utf8_lossy(&out.stdout).contains("Submitted"),
            "{value:?}"
        );
    }
    for tool in [
        &["srun", "--gpu-mem-quota=banana", "true"][..],
        &["salloc", "--gpu-mem-quota=banana", "true"],
    ] {
        let out = as_user(tool[0], &tool[1..], &[]);
        assert!(!out.status.success(), "{tool:?} accepted a bad value");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("invalid --gpu-mem-quota 'banana'"),
            "{tool:?}"
        );
    }
    assert_eq!(last_job_id(), before, "a refused submission created a job");
    assert!(
        admin("squeue", &["-h"]).trim().is_empty(),
        "jobs left in the queue"
    );
}

#[test]
#[ignore = "needs the dev cluster: slurm/dev-cluster test"]
fn a_job_without_the_option_is_left_untouched() {
    let _policy = install_policy(OPEN_POLICY);
    let dir = user_dir("no-option");
    let job = sbatch_wait(&dir, &["--gres=gpu:1"], &format!("{SHOW_BOTH}; echo done"));
    assert_eq!(
        job.output.trim(),
        "done",
        "job {} saw quota variables: {}",
        job.id,
        job.output
    );
}

#[test]
#[ignore = "needs the dev cluster: slurm/dev-cluster test"]
fn srun_and_salloc_carry_the_quota_too() {
    let _policy = install_policy(OPEN_POLICY);
    let show = [
        "sh",
        "-c",
        "env | grep ^GPU_MEM_QUOTA | grep -v STATUS_FILE | sort",
    ];
    let srun = as_user(
        "srun",
        &[&["--gres=gpu:1", "--gpu-mem-quota=8G"][..], &show].concat(),
        &[],
    );
    assert!(srun.status.success(), "{}", String::from_utf8_lossy(&srun.stderr));
    assert_eq!(
        String::from_utf8_lossy(&srun.stdout),
        "GPU_MEM_QUOTA=8G\nGPU_MEM_QUOTA_BYTES=8589934592\n"
    );

    let salloc = as_user(
        "salloc",
        &[&["--gres=gpu:1", "--gpu-mem-quota=8G", "srun"][..], &show].concat(),
        &[],
    );
    assert!(
        salloc.status.success(),
        "{}",
        String::from_utf8_lossy(&salloc.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&salloc.stdout),
        "GPU_MEM_QUOTA=8G\nGPU_MEM_QUOTA_BYTES=8589934592\n"
    );

    // A job with no GPU on the node has no quota there: its steps are told none (review K5: and
    // ask slurmctld nothing).
    let cpu_only = as_user("srun", &[&["--gpu-mem-quota=8G"][..], &show].concat(), &[]);
    assert_eq!(
        String::from_utf8_lossy(&cpu_only.stdout),
        "",
        "{}",
        String::from_utf8_lossy(&cpu_only.stderr)
    );
}

#[test]
#[ignore = "needs the dev cluster: slurm/dev-cluster test"]
fn help_lists_the_option_and_slurmd_loaded_the_plugin() {
    for tool in ["sbatch", "srun", "salloc"] {
        let out = as_user(tool, &["--help"], &[]);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("--gpu-mem-quota=SIZE"), "{tool} --help: {text}");
        assert!(
            text.contains("GPU memory the job may use on each of its GPUs"),
            "{tool} --help"
        );
    }
    let log = slurmd_log();
    assert!(
        log.contains("Loaded plugin gpu_mem_quota.so"),
        "slurmd did not load the plugin"
    );
    assert!(
        log.contains("gpu-mem-quota: init: loaded (config="),
        "no load line from the plugin"
    );
    let unexpected: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("error") && l.contains("gpu_mem_quota") || l.contains("error: gpu-mem-quota"))
        // The refusals other tests provoke (in steps, and the job prolog's: admission.rs), the
        // epilog's kill of what the G7 test (security.rs) moved below its step, and the steps of
        // jobs whose watchdog a test killed or kept from starting (watchdog.rs, refused): the log
        // may hold them from an earlier run on the same lab.
        .filter(|l| {
            !l.contains("refusing")
                && !l.contains("task_init() failed")
                && !l.contains("policy is unusable")
                && !l.contains("was still in the job's cgroup after its end")
                && !l.contains("every task of the job on this node is refused")
        })
        .collect();
    assert!(
        unexpected.is_empty(),
        "plugin errors in slurmd.log: {unexpected:#?}"
    );
}

#[test]
#[ignore = "needs the dev cluster: slurm/dev-cluster test"]
fn a_forged_value_in_the_job_environment_is_refused_on_the_node() {
    let _policy = install_policy(OPEN_POLICY);
    let dir = user_dir("forged");
    // What sbatch would have put there for --gpu-mem-quota, written by hand with an invalid value.
    let forged = [("_SLURM_SPANK_OPTION_gpu_mem_quota_gpu_mem_quota", "banana")];
    let job = sbatch_wait_env(&dir, &[], "echo the-script-ran", &forged);
    assert!(
        !job.output.contains("the-script-ran"),
        "job {} ran with a forged quota",
        job.id
    );
    let refusal = format!(
        "job {}: refusing to start the task: invalid --gpu-mem-quota 'banana'",
        job.id
    );
    assert!(
        job.output.contains(&refusal),
        "the user is not told why: {}",
        job.output
    );
    assert!(
        slurmd_log().contains(&refusal),
        "slurmd.log has no refusal for job {}",
        job.id
    );
    let state = admin("scontrol", &["show", "job", &job.id.to_string()]);
    assert!(
        state.contains("JobState=FAILED") && state.contains("ExitCode=1:0"),
        "job {}: {state}",
        job.id
    );
    // Refusing must never cost the node: a failed launch (rather than a failed task) would drain it.
    let node = admin("sinfo", &["-h", "-o", "%T"]);
    assert!(
        !node.contains("drain") && !node.contains("down"),
        "node state after a forged value: {node}"
    );
}
