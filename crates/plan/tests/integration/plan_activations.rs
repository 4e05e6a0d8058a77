//! Activation memory per Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
//! Transformer Models", table 2, for a GPT layer in 16-bit precision with dropout:
//!
//! | technique                                  | bytes per layer            |
//! |--------------------------------------------|----------------------------|
//! | none                                       | sbh(34 + 5as/h)            |
//! | tensor parallel                            | sbh(10 + 24/t + 5as/(ht))  |
//! | tensor + sequence parallel                 | sbh(34/t + 5as/(ht))       |
//! | tensor + sequence parallel + selective     | sbh(34/t)                  |
//! | full recomputation                         | 2sbh                       |

use gmq_plan::activations::{bytes, layer, without_scores};
use gmq_plan::framework::{profile, Profile};
use gmq_plan::presets::find;
use gmq_plan::shape::{Head, ModelShape};
use gmq_plan::{estimate, Checkpointing, Framework, Job, Model, Precision};

// GPT-3 175B's layer as in the paper's table 3: h = 12288, a = 96, s = 2048; b = 1.
const S: f64 = 2048.0;
const B: f64 = 1.0;
const H: f64 = 12288.0;
const A: f64 = 96.0;

fn gpt_layer() -> ModelShape {
    let mut shape = find("gpt2-xl").unwrap().shape();
    shape.hidden = H as u64;
    shape.heads = A as u64;
    shape.kv_heads = A as u64;
    shape.ffn = 4 * H as u64;
    shape
}

fn megatron() -> Profile {
    profile(Framework::Megatron)
}

fn close(got: f64, want: f64) {
    assert!((got - want).abs() <= want * 1e-12, "got {got}, want {want}");
}

#[test]
fn table_2_rows() {
    let shape = gpt_layer();
    let eager = layer(&shape, Precision::Mixed, &megatron(), false, S as u64);
    let tokens = S * B;
    let sbh = S * B * H;
    close(bytes(&eager, tokens, 1, false), sbh * (34.0 + 5.0 * A * S / H));
    for t in [2u64, 4, 8] {
        let tf = t as f64;
        close(
            bytes(&eager, tokens, t, false),
            sbh * (10.0 + 24.0 / tf + 5.0 * A * S / (H * tf)),
        );
        close(
            bytes(&eager, tokens, t, true),
            sbh * (34.0 / tf + 5.0 * A * S / (H * tf)),
        );
        close(bytes(&without_scores(&eager), tokens, t, true), sbh * 34.0 / tf);
    }
}

#[test]
fn fused_attention_drops_the_score_term() {
    let shape = gpt_layer();
    let flash = layer(&shape, Precision::Mixed, &megatron(), true, S as u64);
    // Only the fp32 log-sum-exp per head and position remains of the attention core.
    close(bytes(&flash, S * B, 1, false), S * B * H * 34.0 + 4.0 * A * S * B);
}

fn job(checkpointing: Checkpointing, pp: u64) -> Job {
    let mut shape = gpt_layer();
    shape.layers = 8;
    let mut job = Job::new(Model::Shaped(shape), B as u64, S as u64);
    job.framework = Framework::Megatron;
    job.flash = false;
    job.checkpointing = checkpointing;
    job.parallel.pp = pp;
    job
}

fn activation_term(job: &Job) -> u64 {
    let est = estimate(job).unwrap();
    est.breakdown
        .terms
        .iter()
        .find(|t| t.key == "activations")
        .unwrap()
        .bytes
}

#[test]
fn full_recomputation_keeps_2sbh_per_layer() {
    assert_eq!(
        activation_term(&job(Checkpointing::Full, 1)) as f64,
        8.0 * 2.0 * S * B * H
    );
}

#[test]
fn first_pipeline_stage_holds_p_micro_batches_of_its_layers() {
    // 1F1B: stage 0 of p keeps p micro-batches in flight, so it stores L layers' worth in total
    // whatever p is. Without an LM head the last stage holds less, so the first one peaks.
    let per_layer = S * B * H * (34.0 + 5.0 * A * S / H);
    for pp in [1u64, 2, 4, 8] {
        let mut job = job(Checkpointing::None, pp);
        job.grad_accum = 8;
        if let Model::Shaped(shape) = &mut job.model {
            shape.head = Head::None;
        }
        let est = estimate(&job).unwrap();
        if pp > 1 {
            assert!(
                est.breakdown.stage.starts_with("first"),
                "pp {pp}: {}",
                est.breakdown.stage
            );
        }
        let label = &est
            .breakdown
            .terms
            .iter()
            .find(|t| t.key == "activations")
            .unwrap()
            .label;
        assert!(
            label.starts_with(&format!("activations: {} layers x {pp} micro-batch(es)", 8 / pp)),
            "{label}"
        );
        close(activation_term(&job) as f64, 8.0 * per_layer);
    }
}

#[test]
fn in_flight_micro_batches_are_bounded_by_the_accumulation() {
    // With one micro-batch per step there is nothing else in flight.
    let mut job = job(Checkpointing::None, 4);
    if let Model::Shaped(shape) = &mut job.model {
        shape.head = Head::None;
    }
    let per_layer = S * B * H * (34.0 + 5.0 * A * S / H);
    close(activation_term(&job) as f64, 2.0 * per_layer);
    job.grad_accum = 2;
    close(activation_term(&job) as f64, 2.0 * 2.0 * per_layer);
}

#[test]
fn gated_mlp_and_grouped_query_attention() {
    // Llama-style layer with the fused Megatron kernels: no dropout, 2f bytes per token for each of
    // the fused gate/up output (x2) and down input, and K/V at kv_dim.
    let shape = find("llama-3-8b").unwrap().shape();
    let (h, f, kv) = (4096.0, 14336.0, 1024.0);
    let flash = layer(&shape, Precision::Mixed, &megatron(), true, 4096);
    let per_token = 2.0 * h          // attention norm input
        + 2.0 * h                     // QKV input
        + 2.0 * h + 2.0 * 2.0 * kv    // Q, K, V
        + 4.0 * 32.0                  // log-sum-exp
        + 2.0 * h                     // output projection input
        + 2.0 * h + 2.0 * h           // MLP norm input, MLP input
        + 4.0 * f + 2.0 * f; // fused SwiGLU input, down input
    close(bytes(&flash, 1.0, 1, false), per_token);
}
