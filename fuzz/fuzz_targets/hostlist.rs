//! Slurm hostlist expressions (`gpu[01-04,07],login1`), as squeue's NodeList and the JSON `nodes`
//! field print a job's nodes, expanded to node names.
//!
//! Never panics. An expansion is bounded (at most `MAX_NODES` names, and `MAX_BYTES` bytes of
//! them); every name is non-empty and holds no comma or bracket, so it expands to itself alone;
//! and the names joined with commas (the plain hostlist of the same nodes; there is no compressor
//! to try) expand back to the same list. An expression without brackets is its comma-separated
//! items.
#![no_main]

use gmq_core::slurm_text::hostlist::{expand, MAX_BYTES, MAX_NODES};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|expression: &str| {
    let Ok(names) = expand(expression) else {
        return;
    };
    assert!(!names.is_empty(), "{expression:?}");
    assert!(
        names.len() <= MAX_NODES,
        "{expression:?} gave {} names",
        names.len()
    );
    let bytes: usize = names.iter().map(String::len).sum();
    assert!(bytes <= MAX_BYTES, "{expression:?} gave {bytes} bytes of names");
    if !expression.contains(['[', ']']) {
        assert_eq!(names, expression.split(',').collect::<Vec<_>>(), "{expression:?}");
    }
    // Re-expanding is linear in the names: keep the fuzzer fast on the big ones.
    for name in names.iter().take(64) {
        assert!(
            !name.is_empty() && !name.contains([',', '[', ']']),
            "{expression:?} gave {name:?}"
        );
        assert_eq!(
            expand(name).as_deref(),
            Ok(&[name.clone()][..]),
            "{expression:?} gave {name:?}"
        );
    }
    if names.len() <= 4096 {
        let joined = names.join(",");
        assert_eq!(
            expand(&joined).as_ref(),
            Ok(&names),
            "{expression:?} joined to {joined:?}"
        );
    }
});
