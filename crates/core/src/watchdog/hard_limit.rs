//! Hard limits where the driver offers them: MPS v3 memory partitioning (driver r615 / CUDA 13.4,
//! cgroup v2) lets root cap the GPU memory of a cgroup, per GPU, with
//! `nvmlDeviceSetMemoryLimits_v1`. This is the rule over the driver's answers: in force only when
//! every GPU of the job took it, and the log line that says which path enforces the quota. The
//! call itself is the watchdog's edge (`gpu-mem-quota`'s `watchdog::hard_limit`).

use std::path::{Path, PathBuf};

use crate::size::ByteSize;

/// The setter's name in libnvidia-ml.
pub const SET_MEMORY_LIMITS: &str = "nvmlDeviceSetMemoryLimits_v1";

/// `NVML_DEVICE_MEMORY_LIMIT_MAX`: with a soft limit of 0, "no limit".
pub const LIMIT_MAX: u64 = u64::MAX;

/// NVML return codes the outcome depends on.
pub const NVML_SUCCESS: i32 = 0;
pub(crate) const NVML_ERROR_NOT_SUPPORTED: i32 = 3;
pub(crate) const NVML_ERROR_FUNCTION_NOT_FOUND: i32 = 13;

/// The hard limit in force for the job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InForce {
    /// The job's cgroup directory, the limit's namespace.
    pub namespace: PathBuf,
    /// The job's GPUs (node indices) it is set on: all of them.
    pub(crate) gpus: Vec<u32>,
    /// Soft and hard limit: the quota.
    pub bytes: u64,
}

/// What setting the hard limit came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    InForce(InForce),
    /// The driver does not offer it (no such function, or it says not supported): the watchdog
    /// alone enforces the quota, as before.
    NotOffered(String),
    /// It is offered but could not be set (no job cgroup, a refusal): the watchdog alone.
    Failed(String),
    /// The policy switched it off (`[enforcement] hard_limit = false`): not asked for, so the
    /// driver is not even looked at; the watchdog alone.
    SwitchedOff,
}

impl Outcome {
    /// The log line that says which path is in force.
    pub fn log_line(&self) -> String {
        match self {
            Outcome::InForce(f) => format!(
                "hard limit in force: {SET_MEMORY_LIMITS} caps cgroup {} at {} on GPU(s) {} (the \
                 watchdog keeps the record and stays the fallback)",
                f.namespace.display(),
                ByteSize::from_bytes(f.bytes),
                f.gpus.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
            ),
            Outcome::NotOffered(why) => {
                format!("no hard limit ({why}): the watchdog alone enforces the quota")
            }
            Outcome::Failed(why) => {
                format!("no hard limit: {why}; the watchdog alone enforces the quota")
            }
            Outcome::SwitchedOff => "no hard limit (switched off by the policy: [enforcement] \
                hard_limit = false): the watchdog alone enforces the quota"
                .to_string(),
        }
    }
}

/// What one GPU's call answered, as plain data: the rule below decides from these.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Answer {
    pub gpu: u32,
    pub code: i32,
}

/// The outcome of setting the limit on every GPU of the job.
pub fn outcome(namespace: &Path, bytes: u64, answers: &[Answer]) -> Outcome {
    if answers.is_empty() {
        return Outcome::Failed("the job has no GPU here to set it on".into());
    }
    let refused: Vec<&Answer> = answers.iter().filter(|a| a.code != NVML_SUCCESS).collect();
    match refused.first() {
        None => Outcome::InForce(InForce {
            namespace: namespace.to_path_buf(),
            gpus: answers.iter().map(|a| a.gpu).collect(),
            bytes,
        }),
        Some(a) if matches!(a.code, NVML_ERROR_NOT_SUPPORTED | NVML_ERROR_FUNCTION_NOT_FOUND) => {
            Outcome::NotOffered(format!(
                "the driver answers {SET_MEMORY_LIMITS} on GPU {} with NVML error {} (not supported)",
                a.gpu, a.code
            ))
        }
        Some(a) => Outcome::Failed(format!(
            "{SET_MEMORY_LIMITS} on GPU {} failed with NVML error {}",
            a.gpu, a.code
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const G: u64 = 1 << 30;

    #[test]
    fn in_force_only_when_every_gpu_took_it() {
        let ns = Path::new("/sys/fs/cgroup/system.slice/slurmstepd.scope/job_7");
        let ok = |gpu| Answer { gpu, code: 0 };
        let Outcome::InForce(f) = outcome(ns, 16 * G, &[ok(0), ok(2)]) else {
            panic!("not in force");
        };
        assert_eq!((f.gpus, f.bytes), (vec![0, 2], 16 * G));
        let old = outcome(ns, 16 * G, &[ok(0), Answer { gpu: 2, code: 13 }]);
        assert!(
            matches!(old, Outcome::NotOffered(ref why) if why.contains("GPU 2")),
            "{old:?}"
        );
        let refused = outcome(ns, 16 * G, &[Answer { gpu: 0, code: 4 }]);
        assert!(
            matches!(refused, Outcome::Failed(ref why) if why.contains("error 4")),
            "{refused:?}"
        );
        assert!(matches!(outcome(ns, 16 * G, &[]), Outcome::Failed(_)));
    }

    #[test]
    fn the_log_says_which_path_is_in_force() {
        let ns = Path::new("/sys/fs/cgroup/job_7");
        let line = outcome(ns, 16 * G, &[Answer { gpu: 0, code: 0 }]).log_line();
        assert!(line.starts_with("hard limit in force: nvmlDeviceSetMemoryLimits_v1 caps cgroup /sys/fs/cgroup/job_7 at 16G on GPU(s) 0"), "{line}");
        let line = Outcome::NotOffered("x".into()).log_line();
        assert!(line.ends_with("the watchdog alone enforces the quota"), "{line}");
        assert_eq!(
            Outcome::SwitchedOff.log_line(),
            "no hard limit (switched off by the policy: [enforcement] hard_limit = false): the \
             watchdog alone enforces the quota"
        );
    }
}
