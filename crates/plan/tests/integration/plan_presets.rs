//! Presets: every one loads, and the parameter count derived from its shape equals the count the
//! published checkpoint reports (the `params` field, copied from the model card/config).

use gmq_plan::presets::{all, find};

#[test]
fn every_preset_counts_its_published_parameters() {
    let presets = all().unwrap();
    assert!(presets.len() >= 14);
    for p in presets {
        assert_eq!(p.shape().params(), p.params, "{}", p.name);
    }
}

#[test]
fn well_known_counts() {
    let table: &[(&str, u64, &str)] = &[
        ("gpt2", 124_439_808, "0.12B"),
        ("gpt2-medium", 354_823_168, "0.35B"),
        ("gpt2-large", 774_030_080, "0.77B"),
        ("gpt2-xl", 1_557_611_200, "1.56B"),
        ("bert-base-uncased", 109_482_240, "0.11B"),
        ("bert-large", 335_141_888, "0.34B"),
        ("llama-2-7b", 6_738_415_616, "6.74B"),
        ("llama-2-13b", 13_015_864_320, "13.02B"),
        ("llama-2-70b", 68_976_648_192, "68.98B"),
        ("llama-3-8b", 8_030_261_248, "8.03B"),
        ("llama-3-70b", 70_553_706_496, "70.55B"),
        ("llama-3.2-1b", 1_235_814_400, "1.24B"),
        ("llama-3.2-3b", 3_212_749_824, "3.21B"),
        ("mistral-7b", 7_241_732_096, "7.24B"),
    ];
    for &(name, params, short) in table {
        let shape = find(name).unwrap().shape();
        assert_eq!(shape.params(), params, "{name}");
        assert_eq!(format!("{:.2}B", params as f64 / 1e9), short);
    }
}

#[test]
fn grouped_query_attention_shrinks_key_value_projections() {
    // Mistral 7B is Llama-2 7B's shape with 8 KV heads and a wider MLP: its K and V are 4x narrower.
    let mistral = find("mistral-7b").unwrap().shape();
    assert_eq!(mistral.kv_dim(), 1024);
    let mut mha = mistral.clone();
    mha.kv_heads = mha.heads;
    let saved_per_layer = 2 * 4096 * (4096 - 1024);
    assert_eq!(mha.params() - mistral.params(), saved_per_layer * 32);
}

#[test]
fn names_are_case_insensitive_and_unknown_names_list_the_known() {
    assert_eq!(find("LLaMA-2-7B").unwrap().name, "llama-2-7b");
    let err = find("llama-9b").unwrap_err();
    assert!(
        err.starts_with("unknown model 'llama-9b'; known models: gpt2-small, "),
        "{err}"
    );
    assert!(err.contains("mistral-7b"), "{err}");
}
