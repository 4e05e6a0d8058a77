//! Accounting on the cluster (issue 8): the record in sacct, `gpu-mem-quota report` and `status`,
//! and the Prometheus textfile while the job runs.

use std::path::PathBuf;
use std::time::Duration;

use crate::support::*;

fn binary() -> PathBuf {
    lab().join("bin/gpu-mem-quota")
}

fn run_binary(args: &[&str]) -> String {
    admin(binary().to_str().unwrap(), args)
}

#[test]
#[ignore = "needs the dev cluster: slurm/dev-cluster test"]
fn a_job_at_30g_of_40g_reports_75_percent_and_shows_in_status_and_metrics() {
    let _policy = install_policy("[defaults]\ndefault = \"none\"\n\n[enforcement]\ninterval = \"500ms\"\n");
    let dir = user_dir("report");
    let marker = dir.join("running");
    let script = format!(
        "GPU=${{SLURM_JOB_GPUS%%,*}}; echo 30G > /var/lib/fake-nvml/procs/$GPU/$$; touch {}; sleep 4; \
         rm -f /var/lib/fake-nvml/procs/$GPU/$$",
        marker.display()
    );
    let job = sbatch(&dir, &["--gres=gpu:1", "--gpu-mem-quota=40G"], &script);
    let config = lab().join("etc/gpu-mem-quota.toml").display().to_string();

    // While it runs: `status` on the node and the metrics file.
    assert!(
        wait_until(Duration::from_secs(30), || marker.exists()),
        "job {job} did not start"
    );
    let seen = wait_until(Duration::from_secs(5), || {
        run_binary(&["status", "--config", &config]).contains(&format!("{job}"))
            && run_binary(&["status", "--config", &config]).contains("30G")
    });
    assert!(seen, "status: {}", run_binary(&["status", "--config", &config]));
    let prom = lab().join(format!("gmq/metrics/gpu_mem_quota_job_{job}.prom"));
    // The watchdog writes it from its first sample on (it starts with the job, from the prolog):
    // the job's 30G shows at a sample after the job claimed it.
    let used_30g = |text: &str| text.contains("gpu_mem_quota_used_bytes") && text.contains("32212254720");
    let mut text = String::new();
    let sampled = wait_until(Duration::from_secs(5), || {
        text = std::fs::read_to_string(&prom).unwrap_or_default();
        used_30g(&text)
    });
    assert!(sampled, "{}: {text}", prom.display());
    assert!(text.contains("42949672960"), "quota missing: {text}");

    // After: the metrics file is gone, the record is in accounting, the report says 75 %.
    assert!(
        wait_until(Duration::from_secs(60), || !prom.exists()),
        "{} outlived job {job}",
        prom.display()
    );
    let reported = wait_until(Duration::from_secs(30), || {
        run_binary(&["report", "-j", &job.to_string()]).contains("75.0%")
    });
    assert!(
        reported,
        "report: {}",
        run_binary(&["report", "-j", &job.to_string()])
    );
    let json = run_binary(&["report", "-j", &job.to_string(), "--json"]);
    assert!(
        json.contains(&format!("{job}")) && json.contains("32212254720"),
        "{json}"
    );
}
