//! Priority preemption on a contended GPU (issue 7): two jobs share one fake 80G GPU through shards
//! (2 shards per GPU, so two `--gres=shard:1` jobs land on the same GPU).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::support::*;

fn policy() -> String {
    "[defaults]\ndefault = \"none\"\n\n[enforcement]\ninterval = \"500ms\"\ngrace = \"1s\"\n\n\
     [preemption]\nenabled = true\nreserve = \"10G\"\ncooldown = \"1m\"\nheartbeat_timeout = \"3s\"\n\n\
     [preemption.ranks]\naccount = { physics = 10, chemistry = 0 }\n"
        .to_string()
}

/// The job's GPU and its claim file; the claim goes when the script ends.
const CLAIM: &str =
    "GPU=${CUDA_VISIBLE_DEVICES%%,*}; echo gpu=$GPU; f=/var/lib/fake-nvml/procs/$GPU/$$; trap 'rm -f $f' EXIT";

fn submit(dir: &Path, name: &str, options: &[&str], script: &str, env: &[(&str, &str)]) -> u32 {
    let out = dir.join(format!("{name}-%j.out")).display().to_string();
    let mut args = vec!["--parsable", "-o", &out, "--open-mode=append", "--gres=shard:1"];
    args.extend_from_slice(options);
    args.extend_from_slice(&["--wrap", script]);
    let submitted = as_user("sbatch", &args, env);
    String::from_utf8_lossy(&submitted.stdout)
        .trim()
        .parse()
        .expect("job id")
}

fn output(dir: &Path, name: &str, job: u32) -> String {
    std::fs::read_to_string(dir.join(format!("{name}-{job}.out"))).unwrap_or_default()
}

fn gpu_of(out: &str) -> Option<String> {
    out.lines()
        .find_map(|l| l.strip_prefix("gpu="))
        .map(str::to_string)
}

fn running(job: u32) -> bool {
    wait_until(Duration::from_secs(30), || {
        job_field(job, "JobState") == "RUNNING"
    })
}

/// A first, then B a moment later (so B is the newer job); B's claim waits for `go` to exist.
struct Pair {
    dir: PathBuf,
    a: u32,
    b: u32,
    go: PathBuf,
}

impl Pair {
    fn start(
        test: &str,
        a_opts: &[&str],
        a_bytes: &str,
        b_opts: &[&str],
        b_bytes: &str,
        b_env: &[(&str, &str)],
    ) -> Pair {
        let dir = user_dir(test);
        let go = dir.join("go");
        fresh_gpus();
        let a = submit(
            &dir,
            "a",
            a_opts,
            &format!("{CLAIM}; echo {a_bytes} > $f; sleep 90"),
            &[],
        );
        assert!(running(a), "A ({a}) did not start");
        std::thread::sleep(Duration::from_secs(2));
        let b_script = format!(
            "echo run=${{SLURM_RESTART_COUNT:-0}} event=$GPU_MEM_QUOTA_LAST_EVENT \
             scale=$GPU_MEM_QUOTA_BATCH_SCALE peak=$GPU_MEM_QUOTA_LAST_PEAK_BYTES; \
             {CLAIM}; echo 5G > $f; while [ ! -e {go} ]; do sleep 0.2; done; echo {b_bytes} > $f; sleep 90",
            go = go.display()
        );
        let b = submit(&dir, "b", b_opts, &b_script, b_env);
        assert!(running(b), "B ({b}) did not start");
        assert!(wait_until(Duration::from_secs(10), || gpu_of(&output(
            &dir, "b", b
        ))
        .is_some()));
        assert_eq!(
            gpu_of(&output(&dir, "a", a)),
            gpu_of(&output(&dir, "b", b)),
            "the jobs do not share a GPU"
        );
        Pair { dir, a, b, go }
    }

    /// B takes its memory: the GPU becomes contended.
    fn contend(&self) -> Instant {
        std::fs::write(&self.go, "").unwrap();
        Instant::now()
    }

