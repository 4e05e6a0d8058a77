//! Reading jobs from `squeue --Format` lines (Slurm 22.05 formats), and sorting failure texts.

use gmq_core::slurm_text::{classify, parse_squeue, JobState, Refusal, Verdict};

/// Verbatim from the dev cluster (22.05.8, `squeue --noheader --states=all --jobs=N
/// --Format=SQUEUE_FORMAT`): a finished batch job and a held one. Then the tasks of an array, as
/// squeue lists them when asked for the array's id (the dev cluster's, one task changed to show
/// restarts and a hostlist).
const SQUEUE_COMPLETED: &str =
    "199|gmq-user|2001|4294901605|physics|normal|FAILED|1|0|1|2026-11-30T08:13:43|gpu|vm|1|\n";
const SQUEUE_HELD: &str = "200|gmq-user|2001|0|physics|normal|PENDING|1|0|1|N/A|gpu||1|\n";
const SQUEUE_ARRAY: &str =
    "388|gmq-user|2001|4294901439|physics|normal|RUNNING|1|0|1|2026-11-30T08:30:01|gpu|vm|1|\n\
390|gmq-user|2001|4294901439|physics|normal|RUNNING|1|0|1|2026-11-30T08:30:01|gpu|vm|1|\n\
389|gmq-user|2001|4294901439|physics|normal|COMPLETING|1|2|1|2026-11-30T08:30:01|gpu|gpu[01-02]|2|\n";

#[test]
fn reads_the_fields_of_real_squeue_lines() {
    let completed = parse_squeue(SQUEUE_COMPLETED, 199).unwrap();
    assert_eq!(
        (completed.job_id, completed.job_state.clone(), completed.restarts),
        (199, JobState::Failed, 0)
    );
    assert_eq!((completed.requeue, completed.batch_flag), (true, 1));
    assert!(completed.is_requeueable());
    assert_eq!(
        (completed.user_name.as_str(), completed.user_id),
        ("gmq-user", 2001)
    );
    assert_eq!(
        (
            completed.account.as_str(),
            completed.qos.as_str(),
            completed.partition.as_str()
        ),
        ("physics", "normal", "gpu")
    );
    assert_eq!(completed.priority, 4294901605);
    assert_eq!(
        (completed.start_time.as_str(), completed.node_list.as_str()),
        ("2026-11-30T08:13:43", "vm")
    );

    let held = parse_squeue(SQUEUE_HELD, 200).unwrap();
    assert_eq!((held.job_state, held.priority), (JobState::Pending, 0));
    assert_eq!((held.start_time.as_str(), held.node_list.as_str()), ("N/A", ""));

    let salloc = parse_squeue(
        "4300|bob|2002|1000|chem|high|RUNNING|0|0|0|N/A|debug|n1|1|\n",
        4300,
    )
    .unwrap();
    assert!(!salloc.is_requeueable());
}

#[test]
fn picks_the_exact_job_among_an_arrays_tasks() {
    for (id, state, restarts, nodes, count) in [
        (388, JobState::Running, 0, "vm", 1),
        (389, JobState::Completing, 2, "gpu[01-02]", 2),
        (390, JobState::Running, 0, "vm", 1),
    ] {
        let job = parse_squeue(SQUEUE_ARRAY, id).unwrap_or_else(|e| panic!("job {id}: {e}"));
        assert_eq!(
            (
                job.job_id,
                job.job_state,
                job.restarts,
                job.node_list.as_str(),
                job.node_count
            ),
            (id, state, restarts, nodes, count)
        );
    }
    let missing = parse_squeue(SQUEUE_ARRAY, 38).unwrap_err();
    assert!(missing.contains("no line for job 38 among 3"), "{missing}");
}

