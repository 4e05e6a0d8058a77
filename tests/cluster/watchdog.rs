//! The per-job watchdog on the cluster, with the fake NVML: jobs "allocate" GPU memory by writing
//! `/var/lib/fake-nvml/procs/<gpu>/<pid>` (tests/fake-nvml/README.md).

use std::path::Path;
use std::time::{Duration, Instant};

use crate::support::*;

const FAKE_NVML: &str = "/var/lib/fake-nvml";

/// Fast enforcement for tests: sample every 500 ms, 1 s of grace.
fn policy(extra: &str) -> String {
    format!(
        "[defaults]\ndefault = \"none\"\n\n[enforcement]\ninterval = \"500ms\"\ngrace = \"1s\"\nwarn_threshold = 0.9\n{extra}"
    )
}

/// Shell: claim `$1` of GPU memory on the job's GPU for this shell's pid.
const CLAIM: &str = "GPU=${SLURM_JOB_GPUS%%,*}; claim() { echo \"$1\" > /var/lib/fake-nvml/procs/$GPU/$$; }";

fn watchdog_pids(job: u32) -> Vec<u32> {
    let needle = format!("--job={job}");
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let words: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
            words.iter().any(|w| *w == b"watchdog") && words.iter().any(|w| *w == needle.as_bytes())
        })
        .collect()
}

/// After the job is gone: no watchdog process and no runtime files are left for it.
fn assert_cleaned_up(job: u32) {
    let dir = runtime_dir().join("jobs").join(job.to_string());
    let clean = wait_until(Duration::from_secs(10), || {
        watchdog_pids(job).is_empty() && !dir.exists()
    });
    assert!(
        clean,
        "job {job}: watchdog {:?} or {} left behind",
        watchdog_pids(job),
        dir.display()
    );
}

#[test]
#[ignore = "needs the dev cluster: slurm/dev-cluster test"]
fn a_job_under_its_quota_runs_untouched_and_its_peak_is_logged() {
    let _policy = install_policy(&policy(""));
    let dir = user_dir("wd-under");
    let script = format!("{CLAIM}; claim 30G; sleep 3; cat \"$GPU_MEM_QUOTA_STATUS_FILE\"; rm -f {FAKE_NVML}/procs/$GPU/$$; echo done");
    let job = sbatch_wait(&dir, &["--gres=gpu:1", "--gpu-mem-quota=40G"], &script);
    assert!(job.output.contains("done"), "job {}: {}", job.id, job.output);
    assert!(
        job.output.contains("\"state\":\"ok\""),
        "status file: {}",
        job.output
    );
    assert!(
        job.output.contains("\"used_bytes\":32212254720"),
        "status file: {}",
        job.output
    );
    assert_eq!(job_field(job.id, "JobState"), "COMPLETED");
    assert_eq!(job_field(job.id, "Restarts"), "0");
    assert_cleaned_up(job.id);
    // The record of the run reached the job's AdminComment at its end, and accounting (sacct).
    let comment = job_field(job.id, "AdminComment");
    assert!(
        comment.contains("q=40G") && comment.contains("g0=30G"),
        "AdminComment: {comment}"
    );
    let in_sacct = wait_until(Duration::from_secs(20), || {
        admin(
            "sacct",
            &["-n", "-X", "-P", "-j", &job.id.to_string(), "-o", "AdminComment"],
        )
        .contains("g0=30G")
    });
    assert!(in_sacct, "sacct has no record for job {}", job.id);
    assert!(
        syslog().contains(&format!("job {}: stopping: GPU ", job.id)) && syslog().contains("peak 30G"),
        "no peak in syslog for job {}",
        job.id
    );
}

