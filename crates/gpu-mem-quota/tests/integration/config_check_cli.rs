//! `gpu-mem-quota check-config`, run as an admin runs it.

use std::process::{Command, Output};

/// Run from the repository's top, as an admin in a checkout would, so that the paths the messages
/// name are the ones the tests pass.
fn check_config(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gpu-mem-quota"))
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
        .arg("check-config")
        .args(args)
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8(bytes.to_vec()).unwrap()
}

#[test]
fn a_valid_policy_gets_one_ok_line() {
    let out = check_config(&["etc/gpu-mem-quota.toml"]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        text(&out.stdout),
        "etc/gpu-mem-quota.toml: OK: rules: 1 user, 2 account, 1 qos, 1 partition; \
         defaults: default 50%, max 64G; on overuse: requeue (then requeue-hold after 3 requeues)\n"
    );
    assert_eq!(text(&out.stderr), "");
}

#[test]
fn every_error_is_printed_and_the_status_is_1() {
    let out = check_config(&["crates/core/tests/fixtures/config/many-errors.toml"]);
    assert_eq!(out.status.code(), Some(1));
    let expected = std::fs::read_to_string("../core/tests/fixtures/config/many-errors.expected")
        .unwrap()
        .replace("tests/fixtures/", "crates/core/tests/fixtures/");
    assert_eq!(text(&out.stderr), expected);
    assert_eq!(text(&out.stdout), "");

    let out = check_config(&["crates/core/tests/fixtures/config/unknown-key.toml"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr),
        "crates/core/tests/fixtures/config/unknown-key.toml:7:1: [account.physics] maximum: unknown field `maximum`, expected `default` or `max`\n"
    );
}

#[test]
fn a_missing_file_is_an_error() {
    let out = check_config(&["/nonexistent/gpu-mem-quota.toml"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr),
        "/nonexistent/gpu-mem-quota.toml: no such file: the GPU memory policy is missing\n"
    );
}

