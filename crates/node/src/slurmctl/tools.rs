//! The Slurm commands the watchdog uses, where they are, and how patiently to call them.

use std::path::{Path, PathBuf};
use std::time::Duration;

use gmq_core::slurm_text::{
    classify, parse_job_info_json, parse_node_down, parse_squeue, parse_squeue_json, parse_squeue_record,
    CtlError, JobInfo, JobRecord, Verdict, NODE_FORMAT, RECORD_FORMAT, SQUEUE_FORMAT,
};

use super::run::{describe, run, Finished, RunError, MAX_JSON_OUTPUT_BYTES, MAX_OUTPUT_BYTES};

/// Where [`SlurmTools::find`] looks for scontrol, in order: distribution packages, then the two
/// usual prefixes of a source build.
const SEARCH_DIRS: [&str; 3] = ["/usr/bin", "/usr/local/bin", "/opt/slurm/bin"];

/// How long one attempt may take. A client that cannot reach the controller gives up by itself
/// after about 9 s (update, requeue) to 18 s (show job) on the dev cluster; this leaves it room to
/// say so, which is worth a retry, while a hung command is cut off.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// The longest AdminComment we write: a guard of ours, well under Linux's 128 KiB per argument.
/// Slurm 22.05 sets no limit on updates.
const MAX_ADMIN_COMMENT_BYTES: usize = 64 * 1024;

/// Pauses between attempts when the controller looks unreachable. Attempts = pauses + 1.
/// Timeouts and refusals are never retried.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Backoff {
    pub pauses: Vec<Duration>,
}

impl Default for Backoff {
    /// Four attempts, 0.5 s, 1 s and 2 s apart: rides out a controller restart or failover.
    fn default() -> Self {
        Backoff {
            pauses: [500, 1000, 2000].map(Duration::from_millis).to_vec(),
        }
    }
}

/// How to run Slurm's commands: by absolute path, with only PATH and `env` in their environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlurmTools {
    pub scontrol: PathBuf,
    pub scancel: PathBuf,
    /// Per attempt.
    pub timeout: Duration,
    /// Passed to every command on top of the fixed PATH (e.g. `SLURM_CONF`).
    pub env: Vec<(String, String)>,
    pub backoff: Backoff,
    /// [`SlurmTools::job`] reads the job from `squeue --json` instead of `squeue --Format`
    /// columns: for a Slurm whose squeue honours `--jobs` with `--json` ([`JSON_JOB_READS_FROM`]).
    pub json_job_reads: bool,
}

/// The first Slurm whose `squeue --json --jobs=ID` prints that job alone: 24.11 (verified on the
/// 24.11 lab). 22.05's ignores every filter and prints every job of the cluster, too much to ask
/// for one job's state; the releases between are not tested here and keep the columns, which hold
/// no user-written text either.
pub const JSON_JOB_READS_FROM: (u32, u32) = (24, 11);

impl Default for SlurmTools {
    fn default() -> Self {
        SlurmTools::find()
    }
}

impl SlurmTools {
    /// The tools in the first of [`SEARCH_DIRS`] that holds `scontrol`; `/usr/bin` if none does
    /// (the commands then fail with [`CtlError::NotFound`] naming it).
    /// Only a directory and a `scontrol` that root alone can change are taken (H4: a `staff`-
    /// writable `/usr/local/bin` would otherwise choose what root runs).
    pub fn find() -> Self {
        let dir = SEARCH_DIRS
            .iter()
            .map(Path::new)
            .find(|dir| only_root_can_change(dir) && only_root_can_change(&dir.join("scontrol")));
        SlurmTools::in_dir(dir.unwrap_or(Path::new(SEARCH_DIRS[0])))
    }

    /// [`SlurmTools::find`], with `SLURM_CONF` from this process's own environment when set
    /// (slurmstepd's, the watchdog's or the admin's shell: never a job's).
    pub fn find_configured() -> Self {
        let tools = SlurmTools::find();
        match std::env::var("SLURM_CONF") {
            Ok(conf) => tools.with_slurm_conf(&conf),
            Err(_) => tools,
        }
    }

