//! Slurm 24.05's `SlurmdParameters=contain_spank` with a namespace plugin (issue 44): slurmstepd
//! runs the plugin's `user_init` in a `clone(CLONE_VM)` child that joined the job's namespaces
//! (mgr.c `_run_spank_func`); the task hooks run there anyway. The lab runs it with
//! `GMQ_NAMESPACE=tmpfs` (job_container/tmpfs on 24.11, namespace/tmpfs on 26.05) or `linux` /
//! `linux-pid` (26.05's namespace/linux; -pid adds CLONE_NEWPID and a private /proc). In a lab
//! started without it these tests say so and pass without running anything.

use std::path::Path;
use std::time::Duration;

use crate::support::*;

/// What the lab's slurm.conf names as its namespace plugin, when it runs the plugin's hooks inside
/// it (`contain_spank`); `None` otherwise.
fn namespace_plugin() -> Option<String> {
    let conf = std::fs::read_to_string(slurm_conf()).unwrap_or_default();
    if !conf
        .lines()
        .any(|l| l.starts_with("SlurmdParameters=") && l.contains("contain_spank"))
    {
        return None;
    }
    conf.lines()
        .find_map(|l| {
            l.strip_prefix("JobContainerType=")
                .or_else(|| l.strip_prefix("NamespaceType="))
        })
        .map(str::to_string)
}

/// Whether the lab's namespace plugin gives jobs a pid namespace of their own (namespace.yaml's
/// CLONE_NEWPID): a private /proc in the job's mount namespace.
fn private_proc() -> bool {
    std::fs::read_to_string(lab().join("etc/namespace.yaml")).is_ok_and(|t| t.contains("CLONE_NEWPID"))
}

fn policy() -> String {
    "[defaults]\ndefault = \"none\"\nmax = \"80G\"\n\n[enforcement]\ninterval = \"500ms\"\ngrace = \"1s\"\n\
     action = \"cancel\"\n\n[scheduling]\nshard_unit = \"1G\"\n"
        .to_string()
}

/// Shell: the job's GPU and quota, a file in the job's /tmp, and `claim SIZE` of fake GPU memory
/// for this shell's pid (tests/e2e/shards.rs's CLAIM).
const SCRIPT: &str = "GPU=${CUDA_VISIBLE_DEVICES%%,*}; echo gpu=$GPU quota=$GPU_MEM_QUOTA; \
    echo mine > /tmp/gmq-ns-$SLURM_JOB_ID; ls -a /tmp | grep -c . | sed 's/^/tmp-entries=/'; \
    f=/var/lib/fake-nvml/procs/$GPU/$$; trap 'rm -f $f' EXIT; claim() { echo \"$1\" > $f; }; \
    echo started; claim 10G; sleep 4; claim 25G; sleep 60";

fn output(dir: &Path, job: u32) -> String {
    std::fs::read_to_string(dir.join(format!("job-{job}.out"))).unwrap_or_default()
}

/// A job under contain_spank and the lab's namespace plugin gets the quota user_init decided (in
/// its clone child, through memory it shares with slurmstepd), sees a /tmp of its own, is watched,
/// is stopped over its quota, and leaves no watchdog or runtime files behind.
#[test]
#[ignore = "needs the dev cluster started with GMQ_NAMESPACE (slurm/dev-cluster)"]
fn a_job_under_contain_spank_is_watched_enforced_and_cleaned_up() {
    let Some(plugin) = namespace_plugin() else {
        eprintln!("skipped: the lab runs no namespace plugin with contain_spank (GMQ_NAMESPACE)");
        return;
    };
    let _policy = install_policy(&policy());
    let dir = user_dir("ns-contain-spank");
    let job = sbatch(&dir, &["--gpu-mem-quota=20G"], SCRIPT);
    let started = wait_until(Duration::from_secs(60), || {
        output(&dir, job).lines().any(|l| l == "started")
            || ["FAILED", "CANCELLED", "COMPLETED"].contains(&job_field(job, "JobState").as_str())
    });
    let text = output(&dir, job);
    if private_proc() {
        // The step runs in the job's pid namespace with a /proc of its own, which hides the job's
        // watchdog from the task's check (task_init_privileged): the task is refused, never run
        // unwatched. The message is the one for a dead watchdog (seen on 26.05.5).
        assert!(started, "job {job} under {plugin}: {text}");
        assert!(
            text.contains("no watchdog of the job runs on this node")
                && !text.lines().any(|l| l == "started"),
            "job {job} under {plugin} with CLONE_NEWPID: {text}"
        );
        crate::watchdog::assert_cleaned_up(job);
        return;
    }
    assert!(
        started && text.lines().any(|l| l == "started"),
        "job {job} under {plugin}: its batch script never started: {text}"
    );
    assert!(
        text.contains("gpu=") && text.contains("quota=20G"),
        "job {job}: {text}"
    );
    // The job's /tmp is its own: the file it wrote is in neither the machine's /tmp nor the root's.
    let name = format!("gmq-ns-{job}");
    assert!(
        !Path::new("/tmp").join(&name).exists(),
        "job {job}: its /tmp is the machine's"
    );
    if let Some(root) = slurm_root() {
        assert!(
            !root.join("tmp").join(&name).exists(),
            "job {job}: its /tmp is the root's"
        );
    }
    assert!(
        wait_until(Duration::from_secs(20), || syslog()
            .contains(&format!("job {job}: watching GPU(s) "))),
        "job {job}: no watchdog line"
    );
    assert!(
        wait_until(Duration::from_secs(40), || job_field(job, "JobState")
            == "CANCELLED"),
        "job {job} over its 20G quota under {plugin} was not stopped: {}",
        job_field(job, "JobState")
    );
    assert!(syslog().contains(&format!("job {job}: GPU memory 25G over its 20G quota")));
    crate::watchdog::assert_cleaned_up(job);
    eprintln!("ran under {plugin} with contain_spank: job {job} watched, stopped, cleaned up");
}
