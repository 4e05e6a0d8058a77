//! `SlurmTools::sacct` against a fake `sacct` beside `scontrol`: exact argv, clean environment,
//! and the failure a cluster without accounting gives.

use std::fs;
use std::process::Command;
use std::time::Duration;

use gmq_commands::report::{explain_failure, job_reports, parse_rows, Query};
use gmq_core::slurm_text::CtlError;
use gmq_node::slurmctl::{Backoff, SlurmTools};

/// A directory with a fake `sacct` that logs its argv (NUL separated) and environment, then runs
/// `body`; installed by another process so that exec never meets ETXTBSY. The directory is removed
/// when the returned guard is dropped (even when the test fails).
fn fake_sacct(test: &str, body: &str) -> (tempfile::TempDir, SlurmTools) {
    let scratch = tempfile::Builder::new()
        .prefix(&format!("gmq-sacct-{test}-"))
        .tempdir()
        .unwrap();
    // Named in single quotes in the script: tempfile's random suffix is letters and digits.
    let dir = scratch.path();
    let script = format!(
        "#!/bin/sh\nprintf '%s\\0' \"$@\" > '{0}/argv'\nenv > '{0}/env'\n{body}\n",
        dir.display()
    );
    let source = dir.join(".sacct.src");
    fs::write(&source, script).unwrap();
    let installed = Command::new("/usr/bin/install")
        .args(["-m", "0755"])
        .arg(&source)
        .arg(dir.join("sacct"))
        .status()
        .unwrap();
    assert!(installed.success());
    let mut tools = SlurmTools::in_dir(dir).with_slurm_conf("/lab/slurm.conf");
    tools.timeout = Duration::from_secs(5);
    tools.backoff = Backoff {
        pauses: vec![Duration::from_millis(1)],
    };
    (scratch, tools)
}

#[test]
fn runs_sacct_beside_scontrol_with_our_argv() {
    let row = "4242|4242|bob|chem|COMPLETED|2024-06-11T08:00:00|2024-06-11T09:00:00|gpu02||gpu-mem-quota:v1{gpu02/0:q=40G,g0=30G,t=1}";
    let (scratch, tools) = fake_sacct("ok", &format!("echo '{row}'"));
    let dir = scratch.path();
    assert_eq!(tools.sacct_path(), dir.join("sacct"));
    let query = Query::Job("4242".into());
    let out = tools.sacct(&query.sacct_args()).unwrap();
    let argv = fs::read_to_string(dir.join("argv")).unwrap();
    let argv: Vec<&str> = argv.trim_end_matches('\0').split('\0').collect();
    assert_eq!(argv, query.sacct_args());
    let env = fs::read_to_string(dir.join("env")).unwrap();
    assert!(env.contains("SLURM_CONF=/lab/slurm.conf\n"), "{env}");
    let jobs = job_reports(&parse_rows(&out).unwrap());
    assert_eq!(jobs[0].totals().unwrap().peak, 30 << 30);
}

#[test]
fn accounting_switched_off_is_a_refusal_we_can_explain() {
    let (_dir, tools) = fake_sacct(
        "disabled",
        "echo 'sacct: error: Slurm accounting storage is disabled' >&2\nexit 1",
    );
    let error = tools.sacct(&Query::Job("1".into()).sacct_args()).unwrap_err();
    let CtlError::Refused { message, .. } = &error else {
        panic!("{error:?}");
    };
    assert!(explain_failure(message).unwrap().contains("not configured"));
}
