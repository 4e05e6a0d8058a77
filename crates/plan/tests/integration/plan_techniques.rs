//! Issue 18: the parameter-count-only ZeRO-3/FSDP case, the sanity bound, the safety ordering of
//! the three figures, and the memory techniques added to the command line.

use gmq_plan::framework::LossKernel;
use gmq_plan::presets::find;
use gmq_plan::shape::default_layers;
use gmq_plan::{
    estimate, model_states, plan, Checkpointing, Finetune, Framework, Job, LoraTargets, Model, Optimizer,
    Precision, Sharding, MAX_PARAMS,
};

const GIB: f64 = (1u64 << 30) as f64;

fn zero3_params_only(sharding: Sharding, framework: Framework) -> Job {
    let mut job = Job::new(Model::ParamsOnly(7_500_000_000), 1, 1);
    job.parallel.dp = 64;
    job.sharding = sharding;
    job.framework = framework;
    job
}

#[test]
fn default_depth_follows_the_common_families() {
    // hidden = 128 x layers and 12 L h^2 parameters: GPT-3 6.7B and Llama-2 7B have 32 layers,
    // GPT-3 175B 96.
    assert_eq!(default_layers(6_738_415_616), 32);
    assert_eq!(default_layers(175_000_000_000), 96);
    assert_eq!(default_layers(7_500_000_000), 34);
    assert_eq!(default_layers(1), 1);
}

#[test]
fn params_only_zero3_is_the_paper_plus_documented_extras() {
    // ZeRO-3: states + 2 gathered layers + reduce bucket + 1 pool copy + context + NCCL;
    // FSDP also carries the reduce-scatter stream pool fitted on torchtitan (7 x 2 layers' grads).
    for (sharding, framework, limit_gib) in [
        (Sharding::Zero(3), Framework::Deepspeed, 7.0),
        (Sharding::Fsdp, Framework::Pytorch, 12.0),
    ] {
        let est = estimate(&zero3_params_only(sharding, framework)).unwrap();
        let b = &est.breakdown;
        // 16 psi / Nd exactly (ZeRO sec. 5: 1.9 GB).
        assert_eq!(model_states(b), 1_875_000_000);
        // Gathered units are layers of 7.5B / 34, not the whole model.
        let gathered = b.terms.iter().find(|t| t.key == "gathered_params").unwrap();
        let unit = 7.5e9 / 34.0;
        assert!(
            (gathered.bytes as f64 - 2.0 * unit * 2.0).abs() < 1e3,
            "{}",
            gathered.bytes
        );
        // Everything else is a named extra; the whole stays a few GiB, far from the 100 GiB of the
        // one-layer reading (issue 18).
        let peak = b.peak as f64 / GIB;
        assert!(peak < limit_gib, "{sharding:?}: {peak:.2} GiB");
        assert!(b.notes.iter().any(|n| n.contains("34 layers")), "{:?}", b.notes);
    }
}

#[test]
fn params_with_layers_sets_the_unit() {
    let mut job = zero3_params_only(Sharding::Zero(3), Framework::Deepspeed);
    job.model = Model::ParamsLayers {
        params: 7_500_000_000,
        layers: 75,
    };
    let b = estimate(&job).unwrap().breakdown;
    let gathered = b.terms.iter().find(|t| t.key == "gathered_params").unwrap();
    assert_eq!(gathered.bytes, 2 * 100_000_000 * 2);
}

#[test]
fn a_quota_search_finds_a_fit_for_the_paper_example() {
    let job = zero3_params_only(Sharding::Zero(3), Framework::Deepspeed);
    let p = plan(&job, Some(16 << 30)).unwrap();
    assert!(p.paste.is_some());
}

#[test]
fn absurd_parameter_counts_are_errors() {
    let job = Job::new(Model::ParamsOnly(1_000_000_000_000_000), 1, 1);
    let e = estimate(&job).unwrap_err();
    assert_eq!(e.flag, "--params");
    assert!(e.message.contains("10 trillion"), "{}", e.message);
    assert!(estimate(&Job::new(Model::ParamsOnly(MAX_PARAMS), 1, 1)).is_ok());
    // A shape that adds up to more is refused too.
    let mut shape = find("llama-2-70b").unwrap().shape();
    shape.layers = 60_000;
    let e = estimate(&Job::new(Model::Shaped(shape), 1, 1)).unwrap_err();
    assert_eq!(e.flag, "--layers");
}

