//! A job's GPU-memory story from its sacct rows: its runs (one row per start, with
//! `--duplicates`), and our record from its AdminComment. Pure.
//!
//! The record lives in slurmctld's copy of the job and survives requeues, so the newest run's
//! AdminComment holds every run's entries; older rows hold the record as it was then. We read the
//! newest row that has one. Run `k` of the record (Slurm's restart count) is the `k`-th row in
//! start order: each requeue gives the job a new accounting row.

use super::sacct::SacctRow;
use crate::record::{self, Entry, Record, RecordError, Totals};
use crate::size::ByteSize;

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

    pub fn totals(&self) -> Option<Totals> {
        self.record().map(Record::totals)
    }

    /// The job's state: its newest run's.
    pub fn state(&self) -> &str {
        self.runs.last().map_or("", |r| r.state.as_str())
    }
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
    }
}

/// The record of the newest row that has one; the newest problem if none can be read.
fn newest_record(rows: &[&SacctRow]) -> RecordState {
    let mut problem = None;
    for row in rows.iter().rev() {
        match record::parse(&row.admin_comment) {
            Ok(Some(record)) => return RecordState::Present(record),
            Ok(None) => {}
            Err(e) => problem = problem.or(Some(e)),
        }
    }
    problem.map_or(RecordState::Absent, RecordState::Unreadable)
}
