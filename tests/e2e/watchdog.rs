//! The per-job watchdog on the cluster, with the fake NVML: jobs "allocate" GPU memory by writing
//! `/var/lib/fake-nvml/procs/<gpu>/<pid>` (tests/fake-nvml/README.md).

use std::time::{Duration, Instant};

use crate::support::*;

/// The fake NVML scenario as jobs see it (this process: `fake_nvml_dir()`).
const FAKE_NVML: &str = "/var/lib/fake-nvml";

/// Fast enforcement for tests: sample every 500 ms, 1 s of grace.
fn policy(extra: &str) -> String {
    format!(
        "[defaults]\ndefault = \"none\"\n\n[enforcement]\ninterval = \"500ms\"\ngrace = \"1s\"\nwarn_threshold = 0.9\n{extra}"
    )
}

/// Shell: claim `$1` of GPU memory on the job's GPU for this shell's pid.
const CLAIM: &str = "GPU=${SLURM_JOB_GPUS%%,*}; claim() { echo \"$1\" > /var/lib/fake-nvml/procs/$GPU/$$; }";

/// Waits until the batch script of `job` (run with `sbatch(dir, ...)`) has printed `started`: its
/// task is past the plugin's check that the job's watchdog runs and has said whether the hard
/// limit is in force (`task_init_privileged`). A test that kills the watchdog or removes its pid
/// file before then gets the task refused (K1): seen in CI on 22.05 and in the v2 lab's VM.
fn wait_for_batch_task(dir: &std::path::Path, job: u32) {
    let out = dir.join(format!("job-{job}.out"));
    assert!(
        wait_until(Duration::from_secs(60), || std::fs::read_to_string(&out)
            .is_ok_and(|text| text.lines().any(|l| l == "started"))),
        "job {job}: its batch script never started: {}",
        std::fs::read_to_string(&out).unwrap_or_default()
    );
}

fn watchdog_pids(job: u32) -> Vec<u32> {
    let needle = format!("--job={job}");
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let words: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
            words.contains(&&b"watchdog"[..]) && words.contains(&needle.as_bytes())
        })
        .collect()
}

