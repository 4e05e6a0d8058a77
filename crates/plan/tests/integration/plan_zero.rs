//! Rajbhandari et al. 2020 (ZeRO), figure 1 / section 5 worked example: a 7.5B-parameter model,
//! Nd = 64, mixed-precision Adam (K = 12). The paper prints 120 GB, 31.4 GB, 16.6 GB and 1.9 GB
//! (GB = 1e9 bytes) for stages 0 to 3.

use gmq_plan::{estimate, model_states, Framework, Job, Model, Precision, Sharding};

fn states(stage: u8) -> u64 {
    let mut job = Job::new(Model::ParamsOnly(7_500_000_000), 1, 1);
    job.precision = Precision::Mixed;
    job.parallel.dp = 64;
    job.framework = Framework::Deepspeed;
    job.sharding = if stage == 0 {
        Sharding::None
    } else {
        Sharding::Zero(stage)
    };
    model_states(&estimate(&job).unwrap().breakdown)
}

/// As the paper prints: three significant figures, two below 10 GB.
fn paper_gb(bytes: u64) -> String {
    let gb = bytes as f64 / 1e9;
    if gb >= 100.0 {
        format!("{gb:.0}")
    } else {
        format!("{gb:.1}")
    }
}

#[test]
fn reproduces_the_paper_exactly() {
    let table: &[(u8, &str, u64)] = &[
        (0, "120", 120_000_000_000),
        (1, "31.4", 31_406_250_000),
        (2, "16.6", 16_640_625_000),
        (3, "1.9", 1_875_000_000),
    ];
    for &(stage, printed, bytes) in table {
        let got = states(stage);
        assert_eq!(got, bytes, "stage {stage}: exact bytes");
        assert_eq!(paper_gb(got), printed, "stage {stage}: as printed");
    }
}

#[test]
fn fsdp_partitions_like_stage_3() {
    let mut job = Job::new(Model::ParamsOnly(7_500_000_000), 1, 1);
    job.parallel.dp = 64;
    job.sharding = Sharding::Fsdp;
    assert_eq!(model_states(&estimate(&job).unwrap().breakdown), 1_875_000_000);
}

#[test]
fn precisions_and_optimizers_change_bytes_per_parameter() {
    use gmq_plan::Optimizer::*;
    use gmq_plan::Precision::*;
    // Bytes per parameter of model states on one GPU, no sharding.
    let table: &[(Precision, gmq_plan::Optimizer, f64)] = &[
        (Fp32, AdamW, 16.0),                  // 4 weights + 4 grads + 8 (m, v)
        (Amp, AdamW, 16.0),                   // same states; 16-bit copies are transient
        (Mixed, AdamW, 16.0),                 // 2 + 2 + 12 (K = 12)
        (Bf16, AdamW, 8.0),                   // 2 + 2 + 4 (bf16 m, v)
        (Mixed, Sgd, 8.0),                    // 2 + 2 + 4 master
        (Mixed, SgdMomentum, 12.0),           // 2 + 2 + 4 master + 4 momentum
        (Fp32, Adam8bit, 10.0 + 8.0 / 256.0), // 4 + 4 + 2 x (1 + 4/256)
    ];
    for &(precision, optimizer, per_param) in table {
        let mut job = Job::new(Model::ParamsOnly(1_000_000_000), 1, 1);
        job.precision = precision;
        job.optimizer = optimizer;
        let got = model_states(&estimate(&job).unwrap().breakdown) as f64 / 1e9;
        assert!(
            (got - per_param).abs() < 1e-6,
            "{precision:?} {optimizer:?}: {got} B/param, want {per_param}"
        );
    }
}

#[test]
fn megatron_bf16_keeps_fp32_main_grads() {
    // Megatron-LM distributed optimizer docs: bf16 params with fp32 grads take 18 bytes per
    // parameter, 6 + 12/d with the distributed optimizer.
    let mut job = Job::new(Model::ParamsOnly(1_000_000_000), 1, 1);
    job.framework = Framework::Megatron;
    assert_eq!(model_states(&estimate(&job).unwrap().breakdown), 18_000_000_000);
    job.parallel.dp = 8;
    job.sharding = Sharding::Zero(1);
    assert_eq!(
        model_states(&estimate(&job).unwrap().breakdown),
        6_000_000_000 + 12_000_000_000 / 8
    );
}
