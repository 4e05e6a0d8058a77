//! Job reports as text (a table per job, or a line per job) and as JSON. Pure.

use serde::Serialize;

use super::format::{human_size, percent, table};
use super::job::{efficiency, GibHours, JobReport, RecordState, Run};
use super::jobstats::Jobstats;
use gmq_core::json_number::{rounded, rounded_opt};
use gmq_core::record::{Entry, EventCounts, Facts, GpuPeaks, LastEvent, Totals};

const RUN_HEADER: [&str; 10] = [
    "RUN",
    "STATE",
    "START",
    "END",
    "NODE",
    "QUOTA",
    "PEAK",
    "EFFICIENCY",
    "PEAK PER GPU",
    "EVENTS",
];

const LIST_HEADER: [&str; 9] = [
    "JOBID",
    "USER",
    "ACCOUNT",
    "RUNS",
    "STATE",
    "QUOTA",
    "PEAK",
    "EFFICIENCY",
    "EVENTS",
];

/// The full report of one job: a row per run and node, then the totals.
pub fn job_text(job: &JobReport) -> String {
    let mut out = format!(
        "Job {}: user {}, account {}, {} run(s), {}\n",
        job.job_id,
        or_dash(&job.user),
        or_dash(&job.account),
        job.runs.len(),
        or_dash(job.state())
    );
    let mut rows = Vec::new();
    for run in &job.runs {
        push_run_rows(&mut rows, job, run.run, Some(run));
    }
    for run in job.unlisted_runs() {
        push_run_rows(&mut rows, job, run, None);
    }
    out.push_str(&table(&RUN_HEADER, &rows));
    let slurms: Vec<String> = job
        .runs
        .iter()
        .filter_map(|r| Some(format!("run {} {}", r.run, human_size(r.slurm_gpumem?))))
        .collect();
    if !slurms.is_empty() {
        // docs/ACCOUNTING.md: per task and summed over its GPUs, sampled less often than ours.
        out.push_str(&format!(
            "Slurm's own gres/gpumem (largest task of the run's steps): {}\n",
            slurms.join(", ")
        ));
    }
    if let Some(line) = jobstats_line(job.jobstats.as_ref()) {
        out.push_str(&line);
    }
    match &job.record {
        RecordState::Absent => out.push_str(
            "No gpu-mem-quota record: the job ran without a GPU-memory quota, or ended before the \
             watchdog recorded anything.\n",
        ),
        RecordState::Unreadable(e) => {
            out.push_str(&format!("The gpu-mem-quota record cannot be read: {e}\n"))
        }
        RecordState::Present(record) => {
            if let Some(folded) = &record.folded {
                out.push_str(&format!(
                    "Folded to fit the record: {} older node-run(s), peak {}, events {}\n",
                    folded.entries,
                    human_size(folded.peak),
                    events_text(&folded.facts.events)
                ));
            }
            if let Some(totals) = job.totals() {
                out.push_str(&totals_text(&totals));
            }
            let not_carried_out = job.requeues_not_carried_out();
            if not_carried_out > 0 {
                out.push_str(&format!(
                    "The record counts {not_carried_out} requeue(s) that slurmctld did not carry out \
                     (recorded before they were asked for; no run followed)\n"
                ));
            }
        }
    }
    out
}

/// One line per job: its quota, peak, efficiency and events over all runs.
pub fn jobs_list_text(jobs: &[JobReport]) -> String {
    let rows: Vec<Vec<String>> = jobs
        .iter()
        .map(|job| {
            let (quota, peak, eff, events) = match (&job.record, job.totals()) {
                (_, Some(t)) => (
                    t.quota.map_or("-".into(), |q| q.to_string()),
                    human_size(t.peak),
                    percent(total_efficiency(&t)),
                    events_text(&t.events),
                ),
                (RecordState::Unreadable(_), None) => dashes("record unreadable"),
                _ => dashes("no quota"),
            };
            vec![
                job.job_id.clone(),
                job.user.clone(),
                job.account.clone(),
                job.runs.len().to_string(),
                job.state().to_string(),
                quota,
                peak,
                eff,
                events,
            ]
        })
        .collect();
    let mut out = table(&LIST_HEADER, &rows);
    out.push_str(&gib_hours_text(jobs));
    out
}

/// The jobs' GPU memory over time, summed over the jobs that have some, and how many do.
fn gib_hours_total(jobs: &[JobReport]) -> Option<(GibHours, usize)> {
    let mut total = GibHours::default();
    let mut counted = 0;
    for hours in jobs.iter().filter_map(JobReport::gib_hours) {
        total.add(hours);
        counted += 1;
    }
    (counted > 0).then_some((total, counted))
}

