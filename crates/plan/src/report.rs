//! Rendering a plan: a table for people, JSON for programs. Both carry the same numbers.

use serde::Serialize;

use super::job::{Finetune, Job, Optimizer};
use super::search::{quota_gib, Plan};
use gmq_core::json_number::rounded;

const GIB: f64 = (1u64 << 30) as f64;

fn gib(bytes: u64) -> f64 {
    bytes as f64 / GIB
}

fn finetune_text(f: Finetune) -> String {
    match f {
        Finetune::Full => "full".into(),
        Finetune::Lora {
            rank,
            targets,
            quantized,
        } => format!(
            "{} rank {rank} on {} linears",
            if quantized { "QLoRA" } else { "LoRA" },
            targets.name()
        ),
    }
}

/// The memory techniques beyond the basic settings, as the flags that turn them on.
fn techniques(job: &Job) -> String {
    let mut out = Vec::new();
    if let Some(loss) = job.loss_impl {
        out.push(format!("loss {}", loss.name()));
    }
    if job.compile {
        out.push("torch.compile".to_string());
    }
    if job.activation_offload {
        out.push("activation offload".to_string());
    }
    if job.optimizer_in_backward {
        out.push("optimizer step in backward".to_string());
    }
    if let Optimizer::Galore { rank } = job.optimizer {
        out.push(format!("GaLore rank {rank}"));
    }
    if job.persistent_grads() {
        out.push("gradients kept between steps".to_string());
    }
    if !job.loss_parallel {
        out.push("no loss parallel".to_string());
    }
    if job.keep_shifted_logits {
        out.push("fp32 shifted logits kept through the backward".to_string());
    }
    if job.paged_optimizer {
        out.push("paged optimizer (bitsandbytes)".to_string());
    }
    if job.virtual_stages > 1 {
        out.push(format!(
            "interleaved pipeline schedule, {} model chunks per stage",
            job.virtual_stages
        ));
    }
    if out.is_empty() {
        String::new()
    } else {
        format!("{}\n", out.join(", "))
    }
}

fn describe(job: &Job, params: u64) -> String {
    let p = job.parallel;
    let more = techniques(job);
    format!(
        "{} ({:.2}B parameters) on {} GPU(s): dp {} x tp {} x pp {}{}\n\
         precision {}, optimizer {}, sharding {}, offload {}, fine-tuning {}, framework {}\n\
         micro-batch {} x seq {}, gradient accumulation {}, recomputation {}, fused attention {}\n{more}",
        job.model.name(),
        params as f64 / 1e9,
        p.gpus(),
        p.dp,
        p.tp,
        p.pp,
        if p.sp { " + sequence parallel" } else { "" },
        job.precision.name(),
        job.optimizer.name(),
        job.sharding.name(),
        job.offload.name(),
        finetune_text(job.finetune),
        job.framework.name(),
        job.micro_batch,
        job.seq,
        job.grad_accum,
        job.checkpointing.name(),
        if job.flash { "on" } else { "off" },
    )
}