#[test]
#[ignore = "needs the dev cluster: slurm/dev-cluster test"]
fn the_warn_threshold_shows_in_the_status_file_within_an_interval() {
    let _policy = install_policy(&policy(""));
    let dir = user_dir("wd-warn");
    // 37G of 40G is 92.5%: over the 90% warn threshold, under the quota.
    let script = format!(
        "{CLAIM}; claim 37G; for i in $(seq 20); do sleep 0.25; grep -q '\"state\":\"warn\"' \"$GPU_MEM_QUOTA_STATUS_FILE\" 2>/dev/null && break; done; \
         echo after=$i; cat \"$GPU_MEM_QUOTA_STATUS_FILE\"; rm -f {FAKE_NVML}/procs/$GPU/$$"
    );
    let job = sbatch_wait(&dir, &["--gres=gpu:1", "--gpu-mem-quota=40G"], &script);
    assert!(
        job.output.contains("\"state\":\"warn\""),
        "job {}: {}",
        job.id,
        job.output
    );
    // Two checks of a quarter second each = one 500 ms interval (plus the first sample's start).
    let after: u32 = job
        .output
        .split("after=")
        .nth(1)
        .and_then(|s| s.lines().next()?.parse().ok())
        .unwrap_or(99);
    assert!(
        after <= 8,
        "the warning took {after} quarter-seconds: {}",
        job.output
    );
    assert_eq!(job_field(job.id, "JobState"), "COMPLETED");
    assert_cleaned_up(job.id);
}

#[test]
#[ignore = "needs the dev cluster: slurm/dev-cluster test"]
fn a_job_over_its_quota_is_requeued_then_escalated() {
    let _policy = install_policy(&policy(
        "action = \"requeue\"\nmax_requeues = 1\nescalation = \"cancel\"\n",
    ));
    let dir = user_dir("wd-over");
    // Every run allocates 50G of its 40G quota and then waits; each run says which it is first.
    let script =
        format!("echo run=${{SLURM_RESTART_COUNT:-0}}; {CLAIM}; claim 50G; sleep 120; echo not-stopped");
    let job = sbatch(
        &dir,
        &["--open-mode=append", "--gres=gpu:1", "--gpu-mem-quota=40G"],
        &script,
    );
    let started = Instant::now();

    // First run: requeued within interval + grace + 1 s of running (the restart takes ~10 s more).
    assert!(
        wait_until(Duration::from_secs(60), || job_field(job, "Restarts") == "1"),
        "job {job} never requeued"
    );
    let comment = job_field(job, "AdminComment");
    assert!(
        comment.contains("gpu-mem-quota:v1{") && comment.contains("requeued=1"),
        "AdminComment: {comment}"
    );
    let log = syslog();
    assert!(
        log.contains(&format!("job {job}: GPU memory 50G over its 40G quota")),
        "no requeue line in syslog"
    );

    // Second run: SLURM_RESTART_COUNT=1, over again, max_requeues reached: escalated to cancel.
    let ended = wait_until(Duration::from_secs(90), || {
        job_field(job, "JobState") == "CANCELLED"
    });
    assert!(
        ended,
        "job {job} not cancelled after {:?}: {}",
        started.elapsed(),
        job_field(job, "JobState")
    );
    let output = std::fs::read_to_string(dir.join(format!("job-{job}.out"))).unwrap_or_default();
    assert!(
        output.contains("run=0") && output.contains("run=1"),
        "output: {output}"
    );
    assert!(!output.contains("not-stopped"), "output: {output}");
    assert!(
        syslog().contains(&format!("job {job}: requeued 1 time(s) for GPU memory already")),
        "no escalation line"
    );
    let comment = job_field(job, "AdminComment");
    assert!(
        comment.contains("cancelled=1"),
        "AdminComment after the escalation: {comment}"
    );
    assert_cleaned_up(job);
}

#[test]
#[ignore = "needs the dev cluster: slurm/dev-cluster test"]
fn another_jobs_memory_on_the_same_gpu_never_counts() {
    let _policy = install_policy(&policy(""));
    // A process outside any job holds 70G on GPU 0 (root-owned claim for a root process).
    let mut stranger = std::process::Command::new("sleep").arg("60").spawn().unwrap();
    let claim = Path::new(FAKE_NVML).join(format!("procs/0/{}", stranger.id()));
    std::fs::write(&claim, "70G\n").unwrap();
    let dir = user_dir("wd-stranger");
    let script =
        format!("{CLAIM}; echo gpu=$GPU; claim 5G; sleep 3; rm -f {FAKE_NVML}/procs/$GPU/$$; echo done");
    let job = sbatch_wait(
        &dir,
        &["--gres=gpu:1", "-w", &hostname(), "--gpu-mem-quota=40G"],
        &script,
    );
    let _ = std::fs::remove_file(&claim);
    let _ = stranger.kill();
    let _ = stranger.wait();
    assert!(
        job.output.contains("gpu=0"),
        "the job was not on GPU 0: {}",
        job.output
    );
    assert!(job.output.contains("done"), "job {}: {}", job.id, job.output);
    assert_eq!(job_field(job.id, "JobState"), "COMPLETED");
    assert_eq!(job_field(job.id, "Restarts"), "0");
}

