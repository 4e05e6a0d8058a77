//! The watchdog's log: syslog (facility daemon, ident `gpu-mem-quota`), every line naming the job
//! and, at its end, the node by its Slurm NodeName: `job 12: ... (node n2)`. Syslog stamps the host
//! name of the machine whose syslog daemon took the line, which is not the NodeName where they
//! differ (NodeHostname, `slurmd -N`, several slurmd on one machine, a relay that restamps).
//! Where no syslog daemon listens (`/dev/log` missing), lines go to `<state_dir>/watchdog.log`,
//! a root-owned file, so that nothing is lost silently.
//!
//! That file is opened relative to the state directory's descriptor, which must pass
//! gmq_node::trusted_dir's rule, `O_NOFOLLOW` (and `O_NONBLOCK`, so a FIFO cannot hang us); it is
//! refused unless a regular file of root's with one link (a hard link elsewhere would make us
//! append to that file). Its size is bounded by rotating once: past [`MAX_LOG_BYTES`] it is
//! renamed to `watchdog.log.1` (replacing the previous one) and a new file is started, so the
//! two never hold much more than twice that, and the newest lines, the ones that matter, are kept.

use std::io::{self, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use nix::fcntl::OFlag;

use gmq_node::trusted_dir::{euid, TrustedDir};

/// The fallback file's name in the state directory, and its one older generation.
const LOG_FILE: &str = "watchdog.log";
const OLDER_LOG_FILE: &str = "watchdog.log.1";
/// Past this size the fallback file is rotated (once: one older generation is kept).
const MAX_LOG_BYTES: u64 = 4 << 20;

use syslog::{Facility, Formatter3164, Logger, LoggerBackend};

pub(crate) struct Log {
    job_id: u32,
    /// This node's NodeName.
    node: String,
    sink: Sink,
}

enum Sink {
    Syslog(Logger<LoggerBackend, Formatter3164>),
    /// The state directory, where [`LOG_FILE`] goes.
    File(PathBuf),
}

#[derive(Clone, Copy)]
enum Severity {
    Info,
    Warning,
    Error,
}

impl Log {
    pub(crate) fn open(job_id: u32, fallback_dir: PathBuf) -> Log {
        let formatter = Formatter3164 {
            facility: Facility::LOG_DAEMON,
            hostname: None,
            process: "gpu-mem-quota".into(),
            pid: std::process::id(),
        };
        let sink = match syslog::unix(formatter) {
            Ok(logger) => Sink::Syslog(logger),
            Err(_) => Sink::File(fallback_dir),
        };
        Log {
            job_id,
            node: gmq_node::slurmctl::this_node(),
            sink,
        }
    }

    pub(crate) fn info(&mut self, message: &str) {
        self.write(Severity::Info, message)
    }

    pub(crate) fn warning(&mut self, message: &str) {
        self.write(Severity::Warning, message)
    }

    pub(crate) fn error(&mut self, message: &str) {
        self.write(Severity::Error, message)
    }

    fn write(&mut self, level: Severity, message: &str) {
        let line = log_line(self.job_id, &self.node, message);
        match &mut self.sink {
            Sink::Syslog(logger) => {
                let _ = match level {
                    Severity::Info => logger.info(&line),
                    Severity::Warning => logger.warning(&line),
                    Severity::Error => logger.err(&line),
                };
            }
            Sink::File(dir) => {
                let tag = match level {
                    Severity::Info => "info",
                    Severity::Warning => "warning",
                    Severity::Error => "error",
                };
                let text = format!("gpu-mem-quota[{}]: {tag}: {line}\n", std::process::id());
                // Nowhere left to say that the fallback failed: the line is lost.
                let _ = append_to_fallback(dir, &text);
            }
        }
    }
}

/// One line of the log: `job JOB: MESSAGE (node NODE)`, on one line, with no control character
/// in it ([`escaped`]): what reaches root's log names paths the job's user chose.
fn log_line(job_id: u32, node: &str, message: &str) -> String {
    format!("job {job_id}: {} (node {node})", escaped(message))
}

/// `text` with every control character escaped, so a line shows as written and does nothing to
/// the terminal an admin reads the log on (review K9: a directory named `d\e[2J\e[Hforged` in a
/// telemetry failure line reached `watchdog.log` raw; journald keeps such bytes too). A newline
/// becomes ` / ` (a message of several lines stays one line, readably); every other one (C0,
/// DEL, C1: `char::is_control`) is written as Rust's escape, `\u{1b}`, `\r`, `\t`. Pure.
pub(crate) fn escaped(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\n' => out.push_str(" / "),
            c if c.is_control() => out.extend(c.escape_default()),
            c => out.push(c),
        }
    }
    out
}

