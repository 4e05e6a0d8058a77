//! The security review's attacks (docs: /work/shared/reviews/security-2026-12.md, findings F1-F8 and
//! the live-cluster scenarios L1-L6) and the held-out defects, each performed as the ordinary test
//! user on the dev cluster, with the outcome read from Slurm (job state, AdminComment in accounting),
//! the job's output and the watchdog's syslog lines.
//! Defect 2 (a preempted job's restart hints) is checked in preempt.rs, where preemption is set up.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::support::*;
use crate::watchdog::assert_cleaned_up;

/// The fake GPUs' claim files as jobs see them (this process: `fake_nvml_dir()`).
const FAKE_PROCS: &str = "/var/lib/fake-nvml/procs";

/// Fast enforcement: sample every 500 ms, 1 s of grace; `extra` goes into `[enforcement]`.
fn policy(extra: &str) -> String {
    format!("[defaults]\ndefault = \"none\"\n\n[enforcement]\ninterval = \"500ms\"\ngrace = \"1s\"\n{extra}")
}

/// The value after `key=` on the first line of `text` that has it (up to the next space).
fn value_of(text: &str, key: &str) -> Option<String> {
    let needle = format!("{key}=");
    text.lines().find_map(|line| {
        let at = line.find(&needle)?;
        Some(line[at + needle.len()..].split(' ').next()?.to_string())
    })
}

/// One field of the job's accounting record (`sacct`): AdminComment as slurmdbd has it, a field
/// no user text can pose as (unlike `scontrol show job`, where a JobName or Comment can imitate it).
fn sacct_field(job: u32, field: &str) -> String {
    admin(
        "sacct",
        &[
            "-n",
            "-X",
            "-P",
            "-j",
            &job.to_string(),
            "-o",
            &format!("{field}%4000"),
        ],
    )
    .trim()
    .to_string()
}

fn state(job: u32) -> String {
    job_field(job, "JobState")
}

fn ended_as(job: u32, expected: &str, timeout: Duration) -> bool {
    wait_until(timeout, || state(job) == expected)
}

/// The GPU index slurmctld allocated, as the job's own task prints it (`scontrol -d`: `IDX:N`).
const PRINT_ALLOCATION: &str =
    "G=$(scontrol -d show job $SLURM_JOB_ID | sed -n 's/.*(IDX:\\([0-9]*\\)).*/\\1/p'); \
     echo id=$SLURM_JOB_ID alloc=$G job_gpus=$SLURM_JOB_GPUS step_gpus=$SLURM_STEP_GPUS pid=$$";

fn remove_claim(gpu: Option<String>, pid: Option<String>) {
    if let (Some(gpu), Some(pid)) = (gpu, pid) {
        let _ = std::fs::remove_file(fake_nvml_dir().join("procs").join(gpu).join(pid));
    }
}

/// F1: a forged SLURM_JOB_GPUS (an unknown index, garbage; also with every GPU variable forged) in
/// an srun job neither unwatches it nor points the watchdog at another GPU: it is cancelled
/// (no_requeue_action) over its quota, watching the GPU slurmctld allocated.
#[test]
#[ignore = "needs the dev cluster: slurm/dev-cluster test"]
fn f1_forged_gpu_variables_in_an_srun_job_neither_unwatch_it_nor_move_its_watchdog() {
    let t0 = Instant::now();
    user_dir("sec-f1"); // marks where this run's syslog begins
    let _policy = install_policy(&policy("action = \"requeue\"\nno_requeue_action = \"cancel\"\n"));
    let task = format!(
        "{PRINT_ALLOCATION}; f={FAKE_PROCS}/$G/$$; echo 20G > $f; sleep 20; rm -f $f; echo not-stopped"
    );
    let forgeries: Vec<Vec<(&'static str, &'static str)>> = vec![
        vec![("SLURM_JOB_GPUS", "9999")],
        vec![("SLURM_JOB_GPUS", "x")],
        vec![
            ("SLURM_JOB_GPUS", "9999"),
            ("SLURM_STEP_GPUS", "9999"),
            ("CUDA_VISIBLE_DEVICES", "9999"),
        ],
    ];
    let runs: Vec<_> = forgeries
        .iter()
        .cloned()
        .map(|env| {
            let task = task.clone();
            std::thread::spawn(move || {
                as_user(
                    "srun",
                    &["--gres=gpu:1", "--gpu-mem-quota=8G", "bash", "-c", &task],
                    &env,
                )
            })
        })
        .collect();
    for (forged, run) in forgeries.iter().zip(runs) {
        let out = run.join().unwrap();
        let all = text(&out);
        remove_claim(value_of(&all, "alloc"), value_of(&all, "pid"));
        let job: u32 = value_of(&all, "id")
            .and_then(|id| id.parse().ok())
            .unwrap_or_else(|| panic!("{forged:?}: no job id: {all}"));
        let gpu = value_of(&all, "alloc").filter(|g| !g.is_empty());
        let gpu = gpu.unwrap_or_else(|| panic!("job {job} {forged:?}: no allocation: {all}"));
        // The forgery reached the step unchanged (srun exports the caller's environment).
        assert_eq!(
            value_of(&all, "job_gpus").as_deref(),
            Some(forged[0].1),
            "job {job}: {all}"
        );
        assert!(
            !out.status.success() && !all.contains("not-stopped"),
            "job {job} {forged:?} ran on over its quota: {all}"
        );
        assert!(
            ended_as(job, "CANCELLED", Duration::from_secs(10)),
            "job {job} {forged:?}: {}",
            state(job)
        );
        let cancelled = wait_until(Duration::from_secs(5), || {
            watchdog_lines(job)
                .iter()
                .any(|l| l.contains("cancelled (scancel)"))
        });
        let lines = watchdog_lines(job);
        assert!(cancelled, "job {job} {forged:?}: no cancel line: {lines:#?}");
        let watching = format!(": job {job}: watching GPU(s) {gpu} with quota 8G per GPU");
        assert!(
            lines.iter().any(|l| l.contains(&watching)),
            "job {job} {forged:?}: not watching GPU {gpu}: {lines:#?}"
        );
        assert!(
            lines
                .iter()
                .any(|l| l.contains("GPU memory 20G over its 8G quota") && l.contains("cancelled (scancel)")),
            "job {job} {forged:?}: {lines:#?}"
        );
        // The message, not the syslog prefix (a time stamp may hold 9999).
        let said = |l: &String| {
            l.split_once(&format!(": job {job}: "))
                .map(|(_, m)| m.to_string())
        };
        assert!(
            !lines
                .iter()
                .filter_map(said)
                .any(|m| m.contains("9999") || m.contains("not among NVML")),
            "job {job} {forged:?}: the forged GPU reached the watchdog: {lines:#?}"
        );
        eprintln!("job {job} {forged:?}: GPU {gpu}: {lines:#?}");
    }
    eprintln!("f1: {:?}", t0.elapsed());
}

/// F8: no watchdog outlives its job: forged-GPU srun jobs (with NVML there, and with NVML that
/// cannot be loaded, where the watchdog waits for it) leave no watchdog process and no jobs/<id>.
#[test]
#[ignore = "needs the dev cluster: slurm/dev-cluster test"]
fn f8_no_watchdog_outlives_a_forged_gpu_srun_job() {
    let t0 = Instant::now();
    user_dir("sec-f8"); // marks where this run's syslog begins
    let mut jobs = Vec::new();
    for nvml in ["", "nvml_library = \"/nonexistent/libnvidia-ml.so.1\"\n"] {
        let _policy = install_policy(&policy(nvml));
        let runs: Vec<_> = ["9999", "x"]
            .into_iter()
            .map(|forged| {
                std::thread::spawn(move || {
                    let out = as_user(
                        "srun",
                        &[
                            "--gres=gpu:1",
                            "--gpu-mem-quota=8G",
                            "sh",
                            "-c",
                            "echo id=$SLURM_JOB_ID; sleep 1",
                        ],
                        &[("SLURM_JOB_GPUS", forged)],
                    );
                    (forged, out)
                })
            })
            .collect();
        for run in runs {
            let (forged, out) = run.join().unwrap();
            let job: u32 = value_of(&text(&out), "id")
                .and_then(|id| id.parse().ok())
                .unwrap_or_else(|| panic!("{forged}: no job id: {}", text(&out)));
            assert!(out.status.success(), "job {job}: {}", text(&out));
            jobs.push((job, forged, nvml.is_empty()));
        }
    }
    for &(job, forged, nvml) in &jobs {
        assert!(
            ended_as(job, "COMPLETED", Duration::from_secs(10)),
            "job {job}: {}",
            state(job)
        );
        assert_cleaned_up(job);
        let pgrep = Command::new("pgrep")
            .args(["-af", "gpu-mem-quota watchdog"])
            .output()
            .unwrap();
        let pgrep = String::from_utf8_lossy(&pgrep.stdout);
        assert!(
            !pgrep.contains(&format!("--job={job} ")),
            "job {job} (SLURM_JOB_GPUS={forged}, NVML there: {nvml}): {pgrep}"
        );
        assert!(
            !watchdog_lines(job).iter().any(|l| l.contains("9999")),
            "job {job}: {:#?}",
            watchdog_lines(job)
        );
    }
    eprintln!("f8: srun jobs {jobs:?}: {:?}", t0.elapsed());
    // Here the extern step's exit hook (PrologFlags=Contain) stops every watchdog. Where none runs,
    // the watchdog must stop by itself: one started as the plugin starts it (forged GPU list, NVML
    // that cannot be loaded) for a job that has ended gives up once slurmctld says so.
    let &(job, _, _) = jobs
        .iter()
        .find(|(_, forged, nvml)| *forged == "9999" && !nvml)
        .unwrap();
    let _policy = install_policy(&policy("nvml_library = \"/nonexistent/libnvidia-ml.so.1\"\n"));
    let home = std::fs::metadata(format!("/home/{}", test_user())).unwrap();
    let mut watchdog = lab_command(lab().join("bin/gpu-mem-quota"))
        .args([
            "watchdog".to_string(),
            format!("--job={job}"),
            format!("--uid={}", home.uid()),
            format!("--gid={}", home.gid()),
            "--gpus=9999".to_string(),
            format!("--config={}", lab().join("etc/gpu-mem-quota.toml").display()),
            "--quota-bytes=8589934592".to_string(),
        ])
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .env("SLURM_CONF", slurm_conf())
        .spawn()
        .unwrap();
    let started = Instant::now();
    let exited = wait_until(Duration::from_secs(50), || {
        watchdog.try_wait().ok().flatten().is_some()
    });
    if !exited {
        let _ = watchdog.kill();
        let _ = watchdog.wait();
    }
    assert!(
        exited,
        "job {job}: the watchdog of an ended job is still waiting for NVML"
    );
    eprintln!(
        "f8: the watchdog of ended job {job} gave up after {:?}",
        started.elapsed()
    );
    assert!(
        wait_until(Duration::from_secs(5), || watchdog_lines(job)
            .iter()
            .any(|l| l.contains("the job is no longer running here"))),
        "job {job}: {:#?}",
        watchdog_lines(job)
    );
    assert!(!runtime_dir().join(format!("jobs/{job}")).exists());
    eprintln!("f8: {:?}", t0.elapsed());
}

