//! Reading `scontrol --oneliner show job` records (Slurm 22.05 format) and sorting failure texts.

use gpu_mem_quota::slurmctl::{classify, parse_show_job, JobState, Refusal, Verdict};

/// Verbatim from the dev cluster (22.05.8): a finished batch job without AdminComment.
const REAL_COMPLETED: &str = "JobId=24 JobName=wrap UserId=gmq-user(2001) GroupId=gmq-user(2001) MCS_label=N/A Priority=4294901736 Nice=0 Account=physics QOS=normal JobState=COMPLETED Reason=None Dependency=(null) Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:0 RunTime=00:00:00 TimeLimit=UNLIMITED TimeMin=N/A SubmitTime=2026-11-30T05:48:02 EligibleTime=2026-11-30T05:48:02 AccrueTime=2026-11-30T05:48:02 StartTime=2026-11-30T05:48:02 EndTime=2026-11-30T05:48:02 Deadline=N/A SuspendTime=None SecsPreSuspend=0 LastSchedEval=2026-11-30T05:48:02 Scheduler=Main Partition=gpu AllocNode:Sid=localhost:1092 ReqNodeList=(null) ExcNodeList=(null) NodeList=vm BatchHost=vm NumNodes=1 NumCPUs=1 NumTasks=1 CPUs/Task=1 ReqB:S:C:T=0:0:*:* TRES=cpu=1,node=1,billing=1 Socks/Node=* NtasksPerN:B:S:C=0:0:*:* CoreSpec=* MinCPUsNode=1 MinMemoryNode=0 MinTmpDiskNode=0 Features=(null) DelayBoot=00:00:00 OverSubscribe=OK Contiguous=0 Licenses=(null) Network=(null) Command=(null) WorkDir=/home/gmq-user StdErr=/tmp/p1.out StdIn=/dev/null StdOut=/tmp/p1.out Power= \n";

/// A running array task with a spaced job name, Command and WorkDir, an AdminComment with spaces
/// and `=`, and a Comment; AdminComment and Comment are each followed by two spaces, as Slurm does.
const RUNNING_ARRAY_TASK: &str = "JobId=4242 ArrayJobId=4240 ArrayTaskId=2 JobName=train llama v2 UserId=alice(2001) GroupId=alice(2001) MCS_label=N/A Priority=4294901700 Nice=0 Account=physics QOS=normal JobState=RUNNING Reason=None Dependency=(null) Requeue=1 Restarts=2 BatchFlag=1 Reboot=0 ExitCode=0:0 RunTime=00:12:03 TimeLimit=1-00:00:00 TimeMin=N/A SubmitTime=2026-11-30T05:40:00 EligibleTime=2026-11-30T05:40:00 AccrueTime=2026-11-30T05:40:00 StartTime=2026-11-30T05:41:10 EndTime=2026-12-01T05:41:10 Deadline=N/A SuspendTime=None SecsPreSuspend=0 LastSchedEval=2026-11-30T05:41:10 Scheduler=Main Partition=gpu AllocNode:Sid=login1:5512 ReqNodeList=(null) ExcNodeList=(null) NodeList=gpu[01-02] BatchHost=gpu01 NumNodes=2 NumCPUs=16 NumTasks=2 CPUs/Task=8 ReqB:S:C:T=0:0:*:* TRES=cpu=16,mem=64G,node=2,billing=16,gres/gpu=8 Socks/Node=* NtasksPerN:B:S:C=1:0:*:* CoreSpec=* MinCPUsNode=8 MinMemoryNode=32G MinTmpDiskNode=0 Features=(null) DelayBoot=00:00:00 OverSubscribe=OK Contiguous=0 Licenses=(null) Network=(null) Command=/home/alice/my jobs/run train.sh --lr=3e-4 WorkDir=/home/alice/my jobs AdminComment=checked by ops (ticket=INC 123) quota=40G  Comment=see wiki: quota=40G  StdErr=/home/alice/my jobs/slurm-4240_2.out StdIn=/dev/null StdOut=/home/alice/my jobs/slurm-4240_2.out Power= TresPerNode=gres:gpu:4 \n";

