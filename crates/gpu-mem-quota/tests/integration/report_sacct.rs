//! `gpu-mem-quota report`, pure part: sacct --parsable2 rows (hand-written, as sacct 22.05 prints
//! them with --duplicates) into jobs and runs, our record among other tools' text, efficiency
//! maths, the text and JSON shapes.

use gmq_core::record::EventKind;
use serde_json::Value;

use gmq_commands::report::{
    efficiency, explain_failure, job_reports, job_text, jobs_json, jobs_list_text, parse_rows, Query,
    RecordState,
};
use gmq_core::size::parse_size;

const GIB: u64 = 1 << 30;

/// Job 12 requeued twice by the watchdog (over quota on runs 0 and 1), completed on run 2. An
/// admin tool wrote `ticket=INC42` first. sacct lists the runs newest first here, and one step
/// row (`12.batch`), which has no AdminComment and must be skipped. Each run's row carries the
/// record as it was at that run's end.
const REQUEUED_TWICE: &str = "\
12|12|alice|physics|COMPLETED|2024-06-10T06:10:00|2024-06-10T07:10:00|gpu01||ticket=INC42 gpu-mem-quota:v1{gpu01/0:q=40G,g0=41G/1a2b3c4d,g1=2G/5e6f7a8b,ws=12,warn=1,over_quota=1,requeued=1,restarts=1,last=requeued@1718000061,t=1718000061;gpu01/1:q=40G,g0=40964M/1a2b3c4d,warn=1,over_quota=1,requeued=1,restarts=1,last=requeued@1718000400,t=1718000400;gpu01/2:q=40G,g0=30G/1a2b3c4d,g1=12G/5e6f7a8b,t=1718003600}
12|12.batch||physics|COMPLETED|2024-06-10T06:10:00|2024-06-10T07:10:00|gpu01||
12|12|alice|physics|REQUEUED|2024-06-10T06:05:00|2024-06-10T06:06:40|gpu01||ticket=INC42 gpu-mem-quota:v1{gpu01/0:q=40G,g0=41G/1a2b3c4d,g1=2G/5e6f7a8b,ws=12,warn=1,over_quota=1,requeued=1,restarts=1,last=requeued@1718000061,t=1718000061;gpu01/1:q=40G,g0=40964M/1a2b3c4d,warn=1,over_quota=1,requeued=1,restarts=1,last=requeued@1718000400,t=1718000400}
12|12|alice|physics|REQUEUED|2024-06-10T06:00:00|2024-06-10T06:01:01|gpu01||ticket=INC42 gpu-mem-quota:v1{gpu01/0:q=40G,g0=41G/1a2b3c4d,g1=2G/5e6f7a8b,ws=12,warn=1,over_quota=1,requeued=1,restarts=1,last=requeued@1718000061,t=1718000061}
";

/// A job that peaked at 30G of its 40G quota, with no events.
const PEAKED_30_OF_40: &str =
    "4242|4242|bob|chem|COMPLETED|2024-06-11T08:00:00|2024-06-11T09:00:00|gpu02||gpu-mem-quota:v1{gpu02/0:q=40G,g0=30G/aaaa0000,t=1718100000}\n";

#[test]
fn a_job_requeued_twice_has_three_runs_in_start_order() {
    let rows = parse_rows(REQUEUED_TWICE).unwrap();
    assert_eq!(rows.len(), 4);
    assert!(rows[1].is_step());
    let jobs = job_reports(&rows);
    assert_eq!(jobs.len(), 1);
    let job = &jobs[0];
    assert_eq!(
        (job.job_id.as_str(), job.user.as_str(), job.account.as_str()),
        ("12", "alice", "physics")
    );
    let runs: Vec<(u32, &str, &str)> = job
        .runs
        .iter()
        .map(|r| (r.run, r.state.as_str(), r.start.as_str()))
        .collect();
    assert_eq!(
        runs,
        [
            (0, "REQUEUED", "2024-06-10T06:00:00"),
            (1, "REQUEUED", "2024-06-10T06:05:00"),
            (2, "COMPLETED", "2024-06-10T06:10:00"),
        ]
    );
    assert_eq!(job.state(), "COMPLETED");
    // The newest row's record has all three runs; the other tool's text does not disturb it.
    let record = job.record().expect("record");
    assert_eq!(record.entries().len(), 3);
    let t = job.totals().unwrap();
    assert_eq!(t.peak, 41 * GIB);
    assert_eq!(t.events.get(EventKind::Requeued), 2);
    assert_eq!(t.events.get(EventKind::OverQuota), 2);
    assert_eq!(t.restarts, 2);
    assert!(job.unlisted_runs().is_empty());
}

