//! A job's GPU-memory story from its sacct rows: its runs (one row per start, with
//! `--duplicates`), and our record from its AdminComment. Pure.
//!
//! The record lives in slurmctld's copy of the job and survives requeues, so the newest run's
//! AdminComment holds every run's entries; older rows hold the record as it was then. We read the
//! newest row that has one. Run `k` of the record (Slurm's restart count) is the `k`-th row in
//! start order: each requeue gives the job a new accounting row.

use super::jobstats::{self, Jobstats};
use super::sacct::SacctRow;
use gmq_core::record::{self, Entry, GpuPeaks, Record, RecordError, Totals};
use gmq_core::size::ByteSize;

/// One job and everything we know about its GPU memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobReport {
    /// As sacct shows it: `12`, `12_3` for an array task.
    pub job_id: String,
    pub user: String,
    pub account: String,
    /// In start order; a requeued job that has not started again ends with a pending run.
    pub runs: Vec<Run>,
    pub record: RecordState,
    /// jobstats' summary in the newest AdminComment that holds one (`JS1:`), where the site runs
    /// jobstats ([`super::jobstats`]).
    pub jobstats: Option<Jobstats>,
}

/// One start of the job, as accounting saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Run {
    /// Slurm's restart count of this run: 0 for the first.
    pub run: u32,
    pub state: String,
    pub start: String,
    pub(crate) end: String,
    pub(crate) nodes: String,
    /// Slurm's own `gres/gpumem` of the run (the largest task of its steps), where it has one
    /// ([`super::slurm_gpumem`]).
    pub slurm_gpumem: Option<u64>,
}

/// Whether the job's AdminComment holds our record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordState {
    /// None of the job's rows has a segment of ours: the job ran without a quota, or ended before
    /// the watchdog wrote anything.
    Absent,
    /// There is one, but it cannot be read (the newest such problem).
    Unreadable(RecordError),
    Present(Record),
}

impl JobReport {
    /// The record, when there is a readable one.
    pub fn record(&self) -> Option<&Record> {
        match &self.record {
            RecordState::Present(record) => Some(record),
            _ => None,
        }
    }

    /// The record's entries for one run, by node.
    pub(crate) fn entries_of(&self, run: u32) -> impl Iterator<Item = &Entry> {
        self.record()
            .map(|r| r.entries())
            .unwrap_or_default()
            .iter()
            .filter(move |e| e.run == run)
    }

    /// Runs the record knows of that accounting does not list (rows lost or cut off).
    pub fn unlisted_runs(&self) -> Vec<u32> {
        let mut runs: Vec<u32> = self
            .record()
            .map(|r| r.entries())
            .unwrap_or_default()
            .iter()
            .map(|e| e.run)
            .filter(|&run| run as usize >= self.runs.len())
            .collect();
        runs.dedup();
        runs
    }

    /// GPU memory reserved and used over time, from the record's quota and peak per GPU and each
    /// run's time in accounting. `None` without a record or without a finished run to count.
    pub fn gib_hours(&self) -> Option<GibHours> {
        self.record()?;
        let mut total = GibHours::default();
        let mut counted = false;
        for run in &self.runs {
            let Some(seconds) = seconds_between(&run.start, &run.end) else {
                continue;
            };
            for entry in self.entries_of(run.run) {
                let (gpus, used) = match &entry.peaks {
                    GpuPeaks::Each(gpus) => (gpus.len().max(1), gpus.iter().map(|g| g.peak).sum::<u64>()),
                    GpuPeaks::Max(max) => (1, *max),
                };
                total.reserved += gib(entry.quota.bytes().saturating_mul(gpus as u64)) * hours(seconds);
                total.used += gib(used) * hours(seconds);
                counted = true;
            }
        }
        counted.then_some(total)
    }

    pub fn totals(&self) -> Option<Totals> {
        let mut totals = self.record().map(Record::totals)?;
        totals.restarts -= self.requeues_not_carried_out();
        Some(totals)
    }

    /// Restarts the record counts that never happened (review G12). A watchdog records its requeue
    /// before asking for it, because the record must survive the requeue and slurmctld takes no
    /// update once the job is on its way out; a requeue slurmctld then failed to carry out stays in
    /// the record, and no run follows it. The runs that did happen are accounting's rows and the
    /// runs the record has entries of (a run's watchdog wrote, so it started, whether or not
    /// accounting lists it yet).
    pub fn requeues_not_carried_out(&self) -> u32 {
        let Some(record) = self.record() else {
            return 0;
        };
        let listed = u32::try_from(self.runs.len()).unwrap_or(u32::MAX);
        let recorded = record
            .entries()
            .iter()
            .map(|e| e.run.saturating_add(1))
            .max()
            .unwrap_or(0);
        let restarted = listed.max(recorded).saturating_sub(1);
        record.totals().restarts.saturating_sub(restarted)
    }

    /// The job's state: its newest run's.
    pub fn state(&self) -> &str {
        self.runs.last().map_or("", |r| r.state.as_str())
    }
}

/// GiB-hours of GPU memory: `reserved` is the quota per GPU (with scheduling by memory, what Slurm
/// set aside in shards) times the GPUs and the run time; `used` the peak per GPU times the run
/// time, as `seff` puts a job's peak memory against its request.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct GibHours {
    pub reserved: f64,
    pub used: f64,
}

