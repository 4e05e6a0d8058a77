//! slurm/job_submit.lua's decisions (slurm/job_submit_test.lua), run with the Lua that Debian's
//! job_submit_lua.so links (5.1). The end-to-end proof is tests/e2e/shards.rs, on slurmctld.

use std::process::Command;

const LUA: &str = "/usr/bin/lua5.1";

#[test]
fn the_translation_rules_hold() {
    if !std::path::Path::new(LUA).exists() {
        // Skipped, but never where the run requires it (`GMQ_REQUIRE_LUA`, set by
        // `slurm/dev-cluster test`, which installs lua5.1).
        assert!(
            std::env::var_os("GMQ_REQUIRE_LUA").is_none(),
            "{LUA} is not installed, and this run requires it"
        );
        eprintln!("{LUA} not installed: skipping slurm/job_submit_test.lua");
        return;
    }
    let out = Command::new(LUA)
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../slurm/job_submit_test.lua"
        ))
        .output()
        .expect("run lua5.1");
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("all checks passed"));
}
