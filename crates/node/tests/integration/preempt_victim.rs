//! Victim selection: one table row per rule of the order and per reason a job is skipped.

use std::time::Duration;

use gmq_core::config::values::parse_amount;
use gmq_core::config::{Action, NonRequeueable};
use gmq_core::preempt::cooldown::Preemption;
use gmq_core::preempt::{
    contention, decide, victim_order, AfterMax, CannotPreempt, Contention, Decision, GpuCooldown,
    GpuSnapshot, JobOnGpu, NotGiven, PreemptSettings, Rank, Skipped, Victim, Why,
};

const G: u64 = 1 << 30;
const NOW: u64 = 1_700_000_000;
const HOUR_AGO: u64 = NOW - 3600;

fn rank(value: i32) -> Rank {
    Rank {
        value,
        slurm_priority: 1000,
    }
}

/// A job using `used` GiB under a 40G quota, rank 0, started an hour ago, requeueable.
fn job(job_id: u32, used_gib: u64) -> JobOnGpu {
    JobOnGpu {
        job_id,
        quota: Some(40 * G),
        used: used_gib * G,
        rank: rank(0),
        preemptible: false,
        start_time: HOUR_AGO,
        requeueable: true,
        preemptions: 0,
    }
}

/// An 80G GPU whose usage is the sum of its jobs plus `other` GiB outside any job.
fn gpu(other_gib: u64, jobs: Vec<JobOnGpu>) -> GpuSnapshot {
    GpuSnapshot {
        index: 0,
        total: 80 * G,
        used: other_gib * G + jobs.iter().map(|j| j.used).sum::<u64>(),
        seconds_to_full: None,
        jobs,
        arriving: Vec::new(),
        not_given: Vec::new(),
    }
}

/// Reserve 4G (5% of 80G), horizon 30 s, cooldown 300 s, cap 3 then hold.
fn settings() -> PreemptSettings {
    PreemptSettings::default()
}

fn victim(job_id: u32, why: Why) -> Option<Victim> {
    Some(Victim {
        job_id,
        action: Action::Requeue,
        why,
    })
}

struct Case {
    name: &'static str,
    gpu: GpuSnapshot,
    settings: PreemptSettings,
    want: Option<Victim>,
    /// (job id, reason) of the jobs that cannot be preempted, in victim order.
    skipped: Vec<(u32, CannotPreempt)>,
}

fn check(cases: Vec<Case>) {
    for case in cases {
        let decision = decide(&case.gpu, &case.settings, &GpuCooldown::default(), NOW);
        assert_eq!(
            decision.victim().copied(),
            case.want,
            "{}: {decision:?}",
            case.name
        );
        let skipped: Vec<(u32, CannotPreempt)> = match &decision {
            Decision::Preempt { skipped, .. } | Decision::NoVictim { skipped, .. } => {
                skipped.iter().map(|s| (s.job_id, s.reason)).collect()
            }
            _ => vec![],
        };
        assert_eq!(skipped, case.skipped, "{}: skipped", case.name);
        // Deterministic: any order of the same jobs gives the same decision.
        let mut reversed = case.gpu.clone();
        reversed.jobs.reverse();
        let mut rotated = case.gpu.clone();
        let len = rotated.jobs.len();
        rotated.jobs.rotate_left(1.min(len));
        for other in [reversed, rotated] {
            assert_eq!(
                decide(&other, &case.settings, &GpuCooldown::default(), NOW),
                decision,
                "{}: input order changed the decision",
                case.name
            );
        }
    }
}

