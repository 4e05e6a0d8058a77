//! What reading the policy costs the plugin on every job step. Not a pass/fail test (speed targets
//! never go in unit tests); run it to get the figure:
//!
//!     cargo test --release -p gmq-core --test integration config_cost -- --ignored --nocapture

use std::hint::black_box;
use std::time::Instant;

use gmq_core::config;
use gmq_core::quota::{resolve, Identity};
use gmq_core::size::parse_size;

const EXAMPLE: &str = "../../etc/gpu-mem-quota.toml";
const ROUNDS: u32 = 20_000;

fn micros_per_round(mut round: impl FnMut()) -> f64 {
    for _ in 0..ROUNDS / 10 {
        round(); // warm the caches and the allocator
    }
    let start = Instant::now();
    for _ in 0..ROUNDS {
        round();
    }
    start.elapsed().as_secs_f64() * 1e6 / f64::from(ROUNDS)
}

#[test]
#[ignore = "a measurement, not a test: run with --ignored --nocapture"]
fn cost_of_reading_and_resolving_the_policy_per_step() {
    let who = Identity {
        user: Some("gmq-user".into()),
        account: Some("physics".into()),
        partition: Some("gpu".into()),
        qos: Some("normal".into()),
    };
    let gpu = Some(parse_size("81559M").unwrap());
    let request = Some(parse_size("30G").unwrap());
    let text = std::fs::read_to_string(EXAMPLE).unwrap();

    let parse_resolve = micros_per_round(|| {
        let config = config::parse(black_box(&text), EXAMPLE).unwrap();
        black_box(resolve(&config, &who, request, gpu).unwrap());
    });
    let read_parse_resolve = micros_per_round(|| {
        let config = config::load(black_box(EXAMPLE.as_ref())).unwrap();
        black_box(resolve(&config, &who, request, gpu).unwrap());
    });
    let config = config::parse(&text, EXAMPLE).unwrap();
    let resolve_only = micros_per_round(|| {
        black_box(resolve(black_box(&config), &who, request, gpu).unwrap());
    });
    println!(
        "{EXAMPLE} ({} bytes), {ROUNDS} rounds: parse+resolve {parse_resolve:.1} µs, \
         read+parse+resolve {read_parse_resolve:.1} µs, resolve alone {resolve_only:.2} µs",
        text.len()
    );
}
