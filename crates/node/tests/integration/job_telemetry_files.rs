//! The job's telemetry files, found through a fixture `/proc` whose `<pid>/cwd` links to a working
//! directory: what is read, and what is refused without being opened (a symlink, a FIFO, another
//! user's file, an oversize one).

use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use gmq_core::job_telemetry::{file_name, ReportedTask, Shown, MAX_FILE_BYTES, MAX_TASKS_SHOWN, SOURCE};
use gmq_node::telemetry::{read_job_telemetry, Reading, TelemetryReader};

const JOB: u32 = 12;

struct World {
    _scratch: tempfile::TempDir,
    proc_root: PathBuf,
    work: PathBuf,
    uid: u32,
}

impl World {
    fn new() -> World {
        let scratch = tempfile::Builder::new()
            .prefix("gmq-telemetry-")
            .tempdir()
            .unwrap();
        let proc_root = scratch.path().join("proc");
        let work = scratch.path().join("work");
        fs::create_dir_all(&proc_root).unwrap();
        fs::create_dir_all(&work).unwrap();
        World {
            proc_root,
            work,
            uid: nix::unistd::geteuid().as_raw(),
            _scratch: scratch,
        }
    }

    /// A process `pid` working in `dir`, in a namespace where it is `ns_pid` when given.
    fn process(&self, pid: u32, dir: &Path, ns_pid: Option<u32>) {
        let at = self.proc_root.join(pid.to_string());
        fs::create_dir_all(&at).unwrap();
        symlink(dir, at.join("cwd")).unwrap();
        let nspid = match ns_pid {
            Some(inner) => format!("NSpid:\t{pid}\t{inner}\n"),
            None => format!("NSpid:\t{pid}\n"),
        };
        fs::write(
            at.join("status"),
            format!("Name:\tpython\nUid:\t{0}\t{0}\t{0}\t{0}\n{nspid}", self.uid),
        )
        .unwrap();
    }

    fn read(&self, pids: &[u32]) -> Reading {
        read_job_telemetry(&self.proc_root, JOB, self.uid, pids)
    }
}

/// What python's `TelemetryWriter` writes for job `job_id`, process `pid`.
fn telemetry(job_id: u32, pid: u32, allocated: u64) -> String {
    format!(
        r#"{{"version": 1, "source": "job-reported", "job_id": {job_id}, "pid": {pid},
 "updated_at": "2026-11-30T06:00:00Z",
 "allocator": {{"allocated_bytes": {allocated}, "reserved_bytes": 40000, "peak_allocated_bytes": 39000,
   "peak_reserved_bytes": 40000, "num_alloc_retries": 2, "num_ooms": 1, "fragmentation": 0.25}},
 "controller": null}}
"#
    )
}

/// The failure lines that mention `what`.
fn failures_with<'a>(reading: &'a Reading, what: &str) -> Vec<&'a String> {
    reading.failures.iter().filter(|f| f.contains(what)).collect()
}

/// Nothing was read, and the one refusal says `why`.
fn assert_refused_once(reading: &Reading, why: &str) {
    assert!(reading.tasks.is_empty(), "{:?}", reading.tasks);
    assert_eq!(failures_with(reading, why).len(), 1, "{:?}", reading.failures);
}

#[test]
fn reads_each_task_in_a_shared_working_directory_once() {
    let world = World::new();
    world.process(100, &world.work, None);
    world.process(101, &world.work, None);
    fs::write(world.work.join(file_name(JOB, 0)), telemetry(JOB, 100, 30000)).unwrap();
    fs::write(world.work.join(file_name(JOB, 1)), telemetry(JOB, 101, 31000)).unwrap();
    // Another job's, the writer's temporary file, a file of a process not here (another node's
    // task on a shared filesystem): not shown, and nothing to complain about.
    fs::write(world.work.join(file_name(JOB + 1, 0)), telemetry(JOB + 1, 100, 1)).unwrap();
    fs::write(world.work.join(format!(".{}.tmp", file_name(JOB, 0))), "{").unwrap();
    fs::write(world.work.join(file_name(JOB, 2)), telemetry(JOB, 555, 1)).unwrap();

    let reading = world.read(&[101, 100, 999]);
    assert_eq!(reading.failures, Vec::<String>::new());
    let shown: Vec<(u32, u32, u64)> = reading
        .tasks
        .iter()
        .map(|t| (t.task, t.pid, t.allocator.allocated_bytes))
        .collect();
    assert_eq!(shown, vec![(0, 100, 30000), (1, 101, 31000)]);
    assert!(reading.tasks.iter().all(|t| t.source == SOURCE));
    assert_eq!(reading.tasks[0].allocator.fragmentation, 2500);
}