#[test]
fn refuses_squeue_lines_it_cannot_read() {
    let line = SQUEUE_COMPLETED;
    // (output, words the error must contain)
    let table: Vec<(String, &str)> = vec![
        (
            line.replace("|physics|", "|phys|ics|"),
            "15 value(s) where 14 were asked for",
        ),
        (line.replace("|gpu|vm|1|", "|gpu|vm|"), "13 value(s) where 14"),
        (
            line.replace("|gpu|vm|1|", "|gpu|vm|1|x"),
            "`x` after the last field",
        ),
        (
            line.replace("|gpu|vm|1|", "|gpu|vm|1-2|"),
            "NumNodes `1-2` is not a number",
        ),
        (format!("{line}{line}"), "more than one line for job 199"),
        (line.replace("|FAILED|", "||"), "empty State"),
        (
            line.replace("|1|0|1|", "|yes|0|1|"),
            "Requeue `yes` is neither 0 nor 1",
        ),
        (
            line.replace("|1|0|1|", "|1|two|1|"),
            "RestartCnt `two` is not a number",
        ),
        (
            line.replace("|1|0|1|", "|1|0|70000|"),
            "BatchFlag `70000` is not a number (or out of range)",
        ),
        (
            line.replace("4294901605", "4294967296"),
            "PriorityLong `4294967296`",
        ),
        (line.replace("|2001|", "|-1|"), "UserID `-1`"),
        ("hello world\n".to_string(), "no line for job 199 among 1"),
        (String::new(), "no line for job 199 among 0"),
    ];
    for (output, words) in table {
        let err = parse_squeue(&output, 199).expect_err(words);
        assert!(err.contains(words), "expected {words:?}, got {err:?}");
    }
}

#[test]
fn keeps_unknown_states_verbatim() {
    for (spelling, state) in [
        ("RUNNING", JobState::Running),
        ("CONFIGURING", JobState::Configuring),
        ("OUT_OF_MEMORY", JobState::OutOfMemory),
        ("REQUEUE_HOLD", JobState::RequeueHold),
        ("FUTURE_STATE", JobState::Other("FUTURE_STATE".to_string())),
    ] {
        assert_eq!(JobState::from_slurm(spelling), state);
        assert_eq!(state.as_str(), spelling);
    }
    let ended: Vec<bool> = [
        JobState::Running,
        JobState::Completing,
        JobState::Failed,
        JobState::Pending,
    ]
    .iter()
    .map(JobState::has_ended)
    .collect();
    assert_eq!(ended, [false, true, true, false]);
}

#[test]
fn sorts_failure_texts_by_slurms_words() {
    let table = [
        (
            "slurm_load_jobs error: Invalid job id specified",
            Verdict::Refused(Refusal::InvalidJobId),
        ),
        (
            "Requested operation is presently disabled for job 42",
            Verdict::Refused(Refusal::NotRequeueable),
        ),
        (
            "Only batch jobs are accepted or processed for job 42",
            Verdict::Refused(Refusal::BatchOnly),
        ),
        (
            "Access/permission denied for job 42",
            Verdict::Refused(Refusal::AccessDenied),
        ),
        (
            "Job is pending execution for job 42",
            Verdict::Refused(Refusal::JobPending),
        ),
        (
            "scancel: error: Kill job error on job id 42: Job/step already completing or completed",
            Verdict::Refused(Refusal::AlreadyDone),
        ),
        (
            "Job is no longer pending execution for job 42",
            Verdict::Refused(Refusal::Other),
        ),
        (
            "scontrol: fatal: Unable to process configuration file",
            Verdict::Refused(Refusal::Other),
        ),
        (
            "slurm_load_jobs error: Unable to contact slurm controller (connect failure)",
            Verdict::Transient,
        ),
        ("Unexpected message received for job 42", Verdict::Transient),
        (
            "slurm_load_jobs error: Socket timed out on send/recv operation",
            Verdict::Transient,
        ),
        (
            "Job can not be altered now, try again later for job 42",
            Verdict::Transient,
        ),
        ("error: connect: Connection refused", Verdict::Transient),
        // The controller answered: its answer wins over a retry warning printed before it.
        (
            "Socket timed out on send/recv operation\nInvalid job id specified",
            Verdict::Refused(Refusal::InvalidJobId),
        ),
    ];
    for (text, verdict) in table {
        assert_eq!(classify(text), verdict, "{text}");
    }
}