#[test]
fn usage_errors_are_status_2() {
    for args in [
        vec!["--user", "alice"],
        vec!["/nonexistent.toml", "--explain", "--request", "0"],
        vec!["a.toml", "b.toml"],
        vec!["--bogus"],
        vec!["etc/gpu-mem-quota.toml", "--explain", "--request", "banana"],
        vec!["etc/gpu-mem-quota.toml", "--explain", "--gpu-size", "80GB"],
    ] {
        let out = check_config(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(
            text(&out.stderr).contains("Usage: gpu-mem-quota check-config"),
            "{args:?}"
        );
    }
    let out = check_config(&["etc/gpu-mem-quota.toml", "--explain", "--request", "banana"]);
    assert!(
        text(&out.stderr).starts_with("gpu-mem-quota check-config: invalid --request 'banana': not a size")
    );
}

#[test]
fn help() {
    let out = check_config(&["--help"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(text(&out.stdout).contains("--explain"));
}

#[test]
fn explain_shows_the_values_and_why() {
    let out = check_config(&[
        "etc/gpu-mem-quota.toml",
        "--explain",
        "--user",
        "root",
        "--account",
        "physics",
        "--partition",
        "gpu",
        "--qos",
        "normal",
        "--gpu-size",
        "80G",
    ]);
    assert_eq!(out.status.code(), Some(0));
    let report = text(&out.stdout);
    for line in [
        "Job:      user root, account physics, partition gpu, QOS normal",
        "GPU size: 80G (--gpu-size)",
        "Quota per GPU: 40G  <- default \"50%\" from [defaults]",
        "Cap:           40G  <- max \"40G\" from [account.physics]",
        "     user > account > QOS > partition > defaults:",
        "  [user.root]                  (no such rule)",
        "  [account.physics]            -          40G       <- max",
        "  [defaults]                   50%        64G       <- default",
        "  sample every          2s",
        "  warn at               90% of the quota = 36G",
        "  act after             10s over the quota",
        "  action                requeue",
        "  after 3 requeues      requeue-hold",
        "  if not requeueable    cancel",
        "  failed near OOM       requeued with near-OOM hints (requeue_near_oom)",
        "  driver hard limit     set where the driver offers it, else the watchdog alone (hard_limit)",
        "  if policy is broken   fail-open",
        "For a job with a quota (the same for every job):",
        "  framework caps        PyTorch, JAX, TensorFlow",
        "  context reserve       512M",
        "  near-OOM              a peak within 5% of the quota or the GPU",
        "  hints aim             10% below the quota",
        "  fixed memory          not known",
        "  early warning         when the trend reaches the quota within 5m, signal none",
        "  metrics dir           /var/lib/prometheus/node-exporter",
    ] {
        assert!(report.lines().any(|l| l == line), "missing {line:?} in\n{report}");
    }
    assert!(!report.contains("warning:"), "{report}");
}

#[test]
fn explain_warns_when_the_pytorch_memory_fraction_is_on() {
    let dir = scratch_dir("gmq-explain-fraction-");
    let path = dir.path().join("policy.toml");
    std::fs::write(&path, "[frameworks]\npytorch_memory_fraction = true\n").unwrap();
    let out = check_config(&[
        path.to_str().unwrap(),
        "--explain",
        "--user",
        "alice",
        "--gpu-size",
        "80G",
    ]);
    assert_eq!(out.status.code(), Some(0));
    let report = text(&out.stdout);
    assert!(
        report
            .lines()
            .any(|l| l == "  framework caps        PyTorch (with memory fraction), JAX, TensorFlow"),
        "{report}"
    );
    let warning = report
        .lines()
        .find(|l| l.starts_with("  warning: pytorch_memory_fraction is on"))
        .unwrap_or_else(|| panic!("{report}"));
    assert!(
        warning.contains("only from 2.10") && warning.contains("2.9 and older refuse"),
        "{warning}"
    );
}

#[test]
fn explain_a_refusal_and_what_the_submit_host_cannot_check() {
    let out = check_config(&[
        "etc/gpu-mem-quota.toml",
        "--explain",
        "--user",
        "gmq-user",
        "--request",
        "35G",
    ]);
    let report = text(&out.stdout);
    assert!(
        report.contains("Refused:  --gpu-mem-quota=35G exceeds the 30G cap for user 'gmq-user'\n"),
        "{report}"
    );
    assert!(
        report.contains("  [user.gmq-user]              -          30G       <- max\n"),
        "{report}"
    );

    let out = check_config(&[
        "etc/gpu-mem-quota.toml",
        "--explain",
        "--user",
        "alice",
        "--request",
        "50G",
    ]);
    let report = text(&out.stdout);
    assert!(report.contains("Request:       50G accepted\n"), "{report}");
    assert!(
        report.contains("  [account.?]                  account not given (2 account rules in the policy)\n")
    );
    assert!(
        report.contains("  - the account is not known here and some account rules set 'max'\n"),
        "{report}"
    );
}

/// A scratch directory (for a policy file) under the system temporary directory, removed when
/// dropped (even when the test fails).
fn scratch_dir(prefix: &str) -> tempfile::TempDir {
    tempfile::Builder::new().prefix(prefix).tempdir().unwrap()
}

#[test]
fn shared_directories_are_refused_for_root_s_files() {
    let scratch = scratch_dir("gmq-check-shared-");
    let policy = scratch.path().join("policy.toml");
    let policy_name = policy.display().to_string();
    for (dir, key) in [
        ("/tmp", "runtime_dir"),
        ("/tmp/", "runtime_dir"),
        ("/dev/shm", "runtime_dir"),
        ("/run", "state_dir"),
        ("/var/tmp", "state_dir"),
        ("/run/user/2001", "runtime_dir"),
    ] {
        std::fs::write(&policy, format!("[enforcement]\n{key} = \"{dir}\"\n")).unwrap();
        let out = check_config(&[&policy_name]);
        assert_eq!(out.status.code(), Some(1), "{dir}");
        assert!(
            text(&out.stderr).starts_with(&format!(
                "{policy_name}:2:{}: [enforcement] {key}: '{dir}' is a directory shared with other \
                 programs or users",
                key.len() + 4
            )),
            "{dir}: {}",
            text(&out.stderr)
        );
    }
}

#[test]
fn a_directory_others_can_write_on_this_machine_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let scratch = scratch_dir("gmq-check-here-");
    let sticky = scratch.path().join("sharedtmp");
    std::fs::create_dir(&sticky).unwrap();
    std::fs::set_permissions(&sticky, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let policy = scratch.path().join("policy.toml");
    let policy_name = policy.display().to_string();
    std::fs::write(
        &policy,
        format!("[enforcement]\nruntime_dir = \"{}\"\n", sticky.display()),
    )
    .unwrap();
    let out = check_config(&[&policy_name]);
    assert_eq!(out.status.code(), Some(1));
    // SAFETY: geteuid has no preconditions.
    let owner = if unsafe { libc::geteuid() } == 0 {
        "is writable by group or others (mode 1777)".to_string()
    } else {
        "is owned by uid".to_string()
    };
    let stderr = text(&out.stderr);
    assert!(
        stderr.starts_with(&format!(
            "{policy_name}:2:15: [enforcement] runtime_dir: {} {owner}",
            sticky.display()
        )),
        "{stderr}"
    );
    // check-config changes nothing.
    assert_eq!(
        std::fs::metadata(&sticky).unwrap().permissions().mode() & 0o7777,
        0o1777
    );
    // Under a directory anyone may write (/tmp): someone could make it before root does.
    std::fs::write(
        &policy,
        "[enforcement]\nstate_dir = \"/tmp/gmq-not-there/state\"\n",
    )
    .unwrap();
    let stderr = text(&check_config(&[&policy_name]).stderr);
    assert!(
        stderr.contains("/tmp/gmq-not-there/state is under /tmp, which is writable by group or others"),
        "{stderr}"
    );
}

/// A directory under a regular file can never be made: the watchdog's rule (crate::trusted_dir)
/// refuses what is not a directory above it too.
#[test]
fn a_directory_under_a_regular_file_is_refused() {
    let scratch = scratch_dir("gmq-check-file-");
    let file = scratch.path().join("file");
    std::fs::write(&file, "").unwrap();
    let policy = scratch.path().join("policy.toml");
    let policy_name = policy.display().to_string();
    let state_dir = file.join("state");
    std::fs::write(
        &policy,
        format!("[enforcement]\nstate_dir = \"{}\"\n", state_dir.display()),
    )
    .unwrap();
    let out = check_config(&[&policy_name]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(
        stderr.starts_with(&format!(
            "{policy_name}:2:13: [enforcement] state_dir: {} is under {}, which is not a directory \
             on this machine",
            state_dir.display(),
            file.display()
        )),
        "{stderr}"
    );
}

/// `--slurm-conf`: the site's slurm.conf, with the gres.conf and job_submit.lua beside it, against
/// the policy's shard unit; every mismatch named by file and line, status 1.
#[test]
fn the_slurm_layout_is_checked_against_the_shard_unit() {
    let policy = concat!(env!("CARGO_MANIFEST_DIR"), "/../../etc/gpu-mem-quota.toml");
    let scratch = scratch_dir("gmq-slurm-layout-");
    let dir = scratch.path();
    let slurm_conf = dir.join("slurm.conf");
    std::fs::write(
        &slurm_conf,
        "SelectType=select/cons_tres\nGresTypes=gpu,shard\nJobSubmitPlugins=lua\n\
         AccountingStorageTRES=gres/gpu,gres/shard\nProctrackType=proctrack/cgroup\n\
         TaskPlugin=task/cgroup,task/affinity\nPrologFlags=Alloc\n",
    )
    .unwrap();
    std::fs::write(dir.join("cgroup.conf"), "ConstrainDevices=yes\n").unwrap();
    let lua =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../slurm/job_submit.lua")).unwrap();
    let lua = lua.replace(
        "local POLICY = \"/etc/slurm/gpu-mem-quota.toml\"",
        &format!("local POLICY = \"{policy}\""),
    );
    std::fs::write(dir.join("job_submit.lua"), lua).unwrap();
    let conf = slurm_conf.display().to_string();

    let good_gres = "Name=gpu File=/dev/nvidia[0-1]\nName=shard Count=160 File=/dev/nvidia[0-1]\n";
    std::fs::write(dir.join("gres.conf"), good_gres).unwrap();
    let out = check_config(&[policy, "--slurm-conf", &conf]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let gres = dir.join("gres.conf").display().to_string();
    assert!(
        text(&out.stdout).starts_with(&format!(
            "{gres}:2: 80 shard(s) x 1G = 80G per GPU (2 GPU(s) of /dev/nvidia[0-1])\n"
        )),
        "{}",
        text(&out.stdout)
    );

    std::fs::write(
        dir.join("gres.conf"),
        "Name=gpu File=/dev/nvidia0\nName=shard Count=8 File=/dev/nvidia0\n",
    )
    .unwrap();
    let out = check_config(&[policy, "--slurm-conf", &conf]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr),
        format!(
            "{gres}:2: Count=8 gives 8 shard(s) x 1G = 8G per GPU, but the GPUs have 80G ([defaults] gpu_memory): write Count=80\n"
        )
    );
    // G9: without device constraints a job reaches every GPU of its node, watched or not.
    std::fs::write(dir.join("gres.conf"), good_gres).unwrap();
    std::fs::write(
        dir.join("cgroup.conf"),
        "CgroupPlugin=cgroup/v1\nConstrainDevices=no\n",
    )
    .unwrap();
    let out = check_config(&[policy, "--slurm-conf", &conf]);
    assert_eq!(out.status.code(), Some(1));
    let cgroup = dir.join("cgroup.conf").display().to_string();
    assert!(
        text(&out.stderr).starts_with(&format!(
            "{cgroup}:2: ConstrainDevices=no: a job can use every GPU of its node"
        )),
        "{}",
        text(&out.stderr)
    );

    // --slurm-conf is not a job option: it needs no --explain.
    let out = check_config(&[
        "etc/gpu-mem-quota.toml",
        "--slurm-conf",
        "/nonexistent/slurm.conf",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).starts_with("/nonexistent/slurm.conf: "),
        "{}",
        text(&out.stderr)
    );
}