#[test]
fn a_pid_in_a_container_is_matched_in_its_own_namespace() {
    let world = World::new();
    world.process(4242, &world.work, Some(7));
    fs::write(world.work.join(file_name(JOB, 0)), telemetry(JOB, 7, 30000)).unwrap();
    let reading = world.read(&[4242]);
    assert_eq!(reading.tasks.len(), 1, "{:?}", reading.failures);
    assert_eq!(reading.tasks[0].pid, 7);
}

#[test]
fn a_symlink_is_never_followed() {
    let world = World::new();
    world.process(100, &world.work, None);
    let elsewhere = world.work.parent().unwrap().join("elsewhere.json");
    fs::write(&elsewhere, telemetry(JOB, 100, 30000)).unwrap();
    symlink(&elsewhere, world.work.join(file_name(JOB, 0))).unwrap();
    let reading = world.read(&[100]);
    assert_refused_once(&reading, "not a regular file: not read");
}

#[test]
fn a_fifo_is_refused_without_blocking() {
    let world = World::new();
    world.process(100, &world.work, None);
    nix::unistd::mkfifo(&world.work.join(file_name(JOB, 0)), nix::sys::stat::Mode::S_IRWXU).unwrap();
    // A blocking open of a FIFO with no writer would never return: read on a thread, and fail
    // the test instead of hanging it.
    let (tx, rx) = mpsc::channel();
    let (proc_root, uid) = (world.proc_root.clone(), world.uid);
    std::thread::spawn(move || tx.send(read_job_telemetry(&proc_root, JOB, uid, &[100])).unwrap());
    let reading = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("reading a FIFO blocked");
    assert_refused_once(&reading, "not a regular file: not read");
}

#[test]
fn an_oversize_file_is_refused() {
    let world = World::new();
    world.process(100, &world.work, None);
    let mut text = telemetry(JOB, 100, 30000);
    text.push_str(&" ".repeat(MAX_FILE_BYTES));
    fs::write(world.work.join(file_name(JOB, 0)), text).unwrap();
    let reading = world.read(&[100]);
    assert_refused_once(&reading, "larger than 65536 bytes");
}

#[test]
fn another_users_file_is_refused() {
    let world = World::new();
    world.process(100, &world.work, None);
    let path = world.work.join(file_name(JOB, 0));
    fs::write(&path, telemetry(JOB, 100, 30000)).unwrap();
    // As root the file is given away; otherwise the job's user is said to be someone else.
    let job_uid = if world.uid == 0 {
        std::os::unix::fs::chown(&path, Some(4242), None).unwrap();
        0
    } else {
        world.uid + 1
    };
    let reading = read_job_telemetry(&world.proc_root, JOB, job_uid, &[100]);
    assert_refused_once(&reading, "owned by uid");
}

#[test]
fn a_malformed_or_foreign_file_is_refused_naming_file_and_key() {
    let world = World::new();
    world.process(100, &world.work, None);
    fs::write(world.work.join(file_name(JOB, 0)), telemetry(JOB, 100, 99999)).unwrap();
    fs::write(world.work.join(file_name(JOB, 1)), telemetry(JOB + 1, 100, 1)).unwrap();
    let reading = world.read(&[100]);
    assert!(reading.tasks.is_empty());
    let file0 = world.work.join(file_name(JOB, 0)).display().to_string();
    let file1 = world.work.join(file_name(JOB, 1)).display().to_string();
    assert_eq!(
        reading.failures,
        vec![
            format!("{file0}: allocator.allocated_bytes: more than reserved_bytes"),
            format!("{file1}: job_id: not job {JOB}, refused"),
        ]
    );
}

/// The reader's answer at `at`, waiting for the read it starts (or that runs) to end.
fn settled(reader: &mut TelemetryReader, at: Instant, pids: &[u32]) -> (Vec<ReportedTask>, Vec<String>) {
    let (shown, said) = settled_shown(reader, at, pids);
    (shown.tasks, said)
}

