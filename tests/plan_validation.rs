//! The planner against published measured peaks.
//!
//! Every row: the source, what was run, the metric it reports, and the value. Each row's job is
//! built from what the source says it ran (model, batch, precision, optimizer implementation,
//! recomputation, and the CUDA context where the source measured it); no row has its own knobs.
//! The metric decides which of the planner's figures is compared:
//! - NVML / nvidia-smi "used" (device memory, includes the CUDA context): `peak`
//! - torch.cuda.max_memory_reserved: `reserved`
//! - torch.cuda "peak active" / max_memory_allocated: `allocated`
//!
//! Result (run with --nocapture to see the table): 13 rows, median |error| 1.8 %, max 8.0 %.
//! Asserted: median <= 3 %, every row <= 10 %.
//!
//! Coverage gaps (no published measurement with a fully stated configuration was found in this
//! session): LoRA/QLoRA, DeepSpeed ZeRO-1/2/3, Megatron tensor/pipeline/sequence parallelism, fp8.
//! Those terms follow their papers/docs (tests/plan_zero.rs, tests/plan_activations.rs) and await
//! calibration on a GPU.

use gpu_mem_quota::plan::framework::StepKernel;
use gpu_mem_quota::plan::presets::find;
use gpu_mem_quota::plan::shape::Head;
use gpu_mem_quota::plan::{estimate, Checkpointing, Job, Model, Optimizer, Precision, Sharding};

const GIB: f64 = (1u64 << 30) as f64;

#[derive(Clone, Copy)]
enum Metric {
    /// NVML device memory used by the process (context included).
    Nvml,
    /// torch.cuda.max_memory_reserved.
    Reserved,
    /// torch.cuda peak active/allocated bytes.
    Allocated,
}

struct Row {
    source: &'static str,
    what: &'static str,
    metric: Metric,
    measured_gib: f64,
    job: Job,
}

/// Hugging Face Transformers docs, "Efficient Training on a Single GPU" (v4.21, 2022):
/// bert-large-uncased sequence classification, seq 512, Trainer defaults (fp32, transformers'
/// own per-parameter AdamW `adamw_hf`, eager attention), V100 16 GB. The metric is
/// `nvmlDeviceGetMemoryInfo().used // 1024**2` after training; the same setup measured the CUDA
/// context at 1343 MB ("Model training anatomy": `torch.ones((1, 1)).to("cuda")`).
const HF_SINGLE_GPU: &str = "https://huggingface.co/docs/transformers/v4.21.0/en/perf_train_gpu_one";

fn bert(micro: u64, accum: u64, precision: Precision, optimizer: Optimizer, ckpt: Checkpointing) -> Job {
    let mut shape = find("bert-large").unwrap().shape();
    shape.head = Head::None;
    let mut job = Job::new(Model::Shaped(shape), micro, 512);
    job.grad_accum = accum;
    job.precision = precision;
    job.optimizer = optimizer;
    job.checkpointing = ckpt;
    job.flash = false;
    job.optimizer_impl = Some(StepKernel::ForLoop);
    job.cuda_context = 1343 << 20;
    job
}

/// torchtitan PR #165 (A. Gu, 2024-03-26), "Used per-parameter FSDP": Llama 7B (torchtitan's
/// `llama_7b.toml`: 32 layers, dim 4096, 32 heads, Llama-2 tokenizer, 32000 vocab), 8 H100,
/// local batch 8, seq 2048, full activation checkpointing per block, bf16 mixed precision with
/// fp32 reduce-scatter, torch.optim.AdamW (foreach). Memory logged as a share of 95.0396 GiB.
const TORCHTITAN: &str = "https://github.com/pytorch/torchtitan/pull/165";

fn torchtitan() -> Job {
    let mut job = Job::new(Model::Shaped(find("llama-2-7b").unwrap().shape()), 8, 2048);
    job.parallel.dp = 8;
    job.sharding = Sharding::Fsdp;
    job.checkpointing = Checkpointing::Full;
    job
}

