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
//! Each row is fitted (it set the named constant) or held out (no constant was fitted to it);
//! the summary that counts is the held-out one. Result (run with --nocapture to see the table):
//! held out 21 rows, median |error| 5.2 %, worst under-prediction -8.4 %; fitted 12 rows, median
//! 1.6 %, max 8.0 %. Issue 29 added nine held-out rows: torchtitan's per-op selective
//! checkpointing (+6.8 %, +13.0 %; compiled +14.3 %, +22.1 %), Megatron's CI golden values
//! for a GPT-style 7B with an interleaved schedule (-1.0 %), a small GPT with one (-2.9 %), and
//! the 7B with tensor parallelism and a padded vocabulary (-0.4 %), and torchtune's 2024 README
//! for kept shifted logits (LoRA, +1.8 %) and a paged optimizer (full fine-tuning, -8.4 %).
//! Before those two rows: 19 rows, median 5.2 %, worst under-prediction -5.2 %. Asserted:
//! held-out median <= 10 %, no held-out row under-predicted by more than 10 % (the issue-18
//! target), every fitted row within 10 %.
//!
//! Coverage gaps (no published measurement with a fully stated configuration was found):
//! DeepSpeed ZeRO-1/2/3, Megatron sequence parallelism and Llama-style layers under Megatron,
//! LoRA under FSDP, fp8, GaLore, fused linear cross entropy, the logits without loss parallel
//! (checked on torchtitan PR #112's differences only, plan_mechanisms.rs). Those terms follow
//! their papers/docs (plan_zero.rs, plan_activations.rs, plan_techniques.rs, plan_mechanisms.rs
//! in this directory).

use gmq_plan::framework::{LossKernel, StepKernel};
use gmq_plan::presets::find;
use gmq_plan::shape::Head;
use gmq_plan::{estimate, Checkpointing, Finetune, Job, LoraTargets, Model, Optimizer, Precision, Sharding};

const GIB: f64 = (1u64 << 30) as f64;

#[derive(Clone, Copy)]
enum Metric {
    /// NVML device memory used by the process (context included).
    Nvml,
    /// torch.cuda.max_memory_reserved.
    Reserved,
    /// torch.cuda peak active/allocated bytes.
    Allocated,
    /// torch.cuda max allocated bytes of the last pipeline stage (Megatron logs rank
    /// `world_size - 1` to TensorBoard).
    AllocatedLastStage,
}