#[test]
#[ignore = "needs the dev cluster: slurm/dev-cluster test"]
fn cancelled_and_jobs_without_gpus_leave_nothing_behind() {
    let _policy = install_policy(&policy(""));
    let dir = user_dir("wd-cancel");
    let job = sbatch(&dir, &["--gres=gpu:1", "--gpu-mem-quota=40G"], "sleep 120");
    assert!(
        wait_until(Duration::from_secs(30), || !watchdog_pids(job).is_empty()),
        "job {job}: no watchdog"
    );
    admin("scancel", &[&job.to_string()]);
    assert_cleaned_up(job);

    let cpu_only = sbatch_wait(&dir, &["--gpu-mem-quota=40G"], "sleep 1; echo done");
    assert!(cpu_only.output.contains("done"));
    assert!(watchdog_pids(cpu_only.id).is_empty());
    assert_cleaned_up(cpu_only.id);
}

#[test]
#[ignore = "needs the dev cluster: slurm/dev-cluster test"]
fn nvml_faults_never_harm_the_job() {
    // A missing NVML library: the job runs, the log says why it is unchecked.
    let _policy = install_policy(
        &policy("nvml_library = \"/nonexistent/libnvidia-ml.so.1\"\n")
            .replace("[enforcement]\n", "[enforcement]\n"),
    );
    let dir = user_dir("wd-faults");
    let script = format!("{CLAIM}; claim 50G; sleep 3; rm -f {FAKE_NVML}/procs/$GPU/$$; echo done");
    let job = sbatch_wait(&dir, &["--gres=gpu:1", "--gpu-mem-quota=40G"], &script);
    assert!(job.output.contains("done"), "job {}: {}", job.id, job.output);
    assert_eq!(job_field(job.id, "JobState"), "COMPLETED");
    assert!(
        syslog().contains(&format!("job {}: cannot load the NVML library", job.id)),
        "no log line"
    );
    assert_cleaned_up(job.id);
    drop(_policy);

    // Init fails, a GPU is lost, the process list grows between NVML's two calls.
    for (faults, expect) in [
        ("init = \"DRIVER_NOT_LOADED\"\n", "Driver Not Loaded"),
        ("procs_grow_between_calls = 10\n", ""),
    ] {
        let _policy = install_policy(&policy(""));
        std::fs::write(Path::new(FAKE_NVML).join("faults.toml"), faults).unwrap();
        let job = sbatch_wait(&dir, &["--gres=gpu:1", "--gpu-mem-quota=40G"], &script);
        let _ = std::fs::remove_file(Path::new(FAKE_NVML).join("faults.toml"));
        let _ = std::fs::remove_file(Path::new(FAKE_NVML).join("faults.state"));
        assert!(
            job.output.contains("done"),
            "{faults}: job {}: {}",
            job.id,
            job.output
        );
        assert_eq!(job_field(job.id, "Restarts"), "0", "{faults}");
        if !expect.is_empty() {
            let log = syslog();
            let line = log
                .lines()
                .find(|l| l.contains(&format!("job {}: ", job.id)) && l.contains("NVML"));
            assert!(line.is_some(), "{faults}: no NVML line for job {}", job.id);
        }
        assert_cleaned_up(job.id);
    }
}

