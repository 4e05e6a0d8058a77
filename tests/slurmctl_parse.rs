//! Reading jobs from `squeue --Format` lines and AdminComments from `scontrol --oneliner show job`
//! records (Slurm 22.05 formats), and sorting failure texts.

use gpu_mem_quota::slurmctl::{classify, parse_admin_comment, parse_squeue, JobState, Refusal, Verdict};

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

/// Verbatim from the dev cluster (22.05.8): a finished batch job without AdminComment.
const REAL_COMPLETED: &str = "JobId=24 JobName=wrap UserId=gmq-user(2001) GroupId=gmq-user(2001) MCS_label=N/A Priority=4294901736 Nice=0 Account=physics QOS=normal JobState=COMPLETED Reason=None Dependency=(null) Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:0 RunTime=00:00:00 TimeLimit=UNLIMITED TimeMin=N/A SubmitTime=2026-11-30T05:48:02 EligibleTime=2026-11-30T05:48:02 AccrueTime=2026-11-30T05:48:02 StartTime=2026-11-30T05:48:02 EndTime=2026-11-30T05:48:02 Deadline=N/A SuspendTime=None SecsPreSuspend=0 LastSchedEval=2026-11-30T05:48:02 Scheduler=Main Partition=gpu AllocNode:Sid=localhost:1092 ReqNodeList=(null) ExcNodeList=(null) NodeList=vm BatchHost=vm NumNodes=1 NumCPUs=1 NumTasks=1 CPUs/Task=1 ReqB:S:C:T=0:0:*:* TRES=cpu=1,node=1,billing=1 Socks/Node=* NtasksPerN:B:S:C=0:0:*:* CoreSpec=* MinCPUsNode=1 MinMemoryNode=0 MinTmpDiskNode=0 Features=(null) DelayBoot=00:00:00 OverSubscribe=OK Contiguous=0 Licenses=(null) Network=(null) Command=(null) WorkDir=/home/gmq-user StdErr=/tmp/p1.out StdIn=/dev/null StdOut=/tmp/p1.out Power= \n";

/// A running array task with a spaced job name, Command and WorkDir, an AdminComment with spaces
/// and `=`, and a Comment; AdminComment and Comment are each followed by two spaces, as Slurm does.
const RUNNING_ARRAY_TASK: &str = "JobId=4242 ArrayJobId=4240 ArrayTaskId=2 JobName=train llama v2 UserId=alice(2001) GroupId=alice(2001) MCS_label=N/A Priority=4294901700 Nice=0 Account=physics QOS=normal JobState=RUNNING Reason=None Dependency=(null) Requeue=1 Restarts=2 BatchFlag=1 Reboot=0 ExitCode=0:0 RunTime=00:12:03 TimeLimit=1-00:00:00 TimeMin=N/A SubmitTime=2026-11-30T05:40:00 EligibleTime=2026-11-30T05:40:00 AccrueTime=2026-11-30T05:40:00 StartTime=2026-11-30T05:41:10 EndTime=2026-12-01T05:41:10 Deadline=N/A SuspendTime=None SecsPreSuspend=0 LastSchedEval=2026-11-30T05:41:10 Scheduler=Main Partition=gpu AllocNode:Sid=login1:5512 ReqNodeList=(null) ExcNodeList=(null) NodeList=gpu[01-02] BatchHost=gpu01 NumNodes=2 NumCPUs=16 NumTasks=2 CPUs/Task=8 ReqB:S:C:T=0:0:*:* TRES=cpu=16,mem=64G,node=2,billing=16,gres/gpu=8 Socks/Node=* NtasksPerN:B:S:C=1:0:*:* CoreSpec=* MinCPUsNode=8 MinMemoryNode=32G MinTmpDiskNode=0 Features=(null) DelayBoot=00:00:00 OverSubscribe=OK Contiguous=0 Licenses=(null) Network=(null) Command=/home/alice/my jobs/run train.sh --lr=3e-4 WorkDir=/home/alice/my jobs AdminComment=checked by ops (ticket=INC 123) quota=40G  Comment=see wiki: quota=40G  StdErr=/home/alice/my jobs/slurm-4240_2.out StdIn=/dev/null StdOut=/home/alice/my jobs/slurm-4240_2.out Power= TresPerNode=gres:gpu:4 \n";

