//! Job reports as text (a table per job, or a line per job) and as JSON. Pure.

use super::format::{human_size, percent, table};
use super::job::{efficiency, JobReport, RecordState, Run};
use crate::json::Json;
use crate::record::{Entry, EventCounts, Facts, GpuPeaks, LastEvent, Totals};

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
            out.push_str(&totals_text(&record.totals()));
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
    table(&LIST_HEADER, &rows)
}

/// Every job in full, as `{"jobs":[...]}`.
pub fn jobs_json(jobs: &[JobReport]) -> Json {
    Json::Obj(vec![("jobs", Json::Arr(jobs.iter().map(job_json).collect()))])
}

fn job_json(job: &JobReport) -> Json {
    let (record, error) = match &job.record {
        RecordState::Absent => ("absent", Json::Null),
        RecordState::Unreadable(e) => ("unreadable", Json::str(e.to_string())),
        RecordState::Present(_) => ("present", Json::Null),
    };
    let mut runs: Vec<Json> = job
        .runs
        .iter()
        .map(|run| run_json(job, run.run, Some(run)))
        .collect();
    runs.extend(
        job.unlisted_runs()
            .into_iter()
            .map(|run| run_json(job, run, None)),
    );
    let folded = job
        .record()
        .and_then(|r| r.folded.as_ref())
        .map_or(Json::Null, |f| {
            Json::Obj(vec![
                ("entries", Json::Int(f.entries.into())),
                ("peak_bytes", Json::Int(f.peak)),
                ("events", events_json(&f.facts.events)),
                ("restarts", Json::Int(f.facts.restarts.into())),
            ])
        });
    let totals = job.totals().map_or(Json::Null, |t| {
        Json::Obj(vec![
            (
                "quota_bytes",
                t.quota.map_or(Json::Null, |q| Json::Int(q.bytes())),
            ),
            ("peak_bytes", Json::Int(t.peak)),
            (
                "efficiency_percent",
                total_efficiency(&t).map_or(Json::Null, Json::Num),
            ),
            ("events", events_json(&t.events)),
            ("restarts", Json::Int(t.restarts.into())),
            ("last_event", last_event_json(t.last_event)),
        ])
    });
    Json::Obj(vec![
        ("job_id", Json::str(&job.job_id)),
        ("user", Json::str(&job.user)),
        ("account", Json::str(&job.account)),
        ("state", Json::str(job.state())),
        ("record", Json::str(record)),
        ("record_error", error),
        ("runs", Json::Arr(runs)),
        ("folded", folded),
        ("totals", totals),
    ])
}

/// A run as JSON; `listed` is `None` for a run only the record knows of.
fn run_json(job: &JobReport, run: u32, listed: Option<&Run>) -> Json {
    let text = |f: fn(&Run) -> &String| listed.map_or(Json::Null, |r| Json::str(f(r)));
    Json::Obj(vec![
        ("run", Json::Int(run.into())),
        ("state", text(|r| &r.state)),
        ("start", text(|r| &r.start)),
        ("end", text(|r| &r.end)),
        ("nodes", text(|r| &r.nodes)),
        (
            "entries",
            Json::Arr(job.entries_of(run).map(entry_json).collect()),
        ),
    ])
}

fn entry_json(e: &Entry) -> Json {
    let gpus = match &e.peaks {
        GpuPeaks::Each(gpus) => Json::Arr(
            gpus.iter()
                .map(|g| {
                    Json::Obj(vec![
                        ("index", Json::Int(g.index.into())),
                        ("id", g.id.as_ref().map_or(Json::Null, Json::str)),
                        ("peak_bytes", Json::Int(g.peak)),
                    ])
                })
                .collect(),
        ),
        GpuPeaks::Max(_) => Json::Null,
    };
    Json::Obj(vec![
        ("node", Json::str(&e.node)),
        ("quota_bytes", Json::Int(e.quota.bytes())),
        ("peak_bytes", Json::Int(e.peak())),
        (
            "efficiency_percent",
            efficiency(e.peak(), e.quota).map_or(Json::Null, Json::Num),
        ),
        ("gpus", gpus),
        ("over_warn_secs", Json::Int(e.facts.over_warn_secs)),
        ("events", events_json(&e.facts.events)),
        ("restarts", Json::Int(e.facts.restarts.into())),
        ("last_event", last_event_json(e.facts.last_event)),
        ("updated_at", Json::Int(e.facts.updated_at)),
    ])
}

/// Every kind with its count, zeros included, so that consumers need no defaults.
fn events_json(events: &EventCounts) -> Json {
    Json::Obj(
        events
            .iter()
            .map(|(kind, n)| (kind.name(), Json::Int(n.into())))
            .collect(),
    )
}

fn last_event_json(last: Option<LastEvent>) -> Json {
    last.map_or(Json::Null, |l| {
        Json::Obj(vec![("kind", Json::str(l.kind.name())), ("at", Json::Int(l.at))])
    })
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
pub fn events_text(events: &EventCounts) -> String {
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