/// After the job is gone: no watchdog process and no runtime files are left for it.
pub(crate) fn assert_cleaned_up(job: u32) {
    let dir = runtime_dir().join("jobs").join(job.to_string());
    let clean = wait_until(Duration::from_secs(20), || {
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
    assert_eq!(ended_state(job.id), "COMPLETED");
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
    assert_eq!(ended_state(job.id), "COMPLETED");
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
    let claim = fake_nvml_dir().join(format!("procs/0/{}", stranger.id()));
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
    assert_eq!(ended_state(job.id), "COMPLETED");
    assert_eq!(job_field(job.id, "Restarts"), "0");
}

#[test]
#[ignore = "needs the dev cluster: slurm/dev-cluster test"]
fn cancelled_and_jobs_without_gpus_leave_nothing_behind() {
    let _policy = install_policy(&policy(""));
    let dir = user_dir("wd-cancel");
    let job = sbatch(
        &dir,
        &["--gres=gpu:1", "--gpu-mem-quota=40G"],
        "echo started; sleep 120",
    );
    assert!(
        wait_until(Duration::from_secs(30), || !watchdog_pids(job).is_empty()),
        "job {job}: no watchdog"
    );
    // Cancelled once its task runs: a SIGTERM that reaches a task before its exec, while it waits
    // for the watchdog's word on the hard limit, is lost in slurmstepd (the task runs until
    // KillWait's SIGKILL, 30 s later), which is not this test's case.
    wait_for_batch_task(&dir, job);
    admin("scancel", &[&job.to_string()]);
    assert_cleaned_up(job);

    let cpu_only = sbatch_wait(&dir, &["--gpu-mem-quota=40G"], "sleep 1; echo done");
    assert!(cpu_only.output.contains("done"));
    assert!(watchdog_pids(cpu_only.id).is_empty());
    assert_cleaned_up(cpu_only.id);
}

/// A watchdog the plugin cannot stop at the job's end (its pid file lost: the exit hook has no one
/// to signal) ends with its job all the same, within seconds: the job's cgroup has no process left
/// (for presence::EPILOG_GRACE), and slurmctld says the run is over.
/// While watching, and while it waits for an NVML that cannot be loaded.
#[test]
#[ignore = "needs the dev cluster: slurm/dev-cluster test"]
fn a_watchdog_no_signal_reaches_still_ends_with_its_job() {
    for nvml in ["", "nvml_library = \"/nonexistent/libnvidia-ml.so.1\"\n"] {
        let _policy = install_policy(&policy(nvml));
        let dir = user_dir("wd-unsignalled");
        let job = sbatch(
            &dir,
            &["--gres=gpu:1", "--gpu-mem-quota=8G"],
            "echo started; sleep 8",
        );
        wait_for_batch_task(&dir, job);
        let pid_file = runtime_dir()
            .join("jobs")
            .join(job.to_string())
            .join("watchdog.pid");
        assert!(
            wait_until(Duration::from_secs(30), || !watchdog_pids(job).is_empty()
                && pid_file.exists()),
            "job {job}: no watchdog"
        );
        std::fs::remove_file(&pid_file).unwrap();
        assert!(wait_until(Duration::from_secs(40), || job_field(job, "JobState")
            == "COMPLETED"));
        // The slurmctld check would end it too, but only every 30 s.
        assert_cleaned_up(job);
        assert!(syslog().contains(&format!(
            "job {job}: the job has no process left on this node (its cgroup): the watchdog stops"
        )));
    }
}

#[test]
#[ignore = "needs the dev cluster: slurm/dev-cluster test"]
fn nvml_faults_never_harm_the_job() {
    // A missing NVML library: the job runs, the log says why it is unchecked.
    let _policy = install_policy(&policy("nvml_library = \"/nonexistent/libnvidia-ml.so.1\"\n"));
    let dir = user_dir("wd-faults");
    let script = format!("{CLAIM}; claim 50G; sleep 3; rm -f {FAKE_NVML}/procs/$GPU/$$; echo done");
    let job = sbatch_wait(&dir, &["--gres=gpu:1", "--gpu-mem-quota=40G"], &script);
    assert!(job.output.contains("done"), "job {}: {}", job.id, job.output);
    assert_eq!(ended_state(job.id), "COMPLETED");
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
        std::fs::write(fake_nvml_dir().join("faults.toml"), faults).unwrap();
        let job = sbatch_wait(&dir, &["--gres=gpu:1", "--gpu-mem-quota=40G"], &script);
        let _ = std::fs::remove_file(fake_nvml_dir().join("faults.toml"));
        let _ = std::fs::remove_file(fake_nvml_dir().join("faults.state"));
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
    let devices = fake_nvml_dir().join("devices.toml");
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
    // One requeue of ours allowed, then cancel. The job's name imitates an AdminComment next to the
    // site's real one. The AdminComment is read from `squeue --json` (review F4), where a name
    // cannot pose as it: the imitation changes nothing. The admin's requeue is not ours, the
    // watchdog's first is, and its second offence is escalated; the site's text stays.
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
        "2",
        "the admin's requeue, then one of ours, then the escalation"
    );
    let log = syslog();
    assert!(
        log.lines().any(|l| l.contains(&format!(
            "job {job}: requeued 1 time(s) for GPU memory already (max_requeues = 1): escalating"
        ))),
        "no escalation line"
    );
    assert!(
        !log.lines()
            .any(|l| l.contains(&format!("job {job}: the job's AdminComment cannot be read"))),
        "the job's name made its AdminComment unreadable"
    );
    let output = std::fs::read_to_string(dir.join(format!("job-{job}.out"))).unwrap_or_default();
    assert!(
        output.contains("run=2") && !output.contains("not-stopped"),
        "output: {output}"
    );
    assert_cleaned_up(job);
}

fn hostname() -> String {
    admin("hostname", &["-s"]).trim().to_string()
}

/// The job's Prometheus textfile in the lab's metrics directory (`metrics::file_name`).
fn metrics_file(job: u32) -> std::path::PathBuf {
    lab().join(format!("gmq/metrics/gpu_mem_quota_job_{job}.prom"))
}

/// How many lines this run's syslog has that contain `needle`.
fn syslog_count(needle: &str) -> usize {
    syslog().lines().filter(|l| l.contains(needle)).count()
}

#[test]
#[ignore = "needs the dev cluster: slurm/dev-cluster test"]
fn a_killed_watchdog_never_harms_the_job_and_leaves_nothing_behind() {
    let _policy = install_policy(&policy(""));
    let dir = user_dir("wd-killed");
    let go = dir.join("go");
    let script = format!(
        "{CLAIM}; claim 10G; echo started; while [ ! -e {go} ]; do sleep 0.2; done; \
         rm -f {FAKE_NVML}/procs/$GPU/$$; srun -n1 true; echo done",
        go = go.display()
    );
    let job = sbatch(&dir, &["--gres=gpu:1", "--gpu-mem-quota=40G"], &script);
    wait_for_batch_task(&dir, job);
    let metrics = metrics_file(job);
    assert!(
        wait_until(Duration::from_secs(30), || watchdog_pids(job).len() == 1
            && metrics.exists()),
        "job {job}: watchdog {:?}, metrics file {} there: {}",
        watchdog_pids(job),
        metrics.display(),
        metrics.exists()
    );
    let watchdog = watchdog_pids(job)[0];
    admin("kill", &["-KILL", &watchdog.to_string()]);
    assert!(
        wait_until(Duration::from_secs(5), || watchdog_pids(job).is_empty()),
        "job {job}: the watchdog survived SIGKILL"
    );
    // The job runs on, unwatched; the dead watchdog's files are still there (nobody removed them yet).
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(job_field(job, "JobState"), "RUNNING");
    assert!(runtime_dir().join(format!("jobs/{job}")).exists());
    assert!(metrics.exists());

    run_checked(std::process::Command::new("touch").arg(&go));
    assert!(
        wait_until(Duration::from_secs(30), || job_field(job, "JobState")
            == "COMPLETED"),
        "job {job}: {}",
        job_field(job, "JobState")
    );
    assert_eq!(job_field(job, "ExitCode"), "0:0");
    assert_eq!(job_field(job, "Restarts"), "0");
    let output = std::fs::read_to_string(dir.join(format!("job-{job}.out"))).unwrap_or_default();
    assert!(output.contains("done"), "job {job}: {output}");
    // The step started after the watchdog died would run unwatched: its task is refused (review
    // K1), and the user and the node's log are told why. The task already running is left alone.
    let refused = "refusing to start the task: no watchdog of the job runs on this node";
    assert!(
        output.contains(&format!("job {job}: {refused}")),
        "job {job}: {output}"
    );
    assert!(
        slurmd_log().contains(&format!("job {job}: refusing the step's tasks on node ")),
        "job {job}: the step's refusal is not in slurmd.log"
    );
    // At the job's end the plugin finds no live watchdog and removes what the dead one left.
    assert_cleaned_up(job);
    assert!(
        wait_until(Duration::from_secs(10), || !metrics.exists()),
        "job {job}: {} left behind",
        metrics.display()
    );
}

/// Mounts a tiny tmpfs at `dir` and fills it: every write there fails with ENOSPC, for root too.
/// Unmounted when dropped.
struct FullDisk {
    dir: std::path::PathBuf,
}

impl FullDisk {
    fn mount(dir: std::path::PathBuf) -> Result<FullDisk, String> {
        std::fs::create_dir_all(&dir).map_err(|e| format!("mkdir {}: {e}", dir.display()))?;
        let mounted = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=16k,mode=755", "gmq-full"])
            .arg(&dir)
            .output()
            .map_err(|e| format!("cannot run mount: {e}"))?;
        if !mounted.status.success() {
            return Err(format!(
                "cannot mount a tmpfs: {}",
                String::from_utf8_lossy(&mounted.stderr).trim()
            ));
        }
        let disk = FullDisk { dir };
        let chunk = vec![0u8; 4096];
        let mut filler = std::fs::File::create(disk.filler()).map_err(|e| e.to_string())?;
        while std::io::Write::write_all(&mut filler, &chunk).is_ok() {}
        Ok(disk)
    }

    fn filler(&self) -> std::path::PathBuf {
        self.dir.join("filler")
    }
}

impl Drop for FullDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.dir).status();
        let _ = std::fs::remove_dir(&self.dir);
    }
}

