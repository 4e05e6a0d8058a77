//! Atomic textfile writes on a real temporary directory.

use std::fs;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::Path;
use std::sync::atomic::Ordering;

use std::time::Duration;

use gmq_node::textfile::{remove, remove_stale_temporaries, update_locked, write_atomically};
use gmq_node::trusted_dir::TrustedDir;

/// A fresh directory per test, removed when dropped (even when the test fails).
struct TempDir(tempfile::TempDir);

impl TempDir {
    fn new() -> TempDir {
        TempDir(
            tempfile::Builder::new()
                .prefix("gmq-textfile-")
                .tempdir()
                .unwrap(),
        )
    }

    fn path(&self) -> &Path {
        self.0.path()
    }

    fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(self.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        names
    }
}

#[test]
fn writes_replaces_and_leaves_nothing_else() {
    let dir = TempDir::new();
    write_atomically(dir.path(), "job_1.prom", "a 1\n").unwrap();
    write_atomically(dir.path(), "job_1.prom", "a 2\n").unwrap();
    let path = dir.path().join("job_1.prom");
    assert_eq!(fs::read_to_string(&path).unwrap(), "a 2\n");
    assert_eq!(fs::metadata(&path).unwrap().permissions().mode() & 0o7777, 0o644);
    assert_eq!(dir.names(), ["job_1.prom"]);
}

#[test]
fn a_stale_temporary_file_is_left_to_the_sweep_which_removes_it_once_old() {
    let dir = TempDir::new();
    // Left by a writer of an earlier version (fixed name) and by one that died (numbered name).
    fs::write(dir.path().join(".job_1.prom.tmp"), "half a fi").unwrap();
    fs::write(dir.path().join(".job_1.prom.99999.3.tmp"), "half a fi").unwrap();
    fs::write(dir.path().join(".other_exporter.prom.tmp"), "not ours").unwrap();
    write_atomically(dir.path(), "job_1.prom", "a 1\n").unwrap();
    assert_eq!(
        fs::read_to_string(dir.path().join("job_1.prom")).unwrap(),
        "a 1\n"
    );
    // A writer never removes another's temporary (it may be a live writer's).
    assert_eq!(
        dir.names(),
        [
            ".job_1.prom.99999.3.tmp",
            ".job_1.prom.tmp",
            ".other_exporter.prom.tmp",
            "job_1.prom"
        ]
    );
    let open = TrustedDir::open(dir.path()).unwrap();
    let ours = |target: &str| target.starts_with("job_");
    // Younger than the age given: kept.
    assert!(remove_stale_temporaries(&open, &ours, Duration::from_secs(3600))
        .unwrap()
        .is_empty());
    let mut removed = remove_stale_temporaries(&open, &ours, Duration::ZERO).unwrap();
    removed.sort();
    assert_eq!(removed, [".job_1.prom.99999.3.tmp", ".job_1.prom.tmp"]);
    assert_eq!(dir.names(), [".other_exporter.prom.tmp", "job_1.prom"]);
}

#[test]
fn symlinks_are_never_written_through() {
    let dir = TempDir::new();
    let victim = dir.path().join("victim");
    fs::write(&victim, "precious").unwrap();
    // Links planted where temporary files go (the old fixed name, and the next numbered names of
    // this process), and one at the target itself.
    symlink(&victim, dir.path().join(".job_1.prom.tmp")).unwrap();
    for n in 0..20 {
        let name = format!(".job_1.prom.{}.{n}.tmp", std::process::id());
        symlink(&victim, dir.path().join(name)).unwrap();
    }
    symlink(&victim, dir.path().join("job_1.prom")).unwrap();
    write_atomically(dir.path(), "job_1.prom", "a 1\n").unwrap();
    assert_eq!(fs::read_to_string(&victim).unwrap(), "precious");
    let target = dir.path().join("job_1.prom");
    assert!(!fs::symlink_metadata(&target).unwrap().file_type().is_symlink());
    assert_eq!(fs::read_to_string(&target).unwrap(), "a 1\n");
    let hidden = dir.names().into_iter().filter(|n| n.starts_with('.')).count();
    assert_eq!(hidden, 21, "only the planted links are left: {:?}", dir.names());
}

#[test]
fn remove_is_quiet_about_missing_files() {
    let dir = TempDir::new();
    write_atomically(dir.path(), "job_1.prom", "a 1\n").unwrap();
    remove(dir.path(), "job_1.prom").unwrap();
    remove(dir.path(), "job_1.prom").unwrap();
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
        let e = write_atomically(dir.path(), bad, "x").unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput, "{bad:?}");
        assert!(e.to_string().contains("not a plain file name"), "{e}");
        assert_eq!(
            remove(dir.path(), bad).unwrap_err().kind(),
            std::io::ErrorKind::InvalidInput
        );
    }
    assert!(dir.names().is_empty());
}

#[test]
fn a_missing_directory_is_an_error_not_a_panic() {
    let dir = TempDir::new();
    let gone = dir.path().join("absent");
    let e = write_atomically(&gone, "job_1.prom", "x").unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::NotFound);
}

