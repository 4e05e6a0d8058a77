//! Raw bindings to `<slurm/spank.h>`, generated at build time (see build.rs).
#![allow(non_upper_case_globals, non_camel_case_types, non_snake_case, dead_code)]

include!(concat!(env!("OUT_DIR"), "/spank_bindings.rs"));