/// F3: an srun whose LD_PRELOAD shim drops or renames SLURM_JOB_ACCOUNT (L4) is still held to its
/// real account's cap on the node: the plugin asks slurmctld in srun steps.
#[test]
#[ignore = "needs the dev cluster: slurm/dev-cluster test"]
fn f3_an_srun_that_hides_or_renames_its_account_is_held_to_its_real_accounts_cap() {
    let t0 = Instant::now();
    // physics is capped at 40G; chemistry (what the shim claims) at 600G; no user rule, so the
    // submit host cannot know the cap and the node decides.
    let _policy = install_policy(
        "[defaults]\ndefault = \"none\"\nmax = \"64G\"\n[account.physics]\nmax = \"40G\"\n\
         [account.chemistry]\nmax = \"600G\"\n",
    );
    let dir = user_dir("sec-f3");
    let source = dir.join("acct.c");
    std::fs::write(
        &source,
        "#define _GNU_SOURCE\n#include <dlfcn.h>\n#include <stdlib.h>\n#include <string.h>\n\
         /* srun's setup_env() -> setenvf() -> setenv(): drop SLURM_JOB_ACCOUNT, or rename it to $SHIM_ACCOUNT */\n\
         int setenv(const char *n, const char *v, int o) {\n\
             static int (*real)(const char *, const char *, int);\n\
             if (!real) real = (int (*)(const char *, const char *, int))dlsym(RTLD_NEXT, \"setenv\");\n\
             if (!strcmp(n, \"SLURM_JOB_ACCOUNT\")) {\n\
                 const char *to = getenv(\"SHIM_ACCOUNT\");\n\
                 return to ? real(n, to, o) : 0;\n\
             }\n\
             return real(n, v, o);\n\
         }\n",
    )
    .unwrap();
    let shim = dir.join("acct.so").display().to_string();
    // This machine's compiler (a lab's Slurm root has none): the shim runs against either glibc.
    let built = as_user_here(
        "gcc",
        &[
            "-shared",
            "-fPIC",
            "-o",
            &shim,
            &source.display().to_string(),
            "-ldl",
        ],
        &[],
    );
    assert!(built.status.success(), "gcc: {}", text(&built));
    let task = "echo acct=$SLURM_JOB_ACCOUNT; echo the-task-ran";
    let drop: Vec<(&str, String)> = vec![("LD_PRELOAD", shim.clone())];
    let rename: Vec<(&str, String)> =
        vec![("LD_PRELOAD", shim.clone()), ("SHIM_ACCOUNT", "chemistry".into())];
    type Case<'a> = (&'a str, &'a str, Vec<(&'a str, String)>);
    let cases: Vec<Case> = vec![
        ("control", "500G", vec![]),
        ("dropped", "500G", drop.clone()),
        ("renamed", "500G", rename.clone()),
        ("dropped", "8G", drop),
        ("renamed", "8G", rename),
    ];
    let runs: Vec<_> = cases
        .iter()
        .map(|(_, quota, env)| {
            let quota = format!("--gpu-mem-quota={quota}");
            let env: Vec<(&'static str, String)> = env.clone();
            std::thread::spawn(move || {
                let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
                as_user(
                    "srun",
                    &["-A", "physics", "--gres=gpu:1", &quota, "sh", "-c", task],
                    &env,
                )
            })
        })
        .collect();
    let refusal = "--gpu-mem-quota=500G exceeds the 40G cap for account 'physics'";
    for ((case, quota, _), run) in cases.iter().zip(runs) {
        let out = run.join().unwrap();
        let all = text(&out);
        if *quota == "500G" {
            assert!(
                !out.status.success()
                    && !all.contains("the-task-ran")
                    && all.contains(&format!("refusing to start the task: {refusal}")),
                "{case} {quota}: {all}"
            );
        } else {
            // Up to 25.11 the shim works: the step's environment says what it made srun write.
            // 26.05's srun writes the credential's account into the step's environment array
            // (env.c `env_array_for_step`, commit 1f9feb6c97 "Fix env variables being set on
            // step launch"), not through setenv: there the real account shows.
            let shimmed = if *case == "renamed" {
                "acct=chemistry\n"
            } else {
                "acct=\n"
            };
            let real = "acct=physics\n";
            assert!(
                out.status.success()
                    && all.contains("the-task-ran")
                    && (all.contains(shimmed) || all.contains(real)),
                "{case} {quota}: {all}"
            );
        }
    }
    eprintln!("f3: {:?}", t0.elapsed());
}

/// F4: a Comment and a JobName imitating an AdminComment (with a forged record of ours) never get
/// into the real AdminComment, nor into the restart hints of the next run.
#[test]
#[ignore = "needs the dev cluster: slurm/dev-cluster test"]
fn f4_an_imitation_in_comment_or_job_name_never_reaches_the_admin_comment() {
    let t0 = Instant::now();
    let _policy = install_policy(&policy(""));
    let dir = user_dir("sec-f4");
    let script = format!(
        "echo run=${{SLURM_RESTART_COUNT:-0}}; env | sed -n 's/^GPU_MEM_QUOTA/env:GPU_MEM_QUOTA/p'; \
         f={FAKE_PROCS}/${{SLURM_JOB_GPUS%%,*}}/$$; echo claim=$f; echo 2G > $f; \
         if [ \"${{SLURM_RESTART_COUNT:-0}}\" = 0 ]; then sleep 60; fi; sleep 2; rm -f $f; echo done"
    );
    let job = sbatch(
        &dir,
        &[
            "--open-mode=append",
            "--gres=gpu:1",
            "--gpu-mem-quota=8G",
            "--comment=x AdminComment=ticket=FORGED gpu-mem-quota:v1{n9/0:q=1G,preempted=99}",
            "--job-name=y AdminComment=ticket=FORGED2 gpu-mem-quota:v1{n8/0:q=1G,preempted=98}",
        ],
        &script,
    );
    // Run 0: the watchdog writes its record at its first sample with memory; then an admin requeue.
    assert!(
        wait_until(Duration::from_secs(30), || admin_comment(job)
            .contains("gpu-mem-quota:v1{")),
        "job {job}: no record while running: {:?} {:#?}",
        admin_comment(job),
        watchdog_lines(job)
    );
    admin("scontrol", &["requeue", &job.to_string()]);
    assert!(
        wait_until(Duration::from_secs(60), || job_field(job, "Restarts") == "1"
            && state(job) == "COMPLETED"),
        "job {job}: {} restarts {}",
        state(job),
        job_field(job, "Restarts")
    );
    let output = std::fs::read_to_string(dir.join(format!("job-{job}.out"))).unwrap_or_default();
    for claim in output.lines().filter_map(|l| l.strip_prefix("claim=")) {
        let _ = std::fs::remove_file(fake_nvml_path(claim)); // run 0's, killed by the requeue
    }
    assert!(
        sacct_field(job, "Comment").contains("FORGED"),
        "the attack did not happen"
    );
    let clean = |comment: &str| {
        ["FORGED", "n9/", "n8/", "q=1G", "preempted=9"]
            .iter()
            .all(|forged| !comment.contains(forged))
    };
    // slurmctld's AdminComment, and accounting's once it has caught up with the job's end.
    let comment = admin_comment(job);
    assert!(
        comment.contains("gpu-mem-quota:v1{") && clean(&comment),
        "job {job}: AdminComment {comment:?}"
    );
    wait_until(Duration::from_secs(15), || {
        sacct_field(job, "AdminComment") == comment
    });
    let in_sacct = sacct_field(job, "AdminComment");
    assert!(
        in_sacct.contains("gpu-mem-quota:v1{") && clean(&in_sacct),
        "job {job}: AdminComment in accounting {in_sacct:?}"
    );
    let run1 = output.split("run=1").nth(1).unwrap_or_default();
    assert!(
        run1.contains("env:GPU_MEM_QUOTA_BYTES=8589934592\n") && !run1.contains("GPU_MEM_QUOTA_LAST_EVENT"),
        "job {job}: the forged record fed the restart: {output}"
    );
    eprintln!(
        "f4: job {job}: AdminComment {comment:?}\n{output}\n{:?}",
        t0.elapsed()
    );
}

/// F6: an admin's AdminComment on a running quota job survives the job setting its Comment to
/// `see AdminComment=x`, and so does our record.
#[test]
#[ignore = "needs the dev cluster: slurm/dev-cluster test"]
fn f6_an_admins_text_and_our_record_survive_a_comment_imitating_an_admin_comment() {
    let t0 = Instant::now();
    let _policy = install_policy(&policy(""));
    let dir = user_dir("sec-f6");
    let go = dir.join("go");
    let script = format!(
        "f={FAKE_PROCS}/${{SLURM_JOB_GPUS%%,*}}/$$; while [ ! -e {go} ]; do sleep 0.2; done; echo 2G > $f; \
         sleep 2; scontrol update JobId=$SLURM_JOB_ID Comment='see AdminComment=x' && echo comment-set; \
         sleep 1; rm -f $f; echo done",
        go = go.display()
    );
    let job = sbatch(&dir, &["--gres=gpu:1", "--gpu-mem-quota=8G"], &script);
    assert!(
        wait_until(Duration::from_secs(30), || state(job) == "RUNNING"),
        "job {job}: {}",
        state(job)
    );
    admin(
        "scontrol",
        &["update", &format!("JobId={job}"), "AdminComment=ticket=INC42"],
    );
    run_checked(Command::new("touch").arg(&go));
    assert!(
        ended_as(job, "COMPLETED", Duration::from_secs(30)),
        "job {job}: {}",
        state(job)
    );
    let output = std::fs::read_to_string(dir.join(format!("job-{job}.out"))).unwrap_or_default();
    assert!(output.contains("comment-set"), "job {job}: {output}");
    let kept = |c: &str| c.contains("ticket=INC42") && c.contains("gpu-mem-quota:v1{");
    let comment = admin_comment(job);
    assert!(
        kept(&comment),
        "job {job}: AdminComment {comment:?}; {:#?}",
        watchdog_lines(job)
    );
    wait_until(Duration::from_secs(15), || {
        kept(&sacct_field(job, "AdminComment"))
    });
    let in_sacct = sacct_field(job, "AdminComment");
    assert!(
        kept(&in_sacct),
        "job {job}: AdminComment in accounting {in_sacct:?}"
    );
    assert_eq!(sacct_field(job, "Comment"), "see AdminComment=x");
    eprintln!("f6: job {job}: AdminComment {comment:?}: {:?}", t0.elapsed());
}

