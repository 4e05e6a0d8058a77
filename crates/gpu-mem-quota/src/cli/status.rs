//! `gpu-mem-quota status`: the jobs watched on this node, per GPU used / quota / peak / state,
//! from the watchdogs' status files. Users see their own jobs (the files' permissions decide; a
//! user finds their jobs from their own processes, since `jobs/` cannot be listed).
use std::path::Path;
use std::process::ExitCode;
use std::time::{SystemTime, UNIX_EPOCH};

use super::args::{Opt, Spec};
use crate::report;
use gmq_core::config::{self, Enforcement, LoadError};

const DEFAULT_CONFIG: &str = "/etc/slurm/gpu-mem-quota.toml";

const USAGE: &str = "\
Usage: gpu-mem-quota status [--json] [--config PATH]

Lists the jobs whose GPU memory is watched on this node, a row per job and GPU: memory used now,
the quota, the peak so far, and the state (ok, warn, over-quota, acted). Read from the watchdogs'
status files under the policy's runtime_dir; users see their own jobs, root sees all.

  --config PATH  the policy (default /etc/slurm/gpu-mem-quota.toml), for runtime_dir
  --json         as JSON: {\"jobs\":[...],\"without_status\":[...],\"broken\":[...],\"unreadable\":N}
  -h, --help     this help
";

pub(crate) const SPEC: Spec = Spec {
    command: "status",
    options: &[Opt::value("config"), Opt::flag("json")],
    max_positional: 0,
    help: || USAGE.to_string(),
    error_shows_help: true,
};

pub(super) fn run(argv: Vec<String>) -> ExitCode {
    let parsed = match SPEC.parse(&argv) {
        Ok(parsed) => parsed,
        Err(status) => return status,
    };
    let path = parsed.value("config");
    let runtime_dir = match config::load(Path::new(path.unwrap_or(DEFAULT_CONFIG))) {
        Ok(policy) => policy.enforcement.runtime_dir,
        // A policy only root may read, or none on this node: the built-in place is where the
        // watchdogs write unless a policy said otherwise, so look there rather than give up.
        Err(e @ (LoadError::Missing { .. } | LoadError::Unreadable { .. })) if path.is_none() => {
            let fallback = Enforcement::default().runtime_dir;
            eprintln!("gpu-mem-quota status: {e}; looking in {}", fallback.display());
            fallback
        }
        Err(e) => {
            eprintln!("gpu-mem-quota status: {e}");
            return ExitCode::from(1);
        }
    };
    let root = nix::unistd::geteuid().is_root();
    let runtime_dir = runtime_dir.as_path();
    // A user may not list `jobs/` (root 0711): they look up the jobs their own processes are in.
    let node = match report::read_node(runtime_dir, root) {
        Err(e) if !root && e.kind() == std::io::ErrorKind::PermissionDenied => {
            let uid = nix::unistd::getuid().as_raw();
            report::read_jobs(
                runtime_dir,
                &report::jobs_of_user(Path::new("/proc"), Path::new("/sys/fs/cgroup"), uid),
            )
        }
        other => other,
    };
    let node = match node {
        Ok(node) => node,
        Err(e) => {
            eprintln!("gpu-mem-quota status: cannot read {}: {e}", runtime_dir.display());
            return ExitCode::from(1);
        }
    };
    if parsed.flag("json") {
        println!("{}", report::node_json(&node));
    } else {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        print!("{}", report::node_text(&node, now));
    }
    ExitCode::SUCCESS
}