    fn requeued(&self, job: u32) -> bool {
        wait_until(Duration::from_secs(40), || job_field(job, "Restarts") == "1")
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        let _ = lab_command("scancel")
            .args([self.a.to_string(), self.b.to_string()])
            .env("SLURM_CONF", slurm_conf())
            .status();
    }
}

/// Also defect 2: the preempted job, within its quota, restarts as preempted at batch scale 1.00
/// with the peak it really had.
#[test]
#[ignore = "needs the dev cluster: slurm/dev-cluster test"]
fn the_lower_priority_job_is_requeued_and_the_other_keeps_running() {
    let _policy = install_policy(&policy());
    // A: production (physics, rank 10), 45G of its 50G quota. B: chemistry (rank 0), 28G of its 30G,
    // and it claims to be physics in its environment: ranks come from slurmctld, so that changes nothing.
    let pair = Pair::start(
        "preempt-rank",
        &["--account=physics", "--gpu-mem-quota=50G"],
        "45G",
        &["--account=chemistry", "--gpu-mem-quota=30G"],
        "28G",
        &[("SLURM_JOB_ACCOUNT", "physics"), ("SLURM_JOB_QOS", "production")],
    );
    let t0 = pair.contend();
    assert!(
        pair.requeued(pair.b),
        "B ({}) was not preempted: {}",
        pair.b,
        job_field(pair.b, "JobState")
    );
    eprintln!("contention to victim requeued: {:?}", t0.elapsed());
    assert_eq!(job_field(pair.a, "JobState"), "RUNNING", "A must keep running");
    assert_eq!(job_field(pair.a, "Restarts"), "0");
    assert!(job_field(pair.b, "AdminComment").contains("preempted=1"));
    assert!(
        syslog().contains(&format!("job {}: preempted: GPU", pair.b)),
        "no preemption line"
    );
    // The restarted run is told it was preempted, not that it broke its quota.
    let (dir, b) = (pair.dir.clone(), pair.b);
    let restarted = wait_until(Duration::from_secs(40), || output(&dir, "b", b).contains("run=1"));
    assert!(restarted, "B did not restart");
    // Defect 2: it stayed within its quota (28G of 30G), so its batch needs no shrinking, and its
    // peak is the 28G it had, not its quota.
    assert!(
        output(&dir, "b", b).contains("run=1 event=preempted scale=1.00 peak=30064771072\n"),
        "{}",
        output(&dir, "b", b)
    );
}

#[test]
#[ignore = "needs the dev cluster: slurm/dev-cluster test"]
fn with_equal_priority_the_newest_job_goes() {
    let _policy = install_policy(&policy());
    let chemistry = ["--account=chemistry", "--gpu-mem-quota=50G"];
    let pair = Pair::start("preempt-newest", &chemistry, "45G", &chemistry, "28G", &[]);
    pair.contend();
    assert!(
        pair.requeued(pair.b),
        "the newest job ({}) was not preempted",
        pair.b
    );
    assert_eq!(job_field(pair.a, "Restarts"), "0");
}

#[test]
#[ignore = "needs the dev cluster: slurm/dev-cluster test"]
fn a_volunteer_goes_first() {
    let _policy = install_policy(&policy());
    let pair = Pair::start(
        "preempt-volunteer",
        &[
            "--account=chemistry",
            "--gpu-mem-quota=50G",
            "--gpu-mem-preemptible",
        ],
        "45G",
        &["--account=chemistry", "--gpu-mem-quota=50G"],
        "28G",
        &[],
    );
    pair.contend();
    assert!(
        pair.requeued(pair.a),
        "the volunteer ({}) was not preempted",
        pair.a
    );
    assert_eq!(job_field(pair.b, "Restarts"), "0", "the other job must stay");
}