/// Kills what job A left in job B's cgroups (the moved processes) and removes the child cgroups.
struct MovedOut {
    dirs: Vec<PathBuf>,
    b: u32,
}

impl Drop for MovedOut {
    fn drop(&mut self) {
        for dir in &self.dirs {
            let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
            for pid in procs.split_whitespace() {
                let _ = Command::new("kill").args(["-KILL", pid]).status();
                for gpu in 0..4 {
                    let _ =
                        std::fs::remove_file(fake_nvml_dir().join("procs").join(gpu.to_string()).join(pid));
                }
            }
            let _ = wait_until(Duration::from_secs(5), || {
                std::fs::remove_dir(dir).is_ok() || !dir.exists()
            });
        }
        let _ = lab_command("scancel")
            .arg(self.b.to_string())
            .env("SLURM_CONF", slurm_conf())
            .status();
    }
}

/// Job `job`'s step cgroup `step` in every v1 hierarchy that has Slurm's tree (`slurm*/uid_N`).
fn v1_step_dirs(uid: u32, job: u32, step: &str) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    for hierarchy in std::fs::read_dir("/sys/fs/cgroup")
        .into_iter()
        .flatten()
        .flatten()
    {
        for top in std::fs::read_dir(hierarchy.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            if top.file_name().to_string_lossy().starts_with("slurm") {
                let dir = top.path().join(format!("uid_{uid}/job_{job}/{step}"));
                if dir.is_dir() {
                    dirs.push(dir);
                }
            }
        }
    }
    dirs
}

/// Job B, the user's other job (`options`, `script`) whose batch step's cgroups job A moves
/// processes into; running, with its step cgroups made. Returns the user's uid and B's cleanup.
fn job_to_move_into(dir: &Path, options: &[&str], script: &str) -> (u32, MovedOut) {
    let uid = std::fs::metadata(format!("/home/{}", test_user())).unwrap().uid();
    let b = sbatch(dir, options, script);
    let moved_out = MovedOut { dirs: Vec::new(), b };
    assert!(
        wait_until(Duration::from_secs(30), || !v1_step_dirs(uid, b, "step_batch")
            .is_empty()),
        "job {b}: no step cgroup"
    );
    (uid, moved_out)
}

/// F8's cgroup backstop is no way out: job A moves every process of its own out of its steps (on
/// Slurm 22.05 the user may, into a cgroup they make below another of their jobs' steps). Its
/// watchdog watches on (where the steps read empty, because slurmctld says A runs) and cancels it
/// over its quota. The backstop's own rule is unit-tested (watchdog::presence).
#[test]
#[ignore = "needs the dev cluster: slurm/dev-cluster test"]
fn f8_emptying_its_steps_does_not_stop_a_jobs_watchdog() {
    if !Path::new("/sys/fs/cgroup/freezer").is_dir() {
        eprintln!("skipped: not a cgroup v1 node");
        return;
    }
    let _policy = install_policy(&policy("action = \"cancel\"\n"));
    let dir = user_dir("sec-f8-empty");
    let (uid, mut moved_out) = job_to_move_into(&dir, &["--gres=gpu:1"], "sleep 120");
    let b = moved_out.b;
    let Some(b_step) = v1_step_dirs(uid, b, "step_batch")
        .into_iter()
        .find(|d| d.starts_with("/sys/fs/cgroup/freezer"))
    else {
        panic!("job {b}: no freezer step cgroup")
    };
    if std::fs::metadata(&b_step).unwrap().uid() == 0 {
        eprintln!("skipped: Slurm's step cgroups are root's here: the user cannot make one to move into");
        return;
    }
    moved_out.dirs.push(b_step.join("x"));
    // Every process of the user's in A's freezer steps moves to job_B/step_batch/x (root's extern
    // sleep cannot); then A's script allocates 20G of its 8G quota.
    let script = format!(
        "X={x}; J=${{X%/job_*}}/job_$SLURM_JOB_ID; GPU=${{SLURM_JOB_GPUS%%,*}}; mkdir -p $X; \
         for i in 1 2 3; do for p in $(cat $J/step_*/cgroup.procs $J/step_*/*/cgroup.procs 2>/dev/null); do \
         echo $p > $X/cgroup.procs 2>/dev/null; done; done; \
         left=$(cat $J/step_*/cgroup.procs $J/step_*/*/cgroup.procs 2>/dev/null); mine=0; \
         for p in $left; do [ \"$(stat -c %u /proc/$p 2>/dev/null)\" = $UID ] && mine=$((mine+1)); done; \
         echo left=$(echo $left | wc -w) mine=$mine; \
         sleep 8; echo 20G > {FAKE_PROCS}/$GPU/$$; sleep 60; echo not-stopped",
        x = b_step.join("x").display()
    );
    let a = sbatch(&dir, &["--gres=gpu:1", "--gpu-mem-quota=8G"], &script);
    let cancelled = |lines: &[String]| {
        lines
            .iter()
            .any(|l| l.contains("over its 8G quota") && l.contains("cancelled"))
    };
    // (Its moved processes outlive the cancellation, outside its cgroup: the job stays COMPLETING
    // until they are killed below; the watchdog's word is the outcome.)
    assert!(
        wait_until(Duration::from_secs(60), || cancelled(&watchdog_lines(a))),
        "job {a} was not enforced: {}; {:#?}",
        state(a),
        watchdog_lines(a)
    );
    let output = std::fs::read_to_string(dir.join(format!("job-{a}.out"))).unwrap_or_default();
    assert!(
        output.contains(" mine=0"),
        "job {a} did not move its processes: {output}"
    );
    // With PrologFlags=Contain the extern step's sleep is root's and stays: then the steps never
    // read empty. Where they did, the watchdog said why it watched on.
    if output.contains("left=0 ") {
        assert!(
            watchdog_lines(a)
                .iter()
                .any(|l| l.contains("yet slurmctld says it runs")),
            "job {a}: {:#?}",
            watchdog_lines(a)
        );
    }
    eprintln!("f8: job {a}: {}", output.lines().next().unwrap_or(""));
    drop(moved_out);
}

/// F2 (L3, cgroup v1): a GPU process that job A moves into a child cgroup it made below another of
/// its user's jobs (B), in the freezer hierarchy or in every Slurm hierarchy, still counts for A.
#[test]
#[ignore = "needs the dev cluster: slurm/dev-cluster test"]
fn f2_a_process_moved_into_another_jobs_cgroup_still_counts_for_its_own_job() {
    if !Path::new("/sys/fs/cgroup/freezer").is_dir() {
        eprintln!("skipped: not a cgroup v1 node");
        return;
    }
    let t0 = Instant::now();
    let _policy = install_policy(&policy("action = \"cancel\"\n"));
    let dir = user_dir("sec-f2");
    let (uid, mut moved_out) = job_to_move_into(&dir, &["--gres=gpu:1"], "sleep 120");
    let b = moved_out.b;
    let owner = |p: &Path| std::fs::metadata(p).map(|m| m.uid()).unwrap_or(u32::MAX);
    let steps = v1_step_dirs(uid, b, "step_batch");
    if steps.iter().all(|step| owner(step) == 0) {
        // Slurm 24.11 keeps a step's v1 directories root's: the move cannot even begin, for the
        // user cannot make a cgroup below another job's step. Tried as the user:
        for step in &steps {
            let x = step.join("x");
            let made = as_user("mkdir", &[x.to_str().unwrap()], &[]);
            assert!(!made.status.success() && !x.exists(), "{} made", x.display());
        }
        eprintln!("f2: Slurm's step cgroups are root's here: the user cannot make one to move into");
        return;
    }
    // The premise of the attribution code (Slurm 22.05): Slurm's step directories are the user's,
    // the files that move processes into them root's.
    for step in steps {
        assert_eq!(owner(&step), uid, "{}", step.display());
        for file in ["cgroup.procs", "tasks"] {
            assert_eq!(owner(&step.join(file)), 0, "{}/{file}", step.display());
        }
        moved_out.dirs.push(step.join("x"));
    }
    // The job's GPU process moves itself into job_B/step_batch/x, in freezer only ($2) or in every
    // Slurm hierarchy, and then allocates 20G of its 8G quota.
    let mover = dir.join("move.sh");
    std::fs::write(
        &mover,
        format!(
            "#!/bin/bash\nB=$1 ONLY=$2 GPU=${{SLURM_JOB_GPUS%%,*}}\n\
             ( moved=\n  while IFS=: read -r id ctl path; do\n\
                 case \"$ctl\" in ''|name=*) continue;; esac\n\
                 case \"$path\" in /slurm*/uid_*/job_$SLURM_JOB_ID/*) ;; *) continue;; esac\n\
                 [ -n \"$ONLY\" ] && [ \"$ctl\" != \"$ONLY\" ] && continue\n\
                 to=/sys/fs/cgroup/$ctl$(echo \"$path\" | sed \"s|/job_$SLURM_JOB_ID/.*|/job_$B/step_batch|\")/x\n\
                 mkdir -p $to && echo $BASHPID > $to/cgroup.procs && moved=\"$moved $ctl\"\n\
               done < /proc/$BASHPID/cgroup\n\
               echo \"moved=$moved pid=$BASHPID gpu=$GPU\"; sed 's/^/cgroup:/' /proc/$BASHPID/cgroup\n\
               echo 20G > {FAKE_PROCS}/$GPU/$BASHPID; exec sleep 60 ) &\n\
             sleep 60; echo not-stopped\n"
        ),
    )
    .unwrap();
    let script = |only: &str| format!("bash {} {b} {only}", mover.display());
    let a_freezer = sbatch(&dir, &["--gres=gpu:1", "--gpu-mem-quota=8G"], &script("freezer"));
    let a_every = sbatch(&dir, &["--gres=gpu:1", "--gpu-mem-quota=8G"], &script(""));
    for a in [a_freezer, a_every] {
        assert!(
            ended_as(a, "CANCELLED", Duration::from_secs(40)),
            "job {a} was not enforced: {}; {:#?}",
            state(a),
            watchdog_lines(a)
        );
        let output = std::fs::read_to_string(dir.join(format!("job-{a}.out"))).unwrap_or_default();
        let moved_to = format!("/job_{b}/step_batch/x");
        assert!(
            output.contains("moved= freezer")
                && output
                    .lines()
                    .any(|l| l.contains(":freezer:") && l.ends_with(&moved_to)),
            "job {a} did not move its process: {output}"
        );
        // 20G is the moved process's own; more where the first job's moved process, which left
        // its job's cgroup and so outlived its cancellation, sits on the same GPU (same user, in no
        // Slurm-made cgroup of another job: it counts for this job as well).
        let over = |l: &str| {
            l.split("GPU memory ")
                .nth(1)
                .and_then(|rest| rest.split('G').next())
                .and_then(|gib| gib.parse::<u64>().ok())
                .is_some_and(|gib| gib >= 20)
        };
        assert!(
            watchdog_lines(a)
                .iter()
                .any(|l| over(l.as_str()) && l.contains("over its 8G quota") && l.contains("cancelled")),
            "job {a}: {:#?}",
            watchdog_lines(a)
        );
        eprintln!("job {a}: {output}");
    }
    drop(moved_out);
    eprintln!("f2: {:?}", t0.elapsed());
}

