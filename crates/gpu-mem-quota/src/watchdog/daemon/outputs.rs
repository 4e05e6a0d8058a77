//! What the watchdog writes on the node: the log and the job's status file (`LogReporter`, the
//! engine's `Reporter`), the job's Prometheus textfile, the node's GPU inventory.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::super::gpu::NvmlSource;
use super::super::log::Log;
use gmq_core::metrics::{JobMetrics, NodeEvents, NODE_EVENTS_FILE};
use gmq_core::node_files;
use gmq_core::record::EventCounts;
use gmq_core::watchdog::status::Status;
use gmq_core::watchdog::Reporter;
use gmq_node::textfile;

/// The log plus the job's status file.
pub(super) struct LogReporter {
    log: Log,
    dir: PathBuf,
    /// The job's user: the status file is theirs to read, and nobody else's.
    status_reader: u32,
    last_status: Option<Status>,
    last_written: Option<Instant>,
}

impl LogReporter {
    /// Reports to `log`, and writes the status file in the job's runtime directory `dir`,
    /// readable by the job's user `status_reader`.
    pub(super) fn new(log: Log, dir: PathBuf, status_reader: u32) -> LogReporter {
        LogReporter {
            log,
            dir,
            status_reader,
            last_status: None,
            last_written: None,
        }
    }
}

impl Reporter for LogReporter {
    fn info(&mut self, message: &str) {
        self.log.info(message)
    }

    fn warning(&mut self, message: &str) {
        self.log.warning(message)
    }

    fn error(&mut self, message: &str) {
        self.log.error(message)
    }

    fn status(&mut self, status: &Status) {
        // Write on change, and at least every 5 s so `updated_at` shows the watchdog is alive.
        let unchanged = self.last_status.as_ref().is_some_and(|last| {
            Status {
                updated_at: status.updated_at,
                ..last.clone()
            } == *status
        });
        if unchanged
            && self
                .last_written
                .is_some_and(|t| t.elapsed() < Duration::from_secs(5))
        {
            return;
        }
        let access = textfile::Access::readable_by(self.status_reader);
        if let Err(e) =
            textfile::write_atomically_as(&self.dir, node_files::STATUS_FILE, &status.to_json(), access)
        {
            self.log.error(&format!(
                "cannot write the status file in {}: {e}",
                self.dir.display()
            ));
        }
        self.last_status = Some(status.clone());
        self.last_written = Some(Instant::now());
    }
}

/// The job's Prometheus textfile, rewritten atomically at most once a second, removed at the end;
/// and the job's events added to the node's counters as they happen (`NodeEvents`), which stay.
pub(super) struct MetricsWriter {
    dir: Option<PathBuf>,
    name: String,
    last: Option<Instant>,
    /// The job's events already in the node's counters.
    counted: EventCounts,
    /// A failure to add them was logged (once per job).
    node_events_failed: bool,
}

impl MetricsWriter {
    pub(super) fn new(dir: Option<PathBuf>, job_id: u32, log: &mut Log) -> MetricsWriter {
        // A directory that is not there means no node_exporter here: no metrics, no noise. One
        // that someone else could change (a symlink, not root's, group/other-writable) is refused:
        // root's writes and unlinks there could be pointed anywhere (gmq_node::trusted_dir).
        let dir = dir.filter(|d| match gmq_node::trusted_dir::TrustedDir::open(d) {
            Ok(_) => true,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
            Err(e) => {
                log.warning(&format!("metrics off for this job: {e}"));
                false
            }
        });
        MetricsWriter {
            dir,
            name: gmq_core::metrics::file_name(job_id),
            last: None,
            counted: EventCounts::default(),
            node_events_failed: false,
        }
    }

    pub(super) fn write(&mut self, job: &JobMetrics, report: &mut LogReporter) {
        self.count_node_events(job, report);
        let Some(dir) = &self.dir else { return };
        if self.last.is_some_and(|t| t.elapsed() < Duration::from_secs(1)) {
            return;
        }
        self.last = Some(Instant::now());
        if let Err(e) = textfile::write_atomically(dir, &self.name, &gmq_core::metrics::render(job)) {
            report.error(&format!(
                "cannot write metrics to {}: {e}; metrics off for this job",
                dir.display()
            ));
            self.dir = None;
        }
    }

    /// The job's file removed, its last events (the action that ended its run here, most often)
    /// in the node's counters first.
    pub(super) fn remove(&mut self, job: &JobMetrics, report: &mut LogReporter) {
        self.count_node_events(job, report);
        if let Some(dir) = &self.dir {
            if let Err(e) = textfile::remove(dir, &self.name) {
                report.error(&format!("cannot remove {}/{}: {e}", dir.display(), self.name));
            }
        }
    }
}

impl MetricsWriter {
    fn count_node_events(&mut self, job: &JobMetrics, report: &mut LogReporter) {
        let Some(dir) = &self.dir else { return };
        let Some(new) = gmq_core::metrics::new_events(&job.events, &self.counted) else {
            return;
        };
        let added = textfile::update_locked(dir, NODE_EVENTS_FILE, |old| {
            let mut events = NodeEvents::parse(old);
            events.add(&job.user, &new);
            events.render()
        });
        match added {
            Ok(()) => self.counted = job.events,
            Err(e) if !self.node_events_failed => {
                self.node_events_failed = true;
                report.error(&format!(
                    "cannot add the job's events to {}/{NODE_EVENTS_FILE}: {e}; tried again at the next sample",
                    dir.display()
                ));
            }
            Err(_) => {}
        }
    }
}

/// `<runtime_dir>/gpus`: the node's GPUs and their sizes, so the plugin can resolve percent quotas
/// against the real GPU (it does no NVML itself).
pub(super) fn write_inventory(runtime_dir: &Path, source: &NvmlSource, report: &mut LogReporter) {
    let text: String = source
        .inventory()
        .iter()
        .map(|(index, uuid, total)| format!("{index} {uuid} {total}\n"))
        .collect();
    if let Err(e) = textfile::write_atomically(runtime_dir, node_files::INVENTORY_FILE, &text) {
        report.warning(&format!("cannot write the GPU inventory: {e}"));
    }
}