#[test]
#[ignore = "needs the dev cluster: slurm/dev-cluster test"]
fn a_full_metrics_disk_is_logged_once_and_enforcement_goes_on() {
    let full = match FullDisk::mount(lab().join("gmq/metrics-full")) {
        Ok(full) => full,
        Err(reason) => {
            eprintln!("skipped: {reason} (needs root and tmpfs)");
            return;
        }
    };
    let _policy = install_policy(&format!(
        "{}\n[metrics]\ntextfile_dir = \"{}\"\n",
        policy("action = \"cancel\"\n"),
        full.dir.display()
    ));
    let dir = user_dir("wd-disk-full");
    let go = dir.join("go");
    let script = format!(
        "{CLAIM}; claim 10G; while [ ! -e {go} ]; do sleep 0.2; done; claim 50G; sleep 60; echo not-stopped",
        go = go.display()
    );
    let job = sbatch(&dir, &["--gres=gpu:1", "--gpu-mem-quota=40G"], &script);
    let disk_full = format!(
        "job {job}: cannot write metrics to {}: No space left on device (os error 28); metrics off for this job",
        full.dir.display()
    );
    assert!(
        wait_until(Duration::from_secs(30), || syslog_count(&disk_full) > 0),
        "job {job}: no disk-full line; watchdog {:?}",
        watchdog_pids(job)
    );
    // Room again: metrics stay off for this job (no file, no retry), and nothing more is logged.
    std::fs::remove_file(full.filler()).unwrap();
    std::thread::sleep(Duration::from_secs(3));
    let names: Vec<String> = std::fs::read_dir(&full.dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        names.is_empty(),
        "job {job}: metrics written after all: {names:?}"
    );
    assert_eq!(job_field(job, "JobState"), "RUNNING");

    // The watchdog still enforces: over quota, cancelled after the grace period.
    run_checked(std::process::Command::new("touch").arg(&go));
    assert!(
        wait_until(Duration::from_secs(30), || job_field(job, "JobState")
            == "CANCELLED"),
        "job {job} not cancelled: {}",
        job_field(job, "JobState")
    );
    assert!(
        wait_until(Duration::from_secs(5), || syslog_count(&format!(
            "job {job}: GPU memory 50G over its 40G quota"
        )) > 0),
        "job {job}: no over-quota line"
    );
    assert_eq!(
        syslog_count(&disk_full),
        1,
        "job {job}: the disk-full line must come once"
    );
    assert_eq!(syslog_count(&format!("job {job}: cannot write metrics")), 1);
    assert_cleaned_up(job);
}