    /// `dir/scontrol` and `dir/scancel`, default timeout and backoff, no extra environment.
    pub fn in_dir(dir: &Path) -> Self {
        SlurmTools {
            scontrol: dir.join("scontrol"),
            scancel: dir.join("scancel"),
            timeout: DEFAULT_TIMEOUT,
            env: Vec::new(),
            backoff: Backoff::default(),
            json_job_reads: false,
        }
    }

    /// Whether this Slurm is one whose job reads go through JSON: from `squeue --version` (no
    /// round trip to slurmctld; `slurm 24.11.5`). Anything unreadable keeps the columns.
    pub fn with_json_job_reads_detected(mut self) -> Self {
        let args = vec!["--version".to_string()];
        self.json_job_reads = self
            .read(&self.squeue_path(), &args, 4096)
            .ok()
            .and_then(|out| release_of(&out))
            .is_some_and(|release| release >= JSON_JOB_READS_FROM);
        self
    }

    /// Passes `SLURM_CONF` to the commands: needed where slurm.conf is not in its default place
    /// (slurmstepd gives it to the job, so the plugin can hand it on).
    pub fn with_slurm_conf(mut self, slurm_conf: &str) -> Self {
        self.env.retain(|(key, _)| key != "SLURM_CONF");
        self.env.push(("SLURM_CONF".to_string(), slurm_conf.to_string()));
        self
    }

    /// `squeue --noheader --states=all --jobs=ID --Format=...`: the job's state, requeue facts and
    /// rank, from columns that hold no user-written text ([`parse_squeue`]).
    pub fn job(&self, job_id: u32) -> Result<JobInfo, CtlError> {
        self.one_job(job_id, SQUEUE_FORMAT, parse_job_info_json, parse_squeue)
    }

    /// The job's whole record: AdminComment, identity, shards per node, how it ended. One
    /// single-job request to slurmctld: `squeue --json --jobs=ID` where that loads the job alone
    /// (24.11 on, [`JSON_JOB_READS_FROM`], with its GPUs per node too), else `squeue --Format`
    /// columns ([`RECORD_FORMAT`]). 22.05's `squeue --json` prints the whole cluster, which one user
    /// can make too big or too slow to read (G1): it is never asked for. Each value is its own JSON
    /// field or column, so no user-written text can pose as one.
    pub fn job_record(&self, job_id: u32) -> Result<JobRecord, CtlError> {
        self.one_job(job_id, RECORD_FORMAT, parse_squeue_json, parse_squeue_record)
    }

    /// One job's squeue output, read by `json` where this Slurm's `squeue --json --jobs=ID` prints
    /// that job alone, else by `columns` from `--Format=format`.
    fn one_job<T>(
        &self,
        job_id: u32,
        format: &str,
        json: fn(&str, u32) -> Result<T, String>,
        columns: fn(&str, u32) -> Result<T, String>,
    ) -> Result<T, CtlError> {
        let squeue = self.squeue_path();
        // `--local`: this cluster's record of the job, without asking slurmctld for the federation
        // first (squeue does that on every call otherwise: one more request each time).
        let (args, read, cap) = if self.json_job_reads {
            let args = vec![
                "--json".to_string(),
                "--local".to_string(),
                "--states=all".to_string(),
                format!("--jobs={job_id}"),
            ];
            (args, json, MAX_JSON_OUTPUT_BYTES)
        } else {
            let args = vec![
                "--noheader".to_string(),
                "--local".to_string(),
                "--states=all".to_string(),
                format!("--jobs={job_id}"),
                format!("--Format={format}"),
            ];
            (args, columns, MAX_OUTPUT_BYTES)
        };
        let stdout = self.read(&squeue, &args, cap)?;
        read(&stdout, job_id).map_err(|message| garbage(&squeue, &args, message))
    }

