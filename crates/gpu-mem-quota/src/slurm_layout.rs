//! A site's Slurm layout for scheduling by GPU memory (slurm.conf, gres.conf, job_submit.lua),
//! checked against the policy's `[scheduling] shard_unit`: `check-config --slurm-conf`. Pure: file
//! texts in, findings out, each naming the file and line.

use gmq_core::size::ByteSize;

/// One file as read: its name for messages and its text.
pub struct ConfFile<'a> {
    pub path: &'a str,
    pub text: &'a str,
}

/// What the check found: `errors` make the layout wrong for the policy; `facts` say what it is.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Findings {
    pub errors: Vec<String>,
    pub facts: Vec<String>,
}

/// `key=value` words of a Slurm config line, comments removed; keys as written.
fn words(line: &str) -> Vec<(&str, &str)> {
    let line = line.split('#').next().unwrap_or("");
    line.split_whitespace()
        .filter_map(|word| word.split_once('='))
        .collect()
}

/// The first line (1-based) that sets `key`, and its value.
fn first_value(text: &str, key: &str) -> Option<(usize, String)> {
    text.lines().enumerate().find_map(|(i, line)| {
        let words = words(line);
        value(&words, key).map(|v| (i + 1, v.to_string()))
    })
}

/// Whether a comma-separated list value holds `wanted` (case-insensitive, as Slurm reads them).
fn list_has(list: &str, wanted: &str) -> bool {
    list.split(',')
        .any(|item| item.trim().eq_ignore_ascii_case(wanted))
}

fn value<'l>(words: &[(&str, &'l str)], key: &str) -> Option<&'l str> {
    words
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(key))
        .map(|(_, v)| v.trim_matches('"'))
}

/// How many device files a `File=` value names: `/dev/nvidia0` is one, `/dev/nvidia[0-3]` four,
/// `/dev/nvidia[0,2]` two. `None` when the brackets do not read, or name more than a u64 counts.
fn file_count(file: &str) -> Option<u64> {
    let Some((_, rest)) = file.split_once('[') else {
        return Some(1);
    };
    let inside = rest.split(']').next()?;
    let mut count = 0u64;
    for part in inside.split(',') {
        let (low, high) = part.split_once('-').unwrap_or((part, part));
        let (low, high): (u64, u64) = (low.parse().ok()?, high.parse().ok()?);
        count = count.checked_add(high.checked_sub(low)?.checked_add(1)?)?;
    }
    Some(count)
}

/// Checks `slurm_conf`, `gres_conf` and (when the site has one) `job_submit` against a shard unit
/// and, when known, the GPUs' memory. `policy_path` is the policy checked (job_submit.lua must read
/// the same).
pub fn check(
    unit: Option<ByteSize>,
    gpu_memory: Option<ByteSize>,
    policy_path: &str,
    slurm_conf: &ConfFile,
    gres_conf: Option<&ConfFile>,
    job_submit: Option<&ConfFile>,
) -> Findings {
    let mut found = Findings::default();
    let Some(unit) = unit else {
        found.errors.push(format!(
            "{policy_path}: no [scheduling] shard_unit: shards are not GPU-memory units in this policy, \
             there is nothing to cross-check with {}",
            slurm_conf.path
        ));
        return found;
    };
    check_slurm_conf(slurm_conf, &mut found);
    match gres_conf {
        Some(gres) => check_gres_conf(gres, unit, gpu_memory, &mut found),
        None => found.errors.push(format!(
            "{}: no gres.conf next to it: each GPU's shard count (Name=shard Count=N File=...) is not known",
            slurm_conf.path
        )),
    }
    match job_submit {
        Some(script) => check_job_submit(script, policy_path, &mut found),
        None => found.errors.push(format!(
            "{}: no job_submit.lua next to it: --gpu-mem-quota is not turned into shards (slurm/job_submit.lua)",
            slurm_conf.path
        )),
    }
    found
}

