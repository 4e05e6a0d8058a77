//! A job's cgroup directories on this node, whether the job still runs anything here, and what it
//! left behind.
//!
//! The watchdog starts from the job prolog, before Slurm has made the job's cgroup, so it finds the
//! directory by the job's id and uid where Slurm makes it ([`find_job_dir`]), and later asks
//! whether any step still has processes: when none has, the job may have ended on this node. What
//! the job leaves in its cgroups is found by the processes' own claims (`leftover.rs`), not here.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use super::cgroup::{
    is_stepd_scope, is_stepd_slice, lines, membership, slurm_cgroup, Hierarchy, JobKey, Membership,
};
use super::procfs::read_cgroup;
use super::sluid_job::job_of_sluid_dir;
use gmq_core::sluid::Sluid;

/// Who a job is on this node, as its cgroups are named: the facts slurmd gave the job prolog and
/// epilog (the job id and user from the credential, the SLUID from the step id).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobOnNode {
    pub job_id: u32,
    pub uid: u32,
    /// The job's SLUID (25.11 on): its cgroup/v2 directory's name on 26.05.
    pub sluid: Option<Sluid>,
}

/// A job's own cgroup directory in one mounted hierarchy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobCgroup {
    pub job_id: u32,
    /// `<cgroup_root>/freezer/slurm_<node>/uid_<uid>/job_<id>` (v1) or
    /// `<v2 mount>/system.slice/slurmstepd.scope/job_<id>` (v2; `.../<SLUID>` on 26.05).
    pub dir: PathBuf,
}

/// How deep below a step directory [`job_active_on_node`] looks for processes (v1: `step_0/task_0`;
/// v2: `step_0/user/task_0`, `step_0/slurm`): a presence hint only, never what is killed.
const MAX_DEPTH_BELOW_STEP: usize = 4;

/// The cgroup directory of the job `pid` belongs to, in the hierarchy Slurm tracks jobs with:
/// v1 `freezer` (proctrack/cgroup), else the v2 hierarchy, else any other v1 controller that
/// holds the job. `None` when `pid` is gone, is in no job's cgroup (or in two jobs'), or the
/// directory is not under `cgroup_root`.
///
/// `cgroup_root` is where cgroups are mounted (`/sys/fs/cgroup`): v1 controllers are directories
/// in it, and the v2 hierarchy is `cgroup_root` itself on a pure v2 host, `cgroup_root/unified`
/// on a hybrid one. A few small reads; call it once at start.
pub fn job_cgroup(proc_root: &Path, cgroup_root: &Path, pid: u32) -> Option<JobCgroup> {
    let text = read_cgroup(proc_root, pid)?;
    let Membership::Job { job, .. } = membership(&text) else {
        return None;
    };
    let mut candidates: Vec<(u8, PathBuf)> = lines(&text)
        .filter_map(|line| {
            let cgroup = slurm_cgroup(&line)?;
            let (preference, mount) = match line.hierarchy {
                Hierarchy::V1("freezer") => (0, v1_mount(cgroup_root, "freezer")?),
                Hierarchy::V2 => (1, v2_mount(cgroup_root)?),
                Hierarchy::V1(controllers) => (2, v1_mount(cgroup_root, controllers)?),
            };
            Some((preference, mount.join(cgroup.job_path.trim_start_matches('/'))))
        })
        .filter(|(_, dir)| dir.is_dir())
        .collect();
    candidates.sort();
    let (_, dir) = candidates.into_iter().next()?;
    let job_id = match job {
        JobKey::Id(job_id) => job_id,
        JobKey::Sluid(_) => {
            let job_path = lines(&text)
                .filter(|line| line.hierarchy == Hierarchy::V2)
                .find_map(|line| slurm_cgroup(&line))?
                .job_path;
            job_of_sluid_dir(proc_root, &dir, job_path)?
        }
    };
    Some(JobCgroup { job_id, dir })
}