#[test]
fn the_job_table_shows_every_run_both_events_and_the_totals() {
    let jobs = job_reports(&parse_rows(REQUEUED_TWICE).unwrap());
    let text = job_text(&jobs[0]);
    let expected = "\
Job 12: user alice, account physics, 3 run(s), COMPLETED
RUN  STATE      START                END                  NODE   QUOTA  PEAK   EFFICIENCY  PEAK PER GPU  EVENTS
0    REQUEUED   2024-06-10T06:00:00  2024-06-10T06:01:01  gpu01  40G    41G    102.5%      0:41G 1:2G    warn=1 over_quota=1 requeued=1 (12s over warn)
1    REQUEUED   2024-06-10T06:05:00  2024-06-10T06:06:40  gpu01  40G    40.0G  100.0%      0:40.0G       warn=1 over_quota=1 requeued=1
2    COMPLETED  2024-06-10T06:10:00  2024-06-10T07:10:00  gpu01  40G    30G    75.0%       0:30G 1:12G   -
Total: peak 41G of 40G per GPU (102.5%); events warn=2 over_quota=2 requeued=2; 2 restart(s) caused by gpu-mem-quota
";
    assert_eq!(text, expected);
}

#[test]
fn efficiency_is_peak_over_quota_in_percent() {
    let q = |s: &str| parse_size(s).unwrap();
    let table = [
        (30 * GIB, "40G", 75.0),
        (0, "40G", 0.0),
        (40 * GIB, "40G", 100.0),
        (41 * GIB, "40G", 102.5),
        (512 << 20, "1G", 50.0),
    ];
    for (peak, quota, want) in table {
        let got = efficiency(peak, q(quota)).unwrap();
        assert!((got - want).abs() < 1e-9, "{peak} of {quota}: {got}");
    }
    assert_eq!(efficiency(1, gmq_core::size::ByteSize::from_bytes(0)), None);

    let jobs = job_reports(&parse_rows(PEAKED_30_OF_40).unwrap());
    assert!(job_text(&jobs[0]).contains("Total: peak 30G of 40G per GPU (75.0%); events -\n"));
}