fn check_slurm_conf(conf: &ConfFile, found: &mut Findings) {
    let seen = |key: &str| first_value(conf.text, key);
    match seen("GresTypes") {
        Some((_, v)) if list_has(&v, "shard") => {}
        Some((line, v)) => found.errors.push(format!(
            "{}:{line}: GresTypes={v} has no shard: Slurm knows no gres/shard",
            conf.path
        )),
        None => found.errors.push(format!(
            "{}: no GresTypes line: Slurm knows no gres/shard (GresTypes=gpu,shard)",
            conf.path
        )),
    }
    match seen("JobSubmitPlugins") {
        Some((_, v)) if list_has(&v, "lua") || list_has(&v, "job_submit/lua") => {}
        Some((line, v)) => found.errors.push(format!(
            "{}:{line}: JobSubmitPlugins={v} has no lua: --gpu-mem-quota is not turned into shards",
            conf.path
        )),
        None => found.errors.push(format!(
            "{}: no JobSubmitPlugins line: --gpu-mem-quota is not turned into shards (JobSubmitPlugins=lua)",
            conf.path
        )),
    }
    match seen("SelectType") {
        Some((_, v)) if v == "select/cons_tres" => {}
        Some((line, v)) => found.errors.push(format!(
            "{}:{line}: SelectType={v}: gres/shard needs select/cons_tres",
            conf.path
        )),
        None => found.errors.push(format!(
            "{}: no SelectType line: gres/shard needs select/cons_tres",
            conf.path
        )),
    }
    match seen("AccountingStorageTRES") {
        Some((_, v)) if list_has(&v, "gres/shard") => {}
        Some((line, v)) => found.facts.push(format!(
            "{}:{line}: AccountingStorageTRES={v} has no gres/shard: sacct and sreport will not show GPU memory",
            conf.path
        )),
        None => found.facts.push(format!(
            "{}: no AccountingStorageTRES: sacct and sreport will not show GPU memory (gres/shard)",
            conf.path
        )),
    }
}

/// What keeps one job off another's GPUs and processes, and when the job prolog runs (review G9):
/// `slurm_conf` and the cgroup.conf beside it. Without `ConstrainDevices=yes` (and task/cgroup to
/// apply it), `CUDA_VISIBLE_DEVICES` is advice: a job can use any GPU of its node, including one it
/// was not given and that no watchdog watches for it. Without proctrack/cgroup, a process that
/// daemonizes leaves its job as far as Slurm knows. Both are errors; PrologFlags is a fact.
pub fn check_isolation(slurm_conf: &ConfFile, cgroup_conf: Option<&ConfFile>) -> Findings {
    let mut found = Findings::default();
    let seen = |conf: &ConfFile, key: &str| first_value(conf.text, key);
    let path = slurm_conf.path;
    match seen(slurm_conf, "ProctrackType") {
        Some((_, v)) if v == "proctrack/cgroup" => {}
        Some((line, v)) => found.errors.push(format!(
            "{path}:{line}: ProctrackType={v}: a process that daemonizes leaves its job, and its GPU memory              is counted for no job (write ProctrackType=proctrack/cgroup)"
        )),
        None => found.errors.push(format!(
            "{path}: no ProctrackType line: a process that daemonizes leaves its job (ProctrackType=proctrack/cgroup)"
        )),
    }
    let task_cgroup = match seen(slurm_conf, "TaskPlugin") {
        Some((_, v)) if list_has(&v, "task/cgroup") => true,
        Some((line, v)) => {
            found.errors.push(format!(
                "{path}:{line}: TaskPlugin={v} has no task/cgroup: cgroup.conf's ConstrainDevices is not applied,                  a job can use every GPU of its node (TaskPlugin=task/cgroup,task/affinity)"
            ));
            false
        }
        None => {
            found.errors.push(format!(
                "{path}: no TaskPlugin line: cgroup.conf's ConstrainDevices is not applied, a job can use every                  GPU of its node (TaskPlugin=task/cgroup,task/affinity)"
            ));
            false
        }
    };
    let unconfined = "a job can use every GPU of its node, also one it was not given and that no watchdog                       watches for it (write ConstrainDevices=yes)";
    match cgroup_conf {
        None => found
            .errors
            .push(format!("{path}: no cgroup.conf next to it: {unconfined}")),
        Some(cgroup) => match seen(cgroup, "ConstrainDevices") {
            Some((_, v)) if v.eq_ignore_ascii_case("yes") => {
                if task_cgroup {
                    found.facts.push(format!(
                        "{}: ConstrainDevices=yes: a job sees only its own GPUs",
                        cgroup.path
                    ));
                }
            }
            Some((line, v)) => found.errors.push(format!(
                "{}:{line}: ConstrainDevices={v}: {unconfined}",
                cgroup.path
            )),
            None => found.errors.push(format!(
                "{}: no ConstrainDevices line (it is off by default): {unconfined}",
                cgroup.path
            )),
        },
    }
    match seen(slurm_conf, "PrologFlags") {
        Some((line, v)) if list_has(&v, "Alloc") || list_has(&v, "Contain") => found.facts.push(format!(
            "{path}:{line}: PrologFlags={v}: each job's watchdog starts when the job is allocated its node"
        )),
        _ => found.facts.push(format!(
            "{path}: no PrologFlags=Alloc or Contain: a job's watchdog starts with its first step on each node              (an salloc that runs nothing there has none)"
        )),
    }
    found
}

