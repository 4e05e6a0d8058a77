//! Anti-thrash over time: a simulated GPU whose usage oscillates, decided every second as the
//! watchdogs would, with the victim leaving and coming back as a requeued job does.

use std::collections::BTreeMap;
use std::time::Duration;

use gmq_core::config::Action;
use gmq_core::preempt::{decide, Decision, GpuCooldown, GpuSnapshot, JobOnGpu, PreemptSettings, Rank};

const G: u64 = 1 << 30;
const T0: u64 = 1_700_000_000;
/// From `scontrol requeue` to the job running again on the node.
const REQUEUE_DELAY: u64 = 30;

const A: u32 = 100; // production, rank 100, 50G quota: grows and shrinks legitimately
const B: u32 = 101; // rank -10, 30G quota
const C: u32 = 102; // rank 0, 30G quota

fn job(job_id: u32, rank: i32, quota_gib: u64) -> JobOnGpu {
    JobOnGpu {
        job_id,
        quota: Some(quota_gib * G),
        used: 0,
        rank: Rank {
            value: rank,
            slurm_priority: 1000,
        },
        preemptible: false,
        start_time: T0 - 3600,
        requeueable: true,
        preemptions: 0,
    }
}

/// What the jobs use at second `t`: A swings between 40G and 50G every 10 s; B 20G, C 14G.
/// With all three, the 80G GPU is short (free < 4G) half of the time.
fn usage(job_id: u32, t: u64) -> u64 {
    match job_id {
        A if (t / 10) % 2 == 1 => 50 * G,
        A => 40 * G,
        B => 20 * G,
        _ => 14 * G,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Preempted {
    t: u64,
    job_id: u32,
    action: Action,
}

/// Runs `seconds` of one decision per second; returns every preemption and the jobs' restarts.
fn simulate(settings: &PreemptSettings, seconds: u64) -> (Vec<Preempted>, Vec<(u64, u32)>) {
    let mut running: BTreeMap<u32, JobOnGpu> = [job(A, 100, 50), job(B, -10, 30), job(C, 0, 30)]
        .into_iter()
        .map(|j| (j.job_id, j))
        .collect();
    let mut requeued: Vec<(u64, JobOnGpu)> = Vec::new();
    let mut cooldown = GpuCooldown::default();
    let mut preempted = Vec::new();
    let mut restarts = Vec::new();
    for t in 0..seconds {
        let now = T0 + t;
        // Requeued jobs come back after the delay, as a new run that was preempted once more.
        let (due, waiting): (Vec<_>, Vec<_>) = requeued.into_iter().partition(|(at, _)| *at <= t);
        requeued = waiting;
        for (_, mut back) in due {
            back.start_time = now;
            restarts.push((t, back.job_id));
            running.insert(back.job_id, back);
        }
        let jobs: Vec<JobOnGpu> = running
            .values()
            .map(|j| JobOnGpu {
                used: usage(j.job_id, t),
                ..j.clone()
            })
            .collect();
        let snapshot = GpuSnapshot {
            index: 0,
            total: 80 * G,
            used: jobs.iter().map(|j| j.used).sum(),
            seconds_to_full: None,
            jobs,
            arriving: Vec::new(),
            not_given: Vec::new(),
        };
        let decision = decide(&snapshot, settings, &cooldown, now);
        if let Decision::Preempt { victim, .. } = decision {
            // What the registry's claim does: the gate admits exactly this one.
            cooldown
                .try_record(victim.job_id, now, settings.cooldown)
                .expect("decide chose a victim while the GPU cools down");
            preempted.push(Preempted {
                t,
                job_id: victim.job_id,
                action: victim.action,
            });
            let mut gone = running.remove(&victim.job_id).unwrap();
            gone.preemptions += 1;
            if victim.action == Action::Requeue {
                requeued.push((t + REQUEUE_DELAY, gone));
            } // held: it does not come back
        }
    }
    (preempted, restarts)
}

#[test]
fn two_minutes_of_oscillation_cost_one_job() {
    let (preempted, restarts) = simulate(&PreemptSettings::default(), 120);
    assert_eq!(
        preempted,
        vec![Preempted {
            t: 10,
            job_id: B,
            action: Action::Requeue
        }],
        "the first shortage requeues the lowest rank; then nothing for the cooldown"
    );
    assert_eq!(restarts, vec![(10 + REQUEUE_DELAY, B)]);
}

#[test]
fn a_long_oscillation_ends_instead_of_looping() {
    let settings = PreemptSettings {
        cooldown: Duration::from_secs(60),
        ..PreemptSettings::default()
    };
    let (preempted, restarts) = simulate(&settings, 3600);
    let max = settings.max_preemptions_per_job;

    // At most one victim per cooldown on the GPU.
    for pair in preempted.windows(2) {
        assert!(
            pair[1].t - pair[0].t >= 60,
            "two preemptions within one cooldown: {pair:?}"
        );
    }
    // A restarted job is not preempted again within one cooldown of its restart.
    for p in &preempted {
        let restarted = restarts.iter().rfind(|(t, id)| *id == p.job_id && *t <= p.t);
        if let Some((at, _)) = restarted {
            assert!(p.t - at >= 60, "{p:?} only {}s after its restart", p.t - at);
        }
    }
    // The production job is never the victim. B and C take turns (each protected after its
    // restart) until B reaches its cap and is held; without B the GPU is no longer short.
    let of = |id| {
        preempted
            .iter()
            .filter(|p| p.job_id == id)
            .map(|p| (p.t, p.action))
            .collect::<Vec<_>>()
    };
    assert_eq!(of(A), vec![]);
    let b = of(B);
    assert_eq!(b.len() as u32, max + 1, "B: {b:?}");
    assert!(b[..max as usize].iter().all(|p| p.1 == Action::Requeue));
    assert_eq!(b[max as usize].1, Action::RequeueHold);
    let c = of(C);
    assert!(
        c.len() as u32 <= max && c.iter().all(|p| p.1 == Action::Requeue),
        "C: {c:?}"
    );
    // And then it is over: nothing in the last three quarters of the hour.
    assert!(preempted.last().unwrap().t < 900, "{preempted:?}");
}

#[test]
fn leave_alone_after_the_cap_passes_the_turn_up_the_line() {
    let settings = PreemptSettings {
        cooldown: Duration::from_secs(60),
        after_max: gmq_core::preempt::AfterMax::LeaveAlone,
        ..PreemptSettings::default()
    };
    let (preempted, _) = simulate(&settings, 3600);
    let order: Vec<(u64, u32)> = preempted.iter().map(|p| (p.t, p.job_id)).collect();
    // B and C take turns to their cap and are then left alone (running, short of memory), so the
    // next in line is the production job: why `hold` is the default.
    assert_eq!(
        order,
        vec![
            (10, B),
            (70, C),
            (130, B),
            (190, C),
            (250, B),
            (310, C),
            (370, A),
            (470, A),
            (570, A)
        ]
    );
    assert!(preempted.iter().all(|p| p.action == Action::Requeue));
}