/// Defect 1: restart hints, a restart count and a quota forged in the submit environment (and
/// again before an srun) never reach a job that was not requeued; GPU_MEM_QUOTA_BYTES is its quota.
#[test]
#[ignore = "needs the dev cluster: slurm/dev-cluster test"]
fn defect1_forged_restart_hints_never_reach_a_job_that_was_not_requeued() {
    let t0 = Instant::now();
    let _policy = install_policy(OPEN_POLICY);
    let dir = user_dir("sec-d1");
    // SLURM_RESTART_COUNT too: slurmd writes it only on a restart, so on a first run it is the
    // user's, and it must not make the plugin hand out hints either.
    let forged = [
        ("SLURM_RESTART_COUNT", "3"),
        ("GPU_MEM_QUOTA_RESTARTS", "3"),
        ("GPU_MEM_QUOTA_LAST_EVENT", "over-quota"),
        ("GPU_MEM_QUOTA_LAST_PEAK_BYTES", "1"),
        ("GPU_MEM_QUOTA_BATCH_SCALE", "0.10"),
        ("GPU_MEM_QUOTA_BYTES", "1"),
    ];
    let export: Vec<String> = forged.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let show = |marker: &str| format!("sh -c \"env | sed -n 's/^GPU_MEM_QUOTA/{marker}:GPU_MEM_QUOTA/p'\"");
    let script = format!(
        "{}; srun {}; export {}; srun {}",
        show("batch"),
        show("task"),
        export.join(" "),
        show("forged-task")
    );
    let job = sbatch_wait_env(&dir, &["--gres=gpu:1", "--gpu-mem-quota=8G"], &script, &forged);
    let expected = vec![
        "GPU_MEM_QUOTA=8G".to_string(),
        "GPU_MEM_QUOTA_BYTES=8589934592".to_string(),
    ];
    for marker in ["batch:", "task:", "forged-task:"] {
        assert_eq!(
            quota_vars(&job.output, marker),
            expected,
            "job {} {marker}: {}",
            job.id,
            job.output
        );
    }
    assert_eq!(job_field(job.id, "Restarts"), "0");
    // The forgery was in the job's submit environment (AccountingStoreFlags=job_env).
    let env_vars = || admin("sacct", &["-j", &job.id.to_string(), "--env-vars"]);
    wait_until(Duration::from_secs(15), || env_vars().contains("GPU_MEM_QUOTA_"));
    let submitted = env_vars();
    assert!(
        submitted.contains("GPU_MEM_QUOTA_LAST_EVENT=over-quota"),
        "job {}: {submitted}",
        job.id
    );
    eprintln!("defect1: {:?}", t0.elapsed());
}

/// Defect 4: a job that used GPU memory and was then cancelled by its user (no batch-script end to
/// write the record) has our record, with its peak, in its AdminComment.
#[test]
#[ignore = "needs the dev cluster: slurm/dev-cluster test"]
fn defect4_a_job_its_user_cancels_keeps_the_record_of_its_run() {
    let t0 = Instant::now();
    let _policy = install_policy(&policy(""));
    let dir = user_dir("sec-d4");
    let script = format!("f={FAKE_PROCS}/${{SLURM_JOB_GPUS%%,*}}/$$; echo $f; echo 3G > $f; sleep 120");
    let job = sbatch(&dir, &["--gres=gpu:1", "--gpu-mem-quota=8G"], &script);
    let status = runtime_dir().join(format!("jobs/{job}/status.json"));
    assert!(
        wait_until(Duration::from_secs(30), || std::fs::read_to_string(&status)
            .is_ok_and(|s| s.contains("\"used_bytes\":3221225472"))),
        "job {job}: the watchdog never saw its memory"
    );
    std::thread::sleep(Duration::from_secs(2));
    let cancelled = as_user("scancel", &[&job.to_string()], &[]);
    assert!(cancelled.status.success(), "{}", text(&cancelled));
    assert!(
        ended_as(job, "CANCELLED", Duration::from_secs(20)),
        "job {job}: {}",
        state(job)
    );
    let output = std::fs::read_to_string(dir.join(format!("job-{job}.out"))).unwrap_or_default();
    if let Some(claim) = output.lines().next() {
        let _ = std::fs::remove_file(fake_nvml_path(claim.trim()));
    }
    let recorded = |c: &str| c.contains("gpu-mem-quota:v1{") && c.contains("q=8G") && c.contains("=3G/");
    let comment = admin_comment(job);
    assert!(
        recorded(&comment),
        "job {job}: AdminComment {comment:?}; {:#?}",
        watchdog_lines(job)
    );
    wait_until(Duration::from_secs(15), || {
        recorded(&sacct_field(job, "AdminComment"))
    });
    let in_sacct = sacct_field(job, "AdminComment");
    assert!(
        recorded(&in_sacct),
        "job {job}: AdminComment in accounting {in_sacct:?}"
    );
    assert_cleaned_up(job);
    eprintln!("defect4: job {job}: {comment:?}: {:?}", t0.elapsed());
}

/// One user's queue flood (G1): held jobs that never run, each carrying about 0.9 MiB of script
/// arguments, which Slurm 22.05 prints in full in every job of `squeue --json`. Cancelled on drop.
struct Flood;

impl Flood {
    fn submit(dir: &Path, jobs: usize) -> Flood {
        let script = dir.join("noop.sh");
        std::fs::write(&script, "#!/bin/sh\ntrue\n").unwrap();
        std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        let padding = "a".repeat(130_000);
        let script = script.display().to_string();
        let mut args = vec![
            "--parsable",
            "-H",
            "-J",
            "g1-pad",
            "-o",
            "/dev/null",
            script.as_str(),
        ];
        args.extend([padding.as_str(); 7]);
        for _ in 0..jobs {
            let out = as_user("sbatch", &args, &[]);
            assert!(out.status.success(), "the flood's sbatch: {}", text(&out));
        }
        Flood
    }
}

impl Drop for Flood {
    fn drop(&mut self) {
        let _ = lab_command("scancel")
            .args(["-u", &test_user(), "-n", "g1-pad"])
            .status();
    }
}

