//! The watchdog's loop with the real attributor over a node's /proc and cgroups (fixture trees):
//! a process the job's user moves between their jobs still counts against the quota.

use std::time::{Duration, Instant};

use gmq_core::config::Enforcement;
use gmq_core::size::ByteSize;
use gmq_core::watchdog::gpu::{GpuProcess, GpuSample, GpuSource};
use gmq_core::watchdog::Watchdog;
use gmq_node::attribute::ProcAttributor;

use crate::common::attribution_world::{needs_root, World};
use crate::common::watchdog_fakes::{FakeSlurm, Lines};

const G: u64 = 1 << 30;

fn settings() -> Enforcement {
    Enforcement {
        grace: Duration::from_secs(2),
        interval: Duration::from_secs(1),
        ..Enforcement::default()
    }
}

/// A GPU of the job listing the processes of `World::moved_between_jobs`: `pid` holds 50G.
struct OneProcess {
    pid: u32,
    listed: bool,
}

impl GpuSource for OneProcess {
    fn sample(&mut self) -> Result<Vec<GpuSample>, String> {
        Ok(vec![GpuSample {
            index: 0,
            uuid: "GPU-00000000-0000-4000-8000-000000000000".into(),
            total: 80 * G,
            used: 50 * G,
            processes: vec![GpuProcess {
                pid: self.pid,
                used: Some(50 * G),
            }],
            listed: self.listed,
        }])
    }

    fn gpu_total(&self) -> Option<u64> {
        Some(80 * G)
    }
}

/// Job 7 (uid 2001, 40G quota) watched for six seconds with the real attributor over `world`.
fn run_attributed(world: &World, gpu: OneProcess) -> (FakeSlurm, Lines) {
    let mut watchdog = Watchdog::new(7, "node1", Some(ByteSize::from_bytes(40 * G)), settings());
    watchdog.set_run(0);
    let mut attributor = ProcAttributor::new(7, 2001, world.proc_root(), world.cgroup_root());
    let (mut gpus, mut lines) = (gpu, Lines::default());
    let mut slurm = FakeSlurm {
        requeueable: true,
        ..FakeSlurm::default()
    };
    let t0 = Instant::now();
    for i in 0..6 {
        watchdog.tick(
            t0 + Duration::from_secs(i),
            &mut gpus,
            &mut attributor,
            &mut slurm,
            &mut lines,
        );
    }
    (slurm, lines)
}

#[test]
fn a_process_moved_into_another_job_of_the_user_is_held_to_the_quota() {
    if !needs_root("a_process_moved_into_another_job_of_the_user_is_held_to_the_quota") {
        return;
    }
    let world = World::moved_between_jobs();
    // 500: moved in the freezer hierarchy only (job 7 and job 8 both claim it); 501: moved in every
    // hierarchy into a cgroup the user made below job 8's step; 502: the same, named like
    // Slurm's `task_9`. Each is held to job 7's quota on job 7's GPU.
    for pid in [500, 501, 502] {
        let (slurm, lines) = run_attributed(&world, OneProcess { pid, listed: true });
        assert_eq!(
            slurm.calls,
            vec!["comment", "requeue"],
            "pid {pid}: {:?}",
            lines.lines
        );
        assert!(
            lines.lines.iter().any(|l| l.contains("50G over its 40G quota")),
            "pid {pid}: {:?}",
            lines.lines
        );
    }
    // Job 8's own process (Slurm's step cgroup) on the same GPU is not job 7's.
    let (slurm, lines) = run_attributed(
        &world,
        OneProcess {
            pid: 510,
            listed: true,
        },
    );
    assert!(slurm.calls.is_empty(), "{:?} {:?}", slurm.calls, lines.lines);
    // Nor is the moved-everywhere process on a GPU that is not job 7's (job 8 counts it there).
    let (slurm, _) = run_attributed(
        &world,
        OneProcess {
            pid: 501,
            listed: false,
        },
    );
    assert!(slurm.calls.is_empty(), "{:?}", slurm.calls);
}
