//! `gpu-mem-quota plan` end to end: the acceptance command, JSON with the same numbers, help,
//! and errors on the command line.

use std::process::{Command, Output};

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gpu-mem-quota"))
        .arg("plan")
        .args(args)
        .output()
        .unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8(o.stderr.clone()).unwrap()
}

const ACCEPTANCE: &[&str] = &[
    "--model",
    "llama-2-7b",
    "--zero",
    "3",
    "--dp",
    "8",
    "--micro-batch",
    "4",
    "--seq",
    "2048",
    "--quota",
    "40G",
];

/// The number after `"key":` in compact JSON.
fn json_number(json: &str, key: &str) -> u64 {
    let at = json
        .find(&format!("\"{key}\":"))
        .unwrap_or_else(|| panic!("{key} in {json}"))
        + key.len()
        + 3;
    json[at..]
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect::<String>()
        .parse()
        .unwrap()
}

#[test]
fn acceptance_command_prints_breakdown_verdict_and_recommendation() {
    let out = run(ACCEPTANCE);
    let text = stdout(&out);
    for expected in [
        "llama-2-7b (6.74B parameters) on 8 GPU(s)",
        "parameters: 6.74B x 2 B, /8 ZeRO-3",
        "optimizer states: AdamW",
        "activations: 32 layers",
        "logits and cross-entropy",
        "CUDA context",
        "allocator fragmentation",
        "peak per GPU",
        "quota 40.00 GiB: does NOT fit",
        "largest micro-batch that fits: ",
        "add in this order (cheapest first)",
        "ready to paste:\n  --gpu-mem-quota=",
        " --gpu-mem-batch=",
        "Korthikanti et al. 2022",
        "Rajbhandari et al. 2020",
    ] {
        assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
    }
    assert_eq!(out.status.code(), Some(1), "does not fit: exit 1");
}