/// G1, G2: 80 held jobs of one user (0.9 MiB of arguments each) make 22.05's `squeue --json` of
/// the cluster more than 64 MiB. No watchdog reads it any more: an srun step of a 1-shard job that
/// forges a 30G quota is told 1G and cancelled over it, and a batch job whose Comment imitates an
/// AdminComment gets the watchdog's record and nothing of the imitation.
#[test]
#[ignore = "needs the dev cluster: slurm/dev-cluster test"]
fn g1_a_users_queue_flood_blinds_no_watchdog() {
    let t0 = Instant::now();
    let enforcement = policy("action = \"requeue\"\nno_requeue_action = \"cancel\"\n");
    let _policy = install_policy(&format!("{enforcement}\n[scheduling]\nshard_unit = \"1G\"\n"));
    let dir = user_dir("sec-g1");
    let _flood = Flood::submit(&dir, 80);
    let dump = lab_command("squeue").arg("--json").output().unwrap().stdout.len();
    eprintln!(
        "g1: squeue --json of the flooded cluster: {dump} bytes ({:?})",
        t0.elapsed()
    );
    if slurm_root().is_none() {
        // 22.05: every job in full, whatever is asked.
        assert!(dump > 64 << 20, "the flood did not reach the cap: {dump} bytes");
    }

    let forged = [("_SLURM_SPANK_OPTION_gpu_mem_quota_gpu_mem_quota", "30G")];
    let task = format!(
        "echo id=$SLURM_JOB_ID quota=$GPU_MEM_QUOTA; f={FAKE_PROCS}/${{SLURM_STEP_GPUS%%,*}}/$$; \
         echo claim=$f; echo 25G > $f; sleep 30; rm -f $f; echo not-stopped"
    );
    let out = as_user("srun", &["--gres=shard:1", "bash", "-c", &task], &forged);
    let all = text(&out);
    if let Some(claim) = value_of(&all, "claim") {
        let _ = std::fs::remove_file(fake_nvml_path(&claim));
    }
    let job: u32 = value_of(&all, "id")
        .and_then(|id| id.parse().ok())
        .unwrap_or_else(|| panic!("{all}"));
    assert_eq!(value_of(&all, "quota").as_deref(), Some("1G"), "job {job}: {all}");
    assert!(
        !all.contains("not-stopped"),
        "job {job} ran on at 25G of 1 shard: {all}"
    );
    assert!(
        ended_as(job, "CANCELLED", Duration::from_secs(10)),
        "job {job}: {}",
        state(job)
    );
    let lines = watchdog_lines(job);
    assert!(
        lines.iter().any(|l| l.contains("with quota 1G per GPU")),
        "job {job}: {lines:#?}"
    );
    assert!(
        !lines.iter().any(|l| l.contains("cannot read")),
        "job {job}: a read failed under the flood: {lines:#?}"
    );

    let forgery = "x AdminComment=ticket=FORGED gpu-mem-quota:v1{n9/0:q=1G,preempted=99}";
    let comment = format!("--comment={forgery}");
    let script =
        format!("f={FAKE_PROCS}/${{SLURM_JOB_GPUS%%,*}}/$$; echo claim=$f; echo 2G > $f; sleep 20; rm -f $f");
    let batch = sbatch(&dir, &["--gres=shard:8", &comment], &script);
    let recorded = wait_until(Duration::from_secs(30), || {
        admin_comment(batch).contains("gpu-mem-quota:v1{")
    });
    let written = admin_comment(batch);
    let _ = lab_command("scancel").arg(batch.to_string()).status();
    let output = std::fs::read_to_string(dir.join(format!("job-{batch}.out"))).unwrap_or_default();
    if let Some(claim) = value_of(&output, "claim") {
        let _ = std::fs::remove_file(fake_nvml_path(&claim));
    }
    assert!(
        recorded,
        "job {batch}: no record under the flood: {written:?} {:#?}",
        watchdog_lines(batch)
    );
    assert!(
        !written.contains("FORGED") && !written.contains("preempted=99") && !written.contains("n9/"),
        "job {batch}: the Comment reached the AdminComment: {written}"
    );

    // Self-healing reads the same one-job record: a job that runs out of memory near its quota
    // under the flood is requeued once with hints, and finishes from its checkpoint.
    let example = copy_example(&dir);
    fresh_gpus();
    let healed = sbatch(
        &dir,
        &crate::heal::OPTIONS,
        &crate::heal::oom_script(&dir, &example),
    );
    let done = wait_until(Duration::from_secs(180), || state(healed) == "COMPLETED");
    let output = std::fs::read_to_string(dir.join(format!("job-{healed}.out"))).unwrap_or_default();
    assert!(
        done,
        "job {healed} is {} under the flood: {output}",
        state(healed)
    );
    assert_eq!(job_field(healed, "Restarts"), "1", "requeued once: {output}");
    assert!(output.contains("GPU_MEM_QUOTA_LAST_EVENT=near-oom"), "{output}");
    eprintln!("g1: {:?}", t0.elapsed());
}

/// G7: a process the job moves into a cgroup it made below its own step (cgroup v1: below the
/// step's freezer cgroup, which Slurm 22.05 chowns to the user; v2: below its task's cgroup, where
/// Slurm lets the user make one) is never signalled by Slurm (proctrack/cgroup kills the step's
/// own `cgroup.procs` only) and would keep its GPU memory after the job's end. The job epilog
/// kills it, says so, and the GPU's memory is free again for the next job.
#[test]
#[ignore = "needs the dev cluster: slurm/dev-cluster test"]
fn g7_a_process_hidden_below_its_step_does_not_outlive_the_job() {
    let _policy = install_policy(&policy(""));
    let dir = user_dir("sec-g7");
    // Claims 20G of GPU $1, moves itself into cgroup $2, and stays.
    let keep = dir.join("keep.sh");
    std::fs::write(
        &keep,
        format!("#!/bin/bash\necho 20G > {FAKE_PROCS}/$1/$$\necho $$ > $2/cgroup.procs\nexec sleep 600\n"),
    )
    .unwrap();
    std::fs::set_permissions(&keep, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let script = format!(
        "if [ -d /sys/fs/cgroup/freezer ]; then F=freezer$(awk -F: '$2==\"freezer\"{{print $3}}' /proc/self/cgroup); \
         else F=$(awk -F: '$1==\"0\"{{print $3}}' /proc/self/cgroup); fi; K=/sys/fs/cgroup/$F/keep; \
         mkdir $K || {{ echo no-subcgroup; exit 0; }}; G=${{SLURM_JOB_GPUS%%,*}}; \
         setsid {keep} $G $K & sleep 2; echo hidden=$(cat $K/cgroup.procs) gpu=$G; exit 0",
        keep = keep.display()
    );
    let job = sbatch(&dir, &["--gres=gpu:1"], &script);
    assert!(
        wait_until(Duration::from_secs(60), || state(job) == "COMPLETED"),
        "job {job}: {}",
        state(job)
    );
    let output = std::fs::read_to_string(dir.join(format!("job-{job}.out"))).unwrap_or_default();
    if output.contains("no-subcgroup") {
        eprintln!("skipped: Slurm's step cgroups are root's here: the user cannot make one");
        return;
    }
    let hidden: u32 = value_of(&output, "hidden")
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("job {job}: {output}"));
    let gpu = value_of(&output, "gpu").unwrap_or_default();
    // The fake NVML counts a claim while its process lives: once it is gone, so is its memory.
    let gone = wait_until(Duration::from_secs(20), || {
        !Path::new(&format!("/proc/{hidden}")).exists()
    });
    let _ = std::fs::remove_file(fake_nvml_dir().join("procs").join(&gpu).join(hidden.to_string()));
    if !gone {
        let _ = Command::new("/bin/kill")
            .args(["-9", &hidden.to_string()])
            .status();
    }
    assert!(gone, "job {job}: process {hidden} outlived the job: {output}");
    let said = format!("job {job}: process {hidden} was still in the job's cgroup after its end");
    assert!(
        slurmd_log()
            .lines()
            .any(|l| l.contains(&said) && l.contains("killed")),
        "job {job}: the epilog did not say it killed {hidden}"
    );
    eprintln!("g7: job {job}: process {hidden} killed at the job's end");
}

