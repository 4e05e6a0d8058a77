//! How the plugin starts a job's watchdog, and what it tells it: the watchdog's public interface.
//!
//! - `params`: the watchdog's command line, written by the plugin and read by `gpu-mem-quota
//!   watchdog` (one definition for both sides).
//! - `spawn`: starting the watchdog from inside slurmstepd as a detached daemon.
//!
//! The plugin (`spank`) and the watchdog (`watchdog`, `cli`) both depend on this module; neither
//! depends on the other.

pub(crate) mod params;
pub mod spawn;

pub use params::Params;

/// A job's GPU as Slurm names it: `3` (gres index, the minor number of /dev/nvidia3) or a UUID.
pub fn parse_gpu_list(text: &str) -> Result<Vec<String>, String> {
    let list: Vec<String> = text
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect();
    for gpu in &list {
        let uuid = gpu.starts_with("GPU-") || gpu.starts_with("MIG-");
        if !uuid && gpu.parse::<u32>().is_err() {
            return Err(format!("'{gpu}' is neither a GPU index nor a GPU UUID"));
        }
    }
    Ok(list)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpu_lists() {
        assert_eq!(parse_gpu_list("0,2").unwrap(), vec!["0", "2"]);
        assert_eq!(parse_gpu_list("GPU-1234-ab").unwrap(), vec!["GPU-1234-ab"]);
        assert_eq!(parse_gpu_list("").unwrap(), Vec::<String>::new());
        assert!(parse_gpu_list("0,x").unwrap_err().contains("'x'"));
    }
}
