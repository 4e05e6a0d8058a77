//! The node's decision, fail closed (the third security review, /work/shared/reviews/
//! security-2026-12-c.md): the job prolog and the steps reach one verdict, a refusal never means
//! "no watchdog" (K1), and a step of a job with no GPU on the node asks slurmctld nothing (K5).
//! Each attack is performed as the ordinary test user.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::support::*;

/// The fake GPUs' claim files as jobs see them.
const FAKE_PROCS: &str = "/var/lib/fake-nvml/procs";

/// Fast enforcement that cancels: sample every 500 ms, 1 s of grace.
const ENFORCEMENT: &str = "[enforcement]\ninterval = \"500ms\"\ngrace = \"1s\"\naction = \"cancel\"\n";

/// `salloc --no-shell` as the test user, in account chemistry with one GPU, asking `quota`: the
/// job id from its "Granted job allocation N".
fn allocation(quota: &str) -> u32 {
    let quota = format!("--gpu-mem-quota={quota}");
    let alloc = as_user(
        "salloc",
        &["--no-shell", "-A", "chemistry", "--gres=gpu:1", &quota],
        &[],
    );
    let said = text(&alloc);
    let granted = said
        .split_once("Granted job allocation ")
        .and_then(|(_, rest)| rest.split_whitespace().next()?.parse().ok());
    granted.unwrap_or_else(|| panic!("salloc: {said}"))
}

struct Cancel(u32);

impl Drop for Cancel {
    fn drop(&mut self) {
        let _ = lab_command("scancel").arg(self.0.to_string()).output();
    }
}

/// K1, the QOS route: up to 25.11 the job prolog has no QOS (slurmd passes `SLURM_JOB_QOS` to it
/// from 26.05 on). With a QOS cap in the policy (`[qos.debug] max = "8G"`), a job of QOS normal
/// asking 20G got no watchdog while its batch step accepted it, and used 70G unpunished. Now the
/// prolog starts the watchdog whatever the QOS may be, and the watchdog, once it has the job's QOS
/// from slurmctld, holds it to its 20G: cancelled at 70G.
#[test]
#[ignore = "needs the dev cluster: slurm/dev-cluster test"]
fn k1_a_qos_the_prolog_cannot_know_never_leaves_the_job_unwatched() {
    let t0 = Instant::now();
    let _policy = install_policy(&format!(
        "[defaults]\ndefault = \"none\"\nmax = \"64G\"\n[qos.debug]\nmax = \"8G\"\n{ENFORCEMENT}"
    ));
    let dir = user_dir("k1-qos");
    let script = format!(
        "echo quota=$GPU_MEM_QUOTA; g=${{SLURM_JOB_GPUS%%,*}}; f={FAKE_PROCS}/$g/$$; \
         echo 70G > $f; sleep 60; rm -f $f; echo not-stopped"
    );
    let job = sbatch(&dir, &["--gres=gpu:1", "--gpu-mem-quota=20G"], &script);
    let _cancel = Cancel(job);
    let cancelled = wait_until(Duration::from_secs(45), || {
        job_field(job, "JobState") == "CANCELLED"
    });
    let output = std::fs::read_to_string(dir.join(format!("job-{job}.out"))).unwrap_or_default();
    let lines = watchdog_lines(job);
    assert!(
        cancelled,
        "job {job} is {} at 70G of its 20G: {output} {lines:#?}",
        job_field(job, "JobState")
    );
    assert!(output.contains("quota=20G"), "{output}");
    assert!(!output.contains("not-stopped"), "{output}");
    assert!(
        lines.iter().any(|l| l.contains("with quota 20G per GPU")),
        "{lines:#?}"
    );
    // Before 26.05 the watchdog decided again with slurmctld's QOS; from 26.05 the prolog knew it.
    let settled = lines
        .iter()
        .any(|l| l.contains("the job's QOS 'normal' from slurmctld: quota 20G per GPU"));
    eprintln!(
        "k1 (QOS): job {job} cancelled at 70G of 20G ({}) in {:?}",
        if settled {
            "QOS read by the watchdog"
        } else {
            "QOS in the prolog's credential"
        },
        t0.elapsed()
    );
}