/// Whether a cgroup.conf text says `ConstrainDevices=yes`: Slurm's task/cgroup then lets a job's
/// processes open only its own GPUs.
pub fn constrains_devices(cgroup_conf: &str) -> bool {
    first_value(cgroup_conf, "ConstrainDevices").is_some_and(|(_, v)| v.eq_ignore_ascii_case("yes"))
}

/// [`constrains_devices`] for the cgroup.conf beside this process's slurm.conf (`SLURM_CONF`, else
/// Slurm's default path). A file that cannot be read constrains nothing.
pub fn devices_constrained_here() -> bool {
    let slurm_conf = std::env::var_os("SLURM_CONF").unwrap_or_else(|| "/etc/slurm/slurm.conf".into());
    let cgroup_conf = std::path::Path::new(&slurm_conf).with_file_name("cgroup.conf");
    std::fs::read_to_string(cgroup_conf).is_ok_and(|text| constrains_devices(&text))
}

fn check_gres_conf(conf: &ConfFile, unit: ByteSize, gpu_memory: Option<ByteSize>, found: &mut Findings) {
    let mut shard_lines = 0;
    for (i, line) in conf.text.lines().enumerate() {
        let words = words(line);
        if value(&words, "Name") != Some("shard") {
            continue;
        }
        shard_lines += 1;
        let at = format!("{}:{}", conf.path, i + 1);
        let Some(count) = value(&words, "Count").and_then(|c| c.parse::<u64>().ok()) else {
            found
                .errors
                .push(format!("{at}: Name=shard without a whole Count"));
            continue;
        };
        let Some(file) = value(&words, "File") else {
            found.errors.push(format!(
                "{at}: Name=shard Count={count} without File=: the shards are not tied to a GPU (one line per GPU: \
                 Name=shard Count=N File=/dev/nvidiaK)"
            ));
            continue;
        };
        let Some(gpus) = file_count(file).filter(|&n| n > 0) else {
            found
                .errors
                .push(format!("{at}: File={file} does not read as device files"));
            continue;
        };
        if count % gpus != 0 {
            found.errors.push(format!(
                "{at}: Count={count} does not divide evenly over the {gpus} GPUs of File={file}"
            ));
            continue;
        }
        let per_gpu = count / gpus;
        let memory = ByteSize::from_bytes(unit.bytes().saturating_mul(per_gpu));
        match gpu_memory {
            Some(gpu) if gpu != memory => {
                let right = (gpu.bytes() / unit.bytes().max(1)).saturating_mul(gpus);
                found.errors.push(format!(
                    "{at}: Count={count} gives {per_gpu} shard(s) x {unit} = {memory} per GPU, but the GPUs have {gpu} \
                     ([defaults] gpu_memory): write Count={right}"
                ));
            }
            _ => found.facts.push(format!(
                "{at}: {per_gpu} shard(s) x {unit} = {memory} per GPU ({gpus} GPU(s) of {file})"
            )),
        }
    }
    if shard_lines == 0 {
        found
            .errors
            .push(format!("{}: no Name=shard line: GPUs have no shards", conf.path));
    }
}