impl GibHours {
    /// `used` against `reserved`, in percent.
    pub fn efficiency(&self) -> Option<f64> {
        (self.reserved > 0.0).then(|| self.used * 100.0 / self.reserved)
    }

    pub fn add(&mut self, other: GibHours) {
        self.reserved += other.reserved;
        self.used += other.used;
    }
}

fn gib(bytes: u64) -> f64 {
    bytes as f64 / (1u64 << 30) as f64
}

fn hours(seconds: u64) -> f64 {
    seconds as f64 / 3600.0
}

/// Seconds from one sacct time (`2024-06-10T06:10:00`, the cluster's local time) to another;
/// `None` when either is not a time (`Unknown` while a run goes on) or the end is before the start.
pub(crate) fn seconds_between(start: &str, end: &str) -> Option<u64> {
    let (start, end) = (epoch_seconds(start)?, epoch_seconds(end)?);
    (end >= start).then(|| (end - start) as u64)
}

/// Seconds since 1970 of `YYYY-MM-DDTHH:MM:SS` taken as UTC (both ends of a span in one zone).
fn epoch_seconds(time: &str) -> Option<i64> {
    let (date, clock) = time.split_once('T')?;
    let mut date = date.splitn(3, '-').map(|p| p.parse::<i64>().ok());
    let (y, m, d) = (date.next()??, date.next()??, date.next()??);
    let mut clock = clock.splitn(3, ':').map(|p| p.parse::<i64>().ok());
    let (hh, mm, ss) = (clock.next()??, clock.next()??, clock.next()??);
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) || hh > 23 || mm > 59 || ss > 60 {
        return None;
    }
    // Days from civil (H. Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days * 86_400 + hh * 3600 + mm * 60 + ss)
}

/// GPU-memory efficiency in percent: how much of the quota the peak used, as `seff` reports
/// memory efficiency. Over 100 when the job went over its quota.
pub fn efficiency(peak_bytes: u64, quota: ByteSize) -> Option<f64> {
    (quota.bytes() > 0).then(|| peak_bytes as f64 * 100.0 / quota.bytes() as f64)
}

/// Groups sacct rows into jobs (by `JobIDRaw`, in order of first appearance), steps left out.
pub fn job_reports(rows: &[SacctRow]) -> Vec<JobReport> {
    let mut groups: Vec<(&str, Vec<&SacctRow>)> = Vec::new();
    for row in rows.iter().filter(|r| !r.is_step()) {
        match groups.iter_mut().find(|(id, _)| *id == row.job_id_raw) {
            Some((_, members)) => members.push(row),
            None => groups.push((&row.job_id_raw, vec![row])),
        }
    }
    groups.into_iter().map(|(_, rows)| job_report(rows)).collect()
}

/// One job from its own rows (runs, no steps).
fn job_report(mut rows: Vec<&SacctRow>) -> JobReport {
    // Started runs by start time, runs that never started (pending) after them; stable otherwise.
    let order = |r: &SacctRow| (r.started().is_none(), r.started().map(str::to_string));
    rows.sort_by_key(|r| order(r));
    let runs = rows
        .iter()
        .enumerate()
        .map(|(i, row)| Run {
            run: i as u32,
            state: row.state.clone(),
            start: row.start.clone(),
            end: row.end.clone(),
            nodes: row.node_list.clone(),
            slurm_gpumem: None,
        })
        .collect();
    let first = rows.first();
    JobReport {
        job_id: first.map(|r| r.job_id.clone()).unwrap_or_default(),
        user: first.map(|r| r.user.clone()).unwrap_or_default(),
        account: first.map(|r| r.account.clone()).unwrap_or_default(),
        runs,
        record: newest_record(&rows),
        jobstats: rows.iter().rev().find_map(|r| jobstats::find(&r.admin_comment)),
    }
}

/// The record of the newest row that has one; the newest problem if none can be read. A row's
/// record is what its AdminComment and its SystemComment (`keep-record`'s copy, there when a tool
/// replaced the AdminComment after the job ended) hold together: the segments of both are joined
/// as one (merge by maximum), so the copy and the original read as one record.
fn newest_record(rows: &[&SacctRow]) -> RecordState {
    let mut problem = None;
    for row in rows.iter().rev() {
        let both = format!("{} {}", row.admin_comment, row.system_comment);
        match record::parse(&both) {
            Ok(Some(record)) => return RecordState::Present(record),
            Ok(None) => {}
            Err(e) => problem = problem.or(Some(e)),
        }
    }
    problem.map_or(RecordState::Absent, RecordState::Unreadable)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_between_sacct_times() {
        assert_eq!(
            seconds_between("2024-06-10T06:10:00", "2024-06-10T07:10:00"),
            Some(3600)
        );
        assert_eq!(
            seconds_between("2024-02-28T23:00:00", "2024-03-01T01:00:00"),
            Some(26 * 3600)
        );
        assert_eq!(
            seconds_between("2024-12-31T23:59:59", "2025-01-01T00:00:01"),
            Some(2)
        );
        assert_eq!(seconds_between("2024-06-10T06:10:00", "Unknown"), None);
        assert_eq!(
            seconds_between("2024-06-10T07:00:00", "2024-06-10T06:00:00"),
            None
        );
        assert_eq!(epoch_seconds("1970-01-01T00:00:00"), Some(0));
        assert_eq!(epoch_seconds("2026-12-01T12:00:00"), Some(1_796_126_400));
    }
}