#[test]
#[ignore = "needs the dev cluster: slurm/dev-cluster test"]
fn a_victim_whose_watchdog_died_is_requeued_by_another_once() {
    let _policy = install_policy(&policy());
    let pair = Pair::start(
        "preempt-dead",
        &["--account=physics", "--gpu-mem-quota=50G"],
        "45G",
        &["--account=chemistry", "--gpu-mem-quota=30G"],
        "28G",
        &[],
    );
    // Kill B's watchdog once it has joined the registry: its entry stays, its heartbeat stops.
    let pid_file = runtime_dir().join(format!("jobs/{}/watchdog.pid", pair.b));
    let entry = runtime_dir().join(format!("registry/{}", pair.b));
    assert!(
        wait_until(Duration::from_secs(15), || pid_file.exists() && entry.exists()),
        "B's watchdog never joined the registry"
    );
    let pid = std::fs::read_to_string(&pid_file).unwrap_or_default();
    let pid = pid
        .split_whitespace()
        .next()
        .expect("B's watchdog pid")
        .to_string();
    admin("kill", &["-9", &pid]);
    let proc_dir = PathBuf::from(format!("/proc/{pid}"));
    assert!(
        wait_until(Duration::from_secs(5), || !proc_dir.exists()),
        "B's watchdog ({pid}) survived SIGKILL"
    );
    assert!(entry.exists(), "B's registry entry must outlive its watchdog");
    pair.contend();
    assert!(
        pair.requeued(pair.b),
        "B ({}) was not preempted for its dead watchdog",
        pair.b
    );
    assert_eq!(job_field(pair.a, "Restarts"), "0");
    let acted = format!("job {}: preempted job {}:", pair.a, pair.b);
    assert!(
        wait_until(Duration::from_secs(5), || syslog()
            .lines()
            .any(|l| l.contains(&acted) && l.contains("whose watchdog is gone"))),
        "A's watchdog must say it acted for B's dead one"
    );
    // B's restart gets a watchdog of its own; the contention is over and nobody acts again.
    let (dir, b) = (pair.dir.clone(), pair.b);
    let restarted = wait_until(Duration::from_secs(40), || output(&dir, "b", b).contains("run=1"));
    assert!(restarted, "B did not restart");
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(job_field(pair.a, "Restarts"), "0");
    assert_eq!(job_field(pair.b, "Restarts"), "1", "B must be requeued once");
    let log = syslog();
    assert_eq!(
        log.matches(&acted).count(),
        1,
        "A's watchdog must act for B exactly once"
    );
    assert_eq!(
        log.lines()
            .filter(|l| l.contains(&format!("job {}: preempted: GPU", pair.b)))
            .count(),
        0,
        "B's own (dead) watchdog cannot have acted"
    );
    // When both end, nothing of either is left: runtime directories and metrics files.
    let (a, b) = (pair.a, pair.b);
    drop(pair);
    for job in [a, b] {
        let files = [
            runtime_dir().join(format!("jobs/{job}")),
            lab().join(format!("gmq/metrics/gpu_mem_quota_job_{job}.prom")),
        ];
        assert!(
            wait_until(Duration::from_secs(15), || files.iter().all(|f| !f.exists())),
            "job {job}: left behind: {:?}",
            files.iter().filter(|f| f.exists()).collect::<Vec<_>>()
        );
    }
}

