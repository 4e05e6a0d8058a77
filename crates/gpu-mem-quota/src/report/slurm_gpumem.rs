//! Slurm's own record of a job's GPU memory, beside ours: from 24.11 on, with `gres/gpu` among
//! `AccountingStorageTRES`, Slurm also tracks the usage TRES `gres/gpumem`, which jobacct_gather
//! fills where the node's GPU plugin is gpu/nvml (docs/ACCOUNTING.md). sacct shows it per step, in
//! `TRESUsageInMax` as `gres/gpumem=30G` (the step's largest task). Pure: argv out, text in.
//!
//! Each run of a requeued job is its own job row (`--duplicates`), followed by its steps' rows, so
//! a step belongs to the job row above it, and that row's start time says which run it is.

use super::job::JobReport;

/// The fields asked for; `TRESUsageInMax` holds no user text (TRES names and numbers).
const FIELDS: [&str; 4] = ["JobIDRaw", "JobID", "Start", "TRESUsageInMax"];

/// sacct's arguments: every run of job `job_id` with its steps. `job_id` was checked by
/// [`super::Query::check`].
pub fn sacct_args(job_id: &str) -> Vec<String> {
    let mut args: Vec<String> = ["--parsable2", "--noheader", "--duplicates"]
        .map(String::from)
        .to_vec();
    args.push(format!("--format={}", FIELDS.join(",")));
    args.extend(["--jobs".to_string(), job_id.to_string()]);
    args
}

/// Per run, by its start time as sacct prints it: the largest `gres/gpumem` of its steps, in
/// bytes. Runs whose steps recorded none (no gpu/nvml, Slurm before 24.11) are left out. Lines
/// that are not rows of [`FIELDS`] are skipped: this figure is an addition to the report.
pub fn gpumem_by_run(text: &str) -> Vec<(String, u64)> {
    let mut runs: Vec<(String, Option<u64>)> = Vec::new();
    for line in text.lines() {
        let fields: Vec<&str> = line.split('|').collect();
        let [_raw, job_id, start, tres] = fields.as_slice() else {
            continue;
        };
        if !job_id.contains('.') {
            runs.push((start.to_string(), None));
            continue;
        }
        let (Some((_, most)), Some(bytes)) = (runs.last_mut(), tres_bytes(tres, "gres/gpumem")) else {
            continue;
        };
        *most = Some(most.map_or(bytes, |m| m.max(bytes)));
    }
    runs.into_iter()
        .filter_map(|(start, most)| Some((start, most?)))
        .collect()
}

/// Puts each run's figure from [`gpumem_by_run`] on the run of `jobs` that started then.
pub fn attach(jobs: &mut [JobReport], by_run: &[(String, u64)]) {
    for run in jobs.iter_mut().flat_map(|job| job.runs.iter_mut()) {
        if let Some((_, bytes)) = by_run.iter().find(|(start, _)| *start == run.start) {
            run.slurm_gpumem = Some(*bytes);
        }
    }
}

/// The value of TRES `name` in a TRES usage string (`cpu=00:00:05,gres/gpumem=30G,mem=1.50M`),
/// in bytes.
fn tres_bytes(tres: &str, name: &str) -> Option<u64> {
    tres.split(',')
        .find_map(|item| item.split_once('=').filter(|(n, _)| *n == name))
        .and_then(|(_, value)| slurm_size(value))
}