fn rows() -> Vec<Row> {
    use Checkpointing::{Full, None};
    use Metric::*;
    use Optimizer::*;
    use Precision::*;
    let mib = |x: f64| x / 1024.0;
    let h100 = |share: f64| share * 95.0396;
    vec![
        Row {
            source: HF_SINGLE_GPU,
            what: "vanilla, batch 4",
            metric: Nvml,
            measured_gib: mib(14949.0),
            job: bert(4, 1, Fp32, AdamW, None),
        },
        Row {
            source: HF_SINGLE_GPU,
            what: "batch 1, accumulation 4",
            metric: Nvml,
            measured_gib: mib(8681.0),
            job: bert(1, 4, Fp32, AdamW, None),
        },
        Row {
            source: HF_SINGLE_GPU,
            what: "+ gradient checkpointing",
            metric: Nvml,
            measured_gib: mib(6775.0),
            job: bert(1, 4, Fp32, AdamW, Full),
        },
        Row {
            source: HF_SINGLE_GPU,
            what: "fp16 (autocast), batch 4",
            metric: Nvml,
            measured_gib: mib(13939.0),
            job: bert(4, 1, Amp, AdamW, None),
        },
        Row {
            source: HF_SINGLE_GPU,
            what: "batch 1, accum 4, checkpointing, fp16",
            metric: Nvml,
            measured_gib: mib(7275.0),
            job: bert(1, 4, Amp, AdamW, Full),
        },
        Row {
            source: HF_SINGLE_GPU,
            what: "Adafactor, batch 4",
            metric: Nvml,
            measured_gib: mib(12295.0),
            job: bert(4, 1, Fp32, Adafactor, None),
        },
        Row {
            source: HF_SINGLE_GPU,
            what: "Adafactor, batch 1, accum 4, checkpointing, fp16",
            metric: Nvml,
            measured_gib: mib(4847.0),
            job: bert(1, 4, Amp, Adafactor, Full),
        },
        Row {
            source: HF_SINGLE_GPU,
            what: "8-bit Adam (bitsandbytes), batch 4",
            metric: Nvml,
            measured_gib: mib(13085.0),
            job: bert(4, 1, Fp32, Adam8bit, None),
        },
        Row {
            source: HF_SINGLE_GPU,
            what: "8-bit Adam, batch 1, accum 4, checkpointing, fp16",
            metric: Nvml,
            measured_gib: mib(5363.0),
            job: bert(1, 4, Amp, Adam8bit, Full),
        },
        Row {
            source: TORCHTITAN,
            what: "FSDP1, AC: peak active 24.81%",
            metric: Allocated,
            measured_gib: h100(0.2481),
            job: torchtitan(),
        },
        Row {
            source: TORCHTITAN,
            what: "FSDP1, AC: peak reserved 33.82%",
            metric: Reserved,
            measured_gib: h100(0.3382),
            job: torchtitan(),
        },
        Row {
            source: TORCHTITAN,
            what: "FSDP2, AC: peak active 23.92%",
            metric: Allocated,
            measured_gib: h100(0.2392),
            job: torchtitan(),
        },
        Row {
            source: TORCHTITAN,
            what: "FSDP2, AC: peak reserved 32.64%",
            metric: Reserved,
            measured_gib: h100(0.3264),
            job: torchtitan(),
        },
    ]
}

fn predicted_gib(row: &Row) -> f64 {
    let b = estimate(&row.job).unwrap().breakdown;
    let bytes = match row.metric {
        Metric::Nvml => b.peak,
        Metric::Reserved => b.reserved,
        Metric::Allocated => b.allocated,
    };
    bytes as f64 / GIB
}

#[test]
fn published_peaks() {
    let mut errors = Vec::new();
    println!("{:<55} {:>9} {:>9} {:>7}", "row", "measured", "planned", "error");
    for row in rows() {
        let predicted = predicted_gib(&row);
        let error = predicted / row.measured_gib - 1.0;
        println!(
            "{:<55} {:>9.2} {:>9.2} {:>+6.1}%  {}",
            row.what,
            row.measured_gib,
            predicted,
            error * 100.0,
            row.source
        );
        assert!(
            error.abs() <= 0.10,
            "{} ({}): {:+.1}%",
            row.what,
            row.source,
            error * 100.0
        );
        errors.push(error.abs());
    }
    errors.sort_by(f64::total_cmp);
    let median = errors[errors.len() / 2];
    println!(
        "median |error| {:.1}%, max {:.1}%",
        median * 100.0,
        errors[errors.len() - 1] * 100.0
    );
    assert!(median <= 0.03, "median |error| {:.1}%", median * 100.0);
}