#[test]
fn jobs_without_a_record_or_with_a_broken_one_say_so() {
    let text = "\
20|20|carol|bio|COMPLETED|2024-06-12T01:00:00|2024-06-12T02:00:00|gpu03||ticket=INC7
21|21|carol|bio|FAILED|2024-06-12T03:00:00|2024-06-12T03:00:05|gpu03||note gpu-mem-quota:v1{gpu03/0:q=40G,g0=1G more
22|22|carol|bio|PENDING|Unknown|Unknown|None assigned||
";
    let jobs = job_reports(&parse_rows(text).unwrap());
    assert_eq!(jobs.len(), 3);
    assert_eq!(jobs[0].record, RecordState::Absent);
    assert!(matches!(jobs[1].record, RecordState::Unreadable(_)));
    assert!(job_text(&jobs[0]).contains("No gpu-mem-quota record: the job ran without a GPU-memory quota"));
    assert!(job_text(&jobs[1]).contains("The gpu-mem-quota record cannot be read: "));
    assert!(job_text(&jobs[2]).contains("0    PENDING  Unknown  Unknown  None assigned  -"));

    let mut all = parse_rows(PEAKED_30_OF_40).unwrap();
    all.extend(parse_rows(text).unwrap());
    let list = jobs_list_text(&job_reports(&all));
    let expected = "\
JOBID  USER   ACCOUNT  RUNS  STATE      QUOTA  PEAK  EFFICIENCY  EVENTS
4242   bob    chem     1     COMPLETED  40G    30G   75.0%       -
20     carol  bio      1     COMPLETED  -      -     -           no quota
21     carol  bio      1     FAILED     -      -     -           record unreadable
22     carol  bio      1     PENDING    -      -     -           no quota
GPU memory of 1 finished job(s): 40.00 GiB-hours reserved, 30.00 used at peak (75.0% efficiency)
";
    assert_eq!(list, expected);
}

#[test]
fn foreign_text_with_pipes_and_newlines_stays_in_the_admin_comment() {
    // sacct escapes nothing: a `|` in the AdminComment adds fields, a newline splits the row.
    let text = "\
30|30|dan|ml|COMPLETED|2024-06-13T01:00:00|2024-06-13T02:00:00|gpu04||a|b gpu-mem-quota:v1{gpu04/0:q=20G,g0=5G,t=1}
31|31|dan|ml|COMPLETED|2024-06-13T01:00:00|2024-06-13T02:00:00|gpu04||first line
second line gpu-mem-quota:v1{gpu04/0:q=20G,g0=10G,t=1}
";
    let rows = parse_rows(text).unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(
        rows[0].admin_comment,
        "a|b gpu-mem-quota:v1{gpu04/0:q=20G,g0=5G,t=1}"
    );
    assert_eq!(
        rows[1].admin_comment,
        "first line\nsecond line gpu-mem-quota:v1{gpu04/0:q=20G,g0=10G,t=1}"
    );
    let jobs = job_reports(&rows);
    assert_eq!(jobs[0].totals().unwrap().peak, 5 * GIB);
    assert_eq!(jobs[1].totals().unwrap().peak, 10 * GIB);

    let err = parse_rows("garbage without fields\n").unwrap_err();
    assert_eq!(err.line, 1);
    assert!(parse_rows("").unwrap().is_empty());
}

#[test]
fn array_tasks_are_separate_jobs() {
    let text = "\
41|40_1|eve|ml|COMPLETED|2024-06-14T01:00:00|2024-06-14T02:00:00|gpu01||gpu-mem-quota:v1{gpu01/0:q=10G,g0=5G,t=1}
42|40_2|eve|ml|COMPLETED|2024-06-14T01:00:00|2024-06-14T02:00:00|gpu02||
";
    let jobs = job_reports(&parse_rows(text).unwrap());
    let ids: Vec<&str> = jobs.iter().map(|j| j.job_id.as_str()).collect();
    assert_eq!(ids, ["40_1", "40_2"]);
}

#[test]
fn runs_only_the_record_knows_are_still_shown() {
    // The record has run 1, but sacct lists one run only (its row was lost or purged).
    let text = "50|50|f|a|RUNNING|2024-06-15T01:00:00|Unknown|gpu01||gpu-mem-quota:v1{gpu01/0:q=10G,g0=5G,t=1;gpu01/1:q=10G,g0=6G,t=2}\n";
    let jobs = job_reports(&parse_rows(text).unwrap());
    assert_eq!(jobs[0].unlisted_runs(), [1]);
    assert!(job_text(&jobs[0]).contains("1    (not in sacct)"));
}

#[test]
fn json_has_every_run_entry_and_total() {
    let jobs = job_reports(&parse_rows(REQUEUED_TWICE).unwrap());
    let doc: Value = serde_json::from_str(&jobs_json(&jobs)).unwrap();
    let job = &doc["jobs"][0];
    assert_eq!(job["job_id"], "12");
    assert_eq!(job["record"], "present");
    assert_eq!(job.get("record_error"), Some(&Value::Null));
    let runs = job["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 3);
    let last = &runs[2];
    assert_eq!(last["state"], "COMPLETED");
    let entry = &last["entries"][0];
    assert_eq!(entry["node"], "gpu01");
    assert_eq!(entry["quota_bytes"].as_u64(), Some(40 * GIB));
    assert_eq!(entry["peak_bytes"].as_u64(), Some(30 * GIB));
    // A whole percentage is written as an integer (`75`), as before serde.
    assert!(entry["efficiency_percent"].is_u64());
    assert_eq!(entry["efficiency_percent"], 75);
    let gpus = entry["gpus"].as_array().unwrap();
    assert_eq!(gpus[1]["id"], "5e6f7a8b");
    let totals = &job["totals"];
    let events = &totals["events"];
    for (kind, want) in [
        ("warn", 2),
        ("over_quota", 2),
        ("preempted", 0),
        ("requeued", 2),
        ("cancelled", 0),
        ("held", 0),
        ("oom", 0),
    ] {
        assert_eq!(events[kind].as_u64(), Some(want), "{kind}");
    }
    assert_eq!(totals["efficiency_percent"], 102.5);
    assert_eq!(totals["restarts"].as_u64(), Some(2));
    assert_eq!(totals["last_event"]["kind"], "requeued");

    let absent = job_reports(&parse_rows("9|9|u|a|COMPLETED|x|y|n||\n").unwrap());
    let doc: Value = serde_json::from_str(&jobs_json(&absent)).unwrap();
    let job = &doc["jobs"][0];
    assert_eq!(job["record"], "absent");
    assert_eq!(job.get("totals"), Some(&Value::Null));
}

#[test]
fn sacct_arguments() {
    let job = Query::Job("12".into());
    assert_eq!(
        job.sacct_args().join(" "),
        "--parsable2 --noheader --duplicates --allocations \
         --format=JobIDRaw,JobID,User,Account,State,Start,End,NodeList,SystemComment,AdminComment --jobs 12"
    );
    let user = Query::User {
        user: "alice".into(),
        account: Some("physics".into()),
        start: Some("2024-06-01".into()),
        end: None,
    };
    assert!(user
        .sacct_args()
        .join(" ")
        .ends_with("--user alice --accounts physics --starttime 2024-06-01"));

    for ok in ["12", "12_3", "12+1"] {
        assert_eq!(Query::Job(ok.into()).check(), Ok(()), "{ok}");
    }
    for bad in ["", "-1", "12.batch", "12_", "abc", "1 2", "12_3_4"] {
        assert!(Query::Job(bad.into()).check().is_err(), "{bad}");
    }
    let sneaky = Query::User {
        user: "--allusers".into(),
        account: None,
        start: None,
        end: None,
    };
    assert!(sneaky.check().unwrap_err().contains("--user"));
}

#[test]
fn known_sacct_failures_get_a_sentence() {
    assert!(
        explain_failure("sacct: error: Slurm accounting storage is disabled")
            .unwrap()
            .contains("not configured")
    );
    assert!(
        explain_failure("sacct: error: Problem talking to the database: Connection refused")
            .unwrap()
            .contains("slurmdbd")
    );
    assert_eq!(explain_failure("sacct: error: Invalid user id: nobody2"), None);
}

/// `report -u/-A`: GiB-hours reserved (quota per GPU x GPUs x run time) against used (peak per GPU x
/// run time), summed over every run of every finished job, as seff does for memory.
#[test]
fn gib_hours_reserved_against_used_over_runs_and_gpus() {
    // Job 12: three runs of 61 s, 100 s and 3600 s; the record has run 0 on two GPUs (41G + 2G of
    // 40G each), run 1 on one (40964M of 40G), run 2 on two (30G + 12G).
    let jobs = job_reports(&parse_rows(REQUEUED_TWICE).unwrap());
    let hours = jobs[0].gib_hours().unwrap();
    let expected_reserved = (80.0 * 61.0 + 40.0 * 100.0 + 80.0 * 3600.0) / 3600.0;
    let expected_used = (43.0 * 61.0 + (40964.0 / 1024.0) * 100.0 + 42.0 * 3600.0) / 3600.0;
    assert!((hours.reserved - expected_reserved).abs() < 1e-9, "{hours:?}");
    assert!((hours.used - expected_used).abs() < 1e-9, "{hours:?}");
    // A running job (no end yet) and a job without a record are not counted.
    let running = job_reports(
        &parse_rows(
            "50|50|f|a|RUNNING|2024-06-15T01:00:00|Unknown|gpu01||gpu-mem-quota:v1{gpu01/0:q=10G,g0=5G,t=1}\n",
        )
        .unwrap(),
    );
    assert_eq!(running[0].gib_hours(), None);
    let absent =
        job_reports(&parse_rows("9|9|u|a|COMPLETED|2024-06-15T01:00:00|2024-06-15T02:00:00|n||\n").unwrap());
    assert_eq!(absent[0].gib_hours(), None);
    let mut all = parse_rows(REQUEUED_TWICE).unwrap();
    all.extend(parse_rows(PEAKED_30_OF_40).unwrap());
    let list = jobs_list_text(&job_reports(&all));
    let line = list.lines().last().unwrap();
    let reserved = expected_reserved + 40.0;
    let used = expected_used + 30.0;
    assert_eq!(
        line,
        format!(
            "GPU memory of 2 finished job(s): {reserved:.2} GiB-hours reserved, {used:.2} used at peak ({:.1}% efficiency)",
            used * 100.0 / reserved
        )
    );
    // The same figures in `--json`: per job, and summed for the list.
    let doc: serde_json::Value = serde_json::from_str(&jobs_json(&job_reports(&all))).unwrap();
    let close = |v: &serde_json::Value, want: f64| (v.as_f64().unwrap() - want).abs() < 1e-3;
    assert!(
        close(&doc["jobs"][0]["gib_hours"]["reserved"], expected_reserved),
        "{doc}"
    );
    assert!(
        close(&doc["jobs"][0]["gib_hours"]["used"], expected_used),
        "{doc}"
    );
    assert!(close(&doc["gib_hours"]["reserved"], reserved), "{doc}");
    assert!(
        close(&doc["gib_hours"]["efficiency_percent"], used * 100.0 / reserved),
        "{doc}"
    );
    assert_eq!(doc["gib_hours"]["jobs"], 2);
    assert!(doc["jobs"][0]["gib_hours"].get("jobs").is_none());
    let doc: serde_json::Value = serde_json::from_str(&jobs_json(&running)).unwrap();
    assert!(doc["gib_hours"].is_null() && doc["jobs"][0]["gib_hours"].is_null());
}

/// G12: a requeue the watchdog recorded (the record goes first) that slurmctld failed to carry out;
/// the watchdog then cancelled the job. One run in accounting, and no run in the record after it.
const REQUEUE_NOT_CARRIED_OUT: &str = "\
77|77|alice|physics|CANCELLED|2024-06-10T06:00:00|2024-06-10T06:03:00|gpu01||gpu-mem-quota:v1{gpu01/0:q=8G,g0=12G/1a2b3c4d,over_quota=2,requeued=1,cancelled=1,restarts=1,last=cancelled@1718000180,t=1718000180}
";

#[test]
fn a_requeue_slurmctld_did_not_carry_out_is_not_counted_as_a_restart() {
    let jobs = job_reports(&parse_rows(REQUEUE_NOT_CARRIED_OUT).unwrap());
    let job = &jobs[0];
    assert_eq!(job.requeues_not_carried_out(), 1);
    let totals = job.totals().unwrap();
    assert_eq!(totals.restarts, 0);
    assert_eq!(
        totals.events.get(EventKind::Requeued),
        1,
        "the event stays: it was tried"
    );
    let text = job_text(job);
    assert!(!text.contains("restart(s) caused by gpu-mem-quota"), "{text}");
    assert!(
        text.contains("The record counts 1 requeue(s) that slurmctld did not carry out"),
        "{text}"
    );
    let json: Value = serde_json::from_str(&jobs_json(&jobs)).unwrap();
    assert_eq!(json["jobs"][0]["totals"]["restarts"], 0, "{json}");

    // Requeued twice and both carried out: nothing to say.
    let twice = job_reports(&parse_rows(REQUEUED_TWICE).unwrap());
    assert_eq!(twice[0].requeues_not_carried_out(), 0);
    assert!(!job_text(&twice[0]).contains("did not carry out"));
}

/// jobstats replaced the AdminComment after the job ended (`JS1:`, base64 of gzip of its JSON, as
/// Python's `base64.b64encode(gzip.compress(...))` writes it); `keep-record` had copied our record
/// to the SystemComment. Both are read: our record from the copy, jobstats' per-GPU memory.
#[test]
fn our_record_from_the_system_comment_beside_jobstats_summary() {
    let js1 = "JS1:H4sIAO7FFmsC/6tWystPSS1WslKoVsozBFPpBaXxpcWpKfG5qbn5RZVgMQMgaWhgYFALBACcyHxiMwAAAA==";
    let text = format!(
        "60|60|gmq-user|ml|COMPLETED|2024-06-16T01:00:00|2024-06-16T02:00:00|n1|\
         gpu-mem-quota:v1{{n1/0:q=10G,g0=5G,t=1}}|{js1}\n"
    );
    let jobs = job_reports(&parse_rows(&text).unwrap());
    let record = jobs[0].record().expect("the record from the SystemComment");
    assert_eq!(record.entries()[0].peak(), 5 * GIB);
    let shown = job_text(&jobs[0]);
    assert!(shown.contains("jobstats' summary"), "{shown}");
    assert!(shown.contains("n1 GPU 0 1000"), "{shown}");
    let doc: Value = serde_json::from_str(&jobs_json(&jobs)).unwrap();
    assert_eq!(doc["jobs"][0]["jobstats"]["gpus"][0]["used_bytes"], 1000);
    assert_eq!(doc["jobs"][0]["record"], "present");

    // The same record in both fields (not replaced) reads as one, not twice.
    let both = "61|61|u|a|COMPLETED|x|y|n1|gpu-mem-quota:v1{n1/0:q=10G,g0=5G,warn=1,t=1}|\
                gpu-mem-quota:v1{n1/0:q=10G,g0=5G,warn=1,t=1}\n";
    let jobs = job_reports(&parse_rows(both).unwrap());
    assert_eq!(jobs[0].record().unwrap().totals().events.get(EventKind::Warn), 1);
    assert!(jobs[0].jobstats.is_none());
}
