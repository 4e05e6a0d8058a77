//! The watchdog's log: syslog (facility daemon, ident `gpu-mem-quota`), every line naming the job.
//! Where no syslog daemon listens (`/dev/log` missing), lines go to `<state_dir>/watchdog.log`,
//! a root-owned file, so that nothing is lost silently.

use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;

use syslog::{Facility, Formatter3164, Logger, LoggerBackend};

pub struct Log {
    job_id: u32,
    sink: Sink,
}

enum Sink {
    Syslog(Logger<LoggerBackend, Formatter3164>),
    File(PathBuf),
}

#[derive(Clone, Copy)]
enum Level {
    Info,
    Warning,
    Error,
}

impl Log {
    pub fn open(job_id: u32, fallback_dir: PathBuf) -> Log {
        let formatter = Formatter3164 {
            facility: Facility::LOG_DAEMON,
            hostname: None,
            process: "gpu-mem-quota".into(),
            pid: std::process::id(),
        };
        let sink = match syslog::unix(formatter) {
            Ok(logger) => Sink::Syslog(logger),
            Err(_) => Sink::File(fallback_dir.join("watchdog.log")),
        };
        Log { job_id, sink }
    }

    pub fn info(&mut self, message: &str) {
        self.write(Level::Info, message)
    }

    pub fn warning(&mut self, message: &str) {
        self.write(Level::Warning, message)
    }

    pub fn error(&mut self, message: &str) {
        self.write(Level::Error, message)
    }

    fn write(&mut self, level: Level, message: &str) {
        let line = format!("job {}: {}", self.job_id, message.replace('\n', " / "));
        match &mut self.sink {
            Sink::Syslog(logger) => {
                let _ = match level {
                    Level::Info => logger.info(&line),
                    Level::Warning => logger.warning(&line),
                    Level::Error => logger.err(&line),
                };
            }
            Sink::File(path) => {
                let _ = std::fs::create_dir_all(path.parent().unwrap_or(path));
                if let Ok(mut file) = OpenOptions::new()
                    .create(true)
                    .append(true)
                    .mode(0o640)
                    .custom_flags(libc::O_NOFOLLOW)
                    .open(&*path)
                {
                    let tag = match level {
                        Level::Info => "info",
                        Level::Warning => "warning",
                        Level::Error => "error",
                    };
                    let _ = writeln!(file, "gpu-mem-quota[{}]: {tag}: {line}", std::process::id());
                }
            }
        }
    }
}