#[test]
#[ignore = "needs the dev cluster: slurm/dev-cluster test"]
fn legitimate_growth_preempts_one_job_and_oscillation_does_not_thrash() {
    let _policy = install_policy(&policy());
    // Both within their quotas; A (production) grows legitimately and then oscillates for a while.
    let pair = Pair::start(
        "preempt-oscillate",
        &["--account=physics", "--gpu-mem-quota=70G"],
        "40G",
        &["--account=chemistry", "--gpu-mem-quota=30G"],
        "25G",
        &[],
    );
    pair.contend();
    let a_claims: Vec<PathBuf> = std::fs::read_dir(fake_nvml_dir().join("procs"))
        .unwrap()
        .flat_map(|gpu| std::fs::read_dir(gpu.unwrap().path()).unwrap())
        .map(|e| e.unwrap().path())
        .collect();
    let gpu = gpu_of(&output(&pair.dir, "a", pair.a)).unwrap();
    let a_claim = a_claims
        .iter()
        .find(|p| {
            p.parent().and_then(|d| d.file_name()) == Some(std::ffi::OsStr::new(&gpu))
                && std::fs::read_to_string(p)
                    .map(|t| t.starts_with("40G"))
                    .unwrap_or(false)
        })
        .cloned()
        .expect("A's claim file");
    // A grows to 50G: 50 + 25 leaves under 10G free. One job must go: B, the lower rank.
    rewrite_claim(&a_claim, "50G\n");
    assert!(pair.requeued(pair.b), "B ({}) was not preempted", pair.b);
    // B restarts and takes its 25G again while A oscillates between 45G and 68G (within its quota)
    // for a minute: the GPU is contended again and again, but it cools down and B is protected after
    // its restart, so nobody else goes.
    let end = Instant::now() + Duration::from_secs(60);
    let mut high = false;
    while Instant::now() < end {
        high = !high;
        rewrite_claim(&a_claim, if high { "68G\n" } else { "45G\n" });
        std::thread::sleep(Duration::from_secs(3));
    }
    assert_eq!(job_field(pair.a, "Restarts"), "0", "A was preempted: thrash");
    assert_eq!(job_field(pair.b, "Restarts"), "1", "B preempted more than once");
    let log = syslog();
    let preemptions = log
        .lines()
        .filter(|l| {
            l.contains(": preempted: GPU")
                && (l.contains(&format!("job {}:", pair.a)) || l.contains(&format!("job {}:", pair.b)))
        })
        .count();
    assert_eq!(preemptions, 1, "exactly one preemption in the whole episode");
}

/// A freezer cgroup made by the test user below `job`'s batch step (cgroup v1, where Slurm 22.05
/// gives a step's directories to the job's user); `None` where there is none to make.
fn user_cgroup_below(job: u32, name: &str) -> Option<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let uid = std::fs::metadata(format!("/home/{}", test_user())).ok()?.uid();
    let step = std::fs::read_dir("/sys/fs/cgroup/freezer")
        .ok()?
        .flatten()
        .filter(|top| top.file_name().to_string_lossy().starts_with("slurm"))
        .map(|top| top.path().join(format!("uid_{uid}/job_{job}/step_batch")))
        .find(|dir| dir.is_dir())?;
    let dir = step.join(name);
    // -p: a directory of that name left below a step of the same job id by an earlier lab run
    // (job ids start again with every lab) is the user's as much as a new one.
    as_user("mkdir", &["-p", &dir.display().to_string()], &[])
        .status
        .success()
        .then_some(dir)
}

/// Removes a cgroup made by [`user_cgroup_below`] once its last process has left: a process killed
/// with its shell may leave a child behind for a moment (the helper's `sleep`), and a cgroup that
/// is not removed keeps its job's directory, and so the next lab's job of that id, from going.
fn remove_user_cgroup(dir: &Path) {
    wait_until(Duration::from_secs(10), || {
        std::fs::remove_dir(dir).is_ok() || !dir.exists()
    });
}