/// Whether a row was used to set a constant or only checks the planner.
#[derive(Clone, Copy, PartialEq)]
enum Role {
    /// Used to fit the named constant: not independent evidence.
    Fitted(&'static str),
    /// No constant was fitted to it.
    HeldOut,
}

struct Row {
    source: &'static str,
    what: &'static str,
    metric: Metric,
    measured_gib: f64,
    role: Role,
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
    // transformers' own AdamW of that release looped over parameters; its 8-bit rows are
    // bitsandbytes (`adamw_bnb_8bit`), whose kernel updates the states in place.
    job.optimizer_impl = Some(if optimizer == Optimizer::Adam8bit {
        StepKernel::Fused
    } else {
        StepKernel::ForLoop
    });
    job.cuda_context = 1343 << 20;
    // The Trainer of that release called `model.zero_grad()`, and PyTorch 1.x kept the zeroed
    // gradients allocated (`set_to_none=False`).
    job.keep_grads = Some(true);
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

/// torchtune README, "Optimization flags" (commit fe9dccf): Llama 3.2 3B,
/// `full_finetune_single_device`, batch 2, max sequence length 4096, bf16, A100; each technique
/// added on top of the previous ones ("Peak Memory Active", GiB). The rows from "+ Packed
/// Dataset" on fill every sequence to 4096 tokens (the unpacked baseline's lengths are the
/// dataset's, not stated, so it is not a row). Pure bf16 (`dtype: bf16`: weights, gradients and
/// AdamW states in bf16), torch.optim.AdamW, SDPA/flex attention (no score matrix), plain
/// cross entropy on `logits.float()` until "+ Chunked Cross Entropy". "+ 8-bit AdamW" is
/// torchao's `AdamW8bit` (the planner's default 8-bit step; why: docs/PLAN.md sec. 7).
const TORCHTUNE: &str = "https://github.com/pytorch/torchtune/blob/main/README.md#optimization-flags";

fn torchtune(step: usize) -> Job {
    let mut job = Job::new(Model::Shaped(find("llama-3.2-3b").unwrap().shape()), 2, 4096);
    job.precision = Precision::Bf16;
    let steps: &[fn(&mut Job)] = &[
        |_| {},
        |j| j.compile = true,
        |j| j.loss_impl = Some(LossKernel::Chunked),
        |j| j.checkpointing = Checkpointing::Full,
        |j| j.optimizer_in_backward = true,
        |j| j.activation_offload = true,
        |j| j.optimizer = Optimizer::Adam8bit,
    ];
    for apply in &steps[..=step] {
        apply(&mut job);
    }
    job
}

/// The README's LoRA and QLoRA rows: the same techniques except the step in backward and 8-bit
/// AdamW; `3B_lora_single_device` / `3B_qlora_single_device`: rank 64 on q, v, output and the
/// MLP, torch.optim.AdamW(fused=True).
fn torchtune_lora(quantized: bool) -> Job {
    let mut job = torchtune(5);
    job.optimizer_in_backward = false;
    job.optimizer_impl = Some(StepKernel::Fused);
    job.finetune = Finetune::Lora {
        rank: 64,
        targets: LoraTargets::All,
        quantized,
    };
    job
}

/// torchtune README at 0217d44c2 (PR #955, 2024-05-09), "Memory and training speed" table:
/// Llama2-7B, "Batch Size = 4, Seq Length = 2048", bf16, 1 x RTX 4090, "Peak Memory per GPU
/// (GB)". The LoRA row runs `lora_finetune_single_device` with `llama2/7B_lora_single_device.yaml`
/// at that commit: rank 8 on q and v, torch.optim.AdamW (foreach), activation checkpointing,
/// gradient accumulation 64, SDPA. The full fine-tuning row ("*: Uses PagedAdamW from
/// bitsandbytes") runs `full_finetune_single_device` with `llama2/7B_full_low_memory.yaml`:
/// `bitsandbytes.optim.PagedAdamW` (32-bit), `optimizer_in_bwd: True`, activation
/// checkpointing. The recipes of that commit keep the fp32 shifted logits through the backward
/// (`logits = logits[..., :-1, :].contiguous()` then `loss.backward()` with `logits` live: the
/// `del logits` of torchtune PR #1046 came on 2024-06-04), so both rows run with
/// `keep_shifted_logits`. The metric: the table's earlier revision (fef3ed10d) said
/// "Peak memory per GPU is as reported by `torch.cuda.max_memory_reserved()`" (its 15.97 GB is
/// torchtune PR #527's logged `GPU peak memory reserved: 15.974006784GB`), and torchtune's
/// `memory_stats_log` divides by 1e9: decimal GB of max_memory_reserved.
const TORCHTUNE_2024: &str =
    "https://github.com/pytorch/torchtune/blob/0217d44c2e1e372b34628767745c1f6538086a81/README.md";

fn torchtune_2024_lora() -> Job {
    let mut job = Job::new(Model::Shaped(find("llama-2-7b").unwrap().shape()), 4, 2048);
    job.precision = Precision::Bf16;
    job.grad_accum = 64;
    job.checkpointing = Checkpointing::Full;
    job.finetune = Finetune::Lora {
        rank: 8,
        targets: LoraTargets::QueryValue,
        quantized: false,
    };
    job.keep_shifted_logits = true;
    job
}

fn torchtune_2024_full_paged() -> Job {
    let mut job = Job::new(Model::Shaped(find("llama-2-7b").unwrap().shape()), 4, 2048);
    job.precision = Precision::Bf16;
    job.optimizer_in_backward = true;
    job.checkpointing = Checkpointing::Full;
    job.keep_shifted_logits = true;
    job.paged_optimizer = true;
    job
}

/// torchtitan `benchmarks/llama3_h100_202412_torchtitan.md` (torchtitan 9dec370, 2024-12-26),
/// tables 1 and 3: Llama 3.1 8B, FSDP on 8 and on 128 H100 (96 GB), local batch 2, seq 8192
/// (`llama3_8b.toml`), selective activation checkpointing with `selective_ac_option = 'op'`
/// (the config's default), bf16 parameters with fp32 reduce-scatter, foreach AdamW, SDPA flash
/// attention, cross entropy on `pred.float()`. "Memory" is what `train.py` logs,
/// `max_reserved_gib` (`torch.cuda.memory_stats()["reserved_bytes.all.peak"]`).
const TORCHTITAN_BENCH: &str =
    "https://github.com/pytorch/torchtitan/blob/main/benchmarks/llama3_h100_202412_torchtitan.md";

fn torchtitan_8b(dp: u64, checkpointing: Checkpointing) -> Job {
    let mut job = Job::new(Model::Shaped(find("llama-3.1-8b").unwrap().shape()), 2, 8192);
    job.parallel.dp = dp;
    job.sharding = Sharding::Fsdp;
    job.checkpointing = checkpointing;
    job
}

/// Megatron-LM's CI golden values (`tests/functional_tests/test_cases/gpt/<case>/`,
/// `model_config.yaml` and `golden_values_dev_dgx_h100.json`, "mem-max-allocated-bytes" from
/// step 2 on): a GPT-style 7B, 32 layers, hidden 4096, 32 heads in 8 query groups, MLP 4 x
/// hidden with GeLU, LayerNorm, biases, dropout 0.1, learned absolute positions (8192), untied
/// output layer, `--vocab-size 131073` (padded by Megatron to 128 x tp), seq 8192, global batch
/// 8 on 8 H100 (one node), bf16 with the distributed optimizer, Transformer Engine fused
/// attention, no recomputation. Megatron writes TensorBoard on rank `world_size - 1`
/// (`global_vars.py`), the last pipeline stage.
const MEGATRON_CI: &str =
    "https://github.com/NVIDIA/Megatron-LM/tree/main/tests/functional_tests/test_cases/gpt";

fn megatron_gpt_7b(tp: u64, pp: u64, micro: u64, virtual_stages: u64) -> Job {
    let shape = gmq_plan::shape::gpt("gpt3-7b (Megatron CI)", 32, 4096, 32, 8, 131_073, 8192, false);
    let mut job = Job::new(Model::Shaped(shape), micro, 8192);
    job.framework = gmq_plan::Framework::Megatron;
    job.parallel.tp = tp;
    job.parallel.pp = pp;
    job.parallel.dp = 8 / (tp * pp);
    job.grad_accum = 8 / (micro * job.parallel.dp);
    job.sharding = Sharding::Zero(1);
    job.virtual_stages = virtual_stages;
    job
}

fn rows() -> Vec<Row> {
    use Checkpointing::{Full, None};
    use Metric::*;
    use Optimizer::*;
    use Precision::*;
    let mib = |x: f64| x / 1024.0;
    let h100 = |share: f64| share * 95.0396;
    let mut rows = vec![
        Row {
            source: HF_SINGLE_GPU,
            what: "vanilla, batch 4",
            metric: Nvml,
            role: Role::Fitted("FRAGMENTATION"),
            measured_gib: mib(14949.0),
            job: bert(4, 1, Fp32, AdamW, None),
        },
        Row {
            source: HF_SINGLE_GPU,
            what: "batch 1, accumulation 4",
            metric: Nvml,
            role: Role::Fitted("FRAGMENTATION"),
            measured_gib: mib(8681.0),
            job: bert(1, 4, Fp32, AdamW, None),
        },
        Row {
            source: HF_SINGLE_GPU,
            what: "+ gradient checkpointing",
            metric: Nvml,
            role: Role::Fitted("FRAGMENTATION"),
            measured_gib: mib(6775.0),
            job: bert(1, 4, Fp32, AdamW, Full),
        },
        Row {
            source: HF_SINGLE_GPU,
            what: "fp16 (autocast), batch 4",
            metric: Nvml,
            role: Role::Fitted("FRAGMENTATION"),
            measured_gib: mib(13939.0),
            job: bert(4, 1, Amp, AdamW, None),
        },
        Row {
            source: HF_SINGLE_GPU,
            what: "batch 1, accum 4, checkpointing, fp16",
            metric: Nvml,
            role: Role::Fitted("FRAGMENTATION"),
            measured_gib: mib(7275.0),
            job: bert(1, 4, Amp, AdamW, Full),
        },
        Row {
            source: HF_SINGLE_GPU,
            what: "Adafactor, batch 4",
            metric: Nvml,
            role: Role::Fitted("FRAGMENTATION"),
            measured_gib: mib(12295.0),
            job: bert(4, 1, Fp32, Adafactor, None),
        },
        Row {
            source: HF_SINGLE_GPU,
            what: "Adafactor, batch 1, accum 4, checkpointing, fp16",
            metric: Nvml,
            role: Role::Fitted("FRAGMENTATION"),
            measured_gib: mib(4847.0),
            job: bert(1, 4, Amp, Adafactor, Full),
        },
        Row {
            source: HF_SINGLE_GPU,
            what: "8-bit Adam (bitsandbytes), batch 4",
            metric: Nvml,
            role: Role::Fitted("FRAGMENTATION"),
            measured_gib: mib(13085.0),
            job: bert(4, 1, Fp32, Adam8bit, None),
        },
        Row {
            source: HF_SINGLE_GPU,
            what: "8-bit Adam, batch 1, accum 4, checkpointing, fp16",
            metric: Nvml,
            role: Role::Fitted("FRAGMENTATION"),
            measured_gib: mib(5363.0),
            job: bert(1, 4, Amp, Adam8bit, Full),
        },
        Row {
            source: TORCHTITAN,
            what: "FSDP1, AC: peak active 24.81%",
            metric: Allocated,
            role: Role::HeldOut,
            measured_gib: h100(0.2481),
            job: torchtitan(),
        },
        Row {
            source: TORCHTITAN,
            what: "FSDP1, AC: peak reserved 33.82%",
            metric: Reserved,
            role: Role::Fitted("STREAM_POOL_REDUCE_COPIES"),
            measured_gib: h100(0.3382),
            job: torchtitan(),
        },
        Row {
            source: TORCHTITAN,
            what: "FSDP2, AC: peak active 23.92%",
            metric: Allocated,
            role: Role::HeldOut,
            measured_gib: h100(0.2392),
            job: torchtitan(),
        },
        Row {
            source: TORCHTITAN,
            what: "FSDP2, AC: peak reserved 32.64%",
            metric: Reserved,
            role: Role::Fitted("STREAM_POOL_REDUCE_COPIES"),
            measured_gib: h100(0.3264),
            job: torchtitan(),
        },
        Row {
            source: TORCHTITAN,
            what: "FSDP2, AC, compiled: peak reserved 28.72 GiB",
            metric: Reserved,
            role: Role::HeldOut,
            measured_gib: 28.72,
            job: Job {
                compile: true,
                ..torchtitan()
            },
        },
        Row {
            source: TORCHTITAN,
            what: "FSDP2, no AC, compiled: peak reserved 90.28 GiB",
            metric: Reserved,
            role: Role::HeldOut,
            measured_gib: 90.28,
            job: Job {
                compile: true,
                checkpointing: Checkpointing::None,
                ..torchtitan()
            },
        },
    ];
    for (what, measured_gib, dp, compile) in [
        ("8B FSDP 8, per-op SAC: 82.4 GiB reserved", 82.4, 8, false),
        ("8B FSDP 128, per-op SAC: 67.0 GiB reserved", 67.0, 128, false),
        ("8B FSDP 8, per-op SAC, compiled: 77.0 GiB", 77.0, 8, true),
        ("8B FSDP 128, per-op SAC, compiled: 62.0 GiB", 62.0, 128, true),
    ] {
        rows.push(Row {
            source: TORCHTITAN_BENCH,
            what,
            metric: Reserved,
            role: Role::HeldOut,
            measured_gib,
            job: Job {
                compile,
                ..torchtitan_8b(dp, Checkpointing::SelectiveOp)
            },
        });
    }
    rows.push(Row {
        source: MEGATRON_CI,
        what: "gpt3_7b_tp1_pp4_memory_speed: interleaved, 8 chunks",
        metric: AllocatedLastStage,
        role: Role::HeldOut,
        measured_gib: 60_720_852_992.0 / GIB,
        job: megatron_gpt_7b(1, 4, 1, 8),
    });
    // `gpt3_mcore_te_tp1_pp4_vp1`: a small GPT (12 layers, hidden 512, 8 heads, tied
    // embeddings, GPT-2 BPE vocabulary of 50257 padded to 50304, 1024 positions), micro-batch
    // 4, global batch 32, seq 1024, PP 4 with one layer per virtual stage (3 chunks per rank),
    // DP 2, bf16 without the distributed optimizer, `--attention-backend unfused` (the score
    // matrix is stored), no recomputation.
    rows.push(Row {
        source: MEGATRON_CI,
        what: "gpt3_mcore_te_tp1_pp4_vp1: small GPT, 3 chunks",
        metric: AllocatedLastStage,
        role: Role::HeldOut,
        measured_gib: 4_161_191_424.0 / GIB,
        job: {
            let shape = gmq_plan::shape::gpt("gpt3 small (Megatron CI)", 12, 512, 8, 8, 50_257, 1024, true);
            let mut job = Job::new(Model::Shaped(shape), 4, 1024);
            job.framework = gmq_plan::Framework::Megatron;
            job.parallel.pp = 4;
            job.parallel.dp = 2;
            job.grad_accum = 4;
            job.flash = false;
            job.virtual_stages = 3;
            job
        },
    });
    rows.push(Row {
        source: MEGATRON_CI,
        what: "gpt3_7b_tp4_pp1_memory_speed: vocab padded to 131584",
        metric: Allocated,
        role: Role::HeldOut,
        measured_gib: 57_143_791_616.0 / GIB,
        job: megatron_gpt_7b(4, 1, 2, 1),
    });
    let torchtune_rows: [(&str, f64, Role); 7] = [
        ("3B + packed (seq 4096)", 60.0, Role::HeldOut),
        ("3B + compile", 51.0, Role::Fitted("COMPILE_ACTIVATION_SHARE")),
        ("3B + chunked cross entropy", 42.9, Role::HeldOut),
        ("3B + activation checkpointing", 24.9, Role::HeldOut),
        ("3B + optimizer step in backward", 23.1, Role::HeldOut),
        ("3B + activation offloading", 21.8, Role::HeldOut),
        ("3B + 8-bit AdamW", 17.6, Role::HeldOut),
    ];
    for (step, (what, measured_gib, role)) in torchtune_rows.into_iter().enumerate() {
        rows.push(Row {
            source: TORCHTUNE,
            what,
            metric: Allocated,
            role,
            measured_gib,
            job: torchtune(step),
        });
    }
    rows.push(Row {
        source: TORCHTUNE_2024,
        what: "Llama2-7B LoRA, batch 4, seq 2048, kept shifted logits",
        metric: Reserved,
        role: Role::HeldOut,
        measured_gib: 21.3e9 / GIB,
        job: torchtune_2024_lora(),
    });
    rows.push(Row {
        source: TORCHTUNE_2024,
        what: "Llama2-7B full, PagedAdamW, step in backward, kept logits",
        metric: Reserved,
        role: Role::HeldOut,
        measured_gib: 24.1e9 / GIB,
        job: torchtune_2024_full_paged(),
    });
    for (what, measured_gib, quantized) in [("3B LoRA", 8.5, false), ("3B QLoRA", 4.6, true)] {
        rows.push(Row {
            source: TORCHTUNE,
            what,
            metric: Allocated,
            role: Role::HeldOut,
            measured_gib,
            job: torchtune_lora(quantized),
        });
    }
    rows
}

fn predicted_gib(row: &Row) -> f64 {
    let est = estimate(&row.job).unwrap();
    let b = est.breakdown;
    let bytes = match row.metric {
        Metric::Nvml => b.peak,
        Metric::Reserved => b.reserved,
        Metric::Allocated => b.allocated,
        Metric::AllocatedLastStage => est.stages.last().unwrap().allocated,
    };
    bytes as f64 / GIB
}

fn median(sorted: &[f64]) -> f64 {
    let n = sorted.len();
    if n % 2 == 1 {
        sorted[n / 2]
    } else {
        (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
    }
}

#[test]
fn published_peaks() {
    let mut held_out = Vec::new();
    let mut fitted = Vec::new();
    println!(
        "{:<50} {:<28} {:>9} {:>9} {:>7}",
        "row", "role", "measured", "planned", "error"
    );
    for row in rows() {
        let predicted = predicted_gib(&row);
        let error = predicted / row.measured_gib - 1.0;
        let role = match row.role {
            Role::Fitted(constant) => format!("fit: {constant}"),
            Role::HeldOut => "held out".to_string(),
        };
        println!(
            "{:<50} {:<28} {:>9.2} {:>9.2} {:>+6.1}%  {}",
            row.what,
            role,
            row.measured_gib,
            predicted,
            error * 100.0,
            row.source
        );
        match row.role {
            Role::Fitted(_) => fitted.push(error),
            Role::HeldOut => held_out.push(error),
        }
    }
    let abs_sorted = |errors: &[f64]| {
        let mut v: Vec<f64> = errors.iter().map(|e| e.abs()).collect();
        v.sort_by(f64::total_cmp);
        v
    };
    let held = abs_sorted(&held_out);
    let fit = abs_sorted(&fitted);
    let worst_under = held_out.iter().copied().fold(0.0f64, f64::min);
    println!(
        "held out: {} rows, median |error| {:.1}%, max {:.1}%, worst under-prediction {:.1}%",
        held.len(),
        median(&held) * 100.0,
        held[held.len() - 1] * 100.0,
        worst_under * 100.0
    );
    println!(
        "fitted: {} rows, median |error| {:.1}%, max {:.1}%",
        fit.len(),
        median(&fit) * 100.0,
        fit[fit.len() - 1] * 100.0
    );
    // The issue-18 target, on the held-out rows alone.
    assert!(
        median(&held) <= 0.10,
        "held-out median |error| {:.1}%",
        median(&held) * 100.0
    );
    // The issue-18 target: no held-out row under-predicted by more than 10 %.
    assert!(
        worst_under >= -0.10,
        "a held-out row is under-predicted by {:.1}%",
        worst_under * 100.0
    );
    // The fitted rows must stay fitted.
    assert!(
        fit[fit.len() - 1] <= 0.10,
        "a fitted row is off by {:.1}%",
        fit[fit.len() - 1] * 100.0
    );
}
