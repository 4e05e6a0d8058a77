//! The node registry on a temporary runtime directory: entries, heartbeats, stale watchdogs, the
//! claims that let exactly one watchdog act.

use std::fs;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use gmq_core::preempt::cooldown::Preemption;
use gmq_core::preempt::{GpuCooldown, Rank};
use gmq_node::attribute::{identify, ProcessIdentity};
use gmq_node::preempt_registry::{ActedBy, DeadClaim, GpuRef, Registry, RegistryEntry};

const NOW: u64 = 1_700_000_000;
const TIMEOUT: Duration = Duration::from_secs(30);

fn proc_root() -> &'static Path {
    Path::new("/proc")
}

/// A fresh runtime directory, not yet made (the registry makes it), inside a temporary directory
/// removed when dropped (even when the test fails).
struct TempRuntime {
    path: PathBuf,
    _scratch: tempfile::TempDir,
}

impl TempRuntime {
    fn new(name: &str) -> TempRuntime {
        let scratch = tempfile::Builder::new()
            .prefix(&format!("gmq-preempt-{name}-"))
            .tempdir()
            .unwrap();
        TempRuntime {
            path: scratch.path().join("run"),
            _scratch: scratch,
        }
    }
}

/// This test process: a watchdog that is alive.
fn alive() -> ProcessIdentity {
    identify(proc_root(), std::process::id()).unwrap()
}

/// A watchdog that is gone: our pid with another start time (a reused pid).
fn dead() -> ProcessIdentity {
    ProcessIdentity {
        pid: std::process::id(),
        start_time: alive().start_time + 1,
    }
}

fn entry(job_id: u32, watchdog: ProcessIdentity, heartbeat: u64) -> RegistryEntry {
    RegistryEntry {
        job_id,
        user: "alice".into(),
        quota: Some(30 << 30),
        rank: Rank {
            value: -10,
            slurm_priority: 4294,
        },
        preemptible: false,
        requeueable: true,
        preemptions: 1,
        start_time: NOW - 600,
        gpus: vec![
            GpuRef {
                index: 0,
                uuid: "GPU-8c6f1d2e-aaaa".into(),
            },
            GpuRef {
                index: 3,
                uuid: "MIG-1234".into(),
            },
        ],
        watchdog,
        heartbeat,
        acted_by: None,
    }
}

#[test]
fn entries_round_trip() {
    let runtime = TempRuntime::new("round-trip");
    let registry = Registry::open(&runtime.path).unwrap();
    assert_eq!(registry.dir(), runtime.path.join("registry"));
    let mut mine = entry(12, alive(), NOW);
    registry.write(&mine).unwrap();
    assert_eq!(registry.read(12).unwrap(), Some(mine.clone()));
    let meta = fs::metadata(registry.dir().join("12")).unwrap();
    // Only root reads the registry: it names every job's user, quota, rank and watchdog.
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    assert_eq!(
        fs::metadata(registry.dir()).unwrap().permissions().mode() & 0o777,
        0o700
    );
    // An older version's registry (0755) is made 0700 when opened; the runtime directory is not
    // touched.
    fs::set_permissions(registry.dir(), fs::Permissions::from_mode(0o755)).unwrap();
    fs::set_permissions(&runtime.path, fs::Permissions::from_mode(0o711)).unwrap();
    Registry::open(&runtime.path).unwrap();
    assert_eq!(
        fs::metadata(registry.dir()).unwrap().permissions().mode() & 0o777,
        0o700
    );
    assert_eq!(
        fs::metadata(&runtime.path).unwrap().permissions().mode() & 0o777,
        0o711
    );

    registry.heartbeat(&mut mine, NOW + 2).unwrap();
    assert_eq!(registry.read(12).unwrap().unwrap().heartbeat, NOW + 2);

    let other = RegistryEntry {
        quota: None,
        preemptible: true,
        gpus: vec![],
        acted_by: Some(ActedBy { job_id: 12, at: NOW }),
        ..entry(9, dead(), NOW)
    };
    registry.write(&other).unwrap();
    assert_eq!(registry.list().unwrap(), vec![other.clone(), mine.clone()]);

    registry.remove(9).unwrap();
    registry.remove(9).unwrap(); // already gone: fine
    assert_eq!(registry.read(9).unwrap(), None);
    assert_eq!(registry.list().unwrap(), vec![mine]);
}

