//! Talking to the dev cluster (slurm/dev-cluster) the way a user does: real sbatch/srun/salloc,
//! run as the ordinary test user, with the lab's SLURM_CONF.
//!
//! A lab whose Slurm runs in a root of its own (`SLURM=24.11 slurm/dev-cluster`) says so in
//! `etc/slurm-root`; then every command that talks to Slurm or stands in for one of its processes runs
//! through `chroot ROOT` ([`lab_command`]). The lab directory, /home, /proc, /sys and /dev are the same
//! inside and out; the fake GPUs are the lab's own ([`fake_nvml_dir`]).

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

pub fn lab() -> PathBuf {
    PathBuf::from(std::env::var("GMQ_LAB").unwrap_or_else(|_| "/var/lib/gpu-mem-quota-lab".into()))
}

pub fn test_user() -> String {
    std::env::var("GMQ_TEST_USER").unwrap_or_else(|_| "gmq-user".into())
}

pub fn slurm_conf() -> String {
    lab().join("etc/slurm.conf").display().to_string()
}

/// The root the lab's Slurm runs in, or `None` for this machine's own Slurm.
pub fn slurm_root() -> Option<PathBuf> {
    static ROOT: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();
    ROOT.get_or_init(|| {
        let text = std::fs::read_to_string(lab().join("etc/slurm-root")).ok()?;
        let root = text.trim();
        (!root.is_empty()).then(|| PathBuf::from(root))
    })
    .clone()
}

/// `program` as the lab's Slurm would run it: inside its root where it has one; in the network
/// namespace of slurmctld on a multi-node lab (whose nodes and controller have addresses only there).
pub fn lab_command(program: impl AsRef<OsStr>) -> Command {
    let mut words: Vec<OsString> = Vec::new();
    if let Some(netns) = login_netns() {
        words.extend([
            "/usr/bin/nsenter".into(),
            format!("--net={}", netns.display()).into(),
            "--".into(),
        ]);
    }
    launch(words, program)
}

/// `words` (entering namespaces, or nothing) going on with `program`, chrooted into the lab's Slurm
/// root where it has one, with the lab's SLURM_CONF.
fn launch(mut words: Vec<OsString>, program: impl AsRef<OsStr>) -> Command {
    if let Some(root) = slurm_root() {
        words.extend(["/usr/sbin/chroot".into(), root.into_os_string()]);
    }
    words.push(program.as_ref().into());
    let mut cmd = Command::new(&words[0]);
    cmd.args(&words[1..]).env("SLURM_CONF", slurm_conf());
    cmd
}

/// The controller's network namespace of a multi-node lab (`etc/login-netns`), where the tools run.
pub fn login_netns() -> Option<PathBuf> {
    let text = std::fs::read_to_string(lab().join("etc/login-netns")).ok()?;
    let path = text.trim();
    (!path.is_empty()).then(|| PathBuf::from(path))
}

/// A node of a multi-node lab (slurm/lab-nodes, `etc/nodes`): its Slurm name, host name, address
/// and network namespace.
#[derive(Clone, Debug)]
pub struct Node {
    pub name: String,
    pub host: String,
    pub netns: String,
}

/// The lab's nodes (none on a one-node lab).
pub fn nodes() -> Vec<Node> {
    let text = std::fs::read_to_string(lab().join("etc/nodes")).unwrap_or_default();
    text.lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            (f.len() >= 4).then(|| Node {
                name: f[0].into(),
                host: f[1].into(),
                netns: f[3].into(),
            })
        })
        .collect()
}

impl Node {
    /// The node's own files as this process sees them (`$LAB/nodes/<name>`).
    pub fn dir(&self) -> PathBuf {
        lab().join("nodes").join(&self.name)
    }

    /// The node's fake GPUs (what its jobs see as /var/lib/fake-nvml).
    pub fn fake_nvml_dir(&self) -> PathBuf {
        self.dir().join("fake-nvml")
    }

    /// The node's runtime directory (the policy's `runtime_dir`, `$LAB/gmq/run` on the node).
    pub fn runtime_dir(&self) -> PathBuf {
        self.dir().join("gmq/run")
    }