    /// The job's AdminComment (empty when it has none), from [`SlurmTools::job_record`] alone: never
    /// from `scontrol show job`'s text, where a Comment, WorkDir or JobName can imitate it (F4, G2).
    /// [`CtlError::Garbage`] when the record cannot be read, or when the text could not be written
    /// back with our record added: a control character (user text after a newline reads as part of
    /// it) or no room left under [`MAX_ADMIN_COMMENT_BYTES`]. Callers then leave the AdminComment as
    /// it is: text that cannot be read is never written over.
    pub fn admin_comment(&self, job_id: u32) -> Result<String, CtlError> {
        let text = self.job_record(job_id)?.admin_comment;
        let room = MAX_ADMIN_COMMENT_BYTES - gmq_core::record::MAX_RECORD_BYTES - 1;
        let writable = if text.len() > room {
            Err(format!(
                "it is {} bytes, more than the {room} that leave room for our record",
                text.len()
            ))
        } else {
            check_admin_comment(&text).map_err(|e| e.to_string())
        };
        writable.map(|()| text).map_err(|why| CtlError::Garbage {
            command: command_line(&self.squeue_path(), &[format!("--jobs={job_id}")]),
            message: format!("the AdminComment could not be written back: {why}"),
        })
    }

    /// `scontrol update JobId=ID AdminComment=TEXT`, the text one argv word, replacing the whole
    /// AdminComment. Refused here: control characters but tab (NUL cannot be passed; a newline would
    /// split squeue's one line per job), and more than [`MAX_ADMIN_COMMENT_BYTES`]. Only SlurmUser
    /// and root may set it ("Access/permission denied" otherwise).
    pub fn set_admin_comment(&self, job_id: u32, text: &str) -> Result<(), CtlError> {
        check_admin_comment(text)?;
        let args = vec![
            "update".to_string(),
            format!("JobId={job_id}"),
            format!("AdminComment={text}"),
        ];
        self.call(&self.scontrol, &args).map(drop)
    }

    /// `sacctmgr -i update job where jobid=ID set SystemComment=TEXT`: the accounting database's
    /// SystemComment of the job's latest run, after the job has ended (`keep-record`); slurmctld's
    /// copy is not touched. `db_job_id` is `N` or `N_M` (an array task, as jobstats writes it).
    /// Slurm 22.05's sacctmgr lowercases the value (`strip_quotes(..., make_lower)`; 23.02 on keep
    /// it as it is). SlurmUser, root and accounting admins only.
    pub fn set_system_comment_in_accounting(&self, db_job_id: &str, text: &str) -> Result<(), CtlError> {
        check_admin_comment(text)?;
        let args = vec![
            "-i".to_string(),
            "update".to_string(),
            "job".to_string(),
            "where".to_string(),
            format!("jobid={db_job_id}"),
            "set".to_string(),
            format!("SystemComment={text}"),
        ];
        self.call(&self.scontrol.with_file_name("sacctmgr"), &args)
            .map(drop)
    }

    /// `scontrol requeue Incomplete ID`: back to pending, to run again. `Incomplete` makes it a
    /// no-op for a job that has meanwhile finished; without it Slurm 22.05 requeues finished batch
    /// jobs too. Refusals: NotRequeueable (`--no-requeue`), BatchOnly (srun/salloc jobs).
    pub fn requeue(&self, job_id: u32) -> Result<(), CtlError> {
        let args = words(&["requeue", "Incomplete", &job_id.to_string()]);
        self.call(&self.scontrol, &args).map(drop)
    }

    /// `scontrol requeue ID`, without `Incomplete`: Slurm requeues a batch job that has ended (in
    /// 22.05, `Incomplete` makes this a silent no-op for a FAILED job). Only for self-healing, after
    /// slurmctld said the job FAILED; one that is pending again is refused (JobPending).
    pub fn requeue_ended(&self, job_id: u32) -> Result<(), CtlError> {
        let args = words(&["requeue", &job_id.to_string()]);
        self.call(&self.scontrol, &args).map(drop)
    }

    /// `scontrol requeuehold Incomplete ID`: as [`SlurmTools::requeue`], and held (priority 0)
    /// until someone runs `scontrol release ID`.
    pub fn requeue_hold(&self, job_id: u32) -> Result<(), CtlError> {
        let args = words(&["requeuehold", "Incomplete", &job_id.to_string()]);
        self.call(&self.scontrol, &args).map(drop)
    }

    /// `scancel ID`. A job that is already gone is success: scancel itself says nothing then.
    pub fn cancel(&self, job_id: u32) -> Result<(), CtlError> {
        let args = vec![job_id.to_string()];
        self.call(&self.scancel, &args).map(drop)
    }

