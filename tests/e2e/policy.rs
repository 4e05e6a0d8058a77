//! The admin policy on the cluster: caps refused at submission and on the node, defaults in the
//! environment, and a broken policy handled as the admin chose (fail-open / fail-closed).

use crate::support::*;

const SHOW: &str = "env | sed -n 's/^GPU_MEM_QUOTA/batch:GPU_MEM_QUOTA/p'; echo the-script-ran";

#[test]
#[ignore = "needs the dev cluster: slurm/dev-cluster test"]
fn the_example_policy_caps_the_test_user_at_submission() {
    let _policy = install_policy(&example_policy());
    let before = last_job_id();
    let out = as_user("sbatch", &["--gpu-mem-quota=35G", "--wrap", "true"], &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "35G was accepted: {stderr}");
    assert!(
        stderr.contains("gpu-mem-quota: submit: --gpu-mem-quota=35G exceeds the 30G cap for user 'gmq-user'"),
        "{stderr}"
    );
    assert_eq!(last_job_id(), before, "a refused submission created a job");

    let dir = user_dir("policy-30g");
    let job = sbatch_wait(&dir, &["--gpu-mem-quota=30G"], SHOW);
    assert!(
        job.output.contains("batch:GPU_MEM_QUOTA_BYTES=32212254720"),
        "job {}: {}",
        job.id,
        job.output
    );
}

#[test]
#[ignore = "needs the dev cluster: slurm/dev-cluster test"]
fn a_job_without_the_option_gets_the_default_resolved_on_the_node() {
    // 50% of the (fake) 80G GPU, below the account's 48G cap.
    let _policy = install_policy(
        "[defaults]\ndefault = \"50%\"\ngpu_memory = \"80G\"\n[account.physics]\nmax = \"48G\"\n",
    );
    let dir = user_dir("policy-default");
    let job = sbatch_wait(&dir, &["--gres=gpu:1"], SHOW);
    assert!(
        job.output.contains("batch:GPU_MEM_QUOTA_BYTES=42949672960"),
        "job {}: {}",
        job.id,
        job.output
    );
    assert!(
        job.output.contains("batch:GPU_MEM_QUOTA=40G\n"),
        "job {}: {}",
        job.id,
        job.output
    );
    let log = slurmd_log();
    assert!(
        log.contains(&format!(
            "job {}: quota 40G per GPU (default 50% of [defaults]; cap 48G for account 'physics')",
            job.id
        )),
        "no decision line for job {}",
        job.id
    );
}

#[test]
#[ignore = "needs the dev cluster: slurm/dev-cluster test"]
fn the_node_enforces_account_caps_that_the_submit_host_cannot_know() {
    let _policy = install_policy(
        "[defaults]\ndefault = \"none\"\n[account.physics]\nmax = \"20G\"\n[account.bigacct]\nmax = \"60G\"\n",
    );
    let dir = user_dir("policy-account");
    // The account is chosen by the cluster (the user's default, physics): sbatch cannot check it,
    // the node does. Forging SLURM_JOB_ACCOUNT does not help: the node reads the account slurmstepd set.
    let job = sbatch_wait_env(
        &dir,
        &["--gpu-mem-quota=40G"],
        SHOW,
        &[("SLURM_JOB_ACCOUNT", "bigacct")],
    );
    assert!(
        !job.output.contains("the-script-ran"),
        "job {} ran over its account's cap",
        job.id
    );
    let refusal = "--gpu-mem-quota=40G exceeds the 20G cap for account 'physics'";
    assert!(job.output.contains(refusal), "job {}: {}", job.id, job.output);
    assert!(slurmd_log().contains(&format!("job {}: refusing the step's tasks: {refusal}", job.id)));
    let node = admin("sinfo", &["-h", "-o", "%T"]);
    assert!(!node.contains("drain"), "node drained: {node}");

    let job = sbatch_wait(&dir, &["--gpu-mem-quota=20G"], SHOW);
    assert!(
        job.output.contains("batch:GPU_MEM_QUOTA=20G\n"),
        "job {}: {}",
        job.id,
        job.output
    );
}

#[test]
#[ignore = "needs the dev cluster: slurm/dev-cluster test"]
fn a_broken_policy_fails_open_loudly() {
    let _policy = install_policy("[defaults]\ndefault = \"50%\"\nmaxx = \"40G\"\n");
    let dir = user_dir("policy-fail-open");
    let job = sbatch_wait(&dir, &["--gpu-mem-quota=8G"], SHOW);
    assert!(
        job.output.contains("the-script-ran"),
        "job {} did not run: {}",
        job.id,
        job.output
    );
    assert!(
        job.output.contains("batch:GPU_MEM_QUOTA=8G\n"),
        "job {}: {}",
        job.id,
        job.output
    );
    let log = slurmd_log();
    let line = log
        .lines()
        .find(|l| l.contains(&format!("job {}: the GPU memory policy is unusable", job.id)))
        .unwrap_or_else(|| panic!("no alarm for job {} in slurmd.log", job.id));
    assert!(
        line.contains("gpu-mem-quota.toml:3:1") && line.contains("maxx"),
        "{line}"
    );
    assert!(
        line.contains("fail-open") && line.contains("unmonitored"),
        "{line}"
    );
}

#[test]
#[ignore = "needs the dev cluster: slurm/dev-cluster test"]
fn a_broken_policy_fails_closed_when_it_says_so() {
    let _policy = install_policy(
        "[defaults]\ndefault = \"banana\"\n[enforcement]\non_config_error = \"fail-closed\"\n",
    );
    let before = last_job_id();
    let out = as_user("sbatch", &["--gpu-mem-quota=8G", "--wrap", "true"], &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("fail-closed"),
        "{stderr}"
    );
    assert_eq!(last_job_id(), before);

    // Without the option nothing is checked at submission; the node refuses.
    let dir = user_dir("policy-fail-closed");
    let job = sbatch_wait(&dir, &[], SHOW);
    assert!(
        !job.output.contains("the-script-ran"),
        "job {} ran under a broken fail-closed policy",
        job.id
    );
    assert!(
        job.output.contains("jobs are refused until it is fixed"),
        "job {}: {}",
        job.id,
        job.output
    );
    assert!(
        job.output.contains("gpu-mem-quota.toml:2:"),
        "the refusal does not say where: {}",
        job.output
    );
}