/// The mount of a v1 hierarchy: named by its controller list (`cpu,cpuacct`), or by one of its
/// controllers (distributions link `cpu` → `cpu,cpuacct`); `name=systemd` is mounted as `systemd`.
pub(crate) fn v1_mount(cgroup_root: &Path, controllers: &str) -> Option<PathBuf> {
    let whole = controllers.trim_start_matches("name=");
    std::iter::once(whole)
        .chain(controllers.split(',').map(|c| c.trim_start_matches("name=")))
        .map(|name| cgroup_root.join(name))
        .find(|dir| dir.is_dir())
}

/// The v2 hierarchy: the directory with a `cgroup.controllers` file (`cgroup_root` on a pure v2
/// host, `cgroup_root/unified` on a hybrid one).
pub fn v2_mount(cgroup_root: &Path) -> Option<PathBuf> {
    [cgroup_root.to_path_buf(), cgroup_root.join("unified")]
        .into_iter()
        .find(|dir| dir.join("cgroup.controllers").is_file())
}

/// Whether the job whose cgroup is `job_dir` still has a process in one of its steps (`step_*`
/// directories, at any depth below them) other than `ignore_pids` (the watchdog and its children,
/// where they live in a step, as on v2). `Ok(false)` once the job's directory is gone.
///
/// With `PrologFlags=Contain` the extern step holds a process for the job's whole life on the
/// node. Without it, a job started by salloc has no step between two sruns and reads as ended.
/// A few directory reads; cheap enough for every sample, but a few seconds apart is plenty.
pub fn job_active_on_node(job_dir: &Path, ignore_pids: &[u32]) -> io::Result<bool> {
    let entries = match fs::read_dir(job_dir) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        other => other?,
    };
    for entry in entries {
        let entry = entry?;
        let is_step = entry.file_name().to_string_lossy().starts_with("step_");
        if is_step && entry.file_type()?.is_dir() && has_processes(&entry.path(), ignore_pids, 0)? {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Whether `dir` or a cgroup below it lists a process not in `ignore_pids`. A directory that
/// vanishes meanwhile (its step ended) has none.
fn has_processes(dir: &Path, ignore_pids: &[u32], depth: usize) -> io::Result<bool> {
    match fs::read_to_string(dir.join("cgroup.procs")) {
        Ok(procs) => {
            let mut pids = procs.lines().filter_map(|line| line.trim().parse::<u32>().ok());
            if pids.any(|pid| !ignore_pids.contains(&pid)) {
                return Ok(true);
            }
        }
        Err(e) if vanished(&e) => {}
        Err(e) => return Err(e),
    }
    if depth >= MAX_DEPTH_BELOW_STEP {
        return Ok(false);
    }
    let entries = match fs::read_dir(dir) {
        Err(e) if vanished(&e) => return Ok(false),
        other => other?,
    };
    for entry in entries {
        let Ok(entry) = entry else { continue };
        if entry.file_type().is_ok_and(|t| t.is_dir())
            && has_processes(&entry.path(), ignore_pids, depth + 1)?
        {
            return Ok(true);
        }
    }
    Ok(false)
}

/// A cgroup removed while it is read: gone (`ENOENT`) or being torn down (`ENODEV`).
fn vanished(error: &io::Error) -> bool {
    error.kind() == io::ErrorKind::NotFound || error.raw_os_error() == Some(libc::ENODEV)
}

/// The job's cgroup directory where Slurm makes it, in the hierarchy Slurm tracks jobs with (v1
/// `freezer`, else v2, else another v1 controller): `<v1 mount>/slurm[_<node>]/uid_<uid>/job_<id>`
/// or `<v2 mount>/<slice>/[<node>_]slurmstepd.scope/job_<id>`, or `.../<SLUID>` (26.05). `None`
/// until Slurm has made it (the job's first step on the node), or without cgroup tracking. A few
/// directory reads.
pub fn find_job_dir(cgroup_root: &Path, job: &JobOnNode) -> Option<PathBuf> {
    job_dirs(cgroup_root, job).into_iter().next()
}

/// Every cgroup directory of the job on this node, in [`find_job_dir`]'s order of preference.
/// On v2 both names are looked for: 26.05 names the directory after the SLUID unless cgroup.conf
/// says `CgroupJobIdPaths=yes`, and a job started before an upgrade has the old name.
pub(crate) fn job_dirs(cgroup_root: &Path, on_node: &JobOnNode) -> Vec<PathBuf> {
    let (job_id, uid) = (on_node.job_id, on_node.uid);
    let job = format!("job_{job_id}");
    let v2_names: Vec<String> = std::iter::once(job.clone())
        .chain(on_node.sluid.map(|sluid| sluid.to_string()))
        .collect();
    let mut found = Vec::new();
    let v1_job = |mount: &Path| -> Vec<PathBuf> {
        subdirs(mount)
            .filter(|root| {
                root.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("slurm"))
            })
            .map(|root| root.join(format!("uid_{uid}")).join(&job))
            .filter(|dir| dir.is_dir())
            .collect()
    };
    if let Some(freezer) = v1_mount(cgroup_root, "freezer") {
        found.extend(v1_job(&freezer));
    }
    if let Some(v2) = v2_mount(cgroup_root) {
        let named = |dir: &PathBuf, test: fn(&str) -> bool| {
            dir.file_name().is_some_and(|n| test(&n.to_string_lossy()))
        };
        let scopes = subdirs(&v2)
            .filter(|slice| named(slice, is_stepd_slice))
            .flat_map(|slice| subdirs(&slice).filter(|scope| named(scope, is_stepd_scope)));
        for scope in scopes {
            found.extend(
                v2_names
                    .iter()
                    .map(|name| scope.join(name))
                    .filter(|dir| dir.is_dir()),
            );
        }
    }
    let others = subdirs(cgroup_root).filter(|mount| {
        let name = mount
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        name != "freezer" && name != "unified" && !mount.join("cgroup.controllers").exists()
    });
    for mount in others {
        found.extend(v1_job(&mount));
    }
    found.dedup();
    found
}

/// The directories in `dir` (none where it cannot be read), not following symlinks.
fn subdirs(dir: &Path) -> impl Iterator<Item = PathBuf> {
    fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .filter(|entry| entry.file_type().is_ok_and(|t| t.is_dir()))
        .map(|entry| entry.path())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_jobs_directories_from_a_v1_tree() {
        let scratch = tempfile::Builder::new().prefix("gmq-jobdirs-").tempdir().unwrap();
        let root = scratch.path();
        let freezer = root.join("freezer/slurm_vm/uid_2001/job_12");
        let memory = root.join("memory/slurm_vm/uid_2001/job_12");
        fs::create_dir_all(freezer.join("step_batch/keep")).unwrap();
        fs::create_dir_all(memory.join("step_batch")).unwrap();
        fs::create_dir_all(root.join("freezer/slurm_vm/uid_2001/job_13")).unwrap();
        fs::create_dir_all(root.join("freezer/other/uid_2001/job_12")).unwrap();
        fs::write(freezer.join("step_batch/keep/cgroup.procs"), "301\n").unwrap();
        fs::write(memory.join("step_batch/cgroup.procs"), "301\n302\n").unwrap();
        let job = |job_id, uid| JobOnNode {
            job_id,
            uid,
            sluid: None,
        };
        assert_eq!(find_job_dir(root, &job(12, 2001)), Some(freezer.clone()));
        assert_eq!(job_dirs(root, &job(12, 2001)), [freezer, memory]);
        assert_eq!(find_job_dir(root, &job(12, 2002)), None, "another uid's");
        assert_eq!(find_job_dir(root, &job(14, 2001)), None);
    }
}
