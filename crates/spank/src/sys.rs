//! Raw bindings to `<slurm/spank.h>`, generated at build time (see build.rs).
// bindgen writes every item `pub` and every unsafe call without a SAFETY comment.
#![allow(non_upper_case_globals, non_camel_case_types, non_snake_case, dead_code)]
#![allow(unreachable_pub, clippy::undocumented_unsafe_blocks, unsafe_op_in_unsafe_fn)]

include!(concat!(env!("OUT_DIR"), "/spank_bindings.rs"));