    /// Where `sacct` is: beside `scontrol` (every Slurm install puts the client commands together).
    pub fn sacct_path(&self) -> PathBuf {
        self.scontrol.with_file_name("sacct")
    }

    /// Whether slurmctld has `node` DOWN ([`parse_node_down`]): `sinfo --noheader --local --all
    /// --Node --nodes=NODE --Format=NODE_FORMAT`, one request. Asked only by a watchdog whose
    /// node's slurmd is gone, once slurmctld says its run is over: was it for this node's failure?
    pub fn node_down(&self, node: &str) -> Result<bool, CtlError> {
        let sinfo = self.scontrol.with_file_name("sinfo");
        let args = vec![
            "--noheader".to_string(),
            "--local".to_string(),
            "--all".to_string(),
            "--Node".to_string(),
            format!("--nodes={node}"),
            format!("--Format={NODE_FORMAT}"),
        ];
        let stdout = self.read(&sinfo, &args, MAX_OUTPUT_BYTES)?;
        parse_node_down(&stdout, node).map_err(|message| garbage(&sinfo, &args, message))
    }

    /// Where `squeue` is: beside `scontrol`.
    fn squeue_path(&self) -> PathBuf {
        self.scontrol.with_file_name("squeue")
    }

    /// `sacct ARGS`, its standard output. Output cut at [`MAX_OUTPUT_BYTES`] is refused
    /// ([`CtlError::Garbage`]): a report would silently miss jobs. slurmdbd out of reach is retried
    /// like the controller; "accounting storage is disabled" is a [`CtlError::Refused`].
    pub fn sacct(&self, args: &[String]) -> Result<String, CtlError> {
        self.read(&self.sacct_path(), args, MAX_OUTPUT_BYTES)
    }

    /// Runs a command whose output is read: output cut at `max_output` bytes is refused
    /// ([`CtlError::Garbage`]), never read as if it were whole (a field past the cut would read as
    /// absent).
    fn read(&self, program: &Path, args: &[String], max_output: usize) -> Result<String, CtlError> {
        let finished = self.call_capped(program, args, max_output)?;
        if finished.truncated {
            return Err(CtlError::Garbage {
                command: command_line(program, args),
                message: format!("more than {max_output} bytes of output: not read"),
            });
        }
        Ok(finished.stdout)
    }

    /// Runs `program args`, retrying while the controller looks unreachable.
    fn call(&self, program: &Path, args: &[String]) -> Result<Finished, CtlError> {
        self.call_capped(program, args, MAX_OUTPUT_BYTES)
    }

    fn call_capped(&self, program: &Path, args: &[String], max_output: usize) -> Result<Finished, CtlError> {
        let command = || command_line(program, args);
        if !program.is_absolute() {
            return Err(CtlError::InvalidArgument(format!(
                "{} is not an absolute path",
                program.display()
            )));
        }
        let mut attempts = 0;
        let mut pauses = self.backoff.pauses.iter();
        loop {
            attempts += 1;
            let finished = match run(program, args, &self.env, self.timeout, max_output) {
                Ok(finished) => finished,
                Err(RunError::Spawn(e)) => {
                    return Err(CtlError::NotFound {
                        program: program.to_path_buf(),
                        error: e.to_string(),
                    })
                }
                Err(RunError::TimedOut) => {
                    return Err(CtlError::Timeout {
                        command: command(),
                        after: self.timeout,
                    })
                }
                Err(RunError::Wait(e)) => {
                    return Err(CtlError::Transient {
                        command: command(),
                        attempts,
                        message: e.to_string(),
                    })
                }
            };
            if finished.status.success() {
                return Ok(finished);
            }
            let message = failure_message(&finished);
            // A command killed by a signal gave no answer from Slurm: worth another try.
            let verdict = match finished.status.code() {
                Some(_) => classify(&format!("{}\n{}", finished.stderr, finished.stdout)),
                None => Verdict::Transient,
            };
            match (verdict, pauses.next()) {
                (Verdict::Refused(refusal), _) => {
                    return Err(CtlError::Refused {
                        command: command(),
                        refusal,
                        message,
                    })
                }
                (Verdict::Transient, Some(pause)) => std::thread::sleep(*pause),
                (Verdict::Transient, None) => {
                    return Err(CtlError::Transient {
                        command: command(),
                        attempts,
                        message,
                    })
                }
            }
        }
    }
}