/// The same array's pending tasks and another running task, as `show job 4240` lists them.
const ARRAY_SIBLINGS: &str = "JobId=4240 ArrayJobId=4240 ArrayTaskId=3-9 ArrayTaskThrottle=2 JobName=train llama v2 UserId=alice(2001) GroupId=alice(2001) MCS_label=N/A Priority=4294901700 Nice=0 Account=physics QOS=normal JobState=PENDING Reason=JobArrayTaskLimit Dependency=(null) Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:0 RunTime=00:00:00 TimeLimit=1-00:00:00 TimeMin=N/A SubmitTime=2026-11-30T05:40:00 EligibleTime=2026-11-30T05:40:00 AccrueTime=2026-11-30T05:40:00 StartTime=Unknown EndTime=Unknown Deadline=N/A SuspendTime=None SecsPreSuspend=0 LastSchedEval=2026-11-30T05:41:10 Scheduler=Main Partition=gpu AllocNode:Sid=login1:5512 ReqNodeList=(null) ExcNodeList=(null) NodeList= NumNodes=2 NumCPUs=16 NumTasks=2 CPUs/Task=8 ReqB:S:C:T=0:0:*:* TRES=cpu=16,mem=64G,node=2,billing=16,gres/gpu=8 Socks/Node=* NtasksPerN:B:S:C=1:0:*:* CoreSpec=* MinCPUsNode=8 MinMemoryNode=32G MinTmpDiskNode=0 Features=(null) DelayBoot=00:00:00 OverSubscribe=OK Contiguous=0 Licenses=(null) Network=(null) Command=/home/alice/my jobs/run train.sh --lr=3e-4 WorkDir=/home/alice/my jobs StdErr=/home/alice/my jobs/slurm-4240_%a.out StdIn=/dev/null StdOut=/home/alice/my jobs/slurm-4240_%a.out Power= TresPerNode=gres:gpu:4 \nJobId=4241 ArrayJobId=4240 ArrayTaskId=1 JobName=train llama v2 UserId=alice(2001) GroupId=alice(2001) MCS_label=N/A Priority=4294901700 Nice=0 Account=physics QOS=normal JobState=COMPLETING Reason=None Dependency=(null) Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:0 RunTime=00:20:00 TimeLimit=1-00:00:00 TimeMin=N/A SubmitTime=2026-11-30T05:40:00 EligibleTime=2026-11-30T05:40:00 AccrueTime=2026-11-30T05:40:00 StartTime=2026-11-30T05:40:02 EndTime=2026-11-30T06:00:02 Deadline=N/A SuspendTime=None SecsPreSuspend=0 LastSchedEval=2026-11-30T05:40:02 Scheduler=Main Partition=gpu AllocNode:Sid=login1:5512 ReqNodeList=(null) ExcNodeList=(null) NodeList=gpu03 BatchHost=gpu03 NumNodes=1 NumCPUs=8 NumTasks=1 CPUs/Task=8 ReqB:S:C:T=0:0:*:* TRES=cpu=8,node=1,billing=8,gres/gpu=4 Socks/Node=* NtasksPerN:B:S:C=1:0:*:* CoreSpec=* MinCPUsNode=8 MinMemoryNode=32G MinTmpDiskNode=0 Features=(null) DelayBoot=00:00:00 OverSubscribe=OK Contiguous=0 Licenses=(null) Network=(null) Command=/home/alice/my jobs/run train.sh --lr=3e-4 WorkDir=/home/alice/my jobs StdErr=/home/alice/my jobs/slurm-4240_1.out StdIn=/dev/null StdOut=/home/alice/my jobs/slurm-4240_1.out Power= TresPerNode=gres:gpu:4 \n";

/// An `salloc` job, pending, that may not be requeued, with an AdminComment set to the empty string.
const PENDING_SALLOC: &str = "JobId=4300 JobName=interactive session UserId=bob(2002) GroupId=bob(2002) MCS_label=N/A Priority=1000 Nice=0 Account=chem QOS=high JobState=PENDING Reason=launch_failed_requeued_held Dependency=(null) Requeue=0 Restarts=0 BatchFlag=0 Reboot=0 ExitCode=0:0 RunTime=00:00:00 TimeLimit=01:00:00 TimeMin=N/A SubmitTime=2026-11-30T06:00:00 EligibleTime=2026-11-30T06:00:00 AccrueTime=Unknown StartTime=Unknown EndTime=Unknown Deadline=N/A SuspendTime=None SecsPreSuspend=0 LastSchedEval=2026-11-30T06:00:00 Scheduler=Main Partition=debug AllocNode:Sid=login1:777 ReqNodeList=(null) ExcNodeList=(null) NodeList= NumNodes=1-1 NumCPUs=1 NumTasks=1 CPUs/Task=1 ReqB:S:C:T=0:0:*:* TRES=cpu=1,node=1,billing=1 Socks/Node=* NtasksPerN:B:S:C=0:0:*:* CoreSpec=* MinCPUsNode=1 MinMemoryNode=0 MinTmpDiskNode=0 Features=(null) DelayBoot=00:00:00 OverSubscribe=OK Contiguous=0 Licenses=(null) Network=(null) Command=/usr/bin/bash WorkDir=/home/bob AdminComment=  Power= \n";

