//! `SlurmTools` against fake `scontrol` / `scancel` / `squeue` shell scripts: exact argv, clean environment,
//! retries, refusals, timeouts that kill the whole process group, absent programs, garbage output.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use gmq_core::slurm_text::{CtlError, Refusal};
use gmq_node::slurmctl::{Backoff, SlurmTools, SAFE_PATH};

/// squeue's line for job 42 (`SQUEUE_FORMAT`).
const SQUEUE_42: &str = "42|alice|2001|100|physics|normal|RUNNING|1|1|1|2026-11-30T05:48:03|gpu|vm|1|";

/// squeue's line for job 42's whole record (`RECORD_FORMAT`), with an AdminComment.
const RECORD_42: &str = "42|alice|2001|100|physics|normal|RUNNING|1|1|1|2026-11-30T05:48:03|gpu|vm|1|0|vm|gres:shard:8|cpu=1,gres/shard=8|N/A|note by ops|";

/// The `--Format` of [`RECORD_42`].
const RECORD_FORMAT: &str = "--Format=JobID:|,UserName:|,UserID:|,PriorityLong:|,Account:|,QOS:|,State:|,\
Requeue:|,RestartCnt:|,BatchFlag:|,StartTime:|,Partition:|,NodeList:|,NumNodes:|,\
exit_code:|,BatchHost:|,tres-per-node:|,tres-alloc:|,HetJobId:|,admin_comment:|";

/// How long a fake that must not hang may take, generously (the machine may be busy).
const PROMPT: Duration = Duration::from_secs(5);

/// Slack on top of a timeout, or for a call that must not wait for its fake's child (which sleeps
/// 60 s): wide enough for a busy machine, far below what the mistake would cost.
const SLACK: Duration = Duration::from_secs(2);

/// A directory with fake `scontrol` and `scancel` that log each call's argv to `argv` (NUL
/// separated, last call) and count calls in `calls`, then run a test's shell body. Removed when
/// dropped (even when the test fails).
struct Fakes {
    dir: PathBuf,
    _scratch: tempfile::TempDir,
}

impl Fakes {
    fn new(test: &str) -> Fakes {
        // The scripts name it in single quotes: tempfile's random suffix is letters and digits.
        let scratch = tempfile::Builder::new()
            .prefix(&format!("slurmctl-{test}-"))
            .tempdir()
            .unwrap();
        Fakes {
            dir: scratch.path().to_path_buf(),
            _scratch: scratch,
        }
    }

    /// Writes the fake `name` with `body` after the logging preamble; `$dir` is the directory.
    fn write(&self, name: &str, body: &str) -> &Fakes {
        let script = format!(
            "#!/bin/sh\ndir='{}'\nprintf '%s\\0' \"$@\" > \"$dir/argv\"\necho call >> \"$dir/calls\"\n{body}\n",
            self.dir.display()
        );
        // Written elsewhere and installed by another process, so no descriptor open for writing
        // in this (multi-threaded) test process can make exec fail with ETXTBSY.
        let source = self.dir.join(format!(".{name}.src"));
        fs::write(&source, script).unwrap();
        let installed = Command::new("/usr/bin/install")
            .args(["-m", "0755"])
            .arg(&source)
            .arg(self.dir.join(name))
            .status()
            .unwrap();
        assert!(installed.success());
        self
    }

