//! An entry of the node's preemption registry (`<runtime_dir>/registry/<job_id>`, JSON): what each
//! watchdog reads of the others' jobs when it picks a victim.
//!
//! Never panics. An entry read has a plain user name and GPU UUIDs safe in a file name (what
//! `Registry::write` insists on); it renders to one line of JSON that reads back equal and
//! renders the same again.
#![no_main]

use gmq_node::preempt_registry::RegistryEntry;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    let Ok(entry) = RegistryEntry::parse(text) else {
        return;
    };
    assert!(!entry.user.is_empty() && !entry.user.chars().any(|c| c.is_whitespace() || c.is_control()));
    for gpu in &entry.gpus {
        assert!(!gpu.uuid.is_empty() && gpu.uuid.len() <= 96, "{text:?}");
        assert!(
            gpu.uuid.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'),
            "{text:?}"
        );
        assert!(entry.uses_gpu(&gpu.uuid));
    }
    let rendered = entry.render();
    assert!(
        rendered.ends_with('\n') && rendered.matches('\n').count() == 1,
        "{rendered:?}"
    );
    let again = RegistryEntry::parse(&rendered).unwrap_or_else(|e| panic!("{text:?} rendered to {rendered:?}: {e}"));
    assert_eq!(again, entry, "{text:?} rendered to {rendered:?}");
    assert_eq!(again.render(), rendered);
});
