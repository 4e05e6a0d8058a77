//! Which Slurm job a process's cgroups put it in: pure parsing of `/proc/PID/cgroup`.
//!
//! Each line is `hierarchy-id:controllers:path`. cgroup v1 lines name their controllers
//! (`7:freezer:/slurm_vm/uid_2001/job_12/step_0`); the v2 line is `0::/path`; hybrid hosts have both.
//! Only root creates Slurm's cgroups, but a user may own a delegated v2 subtree (systemd's
//! `user@UID.service`) and create any names there, so a path counts only when its *whole prefix* is
//! the one Slurm uses:
//! - v1 (cgroup/v1): `/slurm*/uid_<uid>/job_<id>[/step_<name>/...]`, the `slurm` directory (`slurm`,
//!   or `slurm_<node>`) at the top of the hierarchy;
//! - v2 (cgroup/v2): `/system.slice/slurmstepd.scope/job_<id>[/step_<name>/...]` (with several
//!   slurmd per host the scope is `<node>_slurmstepd.scope`).
//!
//! Components must match exactly: `job_12` is job 12, `job_123` is not, `job_012` is nobody's.

use super::step::{canonical_decimal, job_id, Step};

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

/// A Slurm job cgroup found in one line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SlurmCgroup<'a> {
    pub(crate) job_id: u32,
    pub(crate) step: Option<Step>,
    /// The path of the job's own cgroup (up to and including `job_<id>`), relative to the
    /// hierarchy's root.
    pub(crate) job_path: &'a str,
}

/// What a whole `/proc/PID/cgroup` says about the process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Membership {
    /// No line is a Slurm job cgroup.
    NoJob,
    /// Every Slurm line names this job. `step` is `None` when the process is in the job's cgroup
    /// but no step's (slurmstepd itself on v1, processes spawned from plugin hooks) or when the
    /// lines disagree about the step.
    Job { job_id: u32, step: Option<Step> },
    /// Lines name different jobs. Slurm never does this; nothing is concluded.
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
    let job_id = job_id(components[job_index].strip_prefix("job_")?)?;
    let step = components
        .get(job_index + 1)
        .and_then(|c| c.strip_prefix("step_"))
        .and_then(Step::from_name);
    // The text up to the end of `job_<id>`: a `/` before each component, then the component.
    let job_len = components[..=job_index]
        .iter()
        .map(|c| 1 + c.len())
        .sum::<usize>();
    Some(SlurmCgroup {
        job_id,
        step,
        job_path: &line.path[..job_len],
    })
}

/// `/slurm*/uid_<uid>/job_<id>`: the job is the third component.
fn v1_job_index(components: &[&str]) -> Option<usize> {
    let [root, uid, _job, ..] = components else {
        return None;
    };
    let uid_ok = uid.strip_prefix("uid_").and_then(canonical_decimal).is_some();
    (root.starts_with("slurm") && uid_ok).then_some(2)
}

/// `/system.slice/[<node>_]slurmstepd.scope/job_<id>`: the job is the third component.
fn v2_job_index(components: &[&str]) -> Option<usize> {
    let [slice, scope, _job, ..] = components else {
        return None;
    };
    let scope_ok = *scope == "slurmstepd.scope" || scope.ends_with("_slurmstepd.scope");
    (*slice == "system.slice" && scope_ok).then_some(2)
}

/// What all lines of a `/proc/PID/cgroup` file say together.
pub(crate) fn membership(text: &str) -> Membership {
    let mut job: Option<u32> = None;
    // v1 controllers may stop at different depths (freezer at the step, memory at a task below
    // it, some at the job), so a line without a step does not contradict one with a step.
    let mut steps: Vec<Step> = Vec::new();
    for cgroup in lines(text).filter_map(|line| slurm_cgroup(&line)) {
        match job {
            Some(seen) if seen != cgroup.job_id => return Membership::Conflict,
            _ => job = Some(cgroup.job_id),
        }
        if let Some(step) = cgroup.step {
            if !steps.contains(&step) {
                steps.push(step);
            }
        }
    }
    match job {
        Some(job_id) => Membership::Job {
            job_id,
            step: if steps.len() == 1 { steps.pop() } else { None },
        },
        None => Membership::NoJob,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(job_id: u32, step: Option<Step>) -> Membership {
        Membership::Job { job_id, step }
    }

    #[test]
    fn single_lines() {
        use Step::*;
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
        assert_eq!(membership(hybrid), job(42, Some(Step::Batch)));

        let agreeing = "6:freezer:/slurm/uid_1/job_5\n4:memory:/slurm/uid_1/job_5/step_0/task_0\n";
        assert_eq!(membership(agreeing), job(5, Some(Step::Numbered(0))));

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
}