    /// The node's metrics directory (the policy's `textfile_dir`).
    pub fn metrics_dir(&self) -> PathBuf {
        self.dir().join("gmq/metrics")
    }

    /// `program` run by root in the node's namespaces (network, mount, UTS, cgroup), in the lab's
    /// Slurm root where it has one: as on the node.
    pub fn command(&self, program: impl AsRef<OsStr>) -> Command {
        let ns = lab_ns_dir().display().to_string();
        let words = [
            "/usr/bin/nsenter".to_string(),
            format!("--net=/run/netns/{}", self.netns),
            format!("--mount={ns}/{}.mnt", self.name),
            format!("--uts={ns}/{}.uts", self.name),
            format!("--cgroup={ns}/{}.cgroup", self.name),
            "--".to_string(),
        ];
        launch(words.map(OsString::from).to_vec(), program)
    }
}

/// Where slurm/lab-nodes keeps the nodes' namespace files: `/run/gmq-lab-<ID>` next to the
/// controller's network namespace `gmq<ID>-ctl`.
fn lab_ns_dir() -> PathBuf {
    let netns = login_netns().unwrap_or_default();
    let name = netns.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    let id = name.trim_start_matches("gmq").trim_end_matches("-ctl");
    PathBuf::from(format!("/run/gmq-lab-{id}"))
}

/// Where this process finds a fake-NVML file a job names (`/var/lib/fake-nvml/procs/0/123`).
/// On a multi-node lab: the node's where it is there (a job's pid names one node's claim).
pub fn fake_nvml_path(seen_by_job: &str) -> PathBuf {
    match Path::new(seen_by_job).strip_prefix("/var/lib/fake-nvml") {
        Ok(rest) => nodes()
            .iter()
            .map(|node| node.fake_nvml_dir().join(rest))
            .find(|path| path.exists())
            .unwrap_or_else(|| fake_nvml_dir().join(rest)),
        Err(_) => PathBuf::from(seen_by_job),
    }
}

/// The lab's fake-GPU scenario directory (tests/fake-nvml/README.md) as this process sees it. Jobs
/// and the watchdog see it as /var/lib/fake-nvml, as scripts name it.
pub fn fake_nvml_dir() -> PathBuf {
    if let Some(first) = nodes().first() {
        return first.fake_nvml_dir();
    }
    match slurm_root() {
        Some(_) => lab().join("fake-nvml"),
        None => PathBuf::from("/var/lib/fake-nvml"),
    }
}

/// Where /var/log/syslog stood when this run of the tests began. Job ids start again with every new
/// lab, so lines from an earlier run (an earlier CI run on the same machine) can name the same jobs:
/// the tests read only what was logged since.
static SYSLOG_START: std::sync::OnceLock<u64> = std::sync::OnceLock::new();

fn mark_syslog() {
    SYSLOG_START.get_or_init(|| std::fs::metadata("/var/log/syslog").map(|m| m.len()).unwrap_or(0));
}

/// The syslog lines written since this run of the tests began.
pub fn syslog() -> String {
    mark_syslog();
    let start = *SYSLOG_START.get().unwrap_or(&0) as usize;
    let all = std::fs::read("/var/log/syslog").unwrap_or_default();
    String::from_utf8_lossy(all.get(start.min(all.len())..).unwrap_or_default()).into_owned()
}

/// A directory the test user can write job output to, fresh for one test.
pub fn user_dir(test: &str) -> PathBuf {
    mark_syslog();
    let dir = PathBuf::from(format!("/home/{}/e2e/{test}", test_user()));
    let _ = std::fs::remove_dir_all(&dir);
    run_checked(
        lab_command("runuser")
            .args(["-u", &test_user(), "--", "mkdir", "-p"])
            .arg(&dir),
    );
    dir
}

/// Runs a command as the test user, in its home, with only the environment a login shell would have
/// plus `extra_env`.
pub fn as_user(program: &str, args: &[&str], extra_env: &[(&str, &str)]) -> Output {
    user_command(lab_command("runuser"), program, args, extra_env)
}

