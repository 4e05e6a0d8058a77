//! Per-cgroup hard limits, as MPS v3 memory partitioning sets them (`nvmlDeviceSetMemoryLimits_v1`,
//! driver r615 / CUDA 13.4): a namespace (the full path of a cgroup directory), a soft and a hard
//! limit in bytes, per GPU. An allocation that would take the namespace's processes past the hard
//! limit fails, for that process alone; inside the namespace the GPU's memory reads as the hard
//! limit. Pure: the file format and the rules; `exports` does the I/O.
//!
//! `$FAKE_NVML_DIR/limits/<gpu-index>`, written by the library (as root, the setter's privilege):
//! one line per namespace, `<soft> <hard> <namespace>`.

use std::path::{Path, PathBuf};

/// Where cgroups are mounted: namespaces are full paths below it.
pub const CGROUP_ROOT: &str = "/sys/fs/cgroup";

/// `NVML_DEVICE_MEMORY_LIMIT_MAX`: a hard limit of this (with a soft limit of 0) clears the limits.
pub const LIMIT_MAX: u64 = u64::MAX;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limit {
    pub namespace: PathBuf,
    pub soft: u64,
    pub hard: u64,
}

/// The limits file's lines; malformed ones are skipped (the library writes it alone).
pub fn parse_limits(text: &str) -> Vec<Limit> {
    text.lines()
        .filter_map(|line| {
            let mut parts = line.splitn(3, ' ');
            let soft = parts.next()?.parse().ok()?;
            let hard = parts.next()?.parse().ok()?;
            let namespace = PathBuf::from(parts.next()?);
            namespace.is_absolute().then_some(Limit {
                namespace,
                soft,
                hard,
            })
        })
        .collect()
}

pub fn render_limits(limits: &[Limit]) -> String {
    limits
        .iter()
        .map(|l| format!("{} {} {}\n", l.soft, l.hard, l.namespace.display()))
        .collect()
}

/// Sets (or, with soft 0 and hard [`LIMIT_MAX`], clears) the limits of one namespace.
pub fn apply(limits: &mut Vec<Limit>, new: Limit) {
    limits.retain(|l| l.namespace != new.namespace);
    if !(new.soft == 0 && new.hard == LIMIT_MAX) {
        limits.push(new);
    }
    limits.sort_by(|a, b| a.namespace.cmp(&b.namespace));
}

/// Whether a namespace path is one the setter accepts: absolute, not `/`, every component a plain
/// name (no empty, `.` or `..` component), no newline.
pub fn valid_namespace(namespace: &str) -> bool {
    let Some(rest) = namespace.strip_prefix('/') else {
        return false;
    };
    !rest.is_empty()
        && !namespace.contains('\n')
        && rest
            .split('/')
            .all(|part| !part.is_empty() && part != "." && part != "..")
}

/// The cgroup directories a process is in, from its `/proc/PID/cgroup` text, as full paths under
/// `cgroup_root`: v2 lines (`0::/path`) under the root itself and under `unified/` (hybrid hosts),
/// v1 lines under their controllers' mount (`4:freezer:/path` → `<root>/freezer/path`).
pub fn cgroup_dirs(cgroup_text: &str, cgroup_root: &Path) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    for line in cgroup_text.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        let relative = path.trim_start_matches('/');
        if controllers.is_empty() {
            dirs.push(cgroup_root.join(relative));
            dirs.push(cgroup_root.join("unified").join(relative));
        } else {
            let mount = controllers.strip_prefix("name=").unwrap_or(controllers);
            dirs.push(cgroup_root.join(mount).join(relative));
        }
    }
    dirs
}

/// The limit that holds for a process in `dirs`: the innermost namespace containing one of them.
pub fn limit_for<'a>(limits: &'a [Limit], dirs: &[PathBuf]) -> Option<&'a Limit> {
    limits
        .iter()
        .filter(|l| dirs.iter().any(|d| d.starts_with(&l.namespace)))
        .max_by_key(|l| l.namespace.components().count())
}

/// Whether a claim of `bytes` fits: what the namespace's other processes hold plus `bytes`, at
/// most the hard limit.
pub fn fits(limit: &Limit, others_in_namespace: u64, bytes: u64) -> bool {
    others_in_namespace.saturating_add(bytes) <= limit.hard
}

#[cfg(test)]
mod tests {
    use super::*;

    const G: u64 = 1 << 30;

    #[test]
    fn set_replace_clear_and_round_trip() {
        let mut limits = Vec::new();
        let ns = PathBuf::from("/sys/fs/cgroup/freezer/slurm_vm/uid_2001/job_7");
        apply(
            &mut limits,
            Limit {
                namespace: ns.clone(),
                soft: 16 * G,
                hard: 16 * G,
            },
        );
        apply(
            &mut limits,
            Limit {
                namespace: ns.clone(),
                soft: 8 * G,
                hard: 12 * G,
            },
        );
        assert_eq!(limits.len(), 1);
        assert_eq!(parse_limits(&render_limits(&limits)), limits);
        apply(
            &mut limits,
            Limit {
                namespace: ns,
                soft: 0,
                hard: LIMIT_MAX,
            },
        );
        assert!(limits.is_empty());
        assert!(parse_limits("x 1 /a\n1 2 relative\n").is_empty());
    }

    #[test]
    fn a_process_is_held_to_its_innermost_namespace() {
        let root = Path::new("/sys/fs/cgroup");
        let v1 = "12:freezer:/slurm_vm/uid_2001/job_7/step_batch/task_0\n3:memory:/slurm_vm/uid_2001/job_7\n";
        let dirs = cgroup_dirs(v1, root);
        assert!(dirs.contains(&PathBuf::from(
            "/sys/fs/cgroup/freezer/slurm_vm/uid_2001/job_7/step_batch/task_0"
        )));
        let job = Limit {
            namespace: "/sys/fs/cgroup/freezer/slurm_vm/uid_2001/job_7".into(),
            soft: 0,
            hard: 16 * G,
        };
        let other = Limit {
            namespace: "/sys/fs/cgroup/freezer/slurm_vm/uid_2001/job_8".into(),
            soft: 0,
            hard: G,
        };
        let limits = vec![job.clone(), other];
        assert_eq!(limit_for(&limits, &dirs), Some(&job));
        // job_70 is not below job_7: whole components.
        let dirs70 = cgroup_dirs("12:freezer:/slurm_vm/uid_2001/job_70\n", root);
        assert_eq!(limit_for(&limits, &dirs70), None);
        let v2 = cgroup_dirs("0::/system.slice/slurmstepd.scope/job_7/step_0\n", root);
        assert!(v2.contains(&PathBuf::from(
            "/sys/fs/cgroup/system.slice/slurmstepd.scope/job_7/step_0"
        )));
        assert!(fits(&job, 10 * G, 6 * G) && !fits(&job, 10 * G, 6 * G + 1));
    }

    #[test]
    fn namespaces_must_be_plain_absolute_paths() {
        assert!(valid_namespace("/sys/fs/cgroup/job_7"));
        for bad in [
            "",
            "/",
            "relative/x",
            "/sys/../etc",
            "/sys/./x",
            "/a\nb",
            "/a//b",
            "/a/",
        ] {
            assert!(!valid_namespace(bad), "{bad:?}");
        }
    }
}