#[test]
fn contention_needs_free_below_reserve_or_a_close_trend() {
    let horizon = Duration::from_secs(30);
    type Row = (u64, u64, Option<f64>, Option<Contention>, &'static str);
    let cases: &[Row] = &[
        (70, 4, None, None, "10G free, reserve 4G"),
        (76, 4, None, None, "exactly the reserve free is enough"),
        (
            77,
            4,
            None,
            Some(Contention::BelowReserve {
                free: 3 * G,
                reserve: 4 * G,
            }),
            "3G free",
        ),
        (
            90,
            4,
            Some(10.0),
            Some(Contention::BelowReserve {
                free: 0,
                reserve: 4 * G,
            }),
            "over-full (NVML rounding): below the reserve wins over the trend",
        ),
        (
            60,
            4,
            Some(20.0),
            Some(Contention::Trend {
                seconds_to_full: 20.0,
            }),
            "full in 20 s, horizon 30 s",
        ),
        (
            60,
            4,
            Some(30.0),
            Some(Contention::Trend {
                seconds_to_full: 30.0,
            }),
            "full at the horizon",
        ),
        (60, 4, Some(31.0), None, "full after the horizon"),
        (60, 4, Some(f64::NAN), None, "no prediction"),
        (60, 4, Some(f64::INFINITY), None, "never full"),
        (60, 4, Some(-1.0), None, "a negative time is no prediction"),
        (
            80,
            0,
            None,
            None,
            "no reserve: a full GPU is not contended by the reserve rule",
        ),
    ];
    for &(used, reserve, trend, want, why) in cases {
        assert_eq!(
            contention(80 * G, used * G, reserve * G, trend, horizon),
            want,
            "{why}"
        );
    }
}

#[test]
fn calm_gpu_has_no_victim() {
    let snapshot = gpu(0, vec![job(1, 30), job(2, 30)]);
    assert_eq!(
        decide(&snapshot, &settings(), &GpuCooldown::default(), NOW),
        Decision::Calm
    );
    let mut predicted = snapshot.clone();
    predicted.seconds_to_full = Some(12.0);
    assert!(decide(&predicted, &settings(), &GpuCooldown::default(), NOW)
        .victim()
        .is_some());
}

#[test]
fn the_order() {
    let high = |mut j: JobOnGpu| {
        j.rank = rank(100);
        j
    };
    let low = |mut j: JobOnGpu| {
        j.rank = rank(-10);
        j
    };
    let volunteer = |mut j: JobOnGpu| {
        j.preemptible = true;
        j
    };
    let quota = |mut j: JobOnGpu, gib: u64| {
        j.quota = Some(gib * G);
        j
    };
    let started = |mut j: JobOnGpu, at: u64| {
        j.start_time = at;
        j
    };
    let over = |used: u64, quota: u64| Why::OverQuota {
        used: used * G,
        quota: quota * G,
    };
    check(vec![
        Case {
            name: "acceptance 1: low-priority B past its quota goes, A untouched",
            gpu: gpu(0, vec![quota(high(job(10, 42)), 50), quota(low(job(11, 35)), 30)]),
            settings: settings(),
            want: victim(11, over(35, 30)),
            skipped: vec![],
        },
        Case {
            name: "over its quota goes first, whatever its rank",
            gpu: gpu(0, vec![quota(high(job(10, 42)), 40), quota(low(job(11, 35)), 40)]),
            settings: settings(),
            want: victim(10, over(42, 40)),
            skipped: vec![],
        },
        Case {
            name: "a job without a quota is never over it",
            gpu: gpu(
                0,
                vec![
                    JobOnGpu {
                        quota: None,
                        ..low(job(10, 70))
                    },
                    high(job(11, 7)),
                ],
            ),
            settings: settings(),
            want: victim(10, Why::LowestRank(rank(-10))),
            skipped: vec![],
        },
        Case {
            name: "among jobs over quota, the volunteer first",
            gpu: gpu(
                1,
                vec![
                    quota(low(job(10, 38)), 30),
                    quota(volunteer(high(job(11, 38))), 30),
                ],
            ),
            settings: settings(),
            want: victim(11, over(38, 30)),
            skipped: vec![],
        },
        Case {
            name: "acceptance 3: a volunteer before any rank, even a high one",
            gpu: gpu(0, vec![low(job(10, 38)), volunteer(high(job(11, 39)))]),
            settings: settings(),
            want: victim(11, Why::Volunteer),
            skipped: vec![],
        },
        Case {
            name: "acceptance 2: all under quota: the lowest rank",
            gpu: gpu(0, vec![quota(high(job(10, 49)), 50), quota(low(job(11, 28)), 30)]),
            settings: settings(),
            want: victim(11, Why::LowestRank(rank(-10))),
            skipped: vec![],
        },
        Case {
            name: "equal configured rank: the lower Slurm priority",
            gpu: gpu(
                1,
                vec![
                    JobOnGpu {
                        rank: Rank {
                            value: 0,
                            slurm_priority: 9000,
                        },
                        ..job(10, 38)
                    },
                    JobOnGpu {
                        rank: Rank {
                            value: 0,
                            slurm_priority: 100,
                        },
                        ..job(11, 38)
                    },
                ],
            ),
            settings: settings(),
            want: victim(
                11,
                Why::LowestRank(Rank {
                    value: 0,
                    slurm_priority: 100,
                }),
            ),
            skipped: vec![],
        },
        Case {
            name: "acceptance 3: equal priority: the newest start",
            gpu: gpu(
                1,
                vec![started(job(11, 38), NOW - 600), started(job(10, 38), NOW - 60)],
            ),
            settings: settings(),
            want: victim(10, Why::LowestRank(rank(0))),
            skipped: vec![],
        },
        Case {
            name: "equal priority and start: the highest job id",
            gpu: gpu(2, vec![job(10, 25), job(12, 25), job(11, 25)]),
            settings: settings(),
            want: victim(12, Why::LowestRank(rank(0))),
            skipped: vec![],
        },
        Case {
            name: "memory outside any job counts toward contention, not toward a job",
            gpu: gpu(40, vec![high(job(10, 20)), job(11, 17)]),
            settings: settings(),
            want: victim(11, Why::LowestRank(rank(0))),
            skipped: vec![],
        },
    ]);
}

#[test]
fn jobs_that_cannot_be_preempted() {
    let preempted = |mut j: JobOnGpu, count: u32, started: u64| {
        j.preemptions = count;
        j.start_time = started;
        j
    };
    let leave_alone = PreemptSettings {
        after_max: AfterMax::LeaveAlone,
        ..settings()
    };
    check(vec![
        Case {
            name: "not requeueable: skipped, the next goes",
            gpu: gpu(
                1,
                vec![
                    JobOnGpu {
                        requeueable: false,
                        ..job(10, 38)
                    },
                    job(9, 38),
                ],
            ),
            settings: settings(),
            want: victim(9, Why::LowestRank(rank(0))),
            skipped: vec![(10, CannotPreempt::NotRequeueable)],
        },
        // G13: with non_requeueable = "cancel", --no-requeue is no way out of preemption.
        Case {
            name: "not requeueable, cancel: the lowest-ranked goes, cancelled",
            gpu: gpu(
                1,
                vec![
                    JobOnGpu {
                        requeueable: false,
                        ..job(10, 38)
                    },
                    job(9, 38),
                ],
            ),
            settings: PreemptSettings {
                non_requeueable: NonRequeueable::Cancel,
                ..settings()
            },
            want: Some(Victim {
                job_id: 10,
                action: Action::Cancel,
                why: Why::LowestRank(rank(0)),
            }),
            skipped: vec![],
        },
        Case {
            name: "at the cap, leave-alone: skipped",
            gpu: gpu(1, vec![preempted(job(10, 38), 3, HOUR_AGO), job(9, 38)]),
            settings: leave_alone.clone(),
            want: victim(9, Why::LowestRank(rank(0))),
            skipped: vec![(10, CannotPreempt::AtCap { count: 3, max: 3 })],
        },
        Case {
            name: "at the cap, hold: requeued held",
            gpu: gpu(1, vec![preempted(job(10, 38), 3, HOUR_AGO), job(9, 38)]),
            settings: settings(),
            want: Some(Victim {
                job_id: 10,
                action: Action::RequeueHold,
                why: Why::LowestRank(rank(0)),
            }),
            skipped: vec![],
        },
        Case {
            name: "under the cap: requeued",
            gpu: gpu(1, vec![preempted(job(10, 38), 2, HOUR_AGO), job(9, 38)]),
            settings: settings(),
            want: victim(10, Why::LowestRank(rank(0))),
            skipped: vec![],
        },
        Case {
            name: "cap 0 with leave-alone: nobody is ever preempted",
            gpu: gpu(1, vec![job(10, 38), job(9, 38)]),
            settings: PreemptSettings {
                max_preemptions_per_job: 0,
                ..leave_alone.clone()
            },
            want: None,
            skipped: vec![
                (10, CannotPreempt::AtCap { count: 0, max: 0 }),
                (9, CannotPreempt::AtCap { count: 0, max: 0 }),
            ],
        },
        Case {
            name: "restarted after a preemption, within one cooldown: protected",
            gpu: gpu(1, vec![preempted(job(10, 38), 1, NOW - 299), job(9, 38)]),
            settings: settings(),
            want: victim(9, Why::LowestRank(rank(0))),
            skipped: vec![(10, CannotPreempt::Protected { until: NOW + 1 })],
        },
        Case {
            name: "restarted after a preemption, one cooldown ago: fair game again",
            gpu: gpu(1, vec![preempted(job(10, 38), 1, NOW - 300), job(9, 38)]),
            settings: settings(),
            want: victim(10, Why::LowestRank(rank(0))),
            skipped: vec![],
        },
        Case {
            name: "a new job never preempted is not protected",
            gpu: gpu(1, vec![preempted(job(10, 38), 0, NOW - 5), job(9, 38)]),
            settings: settings(),
            want: victim(10, Why::LowestRank(rank(0))),
            skipped: vec![],
        },
        Case {
            name: "holds nothing on this GPU: requeueing it frees nothing",
            gpu: gpu(40, vec![job(10, 0), job(9, 38)]),
            settings: settings(),
            want: victim(9, Why::LowestRank(rank(0))),
            skipped: vec![(10, CannotPreempt::HoldsNothing)],
        },
        Case {
            name: "nobody can go: no victim, every reason given",
            gpu: gpu(
                0,
                vec![
                    JobOnGpu {
                        requeueable: false,
                        ..job(10, 40)
                    },
                    preempted(job(11, 38), 1, NOW - 10),
                ],
            ),
            settings: settings(),
            want: None,
            skipped: vec![
                (
                    11,
                    CannotPreempt::Protected {
                        until: NOW - 10 + 300,
                    },
                ),
                (10, CannotPreempt::NotRequeueable),
            ],
        },
    ]);
}

#[test]
fn none_while_the_gpu_cools_down() {
    let snapshot = gpu(1, vec![job(10, 38), job(9, 38)]);
    let cooling = GpuCooldown {
        last: Some(Preemption {
            victim: 8,
            at: NOW - 100,
        }),
    };
    match decide(&snapshot, &settings(), &cooling, NOW) {
        Decision::CoolingDown { until, .. } => assert_eq!(until, NOW + 200),
        other => panic!("expected a cooldown, got {other:?}"),
    }
    let cooled = GpuCooldown {
        last: Some(Preemption {
            victim: 8,
            at: NOW - 300,
        }),
    };
    assert_eq!(
        decide(&snapshot, &settings(), &cooled, NOW)
            .victim()
            .map(|v| v.job_id),
        Some(10)
    );
}

/// The 22.05 shard bug's case (docs/SCHEDULING.md): a whole-GPU job started beside a shard job,
/// and the GPU is contended before the new job's watchdog registered. Choosing from the registered
/// jobs alone would requeue the shard job, within its quota; the order waits for the newcomer.
#[test]
fn none_while_a_job_on_the_gpu_has_not_registered() {
    let mut snapshot = gpu(40, vec![job(1, 38)]);
    snapshot.arriving = vec![2];
    match decide(&snapshot, &settings(), &GpuCooldown::default(), NOW) {
        Decision::Waiting { arriving, .. } => assert_eq!(arriving, vec![2]),
        other => panic!("expected to wait for job 2, got {other:?}"),
    }
    // Calm stays calm, whoever is arriving.
    let mut calm = gpu(0, vec![job(1, 30)]);
    calm.arriving = vec![2];
    assert_eq!(
        decide(&calm, &settings(), &GpuCooldown::default(), NOW),
        Decision::Calm
    );
    // Once it is listed (registered, and over its quota), it is the victim.
    let mut registered = gpu(0, vec![job(1, 38), job(2, 41)]);
    registered.arriving.clear();
    assert_eq!(
        decide(&registered, &settings(), &GpuCooldown::default(), NOW)
            .victim()
            .map(|v| v.job_id),
        Some(2)
    );
}

/// G9: a job Slurm gave no GPU, with memory on this one (devices not constrained), is the victim
/// before any job with a watchdog, even one over its quota and even while another job is
/// arriving; cancelled (whatever `non_requeueable` says); the largest of several first. One
/// holding nothing here frees nothing.
#[test]
fn a_job_given_no_gpu_goes_first() {
    let not_given = |job_id: u32, used_gib: u64| NotGiven {
        job_id,
        used: used_gib * G,
    };
    let mut over_quota = job(1, 45);
    over_quota.quota = Some(40 * G);
    let mut snapshot = gpu(0, vec![over_quota, job(2, 10)]);
    snapshot.not_given = vec![not_given(7, 12), not_given(8, 20), not_given(9, 0)];
    snapshot.used += 32 * G;
    snapshot.arriving = vec![3];
    let decision = decide(&snapshot, &settings(), &GpuCooldown::default(), NOW);
    let want = Victim {
        job_id: 8,
        action: Action::Cancel,
        why: Why::NotGiven { used: 20 * G },
    };
    assert_eq!(decision.victim().copied(), Some(want), "{decision:?}");

    // Holding nothing here: the order as without it (job 3 is still arriving).
    snapshot.not_given = vec![not_given(9, 0)];
    assert!(matches!(
        decide(&snapshot, &settings(), &GpuCooldown::default(), NOW),
        Decision::Waiting { .. }
    ));
    // A calm GPU stays calm.
    let mut calm = gpu(0, vec![job(2, 10)]);
    calm.not_given = vec![not_given(7, 12)];
    calm.used += 12 * G;
    assert_eq!(
        decide(&calm, &settings(), &GpuCooldown::default(), NOW),
        Decision::Calm
    );
}

#[test]
fn the_order_is_total() {
    let jobs = vec![
        JobOnGpu {
            preemptible: true,
            ..job(1, 10)
        },
        JobOnGpu {
            quota: Some(5 * G),
            ..job(2, 10)
        },
        JobOnGpu {
            rank: rank(5),
            ..job(3, 10)
        },
        JobOnGpu {
            start_time: NOW,
            ..job(4, 10)
        },
        job(5, 10),
        job(6, 10),
        JobOnGpu {
            rank: rank(-1),
            ..job(7, 10)
        },
    ];
    let ids = |order: Vec<&JobOnGpu>| order.iter().map(|j| j.job_id).collect::<Vec<_>>();
    let want = vec![2, 1, 7, 4, 6, 5, 3];
    assert_eq!(ids(victim_order(&jobs)), want);
    let mut reversed = jobs.clone();
    reversed.reverse();
    assert_eq!(ids(victim_order(&reversed)), want);
}

#[test]
fn reasons_read_well() {
    let settings = PreemptSettings {
        reserve: parse_amount("4G").unwrap(),
        ..settings()
    };
    let snapshot = gpu(
        0,
        vec![
            JobOnGpu {
                quota: Some(30 * G),
                ..job(11, 35)
            },
            job(10, 42),
        ],
    );
    let Decision::Preempt {
        contention, victim, ..
    } = decide(&snapshot, &settings, &GpuCooldown::default(), NOW)
    else {
        panic!("expected a victim");
    };
    assert_eq!(contention.to_string(), "free GPU memory 3G below the reserve 4G");
    assert_eq!(victim.why.to_string(), "over its quota (35G of 30G)");
    assert_eq!(Why::Volunteer.to_string(), "volunteered (--gpu-mem-preemptible)");
    assert_eq!(
        Why::NotGiven { used: 12 * G }.to_string(),
        "given no GPU by Slurm, yet holding 12G on this one (cgroup.conf does not constrain devices)"
    );
    assert_eq!(
        Why::LowestRank(rank(-10)).to_string(),
        "lowest priority (rank -10 (Slurm priority 1000))"
    );
    assert_eq!(
        Skipped {
            job_id: 7,
            reason: CannotPreempt::NotRequeueable
        }
        .to_string(),
        "job 7: cannot preempt: cannot be requeued (--no-requeue, or not a batch job)"
    );
    assert_eq!(
        Contention::Trend {
            seconds_to_full: 12.4
        }
        .to_string(),
        "GPU memory predicted full in 12 s"
    );
}