/// G8: a process of the user taking turns between cgroups they made below two CPU-only jobs of
/// theirs made each job look like one arriving on the GPU, again and again, and preemption waited
/// for them to register for as long as the loop ran. A user-made claim makes no job arriving now,
/// and the lower-ranked job is requeued as without the helper.
#[test]
#[ignore = "needs the dev cluster: slurm/dev-cluster test"]
fn a_user_moving_a_process_between_their_jobs_cannot_keep_preemption_waiting() {
    let _policy = install_policy(&policy());
    let dir = user_dir("preempt-g8");
    fresh_gpus();
    let cpu_only: Vec<u32> = (0..2).map(|_| sbatch(&dir, &[], "sleep 300")).collect();
    let _cancel_cpu = CancelJobs(cpu_only.clone());
    assert!(
        cpu_only.iter().all(|&j| running(j)),
        "the CPU-only jobs did not start"
    );
    let Some(x) = wait_for(|| user_cgroup_below(cpu_only[0], "x")) else {
        eprintln!("skipped: no user-writable freezer step cgroups here (cgroup v2, or Slurm 24.11)");
        return;
    };
    // The second job's step cgroup may be made a moment after the first's.
    let y = wait_for(|| user_cgroup_below(cpu_only[1], "y")).expect("the second job's cgroup");
    let pair = Pair::start(
        "preempt-g8",
        &["--account=physics", "--gpu-mem-quota=50G"],
        "45G",
        &["--account=chemistry", "--gpu-mem-quota=30G"],
        "28G",
        &[],
    );
    let gpu = gpu_of(&output(&pair.dir, "a", pair.a)).expect("A's GPU");
    // 1G on the pair's GPU, in x then y every 2 s: each job missing for longer than an interval.
    let pid_file = dir.join("helper.pid");
    let helper_script = format!(
        "echo $$ > {pid}; echo 1G > /var/lib/fake-nvml/procs/{gpu}/$$; while :; do echo $$ > {x}/cgroup.procs; sleep 2; \
         echo $$ > {y}/cgroup.procs; sleep 2; done",
        pid = pid_file.display(),
        x = x.display(),
        y = y.display()
    );
    let mut helper = lab_command("runuser")
        .args(["-u", &test_user(), "--", "bash", "-c", &helper_script])
        .spawn()
        .expect("the helper");
    std::thread::sleep(Duration::from_secs(3));
    pair.contend();
    let requeued = pair.requeued(pair.b);
    let helper_pid = std::fs::read_to_string(&pid_file)
        .unwrap_or_default()
        .trim()
        .to_string();
    if !helper_pid.is_empty() {
        let _ = Command::new("/bin/kill").args(["-9", &helper_pid]).status();
        let _ = std::fs::remove_file(fake_nvml_dir().join("procs").join(&gpu).join(&helper_pid));
    }
    let _ = helper.wait();
    for cgroup in [&x, &y] {
        remove_user_cgroup(cgroup);
    }
    assert!(
        requeued,
        "B ({}) was not preempted while the helper took turns: {}",
        pair.b,
        job_field(pair.b, "JobState")
    );
}

/// Waits up to 30 s for `find` to find something (a loaded machine starts a batch step late).
fn wait_for<T>(mut find: impl FnMut() -> Option<T>) -> Option<T> {
    let mut found = None;
    wait_until(Duration::from_secs(30), || {
        found = find();
        found.is_some()
    });
    found
}

struct CancelJobs(Vec<u32>);

impl Drop for CancelJobs {
    fn drop(&mut self) {
        let ids: Vec<String> = self.0.iter().map(u32::to_string).collect();
        let _ = lab_command("scancel")
            .args(&ids)
            .env("SLURM_CONF", slurm_conf())
            .status();
    }
}