/// Appends `text` to `<state_dir>/watchdog.log` under the rules above.
fn append_to_fallback(state_dir: &Path, text: &str) -> io::Result<()> {
    if !state_dir.exists() {
        std::fs::create_dir_all(state_dir)?;
    }
    let dir = TrustedDir::open(state_dir)?;
    let mut file = open_log(&dir)?;
    if file.metadata()?.len() >= MAX_LOG_BYTES {
        // Rotate only the file we checked: another watchdog may have rotated it just now.
        let ours = file.metadata()?;
        let there = dir.stat_child(LOG_FILE)?;
        if there.is_some_and(|s| s.st_dev == ours.dev() && s.st_ino == ours.ino()) {
            dir.rename(LOG_FILE, OLDER_LOG_FILE)?;
        }
        file = open_log(&dir)?;
    }
    file.write_all(text.as_bytes())
}

/// Opens (creating, root 0640) the fallback log for appending, refusing anything but a regular
/// file of ours with one link.
fn open_log(dir: &TrustedDir) -> io::Result<std::fs::File> {
    let flags = OFlag::O_WRONLY | OFlag::O_APPEND | OFlag::O_CREAT | OFlag::O_NONBLOCK;
    let file = dir.open_file(LOG_FILE, flags, 0o640)?;
    let meta = file.metadata()?;
    if !meta.file_type().is_file() || meta.uid() != euid() || meta.nlink() != 1 {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "{}: not a regular file of uid {} with one link (owner {}, {} links): refused",
                dir.path().join(LOG_FILE).display(),
                euid(),
                meta.uid(),
                meta.nlink()
            ),
        ));
    }
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn scratch_dir(name: &str) -> tempfile::TempDir {
        tempfile::Builder::new()
            .prefix(&format!("gmq-log-{name}-"))
            .tempdir()
            .unwrap()
    }

    #[test]
    fn a_line_names_its_job_first_and_its_node_last() {
        assert_eq!(
            log_line(12, "n2", "requeued\nnow"),
            "job 12: requeued / now (node n2)"
        );
    }

    #[test]
    fn every_control_character_is_escaped() {
        // (message, as logged)
        let table = [
            ("plain text", "plain text"),
            ("two\nlines", "two / lines"),
            (
                "/home/u/d\u{1b}[2J\u{1b}[Hforged/x.json",
                "/home/u/d\\u{1b}[2J\\u{1b}[Hforged/x.json",
            ),
            ("over\rwritten", "over\\rwritten"),
            ("tab\there", "tab\\there"),
            ("nul\0bell\u{7}", "nul\\u{0}bell\\u{7}"),
            ("del\u{7f}", "del\\u{7f}"),
            ("csi\u{9b}2J", "csi\\u{9b}2J"),
            ("ünï ✓", "ünï ✓"),
        ];
        for (message, want) in table {
            assert_eq!(escaped(message), want, "{message:?}");
            let line = log_line(7, "n1", message);
            assert!(!line.chars().any(char::is_control), "{line:?}");
        }
        // Every control character, one by one.
        for c in (0..=0x10ffff)
            .filter_map(char::from_u32)
            .filter(|c| c.is_control())
        {
            let out = escaped(&format!("a{c}b"));
            assert!(!out.chars().any(char::is_control), "{c:?}: {out:?}");
        }
    }

    #[test]
    fn the_fallback_log_appends_and_rotates_once_past_its_bound() {
        let scratch = scratch_dir("rotate");
        let dir = scratch.path();
        append_to_fallback(dir, "one\n").unwrap();
        append_to_fallback(dir, "two\n").unwrap();
        let log = dir.join(LOG_FILE);
        assert_eq!(fs::read_to_string(&log).unwrap(), "one\ntwo\n");
        assert_eq!(fs::metadata(&log).unwrap().mode() & 0o7777, 0o640);
        fs::OpenOptions::new()
            .write(true)
            .open(&log)
            .unwrap()
            .set_len(MAX_LOG_BYTES)
            .unwrap();
        append_to_fallback(dir, "three\n").unwrap();
        assert_eq!(fs::read_to_string(&log).unwrap(), "three\n");
        assert_eq!(
            fs::metadata(dir.join(OLDER_LOG_FILE)).unwrap().len(),
            MAX_LOG_BYTES
        );
    }

    #[test]
    fn a_linked_or_foreign_fallback_log_is_refused() {
        let scratch = scratch_dir("refuse");
        let dir = scratch.path();
        let victim = dir.join("victim");
        fs::write(&victim, "precious").unwrap();
        fs::hard_link(&victim, dir.join(LOG_FILE)).unwrap();
        let e = append_to_fallback(dir, "x\n").unwrap_err();
        assert!(e.to_string().contains("2 links): refused"), "{e}");
        fs::remove_file(dir.join(LOG_FILE)).unwrap();
        std::os::unix::fs::symlink(&victim, dir.join(LOG_FILE)).unwrap();
        assert!(append_to_fallback(dir, "x\n").is_err());
        assert_eq!(fs::read_to_string(&victim).unwrap(), "precious");
        fs::remove_file(dir.join(LOG_FILE)).unwrap();
        if euid() == 0 {
            fs::write(dir.join(LOG_FILE), "").unwrap();
            std::os::unix::fs::chown(dir.join(LOG_FILE), Some(2001), None).unwrap();
            let e = append_to_fallback(dir, "x\n").unwrap_err();
            assert!(e.to_string().contains("owner 2001"), "{e}");
        }
    }
}
