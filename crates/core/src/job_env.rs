//! The variables the plugin writes into the environment of the batch script and of every task.

use crate::size::ByteSize;

/// The job's quota per GPU, in bytes.
const QUOTA_BYTES: &str = "GPU_MEM_QUOTA_BYTES";
/// The same quota in Slurm's normalised form (`40G`).
const QUOTA_HUMAN: &str = "GPU_MEM_QUOTA";
/// Where the job's watchdog writes its status (JSON, see `watchdog::status`), readable by the job.
pub(crate) const STATUS_FILE: &str = "GPU_MEM_QUOTA_STATUS_FILE";

/// Every variable the plugin writes to tell a job its quota: those it did not write for this job
/// are removed (a job submitted from inside another job inherits them).
pub(crate) const QUOTA_VARS: [&str; 3] = [QUOTA_BYTES, QUOTA_HUMAN, STATUS_FILE];

/// The variables that tell a job its quota.
pub(crate) fn quota_vars(quota: ByteSize) -> Vec<(&'static str, String)> {
    vec![
        (QUOTA_BYTES, quota.bytes().to_string()),
        (QUOTA_HUMAN, quota.to_string()),
    ]
}

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
    use crate::size::parse_size;

    #[test]
    fn quota_vars_for_40g() {
        let vars = quota_vars(parse_size("40960M").unwrap());
        assert_eq!(
            vars,
            vec![
                ("GPU_MEM_QUOTA_BYTES", "42949672960".to_string()),
                ("GPU_MEM_QUOTA", "40G".to_string())
            ]
        );
    }

    #[test]
    fn gpu_lists() {
        assert_eq!(parse_gpu_list("0,2").unwrap(), vec!["0", "2"]);
        assert_eq!(parse_gpu_list("GPU-1234-ab").unwrap(), vec!["GPU-1234-ab"]);
        assert_eq!(parse_gpu_list("").unwrap(), Vec::<String>::new());
        assert!(parse_gpu_list("0,x").unwrap_err().contains("'x'"));
    }
}
