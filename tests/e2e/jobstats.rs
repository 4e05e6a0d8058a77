//! Beside jobstats (issue 44): its EpilogSlurmctld replaces the AdminComment in accounting with
//! `JS1:<base64(gzip(json))>` after the job has ended. The lab's EpilogSlurmctld runs a replica of
//! jobstats' write (slurm/dev-cluster: `jobstats-epilog-replica`, its `sacctmgr -i update job ...
//! set AdminComment=JS1:...` line for line) and `gpu-mem-quota keep-record`, in either order;
//! afterwards sacct has both records, and `report` shows both.

use std::time::Duration;

use crate::support::*;

/// Makes the lab's EpilogSlurmctld run `steps` (in this order) while it lives.
struct EpilogSteps;

impl EpilogSteps {
    fn run(steps: &str) -> EpilogSteps {
        std::fs::write(lab().join("etc/epilog-slurmctld.steps"), steps).unwrap();
        EpilogSteps
    }
}

impl Drop for EpilogSteps {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(lab().join("etc/epilog-slurmctld.steps"));
    }
}

/// `AdminComment` and `SystemComment` of the job's latest run in accounting.
fn comments(job: u32) -> (String, String) {
    let out = admin(
        "sacct",
        &[
            "-X",
            "-n",
            "-P",
            "-j",
            &job.to_string(),
            "-o",
            "SystemComment,AdminComment",
        ],
    );
    let line = out.lines().last().unwrap_or("").to_string();
    let (system, admin_comment) = line.split_once('|').unwrap_or(("", ""));
    (admin_comment.to_string(), system.to_string())
}

fn both_records_survive(steps: &str) {
    let _policy = install_policy("[defaults]\ndefault = \"none\"\n\n[enforcement]\ninterval = \"500ms\"\n");
    let _epilog = EpilogSteps::run(steps);
    let dir = user_dir("jobstats");
    let script = "GPU=${SLURM_JOB_GPUS%%,*}; echo 30G > /var/lib/fake-nvml/procs/$GPU/$$; sleep 4; \
                  rm -f /var/lib/fake-nvml/procs/$GPU/$$";
    let job = sbatch(&dir, &["--gres=gpu:1", "--gpu-mem-quota=40G"], script);

    // jobstats sleeps 5 s before its write; keep-record waits for the job's end in accounting.
    let mut seen = (String::new(), String::new());
    let both = wait_until(Duration::from_secs(90), || {
        seen = comments(job);
        seen.0.to_ascii_lowercase().starts_with("js1:h4s") && seen.1.contains("gpu-mem-quota:v1{")
    });
    let log = std::fs::read_to_string(lab().join("log/epilog-slurmctld.log")).unwrap_or_default();
    assert!(
        both,
        "job {job} ({steps}): AdminComment {:?}, SystemComment {:?}\nepilog log:\n{log}",
        seen.0, seen.1
    );
    // jobstats' text is theirs alone: one token, as their readers want it (`startswith('JS1:')`).
    assert!(
        !seen.0.contains(' '),
        "jobstats' AdminComment was changed: {:?}",
        seen.0
    );

    let report = admin(
        lab().join("bin/gpu-mem-quota").to_str().unwrap(),
        &["report", "-j", &job.to_string()],
    );
    assert!(
        report.contains("75.0%"),
        "our record, from the SystemComment:\n{report}"
    );
    assert!(
        report.contains("jobstats' summary"),
        "jobstats' figures:\n{report}"
    );
    if seen.0.starts_with("JS1:") {
        assert!(report.contains("GPU 0"), "{report}");
        let json = admin(
            lab().join("bin/gpu-mem-quota").to_str().unwrap(),
            &["report", "-j", &job.to_string(), "--json"],
        );
        assert!(json.contains("\"used_bytes\":12345678"), "{json}");
    } else {
        // 22.05: sacctmgr lowercased jobstats' base64 (and our copy, which reads the same).
        assert!(report.contains("lowercased by Slurm 22.05"), "{report}");
    }
}

#[test]
#[ignore = "needs the dev cluster: slurm/dev-cluster test"]
fn our_record_and_jobstats_summary_are_both_kept_when_jobstats_writes_first() {
    both_records_survive("jobstats keep-record");
}

#[test]
#[ignore = "needs the dev cluster: slurm/dev-cluster test"]
fn our_record_and_jobstats_summary_are_both_kept_when_jobstats_writes_last() {
    both_records_survive("keep-record jobstats");
}
