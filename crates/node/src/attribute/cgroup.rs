//! Which Slurm jobs a process's cgroups name: pure parsing of `/proc/PID/cgroup`.
//!
//! Each line is `hierarchy-id:controllers:path`. cgroup v1 lines name their controllers
//! (`7:freezer:/slurm_vm/uid_2001/job_12/step_0`); the v2 line is `0::/path`; hybrid hosts have both.
//! A user may own a delegated v2 subtree (systemd's `user@UID.service`) and create any names there,
//! so a path names a job only when its *whole prefix* is the one Slurm uses:
//! - v1 (cgroup/v1): `/slurm*/uid_<uid>/job_<id>[/step_<name>/...]`, the `slurm` directory (`slurm`,
//!   or `slurm_<node>`) at the top of the hierarchy;
//! - v2 (cgroup/v2): `/<slice>/slurmstepd.scope/<job>[/step_<name>/...]`, where `<slice>` is
//!   cgroup.conf's `CgroupSlice` (default `system.slice`; any top-level `*.slice`: only root makes
//!   cgroups at the top, a user's delegated subtree starts deeper, at `user@UID.service`), the scope
//!   is `<node>_slurmstepd.scope` with several slurmd per host, and `<job>` is `job_<id>` up to
//!   Slurm 25.11, the job's SLUID on 26.05 (`s0K2Q6ZC8M4T00`: `gmq_core::sluid`; `job_<id>` again
//!   with `CgroupJobIdPaths=yes`). A SLUID holds no job number: `sluid_job.rs` reads it from the
//!   job's slurmstepd.
//!
//! Components must match exactly: `job_12` is job 12, `job_123` is not, `job_012` is nobody's.
//!
//! A line that names a job is a *claim*, and a claim is only as good as the hand that put the
//! process there ([`Level`]). The path below `job_<id>` tells the first part:
//! - **Slurm-made levels**: v1 `job_N`, `job_N/step_S`, `job_N/step_S/task_T`; v2 `job_N`,
//!   `job_N/step_S`, `job_N/step_S/slurm` (slurmstepd), `job_N/step_S/user` and
//!   `job_N/step_S/user/task_T` (`T` a number, or `special` for the extern step's processes);
//! - **user-made levels**: anything deeper, or a component Slurm does not create.
//!
//! Why: on cgroup v1 Slurm 22.05 chowns the step (and task) directories to the job's user, so the
//! user can `mkdir` below them and, v1 having no common-ancestor rule, move any of their processes
//! (from another of their jobs, too) into the new cgroup. The shape alone cannot tell a user's
//! `mkdir job_B/step_0/task_9` from Slurm's; on v1 the caller adds the kernel's fact (see
//! `v1_owner.rs`): Slurm's own levels have root-owned `cgroup.procs`/`tasks`, a user's `mkdir`
//! gives the user those files. On v2 the shape suffices: moving a process needs write access to the
//! common ancestor's `cgroup.procs`, which is Slurm's. Seen live (the v2 lab's VM, Debian's 22.05.8
//! and 24.11.5, a cgroup.conf that constrains nothing): every directory of the job is root's, and
//! every task is in `user/task_special`.

use super::step::{canonical_decimal, job_id, StepName};
use gmq_core::sluid::Sluid;

/// One line of `/proc/PID/cgroup`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CgroupLine<'a> {
    pub(crate) hierarchy: Hierarchy<'a>,
    /// The cgroup path, relative to the hierarchy's root (starts with `/`).
    pub(crate) path: &'a str,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Hierarchy<'a> {
    /// A v1 hierarchy and its comma-separated controllers (`freezer`, `cpu,cpuacct`, `name=systemd`).
    V1(&'a str),
    /// The unified (v2) hierarchy.
    V2,
}

/// How a job's cgroup directory names the job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum JobKey {
    /// `job_<id>`: v1, and v2 up to 25.11 (26.05 with `CgroupJobIdPaths=yes`).
    Id(u32),
    /// The job's SLUID: v2 on 26.05.
    Sluid(Sluid),
}

/// A Slurm job cgroup found in one line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SlurmCgroup<'a> {
    pub(crate) job: JobKey,
    pub(crate) step: Option<StepName>,
    /// The path of the job's own cgroup (up to and including `job_<id>` or the SLUID), relative
    /// to the hierarchy's root.
    pub(crate) job_path: &'a str,
    /// What the path's shape says about who made the cgroup (on v1 the caller also checks the
    /// files' owner: the shape of `task_9` can be copied).
    pub(crate) shape: Level,
}

