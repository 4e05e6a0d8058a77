//! A job's AdminComment, read from `scontrol --oneliner show job N`. Pure. This is the fallback
//! for a Slurm without JSON output; `squeue --json` ([`super::job_json`]) is read first.
//!
//! scontrol's record is unquoted `Key=value` pairs separated by single spaces (src/api/job_info.c,
//! `slurm_sprint_job_info`), one line per job, a job array's meta job one line per task.
//! AdminComment comes after `Command=` and `WorkDir=` and before `Comment=` and the output paths,
//! followed by two spaces.
//!
//! Users write text into the same line (job name, command, paths, comment), which may imitate
//! `AdminComment=` or a whole record after a newline. So the record must be the only one that
//! starts with the job's id, and `AdminComment=` may appear at most once in it, beginning a field;
//! anything else is refused as ambiguous, and the caller leaves the AdminComment as it is (see
//! `watchdog::AdminComment::Unreadable`): imitation can cost a job its own record, never its
//! enforcement. One imitation cannot be told apart in this text: when a job has no AdminComment,
//! a working directory or command ending ` AdminComment=x` reads as one. That is why the JSON
//! record is read first; this reader is only for a Slurm built without JSON output.

/// Job `job_id`'s AdminComment from `scontrol --oneliner show job` output, verbatim; empty when the
/// job has none (Slurm then prints no `AdminComment=`). The error says what is ambiguous or missing.
pub fn parse_admin_comment(output: &str, job_id: u32) -> Result<String, String> {
    let wanted = format!("JobId={job_id}");
    let records = split_records(output);
    let mut ours = records
        .iter()
        .filter(|r| r.split([' ', '\n']).next() == Some(wanted.as_str()));
    let record = match (ours.next(), ours.next()) {
        (Some(record), None) => record,
        (None, _) => {
            return Err(format!(
                "no record for job {job_id} among {} record(s)",
                records.len()
            ))
        }
        (Some(_), Some(_)) => return Err(format!("ambiguous: more than one record starts with `{wanted}`")),
    };
    // Any `AdminComment=` but the one field (even inside a word) is user text imitating it.
    let anywhere = record.matches("AdminComment=").count();
    match key_positions(record, "AdminComment").as_slice() {
        [] if anywhere == 0 => Ok(String::new()),
        [at] if anywhere == 1 => {
            let rest = &record[at + "AdminComment=".len()..];
            Ok(rest[..admin_comment_end(rest)].to_string())
        }
        _ => Err(format!(
            "ambiguous: `AdminComment=` appears {anywhere} times (a job name, comment or path imitating it?)"
        )),
    }
}

/// One string per record: a line starting `JobId=` begins one, other lines continue the previous
/// (free text with newlines in it). Lines before the first record are dropped.
fn split_records(output: &str) -> Vec<String> {
    let mut records: Vec<String> = Vec::new();
    for line in output.lines() {
        if line.starts_with("JobId=") {
            records.push(line.to_string());
        } else if let Some(last) = records.last_mut() {
            last.push('\n');
            last.push_str(line);
        }
    }
    records
}

/// The length of the AdminComment text at the start of `rest` (what follows `AdminComment=`).
/// Slurm prints `AdminComment=TEXT`, a space, then the field separator (another space), so the text
/// ends at the first two spaces followed by `Key=`; at the end of the record when none follow (the
/// two spaces then trail).
pub(super) fn admin_comment_end(rest: &str) -> usize {
    let mut from = 0;
    while let Some(at) = rest[from..].find("  ").map(|i| from + i) {
        if starts_with_key(&rest[at + 2..]) {
            return at;
        }
        from = at + 1;
    }
    rest.strip_suffix("  ").unwrap_or(rest).len()
}

/// Byte offsets where `key=` begins a field: at the start of the record or after a space.
fn key_positions(record: &str, key: &str) -> Vec<usize> {
    let pattern = format!("{key}=");
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(at) = record[from..].find(&pattern).map(|i| from + i) {
        if at == 0 || record.as_bytes()[at - 1] == b' ' {
            found.push(at);
        }
        from = at + 1;
    }
    found
}

/// Does `text` start with `Key=`, Key being an identifier as Slurm writes its keys
/// (`StdErr`, `CPUs/Task`, `AllocNode:Sid`, `MCS_label`)?
fn starts_with_key(text: &str) -> bool {
    let key_len = text
        .bytes()
        .take_while(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'/' | b':'))
        .count();
    key_len > 0 && text.as_bytes()[0].is_ascii_alphabetic() && text[key_len..].starts_with('=')
}