/// The jobs' GPU memory over time, reserved against used at peak, as one line.
fn gib_hours_text(jobs: &[JobReport]) -> String {
    let Some((total, counted)) = gib_hours_total(jobs) else {
        return String::new();
    };
    format!(
        "GPU memory of {counted} finished job(s): {:.2} GiB-hours reserved, {:.2} used at peak ({} efficiency)\n",
        total.reserved,
        total.used,
        percent(total.efficiency())
    )
}

/// Every job in full, as `{"jobs":[...],"gib_hours":{...}}` (compact); `gib_hours` sums the jobs'
/// (the text's last line), `null` when none has a finished run with a record.
pub fn jobs_json(jobs: &[JobReport]) -> String {
    #[derive(Serialize)]
    struct Jobs<'a> {
        jobs: Vec<JobJson<'a>>,
        gib_hours: Option<GibHoursJson>,
    }
    let list = Jobs {
        jobs: jobs.iter().map(job_json).collect(),
        gib_hours: gib_hours_total(jobs).map(|(total, jobs)| gib_hours_json(total, Some(jobs))),
    };
    let jobs = list;
    serde_json::to_string(&jobs).expect("a job report always serializes")
}

#[derive(Serialize)]
struct JobJson<'a> {
    job_id: &'a str,
    user: &'a str,
    account: &'a str,
    state: &'a str,
    /// `absent`, `unreadable` or `present`.
    record: &'static str,
    record_error: Option<String>,
    runs: Vec<RunJson<'a>>,
    folded: Option<FoldedJson>,
    totals: Option<TotalsJson>,
    /// GPU memory reserved and used at peak over the finished runs; `null` without them.
    gib_hours: Option<GibHoursJson>,
    /// jobstats' summary (`JS1:` in the AdminComment); left out where the job has none.
    #[serde(skip_serializing_if = "Option::is_none")]
    jobstats: Option<JobstatsJson<'a>>,
}

/// jobstats' own figures, from its Prometheus exporters, not our measurement.
#[derive(Serialize)]
struct JobstatsJson<'a> {
    /// `gpus`, `no_gpu_figures` (`JS1:Short`, `JS1:None`, a CPU job) or `unreadable`.
    summary: &'static str,
    error: Option<&'a str>,
    gpus: Vec<JobstatsGpuJson<'a>>,
}

#[derive(Serialize)]
struct JobstatsGpuJson<'a> {
    node: &'a str,
    /// jobstats' key of the GPU on its node: the GPU's minor number, as we number GPUs too.
    gpu: &'a str,
    used_bytes: u64,
    total_bytes: Option<u64>,
}

fn jobstats_json(summary: &Jobstats) -> JobstatsJson<'_> {
    let (name, error, gpus) = match summary {
        Jobstats::Gpus(gpus) => ("gpus", None, gpus.as_slice()),
        Jobstats::NoGpuFigures => ("no_gpu_figures", None, &[][..]),
        Jobstats::Unreadable(why) => ("unreadable", Some(why.as_str()), &[][..]),
    };
    JobstatsJson {
        summary: name,
        error,
        gpus: gpus
            .iter()
            .map(|g| JobstatsGpuJson {
                node: &g.node,
                gpu: &g.gpu,
                used_bytes: g.used_bytes,
                total_bytes: g.total_bytes,
            })
            .collect(),
    }
}

/// One line on jobstats' summary, said to be theirs; `None` where the job has none.
fn jobstats_line(summary: Option<&Jobstats>) -> Option<String> {
    Some(match summary? {
        Jobstats::Gpus(gpus) => {
            let each: Vec<String> = gpus
                .iter()
                .map(|g| {
                    let total = g
                        .total_bytes
                        .map(|t| format!(" of {}", human_size(t)))
                        .unwrap_or_default();
                    format!("{} GPU {} {}{total}", g.node, g.gpu, human_size(g.used_bytes))
                })
                .collect();
            format!(
                "jobstats' summary (JS1 in the AdminComment; its exporters' figures): GPU memory used {}\n",
                each.join(", ")
            )
        }
        Jobstats::NoGpuFigures => {
            "jobstats' summary (JS1 in the AdminComment) has no GPU-memory figures.\n".to_string()
        }
        Jobstats::Unreadable(why) => {
            format!("jobstats' summary (JS1 in the AdminComment) cannot be read: {why}\n")
        }
    })
}