/// The same array's pending tasks and another running task, as `show job 4240` lists them.
const ARRAY_SIBLINGS: &str = "JobId=4240 ArrayJobId=4240 ArrayTaskId=3-9 ArrayTaskThrottle=2 JobName=train llama v2 UserId=alice(2001) GroupId=alice(2001) MCS_label=N/A Priority=4294901700 Nice=0 Account=physics QOS=normal JobState=PENDING Reason=JobArrayTaskLimit Dependency=(null) Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:0 RunTime=00:00:00 TimeLimit=1-00:00:00 TimeMin=N/A SubmitTime=2026-11-30T05:40:00 EligibleTime=2026-11-30T05:40:00 AccrueTime=2026-11-30T05:40:00 StartTime=Unknown EndTime=Unknown Deadline=N/A SuspendTime=None SecsPreSuspend=0 LastSchedEval=2026-11-30T05:41:10 Scheduler=Main Partition=gpu AllocNode:Sid=login1:5512 ReqNodeList=(null) ExcNodeList=(null) NodeList= NumNodes=2 NumCPUs=16 NumTasks=2 CPUs/Task=8 ReqB:S:C:T=0:0:*:* TRES=cpu=16,mem=64G,node=2,billing=16,gres/gpu=8 Socks/Node=* NtasksPerN:B:S:C=1:0:*:* CoreSpec=* MinCPUsNode=8 MinMemoryNode=32G MinTmpDiskNode=0 Features=(null) DelayBoot=00:00:00 OverSubscribe=OK Contiguous=0 Licenses=(null) Network=(null) Command=/home/alice/my jobs/run train.sh --lr=3e-4 WorkDir=/home/alice/my jobs StdErr=/home/alice/my jobs/slurm-4240_%a.out StdIn=/dev/null StdOut=/home/alice/my jobs/slurm-4240_%a.out Power= TresPerNode=gres:gpu:4 \nJobId=4241 ArrayJobId=4240 ArrayTaskId=1 JobName=train llama v2 UserId=alice(2001) GroupId=alice(2001) MCS_label=N/A Priority=4294901700 Nice=0 Account=physics QOS=normal JobState=COMPLETING Reason=None Dependency=(null) Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:0 RunTime=00:20:00 TimeLimit=1-00:00:00 TimeMin=N/A SubmitTime=2026-11-30T05:40:00 EligibleTime=2026-11-30T05:40:00 AccrueTime=2026-11-30T05:40:00 StartTime=2026-11-30T05:40:02 EndTime=2026-11-30T06:00:02 Deadline=N/A SuspendTime=None SecsPreSuspend=0 LastSchedEval=2026-11-30T05:40:02 Scheduler=Main Partition=gpu AllocNode:Sid=login1:5512 ReqNodeList=(null) ExcNodeList=(null) NodeList=gpu03 BatchHost=gpu03 NumNodes=1 NumCPUs=8 NumTasks=1 CPUs/Task=8 ReqB:S:C:T=0:0:*:* TRES=cpu=8,node=1,billing=8,gres/gpu=4 Socks/Node=* NtasksPerN:B:S:C=1:0:*:* CoreSpec=* MinCPUsNode=8 MinMemoryNode=32G MinTmpDiskNode=0 Features=(null) DelayBoot=00:00:00 OverSubscribe=OK Contiguous=0 Licenses=(null) Network=(null) Command=/home/alice/my jobs/run train.sh --lr=3e-4 WorkDir=/home/alice/my jobs StdErr=/home/alice/my jobs/slurm-4240_1.out StdIn=/dev/null StdOut=/home/alice/my jobs/slurm-4240_1.out Power= TresPerNode=gres:gpu:4 \n";