#[test]
#[ignore = "needs the dev cluster: slurm/dev-cluster test"]
fn a_gpu_lost_mid_run_never_harms_the_job() {
    let _policy = install_policy(&policy(""));
    let dir = user_dir("wd-lost");
    let (started, lost) = (dir.join("started"), dir.join("lost"));
    let script = format!(
        "{CLAIM}; claim 10G; touch {s}; while [ ! -e {l} ]; do sleep 0.2; done; claim 50G; sleep 4; \
         rm -f {FAKE_NVML}/procs/$GPU/$$; echo done",
        s = started.display(),
        l = lost.display()
    );
    let job = sbatch(&dir, &["--gres=gpu:1", "--gpu-mem-quota=40G"], &script);
    assert!(
        wait_until(Duration::from_secs(30), || started.exists()),
        "job {job} did not start"
    );
    std::thread::sleep(Duration::from_secs(1));
    // Every GPU of the node falls off the bus: NVML answers GPU_IS_LOST for each.
    let devices = Path::new(FAKE_NVML).join("devices.toml");
    let healthy = std::fs::read_to_string(&devices).unwrap();
    std::fs::write(&devices, healthy.replace("[[gpu]]\n", "[[gpu]]\nlost = true\n")).unwrap();
    run_checked(std::process::Command::new("touch").arg(&lost));
    let ended = wait_until(Duration::from_secs(30), || {
        job_field(job, "JobState") == "COMPLETED"
    });
    std::fs::write(&devices, healthy).unwrap();
    assert!(ended, "job {job}: {}", job_field(job, "JobState"));
    assert_eq!(
        job_field(job, "Restarts"),
        "0",
        "a lost GPU must not cost the job"
    );
    let log = syslog();
    assert!(
        log.lines()
            .any(|l| l.contains(&format!("job {job}: cannot sample GPU memory"))
                && l.contains("keeps running")),
        "no log line for the lost GPU"
    );
    assert_cleaned_up(job);
}

#[test]
#[ignore = "needs the dev cluster: slurm/dev-cluster test"]
fn a_job_named_like_an_admin_comment_is_still_enforced() {
    // One requeue of ours allowed, then cancel. The job's name imitates an AdminComment, so next to
    // the site's real one it makes the AdminComment unreadable: the watchdog must then count the
    // admin's requeue as one of its own and escalate, not requeue as if it were a first offence.
    let _policy = install_policy(&policy(
        "action = \"requeue\"\nmax_requeues = 1\nescalation = \"cancel\"\n",
    ));
    let dir = user_dir("wd-imitation");
    let script = format!(
        "{CLAIM}; echo run=${{SLURM_RESTART_COUNT:-0}}; \
         if [ \"${{SLURM_RESTART_COUNT:-0}}\" -ge 1 ]; then claim 50G; fi; sleep 120; echo not-stopped"
    );
    let job = sbatch(
        &dir,
        &[
            "--open-mode=append",
            "--gres=gpu:1",
            "--gpu-mem-quota=40G",
            "--job-name=evade AdminComment=gpu-mem-quota:v1{}",
        ],
        &script,
    );
    assert!(
        wait_until(Duration::from_secs(30), || job_field(job, "JobState")
            == "RUNNING"),
        "job {job} did not start"
    );
    admin(
        "scontrol",
        &["update", &format!("JobId={job}"), "AdminComment=site-note"],
    );
    admin("scontrol", &["requeue", &job.to_string()]);
    let ended = wait_until(Duration::from_secs(90), || {
        job_field(job, "JobState") == "CANCELLED"
    });
    assert!(ended, "job {job} not cancelled: {}", job_field(job, "JobState"));
    assert_eq!(
        job_field(job, "Restarts"),
        "1",
        "requeued again instead of escalated"
    );
    let log = syslog();
    assert!(
        log.lines().any(
            |l| l.contains(&format!("job {job}: the job's AdminComment cannot be read"))
                && l.contains("counting all 1 restart(s)")
        ),
        "no log line for the unreadable AdminComment"
    );
    let output = std::fs::read_to_string(dir.join(format!("job-{job}.out"))).unwrap_or_default();
    assert!(
        output.contains("run=1") && !output.contains("not-stopped"),
        "output: {output}"
    );
    assert_cleaned_up(job);
}

fn hostname() -> String {
    admin("hostname", &["-s"]).trim().to_string()
}