#[test]
fn the_file_is_one_json_object_read_strictly() {
    let text = entry(
        12,
        ProcessIdentity {
            pid: 4242,
            start_time: 171677,
        },
        NOW,
    )
    .render();
    assert_eq!(
        text,
        "{\"job_id\":12,\"user\":\"alice\",\"quota\":32212254720,\"rank\":{\"value\":-10,\"slurm_priority\":4294},\
         \"preemptible\":false,\"requeueable\":true,\"preemptions\":1,\"start_time\":1699999400,\
         \"gpus\":[{\"index\":0,\"uuid\":\"GPU-8c6f1d2e-aaaa\"},{\"index\":3,\"uuid\":\"MIG-1234\"}],\
         \"watchdog\":{\"pid\":4242,\"start_time\":171677},\"heartbeat\":1700000000,\"acted_by\":null}\n"
    );
    assert_eq!(RegistryEntry::parse(&text).unwrap().watchdog.pid, 4242);
    let body = text.trim_end().strip_suffix('}').unwrap();
    // A newer writer's extra field is ignored; `acted_by` may be absent.
    assert!(RegistryEntry::parse(&format!("{body},\"shard\":2}}")).is_ok());
    let without_acted = text.replace(",\"acted_by\":null", "");
    assert_eq!(RegistryEntry::parse(&without_acted).unwrap().acted_by, None);
    let broken: &[(&str, &str)] = &[
        (",\"heartbeat\":1700000000", "duplicate field `heartbeat`"),
        (
            ",\"acted_by\":12",
            "invalid type: integer `12`, expected struct ActedBy",
        ),
    ];
    for (extra, why) in broken {
        let err = RegistryEntry::parse(&format!("{}{extra}}}", body.replace(",\"acted_by\":null", "")))
            .unwrap_err();
        assert!(err.starts_with(why), "{extra}: {err}");
    }
    // The old `key=value` format is not read (entries live in a tmpfs; see `RegistryEntry`).
    assert!(RegistryEntry::parse("job_id=12\nuser=alice\n").is_err());
    let replaced: &[(&str, &str, &str)] = &[
        (
            "\"quota\":32212254720",
            "\"quota\":\"30G\"",
            "invalid type: string \"30G\", expected u64",
        ),
        (
            "\"preemptible\":false",
            "\"preemptible\":1",
            "invalid type: integer `1`, expected a boolean",
        ),
        ("\"GPU-8c6f1d2e-aaaa\"", "\"../x\"", "bad GPU UUID \"../x\""),
        ("\"user\":\"alice\",", "", "missing field `user`"),
        ("\"alice\"", "\"al ice\"", "bad user \"al ice\""),
        ("\"quota\":32212254720,", "", "missing field `quota`"),
        (
            "\"value\":-10",
            "\"value\":\"\"",
            "invalid type: string \"\", expected i32",
        ),
    ];
    for (from, to, why) in replaced {
        let err = RegistryEntry::parse(&text.replace(from, to)).unwrap_err();
        assert!(err.starts_with(why), "{from} -> {to}: {err}");
    }
    // No quota is `null`, and reads back as none.
    let no_quota = text.replace("32212254720", "null");
    assert_eq!(RegistryEntry::parse(&no_quota).unwrap().quota, None);
}

#[test]
fn list_skips_what_is_not_an_entry_and_never_follows_symlinks() {
    let runtime = TempRuntime::new("list");
    let registry = Registry::open(&runtime.path).unwrap();
    let dir = registry.dir().to_path_buf();
    registry.write(&entry(5, alive(), NOW)).unwrap();
    // A valid entry outside, reached only through symlinks.
    let outside = runtime.path.join("outside");
    fs::write(&outside, entry(6, alive(), NOW).render()).unwrap();
    symlink(&outside, dir.join("6")).unwrap();
    fs::write(dir.join("7"), "garbage").unwrap();
    fs::write(dir.join("8"), entry(9, alive(), NOW).render()).unwrap(); // names another job
    fs::write(dir.join("010"), entry(10, alive(), NOW).render()).unwrap(); // not how we name it
    fs::write(dir.join(".5.tmp"), entry(5, alive(), NOW).render()).unwrap();
    fs::write(dir.join("11"), "x".repeat(9000)).unwrap(); // too large
    fs::create_dir(dir.join("12")).unwrap();
    let fifo = std::ffi::CString::new(dir.join("13").to_str().unwrap()).unwrap();
    // SAFETY: `fifo` is a NUL-terminated path that outlives the call.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
    let ids: Vec<u32> = registry.list().unwrap().iter().map(|e| e.job_id).collect();
    assert_eq!(ids, vec![5]);
    // Read directly, the symlink is refused, not followed.
    assert!(registry.read(6).is_err());
    assert!(registry
        .read(7)
        .unwrap_err()
        .to_string()
        .contains("registry entry 7"));
    assert!(registry.read(8).unwrap_err().to_string().contains("names job 9"));
}