fn check_job_submit(script: &ConfFile, policy_path: &str, found: &mut Findings) {
    let named = script.text.lines().enumerate().find_map(|(i, line)| {
        let rest = line.trim_start().strip_prefix("local POLICY")?;
        let quoted = rest.trim_start().strip_prefix('=')?.trim();
        Some((i + 1, quoted.trim_matches('"').to_string()))
    });
    match named {
        Some((_, path)) if path == policy_path => {}
        Some((line, path)) => found.errors.push(format!(
            "{}:{line}: POLICY names {path}, not the policy checked here ({policy_path}): slurmctld reads \
             the shard unit from there",
            script.path
        )),
        None => found.errors.push(format!(
            "{}: no `local POLICY = \"...\"` line: not gpu-mem-quota's job_submit.lua (slurm/job_submit.lua)",
            script.path
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SLURM: &str = "SelectType=select/cons_tres\nGresTypes=gpu,shard\nJobSubmitPlugins=lua\n\
        AccountingStorageTRES=gres/gpu,gres/shard\nNodeName=n1 Gres=gpu:4,shard:320\n";
    const GRES: &str = "Name=gpu File=/dev/nvidia[0-3]\nName=shard Count=80 File=/dev/nvidia0\n\
        Name=shard Count=240 File=/dev/nvidia[1-3]  # three GPUs\n";
    const LUA: &str = "-- x\nlocal POLICY = \"/etc/slurm/gpu-mem-quota.toml\"\n";

    fn gib(n: u64) -> Option<ByteSize> {
        Some(ByteSize::from_bytes(n << 30))
    }

    fn run(slurm: &str, gres: &str, lua: &str, gpu: Option<ByteSize>) -> Findings {
        check(
            gib(1),
            gpu,
            "/etc/slurm/gpu-mem-quota.toml",
            &ConfFile {
                path: "slurm.conf",
                text: slurm,
            },
            Some(&ConfFile {
                path: "gres.conf",
                text: gres,
            }),
            Some(&ConfFile {
                path: "job_submit.lua",
                text: lua,
            }),
        )
    }

    #[test]
    fn a_consistent_layout_has_no_errors() {
        let found = run(SLURM, GRES, LUA, gib(80));
        assert_eq!(found.errors, Vec::<String>::new());
        let found = run(SLURM, GRES, LUA, None);
        assert_eq!(found.errors, Vec::<String>::new());
        assert!(
            found.facts[0].contains("gres.conf:2: 80 shard(s) x 1G = 80G per GPU"),
            "{:?}",
            found.facts
        );
    }

    #[test]
    fn each_mismatch_names_its_file_line_and_fix() {
        let found = run(SLURM, "Name=shard Count=8 File=/dev/nvidia0\n", LUA, gib(80));
        assert_eq!(
            found.errors,
            ["gres.conf:1: Count=8 gives 8 shard(s) x 1G = 8G per GPU, but the GPUs have 80G ([defaults] gpu_memory): \
              write Count=80"]
        );
        let found = run(SLURM, "Name=shard Count=8\n", LUA, gib(80));
        assert!(found.errors[0].starts_with("gres.conf:1: Name=shard Count=8 without File="));
        let found = run(SLURM, "Name=shard Count=81 File=/dev/nvidia[0-1]\n", LUA, None);
        assert!(found.errors[0].contains("does not divide evenly over the 2 GPUs"));
        let found = run(SLURM, "Name=gpu File=/dev/nvidia0\n", LUA, None);
        assert_eq!(
            found.errors,
            ["gres.conf: no Name=shard line: GPUs have no shards"]
        );
        let slurm = SLURM.replace("JobSubmitPlugins=lua", "JobSubmitPlugins=require_timelimit");
        let found = run(&slurm, GRES, LUA, None);
        assert_eq!(
            found.errors,
            ["slurm.conf:3: JobSubmitPlugins=require_timelimit has no lua: --gpu-mem-quota is not turned into shards"]
        );
        let slurm = SLURM.replace("GresTypes=gpu,shard", "GresTypes=gpu");
        assert!(
            run(&slurm, GRES, LUA, None).errors[0].starts_with("slurm.conf:2: GresTypes=gpu has no shard")
        );
        let found = run(SLURM, GRES, "local POLICY = \"/tmp/other.toml\"\n", None);
        assert!(found.errors[0]
            .starts_with("job_submit.lua:1: POLICY names /tmp/other.toml, not the policy checked"));
    }

    #[test]
    fn without_a_unit_or_files_it_says_what_is_missing() {
        let slurm = ConfFile {
            path: "slurm.conf",
            text: SLURM,
        };
        let found = check(None, None, "p.toml", &slurm, None, None);
        assert!(found.errors[0].starts_with("p.toml: no [scheduling] shard_unit"));
        let found = check(gib(1), None, "p.toml", &slurm, None, None);
        assert_eq!(found.errors.len(), 2);
        assert!(found.errors[0].contains("no gres.conf next to it"));
        assert!(found.errors[1].contains("no job_submit.lua next to it"));
    }

    #[test]
    fn isolation_needs_constrained_devices_and_cgroup_tracking() {
        let slurm = |text| ConfFile {
            path: "slurm.conf",
            text,
        };
        let cgroup = |text| ConfFile {
            path: "cgroup.conf",
            text,
        };
        let good = "ProctrackType=proctrack/cgroup\nTaskPlugin=task/cgroup,task/affinity\nPrologFlags=Alloc,Contain\n";
        let found = check_isolation(&slurm(good), Some(&cgroup("ConstrainDevices=yes\n")));
        assert_eq!(found.errors, Vec::<String>::new());
        assert_eq!(found.facts.len(), 2, "{:?}", found.facts);
        let found = check_isolation(
            &slurm(good),
            Some(&cgroup("CgroupPlugin=cgroup/v1\nConstrainDevices=no\n")),
        );
        assert_eq!(found.errors.len(), 1);
        assert!(found.errors[0].starts_with("cgroup.conf:2: ConstrainDevices=no: a job can use every GPU"));
        let found = check_isolation(&slurm(good), None);
        assert!(found.errors[0].starts_with("slurm.conf: no cgroup.conf next to it"));
        let found = check_isolation(
            &slurm("ProctrackType=proctrack/linuxproc\nTaskPlugin=task/affinity\n"),
            Some(&cgroup("ConstrainDevices=yes\n")),
        );
        assert_eq!(found.errors.len(), 2, "{:?}", found.errors);
        assert!(found.errors[0].starts_with("slurm.conf:1: ProctrackType=proctrack/linuxproc"));
        assert!(found.errors[1].starts_with("slurm.conf:2: TaskPlugin=task/affinity has no task/cgroup"));
        assert!(found.facts[0].contains("no PrologFlags=Alloc or Contain"));
    }

    #[test]
    fn constrained_devices_are_read_from_cgroup_conf() {
        assert!(constrains_devices(
            "CgroupPlugin=cgroup/v1\nConstrainDevices=yes # GPUs\n"
        ));
        assert!(constrains_devices("constraindevices=Yes\n"));
        assert!(!constrains_devices("ConstrainDevices=no\n"));
        assert!(!constrains_devices(
            "# ConstrainDevices=yes\nConstrainCores=yes\n"
        ));
    }

    #[test]
    fn device_file_ranges() {
        assert_eq!(file_count("/dev/nvidia0"), Some(1));
        assert_eq!(file_count("/dev/nvidia[0-3]"), Some(4));
        assert_eq!(file_count("/dev/nvidia[0,2-3]"), Some(3));
        assert_eq!(file_count("/dev/nvidia[x]"), None);
        // More device files than a u64 counts: refused, not an overflow (a panic in debug builds).
        assert_eq!(file_count("/dev/nvidia[0-18446744073709551615]"), None);
        assert_eq!(
            file_count("/dev/nvidia[0-9223372036854775807,0-9223372036854775807]"),
            None
        );
        let found = run(
            SLURM,
            "Name=shard Count=0 File=/dev/nvidia[0-9223372036854775807]\n",
            LUA,
            gib(80),
        );
        assert!(
            found.errors[0].contains("write Count=18446744073709551615"),
            "{:?}",
            found.errors
        );
    }
}
