//! Reading `sacct --parsable2` for our reports: the command line we ask for, and its rows.
//! Pure: argv out, text in, rows out.
//!
//! `--duplicates` lists every run of a requeued job as its own row (without it sacct shows only the
//! latest run); `--allocations` leaves out job steps (`12.batch`, `12.0`), which carry no
//! AdminComment; rows of steps are skipped all the same. `--parsable2` separates fields with `|`
//! and escapes nothing, so the AdminComment, another tool's text included, is taken as the last
//! field whatever it contains, and a line too short to be a row continues the previous row's
//! AdminComment (a newline someone put there).

use std::fmt;

/// The fields we ask for, in this order; the AdminComment must stay last (see the module doc).
/// SystemComment, just before it, is where `gpu-mem-quota keep-record` keeps a copy of our record
/// (docs/ACCOUNTING.md, "Beside jobstats"): text of ours and slurmctld's, which has no `|`.
const FIELDS: [&str; 10] = [
    "JobIDRaw",
    "JobID",
    "User",
    "Account",
    "State",
    "Start",
    "End",
    "NodeList",
    "SystemComment",
    "AdminComment",
];

/// One row of sacct's output: one run of a job (or a step, see [`SacctRow::is_step`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SacctRow {
    /// The job's own id: an array task's id, not its array's (`JobIDRaw`).
    pub(crate) job_id_raw: String,
    /// The id as users know it: `12`, `12_3` (array task), `12+1` (het component), `12.batch` (step).
    pub job_id: String,
    pub user: String,
    pub account: String,
    /// `COMPLETED`, `REQUEUED`, `CANCELLED by 1000`, ...
    pub state: String,
    /// `2024-06-10T06:00:00`, or `Unknown`/`None` before the run started.
    pub start: String,
    pub(crate) end: String,
    pub node_list: String,
    /// Where `keep-record` copies our record once the job has ended.
    pub system_comment: String,
    pub admin_comment: String,
}

impl SacctRow {
    /// A job step (`12.batch`, `12.extern`, `12.0`) rather than a run of the job itself.
    pub fn is_step(&self) -> bool {
        self.job_id.contains('.')
    }

    /// The start time when the run started: sacct's `YYYY-MM-DDTHH:MM:SS`, which sorts as text.
    pub fn started(&self) -> Option<&str> {
        self.start
            .starts_with(|c: char| c.is_ascii_digit())
            .then_some(self.start.as_str())
    }
}

/// What to ask sacct for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Query {
    /// One job with every run: `12`, or an array task `12_3`.
    Job(String),
    /// A user's jobs (optionally one account's) between two times in sacct's syntax (sacct's own
    /// defaults when absent: since midnight, until now).
    User {
        user: String,
        account: Option<String>,
        start: Option<String>,
        end: Option<String>,
    },
}

impl Query {
    /// Checks the values sacct will get: a job id is `N`, `N_M` or `N+M`; no value may be empty or
    /// start with `-` (it would read as an option).
    pub fn check(&self) -> Result<(), String> {
        match self {
            Query::Job(id) => {
                let mut parts = id.splitn(2, ['_', '+']);
                let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
                let ok = parts.next().is_some_and(digits) && parts.next().is_none_or(digits);
                if ok {
                    Ok(())
                } else {
                    Err(format!(
                        "invalid job id '{id}': expected N, N_M (array task) or N+M"
                    ))
                }
            }
            Query::User { .. } => {
                for (option, _, value) in self.user_values() {
                    if let Some(v) = value {
                        if v.is_empty() || v.starts_with('-') || v.chars().any(char::is_control) {
                            return Err(format!("invalid {option} '{}'", v.escape_debug()));
                        }
                    }
                }
                Ok(())
            }
        }
    }

    /// sacct's arguments for this query.
    pub fn sacct_args(&self) -> Vec<String> {
        let mut args: Vec<String> = ["--parsable2", "--noheader", "--duplicates", "--allocations"]
            .map(String::from)
            .to_vec();
        args.push(format!("--format={}", FIELDS.join(",")));
        match self {
            Query::Job(id) => args.extend(["--jobs".to_string(), id.clone()]),
            Query::User { .. } => {
                for (_, option, value) in self.user_values() {
                    if let Some(v) = value {
                        args.extend([option.to_string(), v.clone()]);
                    }
                }
            }
        }
        args
    }

    /// A user query's values, each with the option the user gave it by and sacct's option for it;
    /// none for a job query.
    fn user_values(&self) -> Vec<(&'static str, &'static str, Option<&String>)> {
        match self {
            Query::Job(_) => Vec::new(),
            Query::User {
                user,
                account,
                start,
                end,
            } => vec![
                ("--user", "--user", Some(user)),
                ("--account", "--accounts", account.as_ref()),
                ("-S", "--starttime", start.as_ref()),
                ("-E", "--endtime", end.as_ref()),
            ],
        }
    }
}

/// A line of sacct's output that is no row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SacctError {
    /// 1-based.
    pub line: usize,
    pub text: String,
}

impl fmt::Display for SacctError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shown: String = self.text.chars().take(80).collect();
        write!(
            f,
            "sacct output line {}: expected {} fields separated by '|', got '{}'",
            self.line,
            FIELDS.len(),
            shown.escape_debug()
        )
    }
}

impl std::error::Error for SacctError {}

/// Every row of `sacct --parsable2 --noheader --format=<FIELDS>` output, steps included.
pub fn parse_rows(text: &str) -> Result<Vec<SacctRow>, SacctError> {
    let mut rows: Vec<SacctRow> = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let fields: Vec<&str> = line.splitn(FIELDS.len(), '|').collect();
        if fields.len() < FIELDS.len() {
            match rows.last_mut() {
                Some(previous) => {
                    previous.admin_comment.push('\n');
                    previous.admin_comment.push_str(line);
                    continue;
                }
                None if line.trim().is_empty() => continue,
                None => {
                    return Err(SacctError {
                        line: index + 1,
                        text: line.to_string(),
                    })
                }
            }
        }
        let field = |i: usize| fields[i].to_string();
        rows.push(SacctRow {
            job_id_raw: field(0),
            job_id: field(1),
            user: field(2),
            account: field(3),
            state: field(4),
            start: field(5),
            end: field(6),
            node_list: field(7),
            system_comment: field(8),
            admin_comment: field(9),
        });
    }
    Ok(rows)
}

/// A sentence for a sacct failure we recognise in its stderr: accounting switched off or its
/// database out of reach. `None` for anything else (the caller shows sacct's own words).
pub fn explain_failure(stderr: &str) -> Option<&'static str> {
    const DISABLED: &str = "Slurm accounting is not configured on this cluster \
        (AccountingStorageType=accounting_storage/none), so sacct keeps no job history and there \
        is nothing to report. While a job is known to slurmctld, `scontrol show job ID` shows its \
        AdminComment with the gpu-mem-quota record; for reports, set up slurmdbd.";
    const UNREACHABLE: &str = "The Slurm accounting database (slurmdbd) could not be reached; \
        try again later, or ask the administrators. `scontrol show job ID` shows a running or \
        recently finished job's AdminComment meanwhile.";
    let lower = stderr.to_ascii_lowercase();
    if lower.contains("accounting storage is disabled") {
        Some(DISABLED)
    } else if lower.contains("problem talking to the database")
        || lower.contains("slurmdbd") && (lower.contains("connection refused") || lower.contains("unable to"))
    {
        Some(UNREACHABLE)
    } else {
        None
    }
}