/// An `salloc` job, pending, that may not be requeued, with an AdminComment set to the empty string.
const PENDING_SALLOC: &str = "JobId=4300 JobName=interactive session UserId=bob(2002) GroupId=bob(2002) MCS_label=N/A Priority=1000 Nice=0 Account=chem QOS=high JobState=PENDING Reason=launch_failed_requeued_held Dependency=(null) Requeue=0 Restarts=0 BatchFlag=0 Reboot=0 ExitCode=0:0 RunTime=00:00:00 TimeLimit=01:00:00 TimeMin=N/A SubmitTime=2026-11-30T06:00:00 EligibleTime=2026-11-30T06:00:00 AccrueTime=Unknown StartTime=Unknown EndTime=Unknown Deadline=N/A SuspendTime=None SecsPreSuspend=0 LastSchedEval=2026-11-30T06:00:00 Scheduler=Main Partition=debug AllocNode:Sid=login1:777 ReqNodeList=(null) ExcNodeList=(null) NodeList= NumNodes=1-1 NumCPUs=1 NumTasks=1 CPUs/Task=1 ReqB:S:C:T=0:0:*:* TRES=cpu=1,node=1,billing=1 Socks/Node=* NtasksPerN:B:S:C=0:0:*:* CoreSpec=* MinCPUsNode=1 MinMemoryNode=0 MinTmpDiskNode=0 Features=(null) DelayBoot=00:00:00 OverSubscribe=OK Contiguous=0 Licenses=(null) Network=(null) Command=/usr/bin/bash WorkDir=/home/bob AdminComment=  Power= \n";

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
fn reads_the_admin_comment_of_realistic_records() {
    for (output, id, comment) in [
        (REAL_COMPLETED, 24, ""),
        (
            RUNNING_ARRAY_TASK,
            4242,
            "checked by ops (ticket=INC 123) quota=40G",
        ),
        (PENDING_SALLOC, 4300, ""),
    ] {
        assert_eq!(
            parse_admin_comment(output, id).as_deref(),
            Ok(comment),
            "job {id}"
        );
    }
    let siblings = format!("{ARRAY_SIBLINGS}{RUNNING_ARRAY_TASK}");
    for (id, comment) in [
        (4240, ""),
        (4241, ""),
        (4242, "checked by ops (ticket=INC 123) quota=40G"),
    ] {
        assert_eq!(
            parse_admin_comment(&siblings, id).as_deref(),
            Ok(comment),
            "job {id}"
        );
    }
    let missing = parse_admin_comment(&siblings, 424).unwrap_err();
    assert!(missing.contains("no record for job 424 among 3"), "{missing}");
}

#[test]
fn admin_comment_ends_where_slurm_ends_it() {
    // (AdminComment text, what follows it)
    let table = [
        ("plain", "Comment=x  StdErr=/o"),
        ("with  two spaces and a=b", "StdErr=/o"),
        ("trailing space ", "SystemComment=sys  StdErr=/o"),
        ("x StdErr=/not/a/key/because/one/space", "Power="),
        ("", "Power="),
        ("ends the record", ""),
    ];
    for (text, after) in table {
        let record = REAL_COMPLETED.trim_end().replace(
            " StdErr=/tmp/p1.out StdIn=/dev/null StdOut=/tmp/p1.out Power=",
            "",
        ) + &format!(" AdminComment={text}  {after}\n");
        let comment = parse_admin_comment(&record, 24).unwrap_or_else(|e| panic!("{text:?}: {e}"));
        assert_eq!(comment, text, "followed by {after:?}");
    }
}

#[test]
fn refuses_admin_comments_that_user_text_could_imitate() {
    let running = RUNNING_ARRAY_TASK;
    // (how the record is changed, words the error must contain)
    let table: Vec<(String, &str)> = vec![
        // A comment imitating the AdminComment.
        (
            running.replace("Comment=see wiki", "Comment=x AdminComment=y"),
            "`AdminComment=` appears 2 times",
        ),
        // A job name imitating it.
        (
            running.replace(
                "JobName=train llama v2",
                "JobName=x AdminComment=gpu-mem-quota:v1{}",
            ),
            "`AdminComment=` appears 2 times",
        ),
        // A second record for the same job, smuggled in after a newline.
        (
            running.replace("Comment=see wiki", "Comment=x\nJobId=4242 AdminComment=y"),
            "more than one record",
        ),
        ("hello world\n".to_string(), "no record for job 4242 among 0"),
        (String::new(), "no record for job 4242"),
    ];
    for (output, words) in table {
        let err = parse_admin_comment(&output, 4242).expect_err(words);
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
