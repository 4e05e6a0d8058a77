//! `gpu-mem-quota report`: a job's GPU-memory quota, peak, efficiency and events over all its
//! runs, or one line per job of a user, from `sacct` and our AdminComment record.
use std::process::ExitCode;

use super::args::{Opt, Parsed, Spec};
use crate::report::{self, Query};
use gmq_core::slurm_text::CtlError;
use gmq_node::slurmctl::SlurmTools;

const USAGE: &str = "\
Usage: gpu-mem-quota report -j JOBID [--json]
       gpu-mem-quota report -u USER [-A ACCOUNT] [-S START] [-E END] [--json]

Reads Slurm accounting (sacct, every requeued run included) and the gpu-mem-quota record in each
job's AdminComment, and shows the GPU-memory quota, the peak per GPU, the GPU-memory efficiency
(peak / quota, as seff shows memory efficiency) and what the watchdog did or saw (warn,
over_quota, preempted, requeued, cancelled, held, oom, node_fail). With -j, also Slurm's own
gres/gpumem per run where it records one (Slurm 24.11 and later with the gpu/nvml plugin). Our
record is also read from the SystemComment, where `gpu-mem-quota keep-record` copies it for sites
whose jobstats replaces the AdminComment; jobstats' per-GPU memory (JS1 in the AdminComment) is
shown beside ours where it is there.

  -j, --job JOBID        one job, a row per run and node (JOBID: N, N_M for an array task, or
                         N+M for a heterogeneous job's component)
  -u, --user USER        one line per job of USER
  -A, --account ACCOUNT  only jobs of this account
  -S, --start TIME       jobs that ran after TIME, in sacct's syntax (default: since midnight)
  -E, --end TIME         jobs that ran before TIME (default: now)
  --json                 everything as JSON: {\"jobs\":[...]}
  -h, --help             this help
";

/// sacct's spellings: `-j`, `-u`, `-A`, `-S`, `-E`.
const OPTIONS: &[Opt] = &[
    Opt::value("job").short('j'),
    Opt::value("user").short('u'),
    Opt::value("account").short('A'),
    Opt::value("start").short('S'),
    Opt::value("end").short('E'),
    Opt::flag("json"),
];

pub(crate) const SPEC: Spec = Spec {
    command: "report",
    options: OPTIONS,
    max_positional: 0,
    help: || USAGE.to_string(),
    error_shows_help: true,
};

pub(super) fn run(argv: Vec<String>) -> ExitCode {
    let (query, json) = match SPEC.parse_with(&argv, |parsed| Ok((query(parsed)?, parsed.flag("json")))) {
        Ok(read) => read,
        Err(status) => return status,
    };
    let slurm = SlurmTools::find_configured();
    let output = match slurm.sacct(&query.sacct_args()) {
        Ok(output) => output,
        Err(e) => {
            eprintln!("gpu-mem-quota report: {}", failure_sentence(&e));
            return ExitCode::from(1);
        }
    };
    let rows = match report::parse_rows(&output) {
        Ok(rows) => rows,
        Err(e) => {
            eprintln!("gpu-mem-quota report: {e}");
            return ExitCode::from(1);
        }
    };
    let mut jobs = report::job_reports(&rows);
    // Slurm's own figure beside ours, where it has one (24.11+ with gpu/nvml): an addition, so a
    // failure here leaves the report as it is.
    if let Query::Job(id) = &query {
        if let Ok(steps) = slurm.sacct(&report::slurm_gpumem::sacct_args(id)) {
            report::slurm_gpumem::attach(&mut jobs, &report::slurm_gpumem::gpumem_by_run(&steps));
        }
    }
    if json {
        println!("{}", report::jobs_json(&jobs));
        return ExitCode::SUCCESS;
    }
    match (&query, jobs.is_empty()) {
        (Query::Job(id), true) => {
            eprintln!(
                "gpu-mem-quota report: accounting has no job {id}: not started yet, hidden from \
                 you (another user's), older than the database keeps, or slurmdbd did not answer \
                 (`sacct -v -j {id}` tells)"
            );
            return ExitCode::from(1);
        }
        (Query::Job(_), false) => {
            let texts: Vec<String> = jobs.iter().map(report::job_text).collect();
            print!("{}", texts.join("\n"));
        }
        (Query::User { user, .. }, true) => println!("No jobs of {user} in that time range."),
        (Query::User { .. }, false) => print!("{}", report::jobs_list_text(&jobs)),
    }
    ExitCode::SUCCESS
}

/// What to say when sacct failed: our sentence when we know the cause, sacct's words otherwise.
fn failure_sentence(error: &CtlError) -> String {
    let said = match error {
        CtlError::Refused { message, .. } | CtlError::Transient { message, .. } => message.as_str(),
        _ => "",
    };
    match report::explain_failure(said) {
        Some(sentence) => sentence.to_string(),
        None => error.to_string(),
    }
}

/// The query the options ask for, or a usage error.
fn query(parsed: &Parsed) -> Result<Query, String> {
    let owned = |key: &str| parsed.value(key).map(str::to_string);
    let query = match (owned("job"), owned("user")) {
        (Some(job), None) => {
            if ["account", "start", "end"]
                .iter()
                .any(|k| parsed.value(k).is_some())
            {
                return Err("-A, -S and -E go with -u, not with -j".into());
            }
            Query::Job(job)
        }
        (None, Some(user)) => Query::User {
            user,
            account: owned("account"),
            start: owned("start"),
            end: owned("end"),
        },
        (Some(_), Some(_)) => return Err("give -j or -u, not both".into()),
        (None, None) => return Err("give -j JOBID or -u USER".into()),
    };
    query.check()?;
    Ok(query)
}