/// A size as Slurm's `convert_num_unit` prints bytes: a number, whole or with two decimals, and
/// an optional binary unit (`512`, `30G`, `1.50G`).
fn slurm_size(value: &str) -> Option<u64> {
    let (number, unit) = match value.char_indices().last()? {
        (at, c) if c.is_ascii_alphabetic() => (&value[..at], c),
        _ => (value, ' '),
    };
    let scale: u64 = match unit {
        ' ' => 1,
        'K' => 1 << 10,
        'M' => 1 << 20,
        'G' => 1 << 30,
        'T' => 1 << 40,
        'P' => 1 << 50,
        _ => return None,
    };
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty()
        || !whole.bytes().all(|b| b.is_ascii_digit())
        || !fraction.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    let whole: u64 = whole.parse().ok()?;
    // Hundredths at most, as Slurm prints them.
    let hundredths: u64 = match fraction.len() {
        0 => 0,
        1 => fraction.parse::<u64>().ok()? * 10,
        2 => fraction.parse().ok()?,
        _ => return None,
    };
    whole
        .checked_mul(scale)?
        .checked_add(hundredths.checked_mul(scale)? / 100)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_as_slurm_prints_them() {
        assert_eq!(slurm_size("0"), Some(0));
        assert_eq!(slurm_size("512"), Some(512));
        assert_eq!(slurm_size("30G"), Some(30 << 30));
        assert_eq!(slurm_size("1.50G"), Some(3 << 29));
        assert_eq!(slurm_size("2.5M"), Some(5 << 19));
        for bad in ["", "G", "1.5.0G", "1.505G", "-1G", "30X", "1e3"] {
            assert_eq!(slurm_size(bad), None, "{bad}");
        }
        assert_eq!(
            tres_bytes(
                "cpu=00:00:05,gres/gpumem=30G,gres/gpuutil=40,mem=1.50M",
                "gres/gpumem"
            ),
            Some(30 << 30)
        );
        assert_eq!(tres_bytes("cpu=00:00:05,mem=1.50M", "gres/gpumem"), None);
    }

    /// Real 24.11.5 sacct output of a job requeued once, from the dev cluster (an empty SystemComment
    /// column added since); its fake GPUs have no
    /// gpu/nvml, so the batch steps' `gres/gpumem` (and gpuutil) were written in by hand where
    /// gpu/nvml puts them.
    #[test]
    fn each_run_gets_the_largest_gpumem_of_its_steps() {
        let steps = include_str!("../../tests/fixtures/slurm-24.11/sacct-steps-tres-requeued.txt");
        let by_run = gpumem_by_run(steps);
        assert_eq!(
            by_run,
            [
                ("2026-12-01T12:10:44".to_string(), 52 << 30),
                ("2026-12-01T12:10:54".to_string(), (71 << 30) / 2),
            ]
        );
        let runs = include_str!("../../tests/fixtures/slurm-24.11/sacct-runs-requeued.txt");
        let mut jobs = super::super::job_reports(&super::super::parse_rows(runs).unwrap());
        attach(&mut jobs, &by_run);
        let figures: Vec<Option<u64>> = jobs[0].runs.iter().map(|r| r.slurm_gpumem).collect();
        assert_eq!(figures, [Some(52 << 30), Some((71 << 30) / 2)]);
        let text = super::super::job_text(&jobs[0]);
        assert!(
            text.contains(
                "Slurm's own gres/gpumem (largest task of the run's steps): run 0 52G, run 1 35.5G\n"
            ),
            "{text}"
        );
        let json: serde_json::Value = serde_json::from_str(&super::super::jobs_json(&jobs)).unwrap();
        assert_eq!(json["jobs"][0]["runs"][0]["slurm_gpumem_bytes"], 52u64 << 30);
        assert_eq!(
            json["jobs"][0]["runs"][1]["entries"][0]["peak_bytes"],
            36u64 << 30
        );
        // Without gpu/nvml (the lab as it is): nothing, and nothing attached.
        assert!(gpumem_by_run(&steps.replace("gres/gpumem", "gres/other")).is_empty());
    }

    /// Real 26.05.5 sacct output (an empty SystemComment column added since) of a job requeued once by `scontrol requeue` (and cancelled in its
    /// second run), from the dev cluster: no gpu/nvml, so no `gres/gpumem`, and 26.05 leaves the
    /// extern step's TRESUsageInMax empty. Two runs, our record on the second; nothing attached.
    #[test]
    fn slurm_26_05_requeued_job_has_two_runs_and_no_gpumem() {
        let steps = include_str!("../../tests/fixtures/slurm-26.05/sacct-steps-tres-requeued.txt");
        assert!(gpumem_by_run(steps).is_empty());
        let runs = include_str!("../../tests/fixtures/slurm-26.05/sacct-runs-requeued.txt");
        let mut jobs = super::super::job_reports(&super::super::parse_rows(runs).unwrap());
        attach(&mut jobs, &gpumem_by_run(steps));
        assert_eq!(jobs.len(), 1);
        assert_eq!(jobs[0].runs.len(), 2);
        assert!(jobs[0].runs.iter().all(|r| r.slurm_gpumem.is_none()));
        let text = super::super::job_text(&jobs[0]);
        assert!(!text.contains("Slurm's own gres/gpumem"), "{text}");
        assert!(text.contains("20G"), "{text}");
    }

    #[test]
    fn arguments() {
        assert_eq!(
            sacct_args("12").join(" "),
            "--parsable2 --noheader --duplicates --format=JobIDRaw,JobID,Start,TRESUsageInMax --jobs 12"
        );
    }
}
