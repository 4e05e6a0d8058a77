//! Priority preemption on a contended GPU (issue 7): two jobs share one fake 80G GPU through shards.

use std::time::Duration;

use crate::support::*;

fn policy() -> String {
    "[defaults]\ndefault = \"none\"\n\n[enforcement]\ninterval = \"500ms\"\ngrace = \"1s\"\n\n\
     [preemption]\nenabled = true\nreserve = \"10G\"\ncooldown = \"1m\"\nheartbeat_timeout = \"5s\"\n\n\
     [preemption.ranks]\naccount = { physics = 10, chemistry = 0 }\n"
        .to_string()
}

fn submit(dir: &std::path::Path, name: &str, options: &[&str], script: &str) -> u32 {
    let out = dir.join(format!("{name}-%j.out")).display().to_string();
    let mut args = vec!["--parsable", "-o", &out, "--open-mode=append", "--gres=shard:1"];
    args.extend_from_slice(options);
    args.extend_from_slice(&["--wrap", script]);
    let submitted = as_user("sbatch", &args, &[]);
    String::from_utf8_lossy(&submitted.stdout)
        .trim()
        .parse()
        .expect("job id")
}

#[test]
#[ignore = "needs the dev cluster: slurm/dev-cluster test"]
fn the_lower_priority_job_is_requeued_and_the_other_keeps_running() {
    let _policy = install_policy(&policy());
    let dir = user_dir("preempt");
    let claim = "GPU=${CUDA_VISIBLE_DEVICES%%,*}; echo gpu=$GPU; f=/var/lib/fake-nvml/procs/$GPU/$$; trap 'rm -f $f' EXIT";
    // A: production (physics, rank 10), 45G of its 50G quota.
    let a = submit(
        &dir,
        "a",
        &["--account=physics", "--gpu-mem-quota=50G"],
        &format!("{claim}; echo 45G > $f; sleep 60"),
    );
    assert!(
        wait_until(Duration::from_secs(30), || job_field(a, "JobState") == "RUNNING"),
        "A did not start"
    );
    std::thread::sleep(Duration::from_secs(2));
    // B: scavenger-like (chemistry, rank 0), grows within its own 30G quota until the GPU runs short.
    let b_script = format!(
        "echo run=${{SLURM_RESTART_COUNT:-0}} event=$GPU_MEM_QUOTA_LAST_EVENT; [ -n \"$SLURM_RESTART_COUNT\" ] && exit 0; \
         {claim}; echo 10G > $f; sleep 3; echo 28G > $f; sleep 60"
    );
    let b = submit(
        &dir,
        "b",
        &["--account=chemistry", "--gpu-mem-quota=30G"],
        &b_script,
    );
    let requeued = wait_until(Duration::from_secs(60), || job_field(b, "Restarts") == "1");
    let a_state = job_field(a, "JobState");
    let b_comment = job_field(b, "AdminComment");
    admin("scancel", &[&a.to_string(), &b.to_string()]);
    assert!(
        requeued,
        "B ({b}) was not preempted; A ({a}) is {a_state}; B: {}",
        job_field(b, "JobState")
    );
    assert_eq!(a_state, "RUNNING", "A must keep running");
    assert_eq!(job_field(a, "Restarts"), "0");
    assert!(b_comment.contains("preempted=1"), "B's AdminComment: {b_comment}");
    let a_out = std::fs::read_to_string(dir.join(format!("a-{a}.out"))).unwrap_or_default();
    let b_out = std::fs::read_to_string(dir.join(format!("b-{b}.out"))).unwrap_or_default();
    let gpu_of = |out: &str| {
        out.lines()
            .find_map(|l| l.strip_prefix("gpu="))
            .map(str::to_string)
    };
    assert_eq!(
        gpu_of(&a_out),
        gpu_of(&b_out),
        "the jobs did not share a GPU: {a_out} / {b_out}"
    );
    let log = std::fs::read_to_string("/var/log/syslog").unwrap_or_default();
    assert!(
        log.contains(&format!("job {b}: preempted: GPU")),
        "no preemption line for job {b}"
    );
    // The restarted run is told it was preempted, not that it broke its quota.
    let restarted = wait_until(Duration::from_secs(40), || {
        std::fs::read_to_string(dir.join(format!("b-{b}.out")))
            .unwrap_or_default()
            .contains("run=1")
    });
    if restarted {
        let b_out = std::fs::read_to_string(dir.join(format!("b-{b}.out"))).unwrap_or_default();
        assert!(b_out.contains("run=1 event=preempted"), "B's second run: {b_out}");
    }
}