/// What a record must read as.
struct Expected {
    output: &'static str,
    job_id: u32,
    state: JobState,
    restarts: u32,
    requeue: bool,
    batch_flag: u16,
    user: (&'static str, u32),
    account: &'static str,
    partition: &'static str,
    qos: &'static str,
    priority: u32,
    start_time: &'static str,
    node_list: &'static str,
    admin_comment: &'static str,
}

#[test]
fn reads_the_fields_of_realistic_records() {
    let table = [
        Expected {
            output: REAL_COMPLETED,
            job_id: 24,
            state: JobState::Completed,
            restarts: 0,
            requeue: true,
            batch_flag: 1,
            user: ("gmq-user", 2001),
            account: "physics",
            partition: "gpu",
            qos: "normal",
            priority: 4294901736,
            start_time: "2026-11-30T05:48:02",
            node_list: "vm",
            admin_comment: "",
        },
        Expected {
            output: RUNNING_ARRAY_TASK,
            job_id: 4242,
            state: JobState::Running,
            restarts: 2,
            requeue: true,
            batch_flag: 1,
            user: ("alice", 2001),
            account: "physics",
            partition: "gpu",
            qos: "normal",
            priority: 4294901700,
            start_time: "2026-11-30T05:41:10",
            node_list: "gpu[01-02]",
            admin_comment: "checked by ops (ticket=INC 123) quota=40G",
        },
        Expected {
            output: PENDING_SALLOC,
            job_id: 4300,
            state: JobState::Pending,
            restarts: 0,
            requeue: false,
            batch_flag: 0,
            user: ("bob", 2002),
            account: "chem",
            partition: "debug",
            qos: "high",
            priority: 1000,
            start_time: "Unknown",
            node_list: "",
            admin_comment: "",
        },
    ];
    for want in table {
        let id = want.job_id;
        let job = parse_show_job(want.output, id).unwrap_or_else(|e| panic!("job {id}: {e}"));
        assert_eq!(job.job_id, id);
        assert_eq!(job.job_state, want.state, "job {id}");
        assert_eq!(job.restarts, want.restarts, "job {id}");
        assert_eq!(job.requeue, want.requeue, "job {id}");
        assert_eq!(job.batch_flag, want.batch_flag, "job {id}");
        assert_eq!((job.user_name.as_str(), job.user_id), want.user, "job {id}");
        assert_eq!(job.account, want.account, "job {id}");
        assert_eq!(job.partition, want.partition, "job {id}");
        assert_eq!(job.qos, want.qos, "job {id}");
        assert_eq!(job.priority, want.priority, "job {id}");
        assert_eq!(job.start_time, want.start_time, "job {id}");
        assert_eq!(job.node_list, want.node_list, "job {id}");
        assert_eq!(job.admin_comment, want.admin_comment, "job {id}");
        assert_eq!(
            job.is_requeueable(),
            want.requeue && want.batch_flag > 0,
            "job {id}"
        );
    }
}

#[test]
fn picks_the_exact_job_among_several_records() {
    let output = format!("{ARRAY_SIBLINGS}{RUNNING_ARRAY_TASK}");
    for (id, state, nodes) in [
        (4240, JobState::Pending, ""),
        (4241, JobState::Completing, "gpu03"),
        (4242, JobState::Running, "gpu[01-02]"),
    ] {
        let job = parse_show_job(&output, id).unwrap_or_else(|e| panic!("job {id}: {e}"));
        assert_eq!(
            (job.job_id, job.job_state, job.node_list.as_str()),
            (id, state, nodes)
        );
    }
    let missing = parse_show_job(&output, 424).unwrap_err();
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
        let job = parse_show_job(&record, 24).unwrap_or_else(|e| panic!("{text:?}: {e}"));
        assert_eq!(job.admin_comment, text, "followed by {after:?}");
    }
}

#[test]
fn refuses_records_it_cannot_read_unambiguously() {
    let running = RUNNING_ARRAY_TASK;
    // (how the record is changed, words the error must contain)
    let table: Vec<(String, &str)> = vec![
        // A job name imitating the fields that follow it.
        (
            running.replace(
                "JobName=train llama v2",
                "JobName=x JobState=COMPLETED Restarts=0",
            ),
            "ambiguous: `JobState=` appears 2 times",
        ),
        // A comment imitating a field that comes earlier.
        (
            running.replace("Comment=see wiki", "Comment=see Requeue=0"),
            "`Requeue=` appears 2 times",
        ),
        // A comment imitating the AdminComment.
        (
            running.replace("Comment=see wiki", "Comment=x AdminComment=y"),
            "`AdminComment=` appears 2 times",
        ),
        // A second record for the same job, smuggled in after a newline.
        (
            running.replace("Comment=see wiki", "Comment=x\nJobId=4242 JobState=PENDING"),
            "more than one record",
        ),
        // Fields out of Slurm's order.
        (
            running
                .replace("Partition=gpu ", "")
                .replace("Network=(null)", "Network=(null) Partition=gpu"),
            "`Partition=` comes after `NodeList=`",
        ),
        (
            running.replace("Restarts=2", "Restarts=two"),
            "`Restarts=two` is not a number",
        ),
        (
            running.replace("Requeue=1", "Requeue=yes"),
            "`Requeue=yes` is neither 0 nor 1",
        ),
        (
            running.replace("UserId=alice(2001)", "UserId=alice"),
            "`UserId=alice` is not name(uid)",
        ),
        (running.replace(" JobState=RUNNING", ""), "no `JobState=`"),
        (
            running.replace("JobState=RUNNING", "JobState="),
            "empty `JobState=`",
        ),
        ("hello world\n".to_string(), "no record for job 4242 among 0"),
        (String::new(), "no record for job 4242"),
    ];
    for (output, words) in table {
        let err = parse_show_job(&output, 4242).expect_err(words);
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
