//! A scenario-driven stand-in for `libnvidia-ml.so`, so that the watchdog's whole NVML path runs on
//! machines without a GPU. Load it with `Nvml::builder().lib_path(path).init()`.
//!
//! The scenario lives in `$FAKE_NVML_DIR` (default [`call::DEFAULT_DIR`], `/var/lib/fake-nvml`) and
//! is re-read on every call: `devices.toml` (the GPUs), `procs/<gpu>/<pid>` (what each process
//! "allocated"), `faults.toml` (what should go wrong). Processes are looked up in `$FAKE_NVML_PROC`
//! (default `/proc`). See README.md for the file formats.
//!
//! No threads, no panics across the C ABI, no symlinks followed in job-writable directories.

mod cache;
pub mod call;
pub mod claims;
pub mod codes;
mod exports;
mod growth;
pub mod handle;
pub mod limits;
pub mod model;
pub mod scenario;
pub mod size;
mod transient;
mod warn;

pub use exports::MEMORY_V2_VERSION;