#[test]
fn json_gives_the_same_numbers() {
    let text = stdout(&run(ACCEPTANCE));
    let mut args = ACCEPTANCE.to_vec();
    args.push("--json");
    let out = run(&args);
    let json = stdout(&out);
    assert!(json.starts_with('{') && json.trim_end().ends_with('}'), "{json}");
    let peak = json_number(&json, "peak_bytes");
    let shown = format!("peak per GPU{}", "");
    let line = text.lines().find(|l| l.trim_start().starts_with(&shown)).unwrap();
    let gib: f64 = line.split_whitespace().nth(3).unwrap().parse().unwrap();
    assert!(
        (peak as f64 / (1u64 << 30) as f64 - gib).abs() < 0.006,
        "{peak} vs {line}"
    );
    let micro = json_number(&json, "micro_batch");
    assert_eq!(micro, 4);
    let paste = text
        .lines()
        .skip_while(|l| !l.starts_with("ready to paste"))
        .nth(1)
        .unwrap()
        .trim()
        .to_string();
    let quota = paste.split_whitespace().next().unwrap();
    let batch = paste.split_whitespace().nth(1).unwrap();
    assert!(json.contains(&format!("\"gpu_mem_quota\":\"{quota}\"")), "{json}");
    assert!(json.contains(&format!("\"gpu_mem_batch\":\"{batch}\"")), "{json}");
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn fits_exits_zero() {
    let out = run(&[
        "--model",
        "gpt2",
        "--micro-batch",
        "1",
        "--seq",
        "1024",
        "--quota",
        "80G",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).contains("fits ("));
}

#[test]
fn help_lists_every_option() {
    let out = run(&["--help"]);
    assert_eq!(out.status.code(), Some(0));
    let help = stdout(&out);
    for flag in [
        "--model",
        "--params",
        "--layers",
        "--hidden",
        "--heads",
        "--kv-heads",
        "--ffn",
        "--vocab",
        "--head",
        "--precision",
        "--optimizer",
        "--optimizer-impl",
        "--galore-rank",
        "--optimizer-in-backward",
        "--keep-grads",
        "--loss-impl",
        "--compile",
        "--activation-offload",
        "--micro-batch",
        "--seq",
        "--grad-accum",
        "--checkpointing",
        "--flash",
        "--no-flash",
        "--lora-rank",
        "--lora-targets",
        "--qlora",
        "--dp",
        "--tp",
        "--pp",
        "--sp",
        "--zero",
        "--fsdp",
        "--offload",
        "--framework",
        "--quota",
        "--cuda-context",
        "--json",
        "--arch",
        "--positions",
        "--untied",
        "--vocab-multiple",
        "--virtual-stages",
        "--no-loss-parallel",
        "--keep-shifted-logits",
        "--paged-optimizer",
        "selective-op",
        "llama-2-7b",
        "mistral-7b",
        "bert-base",
        "gpt2-xl",
        "llama-3.2-1b",
    ] {
        assert!(help.contains(flag), "help lacks {flag}");
    }
}

#[test]
fn command_line_errors() {
    let table: &[(&[&str], &str)] = &[
        (
            &["--model", "llama-9b"],
            "unknown model 'llama-9b'; known models: gpt2-small,",
        ),
        (
            &[
                "--layers", "32", "--hidden", "4096", "--heads", "48", "--vocab", "32000",
            ],
            "--heads 48 does not divide --hidden 4096",
        ),
        (
            &["--model", "llama-2-7b", "--tp", "3"],
            "--tp 3 does not divide --heads 32",
        ),
        (
            &["--model", "llama-2-7b", "--micro-batch", "0"],
            "--micro-batch must be at least 1",
        ),
        (
            &["--model", "llama-2-7b", "--kv-heads", "5"],
            "--kv-heads 5 does not divide --heads 32",
        ),
        (&["--layers", "32"], "missing: --hidden, --heads, --vocab"),
        (
            &["--model", "gpt2", "--precision", "fp4"],
            "invalid --precision 'fp4': use one of fp32, amp, mixed, bf16, fp8",
        ),
        (
            &["--model", "gpt2", "--quota", "40GB"],
            "invalid --quota '40GB': ambiguous suffix",
        ),
        (
            &["--model", "gpt2", "--zero", "2", "--fsdp"],
            "choose one way of sharding",
        ),
        (&["--model", "gpt2", "--qlora"], "--qlora needs --lora-rank"),
        (&["--model", "gpt2", "--params", "7B"], "not both"),
        (&["--params", "lots"], "invalid --params 'lots'"),
        (&["--params", "1e15"], "more than the planner accepts"),
        (&["--params", "7B", "--hidden", "4096"], "not both"),
        (
            &["--model", "gpt2", "--galore-rank", "8"],
            "--galore-rank needs --optimizer galore",
        ),
        (
            &["--model", "gpt2", "--loss-impl", "magic"],
            "invalid --loss-impl 'magic'",
        ),
        (
            &["--model", "gpt2", "--layers", "x"],
            "invalid --layers 'x': expected a whole number",
        ),
        (&["--model", "gpt2", "--bogus"], "unknown option --bogus"),
        (
            &["--model", "gpt2", "--arch", "gpt"],
            "--arch describes a custom shape",
        ),
        (&["--model", "gpt2", "--untied"], "--untied needs --arch gpt"),
        (
            &[
                "--layers", "4", "--hidden", "64", "--heads", "4", "--vocab", "100", "--arch", "bert",
            ],
            "invalid --arch 'bert'",
        ),
        (
            &["--model", "llama-2-7b", "--virtual-stages", "2"],
            "it needs --pp greater than 1",
        ),
        (
            &[
                "--model",
                "llama-2-7b",
                "--framework",
                "megatron",
                "--checkpointing",
                "selective-op",
            ],
            "selective-op is torchtitan's",
        ),
        (&["--model", "gpt2", "extra"], "unexpected argument 'extra'"),
    ];
    for (args, message) in table {
        let out = run(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = stderr(&out);
        assert!(err.contains(message), "{args:?}: {err}");
        assert!(stdout(&out).is_empty());
    }
}

#[test]
fn params_only_plans_model_states() {
    let out = run(&["--params", "7.5B", "--zero", "3", "--dp", "64"]);
    let text = stdout(&out);
    assert!(text.contains("activations not estimated"), "{text}");
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn params_with_layers_and_new_options() {
    let out = run(&["--params", "7.5B", "--layers", "75", "--zero", "3", "--dp", "64"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).contains("7500000000 parameters in 75 layers"));
    let out = run(&[
        "--model",
        "llama-3.2-3b",
        "--precision",
        "bf16",
        "--seq",
        "4096",
        "--micro-batch",
        "2",
        "--compile",
        "--loss-impl",
        "chunked",
        "--checkpointing",
        "full",
        "--optimizer-in-backward",
        "--activation-offload",
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let json = stdout(&out);
    for key in [
        "\"compile\":true",
        "\"activation_offload\":true",
        "\"optimizer_in_backward\":true",
        "\"loss_impl\":\"chunked\"",
        "recommended_quota_margin_bytes",
    ] {
        assert!(json.contains(key), "{key}: {json}");
    }
    let out = run(&[
        "--model",
        "llama-2-7b",
        "--optimizer",
        "galore",
        "--galore-rank",
        "256",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).contains("GaLore rank 256"));
}

#[test]
fn issue_29_options() {
    // A Megatron GPT-style 7B with an interleaved schedule: the chunks and the padded vocabulary
    // are in the output, the last stage holds the peak.
    let gpt = [
        "--arch",
        "gpt",
        "--untied",
        "--layers",
        "32",
        "--hidden",
        "4096",
        "--heads",
        "32",
        "--kv-heads",
        "8",
        "--vocab",
        "131073",
        "--positions",
        "8192",
        "--seq",
        "8192",
        "--framework",
        "megatron",
        "--pp",
        "4",
        "--dp",
        "2",
        "--zero",
        "1",
        "--grad-accum",
        "4",
        "--virtual-stages",
        "8",
    ];
    let out = run(&gpt);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    for expected in [
        "peak on the last of 4 pipeline stages",
        "8 chunks of 1 layer(s) x 29 chunk-micro-batches in flight (interleaved)",
        "interleaved pipeline schedule, 8 model chunks per stage",
        "vocabulary padded from 131073 to 131200 rows (a multiple of 128)",
    ] {
        assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
    }
    let json = stdout(&run(&[&gpt[..], &["--json"]].concat()));
    assert!(json.contains("\"virtual_stages\":8"), "{json}");
    // Without interleaving the JSON has no virtual_stages key (unchanged from earlier flags).
    assert!(!stdout(&run(&["--model", "gpt2", "--json"])).contains("virtual_stages"));

    // torchtitan's per-op checkpointing is on the ladder; Megatron's selective is not, with
    // fused attention (it saves nothing there).
    let out = run(&[
        "--model",
        "llama-3.1-8b",
        "--fsdp",
        "--dp",
        "8",
        "--micro-batch",
        "2",
        "--seq",
        "8192",
        "--quota",
        "80G",
    ]);
    let text = stdout(&out);
    assert!(text.contains("--checkpointing selective-op"), "{text}");
    assert!(!text.contains("--checkpointing selective "), "{text}");

    // Without loss parallelism every tensor-parallel rank holds the whole vocabulary's logits.
    // A fused step and 8 x 4096 tokens, so that the loss phase holds the peak.
    let tp = [
        "--model",
        "llama-2-7b",
        "--tp",
        "4",
        "--sp",
        "--micro-batch",
        "8",
        "--seq",
        "4096",
        "--optimizer-impl",
        "fused",
        "--json",
    ];
    let sharded = stdout(&run(&tp));
    let gathered = stdout(&run(&[&tp[..], &["--no-loss-parallel"]].concat()));
    assert!(
        gathered.contains("all-gathered over tp 4 (no loss parallel)"),
        "{gathered}"
    );
    assert!(gathered.contains("\"loss_parallel\":false"), "{gathered}");
    assert!(!sharded.contains("loss_parallel"), "{sharded}");
    assert!(json_number(&gathered, "peak_bytes") > json_number(&sharded, "peak_bytes"));
    let paged = stdout(&run(&[
        "--model",
        "llama-2-7b",
        "--lora-rank",
        "64",
        "--qlora",
        "--paged-optimizer",
        "--json",
    ]));
    assert!(paged.contains("\"paged_optimizer\":true"), "{paged}");
    assert!(paged.contains("\"name\":\"paged_optimizer_states\""), "{paged}");
    let kept = stdout(&run(&["--model", "llama-2-7b", "--keep-shifted-logits"]));
    assert!(
        kept.contains("fp32 shifted logits kept through the backward"),
        "{kept}"
    );
    let out = run(&[
        "--model",
        "llama-2-7b",
        "--loss-impl",
        "chunked",
        "--keep-shifted-logits",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let out = run(&[
        "--model",
        "llama-2-7b",
        "--framework",
        "megatron",
        "--no-loss-parallel",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("always vocab-parallel"), "{}", stderr(&out));
}