/// G7, its second half: a process of the job's user on the job's GPU that sits in no cgroup of the
/// job (started from a login on the node, outside Slurm) counts against the job while it runs, but
/// nothing in Slurm ends it with the job, and the epilog's cgroup sweep cannot see it: it would
/// keep its GPU memory while Slurm hands the GPU out again. The job's watchdog, leaving at the
/// job's end, kills it and says so.
#[test]
#[ignore = "needs the dev cluster: slurm/dev-cluster test"]
fn g7_a_users_process_outside_the_job_on_its_gpu_does_not_outlive_it() {
    let _policy = install_policy(&policy(""));
    let dir = user_dir("sec-g7-login");
    // Claims 20G of GPU $1, says its pid, and stays; its output is not the caller's pipe.
    let keep = dir.join("keep.sh");
    std::fs::write(
        &keep,
        format!(
            "#!/bin/bash\nexec </dev/null >/dev/null 2>&1\necho 20G > {FAKE_PROCS}/$1/$$\n\
             echo $$ > {pid}.new && mv {pid}.new {pid}\nexec sleep 600\n",
            pid = dir.join("pid").display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&keep, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let script = format!(
        "echo gpu=${{SLURM_JOB_GPUS%%,*}}; for i in $(seq 150); do [ -e {pid} ] && break; sleep 0.2; done; \
         sleep 2; exit 0",
        pid = dir.join("pid").display()
    );
    let job = sbatch(&dir, &["--gres=gpu:1"], &script);
    let out = || std::fs::read_to_string(dir.join(format!("job-{job}.out"))).unwrap_or_default();
    assert!(
        wait_until(Duration::from_secs(60), || value_of(&out(), "gpu").is_some()),
        "job {job} never ran: {}",
        out()
    );
    let gpu = value_of(&out(), "gpu").unwrap();
    // As the user, outside Slurm: in no cgroup of any job.
    let keep = keep.display().to_string();
    let started = as_user("/usr/bin/setsid", &["-f", &keep, &gpu], &[]);
    assert!(started.status.success(), "{}", text(&started));
    let pid_file = dir.join("pid");
    assert!(wait_until(Duration::from_secs(10), || pid_file.exists()));
    let pid: u32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        wait_until(Duration::from_secs(60), || state(job) == "COMPLETED"),
        "job {job}: {}",
        state(job)
    );
    let gone = wait_until(Duration::from_secs(30), || {
        !Path::new(&format!("/proc/{pid}")).exists()
    });
    let _ = std::fs::remove_file(fake_nvml_dir().join("procs").join(&gpu).join(pid.to_string()));
    if !gone {
        let _ = Command::new("/bin/kill").args(["-9", &pid.to_string()]).status();
    }
    assert!(gone, "job {job}: process {pid} outlived the job on GPU {gpu}");
    let said = format!(
        "job {job}: process {pid} of the job's user is still on GPU {gpu} after the job's end: killed"
    );
    assert!(
        syslog().lines().any(|l| l.contains(&said)),
        "job {job}: the watchdog did not say it killed {pid}: {:?}",
        watchdog_lines(job)
    );
    eprintln!("g7: job {job}: process {pid}, outside the job, killed at the job's end");
}

/// K2's helper: claims 20G of GPU $1 for itself, moves itself into each cgroup named after $2
/// (made as needed; a new cpuset level gets its parent's CPUs and memory nodes), says where it
/// is, touches $2, and stays.
fn write_parker(dir: &Path) -> PathBuf {
    let park = dir.join("park.sh");
    let script = r#"#!/bin/bash
gpu=$1 done=$2
shift 2
echo 20G > FAKE_PROCS/$gpu/$$
for to in "$@"; do
    d=$to new=()
    while [ ! -d "$d" ]; do new=("$d" "${new[@]}"); d=${d%/*}; done
    for n in "${new[@]}"; do
        mkdir "$n" || echo "cannot-make $n"
        if [ -f "${n%/*}/cpuset.cpus" ]; then
            cat "${n%/*}/cpuset.cpus" > "$n/cpuset.cpus"
            cat "${n%/*}/cpuset.mems" > "$n/cpuset.mems"
        fi
    done
    echo $$ > "$to/cgroup.procs" || echo "not-parked $to"
done
echo "parked=$$ gpu=$gpu"
sed 's/^/cgroup:/' /proc/$$/cgroup
touch "$done"
exec sleep 600 </dev/null >/dev/null 2>&1
"#;
    std::fs::write(&park, script.replace("FAKE_PROCS", FAKE_PROCS)).unwrap();
    std::fs::set_permissions(&park, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    park
}

/// The parked process of job `job` (its output's `parked=`), its GPU and its cgroup lines.
fn parked(job: u32, output: &str) -> (u32, String, Vec<String>) {
    let pid = value_of(output, "parked")
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("job {job} parked nothing: {output}"));
    let gpu = value_of(output, "gpu").unwrap_or_default();
    let lines = output
        .lines()
        .filter_map(|l| l.strip_prefix("cgroup:"))
        .map(str::to_string)
        .collect();
    (pid, gpu, lines)
}

/// Whether the fake NVML still counts `pid`'s claim on `gpu`: its file is there and it lives.
fn claim_counted(gpu: &str, pid: u32) -> bool {
    fake_nvml_dir()
        .join("procs")
        .join(gpu)
        .join(pid.to_string())
        .exists()
        && Path::new(&format!("/proc/{pid}")).exists()
}

/// Ends a parked process the test did not see killed, removes its claim and the cgroups below
/// `below` (per hierarchy) that it was parked in.
fn unpark(pid: u32, gpu: &str, made: &[PathBuf]) {
    if Path::new(&format!("/proc/{pid}")).exists() {
        let _ = Command::new("/bin/kill").args(["-9", &pid.to_string()]).status();
        let _ = wait_until(Duration::from_secs(5), || {
            !Path::new(&format!("/proc/{pid}")).exists()
        });
    }
    let _ = std::fs::remove_file(fake_nvml_dir().join("procs").join(gpu).join(pid.to_string()));
    for dir in made {
        // Deepest first; stops at the first that is not empty (or not ours to remove).
        for level in dir.ancestors().take_while(|d| d.starts_with("/sys/fs/cgroup/")) {
            if std::fs::remove_dir(level).is_err() {
                break;
            }
        }
    }
}

/// K2 (a), cgroup v1: a GPU process the job parks in a cgroup the user made below the step of
/// another, CPU-only job of theirs (in every Slurm hierarchy, so no cgroup names its own job) is
/// neither the epilog's (it is in none of the job's cgroups) nor, before the fix, the watchdog's
/// ("left to that job's end", which may be days). The job's watchdog, leaving, finds it on the
/// job's GPU, kills it, and says so; the GPU's memory is free again.
#[test]
#[ignore = "needs the dev cluster: slurm/dev-cluster test"]
fn k2_a_gpu_process_parked_below_another_cpu_only_job_does_not_outlive_its_job() {
    if !Path::new("/sys/fs/cgroup/freezer").is_dir() {
        eprintln!("skipped: not a cgroup v1 node");
        return;
    }
    let t0 = Instant::now();
    let _policy = install_policy(&policy(""));
    let dir = user_dir("sec-k2-park");
    // C: the user's long CPU-only job (no GPU, no watchdog).
    let (uid, mut moved_out) = job_to_move_into(&dir, &[], "sleep 300");
    let c = moved_out.b;
    let steps = v1_step_dirs(uid, c, "step_batch");
    if steps
        .iter()
        .all(|step| std::fs::metadata(step).map(|m| m.uid()).unwrap_or(0) == 0)
    {
        eprintln!("skipped: Slurm's step cgroups are root's here: the user cannot make one below them");
        return;
    }
    let parks: Vec<PathBuf> = steps.iter().map(|step| step.join("park")).collect();
    moved_out.dirs.extend(parks.iter().cloned());
    let park = write_parker(&dir);
    let done = dir.join("parked");
    let targets: Vec<String> = parks.iter().map(|p| p.display().to_string()).collect();
    let script = format!(
        "G=${{SLURM_JOB_GPUS%%,*}}; setsid {park} $G {done} {targets} & \
         for i in $(seq 100); do [ -e {done} ] && break; sleep 0.1; done; sleep 1; exit 0",
        park = park.display(),
        done = done.display(),
        targets = targets.join(" ")
    );
    let g = sbatch(&dir, &["--gres=gpu:1"], &script);
    assert!(
        wait_until(Duration::from_secs(60), || state(g) == "COMPLETED"),
        "job {g}: {}",
        state(g)
    );
    let output = std::fs::read_to_string(dir.join(format!("job-{g}.out"))).unwrap_or_default();
    let (pid, gpu, lines) = parked(g, &output);
    // Parked below C in every hierarchy Slurm tracks: no line names job G any more.
    let below_c = format!("/job_{c}/step_batch/park");
    assert!(
        lines
            .iter()
            .any(|l| l.contains(":freezer:") && l.ends_with(&below_c))
            && !lines
                .iter()
                .any(|l| l.contains(&format!("/job_{g}/")) || l.ends_with(&format!("/job_{g}"))),
        "job {g} did not park its process below job {c}: {output}"
    );
    let gone = wait_until(Duration::from_secs(30), || !claim_counted(&gpu, pid));
    let alive = Path::new(&format!("/proc/{pid}")).exists();
    unpark(pid, &gpu, &[]);
    assert!(
        gone && !alive,
        "job {g}: process {pid}, parked below job {c}, outlived the job on GPU {gpu}"
    );
    let said =
        format!("job {g}: process {pid} of the job's user is still on GPU {gpu} after the job's end: killed");
    assert!(
        syslog().lines().any(|l| l.contains(&said)),
        "job {g}: the watchdog did not say it killed {pid}: {:#?}",
        watchdog_lines(g)
    );
    drop(moved_out);
    eprintln!(
        "k2 (a): job {g}: process {pid} parked below job {c} killed at the job's end: {:?}",
        t0.elapsed()
    );
}

/// K2 (b), cgroup v1: a GPU process the job hides six levels below its own step, in every Slurm
/// hierarchy (`step_batch/a/b/c/d/e/f`), was below the epilog's walk (five levels below the job).
/// The epilog's sweep by claim finds it at any depth, kills it, and says so.
#[test]
#[ignore = "needs the dev cluster: slurm/dev-cluster test"]
fn k2_b_a_gpu_process_hidden_six_levels_below_its_step_does_not_outlive_the_job() {
    if !Path::new("/sys/fs/cgroup/freezer").is_dir() {
        eprintln!("skipped: not a cgroup v1 node");
        return;
    }
    let t0 = Instant::now();
    let _policy = install_policy(&policy(""));
    let dir = user_dir("sec-k2-deep");
    let park = write_parker(&dir);
    let done = dir.join("parked");
    // Six levels below wherever the batch script sits in each Slurm hierarchy (its step, or a
    // task directory below it).
    let script = format!(
        "T=; while IFS=: read -r id ctl path; do case \"$ctl\" in ''|name=*) continue;; esac; \
         case \"$path\" in /slurm*/uid_*/job_$SLURM_JOB_ID/step_*) T=\"$T /sys/fs/cgroup/$ctl$path/a/b/c/d/e/f\";; esac; \
         done < /proc/$$/cgroup; \
         [ -O \"$(echo $T | awk '{{print $1}}' | sed 's|/a/b/c/d/e/f$||')\" ] || {{ echo no-subcgroup; exit 0; }}; \
         setsid {park} ${{SLURM_JOB_GPUS%%,*}} {done} $T & \
         for i in $(seq 100); do [ -e {done} ] && break; sleep 0.1; done; sleep 1; exit 0",
        park = park.display(),
        done = done.display(),
    );
    let job = sbatch(&dir, &["--gres=gpu:1"], &script);
    assert!(
        wait_until(Duration::from_secs(60), || state(job) == "COMPLETED"),
        "job {job}: {}",
        state(job)
    );
    let output = std::fs::read_to_string(dir.join(format!("job-{job}.out"))).unwrap_or_default();
    if output.contains("no-subcgroup") {
        eprintln!("skipped: Slurm's step cgroups are root's here: the user cannot make one");
        return;
    }
    let (pid, gpu, lines) = parked(job, &output);
    let made: Vec<PathBuf> = lines
        .iter()
        .filter_map(|l| {
            let mut parts = l.splitn(3, ':');
            let (_, ctl, path) = (parts.next()?, parts.next()?, parts.next()?);
            path.ends_with("/a/b/c/d/e/f")
                .then(|| PathBuf::from(format!("/sys/fs/cgroup/{ctl}{path}")))
        })
        .collect();
    // Hidden in every hierarchy Slurm tracks the job with, six levels below its step.
    let slurm_lines: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains(&format!("/job_{job}/")))
        .collect();
    assert!(
        lines
            .iter()
            .any(|l| l.contains(":freezer:") && l.ends_with("/a/b/c/d/e/f"))
            && slurm_lines.iter().all(|l| l.ends_with("/a/b/c/d/e/f")),
        "job {job} did not hide its process six levels down: {output}"
    );
    let gone = wait_until(Duration::from_secs(30), || !claim_counted(&gpu, pid));
    let alive = Path::new(&format!("/proc/{pid}")).exists();
    unpark(pid, &gpu, &made);
    assert!(
        gone && !alive,
        "job {job}: process {pid} outlived the job: {output}"
    );
    let said = format!("job {job}: process {pid} was still in the job's cgroup after its end");
    assert!(
        slurmd_log()
            .lines()
            .any(|l| l.contains(&said) && l.contains("killed")),
        "job {job}: the epilog did not say it killed {pid} (the watchdog's lines: {:#?})",
        watchdog_lines(job)
    );
    eprintln!(
        "k2 (b): job {job}: process {pid} six levels below its step killed at the job's end: {:?}",
        t0.elapsed()
    );
}