#[derive(Serialize)]
struct GibHoursJson {
    #[serde(serialize_with = "rounded")]
    reserved: f64,
    #[serde(serialize_with = "rounded")]
    used: f64,
    #[serde(serialize_with = "rounded_opt")]
    efficiency_percent: Option<f64>,
    /// In a list's sum: how many jobs it counts.
    #[serde(skip_serializing_if = "Option::is_none")]
    jobs: Option<usize>,
}

fn gib_hours_json(hours: GibHours, jobs: Option<usize>) -> GibHoursJson {
    GibHoursJson {
        reserved: hours.reserved,
        used: hours.used,
        efficiency_percent: hours.efficiency(),
        jobs,
    }
}

#[derive(Serialize)]
struct FoldedJson {
    entries: u32,
    peak_bytes: u64,
    events: EventsJson,
    restarts: u32,
}

#[derive(Serialize)]
struct TotalsJson {
    quota_bytes: Option<u64>,
    peak_bytes: u64,
    #[serde(serialize_with = "rounded_opt")]
    efficiency_percent: Option<f64>,
    events: EventsJson,
    restarts: u32,
    last_event: Option<LastEventJson>,
}

/// A run; its accounting fields are `null` for a run only the record knows of.
#[derive(Serialize)]
struct RunJson<'a> {
    run: u32,
    state: Option<&'a str>,
    start: Option<&'a str>,
    end: Option<&'a str>,
    nodes: Option<&'a str>,
    entries: Vec<EntryJson<'a>>,
    /// Slurm's own `gres/gpumem` of the run (24.11+ with gpu/nvml); left out where it has none.
    #[serde(skip_serializing_if = "Option::is_none")]
    slurm_gpumem_bytes: Option<u64>,
}

#[derive(Serialize)]
struct EntryJson<'a> {
    node: &'a str,
    quota_bytes: u64,
    peak_bytes: u64,
    #[serde(serialize_with = "rounded_opt")]
    efficiency_percent: Option<f64>,
    /// `null` when the record kept only the largest peak.
    gpus: Option<Vec<GpuPeakJson<'a>>>,
    over_warn_secs: u64,
    events: EventsJson,
    restarts: u32,
    last_event: Option<LastEventJson>,
    updated_at: u64,
}

#[derive(Serialize)]
struct GpuPeakJson<'a> {
    index: u32,
    id: Option<&'a str>,
    peak_bytes: u64,
}

#[derive(Serialize)]
struct LastEventJson {
    kind: &'static str,
    at: u64,
}

/// Every kind with its count, zeros included, so that consumers need no defaults.
struct EventsJson(EventCounts);

impl Serialize for EventsJson {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.0.iter().map(|(kind, n)| (kind.name(), n)))
    }
}

fn job_json(job: &JobReport) -> JobJson<'_> {
    let (record, record_error) = match &job.record {
        RecordState::Absent => ("absent", None),
        RecordState::Unreadable(e) => ("unreadable", Some(e.to_string())),
        RecordState::Present(_) => ("present", None),
    };
    let mut runs: Vec<RunJson> = job
        .runs
        .iter()
        .map(|run| run_json(job, run.run, Some(run)))
        .collect();
    runs.extend(
        job.unlisted_runs()
            .into_iter()
            .map(|run| run_json(job, run, None)),
    );
    let folded = job.record().and_then(|r| r.folded.as_ref()).map(|f| FoldedJson {
        entries: f.entries,
        peak_bytes: f.peak,
        events: EventsJson(f.facts.events),
        restarts: f.facts.restarts,
    });
    JobJson {
        job_id: &job.job_id,
        user: &job.user,
        account: &job.account,
        state: job.state(),
        record,
        record_error,
        runs,
        folded,
        totals: job.totals().map(totals_json),
        gib_hours: job.gib_hours().map(|hours| gib_hours_json(hours, None)),
        jobstats: job.jobstats.as_ref().map(jobstats_json),
    }
}

fn totals_json(t: Totals) -> TotalsJson {
    TotalsJson {
        quota_bytes: t.quota.map(|q| q.bytes()),
        peak_bytes: t.peak,
        efficiency_percent: total_efficiency(&t),
        events: EventsJson(t.events),
        restarts: t.restarts,
        last_event: t.last_event.map(last_event_json),
    }
}

/// A run as JSON; `listed` is `None` for a run only the record knows of.
fn run_json<'a>(job: &'a JobReport, run: u32, listed: Option<&'a Run>) -> RunJson<'a> {
    RunJson {
        run,
        state: listed.map(|r| r.state.as_str()),
        start: listed.map(|r| r.start.as_str()),
        end: listed.map(|r| r.end.as_str()),
        nodes: listed.map(|r| r.nodes.as_str()),
        entries: job.entries_of(run).map(entry_json).collect(),
        slurm_gpumem_bytes: listed.and_then(|r| r.slurm_gpumem),
    }
}