/// Who put a process in the cgroup that names its job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    /// A cgroup the job's user made (or may have made) below Slurm's: the user moved the process
    /// there, possibly from another of their jobs. The job counts the process, but the claim does
    /// not keep another job of the user from counting it too.
    User,
    /// A cgroup Slurm made, that only root moves processes into (or a root-owned slurmstepd's
    /// descendant, on linuxproc): the process is this job's, and no other job's.
    Slurm,
}

/// What a whole `/proc/PID/cgroup` says about the process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Membership {
    /// No line is a Slurm job cgroup.
    NoJob,
    /// Every Slurm line names this job. `step` is `None` when the process is in the job's cgroup
    /// but no step's (slurmstepd itself on v1, processes spawned from plugin hooks) or when the
    /// lines disagree about the step.
    Job { job: JobKey, step: Option<StepName> },
    /// Lines name different jobs. Slurm never does this, a user can on v1 (see [`Level`]); for the
    /// watchdog's own pid (`job_cgroup`) nothing is concluded.
    Conflict,
}

/// The lines of a `/proc/PID/cgroup` file; malformed lines are skipped.
pub(crate) fn lines(text: &str) -> impl Iterator<Item = CgroupLine<'_>> {
    text.lines().filter_map(parse_line)
}

fn parse_line(line: &str) -> Option<CgroupLine<'_>> {
    let mut parts = line.splitn(3, ':');
    let id = parts.next()?;
    let controllers = parts.next()?;
    let path = parts.next()?;
    let hierarchy = match (id, controllers) {
        ("0", "") => Hierarchy::V2,
        (_, "") => return None,
        _ => Hierarchy::V1(controllers),
    };
    Some(CgroupLine { hierarchy, path })
}

/// The Slurm job cgroup `line` puts its process in, if any.
pub(crate) fn slurm_cgroup<'a>(line: &CgroupLine<'a>) -> Option<SlurmCgroup<'a>> {
    let rest = line.path.strip_prefix('/')?;
    let components: Vec<&str> = rest.split('/').collect();
    let job_index = match line.hierarchy {
        Hierarchy::V1(_) => v1_job_index(&components)?,
        Hierarchy::V2 => v2_job_index(&components)?,
    };
    let name = components[job_index];
    let by_id = || name.strip_prefix("job_").and_then(job_id).map(JobKey::Id);
    let job = match line.hierarchy {
        Hierarchy::V1(_) => by_id()?,
        Hierarchy::V2 => by_id().or_else(|| Sluid::parse(name).map(JobKey::Sluid))?,
    };
    let step = components
        .get(job_index + 1)
        .and_then(|c| c.strip_prefix("step_"))
        .and_then(StepName::from_name);
    let below_job = &components[job_index + 1..];
    let shape = match line.hierarchy {
        Hierarchy::V1(_) => v1_shape(below_job),
        Hierarchy::V2 => v2_shape(below_job),
    };
    // The text up to the end of `job_<id>`: a `/` before each component, then the component.
    let job_len = components[..=job_index]
        .iter()
        .map(|c| 1 + c.len())
        .sum::<usize>();
    Some(SlurmCgroup {
        job,
        step,
        job_path: &line.path[..job_len],
        shape,
    })
}

/// v1 levels Slurm creates below `job_<id>`: `step_<name>` and `step_<name>/task_<id>`.
fn v1_shape(below_job: &[&str]) -> Level {
    match below_job {
        [] => Level::Slurm,
        [step] if is_step(step) => Level::Slurm,
        [step, task] if is_step(step) && is_task(task) => Level::Slurm,
        _ => Level::User,
    }
}

/// v2 levels Slurm creates below `job_<id>`: `step_<name>`, its `slurm` (slurmstepd) and `user`
/// cgroups, and `user/task_<id>`.
fn v2_shape(below_job: &[&str]) -> Level {
    match below_job {
        [] => Level::Slurm,
        [step] if is_step(step) => Level::Slurm,
        [step, "slurm" | "user"] if is_step(step) => Level::Slurm,
        [step, "user", task] if is_step(step) && is_task(task) => Level::Slurm,
        _ => Level::User,
    }
}

fn is_step(component: &str) -> bool {
    component
        .strip_prefix("step_")
        .and_then(StepName::from_name)
        .is_some()
}