/// The human-readable report.
pub fn text(plan: &Plan) -> String {
    let est = &plan.estimate;
    let b = &est.breakdown;
    let job = &est.job;
    let mut out = format!("gpu-mem-quota plan: {}", describe(job, est.params));
    if job.parallel.pp > 1 {
        out.push_str(&format!("peak on the {}\n", b.stage));
    }
    let width = b
        .terms
        .iter()
        .map(|t| t.label.chars().count())
        .max()
        .unwrap_or(10)
        .max(40);
    out.push_str(&format!("\n  {:<width$}  {:>9}  {}\n", "term", "GiB", "when"));
    for t in &b.terms {
        let value = if t.at_peak {
            format!("{:9.2}", gib(t.bytes))
        } else {
            format!("({:7.2})", gib(t.bytes))
        };
        out.push_str(&format!("  {:<width$}  {value}  {}\n", t.label, t.phase.name()));
    }
    out.push_str(&format!("  {}\n", "-".repeat(width + 30)));
    let line =
        |label: &str, bytes: u64, metric: &str| format!("  {label:<width$}  {:9.2}  {metric}\n", gib(bytes));
    out.push_str(&line(
        &format!("allocated peak (during {})", b.peak_phase.name()),
        b.allocated,
        "torch.cuda.max_memory_allocated",
    ));
    out.push_str(&line(
        "reserved peak",
        b.reserved,
        "torch.cuda.max_memory_reserved",
    ));
    out.push_str(&line("peak per GPU", b.peak, "nvidia-smi / NVML"));
    let quota = quota_gib(b.peak) << 30;
    out.push_str(&format!(
        "  recommended --gpu-mem-quota={}G carries {:.2} GiB ({:.1}%) over the peak per GPU, which itself\n  \
         carries {:.2} GiB over the allocated peak (allocator and device terms); validation: docs/PLAN.md sec. 7\n",
        quota_gib(b.peak),
        gib(quota - b.peak),
        (quota - b.peak) as f64 / b.peak as f64 * 100.0,
        gib(b.peak - b.allocated),
    ));
    out.push_str(
        "  (values in parentheses belong to another phase of the step and are not part of the peak)\n",
    );
    for note in &b.notes {
        out.push_str(&format!("note: {note}\n"));
    }

    if let Some(quota) = plan.quota {
        out.push('\n');
        if b.peak <= quota {
            out.push_str(&format!(
                "quota {:.2} GiB: fits ({:.2} GiB to spare)\n",
                gib(quota),
                gib(quota - b.peak)
            ));
        } else {
            out.push_str(&format!(
                "quota {:.2} GiB: does NOT fit ({:.2} GiB over)\n",
                gib(quota),
                gib(b.peak - quota)
            ));
        }
        match plan.largest {
            Some(fit) => out.push_str(&format!(
                "largest micro-batch that fits: {} with gradient accumulation {} (effective batch {}), peak {:.2} GiB\n",
                fit.micro_batch,
                fit.grad_accum,
                fit.micro_batch * fit.grad_accum,
                gib(fit.peak)
            )),
            None => out.push_str("no micro-batch fits as configured, not even 1\n"),
        }
        if !plan.ladder.is_empty() {
            out.push_str(&format!(
                "to fit micro-batch {} instead, add in this order (cheapest first):\n",
                job.micro_batch
            ));
            for (i, rung) in plan.ladder.iter().enumerate() {
                out.push_str(&format!(
                    "  {}. {:<26} {:<45} peak {:6.2} GiB{}\n     cost: {}\n",
                    i + 1,
                    rung.flag,
                    rung.technique,
                    gib(rung.peak),
                    if rung.fits { "  fits" } else { "" },
                    rung.cost
                ));
            }
            if !plan.ladder.last().is_some_and(|r| r.fits) {
                out.push_str(
                    "  even with all of these it does not fit: more GPUs, a larger quota, or LoRA/QLoRA\n",
                );
            }
        }
    }
    match plan.paste {
        Some(p) => out.push_str(&format!(
            "\nready to paste:\n  --gpu-mem-quota={}G --gpu-mem-batch={}x{}\n",
            p.quota_gib, p.micro_batch, p.grad_accum
        )),
        None => out.push_str("\nnothing to paste: no setting fits the quota\n"),
    }
    let mut sources: Vec<&str> = b.terms.iter().map(|t| t.source).collect();
    sources.sort_unstable();
    sources.dedup();
    out.push_str("\nsources (details in docs/PLAN.md):\n");
    for s in sources {
        out.push_str(&format!("  - {s}\n"));
    }
    out
}

#[derive(Serialize)]
struct PlanJson<'a> {
    config: ConfigJson<'a>,
    stage: &'a str,
    terms: Vec<TermJson<'a>>,
    peak_phase: &'static str,
    allocated_bytes: u64,
    reserved_bytes: u64,
    peak_bytes: u64,
    #[serde(serialize_with = "rounded")]
    peak_gib: f64,
    recommended_quota_margin_bytes: u64,
    quota_bytes: Option<u64>,
    fits: Option<bool>,
    largest_micro_batch: Option<LargestJson>,
    ladder: Vec<RungJson<'a>>,
    paste: Option<PasteJson>,
    notes: &'a [String],
}

#[derive(Serialize)]
struct ConfigJson<'a> {
    model: String,
    params: u64,
    precision: &'static str,
    optimizer: &'static str,
    sharding: String,
    offload: &'static str,
    dp: u64,
    tp: u64,
    pp: u64,
    sp: bool,
    gpus: u64,
    micro_batch: u64,
    seq: u64,
    grad_accum: u64,
    checkpointing: &'static str,
    flash: bool,
    finetune: String,
    framework: &'a str,
    loss_impl: Option<&'a str>,
    compile: bool,
    activation_offload: bool,
    optimizer_in_backward: bool,
    persistent_grads: bool,
    /// Only with an interleaved schedule, so that the JSON of earlier flags is unchanged.
    #[serde(skip_serializing_if = "is_one")]
    virtual_stages: u64,
    /// Only when switched off, for the same reason.
    #[serde(skip_serializing_if = "is_true")]
    loss_parallel: bool,
    /// Only when set, for the same reason.
    #[serde(skip_serializing_if = "is_false")]
    keep_shifted_logits: bool,
    #[serde(skip_serializing_if = "is_false")]
    paged_optimizer: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
}

