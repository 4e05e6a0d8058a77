//! `gpu-mem-quota keep-record`: from EpilogSlurmctld, copies the job's record from slurmctld's
//! AdminComment into the SystemComment of its accounting row, where a tool that replaces the
//! AdminComment after the job (jobstats' `sacctmgr ... set AdminComment=JS1:...`) does not reach
//! it. docs/ACCOUNTING.md, "Beside jobstats".
use std::process::ExitCode;
use std::thread::sleep;
use std::time::Duration;

use super::args::{Opt, Spec};
use gmq_core::record::{self, MARKER};
use gmq_node::slurmctl::SlurmTools;

const USAGE: &str = "\
Usage: gpu-mem-quota keep-record [--job JOBID]

Run from slurm.conf's EpilogSlurmctld (as SlurmUser or root), beside or after jobstats' epilog.
Copies the job's gpu-mem-quota record from slurmctld's AdminComment into the SystemComment of
the job's accounting row (sacctmgr), which jobstats and tools like it leave alone, so that sacct
keeps our record even when another tool replaces the AdminComment after the job has ended.
Waits (up to 60 s) for slurmdbd to have the job's end, merges with a record already there, and
reads it back. A job without a record of ours is left as it is. Exits 0 unless the copy failed.

  --job JOBID            the job (default: SLURM_JOB_ID, as slurmctld gives its epilog)
  -h, --help             this help
";

pub(crate) const SPEC: Spec = Spec {
    command: "keep-record",
    options: &[Opt::value("job")],
    max_positional: 0,
    help: || USAGE.to_string(),
    error_shows_help: true,
};

/// How long to wait for slurmdbd to have the job's end (slurmctld sends it when the job
/// completes, and its job-complete message writes the SystemComment it holds, if any).
const WAIT_FOR_END: Duration = Duration::from_secs(60);
const POLL: Duration = Duration::from_secs(2);
/// Writes tried; each is read back after [`POLL`].
const WRITES: u32 = 3;

pub(super) fn run(argv: Vec<String>) -> ExitCode {
    let job = match SPEC.parse_with(&argv, |parsed| {
        let id = parsed
            .value("job")
            .map(str::to_string)
            .or_else(|| std::env::var("SLURM_JOB_ID").ok())
            .ok_or("no --job and no SLURM_JOB_ID")?;
        if id.is_empty() || !id.bytes().all(|b| b.is_ascii_digit()) || id.parse::<u32>().is_err() {
            return Err(format!("job id '{id}' is not a job number"));
        }
        Ok(id)
    }) {
        Ok(job) => job,
        Err(status) => return status,
    };
    let array = (
        std::env::var("SLURM_ARRAY_JOB_ID").ok(),
        std::env::var("SLURM_ARRAY_TASK_ID").ok(),
    );
    let db_id = accounting_job_id(&job, array.0.as_deref(), array.1.as_deref());
    // The same single-job read as the watchdog's: JSON where squeue prints one job alone.
    let slurm = SlurmTools::find_configured().with_json_job_reads_detected();
    match keep(&slurm, &job, &db_id) {
        Ok(message) => {
            println!("gpu-mem-quota keep-record: job {db_id}: {message}");
            ExitCode::SUCCESS
        }
        Err(message) => {
            eprintln!("gpu-mem-quota keep-record: job {db_id}: {message}");
            ExitCode::from(1)
        }
    }
}

fn keep(slurm: &SlurmTools, job: &str, db_id: &str) -> Result<String, String> {
    let job_number: u32 = job.parse().map_err(|_| "not a job number".to_string())?;
    let admin_comment = slurm
        .job_record(job_number)
        .map_err(|e| format!("slurmctld's record of the job cannot be read: {e}"))?
        .admin_comment;
    let ours = match record::parse(&admin_comment) {
        Ok(Some(record)) => record::render(&record),
        Ok(None) => return Ok("no gpu-mem-quota record in its AdminComment: nothing to keep".into()),
        Err(e) => return Err(format!("its record cannot be read, so it is not copied: {e}")),
    };
    let mut waited = Duration::ZERO;
    let mut existing = loop {
        match accounting_row(slurm, db_id)? {
            Some((end, system_comment)) if end.starts_with(|c: char| c.is_ascii_digit()) => {
                break system_comment
            }
            _ if waited >= WAIT_FOR_END => {
                return Err(format!(
                    "accounting has not recorded the job's end after {}s",
                    waited.as_secs()
                ))
            }
            _ => {
                sleep(POLL);
                waited += POLL;
            }
        }
    };
    for _ in 0..WRITES {
        let text = system_comment_with(&existing, &ours);
        if text == existing {
            return Ok("the SystemComment already holds the record".into());
        }
        slurm
            .set_system_comment_in_accounting(db_id, &text)
            .map_err(|e| format!("sacctmgr did not write the SystemComment: {e}"))?;
        sleep(POLL);
        existing = accounting_row(slurm, db_id)?.map(|(_, s)| s).unwrap_or_default();
        if holds(&existing, &text) {
            return Ok("record copied to the SystemComment".into());
        }
    }
    Err(format!(
        "the SystemComment still lacks the record after {WRITES} writes"
    ))
}