/// `task_<n>` as Slurm writes `%u`, or `task_special` (the extern step's adopted processes).
fn is_task(component: &str) -> bool {
    component
        .strip_prefix("task_")
        .is_some_and(|t| t == "special" || canonical_decimal(t).is_some())
}

/// `/slurm*/uid_<uid>/job_<id>`: the job is the third component.
fn v1_job_index(components: &[&str]) -> Option<usize> {
    let [root, uid, _job, ..] = components else {
        return None;
    };
    let uid_ok = uid.strip_prefix("uid_").and_then(canonical_decimal).is_some();
    (root.starts_with("slurm") && uid_ok).then_some(2)
}

/// `/<slice>.slice/[<node>_]slurmstepd.scope/<job>`: the job is the third component.
fn v2_job_index(components: &[&str]) -> Option<usize> {
    let [slice, scope, _job, ..] = components else {
        return None;
    };
    Some(2).filter(|_| is_stepd_slice(slice) && is_stepd_scope(scope))
}

/// A top-level slice slurmd may put its scope in: cgroup.conf's `CgroupSlice`, `system.slice` by
/// default (`DEFAULT_SYSTEM_CGSLICE` in cgroup_v2.c).
pub(crate) fn is_stepd_slice(name: &str) -> bool {
    name.strip_suffix(".slice").is_some_and(|stem| !stem.is_empty())
}

/// slurmd's scope for the slurmstepds: `slurmstepd.scope`, or `<node>_slurmstepd.scope` with
/// several slurmd per host (`SYSTEM_CGSCOPE`).
pub(crate) fn is_stepd_scope(name: &str) -> bool {
    name == "slurmstepd.scope" || name.ends_with("_slurmstepd.scope")
}