/// Peak per GPU >= reserved >= allocated, for every combination tried: a quota taken from the
/// peak can never be below what the tensors need.
#[test]
fn peak_is_never_below_the_allocated_peak() {
    let llama = find("llama-3-8b").unwrap().shape();
    for checkpointing in [Checkpointing::None, Checkpointing::Selective, Checkpointing::Full] {
        for (sharding, framework, dp) in [
            (Sharding::None, Framework::Pytorch, 1),
            (Sharding::Fsdp, Framework::Pytorch, 8),
            (Sharding::Zero(2), Framework::Deepspeed, 8),
            (Sharding::Zero(3), Framework::Deepspeed, 8),
            (Sharding::Zero(1), Framework::Megatron, 8),
        ] {
            for lora in [false, true] {
                for compile in [false, true] {
                    let mut job = Job::new(Model::Shaped(llama.clone()), 2, 4096);
                    job.checkpointing = checkpointing;
                    job.sharding = sharding;
                    job.framework = framework;
                    job.parallel.dp = dp;
                    job.compile = compile;
                    if lora {
                        job.finetune = Finetune::Lora {
                            rank: 16,
                            targets: LoraTargets::All,
                            quantized: false,
                        };
                    }
                    let b = estimate(&job).unwrap().breakdown;
                    assert!(b.reserved >= b.allocated && b.peak >= b.reserved, "{job:?}");
                    assert!(
                        gmq_plan::quota_gib(b.peak) << 30 >= b.peak,
                        "the pasted quota covers the peak"
                    );
                }
            }
        }
    }
}

fn llama3b() -> Job {
    let mut job = Job::new(Model::Shaped(find("llama-3.2-3b").unwrap().shape()), 2, 4096);
    job.precision = Precision::Bf16;
    job
}

fn allocated(job: &Job) -> u64 {
    estimate(job).unwrap().breakdown.allocated
}

#[test]
fn each_technique_lowers_the_allocated_peak() {
    let base = llama3b();
    let tweaks: Vec<(&str, Job)> = vec![
        (
            "compile",
            Job {
                compile: true,
                ..base.clone()
            },
        ),
        (
            "chunked loss",
            Job {
                loss_impl: Some(LossKernel::Chunked),
                ..base.clone()
            },
        ),
        (
            "fused linear loss",
            Job {
                loss_impl: Some(LossKernel::FusedLinear),
                ..base.clone()
            },
        ),
        (
            "activation offload",
            Job {
                activation_offload: true,
                ..base.clone()
            },
        ),
        (
            "galore",
            Job {
                optimizer: Optimizer::Galore { rank: 128 },
                ..base.clone()
            },
        ),
    ];
    for (what, job) in tweaks {
        assert!(allocated(&job) < allocated(&base), "{what}");
    }
    // The step in backward frees the gradients: with them kept between steps it is visible at
    // the forward peak too.
    let kept = Job {
        keep_grads: Some(true),
        ..base.clone()
    };
    let in_bwd = Job {
        optimizer_in_backward: true,
        ..base.clone()
    };
    assert!(allocated(&in_bwd) < allocated(&kept));
}

#[test]
fn galore_states_follow_the_paper() {
    // GaLore table 1: an m x n matrix (m <= n) keeps mr + 2nr instead of 2mn for Adam.
    let mut shape = find("llama-2-7b").unwrap().shape();
    shape.layers = 1;
    let h = shape.hidden as f64;
    let f = shape.ffn as f64;
    let r = 128.0;
    let mut job = Job::new(Model::Shaped(shape.clone()), 1, 128);
    job.optimizer = Optimizer::Galore { rank: 128 };
    job.precision = Precision::Fp32;
    let states = estimate(&job).unwrap().breakdown;
    let opt = states.terms.iter().find(|t| t.key == "optimizer_states").unwrap();
    // q, k, v, o: 4 matrices h x h; gate, up: h x f; down: f x h (long side f).
    let matrices = 4.0 * (h * r + 2.0 * h * r) + 3.0 * (h * r + 2.0 * f * r);
    let others = (shape.params() as f64) - (4.0 * h * h + 3.0 * h * f);
    let want = (matrices + 2.0 * others) * 4.0;
    assert!((opt.bytes as f64 - want).abs() < 16.0, "{} vs {want}", opt.bytes);
}

#[test]
fn option_errors_name_the_flag() {
    let mut job = llama3b();
    job.optimizer_in_backward = true;
    job.grad_accum = 4;
    assert_eq!(estimate(&job).unwrap_err().flag, "--optimizer-in-backward");
    let mut job = llama3b();
    job.optimizer = Optimizer::Galore { rank: 64 };
    job.parallel.dp = 8;
    job.sharding = Sharding::Fsdp;
    assert_eq!(estimate(&job).unwrap_err().flag, "--optimizer");
    let mut job = Job::new(Model::ParamsOnly(1_000_000_000), 1, 1);
    job.optimizer = Optimizer::Galore { rank: 64 };
    assert_eq!(estimate(&job).unwrap_err().flag, "--optimizer");
}
