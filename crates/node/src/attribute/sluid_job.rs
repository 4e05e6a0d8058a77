//! The job number behind a SLUID-named cgroup (cgroup/v2 on Slurm 26.05), from the kernel and
//! root: a job's SLUID holds no job number, but each of its steps' slurmstepd sits in the step's
//! `slurm` cgroup (`step_<name>/slurm`, root's: `cgroup_p_step_create` in cgroup_v2.c), and names
//! its job in its process title (`slurmstepd: [900001.batch]`, `stepd.rs`).
//!
//! Each piece is a fact: only root writes a Slurm-made `cgroup.procs`, the slurmstepd must be
//! owned by root (anyone can name a process `slurmstepd`), and its own `/proc/PID/cgroup` is read
//! after its title, so a pid reused meanwhile by a process elsewhere is not taken.

use std::fs;
use std::path::Path;

use super::ancestry::is_root_stepd;
use super::cgroup::{lines, Hierarchy};
use super::procfs::{read_cgroup, read_cmdline, read_stat};
use super::stepd::parse_title;

/// The job whose cgroup is `job_dir` (`<v2 mount><job_path>`, `job_path` as `/proc/PID/cgroup`
/// writes it): the job number in the title of a root-owned slurmstepd in one of its steps' `slurm`
/// cgroups that is still in that cgroup. `None` where no step has such a slurmstepd (between a
/// job's steps without `PrologFlags=Contain`, or the job is ending).
pub(crate) fn job_of_sluid_dir(proc_root: &Path, job_dir: &Path, job_path: &str) -> Option<u32> {
    let steps = fs::read_dir(job_dir).ok()?;
    for step in steps.filter_map(Result::ok) {
        let name = step.file_name();
        let is_step_dir =
            name.to_string_lossy().starts_with("step_") && step.file_type().is_ok_and(|t| t.is_dir());
        if !is_step_dir {
            continue;
        }
        let Ok(procs) = fs::read_to_string(step.path().join("slurm/cgroup.procs")) else {
            continue;
        };
        let in_cgroup = format!("{job_path}/{}/slurm", name.to_string_lossy());
        for pid in procs.lines().filter_map(|line| line.trim().parse::<u32>().ok()) {
            if let Some(job_id) = stepd_job(proc_root, pid, &in_cgroup) {
                return Some(job_id);
            }
        }
    }
    None
}

/// The job named by the title of `pid`, a root-owned slurmstepd whose v2 cgroup is `in_cgroup`.
fn stepd_job(proc_root: &Path, pid: u32, in_cgroup: &str) -> Option<u32> {
    let process = read_stat(proc_root, pid)?;
    if !is_root_stepd(proc_root, &process) {
        return None;
    }
    let (job_id, _) = parse_title(&read_cmdline(proc_root, pid)?)?;
    let cgroups = read_cgroup(proc_root, pid)?;
    let still_there = lines(&cgroups).any(|line| line.hierarchy == Hierarchy::V2 && line.path == in_cgroup);
    // Read last: the same process all along (pid and start time), not one that reused the pid.
    let same = read_stat(proc_root, pid).is_some_and(|now| now.start_time == process.start_time);
    (still_there && same).then_some(job_id)
}