/// What all lines of a `/proc/PID/cgroup` file say together.
pub(crate) fn membership(text: &str) -> Membership {
    let mut job: Option<JobKey> = None;
    // v1 controllers may stop at different depths (freezer at the step, memory at a task below
    // it, some at the job), so a line without a step does not contradict one with a step.
    let mut steps: Vec<StepName> = Vec::new();
    for cgroup in lines(text).filter_map(|line| slurm_cgroup(&line)) {
        match job {
            Some(seen) if seen != cgroup.job => return Membership::Conflict,
            _ => job = Some(cgroup.job),
        }
        if let Some(step) = cgroup.step {
            if !steps.contains(&step) {
                steps.push(step);
            }
        }
    }
    match job {
        Some(job) => Membership::Job {
            job,
            step: if steps.len() == 1 { steps.pop() } else { None },
        },
        None => Membership::NoJob,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(job_id: u32, step: Option<StepName>) -> Membership {
        Membership::Job {
            job: JobKey::Id(job_id),
            step,
        }
    }

    /// A SLUID as Slurm 26.05 prints it (`print_sluid`), and another job's.
    const SLUID: &str = "s0K2Q6ZC8M4T00";
    const OTHER_SLUID: &str = "s0K2Q6ZC8M4T01";

    fn sluid_job(step: Option<StepName>) -> Membership {
        Membership::Job {
            job: JobKey::Sluid(Sluid::parse(SLUID).unwrap()),
            step,
        }
    }

    #[test]
    fn slurm_26_05_names_v2_job_cgroups_by_sluid() {
        use StepName::*;
        let cases = [
            (
                format!("0::/system.slice/slurmstepd.scope/{SLUID}/step_0/user/task_0"),
                sluid_job(Some(Numbered(0))),
            ),
            (
                format!("0::/system.slice/slurmstepd.scope/{SLUID}/step_batch/slurm"),
                sluid_job(Some(Batch)),
            ),
            (
                format!("0::/system.slice/n1_slurmstepd.scope/{SLUID}/step_extern/user/task_special"),
                sluid_job(Some(Extern)),
            ),
            (
                format!("0::/system.slice/slurmstepd.scope/{SLUID}"),
                sluid_job(None),
            ),
            // CgroupSlice=slurm.slice, and the old names with CgroupJobIdPaths=yes
            (
                format!("0::/slurm.slice/slurmstepd.scope/{SLUID}/step_0/user"),
                sluid_job(Some(Numbered(0))),
            ),
            (
                "0::/slurm.slice/slurmstepd.scope/job_12/step_0/user".to_string(),
                job(12, Some(Numbered(0))),
            ),
            // not Slurm's: no slice at the top, a nested slice, a SLUID in another spelling, v1
            (format!("0::/slurmstepd.scope/{SLUID}/step_0"), Membership::NoJob),
            (
                format!("0::/.slice/slurmstepd.scope/{SLUID}/step_0"),
                Membership::NoJob,
            ),
            (
                format!("0::/user.slice/user-2001.slice/slurmstepd.scope/{SLUID}"),
                Membership::NoJob,
            ),
            (
                format!(
                    "0::/system.slice/slurmstepd.scope/{}/step_0",
                    SLUID.to_uppercase()
                ),
                Membership::NoJob,
            ),
            (
                format!("0::/system.slice/slurmstepd.scope/job_{SLUID}/step_0"),
                Membership::NoJob,
            ),
            (
                format!("6:freezer:/slurm/uid_2001/{SLUID}/step_0"),
                Membership::NoJob,
            ),
        ];
        for (text, want) in &cases {
            assert_eq!(&membership(text), want, "{text}");
        }
        let two = format!(
            "0::/system.slice/slurmstepd.scope/{SLUID}/step_0\n0::/system.slice/slurmstepd.scope/{OTHER_SLUID}/step_0\n"
        );
        assert_eq!(membership(&two), Membership::Conflict);
        let line = format!("0::/system.slice/slurmstepd.scope/{SLUID}/step_0/user/task_0/x");
        let line = lines(&line).next().unwrap();
        let cgroup = slurm_cgroup(&line).unwrap();
        assert_eq!(cgroup.shape, Level::User);
        assert_eq!(cgroup.job_path, format!("/system.slice/slurmstepd.scope/{SLUID}"));
    }

    #[test]
    fn single_lines() {
        use StepName::*;
        let cases: &[(&str, Membership)] = &[
            // v1, as on the dev cluster (the node part of the root varies)
            (
                "6:freezer:/slurm_vm/uid_2001/job_12/step_0",
                job(12, Some(Numbered(0))),
            ),
            (
                "6:freezer:/slurm/uid_2001/job_12/step_batch",
                job(12, Some(Batch)),
            ),
            (
                "6:freezer:/slurm_n1/uid_0/job_12/step_extern",
                job(12, Some(Extern)),
            ),
            (
                "4:memory:/slurm/uid_2001/job_12/step_0/task_3",
                job(12, Some(Numbered(0))),
            ),
            ("6:freezer:/slurm_vm/uid_2001/job_12", job(12, None)),
            (
                "2:cpu,cpuacct:/slurm/uid_2001/job_77/step_interactive",
                job(77, Some(Interactive)),
            ),
            // v2
            (
                "0::/system.slice/slurmstepd.scope/job_12/step_0/user/task_0",
                job(12, Some(Numbered(0))),
            ),
            (
                "0::/system.slice/slurmstepd.scope/job_12/step_batch/slurm",
                job(12, Some(Batch)),
            ),
            (
                "0::/system.slice/n1_slurmstepd.scope/job_12/step_extern/user",
                job(12, Some(Extern)),
            ),
            ("0::/system.slice/slurmstepd.scope/job_12", job(12, None)),
            (
                "0::/system.slice/slurmstepd.scope/job_12/step_3+1/user",
                job(12, Some(Other("3+1".into()))),
            ),
            // exact components
            (
                "6:freezer:/slurm/uid_2001/job_123/step_0",
                job(123, Some(Numbered(0))),
            ),
            ("6:freezer:/slurm/uid_2001/job_012/step_0", Membership::NoJob),
            ("6:freezer:/slurm/uid_2001/job_12x/step_0", Membership::NoJob),
            ("6:freezer:/slurm/uid_2001/job_/step_0", Membership::NoJob),
            ("6:freezer:/slurm/uid_2001/job_0", Membership::NoJob),
            ("6:freezer:/slurm/uid_2001/xjob_12", Membership::NoJob),
            // look-alikes outside Slurm's prefix
            ("6:freezer:/user/slurm/uid_2001/job_12/step_0", Membership::NoJob),
            ("6:freezer:/slurm/job_12/step_0", Membership::NoJob),
            ("6:freezer:/slurm/uid_x/job_12/step_0", Membership::NoJob),
            ("6:freezer:/notslurm/uid_2001/job_12", Membership::NoJob),
            (
                "0::/user.slice/user-2001.slice/user@2001.service/slurmstepd.scope/job_12/step_0",
                Membership::NoJob,
            ),
            (
                "0::/user.slice/system.slice/slurmstepd.scope/job_12",
                Membership::NoJob,
            ),
            ("0::/user.slice/slurmstepd.d/job_12", Membership::NoJob),
            ("0::/system.slice/evil.scope/job_12/step_0", Membership::NoJob),
            ("0::/system.slice/slurmstepd.scope.d/job_12", Membership::NoJob),
            (
                "0::/system.slice/slurmstepd.scope/uid_2001/job_12",
                Membership::NoJob,
            ),
            // the v1 layout in the v2 hierarchy and the other way round
            ("0::/slurm/uid_2001/job_12/step_0", Membership::NoJob),
            (
                "6:freezer:/system.slice/slurmstepd.scope/job_12",
                Membership::NoJob,
            ),
            // malformed
            ("6:freezer:slurm/uid_2001/job_12", Membership::NoJob),
            ("6:freezer", Membership::NoJob),
            ("1::/slurm/uid_2001/job_12", Membership::NoJob),
            ("", Membership::NoJob),
        ];
        for (text, want) in cases {
            assert_eq!(&membership(text), want, "{text}");
        }
    }

    #[test]
    fn whole_files() {
        let hybrid = "9:name=systemd:/\n6:freezer:/slurm_vm/uid_2001/job_42/step_batch\n\
                      4:memory:/process_api/0ef6eb4a\n0::/\n";
        assert_eq!(membership(hybrid), job(42, Some(StepName::Batch)));

        let agreeing = "6:freezer:/slurm/uid_1/job_5\n4:memory:/slurm/uid_1/job_5/step_0/task_0\n";
        assert_eq!(membership(agreeing), job(5, Some(StepName::Numbered(0))));

        let steps_disagree = "6:freezer:/slurm/uid_1/job_5/step_1\n4:memory:/slurm/uid_1/job_5/step_0\n";
        assert_eq!(membership(steps_disagree), job(5, None));

        let jobs_disagree = "6:freezer:/slurm/uid_1/job_5/step_0\n4:memory:/slurm/uid_1/job_6/step_0\n";
        assert_eq!(membership(jobs_disagree), Membership::Conflict);

        let nothing = "9:name=systemd:/init.scope\n0::/init.scope\n";
        assert_eq!(membership(nothing), Membership::NoJob);
    }

    #[test]
    fn job_paths() {
        let cases = [
            (
                "6:freezer:/slurm_vm/uid_2001/job_12/step_0/task_1",
                "/slurm_vm/uid_2001/job_12",
            ),
            ("6:freezer:/slurm_vm/uid_2001/job_12", "/slurm_vm/uid_2001/job_12"),
            (
                "0::/system.slice/slurmstepd.scope/job_9/step_0/user",
                "/system.slice/slurmstepd.scope/job_9",
            ),
        ];
        for (text, want) in cases {
            let line = lines(text).next().unwrap();
            assert_eq!(slurm_cgroup(&line).unwrap().job_path, want, "{text}");
        }
    }

    /// `/proc/PID/cgroup` of a running job's processes as Debian's Slurm 22.05.8 and 24.11.5 made
    /// them on cgroup v2 (the v2 lab's VM, slurm/vm-lab, 2026-12-07): the scope carries the node's
    /// name (Debian builds for several slurmd per host), and with no `Constrain*` in cgroup.conf
    /// every task of every step, the batch script's included, is in `user/task_special`, not
    /// `user/task_<n>`. Each names its job and step, made by Slurm.
    #[test]
    fn lines_as_slurm_made_them_live_on_cgroup_v2() {
        use StepName::*;
        let scope = "0::/system.slice/v2lab_slurmstepd.scope";
        let cases = [
            ("job_1/step_batch/user/task_special", 1, Some(Batch)),
            ("job_1/step_0/user/task_special", 1, Some(Numbered(0))),
            ("job_1/step_extern/slurm", 1, Some(Extern)),
            ("job_1/step_batch/slurm", 1, Some(Batch)),
            ("job_500000/step_0/slurm", 500000, Some(Numbered(0))),
            ("job_500000/step_batch/user/task_special", 500000, Some(Batch)),
        ];
        for (below, id, step) in cases {
            let text = format!("{scope}/{below}\n");
            assert_eq!(membership(&text), job(id, step), "{text}");
            let line = lines(&text).next().unwrap();
            let cgroup = slurm_cgroup(&line).unwrap();
            assert_eq!(cgroup.shape, Level::Slurm, "{text}");
            assert_eq!(
                cgroup.job_path,
                format!("/system.slice/v2lab_slurmstepd.scope/job_{id}")
            );
        }
        // slurmd's own `slurmstepd infinity`: in the scope, in no job.
        assert_eq!(membership(&format!("{scope}/system\n")), Membership::NoJob);
    }

    /// The lines of Debian's 26.05.5 seen live in the v2 lab's VM (2026-12-07) with
    /// `CgroupSlice=slurm.slice`: the job's directory is its SLUID, the scope Debian's
    /// `<node>_slurmstepd.scope` in that slice, and slurmd (started without systemd's
    /// INVOCATION_ID) in the scope's `slurmd/`, with the watchdog the prolog starts.
    #[test]
    fn lines_as_slurm_26_05_made_them_live_on_cgroup_v2() {
        use StepName::*;
        let sluid = "sFN5M98G976T00";
        let scope = "0::/slurm.slice/v2lab_slurmstepd.scope";
        let cases = [
            ("step_batch/user/task_0", Some(Batch)),
            ("step_0/user/task_0", Some(Numbered(0))),
            ("step_batch/user/task_special", Some(Batch)),
            ("step_extern/slurm", Some(Extern)),
            ("step_0/slurm", Some(Numbered(0))),
        ];
        for (below, step) in cases {
            let text = format!("{scope}/{sluid}/{below}\n");
            let want = Membership::Job {
                job: JobKey::Sluid(Sluid::parse(sluid).unwrap()),
                step,
            };
            assert_eq!(membership(&text), want, "{text}");
            let line = lines(&text).next().unwrap();
            let cgroup = slurm_cgroup(&line).unwrap();
            assert_eq!(cgroup.shape, Level::Slurm, "{text}");
            assert_eq!(
                cgroup.job_path,
                format!("/slurm.slice/v2lab_slurmstepd.scope/{sluid}")
            );
        }
        for theirs in ["slurmd", "system"] {
            assert_eq!(
                membership(&format!("{scope}/{theirs}\n")),
                Membership::NoJob,
                "{theirs}"
            );
        }
    }

    #[test]
    fn levels_by_shape() {
        use Level::*;
        let cases = [
            // v1: job, step, task
            ("6:freezer:/slurm_vm/uid_2001/job_12", Slurm),
            ("6:freezer:/slurm_vm/uid_2001/job_12/step_0", Slurm),
            ("6:freezer:/slurm_vm/uid_2001/job_12/step_batch", Slurm),
            ("4:memory:/slurm/uid_2001/job_12/step_0/task_3", Slurm),
            ("4:memory:/slurm/uid_2001/job_12/step_extern/task_special", Slurm),
            // v1: what a user can mkdir below the step they own
            ("6:freezer:/slurm_vm/uid_2001/job_12/step_0/x", User),
            ("6:freezer:/slurm_vm/uid_2001/job_12/step_0/task_03", User),
            ("6:freezer:/slurm_vm/uid_2001/job_12/step_0/task_0/x", User),
            ("6:freezer:/slurm_vm/uid_2001/job_12/x", User),
            ("6:freezer:/slurm_vm/uid_2001/job_12/step_0/user/task_0", User),
            // v2: job, step, slurm, user, user/task
            ("0::/system.slice/slurmstepd.scope/job_12", Slurm),
            ("0::/system.slice/slurmstepd.scope/job_12/step_0", Slurm),
            ("0::/system.slice/slurmstepd.scope/job_12/step_batch/slurm", Slurm),
            ("0::/system.slice/slurmstepd.scope/job_12/step_0/user", Slurm),
            (
                "0::/system.slice/slurmstepd.scope/job_12/step_0/user/task_0",
                Slurm,
            ),
            (
                "0::/system.slice/slurmstepd.scope/job_12/step_extern/user/task_special",
                Slurm,
            ),
            // v2: below the task the user owns, or names Slurm does not use
            (
                "0::/system.slice/slurmstepd.scope/job_12/step_0/user/task_0/x",
                User,
            ),
            ("0::/system.slice/slurmstepd.scope/job_12/step_0/task_0", User),
            ("0::/system.slice/slurmstepd.scope/job_12/step_0/slurm/x", User),
            ("0::/system.slice/slurmstepd.scope/job_12/step_0/other", User),
            ("0::/system.slice/slurmstepd.scope/job_12/step_/user", User),
        ];
        for (text, want) in cases {
            let line = lines(text).next().unwrap();
            assert_eq!(slurm_cgroup(&line).unwrap().shape, want, "{text}");
        }
    }
}
