//! The watchdog's presence check and hard-limit path on cgroup/v2 nodes as Slurm 24.11 and 26.05
//! make them (crates/node/tests/fixtures/cgroup-v2): the directory it watches and caps is the
//! job's, `job_<id>` on 24.11 and the SLUID the prolog passed (`--sluid`) on 26.05.

use std::path::Path;
use std::time::Instant;

use gmq_commands::watchdog::presence::Presence;
use gmq_core::sluid::Sluid;
use gmq_node::attribute::JobOnNode;

fn tree(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../node/tests/fixtures/cgroup-v2")
        .join(name)
}

#[test]
fn the_watchdog_finds_and_watches_the_jobs_v2_directory() {
    // Debian's scope on the 24.11 tree (as seen live), upstream's on the 26.05 one.
    let cases = [
        (
            "slurm-24.11",
            "system.slice/n1_slurmstepd.scope",
            500001,
            None,
            "job_500001",
        ),
        (
            "slurm-26.05",
            "system.slice/slurmstepd.scope",
            900001,
            Sluid::parse("s4T9KSR4920000"),
            "s4T9KSR4920000",
        ),
    ];
    for (name, scope, job_id, sluid, dir) in cases {
        let cgroup_root = tree(name).join("cgroup");
        let job = JobOnNode {
            job_id,
            uid: 2001,
            sluid,
        };
        let mut presence = Presence::of_job(&cgroup_root, job);
        // The hard limit is set on this directory (`set_hard_limit_when_due`).
        let want = cgroup_root.join(scope).join(dir);
        assert_eq!(presence.job_dir(), Some(want.as_path()), "{name}");
        assert!(
            !presence.job_left(Instant::now()),
            "{name}: its steps hold processes"
        );
    }
    // 26.05 without the SLUID: nothing named job_<id>, so nothing is capped or concluded.
    let cgroup_root = tree("slurm-26.05").join("cgroup");
    let unnamed = JobOnNode {
        job_id: 900001,
        uid: 2001,
        sluid: None,
    };
    let presence = Presence::of_job(&cgroup_root, unnamed);
    assert_eq!(presence.job_dir(), None);
}