/// K1, the salloc route, on every version: an allocation asking above its account's cap (not
/// known on the submit host, so accepted there), then `srun --gpu-mem-quota=1G` in it. The job
/// prolog refuses the job's request; every task of the job on the node is refused, whatever the
/// step asks, with the reason in the step's output and slurmd's log at error level.
#[test]
#[ignore = "needs the dev cluster: slurm/dev-cluster test"]
fn k1_an_allocation_the_node_refuses_runs_no_task_there() {
    let t0 = Instant::now();
    let _policy = install_policy(&format!(
        "[defaults]\ndefault = \"none\"\nmax = \"64G\"\n[account.chemistry]\nmax = \"30G\"\n{ENFORCEMENT}"
    ));
    let job = allocation("35G");
    let _cancel = Cancel(job);
    let task = "echo the-task-ran";
    let refusal = "refusing to start the task: the job prolog refused the job's request on this \
                   node: --gpu-mem-quota=35G exceeds the 30G cap for account 'chemistry'";
    let jobid = format!("--jobid={job}");
    for asked in [&["--gpu-mem-quota=1G"][..], &[]] {
        let args = [&[jobid.as_str()][..], asked, &["sh", "-c", task]].concat();
        let out = as_user("srun", &args, &[]);
        let all = text(&out);
        assert!(!out.status.success(), "{asked:?}: {all}");
        assert!(!all.contains("the-task-ran"), "{asked:?}: {all}");
        assert!(all.contains(refusal), "{asked:?}: {all}");
    }
    let log = slurmd_log();
    assert!(
        log.contains(&format!(
            "error: gpu-mem-quota: prolog: job {job}: every task of the job on this node is refused: \
             --gpu-mem-quota=35G exceeds the 30G cap for account 'chemistry'"
        )),
        "slurmd.log has no refusal at error level for job {job}"
    );
    assert!(watchdog_lines(job).is_empty(), "{:#?}", watchdog_lines(job));
    // The control: within the cap, the same srun runs, watched.
    let control = allocation("20G");
    let _cancel_control = Cancel(control);
    let out = as_user(
        "srun",
        &[
            &format!("--jobid={control}"),
            "--gpu-mem-quota=1G",
            "sh",
            "-c",
            task,
        ],
        &[],
    );
    assert!(
        out.status.success() && text(&out).contains("the-task-ran"),
        "{}",
        text(&out)
    );
    eprintln!(
        "k1 (salloc): job {job} refused, control {control} ran, in {:?}",
        t0.elapsed()
    );
}

/// One count per request type of sdiag's "by message type" block.
fn sdiag_counts() -> Vec<(String, u64)> {
    let out = admin("sdiag", &[]);
    let block = out
        .split("Remote Procedure Call statistics by message type")
        .nth(1)
        .and_then(|rest| rest.split("Remote Procedure Call statistics by user").next())
        .unwrap_or_default();
    block
        .lines()
        .filter_map(|line| {
            let name = line.split_whitespace().next()?;
            let count = line
                .split("count:")
                .nth(1)?
                .split_whitespace()
                .next()?
                .parse()
                .ok()?;
            Some((name.to_string(), count))
        })
        .collect()
}

/// slurmctld's job and partition reads while a CPU-only job runs `steps` srun steps. Nothing
/// else asks meanwhile: the job is submitted without --wait and its end is read from its output.
fn reads_of_a_cpu_only_job(dir: &Path, steps: u32) -> u64 {
    admin("sdiag", &["-r"]);
    let script = format!("for i in $(seq {steps}); do srun -n1 true; done; echo steps-done");
    let job = sbatch(dir, &["-n1"], &script);
    let output = dir.join(format!("job-{job}.out"));
    let done = wait_until(Duration::from_secs(120), || {
        std::fs::read_to_string(&output).is_ok_and(|o| o.contains("steps-done"))
    });
    assert!(
        done,
        "job {job}: {}",
        std::fs::read_to_string(&output).unwrap_or_default()
    );
    // Its epilog and the batch step's end.
    std::thread::sleep(Duration::from_secs(5));
    let counts = sdiag_counts();
    eprintln!("k5: job {job}, {steps} step(s): {counts:?}");
    counts
        .iter()
        .filter(|(name, _)| {
            matches!(
                name.as_str(),
                "REQUEST_JOB_INFO_SINGLE" | "REQUEST_JOB_INFO" | "REQUEST_PARTITION_INFO"
            )
        })
        .map(|(_, count)| count)
        .sum()
}