/// G9: where cgroup.conf does not constrain devices (the lab's), a job given no GPU at all puts
/// 40G on the GPU of a job that keeps within its quota. No quota or watchdog holds it, so before
/// the fix the contention it made requeued the job within its quota, the only one registered.
/// Now the GPU's watchdog looks it up in slurmctld's record (given no GPU), says so, and on
/// contention cancels it first; the job within its quota keeps running.
#[test]
#[ignore = "needs the dev cluster: slurm/dev-cluster test"]
fn g9_a_job_given_no_gpu_is_cancelled_before_a_job_within_its_quota() {
    let _policy = install_policy(&policy());
    let dir = user_dir("preempt-g9");
    fresh_gpus();
    let a = submit(
        &dir,
        "a",
        &["--account=chemistry", "--gpu-mem-quota=50G"],
        &format!("{CLAIM}; echo 35G > $f; sleep 90"),
        &[],
    );
    assert!(running(a), "A ({a}) did not start");
    assert!(wait_until(Duration::from_secs(10), || gpu_of(&output(
        &dir, "a", a
    ))
    .is_some()));
    let gpu = gpu_of(&output(&dir, "a", a)).unwrap();
    // As the user, without any GPU request: its own `--gres` is none at all.
    let out = dir.join("rogue-%j.out").display().to_string();
    let script = format!(
        "f=/var/lib/fake-nvml/procs/{gpu}/$$; trap 'rm -f $f' EXIT; echo 40G > $f; sleep 90; echo not-stopped"
    );
    let submitted = as_user(
        "sbatch",
        &["--parsable", "-o", &out, "--account=physics", "--wrap", &script],
        &[],
    );
    let rogue: u32 = String::from_utf8_lossy(&submitted.stdout)
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("sbatch: {}", text(&submitted)));
    let cancelled = wait_until(Duration::from_secs(60), || {
        job_field(rogue, "JobState") == "CANCELLED"
    });
    let _ = lab_command("scancel")
        .args([a.to_string(), rogue.to_string()])
        .env("SLURM_CONF", slurm_conf())
        .status();
    let lines = watchdog_lines(a);
    assert!(
        cancelled,
        "job {rogue}, given no GPU, is {} on GPU {gpu}: {lines:#?}",
        job_field(rogue, "JobState")
    );
    assert_eq!(
        job_field(a, "Restarts"),
        "0",
        "A, within its quota, was preempted: {lines:#?}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains(&format!("job {rogue} holds 40G here, but Slurm gave it no GPU"))),
        "{lines:#?}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains(&format!("preempted job {rogue}: GPU "))
                && l.contains("given no GPU by Slurm")),
        "{lines:#?}"
    );
    let rogue_out = std::fs::read_to_string(dir.join(format!("rogue-{rogue}.out"))).unwrap_or_default();
    assert!(!rogue_out.contains("not-stopped"), "{rogue_out}");
}

/// G13: `sbatch --no-requeue` made a job immune to preemption, so a job within its quota and ranked
/// above it was requeued in its place. With `non_requeueable = "cancel"` the lower-ranked job that
/// cannot be requeued is the victim all the same, cancelled; the other keeps running. (The default,
/// `"skip"`, keeps the documented behaviour: `preempt_victim.rs::jobs_that_cannot_be_preempted`.)
#[test]
#[ignore = "needs the dev cluster: slurm/dev-cluster test"]
fn g13_a_job_that_opted_out_of_requeue_is_cancelled_when_the_policy_says_so() {
    let policy = policy().replace(
        "heartbeat_timeout = \"3s\"\n",
        "heartbeat_timeout = \"3s\"\nnon_requeueable = \"cancel\"\n",
    );
    assert!(policy.contains("non_requeueable"));
    let _policy = install_policy(&policy);
    let pair = Pair::start(
        "preempt-g13",
        &["--account=physics", "--gpu-mem-quota=50G"],
        "45G",
        &["--account=chemistry", "--gpu-mem-quota=30G", "--no-requeue"],
        "28G",
        &[],
    );
    pair.contend();
    let cancelled = wait_until(Duration::from_secs(40), || {
        job_field(pair.b, "JobState") == "CANCELLED"
    });
    assert!(
        cancelled,
        "B ({}, --no-requeue, lower rank) is {}; A is {} with {} restart(s)",
        pair.b,
        job_field(pair.b, "JobState"),
        job_field(pair.a, "JobState"),
        job_field(pair.a, "Restarts")
    );
    assert_eq!(job_field(pair.a, "JobState"), "RUNNING", "A must keep running");
    assert_eq!(job_field(pair.a, "Restarts"), "0");
    assert!(
        syslog().contains(&format!("job {}: preempted: GPU", pair.b)),
        "no preemption line"
    );
}

/// Rewrites the user's claim file in place (as root). Not `std::fs::write`: its O_CREAT on another
/// user's file in a sticky, world-writable directory is refused even to root where systemd sets
/// `fs.protected_regular` (the v2 lab's VM: "Permission denied").
fn rewrite_claim(path: &Path, text: &str) {
    use std::io::Write;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    file.write_all(text.as_bytes()).unwrap();
}
