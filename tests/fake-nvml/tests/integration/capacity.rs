//! `fakeNvmlClaim` against the GPU's capacity (README: fakeNvmlClaim): a claim that would take the
//! GPU past `total`, counting what the other processes hold (and `reserved`, `extra_used`), is
//! refused with NVML_ERROR_MEMORY and changes nothing, as a real GPU's allocation fails.
//!
//! The other claimant is a real second process: this test binary again, running [`claim_helper`].

use crate::common;

use std::ffi::c_uint;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use common::*;

const SUCCESS: u32 = 0;
const INVALID_ARGUMENT: u32 = 2;
const MEMORY: u32 = 20;

/// Tells [`claim_helper`] what to claim and what to expect: `<gpu> <bytes> <code>`, `<code>` `any`
/// to accept any answer (printed as `helper code N`).
const HELPER_VAR: &str = "FAKE_NVML_TEST_CLAIM";

/// `fakeNvmlClaim(gpu, bytes)` in this process (the library is loaded, no nvmlInit: it needs none).
fn claim(gpu: c_uint, bytes: u64) -> u32 {
    // SAFETY: the fake's initialisers only set up Rust statics.
    let lib = unsafe { libloading::Library::new(lib_path()) }.expect("load the fake library");
    let claim =
        unsafe { lib.get::<unsafe extern "C" fn(c_uint, u64) -> u32>(b"fakeNvmlClaim") }.expect("exported");
    unsafe { claim(gpu, bytes) }
}

/// `fakeNvmlClaim(gpu, bytes)` in another process, which must answer `code`; its pid.
fn claim_elsewhere(gpu: c_uint, bytes: u64, code: u32) -> u32 {
    let child = helper(gpu, bytes, &code.to_string())
        .output()
        .expect("run the helper");
    helper_said(&child, "pid")
}

