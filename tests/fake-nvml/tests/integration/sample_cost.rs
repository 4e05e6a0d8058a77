//! What one watchdog sample costs against the fake: 8 GPUs x 64 processes, per GPU memory_info
//! plus the compute and graphics lists, through nvml-wrapper. A measurement, not a test: run with
//! `cargo test --release -p fake-nvml --test integration sample_cost -- --ignored --nocapture`.

use crate::common;

use std::time::Instant;

use common::*;

#[test]
#[ignore = "a measurement; run it explicitly"]
fn one_sample_of_8_gpus_with_64_processes_each() {
    let devices: String = (0..8)
        .map(|i| format!("[[gpu]]\nuuid = \"GPU-{i:08x}-1111-2222-3333-444444444444\"\nname = \"NVIDIA H100 80GB HBM3\"\ntotal = \"80G\"\n"))
        .collect();
    let scenario = Scenario::new(Some(&devices));
    for gpu in 0..8 {
        for n in 0..64 {
            let kind = if n % 8 == 0 { "\ngraphics" } else { "" };
            scenario.claim(gpu, 10_000 + gpu as u32 * 100 + n, &format!("{}M{kind}", 100 + n));
        }
    }
    let nvml = scenario.nvml();
    let sample = || {
        let mut listed = 0;
        for index in 0..nvml.device_count().unwrap() {
            let gpu = nvml.device_by_index(index).unwrap();
            gpu.memory_info().unwrap();
            listed += gpu.running_compute_processes().unwrap().len();
            listed += gpu.running_graphics_processes().unwrap().len();
        }
        listed
    };
    assert_eq!(sample(), 8 * 64);
    let rounds = 200;
    let start = Instant::now();
    for _ in 0..rounds {
        sample();
    }
    let per_sample = start.elapsed() / rounds;
    eprintln!("one sample (8 GPUs x 64 processes, 49 NVML calls): {per_sample:?}");
}

#[test]
#[ignore = "a measurement; run it explicitly"]
fn breakdown() {
    let devices =
        "[[gpu]]\nuuid = \"GPU-00000000-1111-2222-3333-444444444444\"\nname = \"x\"\ntotal = \"80G\"\n";
    let scenario = Scenario::new(Some(devices));
    for n in 0..64 {
        scenario.claim(0, 10_000 + n, "100M");
    }
    let nvml = scenario.nvml();
    let gpu = nvml.device_by_index(0).unwrap();
    let time = |what: &str, f: &dyn Fn()| {
        let start = Instant::now();
        for _ in 0..1000 {
            f();
        }
        eprintln!("{what}: {:?}", start.elapsed() / 1000);
    };
    time("device_count", &|| {
        nvml.device_count().unwrap();
    });
    time("memory_info (64 procs)", &|| {
        gpu.memory_info().unwrap();
    });
    time("compute list (64 procs)", &|| {
        gpu.running_compute_processes().unwrap();
    });
}

#[test]
#[ignore = "a measurement; run it explicitly"]
fn parsing_alone() {
    let devices: String = (0..8)
        .map(|i| format!("[[gpu]]\nuuid = \"GPU-{i:08x}-1111-2222-3333-444444444444\"\nname = \"NVIDIA H100 80GB HBM3\"\ntotal = \"80G\"\nreserved = \"512M\"\n"))
        .collect();
    let claims: Vec<String> = (0..8 * 64)
        .map(|n| {
            if n % 8 == 0 {
                format!("{n}M\ngraphics\n")
            } else {
                format!("{n}G\n")
            }
        })
        .collect();
    let rounds = 1000;
    let start = Instant::now();
    for _ in 0..rounds {
        nvidia_ml::scenario::parse_devices(&devices).unwrap();
    }
    let devices_cost = start.elapsed() / rounds;
    let start = Instant::now();
    for _ in 0..rounds {
        for (pid, text) in claims.iter().enumerate() {
            nvidia_ml::claims::parse_claim(pid as u32 + 1, text).unwrap();
        }
    }
    let claims_cost = start.elapsed() / rounds;
    eprintln!("parse devices.toml (8 GPUs, done once per change): {devices_cost:?}; parse 512 claim files: {claims_cost:?}");
}
