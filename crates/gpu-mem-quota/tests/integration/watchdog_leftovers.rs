//! What the next watchdog on a node sweeps: metrics files and registry entries of jobs whose
//! runtime directory is gone (a SIGKILLed watchdog, a crash, a reboot), and nothing else.

use std::fs;
use std::os::unix::fs::symlink;
use std::path::PathBuf;

use gmq_commands::watchdog::leftovers;
use gmq_core::preempt::Rank;
use gmq_node::attribute::ProcessIdentity;
use gmq_node::preempt_registry::{Registry, RegistryEntry};

fn entry(job_id: u32) -> RegistryEntry {
    RegistryEntry {
        job_id,
        user: "alice".into(),
        quota: None,
        rank: Rank {
            value: 0,
            slurm_priority: 1,
        },
        preemptible: false,
        requeueable: true,
        preemptions: 0,
        start_time: 1,
        gpus: Vec::new(),
        watchdog: ProcessIdentity {
            pid: 1,
            start_time: 1,
        },
        heartbeat: 1,
        acted_by: None,
    }
}

#[test]
fn leftovers_of_gone_jobs_are_swept_and_nothing_else() {
    let scratch = tempfile::Builder::new()
        .prefix("gmq-leftovers-")
        .tempdir()
        .unwrap();
    let (runtime, metrics) = (scratch.path().join("run"), scratch.path().join("metrics"));
    fs::create_dir_all(runtime.join("jobs/5")).unwrap(); // job 5 is still here; 6 is gone
    fs::create_dir_all(&metrics).unwrap();
    for name in [
        "gpu_mem_quota_job_5.prom",
        "gpu_mem_quota_job_6.prom",
        "node_gpu.prom",
    ] {
        fs::write(metrics.join(name), "x 1\n").unwrap();
    }
    // Not ours to judge: a symlink and a directory that look like job files.
    symlink("/etc/hostname", metrics.join("gpu_mem_quota_job_7.prom")).unwrap();
    fs::create_dir(metrics.join("gpu_mem_quota_job_8.prom")).unwrap();
    let registry = Registry::open(&runtime).unwrap();
    registry.write(&entry(5)).unwrap();
    registry.write(&entry(6)).unwrap();
    // Temporaries of writers that died two minutes ago, and of one writing now (kept); another
    // exporter's temporary in the collector directory is not ours.
    let old = std::time::SystemTime::now() - std::time::Duration::from_secs(120);
    let stale = [
        metrics.join(".gpu_mem_quota_job_5.prom.77.0.tmp"),
        runtime.join(".gpus.77.1.tmp"),
        registry.dir().join(".5.77.2.tmp"),
        metrics.join(".node_gpu.prom.77.3.tmp"),
    ];
    for path in &stale {
        fs::File::create(path).unwrap().set_modified(old).unwrap();
    }
    fs::write(runtime.join(".gpus.78.0.tmp"), "being written").unwrap();

    let (removed, errors) = leftovers::sweep(&runtime, Some(&metrics));

    assert!(errors.is_empty(), "{errors:?}");
    let died = |path: &PathBuf| format!("temporary file {} (its writer died)", path.display());
    assert_eq!(
        removed,
        [
            format!(
                "metrics file {} (its job has left this node)",
                metrics.join("gpu_mem_quota_job_6.prom").display()
            ),
            died(&stale[0]),
            died(&stale[1]),
            died(&stale[2]),
            "registry entry of job 6 (its job has left this node)".to_string(),
        ]
    );
    assert!(!stale[..3].iter().any(|p| p.exists()));
    assert!(stale[3].exists() && runtime.join(".gpus.78.0.tmp").exists());
    fs::remove_file(&stale[3]).unwrap();
    let mut left: Vec<String> = fs::read_dir(&metrics)
        .unwrap()
        .map(|d| d.unwrap().file_name().into_string().unwrap())
        .collect();
    left.sort();
    assert_eq!(
        left,
        [
            "gpu_mem_quota_job_5.prom",
            "gpu_mem_quota_job_7.prom",
            "gpu_mem_quota_job_8.prom",
            "node_gpu.prom"
        ]
    );
    let jobs: Vec<u32> = registry.list().unwrap().iter().map(|e| e.job_id).collect();
    assert_eq!(jobs, [5]);
    assert!(fs::metadata("/etc/hostname").is_ok());

    // A second sweep finds nothing; a node without metrics or registry is not an error.
    assert_eq!(leftovers::sweep(&runtime, Some(&metrics)), (vec![], vec![]));
    let bare = scratch.path().join("bare");
    assert_eq!(leftovers::sweep(&bare, None), (vec![], vec![]));
    assert!(!bare.exists(), "the sweep must create nothing");
    let (_, errors) = leftovers::sweep(&runtime, Some(&scratch.path().join("no-such-dir")));
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0].starts_with("cannot read ") && errors[0].contains("no-such-dir"));

    // A collector directory reached through a symlink is refused: nothing is removed through it.
    fs::remove_dir_all(runtime.join("jobs/5")).unwrap();
    let link = scratch.path().join("metrics-link");
    symlink(&metrics, &link).unwrap();
    let (removed, errors) = leftovers::sweep(&runtime, Some(&link));
    assert_eq!(
        errors,
        [format!(
            "cannot read the collector directory: {} is a symlink: refused, left as it is",
            link.display()
        )]
    );
    assert_eq!(removed, ["registry entry of job 5 (its job has left this node)"]);
    assert!(metrics.join("gpu_mem_quota_job_5.prom").exists());
}