fn is_true(b: &bool) -> bool {
    *b
}

fn is_one(n: &u64) -> bool {
    *n == 1
}

#[derive(Serialize)]
struct TermJson<'a> {
    name: &'static str,
    label: &'a str,
    bytes: u64,
    #[serde(serialize_with = "rounded")]
    gib: f64,
    phase: &'static str,
    at_peak: bool,
    source: &'static str,
}

#[derive(Serialize)]
struct LargestJson {
    micro_batch: u64,
    grad_accum: u64,
    peak_bytes: u64,
    #[serde(serialize_with = "rounded")]
    peak_gib: f64,
}

#[derive(Serialize)]
struct RungJson<'a> {
    technique: &'static str,
    flag: &'a str,
    cost: &'static str,
    peak_bytes: u64,
    #[serde(serialize_with = "rounded")]
    peak_gib: f64,
    fits: bool,
}

#[derive(Serialize)]
struct PasteJson {
    gpu_mem_quota: String,
    gpu_mem_batch: String,
}

/// The same numbers as JSON (compact).
pub fn json(plan: &Plan) -> String {
    let est = &plan.estimate;
    let b = &est.breakdown;
    let job = &est.job;
    let p = job.parallel;
    let config = ConfigJson {
        model: job.model.name(),
        params: est.params,
        precision: job.precision.name(),
        optimizer: job.optimizer.name(),
        sharding: job.sharding.name(),
        offload: job.offload.name(),
        dp: p.dp,
        tp: p.tp,
        pp: p.pp,
        sp: p.sp,
        gpus: p.gpus(),
        micro_batch: job.micro_batch,
        seq: job.seq,
        grad_accum: job.grad_accum,
        checkpointing: job.checkpointing.name(),
        flash: job.flash,
        finetune: finetune_text(job.finetune),
        framework: job.framework.name(),
        loss_impl: job.loss_impl.map(|l| l.name()),
        compile: job.compile,
        activation_offload: job.activation_offload,
        optimizer_in_backward: job.optimizer_in_backward,
        persistent_grads: job.persistent_grads(),
        virtual_stages: job.virtual_stages,
        loss_parallel: job.loss_parallel,
        keep_shifted_logits: job.keep_shifted_logits,
        paged_optimizer: job.paged_optimizer,
    };
    let terms = b
        .terms
        .iter()
        .map(|t| TermJson {
            name: t.key,
            label: &t.label,
            bytes: t.bytes,
            gib: gib(t.bytes),
            phase: t.phase.name(),
            at_peak: t.at_peak,
            source: t.source,
        })
        .collect();
    let json = PlanJson {
        config,
        stage: &b.stage,
        terms,
        peak_phase: b.peak_phase.name(),
        allocated_bytes: b.allocated,
        reserved_bytes: b.reserved,
        peak_bytes: b.peak,
        peak_gib: gib(b.peak),
        recommended_quota_margin_bytes: (quota_gib(b.peak) << 30) - b.peak,
        quota_bytes: plan.quota,
        fits: plan.quota.map(|q| b.peak <= q),
        largest_micro_batch: plan.largest.map(|fit| LargestJson {
            micro_batch: fit.micro_batch,
            grad_accum: fit.grad_accum,
            peak_bytes: fit.peak,
            peak_gib: gib(fit.peak),
        }),
        ladder: plan
            .ladder
            .iter()
            .map(|r| RungJson {
                technique: r.technique,
                flag: &r.flag,
                cost: r.cost,
                peak_bytes: r.peak,
                peak_gib: gib(r.peak),
                fits: r.fits,
            })
            .collect(),
        paste: plan.paste.map(|p| PasteJson {
            gpu_mem_quota: format!("--gpu-mem-quota={}G", p.quota_gib),
            gpu_mem_batch: format!("--gpu-mem-batch={}x{}", p.micro_batch, p.grad_accum),
        }),
        notes: &b.notes,
    };
    serde_json::to_string(&json).expect("a plan always serializes")
}