/// Whether `path` (followed, as exec follows it) is owned by root and writable by no one else.
fn only_root_can_change(path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).is_ok_and(|m| m.uid() == 0 && m.mode() & 0o022 == 0)
}

/// Why [`SlurmTools::set_admin_comment`] will not write `text`.
fn check_admin_comment(text: &str) -> Result<(), CtlError> {
    let refuse = |why: String| Err(CtlError::InvalidArgument(format!("AdminComment {why}")));
    if text.len() > MAX_ADMIN_COMMENT_BYTES {
        return refuse(format!("is {} bytes, over {MAX_ADMIN_COMMENT_BYTES}", text.len()));
    }
    if let Some(c) = text.chars().find(|c| c.is_control() && *c != '\t') {
        return refuse(format!("contains the control character {:?}", c));
    }
    Ok(())
}

/// Output that a command printed successfully but that does not read as asked.
fn garbage(program: &Path, args: &[String], message: String) -> CtlError {
    CtlError::Garbage {
        command: command_line(program, args),
        message,
    }
}

/// What a failed command said: stderr, else stdout, trimmed and shortened; its exit status if
/// it said nothing.
fn failure_message(finished: &Finished) -> String {
    const SHOWN: usize = 500;
    let said = [&finished.stderr, &finished.stdout]
        .into_iter()
        .map(|s| s.trim())
        .find(|s| !s.is_empty());
    match said {
        Some(text) if text.len() > SHOWN => format!("{}...", shorten(text, SHOWN)),
        Some(text) => text.to_string(),
        None => format!("{}, no message", describe(&finished.status)),
    }
}

/// The command as a log line shows it.
fn command_line(program: &Path, args: &[String]) -> String {
    const SHOWN: usize = 200;
    let line = format!("{} {}", program.display(), args.join(" "));
    if line.len() > SHOWN {
        format!("{}...", shorten(&line, SHOWN))
    } else {
        line
    }
}

/// The longest prefix of `text` within `bytes` that ends on a character boundary.
fn shorten(text: &str, bytes: usize) -> &str {
    let end = (0..=bytes.min(text.len()))
        .rev()
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(0);
    &text[..end]
}

fn words(list: &[&str]) -> Vec<String> {
    list.iter().map(|w| w.to_string()).collect()
}

/// `(major, minor)` from `squeue --version` (`slurm 24.11.5`, `slurm-wlm 22.05.8`).
fn release_of(version: &str) -> Option<(u32, u32)> {
    let release = version.split_whitespace().nth(1)?;
    let mut parts = release.split('.');
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

#[cfg(test)]
mod release_tests {
    #[test]
    fn releases_from_squeue_version() {
        assert_eq!(super::release_of("slurm 24.11.5\n"), Some((24, 11)));
        assert_eq!(super::release_of("slurm-wlm 22.05.8\n"), Some((22, 5)));
        assert_eq!(super::release_of("squeue: unrecognized option"), None);
        assert_eq!(super::release_of(""), None);
    }
}

#[cfg(test)]
mod trust_tests {
    use super::only_root_can_change;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_tool_others_can_change_is_not_run() {
        let dir = tempfile::Builder::new().prefix("tools-trust-").tempdir().unwrap();
        let tool = dir.path().join("scontrol");
        std::fs::write(&tool, "#!/bin/sh\n").unwrap();
        let root = is_root();
        for (mode, trusted) in [(0o755, root), (0o775, false), (0o757, false)] {
            std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(mode)).unwrap();
            assert_eq!(only_root_can_change(&tool), trusted, "{mode:o}");
        }
        assert!(!only_root_can_change(&dir.path().join("absent")));
        assert!(only_root_can_change(std::path::Path::new("/usr")));
    }

    fn is_root() -> bool {
        nix::unistd::geteuid().is_root()
    }
}