/// G9: where cgroup.conf does not constrain devices (the lab's, like a site that never set
/// `ConstrainDevices=yes`), `CUDA_VISIBLE_DEVICES` is advice: a job given one GPU puts its memory
/// on another of the node's. Its watchdog, finding devices unconstrained, samples every GPU, so the
/// job is held to its quota there too and cancelled over it (`--no-requeue`). Without the fix it
/// sampled its own GPU alone and the 12G went unseen. (`check-config --slurm-conf` refuses such a
/// layout: `config_check_cli.rs`.)
#[test]
#[ignore = "needs the dev cluster: slurm/dev-cluster test"]
fn g9_a_job_using_a_gpu_it_was_not_given_is_held_to_its_quota_there() {
    let _policy = install_policy(&policy(""));
    fresh_gpus();
    let dir = user_dir("sec-g9");
    let script = format!(
        "G=${{SLURM_JOB_GPUS%%,*}}; O=$(( (G + 1) % 4 )); f={FAKE_PROCS}/$O/$$; \
         echo given=$G other=$O claim=$f; echo 12G > $f; sleep 120; echo not-stopped"
    );
    let job = sbatch(
        &dir,
        &["--gres=gpu:1", "--gpu-mem-quota=8G", "--no-requeue"],
        &script,
    );
    let cancelled = ended_as(job, "CANCELLED", Duration::from_secs(60));
    let output = std::fs::read_to_string(dir.join(format!("job-{job}.out"))).unwrap_or_default();
    if let Some(claim) = value_of(&output, "claim") {
        let _ = std::fs::remove_file(fake_nvml_path(&claim));
    }
    let lines = watchdog_lines(job);
    assert!(
        cancelled,
        "job {job} is {}: its memory on a GPU it was not given went unseen: {output} {lines:#?}",
        state(job)
    );
    let other = value_of(&output, "other").unwrap_or_default();
    assert!(
        lines
            .iter()
            .any(|l| l.contains("cgroup.conf does not constrain devices")),
        "{lines:#?}"
    );
    assert!(
        lines.iter().any(|l| l.contains("12G over its 8G quota")),
        "job {job}: not held to its quota on GPU {other}: {lines:#?}"
    );
    assert!(!output.contains("not-stopped"), "{output}");
    assert_cleaned_up(job);
}

/// G4: the job's status file was the user's own inode; they could chmod it, keep it open for
/// writing once the watchdog renamed a new one over it, and fill the runtime filesystem through the
/// unlinked inode. Now it is root's, readable by the job's user through an ACL entry: the job
/// reads it, and can neither make it writable nor open it for writing.
#[test]
#[ignore = "needs the dev cluster: slurm/dev-cluster test"]
fn g4_a_job_cannot_write_its_status_file() {
    let _policy = install_policy(&policy(""));
    let dir = user_dir("sec-g4");
    let script =
        "f=$GPU_MEM_QUOTA_STATUS_FILE; for i in $(seq 40); do [ -s \"$f\" ] && break; sleep 0.25; done; \
         grep -q job_id \"$f\" && echo readable; chmod 600 \"$f\" 2>/dev/null && echo chmod-ok; \
         (exec 3>>\"$f\") 2>/dev/null && echo opened-for-writing; stat -c owner=%u \"$f\"";
    let job = sbatch_wait(&dir, &["--gres=gpu:1", "--gpu-mem-quota=2G"], script);
    let output = &job.output;
    assert!(output.contains("readable"), "job {}: {output}", job.id);
    assert!(
        !output.contains("chmod-ok") && !output.contains("opened-for-writing"),
        "job {}: the user can write their status file: {output}",
        job.id
    );
    assert_eq!(
        value_of(output, "owner").as_deref(),
        Some("0"),
        "job {}: {output}",
        job.id
    );
}

/// G5: a heterogeneous job's later component is watched under its own job id, and slurmctld
/// refuses to requeue anything but the leader ("Job not heterogeneous job leader"). The watchdog
/// tried the requeue again every grace period for ever; now a refused requeue falls back to the
/// `no_requeue_action` (cancel) at once.
#[test]
#[ignore = "needs the dev cluster: slurm/dev-cluster test"]
fn g5_a_heterogeneous_jobs_component_over_its_quota_is_stopped() {
    // Slurm gives each component nodes of its own: on one node the job stays pending (Resources).
    let nodes: u32 = admin("sinfo", &["-h", "-o", "%D"]).trim().parse().unwrap_or(0);
    if nodes < 2 {
        eprintln!("skipped: a heterogeneous job needs 2 nodes, the lab has {nodes} (issue 25)");
        return;
    }
    let enforcement = policy("action = \"requeue\"\nno_requeue_action = \"cancel\"\n");
    let _policy = install_policy(&format!("{enforcement}\n[scheduling]\nshard_unit = \"1G\"\n"));
    let dir = user_dir("sec-g5");
    let script = dir.join("het.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/bash\n#SBATCH --gres=shard:1\n#SBATCH hetjob\n#SBATCH --gres=shard:8\n\
             srun --het-group=1 bash -c 'echo comp=$SLURM_JOB_ID quota=$GPU_MEM_QUOTA; \
             f={FAKE_PROCS}/${{SLURM_STEP_GPUS%%,*}}/$$; echo claim=$f; echo 40G > $f; sleep 40; \
             rm -f $f; echo not-stopped'\n"
        ),
    )
    .unwrap();
    let out_file = dir.join("job-%j.out").display().to_string();
    let submitted = as_user(
        "sbatch",
        &["--parsable", "-o", &out_file, &script.display().to_string()],
        &[],
    );
    let leader: u32 = String::from_utf8_lossy(&submitted.stdout)
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("sbatch: {}", text(&submitted)));
    let output = || std::fs::read_to_string(dir.join(format!("job-{leader}.out"))).unwrap_or_default();
    let component: u32 = {
        assert!(
            wait_until(Duration::from_secs(60), || value_of(&output(), "comp").is_some()),
            "job {leader}: the component's step never ran: {}",
            output()
        );
        // The step's SLURM_JOB_ID is the leader's (22.05): the component's own id is slurmctld's.
        let show = admin("scontrol", &["show", "job", "-o", &leader.to_string()]);
        show.lines()
            .find(|l| l.contains(" HetJobOffset=1 "))
            .and_then(|l| l.strip_prefix("JobId="))
            .and_then(|l| l.split(' ').next())
            .and_then(|id| id.parse().ok())
            .unwrap_or_else(|| panic!("job {leader}: no component 1: {show}"))
    };
    let stopped = wait_until(Duration::from_secs(30), || {
        watchdog_lines(component)
            .iter()
            .any(|l| l.contains("cancelled (scancel)"))
    });
    let _ = lab_command("scancel").arg(leader.to_string()).status();
    if let Some(claim) = value_of(&output(), "claim") {
        let _ = std::fs::remove_file(fake_nvml_path(&claim));
    }
    let lines = watchdog_lines(component);
    assert!(
        stopped,
        "job {leader}+1 ({component}) was not stopped: {lines:#?}"
    );
    assert!(
        !output().contains("not-stopped"),
        "job {leader}+1 ran on at 40G of its 8G: {}",
        output()
    );
    let refusals = lines.iter().filter(|l| l.contains("requeue failed")).count();
    assert!(
        refusals <= 1,
        "job {component}: the requeue was tried again: {lines:#?}"
    );
}

/// One telemetry file as python's `TelemetryWriter` writes it, for a shell's `printf` with the job
/// id and the writer's pid as its two `%s`.
const TELEMETRY_PRINTF: &str = r#"{"version":1,"source":"job-reported","job_id":%s,"pid":%s,"updated_at":"2026-12-07T00:00:00Z","allocator":{"allocated_bytes":1,"reserved_bytes":2,"peak_allocated_bytes":1,"peak_reserved_bytes":2,"num_alloc_retries":0,"num_ooms":0,"fragmentation":0.5},"controller":{"micro_batch":1,"grad_accum":1,"effective_batch":1,"activation_checkpointing":false,"capacity_bytes":null,"last_decision":"a decision of the job"}}"#;

/// K3: job-reported telemetry had no bound on its task count. One GPU process writes 2,000
/// telemetry files (tasks 0..1999, each naming it) in its working directory: every one became a
/// task, in the status file (~1.7 MB here; 90 MB at 100,000 files) and as 8 Prometheus series each
/// in the metrics file, rewritten every second. Now a node shows at most 32 tasks, one per process
/// (its lowest task number), and counts the rest: the status file says
/// `"job_reported_not_shown":1999`, the metrics one sample of it, and both files stay small.
#[test]
#[ignore = "needs the dev cluster: slurm/dev-cluster test"]
fn k3_a_flood_of_telemetry_files_leaves_status_and_metrics_small() {
    const FILES: u32 = 2_000;
    let _policy = install_policy(&policy(""));
    fresh_gpus();
    let dir = user_dir("sec-k3");
    let stop = dir.join("stop");
    let script = format!(
        "f={FAKE_PROCS}/${{SLURM_JOB_GPUS%%,*}}/$$; echo claim=$f; echo 1G > $f; i=0; \
         while [ $i -lt {FILES} ]; do \
         printf '{TELEMETRY_PRINTF}' $SLURM_JOB_ID $$ > gpu-mem-quota-telemetry.$SLURM_JOB_ID.$i.json; \
         i=$((i+1)); done; echo written=$i; \
         n=0; while [ ! -e {stop} ] && [ $n -lt 600 ]; do sleep 0.2; n=$((n+1)); done; rm -f $f",
        stop = stop.display()
    );
    let chdir = dir.display().to_string();
    let job = sbatch(
        &dir,
        &["--gres=gpu:1", "--gpu-mem-quota=20G", "--chdir", &chdir],
        &script,
    );
    let output = || std::fs::read_to_string(dir.join(format!("job-{job}.out"))).unwrap_or_default();
    let status_path = runtime_dir().join(format!("jobs/{job}/status.json"));
    let prom_path = lab().join(format!("gmq/metrics/gpu_mem_quota_job_{job}.prom"));
    let (mut status, mut prom) = (String::new(), String::new());
    // The files are written before the watchdog's first read (at its first sample with the claim)
    // most of the time; otherwise the next read, 15 s later, sees them all.
    let said = wait_until(Duration::from_secs(90), || {
        status = std::fs::read_to_string(&status_path).unwrap_or_default();
        prom = std::fs::read_to_string(&prom_path).unwrap_or_default();
        status.contains(&format!("\"job_reported_not_shown\":{}", FILES - 1))
            && prom.contains("gpu_mem_quota_job_reported_tasks_not_shown{")
    });
    let _ = std::fs::write(&stop, "");
    let ended = wait_until(Duration::from_secs(60), || state(job) == "COMPLETED");
    if let Some(claim) = value_of(&output(), "claim") {
        let _ = std::fs::remove_file(fake_nvml_path(&claim));
    }
    assert!(
        said,
        "job {job} ({}): status {} bytes: {}...\nmetrics {} bytes: {}...",
        output(),
        status.len(),
        &status[..status.len().min(2000)],
        prom.len(),
        &prom[..prom.len().min(2000)]
    );
    assert_eq!(
        value_of(&output(), "written").as_deref(),
        Some(FILES.to_string().as_str()),
        "{}",
        output()
    );
    // One task shown (the process's lowest, task 0), the rest one number; the files small.
    assert_eq!(
        status.matches("\"source\":\"job-reported\"").count(),
        1,
        "{status}"
    );
    assert!(
        status.contains("\"job_reported\":[{\"source\":\"job-reported\",\"task\":0,"),
        "{status}"
    );
    assert!(status.len() <= 8 * 1024, "status.json: {} bytes", status.len());
    let not_shown = prom
        .lines()
        .find(|l| l.starts_with("gpu_mem_quota_job_reported_tasks_not_shown{"))
        .unwrap_or_default();
    assert!(not_shown.ends_with(&format!("}} {}", FILES - 1)), "{prom}");
    let series = prom
        .lines()
        .filter(|l| l.starts_with("gpu_mem_quota_job_reported_") && l.contains("task=\""))
        .count();
    assert_eq!(series, 8, "{prom}");
    assert!(prom.len() <= 16 * 1024, "metrics: {} bytes", prom.len());
    assert!(ended, "job {job} is {}: {}", state(job), output());
    eprintln!(
        "k3: job {job}: {FILES} files, 1 task shown, {} not shown; status {} bytes, metrics {} bytes",
        FILES - 1,
        status.len(),
        prom.len()
    );
}

