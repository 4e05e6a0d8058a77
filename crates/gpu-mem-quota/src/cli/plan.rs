//! `gpu-mem-quota plan`: predict a training job's per-GPU memory and fit it to a quota.
//! Parsing and printing only; the model is `gmq_plan`.

use std::io::Write;
use std::process::ExitCode;

use super::args::{Opt, Parsed, Spec};
use gmq_core::size::parse_size;
use gmq_plan::framework::{LossKernel, StepKernel};
use gmq_plan::presets;
use gmq_plan::report;
use gmq_plan::shape::{custom, gpt, Head, ModelShape};
use gmq_plan::{
    plan, Checkpointing, Finetune, Framework, Job, LoraTargets, Model, Offload, Optimizer, Parallel,
    Precision, Sharding, DEFAULT_CUDA_CONTEXT,
};

const OPTIONS: &[Opt] = &[
    Opt::value("model"),
    Opt::value("params"),
    Opt::value("layers"),
    Opt::value("hidden"),
    Opt::value("heads"),
    Opt::value("kv-heads"),
    Opt::value("ffn"),
    Opt::value("vocab"),
    Opt::value("head"),
    Opt::value("arch"),
    Opt::value("positions"),
    Opt::value("vocab-multiple"),
    Opt::value("virtual-stages"),
    Opt::value("precision"),
    Opt::value("optimizer"),
    Opt::value("optimizer-impl"),
    Opt::value("galore-rank"),
    Opt::value("loss-impl"),
    Opt::value("zero"),
    Opt::value("dp"),
    Opt::value("tp"),
    Opt::value("pp"),
    Opt::value("micro-batch"),
    Opt::value("seq"),
    Opt::value("grad-accum"),
    Opt::value("checkpointing"),
    Opt::value("lora-rank"),
    Opt::value("lora-targets"),
    Opt::value("framework"),
    Opt::value("offload"),
    Opt::value("quota"),
    Opt::value("cuda-context"),
    Opt::flag("sp"),
    Opt::flag("fsdp"),
    Opt::flag("flash"),
    Opt::flag("no-flash"),
    Opt::flag("qlora"),
    Opt::flag("compile"),
    Opt::flag("activation-offload"),
    Opt::flag("optimizer-in-backward"),
    Opt::flag("keep-grads"),
    Opt::flag("untied"),
    Opt::flag("no-loss-parallel"),
    Opt::flag("keep-shifted-logits"),
    Opt::flag("paged-optimizer"),
    Opt::flag("json"),
];

pub(crate) const SPEC: Spec = Spec {
    command: "plan",
    options: OPTIONS,
    max_positional: 0,
    help,
    // The help is long: an error points at it.
    error_shows_help: false,
};

/// GaLore's rank when `--galore-rank` is not given: the galore_torch README's example (rank 128).
const DEFAULT_GALORE_RANK: u64 = 128;

