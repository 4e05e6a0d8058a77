//! Files a watchdog could not remove (it was SIGKILLed, the node crashed or rebooted) are removed by
//! the next watchdog that starts on the node, so node_exporter stops exporting a gone job's last
//! sample and the preemption registry stops listing it.
//!
//! The rule: a job's metrics file or registry entry without the job's runtime directory is a
//! leftover. It holds because a watchdog creates the runtime directory before either file and
//! removes both before the directory, and the plugin's exit hook removes the directory of a job whose
//! watchdog is dead. A runtime directory on tmpfs (`/run`) is gone after a reboot, and with it the
//! claim of every job that ran before.

use std::fs;
use std::io;
use std::path::Path;

use crate::metrics;
use crate::preempt::registry::{Registry, REGISTRY_DIR};
use crate::runtime;
use crate::textfile;

/// Removes the leftovers of jobs that have no runtime directory; says what it removed, one line
/// each. Errors name the directory that could not be read; the sweep goes on with the other one.
pub fn sweep(runtime_dir: &Path, metrics_dir: Option<&Path>) -> (Vec<String>, Vec<String>) {
    let (mut removed, mut errors) = (Vec::new(), Vec::new());
    let gone = |job: u32| !runtime::job_dir(runtime_dir, job).exists();
    if let Some(dir) = metrics_dir {
        match metrics_files(dir) {
            Ok(files) => {
                for (name, _) in files.into_iter().filter(|(_, job)| gone(*job)) {
                    match textfile::remove(dir, &name) {
                        Ok(()) => removed.push(format!("metrics file {}", dir.join(&name).display())),
                        Err(e) => errors.push(format!("cannot remove {}: {e}", dir.join(&name).display())),
                    }
                }
            }
            Err(e) => errors.push(format!("cannot read {}: {e}", dir.display())),
        }
    }
    let listed = Registry::open_existing(runtime_dir)
        .and_then(|r| r.map(|r| r.list().map(|entries| (r, entries))).transpose());
    match listed {
        Ok(None) => {}
        Ok(Some((registry, entries))) => {
            for job in entries.iter().map(|e| e.job_id).filter(|job| gone(*job)) {
                match registry.remove(job) {
                    Ok(()) => removed.push(format!("registry entry of job {job}")),
                    Err(e) => errors.push(format!("cannot remove the registry entry of job {job}: {e}")),
                }
            }
        }
        Err(e) => errors.push(format!(
            "cannot read {}: {e}",
            runtime_dir.join(REGISTRY_DIR).display()
        )),
    }
    (removed, errors)
}

/// Our files in the collector directory, with their jobs. Symlinks and directories are not ours.
fn metrics_files(dir: &Path) -> io::Result<Vec<(String, u32)>> {
    let mut files = Vec::new();
    for dirent in fs::read_dir(dir)? {
        let dirent = dirent?;
        let Some(name) = dirent.file_name().to_str().map(str::to_string) else {
            continue;
        };
        let Some(job) = metrics::job_of_file_name(&name) else {
            continue;
        };
        if dirent.file_type()?.is_file() {
            files.push((name, job));
        }
    }
    Ok(files)
}