/// K5: under a policy with account rules and shards (the example's), every srun step of a job
/// with no GPU on the node asked slurmctld for the job's record (a job read and a partition read
/// per step and node). Now such a step decides nothing and asks nothing: eleven steps cost
/// slurmctld what one does.
#[test]
#[ignore = "needs the dev cluster: slurm/dev-cluster test"]
fn k5_cpu_only_steps_cost_slurmctld_nothing() {
    let _policy = install_policy(&example_policy());
    let dir = user_dir("k5");
    let one = reads_of_a_cpu_only_job(&dir, 1);
    let eleven = reads_of_a_cpu_only_job(&dir, 11);
    eprintln!("k5: job and partition reads: {one} for 1 step, {eleven} for 11 steps");
    assert!(
        eleven <= one + 2,
        "10 more CPU-only steps made {} more job/partition reads of slurmctld",
        eleven.saturating_sub(one)
    );
}

/// K1 on Slurm before 23.02 (SchedMD bug 15656, fixed in 23.02.0 by "Remove backoff from cred
/// removal logic"): slurmd purges a requeued job's earlier credential state at most every 2 s, so
/// a relaunch within 2 s of another purge is taken for a step of the old run: `reissued job
/// credential`, and no job prolog. Such a run has no watchdog; its tasks are refused (K1), and the
/// job is requeued rather than failed, so that its next run has its prolog. Made to happen in
/// about half the runs on 22.05: the first run takes 5 s to end after its SIGTERM, so slurmd's
/// earlier state for the job has not expired yet when the next run comes (the lab's
/// `cred_expire=5`, and slurmctld's requeue delay of 6 s), and a neighbour's srun steps, two at a
/// time without pause, keep slurmd purging. On later Slurm the prolog runs, and the run goes as
/// any restart.
#[test]
#[ignore = "needs the dev cluster: slurm/dev-cluster test"]
fn a_requeued_run_whose_prolog_slurm_skipped_is_requeued_again_not_failed() {
    let _policy = install_policy(OPEN_POLICY);
    let dir = user_dir("missed-prolog");
    let busy = sbatch(
        &dir,
        &["--job-name=busy", "-n2"],
        "for i in $(seq 3000); do srun -n1 --quiet true & srun -n1 --quiet true; wait; done",
    );
    let _cancel_busy = Cancel(busy);
    let job = sbatch(
        &dir,
        &[
            "--gres=gpu:1",
            "--gpu-mem-quota=4G",
            "--requeue",
            "--open-mode=append",
        ],
        "echo run=${SLURM_RESTART_COUNT:-0}; \
         if [ ${SLURM_RESTART_COUNT:-0} = 0 ]; then trap 'sleep 5; exit 0' TERM; sleep 600 & wait; fi; \
         echo done",
    );
    let _cancel = Cancel(job);
    let running = wait_until(Duration::from_secs(60), || {
        job_field(job, "JobState") == "RUNNING" && job_field(busy, "JobState") == "RUNNING"
    });
    assert!(
        running,
        "job {job} is {}, busy {busy} is {}",
        job_field(job, "JobState"),
        job_field(busy, "JobState")
    );
    std::thread::sleep(Duration::from_secs(2));
    admin("scontrol", &["requeue", &job.to_string()]);
    let mut state = String::new();
    let ended = wait_until(Duration::from_secs(900), || {
        state = job_field(job, "JobState");
        matches!(state.as_str(), "COMPLETED" | "FAILED" | "CANCELLED")
    });
    let output = std::fs::read_to_string(dir.join(format!("job-{job}.out"))).unwrap_or_default();
    assert!(ended, "job {job} is {state}: {output}");
    let log = slurmd_log();
    let skipped = log.contains(&format!("job {job}: refusing the step's tasks on node "))
        && log.contains("the job is requeued, so that its next run has its prolog");
    eprintln!(
        "job {job}: {state} after {} restarts; reissued credential said {} time(s); a run without \
         its prolog {}",
        job_field(job, "Restarts"),
        log.matches(&format!("reissued job credential for job {job}"))
            .count(),
        if skipped { "was requeued" } else { "did not happen" }
    );
    assert_eq!(state, "COMPLETED", "job {job}: {output}");
    assert!(output.contains("done"), "job {job}: {output}");
}
