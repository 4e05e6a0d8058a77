//! Our record inside a job's AdminComment, as `scontrol show job` hands it back (any text: other
//! tools and users write there too).
//!
//! Never panics; a record that is read renders to a segment within the size bound, which reads
//! back, renders to the same text again and keeps the highest peak.
#![no_main]

use gmq_core::record::{self, MAX_RECORD_BYTES};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|admin_comment: &str| {
    match record::parse(admin_comment) {
        Ok(Some(found)) => {
            let text = record::render(&found);
            assert!(
                text.len() <= MAX_RECORD_BYTES,
                "{admin_comment:?} rendered to {} bytes",
                text.len()
            );
            let again = record::parse(&text)
                .unwrap_or_else(|e| panic!("{admin_comment:?} rendered to {text:?}, which fails: {e}"))
                .unwrap_or_else(|| panic!("{admin_comment:?} rendered to {text:?}, which is not a record"));
            assert_eq!(record::render(&again), text, "{admin_comment:?}");
            // Folding drops detail, never the highest peak.
            assert_eq!(again.totals().peak, found.totals().peak, "{admin_comment:?}");
        }
        Ok(None) => {}
        Err(e) => drop(e.to_string()),
    }
});
