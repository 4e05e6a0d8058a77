//! Files a watchdog could not remove (it was SIGKILLed, the node crashed or rebooted) are removed by
//! the next watchdog that starts on the node, so node_exporter stops exporting a gone job's last
//! sample and the preemption registry stops listing it.
//!
//! The rule: a job's metrics file or registry entry without the job's runtime directory is a
//! leftover. It holds because a watchdog creates the runtime directory before either file and
//! removes both before the directory, and the plugin's exit hook removes the directory of a job whose
//! watchdog is dead. A runtime directory on tmpfs (`/run`) is gone after a reboot, and with it the
//! claim of every job that ran before.
//!
//! It also removes the hidden temporary files (gmq_node::textfile) of a writer that died between
//! create and rename, once older than [`STALE_TEMPORARY`]: in the runtime directory (the GPU
//! inventory), the registry and the collector directory (ours only: other exporters share it).
//! A live writer renames its temporary within milliseconds, so one a minute old is dead.

use std::fs;
use std::io;
use std::path::Path;
use std::time::Duration;

use gmq_core::metrics;
use gmq_core::node_files;
use gmq_node::preempt_registry::{Registry, REGISTRY_DIR};
use gmq_node::textfile;
use gmq_node::trusted_dir::TrustedDir;

/// Why a gone job's file was removed, after its name in the sweep's report.
const LEFT: &str = " (its job has left this node)";

/// A temporary file this old was left by a writer that died.
const STALE_TEMPORARY: Duration = Duration::from_secs(60);

/// Removes the leftovers of jobs that have no runtime directory, and stale temporary files; says
/// what it removed and why, one line each. Errors name the directory that could not be read and
/// why; the sweep goes on with the others.
pub fn sweep(runtime_dir: &Path, metrics_dir: Option<&Path>) -> (Vec<String>, Vec<String>) {
    let (mut removed, mut errors) = (Vec::new(), Vec::new());
    let gone = |job: u32| !node_files::job_dir(runtime_dir, job).exists();
    if let Some(dir) = metrics_dir {
        // Refused unless a real directory of root's that no one else can write (gmq_node::trusted_dir).
        match TrustedDir::open(dir).and_then(|open| metrics_files(dir).map(|files| (open, files))) {
            Ok((open, files)) => {
                for (name, _) in files.into_iter().filter(|(_, job)| gone(*job)) {
                    match textfile::remove_in(&open, &name) {
                        Ok(()) => removed.push(format!("metrics file {}{LEFT}", dir.join(&name).display())),
                        Err(e) => errors.push(format!("cannot remove a gone job's metrics file: {e}")),
                    }
                }
                let ours = |target: &str| metrics::job_of_file_name(target).is_some();
                sweep_temporaries(&open, &ours, &mut removed, &mut errors);
            }
            Err(e) => errors.push(format!("cannot read the collector directory: {e}")),
        }
    }
    match TrustedDir::open(runtime_dir) {
        Ok(open) => {
            let ours = |target: &str| target == node_files::INVENTORY_FILE;
            sweep_temporaries(&open, &ours, &mut removed, &mut errors);
        }
        // No runtime directory: nothing was ever left here, and the sweep creates nothing.
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => errors.push(format!("cannot read the runtime directory: {e}")),
    }
    let listed = Registry::open_existing(runtime_dir)
        .and_then(|r| r.map(|r| r.list().map(|entries| (r, entries))).transpose());
    match listed {
        Ok(None) => {}
        Ok(Some((registry, entries))) => {
            match TrustedDir::open(registry.dir()) {
                Ok(open) => sweep_temporaries(&open, &|_| true, &mut removed, &mut errors),
                Err(e) => errors.push(format!("cannot read the registry: {e}")),
            }
            for job in entries.iter().map(|e| e.job_id).filter(|job| gone(*job)) {
                match registry.remove(job) {
                    Ok(()) => removed.push(format!("registry entry of job {job}{LEFT}")),
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

/// Removes the stale temporaries of `dir` whose target is ours, saying so in `removed`/`errors`.
fn sweep_temporaries(
    dir: &TrustedDir,
    ours: &dyn Fn(&str) -> bool,
    removed: &mut Vec<String>,
    errors: &mut Vec<String>,
) {
    match textfile::remove_stale_temporaries(dir, ours, STALE_TEMPORARY) {
        Ok(names) => removed.extend(names.into_iter().map(|name| {
            format!(
                "temporary file {} (its writer died)",
                dir.path().join(name).display()
            )
        })),
        Err(e) => errors.push(format!(
            "cannot sweep the temporary files of {}: {e}",
            dir.path().display()
        )),
    }
}

/// Our files in the collector directory, with their jobs. Symlinks and directories are not ours.
fn metrics_files(dir: &Path) -> io::Result<Vec<(String, u32)>> {
    let named = |e: io::Error| io::Error::new(e.kind(), format!("{}: {e}", dir.display()));
    let mut files = Vec::new();
    for dirent in fs::read_dir(dir).map_err(named)? {
        let dirent = dirent.map_err(named)?;
        let Some(name) = dirent.file_name().to_str().map(str::to_string) else {
            continue;
        };
        let Some(job) = metrics::job_of_file_name(&name) else {
            continue;
        };
        if dirent.file_type().map_err(named)?.is_file() {
            files.push((name, job));
        }
    }
    Ok(files)
}