fn helper(gpu: c_uint, bytes: u64, code: &str) -> Command {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .args(["capacity::claim_helper", "--exact", "--ignored", "--nocapture"])
        .env(HELPER_VAR, format!("{gpu} {bytes} {code}"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

/// The number the helper printed after `helper <what> `; panics if it failed.
fn helper_said(child: &std::process::Output, what: &str) -> u32 {
    let stdout = String::from_utf8_lossy(&child.stdout);
    assert!(
        child.status.success(),
        "helper: {stdout}{}",
        String::from_utf8_lossy(&child.stderr)
    );
    let prefix = format!("helper {what} ");
    stdout
        .lines()
        .find_map(|line| line.strip_prefix(prefix.as_str()))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no '{prefix}' in {stdout}"))
}

/// The second process of [`claim_elsewhere`]; does nothing when run without [`HELPER_VAR`].
#[test]
#[ignore = "run by claim_elsewhere"]
fn claim_helper() {
    let Some(task) = std::env::var_os(HELPER_VAR) else {
        return;
    };
    let task = task.into_string().unwrap();
    let [gpu, bytes, code]: [&str; 3] = task.split(' ').collect::<Vec<_>>().try_into().unwrap();
    let (gpu, bytes): (c_uint, u64) = (gpu.parse().unwrap(), bytes.parse().unwrap());
    // Alive under the scenario's proc root (inherited FAKE_NVML_PROC), and staying so after it exits.
    let me = std::process::id();
    let proc_root = PathBuf::from(std::env::var_os("FAKE_NVML_PROC").unwrap());
    std::fs::create_dir_all(proc_root.join(me.to_string())).unwrap();
    println!("helper pid {me}");
    let answer = claim(gpu, bytes);
    println!("helper code {answer}");
    if code != "any" {
        assert_eq!(answer, code.parse::<u32>().unwrap(), "{task}");
    }
}

fn read(path: &std::path::Path) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

#[test]
fn a_claim_past_the_gpus_capacity_is_refused() {
    // GPU 0: 80G, 512M reserved.
    let scenario = Scenario::new(Some(TWO_GPUS));
    let me = std::process::id();
    scenario.alive(me);
    let mine = scenario.gpu_dir(0).join(me.to_string());

    assert_eq!(claim(0, 10 * GIB), SUCCESS);
    assert_eq!(read(&mine), Some(format!("{}\n", 10 * GIB)));
    // Another process takes 60G: 0.5 + 10 + 60 fits in 80.
    let other = claim_elsewhere(0, 60 * GIB, SUCCESS);
    assert_ne!(other, me);
    let others = scenario.gpu_dir(0).join(other.to_string());
    assert_eq!(read(&others), Some(format!("{}\n", 60 * GIB)));
    // Now 0.5 + 60 + 30 does not: refused, my 10G stays as it was.
    assert_eq!(claim(0, 30 * GIB), MEMORY);
    assert_eq!(read(&mine), Some(format!("{}\n", 10 * GIB)));
    // The other process cannot grow into what I hold either.
    claim_elsewhere(0, 60 * GIB + 10 * GIB, MEMORY);
    assert_eq!(read(&others), Some(format!("{}\n", 60 * GIB)));
    // My own 10G is replaced, not added: up to 80 - 0.5 - 60 = 19.5G in all fits.
    assert_eq!(claim(0, 19 * GIB + 512 * MIB), SUCCESS);
    assert_eq!(claim(0, 19 * GIB + 512 * MIB + 1), MEMORY);
    // extra_used counts too.
    scenario.devices(&TWO_GPUS.replacen(
        "reserved = \"512M\"",
        "reserved = \"512M\"\nextra_used = \"1G\"",
        1,
    ));
    assert_eq!(claim(0, 19 * GIB + 512 * MIB), SUCCESS, "stays: granted");
    assert_eq!(claim(0, 19 * GIB + 512 * MIB + 1), MEMORY);
    assert_eq!(claim(0, 18 * GIB + 512 * MIB), SUCCESS);
    scenario.devices(TWO_GPUS);

    // A claim file written directly is not checked and over-fills the GPU; a shrink still works.
    scenario.claim(0, 4000, "40G\n");
    assert_eq!(claim(0, 5 * GIB), SUCCESS);
    assert_eq!(read(&mine), Some(format!("{}\n", 5 * GIB)));
    assert_eq!(claim(0, 5 * GIB + 1), MEMORY);
    // A process that died frees its memory.
    scenario.dies(4000);
    assert_eq!(claim(0, 19 * GIB), SUCCESS);

    // The switch in faults.toml lets a claim pass the capacity.
    scenario.faults("claims_past_capacity = \"granted\"\n");
    assert_eq!(claim(0, 79 * GIB), SUCCESS);
    scenario.faults("claims_past_capacity = \"refused\"\n");
    assert_eq!(claim(0, 79 * GIB + 1), MEMORY);
}

#[test]
fn processes_claiming_at_once_cannot_both_fit_past_capacity() {
    // 79.5G usable on GPU 0: of eight processes claiming 30G at the same time, two fit.
    let scenario = Scenario::new(Some(TWO_GPUS));
    scenario.gpu_dir(0);
    let children: Vec<_> = (0..8)
        .map(|_| helper(0, 30 * GIB, "any").spawn().expect("start a helper"))
        .collect();
    let codes: Vec<u32> = children
        .into_iter()
        .map(|child| helper_said(&child.wait_with_output().unwrap(), "code"))
        .collect();
    assert_eq!(codes.iter().filter(|&&c| c == SUCCESS).count(), 2, "{codes:?}");
    assert_eq!(codes.iter().filter(|&&c| c == MEMORY).count(), 6, "{codes:?}");
    assert_eq!(std::fs::read_dir(scenario.gpu_dir(0)).unwrap().count(), 2);
}

#[test]
fn a_claim_waits_for_the_lock_on_its_gpus_directory() {
    use std::os::fd::AsRawFd;
    let scenario = Scenario::new(Some(TWO_GPUS));
    let dir = std::fs::File::open(scenario.gpu_dir(0)).unwrap();
    assert_eq!(unsafe { libc::flock(dir.as_raw_fd(), libc::LOCK_EX) }, 0);
    let mut child = helper(0, GIB, "0").spawn().expect("start a helper");
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(
        child.try_wait().unwrap().is_none(),
        "claimed while the directory was locked"
    );
    assert_eq!(std::fs::read_dir(scenario.gpu_dir(0)).unwrap().count(), 0);
    drop(dir);
    helper_said(&child.wait_with_output().unwrap(), "code");
    assert_eq!(std::fs::read_dir(scenario.gpu_dir(0)).unwrap().count(), 1);
}

#[test]
fn an_unknown_gpu_or_no_devices_file() {
    let scenario = Scenario::new(Some(TWO_GPUS));
    scenario.alive(std::process::id());
    // GPU 2 is not in devices.toml: an error, and no file, even where its directory exists.
    let dir = scenario.gpu_dir(2);
    assert_eq!(claim(2, GIB), INVALID_ARGUMENT);
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
    assert_eq!(claim(u32::MAX, GIB), INVALID_ARGUMENT);

    // Without devices.toml the capacity is unknown: granted as before.
    std::fs::remove_file(scenario.path("devices.toml")).unwrap();
    assert_eq!(claim(2, 500 * GIB), SUCCESS);
    assert_eq!(
        read(&dir.join(std::process::id().to_string())),
        Some(format!("{}\n", 500 * GIB))
    );
}
