//! Fitting to a quota: the largest micro-batch keeps the effective batch, the ladder climbs in
//! order of cost and stops as soon as the job fits, the pasted values agree with the estimate.

use gmq_plan::presets::find;
use gmq_plan::{
    estimate, ladder, largest_micro_batch, plan, quota_gib, Checkpointing, Framework, Job, Model, Sharding,
};

const GIB: u64 = 1 << 30;

fn llama_zero3() -> Job {
    let mut job = Job::new(Model::Shaped(find("llama-2-7b").unwrap().shape()), 4, 2048);
    job.parallel.dp = 8;
    job.framework = Framework::Deepspeed;
    job.sharding = Sharding::Zero(3);
    job
}

#[test]
fn peaks_grow_with_micro_batch_and_sequence() {
    let base = llama_zero3();
    let mut last = 0;
    for micro in [1, 2, 4, 8, 16] {
        let peak = estimate(&Job {
            micro_batch: micro,
            ..base.clone()
        })
        .unwrap()
        .peak();
        assert!(peak > last, "micro {micro}");
        last = peak;
    }
    let short = estimate(&Job {
        seq: 1024,
        ..base.clone()
    })
    .unwrap()
    .peak();
    assert!(short < estimate(&base).unwrap().peak());
}

#[test]
fn largest_micro_batch_keeps_the_effective_batch() {
    let job = Job {
        grad_accum: 8,
        ..llama_zero3()
    }; // effective batch 32
    for quota_gib in [20u64, 30, 40, 60, 80, 200] {
        let quota = quota_gib * GIB;
        match largest_micro_batch(&job, quota).unwrap() {
            Some(fit) => {
                assert_eq!(fit.micro_batch * fit.grad_accum, 32);
                assert!(fit.peak <= quota);
                let peak = estimate(&Job {
                    micro_batch: fit.micro_batch,
                    grad_accum: fit.grad_accum,
                    ..job.clone()
                })
                .unwrap()
                .peak();
                assert_eq!(peak, fit.peak);
                // The next divisor up would not fit (or there is none).
                if fit.micro_batch < 32 {
                    let next = fit.micro_batch * 2;
                    let over = estimate(&Job {
                        micro_batch: next,
                        grad_accum: 32 / next,
                        ..job.clone()
                    })
                    .unwrap()
                    .peak();
                    assert!(over > quota, "quota {quota_gib}G: micro {next} would fit too");
                }
            }
            None => {
                let one = estimate(&Job {
                    micro_batch: 1,
                    grad_accum: 32,
                    ..job.clone()
                })
                .unwrap()
                .peak();
                assert!(one > quota);
            }
        }
    }
}

#[test]
fn ladder_is_ordered_by_cost_and_stops_when_it_fits() {
    let mut job = llama_zero3();
    job.sharding = Sharding::None;
    job.flash = false;
    let rungs = ladder(&job, 40 * GIB).unwrap();
    let flags: Vec<&str> = rungs.iter().map(|r| r.flag.as_str()).collect();
    assert_eq!(flags.first(), Some(&"--flash"));
    let order = [
        "--flash",
        "--zero 1",
        "--zero 2",
        "--checkpointing selective",
        "--zero 3",
        "--checkpointing selective-op",
        "--checkpointing full",
    ];
    let positions: Vec<usize> = flags
        .iter()
        .map(|f| order.iter().position(|o| o == f).unwrap())
        .collect();
    assert!(positions.windows(2).all(|w| w[0] < w[1]), "{flags:?}");
    assert!(rungs.windows(2).all(|w| w[1].peak < w[0].peak));
    assert!(rungs.last().unwrap().fits);
    assert!(rungs[..rungs.len() - 1].iter().all(|r| !r.fits));
}

#[test]
fn nothing_to_climb_when_it_fits() {
    let job = Job {
        micro_batch: 1,
        checkpointing: Checkpointing::Full,
        ..llama_zero3()
    };
    assert!(ladder(&job, 80 * GIB).unwrap().is_empty());
}

#[test]
fn paste_values() {
    // Without a quota: the job as configured, rounded up to whole GiB.
    let job = llama_zero3();
    let p = plan(&job, None).unwrap();
    let paste = p.paste.unwrap();
    assert_eq!(paste.quota_gib, quota_gib(p.estimate.peak()));
    assert!(paste.quota_gib * GIB >= p.estimate.peak() && (paste.quota_gib - 1) * GIB < p.estimate.peak());
    assert_eq!((paste.micro_batch, paste.grad_accum), (4, 1));
    // With a quota: the largest micro-batch that fits, and no more than the quota.
    let p = plan(&job, Some(40 * GIB)).unwrap();
    let fit = p.largest.unwrap();
    let paste = p.paste.unwrap();
    assert_eq!(
        (paste.micro_batch, paste.grad_accum),
        (fit.micro_batch, fit.grad_accum)
    );
    assert!(paste.quota_gib <= 40);
    // A quota nothing fits in: nothing to paste.
    let p = plan(&job, Some(GIB)).unwrap();
    assert!(p.paste.is_none() && p.largest.is_none());
}