    /// Tools pointed at the fakes: 4 attempts 1 ms apart, each allowed [`PROMPT`] (a fake shell
    /// script on a busy machine can take more than a second to start; the timeout test sets its own).
    fn tools(&self) -> SlurmTools {
        let mut tools = SlurmTools::in_dir(&self.dir);
        tools.timeout = PROMPT;
        tools.backoff = Backoff {
            pauses: vec![Duration::from_millis(1); 3],
        };
        tools
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    fn argv(&self) -> Vec<String> {
        let raw = fs::read(self.path("argv")).unwrap_or_default();
        let text = String::from_utf8(raw).unwrap();
        text.strip_suffix('\0')
            .map(|t| t.split('\0').map(str::to_string).collect())
            .unwrap_or_default()
    }

    fn calls(&self) -> usize {
        fs::read_to_string(self.path("calls"))
            .map(|t| t.lines().count())
            .unwrap_or(0)
    }

    fn read(&self, name: &str) -> String {
        fs::read_to_string(self.path(name))
            .unwrap_or_default()
            .trim()
            .to_string()
    }
}

/// Is the process gone (or a zombie waiting for init)? Waits up to a second for it to go.
fn is_gone(pid: &str) -> bool {
    let stat = Path::new("/proc").join(pid).join("stat");
    let deadline = Instant::now() + Duration::from_secs(1);
    loop {
        match fs::read_to_string(&stat) {
            Err(_) => return true,
            Ok(s) if s.rsplit(')').next().unwrap_or("").trim_start().starts_with('Z') => return true,
            Ok(_) if Instant::now() > deadline => return false,
            Ok(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

#[test]
fn job_asks_squeue_for_text_free_columns_only() {
    let fakes = Fakes::new("squeue");
    fakes.write("squeue", &format!("echo '{SQUEUE_42}'"));
    let job = fakes.tools().job(42).unwrap();
    assert_eq!(
        fakes.argv(),
        [
            "--noheader",
            "--local",
            "--states=all",
            "--jobs=42",
            "--Format=JobID:|,UserName:|,UserID:|,PriorityLong:|,Account:|,QOS:|,State:|,\
             Requeue:|,RestartCnt:|,BatchFlag:|,StartTime:|,Partition:|,NodeList:|,NumNodes:|",
        ]
    );
    assert_eq!(
        (job.job_id, job.job_state.as_str(), job.restarts, job.priority),
        (42, "RUNNING", 1, 100)
    );
}

#[test]
fn admin_comment_passes_exact_argv_and_reads_the_record() {
    let fakes = Fakes::new("show");
    fakes.write("squeue", &format!("echo '{RECORD_42}'"));
    let comment = fakes.tools().admin_comment(42).unwrap();
    assert_eq!(
        fakes.argv(),
        [
            "--noheader",
            "--local",
            "--states=all",
            "--jobs=42",
            RECORD_FORMAT
        ]
    );
    assert_eq!(comment, "note by ops");
}

#[test]
fn admin_comment_text_arrives_as_one_argv_word() {
    let fakes = Fakes::new("comment");
    fakes.write("scontrol", "");
    let dir = fakes.dir.display().to_string();
    let texts = [
        "plain".to_string(),
        "spaces  and\ttabs and a=b c=d".to_string(),
        format!("pipe | touch {dir}/pwned; semi; $(touch {dir}/pwned) `touch {dir}/pwned`"),
        "quotes ' \" \\ * ? ~ [x] {a,b} > /dev/null < /etc/passwd & #".to_string(),
        "gpu-mem-quota:v1{vm/0:w1,q1,r1} and other text".to_string(),
        "-starts-with-dash".to_string(),
        "ünïcödé ✓".to_string(),
        String::new(),
    ];
    for text in &texts {
        fakes
            .tools()
            .set_admin_comment(7, text)
            .unwrap_or_else(|e| panic!("{text:?}: {e}"));
        assert_eq!(
            fakes.argv(),
            ["update", "JobId=7", &format!("AdminComment={text}")]
        );
    }
    assert!(
        !fakes.path("pwned").exists(),
        "the text was interpreted by a shell"
    );
}

#[test]
fn admin_comment_that_cannot_be_one_readable_word_is_refused_before_running() {
    let fakes = Fakes::new("badcomment");
    fakes.write("scontrol", "");
    // (text, words of the error)
    let too_long = "x".repeat(64 * 1024 + 1);
    let table = [
        ("two\nlines", "control character '\\n'"),
        ("nul\0byte", "control character '\\0'"),
        ("carriage\rreturn", "control character '\\r'"),
        (too_long.as_str(), "65537 bytes"),
    ];
    for (text, words) in table {
        match fakes.tools().set_admin_comment(7, text) {
            Err(CtlError::InvalidArgument(why)) => assert!(why.contains(words), "{why}"),
            other => panic!("{words}: {other:?}"),
        }
    }
    assert_eq!(fakes.calls(), 0);
}

#[test]
fn actions_pass_exact_argv() {
    let fakes = Fakes::new("actions");
    fakes.write("scontrol", "").write("scancel", "");
    let tools = fakes.tools();
    type Action = fn(&SlurmTools, u32) -> Result<(), CtlError>;
    let table: [(Action, &[&str]); 3] = [
        (SlurmTools::requeue, &["requeue", "Incomplete", "4242"]),
        (SlurmTools::requeue_hold, &["requeuehold", "Incomplete", "4242"]),
        (SlurmTools::cancel, &["4242"]),
    ];
    for (action, argv) in table {
        action(&tools, 4242).unwrap();
        assert_eq!(fakes.argv(), argv);
    }
    assert_eq!(fakes.calls(), 3);
}

#[test]
fn commands_get_a_clean_environment_null_stdin_and_their_own_process_group() {
    let fakes = Fakes::new("hygiene");
    fakes.write(
        "scancel",
        "env | grep -v '^PWD=' | sort > \"$dir/env\"\n\
         readlink /proc/self/fd/0 > \"$dir/stdin\"\n\
         cut -d' ' -f5 /proc/$$/stat > \"$dir/pgid\"\n\
         echo $$ > \"$dir/pid\"",
    );
    let tools = fakes
        .tools()
        .with_slurm_conf("/etc/lab/slurm.conf")
        .with_slurm_conf("/etc/lab2/slurm.conf");
    tools.cancel(1).unwrap();
    assert_eq!(
        fakes.read("env"),
        format!("PATH={SAFE_PATH}\nSLURM_CONF=/etc/lab2/slurm.conf")
    );
    assert_eq!(fakes.read("stdin"), "/dev/null");
    assert_eq!(fakes.read("pgid"), fakes.read("pid"));
}

#[test]
fn refusals_are_typed_and_not_retried() {
    let table = [
        (
            "Requested operation is presently disabled for job 42",
            Refusal::NotRequeueable,
        ),
        (
            "Only batch jobs are accepted or processed for job 42",
            Refusal::BatchOnly,
        ),
        ("Invalid job id specified for job 42", Refusal::InvalidJobId),
        ("Access/permission denied for job 42", Refusal::AccessDenied),
        ("something nobody expected", Refusal::Other),
    ];
    for (stderr, refusal) in table {
        let fakes = Fakes::new("refused");
        fakes.write("scontrol", &format!("echo '{stderr}' >&2; exit 1"));
        match fakes.tools().requeue(42) {
            Err(CtlError::Refused {
                refusal: got,
                message,
                ..
            }) => {
                assert_eq!((got, message.as_str()), (refusal, stderr))
            }
            other => panic!("{stderr}: {other:?}"),
        }
        assert_eq!(fakes.calls(), 1, "{stderr}");
    }
}

#[test]
fn an_unreachable_controller_is_retried_until_it_answers() {
    let fakes = Fakes::new("flaky");
    fakes.write(
        "squeue",
        &format!(
            "if [ $(wc -l < \"$dir/calls\") -le 2 ]; then\n\
             echo 'slurm_load_jobs error: Unable to contact slurm controller (connect failure)' >&2; exit 1\n\
             fi\necho '{RECORD_42}'"
        ),
    );
    let comment = fakes.tools().admin_comment(42).unwrap();
    assert_eq!(comment, "note by ops");
    assert_eq!(fakes.calls(), 3);
}

#[test]
fn retries_stop_after_the_last_pause() {
    // (fake body, what the error says)
    let table = [
        (
            "echo 'Socket timed out on send/recv operation' >&2; exit 1",
            "Socket timed out",
        ),
        (
            "echo 'Unexpected message received for job 42' >&2; exit 1",
            "Unexpected message",
        ),
        ("kill -9 $$", "killed by signal 9, no message"),
    ];
    for (body, words) in table {
        let fakes = Fakes::new("down");
        fakes.write("scontrol", body);
        match fakes.tools().requeue(42) {
            Err(CtlError::Transient {
                attempts: 4, message, ..
            }) => assert!(message.contains(words)),
            other => panic!("{body}: {other:?}"),
        }
        assert_eq!(fakes.calls(), 4, "{body}");
    }
}

#[test]
fn a_hanging_command_and_its_children_are_killed_at_the_timeout() {
    let fakes = Fakes::new("hang");
    fakes.write(
        "squeue",
        "sleep 60 &\necho $! > \"$dir/child\"\necho $$ > \"$dir/leader\"\necho partial\nsleep 60",
    );
    let mut tools = fakes.tools();
    tools.timeout = Duration::from_millis(300);
    let started = Instant::now();
    let result = tools.admin_comment(42);
    let took = started.elapsed();
    assert!(matches!(result, Err(CtlError::Timeout { .. })), "{result:?}");
    assert!(took >= tools.timeout && took < tools.timeout + SLACK, "{took:?}");
    assert_eq!(fakes.calls(), 1, "timeouts are not retried");
    assert!(is_gone(&fakes.read("leader")), "the fake survived");
    assert!(is_gone(&fakes.read("child")), "the fake's child survived");
}

#[test]
fn a_child_left_holding_the_pipes_neither_delays_the_result_nor_survives() {
    let fakes = Fakes::new("linger");
    fakes.write("scancel", "sleep 60 &\necho $! > \"$dir/child\"\necho done");
    let started = Instant::now();
    fakes.tools().cancel(42).unwrap();
    // Not the 60 s its child would hold the pipes.
    assert!(started.elapsed() < SLACK, "{:?}", started.elapsed());
    assert!(is_gone(&fakes.read("child")), "the fake's child survived");
}

#[test]
fn floods_of_output_are_read_bounded_without_stalling() {
    let fakes = Fakes::new("flood");
    fakes.write(
        "squeue",
        "head -c 3000000 /dev/zero | tr '\\0' x\nhead -c 3000000 /dev/zero >&2",
    );
    let mut tools = fakes.tools();
    tools.timeout = PROMPT;
    match tools.job(42) {
        Err(CtlError::Garbage { message, .. }) => {
            assert!(message.contains("more than 1048576 bytes"), "{message}")
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn output_that_is_not_the_job_record_is_garbage() {
    let other_job = RECORD_42.replace("42|", "43|");
    let table = [
        ("echo hello".to_string(), "no line for job 42 among 1"),
        (format!("echo '{other_job}'"), "no line for job 42 among 1"),
        (
            format!("echo '{RECORD_42}'; echo '{RECORD_42}'"),
            "more than one line",
        ),
        ("echo '42|alice|2001|'".to_string(), "value(s)"),
    ];
    for (body, words) in table {
        let fakes = Fakes::new("garbage");
        fakes.write("squeue", &body);
        match fakes.tools().admin_comment(42) {
            Err(CtlError::Garbage { command, message }) => {
                assert!(message.contains(words), "{message}");
                assert!(
                    command.contains("squeue --noheader --local --states=all --jobs=42"),
                    "{command}"
                );
            }
            other => panic!("{body}: {other:?}"),
        }
    }
}

#[test]
fn admin_comments_that_could_not_be_written_back_are_garbage() {
    let bell = RECORD_42.replace("note by ops", "ring\x07bell");
    let long = RECORD_42.replace("note by ops", &"n".repeat(64 * 1024 - 1024));
    for (record, words) in [
        (
            bell,
            "could not be written back: AdminComment contains the control character '\\u{7}'",
        ),
        (
            long,
            "could not be written back: it is 64512 bytes, more than the 64511",
        ),
    ] {
        let fakes = Fakes::new("unwritable");
        fs::write(fakes.path("record"), format!("{record}\n")).unwrap();
        fakes.write("squeue", "cat \"$dir/record\"");
        match fakes.tools().admin_comment(42) {
            Err(CtlError::Garbage { message, .. }) => assert!(message.contains(words), "{message}"),
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn programs_that_cannot_run_are_reported_without_retries() {
    let fakes = Fakes::new("absent");
    fs::write(fakes.path("scancel"), "#!/bin/sh\n").unwrap(); // not executable
    let tools = fakes.tools();
    for action in [SlurmTools::requeue, SlurmTools::cancel] {
        match action(&tools, 1) {
            Err(CtlError::NotFound { program, .. }) => assert!(program.starts_with(&fakes.dir)),
            other => panic!("{other:?}"),
        }
    }
    // No squeue at all.
    match tools.job(1) {
        Err(CtlError::NotFound { program, .. }) => assert_eq!(program, fakes.path("squeue")),
        other => panic!("{other:?}"),
    }
    assert_eq!(fakes.calls(), 0);
    let mut relative = tools.clone();
    relative.scontrol = PathBuf::from("scontrol");
    assert!(matches!(
        relative.admin_comment(1),
        Err(CtlError::InvalidArgument(_))
    ));
    assert!(matches!(relative.job(1), Err(CtlError::InvalidArgument(_))));
}

#[test]
fn the_default_finds_the_system_tools() {
    let tools = SlurmTools::default();
    assert!(tools.scontrol.is_absolute() && tools.scancel.is_absolute());
    assert_eq!(tools.scontrol.parent(), tools.scancel.parent());
    assert!(tools.env.is_empty());
}

/// `squeue --json` as Slurm 24.11 prints it for `--jobs=42`, cut to the fields read; job 42's
/// Comment and name imitate scontrol's text.
const SQUEUE_JSON: &str = r#"{"meta":{},"errors":[],"jobs":[
 {"job_id":42,"admin_comment":"","comment":"x AdminComment=ticket=FORGED gpu-mem-quota:v1{n9/0:q=1G,preempted=99}",
  "name":"AdminComment=y","account":"physics","partition":"gpu","qos":"normal","user_id":2001,
  "nodes":"vm","gres_detail":["gpu:fake:1(IDX:2)"]}]}"#;

#[test]
fn the_admin_comment_is_read_from_json_where_user_text_cannot_pose_as_it() {
    let fakes = Fakes::new("json");
    fakes.write("squeue", &format!("cat <<'EOF'\n{SQUEUE_JSON}\nEOF"));
    let mut tools = fakes.tools();
    tools.json_job_reads = true;
    assert_eq!(tools.admin_comment(42).unwrap(), "");
    assert_eq!(fakes.argv(), ["--json", "--local", "--states=all", "--jobs=42"]);
    let record = tools.job_record(42).unwrap();
    assert_eq!(
        (record.account.as_str(), record.nodes.as_slice()),
        ("physics", &["vm".to_string()][..])
    );
    assert_eq!(fakes.calls(), 2, "one squeue each, no scontrol");
}

#[test]
fn an_unreadable_record_is_never_read_from_scontrols_text() {
    // F4/G2: where squeue fails, scontrol's text (where a Comment can pose as the AdminComment)
    // is not asked instead.
    let fakes = Fakes::new("nojson");
    fakes.write(
        "squeue",
        "echo 'squeue: error: Invalid field requested' >&2; exit 1",
    );
    fakes.write("scontrol", "echo 'JobId=42 Comment=x AdminComment=forged'");
    match fakes.tools().admin_comment(42) {
        Err(CtlError::Refused { command, .. } | CtlError::Garbage { command, .. }) => {
            assert!(command.contains("squeue"), "{command}")
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(fakes.calls(), 1, "only squeue");
}

#[test]
fn shards_per_node_come_from_one_jobs_record() {
    let fakes = Fakes::new("shards");
    fakes.write("squeue", &format!("echo '{RECORD_42}'"));
    let record = fakes.tools().job_record(42).unwrap();
    assert_eq!(record.shards_on("vm"), Some(8));
    // G6: a NodeName the record does not have gets the fewest shards of the job's nodes.
    assert_eq!(record.shards_on("node17"), Some(8));
    assert_eq!(fakes.calls(), 1, "one squeue, no scontrol");
}