/// [`as_user`] on this machine even where the lab's Slurm runs in a root of its own: for tools the
/// root lacks (a compiler).
pub fn as_user_here(program: &str, args: &[&str], extra_env: &[(&str, &str)]) -> Output {
    user_command(Command::new("runuser"), program, args, extra_env)
}

fn user_command(mut cmd: Command, program: &str, args: &[&str], extra_env: &[(&str, &str)]) -> Output {
    let user = test_user();
    // env -C: the home is the working directory inside a lab's root too (chroot starts in its /).
    cmd.args(["-u", &user, "--", "env", "-i", "-C"])
        .arg(format!("/home/{user}"))
        .arg(format!("HOME=/home/{user}"))
        .arg(format!("USER={user}"))
        .arg("PATH=/usr/local/bin:/usr/bin:/bin")
        .arg(format!("SLURM_CONF={}", slurm_conf()));
    for (k, v) in extra_env {
        cmd.arg(format!("{k}={v}"));
    }
    cmd.arg(program).args(args).current_dir(format!("/home/{user}"));
    cmd.output()
        .unwrap_or_else(|e| panic!("cannot run {program}: {e}"))
}

/// stdout and stderr of a command, together.
pub fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

pub fn run_checked(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs a Slurm admin command (as root) against the lab.
pub fn admin(program: &str, args: &[&str]) -> String {
    run_checked(lab_command(program).args(args))
}

pub struct Job {
    pub id: u32,
    pub output: String,
}

/// `sbatch` as the test user, output to `dir/job-%j.out`; returns the job id without waiting.
pub fn sbatch(dir: &Path, options: &[&str], script: &str) -> u32 {
    let out_file = dir.join("job-%j.out").display().to_string();
    let mut args = vec!["--parsable", "-o", &out_file];
    args.extend_from_slice(options);
    args.extend_from_slice(&["--wrap", script]);
    let submitted = as_user("sbatch", &args, &[]);
    let stdout = String::from_utf8_lossy(&submitted.stdout);
    stdout.trim().parse().unwrap_or_else(|_| {
        panic!(
            "sbatch gave no job id: {stdout} {}",
            String::from_utf8_lossy(&submitted.stderr)
        )
    })
}

/// `sbatch --wait` as the test user; returns the job id and the text of its output file.
pub fn sbatch_wait(dir: &Path, options: &[&str], script: &str) -> Job {
    sbatch_wait_env(dir, options, script, &[])
}

pub fn sbatch_wait_env(dir: &Path, options: &[&str], script: &str, env: &[(&str, &str)]) -> Job {
    let out_file = dir.join("job-%j.out").display().to_string();
    let mut args = vec!["--wait", "--parsable", "-o", &out_file];
    args.extend_from_slice(options);
    args.extend_from_slice(&["--wrap", script]);
    let out = as_user("sbatch", &args, env);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let id: u32 = stdout
        .lines()
        .next()
        .and_then(|l| l.split(';').next())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or_else(|| {
            panic!(
                "sbatch gave no job id: {stdout} {}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
    let path = dir.join(format!("job-{id}.out"));
    let output = std::fs::read_to_string(&path).unwrap_or_default();
    Job { id, output }
}

/// The highest job id slurmctld has handed out (0 if none), to prove that nothing was submitted.
pub fn last_job_id() -> u32 {
    // sacct sees finished jobs, squeue the rest, and with --states=all also the jobs that ended
    // within MinJobAge: slurmdbd may lag (seconds, on a busy machine), so take both.
    let sacct = admin(
        "sacct",
        &["-a", "-X", "-n", "-P", "-o", "JobIDRaw", "-S", "2000-01-01"],
    );
    let squeue = admin("squeue", &["-h", "--states=all", "-o", "%i"]);
    sacct
        .lines()
        .chain(squeue.lines())
        .filter_map(|l| l.trim().parse::<u32>().ok())
        .max()
        .unwrap_or(0)
}

pub fn slurmd_log() -> String {
    std::fs::read_to_string(lab().join("log/slurmd.log")).unwrap_or_default()
}

/// Waits for the job's watchdog to have left (it decides on self-healing before it goes, and it
/// goes once the job's processes have ended here: the epilog's signal, or an empty job cgroup).
pub fn watchdog_stopped(job: u32) -> bool {
    wait_until(Duration::from_secs(90), || {
        syslog().contains(&format!("job {job}: stopping: GPU "))
    })
}

/// Waits until `check` holds or `timeout` passes; returns whether it held.
pub fn wait_until(timeout: Duration, mut check: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + timeout;
    while Instant::now() < end {
        if check() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    check()
}

/// The lines of `text` that set one of our variables, sorted, e.g. `GPU_MEM_QUOTA_BYTES=...`.
pub fn quota_vars(text: &str, marker: &str) -> Vec<String> {
    let mut vars: Vec<String> = text
        .lines()
        .filter_map(|l| l.strip_prefix(marker))
        .filter(|l| l.starts_with("GPU_MEM_QUOTA") && !l.starts_with("GPU_MEM_QUOTA_STATUS_FILE="))
        .map(str::to_string)
        .collect();
    vars.sort();
    vars
}

/// The repository's example policy: what the dev cluster runs with.
pub fn example_policy() -> String {
    std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../etc/gpu-mem-quota.toml"
    ))
    .expect("etc/gpu-mem-quota.toml")
}

/// Puts `text` in place as the lab's policy (read by sbatch and by every step) until dropped,
/// then puts the example policy back.
pub struct PolicyGuard;

pub fn install_policy(text: &str) -> PolicyGuard {
    write_policy(text);
    PolicyGuard
}

/// The lab's edges (fake NVML, runtime and state directories) put into a policy's `[enforcement]`
/// where it leaves them out or names the real system's (the example does), the way slurm/dev-cluster
/// does for the example. A value a test sets on purpose (a missing library) is kept.
pub fn lab_policy(text: &str) -> String {
    let lab = lab();
    let lab_values = [
        (
            "nvml_library",
            "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1",
            lab.join("lib/libnvidia-ml.so.1"),
        ),
        ("runtime_dir", "/run/gpu-mem-quota", lab.join("gmq/run")),
        ("state_dir", "/var/lib/gpu-mem-quota", lab.join("gmq/state")),
    ];
    let metrics = format!("textfile_dir = \"{}\"", lab.join("gmq/metrics").display());
    let mut out = String::new();
    let mut set = Vec::new();
    for line in text.lines() {
        let mut line = line.to_string();
        for (key, system, ours) in &lab_values {
            if let Some((k, v)) = line.split_once('=') {
                if k.trim() == *key {
                    set.push(*key);
                    if v.trim().trim_matches('"') == *system {
                        line = format!("{key} = \"{}\"", ours.display());
                    }
                }
            }
        }
        out.push_str(&line);
        out.push('\n');
    }
    let missing: String = lab_values
        .iter()
        .filter(|(key, _, _)| !set.contains(key))
        .map(|(key, _, ours)| format!("{key} = \"{}\"\n", ours.display()))
        .collect();
    match out.find("[enforcement]\n") {
        Some(at) => out.insert_str(at + "[enforcement]\n".len(), &missing),
        None => out.push_str(&format!("\n[enforcement]\n{missing}")),
    }
    // The lab's metrics directory, where the policy names the system's or none.
    if out.contains("textfile_dir = \"/var/lib/prometheus/node-exporter\"") {
        out = out.replace("textfile_dir = \"/var/lib/prometheus/node-exporter\"", &metrics);
    } else if !out.contains("[metrics]") {
        out.push_str(&format!("\n[metrics]\n{metrics}\n"));
    }
    out
}

pub fn runtime_dir() -> PathBuf {
    lab().join("gmq/run")
}

fn write_policy(text: &str) {
    let text = &lab_policy(text);
    let path = lab().join("etc/gpu-mem-quota.toml");
    let tmp = path.with_extension("toml.tmp");
    std::fs::write(&tmp, text).expect("write policy");
    std::fs::rename(&tmp, &path).expect("install policy");
}

impl Drop for PolicyGuard {
    fn drop(&mut self) {
        write_policy(&example_policy());
    }
}

/// A policy with no caps and no default: the plugin only carries what users ask for.
pub const OPEN_POLICY: &str = "[defaults]\ndefault = \"none\"\n";

/// The job's AdminComment as slurmctld has it, while it knows the job (running, or ended within
/// MinJobAge): squeue's column, asked last and alone, which no user text can pose as. Accounting
/// (`sacct`) has it only once the job has ended.
pub fn admin_comment(job: u32) -> String {
    let out = admin(
        "squeue",
        &[
            "--noheader",
            "--states=all",
            &format!("--jobs={job}"),
            "--Format=JobID:|,admin_comment:|",
        ],
    );
    let line = out
        .lines()
        .find(|l| l.starts_with(&format!("{job}|")))
        .unwrap_or_default();
    let text = line
        .split_once('|')
        .map_or("", |(_, rest)| rest.strip_suffix('|').unwrap_or(rest));
    if text == "(null)" {
        String::new()
    } else {
        text.to_string()
    }
}

/// The job's state once it has ended and its epilog has run (no longer pending, running or
/// COMPLETING), or `None` if it has not within `timeout`.
pub fn final_state(job: u32, timeout: Duration) -> Option<String> {
    let mut state = String::new();
    wait_until(timeout, || {
        state = job_field(job, "JobState");
        !matches!(
            state.as_str(),
            "PENDING" | "CONFIGURING" | "RUNNING" | "COMPLETING" | ""
        )
    })
    .then_some(state)
}

/// The job's state once its epilog has run. `sbatch --wait` returns when the batch step ends,
/// while the job may still be COMPLETING for a moment.
pub fn ended_state(job: u32) -> String {
    final_state(job, Duration::from_secs(60)).unwrap_or_else(|| job_field(job, "JobState"))
}

/// One field of `scontrol show job -o` (`JobState`, `Restarts`, `AdminComment`, ...).
pub fn job_field(job: u32, key: &str) -> String {
    let show = admin("scontrol", &["show", "job", "-o", &job.to_string()]);
    let start = show
        .find(&format!(" {key}="))
        .map(|i| i + key.len() + 2)
        .unwrap_or(show.len());
    // Up to the next blank or the line's end: 26.05 prints TresPerNode last, before the newline.
    show[start..]
        .split(char::is_whitespace)
        .next()
        .unwrap_or("")
        .to_string()
}

/// examples/train_loop.py copied into the test's directory (readable and runnable by the test
/// user); its path.
pub fn copy_example(dir: &Path) -> String {
    let example = dir.join("train_loop.py");
    std::fs::copy(
        concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/train_loop.py"),
        &example,
    )
    .unwrap();
    run_checked(std::process::Command::new("chmod").arg("0755").arg(&example));
    example.display().to_string()
}

/// Idle GPUs for a test that needs them: no claim files left by earlier jobs (a dead job's pid can be
/// reused by a later process of the same user, and the fake would count its claim again), and no
/// preemption cooldown left by an earlier test. (pid_max is 32768 here: pids come round fast.)
pub fn fresh_gpus() {
    for gpu in std::fs::read_dir(fake_nvml_dir().join("procs"))
        .unwrap()
        .flatten()
    {
        for claim in std::fs::read_dir(gpu.path()).unwrap().flatten() {
            let _ = std::fs::remove_file(claim.path());
        }
    }
    if let Ok(entries) = std::fs::read_dir(runtime_dir().join("registry")) {
        for entry in entries.flatten() {
            if entry.file_name().to_string_lossy().starts_with("gpu-") {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }
}

/// This run's syslog lines of our watchdogs about `job` (from every node of a multi-node lab).
pub fn watchdog_lines(job: u32) -> Vec<String> {
    let about = format!(": job {job}: ");
    syslog()
        .lines()
        .filter(|l| l.contains("gpu-mem-quota[") && l.contains(&about))
        .map(str::to_string)
        .collect()
}