fn entry_json(e: &Entry) -> EntryJson<'_> {
    let gpus = match &e.peaks {
        GpuPeaks::Each(gpus) => Some(
            gpus.iter()
                .map(|g| GpuPeakJson {
                    index: g.index,
                    id: g.id.as_deref(),
                    peak_bytes: g.peak,
                })
                .collect(),
        ),
        GpuPeaks::Max(_) => None,
    };
    EntryJson {
        node: &e.node,
        quota_bytes: e.quota.bytes(),
        peak_bytes: e.peak(),
        efficiency_percent: efficiency(e.peak(), e.quota),
        gpus,
        over_warn_secs: e.facts.over_warn_secs,
        events: EventsJson(e.facts.events),
        restarts: e.facts.restarts,
        last_event: e.facts.last_event.map(last_event_json),
        updated_at: e.facts.updated_at,
    }
}

fn last_event_json(l: LastEvent) -> LastEventJson {
    LastEventJson {
        kind: l.kind.name(),
        at: l.at,
    }
}

/// Table rows for one run: one per node the record has an entry for, or one with accounting's
/// facts only. Run columns are written on the first row of a run.
fn push_run_rows(rows: &mut Vec<Vec<String>>, job: &JobReport, run: u32, listed: Option<&Run>) {
    let (state, start, end, nodes) = match listed {
        Some(r) => (
            r.state.as_str(),
            r.start.as_str(),
            r.end.as_str(),
            r.nodes.as_str(),
        ),
        None => ("(not in sacct)", "", "", ""),
    };
    let mut entries = job.entries_of(run).peekable();
    if entries.peek().is_none() {
        let mut row = vec![
            run.to_string(),
            state.into(),
            start.into(),
            end.into(),
            nodes.into(),
        ];
        row.extend(["-", "-", "-", "-", "-"].map(String::from));
        rows.push(row);
        return;
    }
    for (i, e) in entries.enumerate() {
        let first = i == 0;
        let cell = |text: &str| if first { text.to_string() } else { String::new() };
        rows.push(vec![
            cell(&run.to_string()),
            cell(state),
            cell(start),
            cell(end),
            e.node.clone(),
            e.quota.to_string(),
            human_size(e.peak()),
            percent(efficiency(e.peak(), e.quota)),
            gpu_peaks_text(&e.peaks),
            facts_text(&e.facts),
        ]);
    }
}

fn totals_text(t: &Totals) -> String {
    let quota = t.quota.map_or("-".to_string(), |q| q.to_string());
    let mut line = format!(
        "Total: peak {} of {quota} per GPU ({}); events {}",
        human_size(t.peak),
        percent(total_efficiency(t)),
        events_text(&t.events)
    );
    if t.restarts > 0 {
        line.push_str(&format!("; {} restart(s) caused by gpu-mem-quota", t.restarts));
    }
    line.push('\n');
    line
}

/// The job's largest peak against its latest quota.
fn total_efficiency(t: &Totals) -> Option<f64> {
    t.quota.and_then(|q| efficiency(t.peak, q))
}

/// `0:30G 1:41M`, by GPU index as the job saw it.
fn gpu_peaks_text(peaks: &GpuPeaks) -> String {
    match peaks {
        GpuPeaks::Each(gpus) if gpus.is_empty() => "-".to_string(),
        GpuPeaks::Each(gpus) => gpus
            .iter()
            .map(|g| format!("{}:{}", g.index, human_size(g.peak)))
            .collect::<Vec<_>>()
            .join(" "),
        GpuPeaks::Max(_) => "(largest only)".to_string(),
    }
}

/// Events, then the time spent over the warn threshold when there was any.
fn facts_text(facts: &Facts) -> String {
    let events = events_text(&facts.events);
    match facts.over_warn_secs {
        0 => events,
        secs => format!("{events} ({secs}s over warn)")
            .trim_start_matches("- ")
            .to_string(),
    }
}

/// `warn=2 requeued=1`, zeros left out; `-` when nothing happened.
fn events_text(events: &EventCounts) -> String {
    let said: Vec<String> = events
        .iter()
        .filter(|(_, n)| *n > 0)
        .map(|(kind, n)| format!("{kind}={n}"))
        .collect();
    if said.is_empty() {
        "-".to_string()
    } else {
        said.join(" ")
    }
}

fn dashes(why: &str) -> (String, String, String, String) {
    ("-".into(), "-".into(), "-".into(), why.into())
}

fn or_dash(text: &str) -> &str {
    if text.is_empty() {
        "-"
    } else {
        text
    }
}