/// `(End, SystemComment)` of the job's latest run in accounting: `sacct -X -n -P -j ID -o
/// End,SystemComment` (no `--duplicates`: the latest run only).
fn accounting_row(slurm: &SlurmTools, db_id: &str) -> Result<Option<(String, String)>, String> {
    let args: Vec<String> = ["-X", "-n", "-P", "-j", db_id, "-o", "End,SystemComment"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let out = slurm.sacct(&args).map_err(|e| format!("sacct failed: {e}"))?;
    Ok(out
        .lines()
        .last()
        .and_then(|line| line.split_once('|'))
        .map(|(end, comment)| (end.to_string(), comment.to_string())))
}

/// The id sacctmgr takes for the job's own row: `ARRAY_TASK` for the array task whose job id is
/// the array's (sacctmgr would take that id for every task of the array), as jobstats' epilog
/// does; the job id otherwise.
pub(crate) fn accounting_job_id(job: &str, array_job: Option<&str>, array_task: Option<&str>) -> String {
    match (array_job, array_task) {
        (Some(array), Some(task))
            if array == job && task.bytes().all(|b| b.is_ascii_digit()) && !task.is_empty() =>
        {
            format!("{job}_{task}")
        }
        _ => job.to_string(),
    }
}

/// `existing` SystemComment with our record `ours` in it: other text kept (slurmctld's own
/// notes), segments of ours already there joined with it (merge by maximum) and replaced by one.
/// A stored segment that cannot be read (22.05's sacctmgr lowercases what it writes) is replaced.
pub(crate) fn system_comment_with(existing: &str, ours: &str) -> String {
    let (stored, others): (Vec<&str>, Vec<&str>) =
        existing.split_whitespace().partition(|t| t.contains(MARKER));
    let joined = match record::parse(&format!("{ours} {}", stored.join(" "))) {
        Ok(Some(record)) => record::render(&record),
        _ => ours.to_string(),
    };
    let mut text = others.join(" ");
    if !text.is_empty() {
        text.push(' ');
    }
    text.push_str(&joined);
    text
}

/// Whether the SystemComment read back is what we wrote (compared case-insensitively: 22.05's
/// sacctmgr lowercases it).
fn holds(read_back: &str, written: &str) -> bool {
    read_back.trim().eq_ignore_ascii_case(written.trim())
}

#[cfg(test)]
mod tests {
    use super::*;

    const OURS: &str = "gpu-mem-quota:v1{n1/0:q=40G,g0=30G,warn=1,t=5}";

    #[test]
    fn the_record_goes_beside_slurmctlds_text_and_joins_one_already_there() {
        assert_eq!(system_comment_with("", OURS), OURS);
        assert_eq!(
            system_comment_with("slurm_cred_create failure, holding job.", OURS),
            format!("slurm_cred_create failure, holding job. {OURS}")
        );
        let earlier = "gpu-mem-quota:v1{n1/0:q=40G,g0=31G,t=4;n2/0:q=40G,g0=1G,t=4}";
        let joined = system_comment_with(earlier, OURS);
        let record = record::parse(&joined).unwrap().unwrap();
        assert_eq!(record.entries().len(), 2);
        assert_eq!(record.entry("n1", 0).unwrap().peak(), 31 << 30);
        assert_eq!(joined.matches(MARKER).count(), 1);
        // Idempotent: a second run finds nothing to write.
        assert_eq!(
            system_comment_with(&system_comment_with("x", OURS), OURS),
            system_comment_with("x", OURS)
        );
    }

    #[test]
    fn a_lowercased_copy_22_05_left_is_replaced() {
        let lowered = OURS.to_ascii_lowercase();
        assert_eq!(system_comment_with(&lowered, OURS), OURS);
        assert!(holds(&lowered, OURS));
        assert!(!holds("", OURS));
        // What a reader makes of the lowercased copy: the same record (units read either case).
        assert_eq!(record::parse(&lowered).unwrap(), record::parse(OURS).unwrap());
    }

    #[test]
    fn array_tasks_are_named_as_jobstats_names_them() {
        assert_eq!(accounting_job_id("40", Some("40"), Some("3")), "40_3");
        assert_eq!(accounting_job_id("41", Some("40"), Some("4")), "41");
        assert_eq!(accounting_job_id("42", None, None), "42");
        assert_eq!(accounting_job_id("40", Some("40"), Some("x;y")), "40");
    }
}
