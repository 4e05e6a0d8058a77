//! Atomic textfile writes on a real temporary directory.

use std::fs;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

use gpu_mem_quota::textfile::{remove, write_atomically};

/// A fresh directory per test, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> TempDir {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("gmq-textfile-{}-{n}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir(&dir).unwrap();
        TempDir(dir)
    }

    fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(&self.0)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        names
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

#[test]
fn writes_replaces_and_leaves_nothing_else() {
    let dir = TempDir::new();
    write_atomically(&dir.0, "job_1.prom", "a 1\n").unwrap();
    write_atomically(&dir.0, "job_1.prom", "a 2\n").unwrap();
    let path = dir.0.join("job_1.prom");
    assert_eq!(fs::read_to_string(&path).unwrap(), "a 2\n");
    assert_eq!(fs::metadata(&path).unwrap().permissions().mode() & 0o7777, 0o644);
    assert_eq!(dir.names(), ["job_1.prom"]);
}

#[test]
fn a_stale_temporary_file_is_replaced() {
    let dir = TempDir::new();
    fs::write(dir.0.join(".job_1.prom.tmp"), "half a fi").unwrap();
    write_atomically(&dir.0, "job_1.prom", "a 1\n").unwrap();
    assert_eq!(fs::read_to_string(dir.0.join("job_1.prom")).unwrap(), "a 1\n");
    assert_eq!(dir.names(), ["job_1.prom"]);
}

#[test]
fn symlinks_are_never_written_through() {
    let dir = TempDir::new();
    let victim = dir.0.join("victim");
    fs::write(&victim, "precious").unwrap();
    // A link planted where the temporary file goes, and one at the target itself.
    symlink(&victim, dir.0.join(".job_1.prom.tmp")).unwrap();
    symlink(&victim, dir.0.join("job_1.prom")).unwrap();
    write_atomically(&dir.0, "job_1.prom", "a 1\n").unwrap();
    assert_eq!(fs::read_to_string(&victim).unwrap(), "precious");
    let target = dir.0.join("job_1.prom");
    assert!(!fs::symlink_metadata(&target).unwrap().file_type().is_symlink());
    assert_eq!(fs::read_to_string(&target).unwrap(), "a 1\n");
    assert_eq!(dir.names(), ["job_1.prom", "victim"]);
}

#[test]
fn remove_is_quiet_about_missing_files() {
    let dir = TempDir::new();
    write_atomically(&dir.0, "job_1.prom", "a 1\n").unwrap();
    remove(&dir.0, "job_1.prom").unwrap();
    remove(&dir.0, "job_1.prom").unwrap();
    assert!(dir.names().is_empty());
}

#[test]
fn only_plain_names_are_accepted() {
    let dir = TempDir::new();
    for bad in [
        "",
        ".",
        "..",
        "../x.prom",
        "a/b.prom",
        ".hidden.prom",
        "nul\0.prom",
    ] {
        let e = write_atomically(&dir.0, bad, "x").unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput, "{bad:?}");
        assert!(e.to_string().contains("not a plain file name"), "{e}");
        assert_eq!(
            remove(&dir.0, bad).unwrap_err().kind(),
            std::io::ErrorKind::InvalidInput
        );
    }
    assert!(dir.names().is_empty());
}

#[test]
fn a_missing_directory_is_an_error_not_a_panic() {
    let dir = TempDir::new();
    let gone = dir.0.join("absent");
    let e = write_atomically(&gone, "job_1.prom", "x").unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::NotFound);
}