#[test]
fn a_directory_someone_else_could_change_is_refused_and_left_as_it_is() {
    let dir = TempDir::new();
    let real = dir.path().join("real");
    fs::create_dir(&real).unwrap();
    symlink(&real, dir.path().join("link")).unwrap();
    let e = write_atomically(&dir.path().join("link"), "job_1.prom", "x").unwrap_err();
    assert!(
        e.to_string()
            .ends_with("link is a symlink: refused, left as it is"),
        "{e}"
    );
    let shared = dir.path().join("shared");
    fs::create_dir(&shared).unwrap();
    for mode in [0o1777, 0o777, 0o775, 0o1755] {
        fs::set_permissions(&shared, fs::Permissions::from_mode(mode)).unwrap();
        let e = write_atomically(&shared, "job_1.prom", "x").unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::PermissionDenied, "{mode:o}");
        assert!(
            e.to_string().contains("shared: refused") || e.to_string().contains("refused, left"),
            "{e}"
        );
        let now = fs::symlink_metadata(&shared).unwrap().permissions().mode() & 0o7777;
        assert_eq!(now, mode, "the mode must be left as it was");
    }
    assert!(fs::read_dir(&real).unwrap().next().is_none());
    assert!(fs::read_dir(&shared).unwrap().next().is_none());
}

/// Many writers of one file at once, as every watchdog starting on a node writes the GPU
/// inventory: threads of this process, and other processes (this test binary run again as a
/// writer, see `race_writer`). Every write must succeed, and a reader must always find one
/// complete version, never a missing, empty or mixed file.
#[test]
fn many_writers_of_one_file_never_disturb_each_other() {
    const PROCESSES: usize = 4;
    const THREADS: usize = 4;
    let dir = TempDir::new();
    write_atomically(dir.path(), "gpus", &version("start")).unwrap();
    let children: Vec<_> = (0..PROCESSES)
        .map(|p| {
            std::process::Command::new(std::env::current_exe().unwrap())
                .args([
                    "--exact",
                    "metrics_textfile::race_writer",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(RACE_DIR, dir.path())
                .env(RACE_WRITER, format!("process{p}"))
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let (path, stop) = (dir.path().join("gpus"), stop.clone());
        std::thread::spawn(move || {
            let mut reads = 0;
            while !stop.load(Ordering::Relaxed) {
                let text = fs::read_to_string(&path).expect("the file is always there");
                assert!(is_one_version(&text), "a torn read: {text:?}");
                reads += 1;
            }
            reads
        })
    };
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let dir = dir.path().to_path_buf();
            std::thread::spawn(move || write_many(&dir, &format!("thread{t}")))
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success() && String::from_utf8_lossy(&out.stdout).contains("1 passed"),
            "a writer process failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    stop.store(true, Ordering::Relaxed);
    assert!(reader.join().unwrap() > 0);
    assert!(is_one_version(
        &fs::read_to_string(dir.path().join("gpus")).unwrap()
    ));
    // Nothing left beside it: every writer renamed its own temporary.
    assert_eq!(dir.names(), ["gpus"]);
}

const RACE_DIR: &str = "GMQ_TEXTFILE_RACE_DIR";
const RACE_WRITER: &str = "GMQ_TEXTFILE_RACE_WRITER";
const WRITES: usize = 300;

/// One writer process of `many_writers_of_one_file_never_disturb_each_other`; does nothing when
/// run as an ordinary test.
#[test]
fn race_writer() {
    if let (Some(dir), Some(writer)) = (std::env::var_os(RACE_DIR), std::env::var(RACE_WRITER).ok()) {
        write_many(std::path::Path::new(&dir), &writer);
    }
}

fn write_many(dir: &std::path::Path, writer: &str) {
    for i in 0..WRITES {
        write_atomically(dir, "gpus", &version(&format!("{writer}-{i}")))
            .unwrap_or_else(|e| panic!("{writer} write {i}: {e}"));
    }
}

/// A version of the file: many lines, all naming the same writer and write, long enough that a
/// torn write would show.
fn version(tag: &str) -> String {
    (0..64)
        .map(|gpu| format!("{gpu} GPU-{tag} 85899345920\n"))
        .collect()
}

fn is_one_version(text: &str) -> bool {
    let tag = text
        .lines()
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .unwrap_or("");
    !tag.is_empty() && text == version(tag.trim_start_matches("GPU-"))
}

#[test]
fn locked_updates_from_several_writers_lose_nothing() {
    // Watchdogs of several jobs add to the node's event counters at once.
    let dir = TempDir::new();
    let writers: Vec<_> = (0..4)
        .map(|_| {
            let path = dir.path().to_path_buf();
            std::thread::spawn(move || {
                for _ in 0..25 {
                    update_locked(&path, "count.prom", |old| {
                        let n: u32 = old.trim().parse().unwrap_or(0);
                        format!("{}\n", n + 1)
                    })
                    .unwrap();
                }
            })
        })
        .collect();
    for writer in writers {
        writer.join().unwrap();
    }
    assert_eq!(
        fs::read_to_string(dir.path().join("count.prom")).unwrap(),
        "100\n"
    );
    // The lock file stays, root's only, and is no .prom the collector would read.
    let lock = fs::metadata(dir.path().join("count.prom.lock")).unwrap();
    assert_eq!(lock.permissions().mode() & 0o777, 0o600);
}

#[test]
fn a_locked_update_does_not_follow_a_symlink() {
    let dir = TempDir::new();
    let elsewhere = TempDir::new();
    fs::write(elsewhere.path().join("target"), "secret\n").unwrap();
    symlink(elsewhere.path().join("target"), dir.path().join("count.prom")).unwrap();
    assert!(update_locked(dir.path(), "count.prom", |old| format!("{old}1\n")).is_err());
    assert_eq!(
        fs::read_to_string(elsewhere.path().join("target")).unwrap(),
        "secret\n"
    );
}
