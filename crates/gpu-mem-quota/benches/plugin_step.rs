//! What the plugin does in slurmstepd for every job step, timed: read, parse and validate the policy
//! (`config::load_for_job` on etc/gpu-mem-quota.toml), decide the step (`step::decide_step`, over
//! `admission::on_node`), and build the job's environment (`step::task_env`).
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

use gmq_core::admission::{self, Policy};
use gmq_core::config::{self, OnConfigError};
use gmq_core::node_files::NodeFacts;
use gmq_core::quota::Identity;
use gmq_core::size::ByteSize;
use gmq_core::slurm_text::JobRecord;
use gmq_core::step::{self, Step, StepDecision, StepSources, BATCH_STEP};

const GPU_TOTAL: ByteSize = ByteSize::from_bytes(80 << 30);

fn who() -> Identity {
    Identity {
        user: Some("gmq-user".into()),
        account: Some("physics".into()),
        partition: Some("gpu".into()),
        qos: Some("normal".into()),
    }
}

/// The batch step's sources as slurmstepd answers them: slurmd's variables, the node's GPU size;
/// the batch step reads no watchdog file and asks slurmctld nothing.
struct BatchStep {
    env: BTreeMap<&'static str, String>,
}

impl BatchStep {
    fn new(user_env: &[(&'static str, &str)]) -> BatchStep {
        let mut env = BTreeMap::from([
            ("SLURM_JOB_ACCOUNT", "physics".to_string()),
            ("SLURM_JOB_PARTITION", "gpu".to_string()),
            ("SLURM_JOB_QOS", "normal".to_string()),
            ("SLURM_JOB_GPUS", "0".to_string()),
        ]);
        env.extend(user_env.iter().map(|(name, value)| (*name, value.to_string())));
        BatchStep { env }
    }
}

impl StepSources for BatchStep {
    fn env(&self, name: &str) -> Option<String> {
        self.env.get(name).cloned()
    }
    fn node_facts(&self, _: &Path) -> Option<NodeFacts> {
        None
    }
    fn job_record(&self) -> Result<JobRecord, String> {
        Err("the batch step asks slurmctld nothing".into())
    }
    fn gpu_total(&self, _: &Path, _: &[String]) -> Option<u64> {
        Some(GPU_TOTAL.bytes())
    }
    fn prolog_word_here(&self, _: &Path) -> bool {
        true
    }
}

fn batch_step<'a>(policy: &'a Policy, request: Option<&'a str>) -> Step<'a> {
    Step {
        job_id: 4242,
        step_id: BATCH_STEP,
        user: "gmq-user".into(),
        request,
        policy,
        node: "vm",
    }
}

/// The task environment of a decided step, as `task_init` writes it.
fn env_vars(decision: &StepDecision, sources: &BatchStep) -> usize {
    let verdict = decision.verdict.as_ref().expect("the step is admitted");
    step::task_env(decision, verdict, sources, &[]).0.len()
}

/// One step as the plugin runs it: policy from disk, decision, environment. Returns the variables.
fn whole_step(path: &Path, request: Option<&str>, sources: &BatchStep) -> usize {
    let policy = config::load_for_job(path, OnConfigError::FailOpen);
    env_vars(
        &step::decide_step(&batch_step(&policy, request), sources),
        sources,
    )
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
    let plain = BatchStep::new(&[]);
    // A user who set their own allocator options: the merge path.
    let own_allocator = BatchStep::new(&[(
        "PYTORCH_CUDA_ALLOC_CONF",
        "max_split_size_mb:512,garbage_collection_threshold:0.8",
    )]);
    let decision = step::decide_step(&batch_step(&policy, Some("20G")), &plain);
    if decision.verdict.as_ref().map_or(true, |v| v.quota.is_none()) {
        eprintln!(
            "plugin_step: 20G is not admitted for gmq-user in physics: {:?}",
            decision.verdict
        );
        return ExitCode::FAILURE;
    }

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
    row(
        "step::decide_step (batch step), --gpu-mem-quota=20G",
        rounds,
        || {
            black_box(step::decide_step(&batch_step(&policy, Some("20G")), &plain));
        },
    );
    row("env vars (step::task_env)", rounds, || {
        black_box(env_vars(&decision, &plain));
    });
    row("env vars, user set PYTORCH_CUDA_ALLOC_CONF", rounds, || {
        black_box(env_vars(&decision, &own_allocator));
    });
    row(
        "whole step: load_for_job + decide_step + task_env",
        rounds,
        || {
            black_box(whole_step(&path, Some("20G"), &plain));
        },
    );
    ExitCode::SUCCESS
}
