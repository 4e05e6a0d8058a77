//! Nonsense inputs get errors that name the flag to fix.

use gmq_plan::presets::find;
use gmq_plan::{estimate, Checkpointing, Finetune, Framework, Job, LoraTargets, Model, Offload, Sharding};

fn llama() -> Job {
    Job::new(Model::Shaped(find("llama-2-7b").unwrap().shape()), 4, 2048)
}

fn with_shape(f: impl Fn(&mut gmq_plan::ModelShape)) -> Job {
    let mut job = llama();
    if let Model::Shaped(shape) = &mut job.model {
        f(shape);
    }
    job
}

#[test]
fn errors_name_the_flag() {
    let table: Vec<(Job, &str, &str)> = vec![
        (
            with_shape(|s| s.heads = 48),
            "--heads",
            "--heads 48 does not divide --hidden 4096",
        ),
        (
            with_shape(|s| s.kv_heads = 5),
            "--kv-heads",
            "--kv-heads 5 does not divide --heads 32",
        ),
        (
            with_shape(|s| s.kv_heads = 64),
            "--kv-heads",
            "--kv-heads 64 exceeds --heads 32",
        ),
        (
            with_shape(|s| s.vocab = 0),
            "--vocab",
            "--vocab must be at least 1",
        ),
        (
            Job {
                micro_batch: 0,
                ..llama()
            },
            "--micro-batch",
            "--micro-batch must be at least 1",
        ),
        (Job { seq: 0, ..llama() }, "--seq", "--seq must be at least 1"),
        (
            Job {
                grad_accum: 0,
                ..llama()
            },
            "--grad-accum",
            "--grad-accum must be at least 1",
        ),
        (
            Job {
                seq: 1 << 30,
                ..llama()
            },
            "--seq",
            "larger than the planner accepts",
        ),
        (
            {
                let mut j = llama();
                j.parallel.tp = 3;
                j
            },
            "--tp",
            "--tp 3 does not divide --heads 32",
        ),
        (
            {
                let mut j = llama();
                j.parallel.tp = 64;
                j
            },
            "--tp",
            "--tp 64 does not divide --heads 32",
        ),
        (
            {
                let mut j = llama();
                j.parallel.pp = 3;
                j
            },
            "--pp",
            "--pp 3 does not divide --layers 32",
        ),
        (
            {
                let mut j = llama();
                j.parallel.dp = 0;
                j
            },
            "--dp",
            "--dp must be at least 1",
        ),
        (
            {
                let mut j = llama();
                j.parallel.sp = true;
                j
            },
            "--sp",
            "needs --tp greater than 1",
        ),
        (
            Job {
                sharding: Sharding::Zero(4),
                framework: Framework::Deepspeed,
                ..llama()
            },
            "--zero",
            "not a ZeRO stage",
        ),
        (
            Job {
                sharding: Sharding::Zero(2),
                ..llama()
            },
            "--zero",
            "use --framework deepspeed",
        ),
        (
            Job {
                sharding: Sharding::Zero(3),
                framework: Framework::Megatron,
                ..llama()
            },
            "--zero",
            "use --zero 1",
        ),
        (
            Job {
                sharding: Sharding::Fsdp,
                framework: Framework::Deepspeed,
                ..llama()
            },
            "--fsdp",
            "FSDP is PyTorch's",
        ),
        (
            Job {
                offload: Offload::Optimizer,
                ..llama()
            },
            "--offload",
            "needs --zero 1, 2 or 3",
        ),
        (
            Job {
                offload: Offload::Params,
                sharding: Sharding::Zero(2),
                framework: Framework::Deepspeed,
                ..llama()
            },
            "--offload",
            "needs --zero 3 or --fsdp",
        ),
        (
            Job {
                finetune: Finetune::Lora {
                    rank: 0,
                    targets: LoraTargets::All,
                    quantized: false,
                },
                ..llama()
            },
            "--lora-rank",
            "at least 1",
        ),
        (
            Job {
                finetune: Finetune::Lora {
                    rank: 8,
                    targets: LoraTargets::All,
                    quantized: true,
                },
                ..Job::new(Model::ParamsOnly(7_000_000_000), 1, 1)
            },
            "--lora-rank",
            "needs the model's shape",
        ),
        (
            {
                let mut j = Job::new(Model::ParamsOnly(7_000_000_000), 1, 1);
                j.parallel.tp = 2;
                j
            },
            "--tp",
            "need the model's shape",
        ),
        (Job::new(Model::ParamsOnly(0), 1, 1), "--params", "at least 1"),
    ];
    for (job, flag, message) in table {
        let err = estimate(&job).unwrap_err();
        assert_eq!(err.flag, flag, "{err}");
        assert!(err.to_string().contains(message), "{err} should say '{message}'");
        assert!(err.to_string().starts_with(flag), "{err}");
    }
}

#[test]
fn sensible_jobs_pass() {
    let mut job = llama();
    job.parallel = gmq_plan::Parallel {
        dp: 4,
        tp: 8,
        pp: 4,
        sp: true,
    };
    job.framework = Framework::Megatron;
    job.sharding = Sharding::Zero(1);
    job.checkpointing = Checkpointing::Selective;
    assert!(estimate(&job).is_ok());
}