fn settled_shown(reader: &mut TelemetryReader, at: Instant, pids: &[u32]) -> (Shown, Vec<String>) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(answer) = reader.poll(at, pids) {
            return answer;
        }
        assert!(Instant::now() < deadline, "the read never ended");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn the_reader_reads_at_its_pace_and_says_each_failure_once() {
    let world = World::new();
    world.process(100, &world.work, None);
    fs::write(world.work.join(file_name(JOB, 0)), "{}").unwrap();
    let every = Duration::from_secs(15);
    let mut reader = TelemetryReader::new(world.proc_root.clone(), JOB, world.uid, every);
    let start = Instant::now();
    // The read runs beside the caller: the first poll starts it and says nothing yet.
    assert!(reader.poll(start, &[100]).is_none());
    let (tasks, said) = settled(&mut reader, start, &[100]);
    assert!(tasks.is_empty());
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(said[0].contains(": version: missing"), "{said:?}");
    // Not due: nothing starts.
    for _ in 0..3 {
        assert!(reader.poll(start + Duration::from_secs(5), &[100]).is_none());
        std::thread::sleep(Duration::from_millis(20));
    }
    let (_, said) = settled(&mut reader, start + every, &[100]);
    assert!(said.is_empty(), "said again: {said:?}");
    // Fixed: shown at the next read.
    fs::write(world.work.join(file_name(JOB, 0)), telemetry(JOB, 100, 1)).unwrap();
    let (tasks, said) = settled(&mut reader, start + every * 2, &[100]);
    assert_eq!((tasks.len(), said.len()), (1, 0));
    // A process that is gone is no failure; without processes there is nothing, and a new one is
    // read at once.
    let (tasks, said) = settled(&mut reader, start + every * 3, &[31337]);
    assert_eq!((tasks.len(), said.len()), (0, 0));
    assert_eq!(
        reader
            .poll(start + every * 3, &[])
            .map(|(t, s)| (t.tasks.len(), t.not_shown, s.len())),
        Some((0, 0, 0))
    );
    let (tasks, _) = settled(&mut reader, start + every * 3, &[100]);
    assert_eq!(tasks.len(), 1);
}

/// K3: one process's flood of files (any task number) shows as its lowest task, the rest one
/// count; many processes show as the capped lowest task numbers. Broken files cost no more than
/// the failure lines ever logged.
#[test]
fn a_flood_of_telemetry_files_is_shown_capped_and_counted() {
    let world = World::new();
    world.process(100, &world.work, None);
    for task in (7..2_007).rev() {
        fs::write(
            world.work.join(file_name(JOB, task)),
            telemetry(JOB, 100, task.into()),
        )
        .unwrap();
    }
    let reading = world.read(&[100]);
    assert_eq!(reading.failures, Vec::<String>::new());
    let shown: Vec<(u32, u32)> = reading.tasks.iter().map(|t| (t.task, t.pid)).collect();
    assert_eq!(shown, vec![(7, 100)]);
    assert_eq!(reading.not_shown, 1_999);

    // 40 processes, one file each, in a directory of their own: the lowest task numbers.
    let many = world.work.join("many");
    fs::create_dir(&many).unwrap();
    let pids: Vec<u32> = (200..240).collect();
    for &pid in &pids {
        world.process(pid, &many, None);
        fs::write(many.join(file_name(JOB, 1_000 - pid)), telemetry(JOB, pid, 1)).unwrap();
    }
    let reading = world.read(&pids);
    let tasks: Vec<u32> = reading.tasks.iter().map(|t| t.task).collect();
    assert_eq!(tasks, (761..761 + MAX_TASKS_SHOWN as u32).collect::<Vec<_>>());
    assert_eq!(reading.not_shown, 40 - MAX_TASKS_SHOWN as u64);

    // Broken files: at most the lines that could ever be logged, kept.
    let broken = world.work.join("broken");
    fs::create_dir(&broken).unwrap();
    world.process(300, &broken, None);
    for task in 0..500 {
        fs::write(broken.join(file_name(JOB, task)), "{").unwrap();
    }
    let reading = world.read(&[300]);
    assert!(reading.tasks.is_empty());
    assert_eq!(reading.failures.len(), 64);

    // The reader hands on the count.
    let mut reader = TelemetryReader::new(world.proc_root.clone(), JOB, world.uid, Duration::from_secs(15));
    let start = Instant::now();
    assert!(reader.poll(start, &[100]).is_none());
    let (shown, _) = settled_shown(&mut reader, start, &[100]);
    assert_eq!((shown.tasks.len(), shown.not_shown), (1, 1_999));
}