/// K9: control characters of a path the job's user chose reached root's log raw (only `\n` was
/// replaced): the job works in a directory named `d ESC[2J ESC[H forged` and drops a broken
/// telemetry file there, whose failure line names the directory. The watchdog's line now carries
/// `\u{1b}` as text; without the fix rsyslog would have written the raw ESC as its own `#033`.
#[test]
#[ignore = "needs the dev cluster: slurm/dev-cluster test"]
fn k9_a_directory_name_with_escapes_reaches_the_log_escaped() {
    let _policy = install_policy(&policy(""));
    fresh_gpus();
    let dir = user_dir("sec-k9");
    let stop = dir.join("stop");
    let script = format!(
        "f={FAKE_PROCS}/${{SLURM_JOB_GPUS%%,*}}/$$; echo claim=$f; d=$(printf 'd\\033[2J\\033[Hforged'); \
         mkdir \"$d\" && cd \"$d\" || exit 1; echo '{{' > gpu-mem-quota-telemetry.$SLURM_JOB_ID.0.json; \
         echo 1G > $f; n=0; while [ ! -e {stop} ] && [ $n -lt 600 ]; do sleep 0.2; n=$((n+1)); done; rm -f $f",
        stop = stop.display()
    );
    let chdir = dir.display().to_string();
    let job = sbatch(
        &dir,
        &["--gres=gpu:1", "--gpu-mem-quota=20G", "--chdir", &chdir],
        &script,
    );
    let output = || std::fs::read_to_string(dir.join(format!("job-{job}.out"))).unwrap_or_default();
    let failure = |lines: &[String]| {
        lines
            .iter()
            .find(|l| l.contains("the job's telemetry not shown: ") && l.contains("forged/"))
            .cloned()
    };
    let mut line = None;
    let logged = wait_until(Duration::from_secs(60), || {
        line = failure(&watchdog_lines(job));
        line.is_some()
    });
    let _ = std::fs::write(&stop, "");
    let ended = wait_until(Duration::from_secs(60), || state(job) == "COMPLETED");
    if let Some(claim) = value_of(&output(), "claim") {
        let _ = std::fs::remove_file(fake_nvml_path(&claim));
    }
    assert!(logged, "job {job} ({}): {:#?}", output(), watchdog_lines(job));
    let line = line.unwrap();
    assert!(
        line.contains("/d\\u{1b}[2J\\u{1b}[Hforged/gpu-mem-quota-telemetry."),
        "job {job}: not escaped by the watchdog: {line:?}"
    );
    assert!(!line.contains('\u{1b}') && !line.contains("#033"), "{line:?}");
    assert!(ended, "job {job} is {}: {}", state(job), output());
    eprintln!("k9: job {job}: {line}");
}

/// Scancels the job when dropped (a failed assertion leaves nothing running on the lab).
struct CancelJob(u32);

impl Drop for CancelJob {
    fn drop(&mut self) {
        let _ = lab_command("scancel").arg(self.0.to_string()).output();
    }
}

/// The lab's slurmd, by its pid file.
fn lab_slurmd() -> Option<u32> {
    let pid: u32 = std::fs::read_to_string(lab().join("run/slurmd.pid"))
        .ok()?
        .trim()
        .parse()
        .ok()?;
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
    (comm.trim() == "slurmd").then_some(pid)
}

/// Starts the lab's slurmd again as slurm/dev-cluster does (`setsid slurmd -D`, in the lab's
/// root where it has one), its output appended to `log/slurmd.out`.
fn start_lab_slurmd() {
    let log = lab().join("log/slurmd.out");
    run_checked(lab_command("/bin/sh").args([
        "-c",
        &format!("setsid /usr/sbin/slurmd -D </dev/null >>{} 2>&1 &", log.display()),
    ]));
}

/// Brings the lab's slurmd back should the test stop between its stop and its start.
struct SlurmdBack;

impl Drop for SlurmdBack {
    fn drop(&mut self) {
        if lab_slurmd().is_none() {
            start_lab_slurmd();
        }
    }
}

/// K6 (security-2026-12-c): the ordinary user's copy of `sleep` named `slurmd`, running on the
/// node beside their job (`cp /bin/sleep ~/slurmd; ~/slurmd 300 &`), while root restarts slurmd.
/// The watchdog sees the prolog's slurmd go, and finds the new one again before its first ask to
/// slurmctld (10 s): by its executable, owner and mount namespace, neither hidden by the user's
/// process (two candidates by name: "none") nor taking it for slurmd. The job then ends as
/// always: the new slurmd's epilog stops the watchdog; no `node_fail` is recorded.
#[test]
#[ignore = "needs the dev cluster: slurm/dev-cluster test"]
fn k6_a_users_process_named_slurmd_neither_hides_a_restarted_slurmd_nor_passes_for_it() {
    let dir = user_dir("sec-k6");
    let _policy = install_policy(&policy("action = \"requeue\"\n"));
    let bin = dir.join("bin");
    let go = dir.join("go");
    let script = format!(
        "mkdir -p {bin}; cp /bin/sleep {bin}/slurmd; {bin}/slurmd 300 & fake=$!; echo fake=$fake; \
         g=${{SLURM_JOB_GPUS%%,*}}; f={FAKE_PROCS}/$g/$$; echo claim=$f; echo 2G > $f; \
         while [ ! -e {go} ]; do sleep 0.2; done; rm -f $f; kill $fake; echo done",
        bin = bin.display(),
        go = go.display()
    );
    let job = sbatch(&dir, &["--gres=gpu:1", "--gpu-mem-quota=10G"], &script);
    let _cancel = CancelJob(job);
    let output = || std::fs::read_to_string(dir.join(format!("job-{job}.out"))).unwrap_or_default();
    let said = |needle: &str| watchdog_lines(job).iter().any(|l| l.contains(needle));
    assert!(
        wait_until(Duration::from_secs(60), || said("watching GPU(s) ")
            && value_of(&output(), "fake").is_some()),
        "job {job}: {} {:#?}",
        output(),
        watchdog_lines(job)
    );
    let fake: u32 = value_of(&output(), "fake").unwrap().parse().unwrap();
    let comm = std::fs::read_to_string(format!("/proc/{fake}/comm")).unwrap_or_default();
    let owner = std::fs::metadata(format!("/proc/{fake}"))
        .map(|m| m.uid())
        .unwrap_or(0);
    assert!(
        comm.trim() == "slurmd" && owner != 0,
        "pid {fake}: {comm:?}, uid {owner}"
    );

    // Root restarts slurmd (SIGTERM, then `slurmd -D` again); the job runs on.
    let old = lab_slurmd().expect("no slurmd runs in the lab");
    let _back = SlurmdBack;
    run_checked(Command::new("/usr/bin/kill").args(["-TERM", &old.to_string()]));
    assert!(
        wait_until(Duration::from_secs(20), || !Path::new(&format!("/proc/{old}"))
            .exists()),
        "slurmd {old} outlived SIGTERM"
    );
    assert!(
        wait_until(Duration::from_secs(10), || said(&format!(
            "slurmd on this node (pid {old}) is gone"
        ))),
        "{:#?}",
        watchdog_lines(job)
    );
    let t0 = Instant::now();
    start_lab_slurmd();
    assert!(
        wait_until(Duration::from_secs(20), || lab_slurmd().is_some_and(|p| p != old)),
        "slurmd did not start again: {}",
        std::fs::read_to_string(lab().join("log/slurmd.out")).unwrap_or_default()
    );
    let new = lab_slurmd().unwrap();
    let found = wait_until(Duration::from_secs(40), || {
        said(&format!("slurmd runs on this node again (pid {new})"))
    });
    let found_after = t0.elapsed();
    let lines = watchdog_lines(job);
    assert!(
        found,
        "slurmd {new} not found again (the user's 'slurmd' is {fake}): {lines:#?}"
    );
    assert!(
        !said(&format!("slurmd runs on this node again (pid {fake})")),
        "{lines:#?}"
    );
    assert!(
        !said("slurmctld no longer runs this run of the job"),
        "{lines:#?}"
    );
    // The node back in service before the job ends, as after any slurmd restart.
    assert!(
        wait_until(Duration::from_secs(30), || {
            let state = admin("sinfo", &["-h", "-o", "%T"]);
            !state.contains('*') && !state.contains("down")
        }),
        "{}",
        admin("sinfo", &["-h", "-o", "%T %E"])
    );

    // The job ends as always: the new slurmd's epilog stops the watchdog.
    std::fs::write(&go, "").unwrap();
    assert!(
        ended_as(job, "COMPLETED", Duration::from_secs(60)),
        "job {job} is {}: {}",
        state(job),
        output()
    );
    assert!(watchdog_stopped(job), "{:#?}", watchdog_lines(job));
    let lines = watchdog_lines(job);
    assert!(
        !said("slurmctld no longer runs this run of the job") && !said("node_fail"),
        "{lines:#?}"
    );
    assert!(output().contains("done"), "{}", output());
    let comment = admin_comment(job);
    assert!(!comment.contains("node_fail"), "{comment}");
    if let Some(claim) = value_of(&output(), "claim") {
        let _ = std::fs::remove_file(fake_nvml_path(&claim));
    }
    eprintln!(
        "k6: job {job}: slurmd {old} restarted as {new} beside the user's 'slurmd' {fake}; found \
         again after {found_after:?}"
    );
}
