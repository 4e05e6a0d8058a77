//! `--gpu-mem-quota=SIZE` and `--gpu-mem-batch=MICRO[xACCUM]`, as a user types them.
//!
//! Never panics; whatever is accepted is in range and prints (Display) to its canonical form,
//! which parses back to the same value; the option parser agrees with the size parser it wraps.
#![no_main]

use gmq_core::batch::{parse_batch_option, MAX_BATCH_FACTOR};
use gmq_core::request::parse_quota_option;
use gmq_core::size::{parse_size, MAX_SIZE};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    let size = parse_size(text);
    match &size {
        Ok(s) => {
            assert!(s.bytes() > 0 && *s <= MAX_SIZE, "{text:?} gave {s:?}");
            assert_eq!(parse_size(&s.to_string()), size, "{text:?} printed as {s}");
        }
        Err(e) => drop(e.to_string()),
    }

    match parse_quota_option(text) {
        Ok(s) => assert_eq!(Ok(s), size, "{text:?}"),
        Err(e) => {
            assert_eq!(Err(e.reason.clone()), size, "{text:?}");
            drop(e.to_string());
        }
    }

    match parse_batch_option(text) {
        Ok(g) => {
            let factors = 1..=MAX_BATCH_FACTOR;
            assert!(
                factors.contains(&g.micro) && factors.contains(&g.accum),
                "{text:?} gave {g:?}"
            );
            assert_eq!(g.effective(), u64::from(g.micro) * u64::from(g.accum));
            assert_eq!(
                parse_batch_option(&g.to_string()),
                Ok(g),
                "{text:?} printed as {g}"
            );
        }
        Err(e) => drop(e.to_string()),
    }
});