#[test]
fn open_refuses_a_symlinked_directory() {
    let runtime = TempRuntime::new("symlinked");
    fs::create_dir_all(runtime.path.join("elsewhere")).unwrap();
    let linked_runtime = runtime.path.join("runtime-link");
    symlink(runtime.path.join("elsewhere"), &linked_runtime).unwrap();
    assert!(Registry::open(&linked_runtime).is_err());

    let real = runtime.path.join("real");
    fs::create_dir_all(&real).unwrap();
    symlink(runtime.path.join("elsewhere"), real.join("registry")).unwrap();
    let e = Registry::open(&real).unwrap_err();
    assert!(
        e.to_string()
            .ends_with("registry is a symlink: refused, left as it is"),
        "{e}"
    );
    assert!(!runtime.path.join("elsewhere/registry").exists());
}

#[test]
fn open_refuses_a_runtime_dir_others_can_write_and_leaves_its_mode() {
    let runtime = TempRuntime::new("shared");
    fs::create_dir(&runtime.path).unwrap();
    for mode in [0o1777, 0o777, 0o1755, 0o770] {
        fs::set_permissions(&runtime.path, fs::Permissions::from_mode(mode)).unwrap();
        let e = Registry::open(&runtime.path).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::PermissionDenied, "{mode:o}: {e}");
        assert!(e.to_string().contains("refused, left as it is"), "{e}");
        assert_eq!(
            fs::metadata(&runtime.path).unwrap().permissions().mode() & 0o7777,
            mode
        );
        assert!(!runtime.path.join("registry").exists());
    }
    fs::set_permissions(&runtime.path, fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn write_refuses_what_would_break_the_file() {
    let runtime = TempRuntime::new("refuse");
    let registry = Registry::open(&runtime.path).unwrap();
    let bad_user = RegistryEntry {
        user: "eve\nacted_by=1 2".into(),
        ..entry(5, alive(), NOW)
    };
    assert!(registry
        .write(&bad_user)
        .unwrap_err()
        .to_string()
        .contains("user"));
    let bad_gpu = RegistryEntry {
        gpus: vec![GpuRef {
            index: 0,
            uuid: "../../etc".into(),
        }],
        ..entry(5, alive(), NOW)
    };
    assert!(registry
        .write(&bad_gpu)
        .unwrap_err()
        .to_string()
        .contains("GPU UUID"));
    assert_eq!(registry.read(5).unwrap(), None);
}

#[test]
fn stale_needs_an_old_heartbeat_and_a_dead_watchdog() {
    let cases = [
        (alive(), NOW - 31, false, "alive but slow: never replaced"),
        (dead(), NOW - 31, true, "gone and silent"),
        (dead(), NOW - 30, false, "gone, heartbeat exactly at the timeout"),
        (dead(), NOW + 100, false, "heartbeat in the future (clock step)"),
        (
            ProcessIdentity {
                pid: u32::MAX - 1,
                start_time: 1,
            },
            NOW - 600,
            true,
            "no such pid",
        ),
    ];
    for (watchdog, heartbeat, want, why) in cases {
        assert_eq!(
            entry(5, watchdog, heartbeat).is_stale(NOW, TIMEOUT, proc_root()),
            want,
            "{why}"
        );
    }
    let runtime = TempRuntime::new("stale");
    let registry = Registry::open(&runtime.path).unwrap();
    registry.write(&entry(5, alive(), NOW - 600)).unwrap();
    registry.write(&entry(6, dead(), NOW - 600)).unwrap();
    registry.write(&entry(7, dead(), NOW)).unwrap();
    let stale: Vec<u32> = registry
        .stale(NOW, TIMEOUT, proc_root())
        .unwrap()
        .iter()
        .map(|e| e.job_id)
        .collect();
    assert_eq!(stale, vec![6]);
}

#[test]
fn one_watchdog_acts_for_a_dead_one_once() {
    let runtime = TempRuntime::new("claim");
    let registry = Registry::open(&runtime.path).unwrap();
    registry.write(&entry(5, alive(), NOW - 600)).unwrap();
    registry.write(&entry(6, dead(), NOW - 600)).unwrap();
    let claim = |victim, me| {
        registry
            .claim_for_dead(victim, me, NOW, TIMEOUT, proc_root())
            .unwrap()
    };

    assert_eq!(claim(5, 20), DeadClaim::NotStale);
    assert_eq!(claim(99, 20), DeadClaim::Gone);
    let DeadClaim::Granted(granted) = claim(6, 20) else {
        panic!("the first claim for a dead watchdog is granted");
    };
    let by_20 = ActedBy { job_id: 20, at: NOW };
    assert_eq!(granted.acted_by, Some(by_20));
    assert_eq!(registry.read(6).unwrap().unwrap().acted_by, Some(by_20));
    assert_eq!(claim(6, 21), DeadClaim::AlreadyActed(by_20));
    assert_eq!(claim(6, 20), DeadClaim::AlreadyActed(by_20));

    // Only the claimant can give the claim back (its requeue failed); then another may act.
    registry.withdraw_claim(6, 21).unwrap();
    assert_eq!(claim(6, 22), DeadClaim::AlreadyActed(by_20));
    registry.withdraw_claim(6, 20).unwrap();
    assert!(matches!(claim(6, 22), DeadClaim::Granted(_)));

    // The victim leaves the node: its entry and lock go.
    registry.remove(6).unwrap();
    assert_eq!(claim(6, 23), DeadClaim::Gone);
    registry.remove(6).unwrap();
    let leftovers: Vec<String> = fs::read_dir(registry.dir())
        .unwrap()
        .map(|d| d.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.contains('6'))
        .collect();
    assert_eq!(leftovers, Vec::<String>::new());
}

#[test]
fn racing_claims_grant_exactly_one() {
    let runtime = TempRuntime::new("race");
    let registry = Registry::open(&runtime.path).unwrap();
    for round in 0..20u32 {
        let victim = 1000 + round;
        registry.write(&entry(victim, dead(), NOW - 600)).unwrap();
        let outcomes: Vec<DeadClaim> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8u32)
                .map(|me| {
                    let registry = registry.clone();
                    s.spawn(move || {
                        registry
                            .claim_for_dead(victim, me, NOW, TIMEOUT, proc_root())
                            .unwrap()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let granted = outcomes
            .iter()
            .filter(|o| matches!(o, DeadClaim::Granted(_)))
            .count();
        assert_eq!(granted, 1, "round {round}: {outcomes:?}");
        assert!(outcomes.iter().all(|o| matches!(
            o,
            DeadClaim::Granted(_) | DeadClaim::Busy | DeadClaim::AlreadyActed(_)
        )));
    }
}

#[test]
fn one_preemption_per_gpu_per_cooldown_whoever_asks() {
    let runtime = TempRuntime::new("gpu");
    let registry = Registry::open(&runtime.path).unwrap();
    let cooldown = Duration::from_secs(300);
    let uuid = "GPU-8c6f1d2e-aaaa";
    assert_eq!(registry.gpu_cooldown(uuid).unwrap(), GpuCooldown::default());
    assert_eq!(registry.claim_gpu(uuid, 5, NOW, cooldown).unwrap(), Ok(()));
    assert_eq!(
        registry.gpu_cooldown(uuid).unwrap(),
        GpuCooldown {
            last: Some(Preemption { victim: 5, at: NOW })
        }
    );
    // Another watchdog, another victim, same moment: refused.
    assert_eq!(
        registry.claim_gpu(uuid, 6, NOW, cooldown).unwrap(),
        Err(NOW + 300)
    );
    // Another GPU is not affected.
    assert_eq!(registry.claim_gpu("GPU-other", 6, NOW, cooldown).unwrap(), Ok(()));
    assert_eq!(registry.claim_gpu(uuid, 6, NOW + 300, cooldown).unwrap(), Ok(()));
    assert!(registry.claim_gpu("../5", 6, NOW, cooldown).is_err());
    // Racing watchdogs: exactly one admitted.
    let admitted = std::thread::scope(|s| {
        let handles: Vec<_> = (0..8u32)
            .map(|victim| {
                let registry = registry.clone();
                s.spawn(move || registry.claim_gpu("GPU-race", victim, NOW, cooldown).unwrap())
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap())
            .filter(Result::is_ok)
            .count()
    });
    assert_eq!(admitted, 1);
    // The GPU files are not job entries.
    assert!(registry.list().unwrap().is_empty());
}

#[test]
fn an_entry_seen_on_a_gpu() {
    let e = entry(12, alive(), NOW);
    assert!(e.uses_gpu("MIG-1234"));
    assert!(!e.uses_gpu("GPU-other"));
    let job = e.on_gpu(7 << 30);
    assert_eq!(
        (
            job.job_id,
            job.used,
            job.quota,
            job.rank,
            job.preemptions,
            job.start_time
        ),
        (12, 7 << 30, e.quota, e.rank, 1, NOW - 600)
    );
}