fn help() -> String {
    let names = match presets::all() {
        Ok(all) => all.iter().map(|p| p.name.clone()).collect::<Vec<_>>().join(", "),
        Err(e) => e,
    };
    format!(
        "Usage: gpu-mem-quota plan (--model NAME | --params N | --layers N --hidden N --heads N --vocab N) [options]

Predicts the peak GPU memory per GPU of a training job from its shape, and against --quota finds
the largest micro-batch that fits and the cheapest techniques that make the job fit.
The model and every term's source: docs/PLAN.md.

Model
  --model NAME          a preset: {names}
  --params N            parameter count only (7.5B, 350M, 6.74e9; at most 10T): model states,
                        no activations; ZeRO-3/FSDP units are layers of the usual depth for the
                        count (hidden = 128 x layers), or of --layers L given with it
  --layers N --hidden N --heads N --vocab N
                        a custom Llama-style shape, or overrides of a preset's dimensions
  --kv-heads N          key/value heads (grouped-query attention); default: --heads
  --ffn N               MLP width; default: 4 x --hidden (custom shapes)
  --head lm|none        output head: vocabulary logits (default) or a small task head
  --arch llama|gpt      a custom shape's family: llama (gated MLP, RMSNorm, no biases;
                        default) or gpt (Megatron GPT: GeLU MLP, LayerNorm, biases, dropout,
                        output layer tied to the embedding unless --untied)
  --positions N         learned absolute position embeddings of N rows (GPT-2; Megatron's
                        max_position_embeddings); default: the preset's, 0 for custom shapes
  --untied              --arch gpt: an output layer of its own
                        (Megatron's untie_embeddings_and_output_weights)
  --vocab-multiple N    pad the vocabulary to a multiple of N (megatron: N x --tp, default
                        128, its make_vocab_size_divisible_by; others: default no padding)

Training
  --precision P         fp32 | amp (autocast, fp32 weights) | mixed (16-bit weights, fp32 master;
                        default) | bf16 (pure bf16) | fp8 (Transformer Engine GEMMs)
  --optimizer O         adamw (default) | adam8bit | sgd | sgd-momentum | adafactor |
                        galore (GaLore AdamW on the layers' weight matrices)
  --galore-rank R       GaLore projection rank (default 128; needs --optimizer galore)
  --optimizer-impl I    loop | foreach | fused; default: the framework's (pytorch: foreach);
                        adam8bit: fused is bitsandbytes, the others torchao's AdamW8bit
  --paged-optimizer     bitsandbytes paged AdamW / 8-bit AdamW (QLoRA's paged_adamw_32bit):
                        states of tensors >= 1e5 elements in CUDA managed memory, outside
                        the allocator's figures but in the peak per GPU
  --optimizer-in-backward
                        each parameter's step runs in backward and frees its gradient
                        (torchtune optimizer_in_bwd; needs --grad-accum 1)
  --keep-grads          gradients stay allocated between steps (zero_grad(set_to_none=False),
                        PyTorch < 2.0); default: kept by megatron/deepspeed and with
                        --grad-accum > 1, freed otherwise
  --loss-impl L         upcast (fp32 copy of the logits; pytorch, deepspeed default) |
                        vocab-parallel (megatron default) | chunked (torchtune
                        CEWithChunkedOutputLoss) | fused-linear (Liger, Cut Cross-Entropy)
  --no-loss-parallel    under --tp, the logits are all-gathered and every rank computes the
                        loss on the whole vocabulary (torchtitan disable_loss_parallel; Hugging
                        Face tp_plan); default: loss parallel, each rank its vocabulary shard
  --keep-shifted-logits the loop keeps the fp32 copy of the shifted logits
                        (logits[..., :-1, :].contiguous()) alive through the backward (no
                        `del logits` before loss.backward()); needs --loss-impl upcast
  --micro-batch N       samples per GPU per forward pass (default 1)
  --seq N               sequence length in tokens (default 2048)
  --grad-accum N        gradient accumulation steps (default 1)
  --checkpointing C     none (default) | selective (attention scores only: Megatron; nothing
                        to drop with fused attention) | full | selective-op (torchtitan's
                        per-op policy: every other matmul and the attention outputs kept)
  --flash, --no-flash   fused attention that stores no score matrix (default: on)
  --compile             torch.compile: the compiled layers store fewer activations
  --activation-offload  saved activations go to CPU memory, 2 layers' worth stay on the GPU
  --lora-rank R         LoRA adapters of rank R on a frozen base
  --lora-targets T      qv | attn | all (default all linear layers)
  --qlora               QLoRA: the frozen base's linear weights in 4-bit NF4 (needs --lora-rank)

Parallelism (GPUs = dp x tp x pp)
  --dp N --tp N --pp N  data, tensor and pipeline parallel sizes (default 1)
  --sp                  Megatron sequence parallelism (needs --tp > 1)
  --virtual-stages V    interleaved pipeline schedule with V model chunks per pipeline rank
                        (Megatron virtual pipeline stages, torchtitan Interleaved1F1B;
                        default 1: plain 1F1B)
  --zero S              ZeRO stage 0-3 (DeepSpeed; Megatron's distributed optimizer is 1)
  --fsdp                PyTorch FSDP FULL_SHARD
  --offload W           none (default) | optimizer (ZeRO-Offload) | params (ZeRO-3/FSDP
                        parameter offload)
  --framework F         pytorch (HF Transformers/Trainer, torchtitan, torchtune) | deepspeed |
                        megatron; default: deepspeed with --zero, otherwise pytorch

Environment
  --quota SIZE          GPU memory per GPU to fit in, Slurm syntax (40G, 81920M)
  --cuda-context SIZE   per-process CUDA context (default 500M)
  --json                print the same numbers as JSON
  -h, --help            this help

Exit status: 0 when the job fits the quota (or no quota is given), 1 when it does not, 2 on a
usage error.

Example:
  gpu-mem-quota plan --model llama-2-7b --zero 3 --dp 8 --micro-batch 4 --seq 2048 --quota 40G
"
    )
}

/// Runs the command; see `help()`.
pub(super) fn run(argv: Vec<String>) -> ExitCode {
    let parsed = match SPEC.parse(&argv) {
        Ok(parsed) => parsed,
        Err(status) => return status,
    };
    let (job, quota) = match job_from(&parsed) {
        Ok(x) => x,
        Err(e) => return SPEC.usage_error(&e),
    };
    let plan = match plan(&job, quota) {
        Ok(p) => p,
        Err(e) => return SPEC.usage_error(&e.to_string()),
    };
    let output = if parsed.flag("json") {
        report::json(&plan) + "\n"
    } else {
        report::text(&plan)
    };
    // A reader that stops early (`| head`) closes the pipe: that is not an error worth a panic.
    let _ = std::io::stdout().lock().write_all(output.as_bytes());
    match quota {
        Some(q) if plan.estimate.peak() > q => ExitCode::from(1),
        _ => ExitCode::SUCCESS,
    }
}

/// A whole number for `--flag`.
fn number(p: &Parsed, key: &str) -> Result<Option<u64>, String> {
    match p.value(key) {
        None => Ok(None),
        Some(text) => text.parse::<u64>().map(Some).map_err(|_| {
            format!(
                "invalid --{key} '{}': expected a whole number",
                text.escape_debug()
            )
        }),
    }
}

/// One of `choices` (the second element is what the user types: an enum's `ALL`) for `--flag`.
fn choice<T: Copy>(p: &Parsed, key: &str, choices: &[(T, &str)], default: T) -> Result<T, String> {
    match p.value(key) {
        None => Ok(default),
        Some(text) => choices
            .iter()
            .find(|(_, name)| name.eq_ignore_ascii_case(text))
            .map(|(value, _)| *value)
            .ok_or_else(|| {
                let names: Vec<&str> = choices.iter().map(|(_, n)| *n).collect();
                format!(
                    "invalid --{key} '{}': use one of {}",
                    text.escape_debug(),
                    names.join(", ")
                )
            }),
    }
}

/// A parameter count: a whole number, a decimal with a K/M/B/T suffix (7.5B), or an exponent (6.74e9).
fn parse_count(text: &str) -> Result<u64, String> {
    let bad = || {
        format!(
            "invalid --params '{}': expected a count such as 7.5B, 350M or 6.74e9",
            text.escape_debug()
        )
    };
    let lower = text.to_ascii_lowercase();
    let (number, scale) = match lower.char_indices().last() {
        Some((i, 'k')) => (&lower[..i], 1e3),
        Some((i, 'm')) => (&lower[..i], 1e6),
        Some((i, 'b')) => (&lower[..i], 1e9),
        Some((i, 't')) => (&lower[..i], 1e12),
        _ => (lower.as_str(), 1.0),
    };
    if number.is_empty() || !number.chars().all(|c| c.is_ascii_digit() || c == '.' || c == 'e') {
        return Err(bad());
    }
    let value: f64 = number.parse().map_err(|_| bad())?;
    let count = (value * scale).round();
    if count > gmq_plan::MAX_PARAMS as f64 && count.is_finite() {
        return Err(format!(
            "--params {} is more than the planner accepts ({}, 10 trillion parameters)",
            text.escape_debug(),
            gmq_plan::MAX_PARAMS
        ));
    }
    if !(1.0..=1e15).contains(&count) {
        return Err(bad());
    }
    Ok(count as u64)
}

fn size(p: &Parsed, key: &str) -> Result<Option<u64>, String> {
    match p.value(key) {
        None => Ok(None),
        Some(text) => parse_size(text)
            .map(|s| Some(s.bytes()))
            .map_err(|e| format!("invalid --{key} '{}': {e}", text.escape_debug())),
    }
}

const SHAPE_KEYS: &[&str] = &[
    "layers",
    "hidden",
    "heads",
    "kv-heads",
    "ffn",
    "vocab",
    "positions",
];

fn model_from(p: &Parsed) -> Result<Model, String> {
    if let Some(text) = p.value("params") {
        let only_layers = SHAPE_KEYS.iter().all(|k| *k == "layers" || p.value(k).is_none());
        if p.value("model").is_some() || !only_layers {
            return Err(
                "--params: give a parameter count (and optionally --layers) or a model shape (--model, --hidden ...), not both".into(),
            );
        }
        let params = parse_count(text)?;
        return Ok(match number(p, "layers")? {
            Some(layers) => Model::ParamsLayers { params, layers },
            None => Model::ParamsOnly(params),
        });
    }
    let mut shape: ModelShape = match p.value("model") {
        Some(name) => presets::find(name).map_err(|e| format!("--model: {e}"))?.shape(),
        None => {
            let missing: Vec<String> = ["layers", "hidden", "heads", "vocab"]
                .iter()
                .filter(|k| p.value(k).is_none())
                .map(|k| format!("--{k}"))
                .collect();
            if !missing.is_empty() {
                return Err(format!(
                    "no model: give --model NAME, --params N, or a shape (missing: {})",
                    missing.join(", ")
                ));
            }
            match p.value("arch") {
                None | Some("llama") => custom("custom", 1, 1, 1, 1),
                Some("gpt") => gpt("custom", 1, 1, 1, 1, 1, 0, !p.flag("untied")),
                Some(other) => {
                    return Err(format!(
                        "invalid --arch '{}': use one of llama, gpt",
                        other.escape_debug()
                    ))
                }
            }
        }
    };
    if p.value("model").is_some() && p.value("arch").is_some() {
        return Err("--arch describes a custom shape: a --model preset has its own".into());
    }
    if p.flag("untied") && p.value("arch") != Some("gpt") {
        return Err("--untied needs --arch gpt (Llama-style custom shapes are untied already)".into());
    }
    let preset_mha = shape.kv_heads == shape.heads;
    if let Some(n) = number(p, "layers")? {
        shape.layers = n;
    }
    if let Some(n) = number(p, "hidden")? {
        shape.hidden = n;
        if p.value("model").is_none() {
            shape.ffn = 4 * n;
        }
    }
    if let Some(n) = number(p, "heads")? {
        shape.heads = n;
        if preset_mha {
            shape.kv_heads = n;
        }
    }
    if let Some(n) = number(p, "kv-heads")? {
        shape.kv_heads = n;
    }
    if let Some(n) = number(p, "ffn")? {
        shape.ffn = n;
    }
    if let Some(n) = number(p, "vocab")? {
        shape.vocab = n;
    }
    if let Some(n) = number(p, "positions")? {
        shape.set_positions(n);
    }
    shape.head = choice(p, "head", &[(Head::Lm, "lm"), (Head::None, "none")], Head::Lm)?;
    Ok(Model::Shaped(shape))
}

fn job_from(p: &Parsed) -> Result<(Job, Option<u64>), String> {
    let model = model_from(p)?;
    let sharding = match (number(p, "zero")?, p.flag("fsdp")) {
        (Some(_), true) => return Err("--zero and --fsdp: choose one way of sharding".into()),
        (Some(0), false) | (None, false) => Sharding::None,
        (Some(stage @ 1..=3), false) => Sharding::Zero(stage as u8),
        (Some(stage), false) => return Err(format!("--zero {stage} is not a ZeRO stage; use 0, 1, 2 or 3")),
        (None, true) => Sharding::Fsdp,
    };
    let default_framework = if matches!(sharding, Sharding::Zero(_)) {
        Framework::Deepspeed
    } else {
        Framework::Pytorch
    };
    let framework = choice(p, "framework", &Framework::ALL, default_framework)?;
    let flash = match (p.flag("flash"), p.flag("no-flash")) {
        (true, true) => return Err("--flash and --no-flash: choose one".into()),
        (_, no_flash) => !no_flash,
    };
    let finetune = match number(p, "lora-rank")? {
        Some(rank) => Finetune::Lora {
            rank,
            targets: choice(p, "lora-targets", &LoraTargets::ALL, LoraTargets::All)?,
            quantized: p.flag("qlora"),
        },
        None if p.flag("qlora") => return Err("--qlora needs --lora-rank (the adapters' rank)".into()),
        None if p.value("lora-targets").is_some() => return Err("--lora-targets needs --lora-rank".into()),
        None => Finetune::Full,
    };
    let optimizers: Vec<(Option<Optimizer>, &str)> =
        (Optimizer::ALL.iter().map(|&(o, name)| (Some(o), name)))
            .chain([(None, "galore")])
            .collect();
    let optimizer = match choice(p, "optimizer", &optimizers, Some(Optimizer::AdamW))? {
        Some(_) if p.value("galore-rank").is_some() => {
            return Err("--galore-rank needs --optimizer galore".into())
        }
        Some(o) => o,
        None => Optimizer::Galore {
            rank: number(p, "galore-rank")?.unwrap_or(DEFAULT_GALORE_RANK),
        },
    };
    let job = Job {
        model,
        precision: choice(p, "precision", &Precision::ALL, Precision::Mixed)?,
        optimizer,
        parallel: Parallel {
            dp: number(p, "dp")?.unwrap_or(1),
            tp: number(p, "tp")?.unwrap_or(1),
            pp: number(p, "pp")?.unwrap_or(1),
            sp: p.flag("sp"),
        },
        sharding,
        offload: choice(p, "offload", &Offload::ALL, Offload::None)?,
        micro_batch: number(p, "micro-batch")?.unwrap_or(1),
        seq: number(p, "seq")?.unwrap_or(2048),
        grad_accum: number(p, "grad-accum")?.unwrap_or(1),
        checkpointing: choice(p, "checkpointing", &Checkpointing::ALL, Checkpointing::None)?,
        flash,
        finetune,
        framework,
        optimizer_impl: match p.value("optimizer-impl") {
            None => None,
            Some(_) => Some(choice(
                p,
                "optimizer-impl",
                &StepKernel::ALL,
                StepKernel::Foreach,
            )?),
        },
        loss_impl: match p.value("loss-impl") {
            None => None,
            Some(_) => Some(choice(p, "loss-impl", &LossKernel::ALL, LossKernel::Fp32Upcast)?),
        },
        compile: p.flag("compile"),
        activation_offload: p.flag("activation-offload"),
        optimizer_in_backward: p.flag("optimizer-in-backward"),
        keep_grads: p.flag("keep-grads").then_some(true),
        cuda_context: size(p, "cuda-context")?.unwrap_or(DEFAULT_CUDA_CONTEXT),
        virtual_stages: number(p, "virtual-stages")?.unwrap_or(1),
        vocab_multiple: number(p, "vocab-multiple")?,
        loss_parallel: !p.flag("no-loss-parallel"),
        keep_shifted_logits: p.flag("keep-shifted-logits"),
        paged_optimizer: p.flag("paged-optimizer"),
    };
    Ok((job, size(p, "quota")?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts() {
        let table: &[(&str, u64)] = &[
            ("7.5B", 7_500_000_000),
            ("7.5b", 7_500_000_000),
            ("350M", 350_000_000),
            ("6.74e9", 6_740_000_000),
            ("124439808", 124_439_808),
            ("1.5T", 1_500_000_000_000),
            ("2k", 2000),
        ];
        for &(text, n) in table {
            assert_eq!(parse_count(text), Ok(n), "{text}");
        }
        for bad in ["", "B", "-7B", "7.5X", "seven", "0", "1e99", "7B5"] {
            assert!(parse_count(bad).is_err(), "{bad}");
        }
    }
}
