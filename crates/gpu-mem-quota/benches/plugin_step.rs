//! What the plugin does in slurmstepd for every job step, timed: read, parse and validate the policy
//! (`config::load_for_job` on etc/gpu-mem-quota.toml), decide the step (`admission::on_node`), and
//! build the job's environment (`job_env::quota_vars`, `hints::framework_vars`).
//!
//! ```sh
//! cargo bench --bench plugin_step
//! ```
//!
//! `GMQ_BENCH_ROUNDS` (default 2000) sets the rounds per figure. Not timed here: the SPANK calls
//! themselves (getenv/setenv through slurmstepd) and the passwd lookup of the job's user.

use std::collections::BTreeMap;
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use gmq_node::admission::{self, Policy};
use gmq_node::config::{self, OnConfigError};
use gmq_node::hints::{framework_vars, CapInputs};
use gmq_node::job_env;
use gmq_node::quota::Identity;
use gmq_node::size::ByteSize;

const GPU_TOTAL: ByteSize = ByteSize::from_bytes(80 << 30);

fn who() -> Identity {
    Identity {
        user: Some("gmq-user".into()),
        account: Some("physics".into()),
        partition: Some("gpu".into()),
        qos: Some("normal".into()),
    }
}

/// The environment a step with this verdict gets.
fn env_vars(
    policy: &Policy,
    quota: ByteSize,
    user_env: &BTreeMap<String, String>,
) -> Vec<(&'static str, String)> {
    let mut vars = job_env::quota_vars(quota);
    if let Ok(config) = policy {
        vars.extend(framework_vars(&CapInputs {
            quota,
            gpu_total: GPU_TOTAL,
            context_reserve: config.frameworks.context_reserve,
            visible_devices: 1,
            switches: config.frameworks.switches,
            user_env,
        }));
    }
    vars
}

/// One step as the plugin runs it: policy from disk, verdict, environment. Returns the variables.
fn step(path: &Path, request: Option<&str>, who: &Identity, user_env: &BTreeMap<String, String>) -> usize {
    let policy = config::load_for_job(path, OnConfigError::FailOpen);
    let verdict =
        admission::on_node(request, &policy, who, Some(GPU_TOTAL), None).expect("the step is admitted");
    match verdict.quota {
        Some(quota) => env_vars(&policy, quota, user_env).len(),
        None => 0,
    }
}

fn spread(mut times: Vec<Duration>) -> (Duration, Duration) {
    times.sort();
    let n = times.len();
    (times[n / 2], times[(n * 95 / 100).min(n - 1)])
}

fn row(what: &str, rounds: usize, mut f: impl FnMut()) {
    for _ in 0..rounds / 10 {
        f();
    }
    let times: Vec<Duration> = (0..rounds)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed()
        })
        .collect();
    let (median, p95) = spread(times);
    println!(
        "{what:<58} {:>9.1} {:>9.1}",
        median.as_secs_f64() * 1e6,
        p95.as_secs_f64() * 1e6
    );
}

fn main() -> ExitCode {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../etc/gpu-mem-quota.toml");
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) => {
            eprintln!("plugin_step: cannot read {}: {e}", path.display());
            return ExitCode::FAILURE;
        }
    };
    let policy = config::load_for_job(&path, OnConfigError::FailOpen);
    if let Err(unusable) = &policy {
        eprintln!(
            "plugin_step: {} is not a usable policy: {}",
            path.display(),
            unusable.error
        );
        return ExitCode::FAILURE;
    }
    let rounds = std::env::var("GMQ_BENCH_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .filter(|&n: &usize| n > 0)
        .unwrap_or(2000);
    let who = who();
    let no_user_env = BTreeMap::new();
    // A user who set their own allocator options: the merge path.
    let user_env = BTreeMap::from([(
        "PYTORCH_CUDA_ALLOC_CONF".to_string(),
        "max_split_size_mb:512,garbage_collection_threshold:0.8".to_string(),
    )]);
    let quota = admission::on_node(Some("20G"), &policy, &who, Some(GPU_TOTAL), None)
        .ok()
        .and_then(|v| v.quota)
        .expect("20G is within gmq-user's cap");

    println!(
        "plugin per-step cost, policy {}, {rounds} rounds per line",
        path.display()
    );
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "{} CPU(s), load average {} (other work on the machine shows in the figures)",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        load.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
    );
    println!("{:<58} {:>9} {:>9}", "µs", "median", "p95");
    row("read the policy file", rounds, || {
        black_box(std::fs::read_to_string(black_box(&path)).ok());
    });
    row("parse + validate it (config::parse)", rounds, || {
        black_box(config::parse(black_box(&text), "gpu-mem-quota.toml").is_ok());
    });
    row("admission::on_node, --gpu-mem-quota=20G", rounds, || {
        black_box(admission::on_node(Some("20G"), &policy, &who, Some(GPU_TOTAL), None).is_ok());
    });
    row("admission::on_node, no request (default 50%)", rounds, || {
        black_box(admission::on_node(None, &policy, &who, Some(GPU_TOTAL), None).is_ok());
    });
    row("env vars (quota_vars + framework_vars)", rounds, || {
        black_box(env_vars(&policy, quota, &no_user_env));
    });
    row("env vars, user set PYTORCH_CUDA_ALLOC_CONF", rounds, || {
        black_box(env_vars(&policy, quota, &user_env));
    });
    row("whole step: load_for_job + on_node + env vars", rounds, || {
        black_box(step(&path, Some("20G"), &who, &no_user_env));
    });
    ExitCode::SUCCESS
}