#[test]
#[ignore = "needs the dev cluster: slurm/dev-cluster test"]
fn two_steps_starting_at_once_get_one_watchdog() {
    let _policy = install_policy(&policy(""));
    let dir = user_dir("wd-two-steps");
    let (id_file, go) = (dir.join("job-id"), dir.join("go"));
    // salloc: no batch step; the two srun steps start at once, and neither starts a watchdog.
    let script = format!(
        "echo $SLURM_JOB_ID > {id}; while [ ! -e {go} ]; do sleep 0.1; done; \
         srun --overlap -n1 sleep 4 & srun --overlap -n1 sleep 4 & wait; echo steps-done",
        id = id_file.display(),
        go = go.display()
    );
    let salloc = std::thread::spawn(move || {
        as_user(
            "salloc",
            &["--gres=gpu:1", "--gpu-mem-quota=40G", "sh", "-c", &script],
            &[],
        )
    });
    assert!(
        wait_until(Duration::from_secs(30), || std::fs::read_to_string(&id_file)
            .is_ok_and(|t| t.trim().parse::<u32>().is_ok())),
        "salloc gave no job"
    );
    let job: u32 = std::fs::read_to_string(&id_file).unwrap().trim().parse().unwrap();
    // The job prolog started it at allocation (PrologFlags=Contain), before any step.
    assert!(
        wait_until(Duration::from_secs(5), || watchdog_pids(job).len() == 1),
        "job {job}: no watchdog from the prolog: {:?}",
        watchdog_pids(job)
    );
    let from_prolog = watchdog_pids(job);

    // Watch /proc closely while both steps start: every watchdog process seen, and when.
    run_checked(std::process::Command::new("touch").arg(&go));
    let started = Instant::now();
    let mut seen: Vec<(u32, Instant, Instant)> = Vec::new(); // pid, first seen, last seen
    let mut most_at_once = 0;
    while started.elapsed() < Duration::from_secs(3) {
        let pids = watchdog_pids(job);
        most_at_once = most_at_once.max(pids.len());
        let now = Instant::now();
        for pid in pids {
            match seen.iter_mut().find(|(p, _, _)| *p == pid) {
                Some(entry) => entry.2 = now,
                None => seen.push((pid, now, now)),
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let lasting: Vec<u32> = seen
        .iter()
        .filter(|(_, first, last)| *last - *first > Duration::from_millis(500))
        .map(|(pid, _, _)| *pid)
        .collect();
    eprintln!(
        "job {job}: watchdog processes seen {:?}, at most {most_at_once} at once",
        seen.iter().map(|(pid, _, _)| pid).collect::<Vec<_>>()
    );
    assert_eq!(lasting.len(), 1, "job {job}: watchdogs that stayed: {lasting:?}");
    let watchdog = lasting[0];
    assert_eq!(watchdog_pids(job), vec![watchdog]);
    assert_eq!(
        vec![watchdog],
        from_prolog,
        "job {job}: the steps started a watchdog of their own"
    );

    // One more, exactly as the plugin starts it, while the first runs: it cannot take the lock and
    // exits at once, quietly, and the first goes on.
    let argv: Vec<String> = std::fs::read_to_string(format!("/proc/{watchdog}/cmdline"))
        .unwrap()
        .split('\0')
        .filter(|w| !w.is_empty())
        .map(str::to_string)
        .collect();
    let mut another = lab_command(&argv[0]);
    another
        .args(&argv[1..])
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .env("SLURM_CONF", slurm_conf());
    let before = Instant::now();
    let mut another = another.spawn().unwrap();
    let second = another.id();
    let status = another.wait().unwrap();
    assert!(
        status.success(),
        "job {job}: the second watchdog exited with {status}"
    );
    assert!(
        before.elapsed() < Duration::from_secs(2),
        "it took {:?}",
        before.elapsed()
    );
    assert_eq!(watchdog_pids(job), vec![watchdog]);
    let stood_down =
        |pid: u32| format!("gpu-mem-quota[{pid}]: job {job}: another watchdog already watches this job");
    assert!(
        wait_until(Duration::from_secs(5), || syslog_count(&stood_down(second)) == 1),
        "job {job}: the second watchdog did not say why it left"
    );

    let out = salloc.join().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("steps-done"),
        "job {job}: {stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        syslog_count(&format!("job {job}: watching GPU(s)")),
        1,
        "job {job}: one watchdog watched"
    );
    // Whether the steps' own watchdogs raced this time (both spawned, one lost the lock) or the
    // second step already found the first's pid file: either way one watched.
    let raced = syslog_count(&format!("job {job}: another watchdog already watches this job")) - 1;
    eprintln!("job {job}: {raced} watchdog(s) of the steps stood down at the lock");
    assert_cleaned_up(job);
}

#[test]
#[ignore = "needs the dev cluster: slurm/dev-cluster test"]
fn a_runtime_dir_it_cannot_use_refuses_the_jobs_tasks_and_says_why() {
    // runtime_dir under a regular file: nobody, root included, can create it.
    let blocked = lab().join("gmq/blocked");
    std::fs::write(&blocked, "").unwrap();
    let runtime_dir = blocked.join("run");
    let _policy = install_policy(&policy(&format!(
        "action = \"cancel\"\nruntime_dir = \"{}\"\n",
        runtime_dir.display()
    )));
    let dir = user_dir("wd-runtime-dir");
    // Over its quota for longer than the grace: no watchdog could see it, so it never starts
    // (review K1: nothing of a job with a quota runs unwatched).
    let script = format!("{CLAIM}; claim 50G; sleep 4; rm -f {FAKE_NVML}/procs/$GPU/$$; echo done");
    let job = sbatch_wait(&dir, &["--gres=gpu:1", "--gpu-mem-quota=40G"], &script);
    let _ = std::fs::remove_file(&blocked);
    assert!(!job.output.contains("done"), "job {}: {}", job.id, job.output);
    assert_eq!(ended_state(job.id), "FAILED");
    assert!(
        job.output.contains(&format!(
            "job {}: refusing to start the task: the job prolog left no word on this node",
            job.id
        )),
        "job {}: {}",
        job.id,
        job.output
    );
    let line = format!(
        "job {}: cannot write the prolog's word ({}: Not a directory (os error 20)): the job's \
         tasks here will be refused",
        job.id,
        runtime_dir.display()
    );
    assert!(
        slurmd_log().contains(&line),
        "job {}: no prolog line {line:?}",
        job.id
    );
    assert_eq!(syslog_count(&format!("job {}: watching GPU(s)", job.id)), 0);
    assert!(watchdog_pids(job.id).is_empty());
}

/// The job prolog passes the job's SLUID (slurmd's `SLURM_JOB_SLUID`, 25.11 on) to the watchdog as
/// `--sluid`: 26.05's cgroup/v2 names the job's directory after it. The job's own environment has
/// the same SLUID; before 25.11 neither has one. And the batch step's slurmstepd names its job in
/// its title, which is how a SLUID directory's job number is read (gmq-node `sluid_job.rs`).
#[test]
#[ignore = "needs the dev cluster: slurm/dev-cluster test"]
fn the_watchdog_is_told_the_jobs_sluid() {
    let _policy = install_policy(&policy(""));
    let dir = user_dir("wd-sluid");
    let job = sbatch(
        &dir,
        &["--gres=gpu:1", "--gpu-mem-quota=10G"],
        "echo sluid=${SLURM_JOB_SLUID:-none}; sleep 8",
    );
    let started = wait_until(Duration::from_secs(30), || watchdog_pids(job).len() == 1);
    assert!(started, "job {job}: no watchdog");
    let argv = std::fs::read(format!("/proc/{}/cmdline", watchdog_pids(job)[0])).unwrap();
    let told: Option<String> = String::from_utf8_lossy(&argv)
        .split('\0')
        .find_map(|w| w.strip_prefix("--sluid=").map(str::to_string));
    // The prolog starts the watchdog before the batch step's slurmstepd exists.
    let title = format!("slurmstepd: [{job}.batch]");
    let titled = wait_until(Duration::from_secs(30), || {
        std::fs::read_dir("/proc")
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
            .any(|pid| {
                let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
                String::from_utf8_lossy(&cmdline).replace('\0', " ").trim() == title
            })
    });
    assert!(titled, "job {job}: no process titled {title:?}");
    let out = dir.join(format!("job-{job}.out"));
    let ended = wait_until(Duration::from_secs(60), || {
        std::fs::read_to_string(&out).is_ok_and(|t| t.contains("sluid=")) && watchdog_pids(job).is_empty()
    });
    assert!(ended, "job {job}: did not end");
    let output = std::fs::read_to_string(&out).unwrap();
    let in_job = output
        .lines()
        .find_map(|l| l.strip_prefix("sluid="))
        .unwrap()
        .to_string();
    match told {
        Some(sluid) => {
            assert_eq!(sluid, in_job, "job {job}");
            // Slurm's printed form (sluid.c `print_sluid`): `s` and 13 base32 digits.
            assert!(sluid.len() == 14 && sluid.starts_with('s'), "job {job}: {sluid}");
        }
        None => assert_eq!(
            in_job, "none",
            "job {job}: slurmd had a SLUID but the watchdog was not told"
        ),
    }
}
