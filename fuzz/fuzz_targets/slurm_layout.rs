//! The Slurm config readers of `check-config --slurm-conf`: slurm.conf, cgroup.conf, gres.conf and
//! job_submit.lua (`slurm_layout::check`, `check_isolation`, `constrains_devices`). The input is
//! the four files' texts separated by NUL bytes; a missing one is a file the site does not have.
//!
//! Never panics. Every finding names one of the files (or the policy), and a line it cites is one
//! of that file's; `constrains_devices` agrees with the isolation check on cgroup.conf; a comment
//! line added at the end of each file changes no finding; the GPU memory given only changes what
//! is said of gres.conf.
#![no_main]

use gmq_commands::slurm_layout::{check, check_isolation, constrains_devices, ConfFile, Findings};
use gmq_core::size::ByteSize;
use libfuzzer_sys::fuzz_target;

const POLICY: &str = "/etc/slurm/gpu-mem-quota.toml";
const PATHS: [&str; 4] = ["slurm.conf", "cgroup.conf", "gres.conf", "job_submit.lua"];

fuzz_target!(|input: &str| {
    let mut texts = input.splitn(4, '\0');
    let files: [Option<&str>; 4] = std::array::from_fn(|_| texts.next());
    let slurm = files[0].unwrap_or("");
    let found = findings(
        slurm,
        files[1],
        files[2],
        files[3],
        Some(ByteSize::from_bytes(80 << 30)),
    );
    for finding in found.iter().flat_map(|f| f.errors.iter().chain(&f.facts)) {
        cites_a_line(finding, &files);
    }

    if let Some(cgroup) = files[1] {
        let isolation = &found[1];
        let refused = isolation.errors.iter().any(|e| e.starts_with("cgroup.conf"));
        assert_eq!(constrains_devices(cgroup), !refused, "{cgroup:?}: {isolation:?}");
    }

    // A comment at the end of each file says nothing.
    let commented: Vec<String> = files
        .iter()
        .map(|f| format!("{}\n# Gres=shard:1 ConstrainDevices=no\n", f.unwrap_or("")))
        .collect();
    let with = |i: usize| files[i].map(|_| commented[i].as_str());
    let again = findings(
        &commented[0],
        with(1),
        with(2),
        with(3),
        Some(ByteSize::from_bytes(80 << 30)),
    );
    assert_eq!(again, found, "{input:?}: a comment changed the findings");

    // Without the GPUs' memory, only gres.conf's findings change.
    let unknown = findings(slurm, files[1], files[2], files[3], None);
    assert_eq!(unknown[1], found[1]);
    let not_gres = |f: &Findings| -> Vec<String> {
        f.errors
            .iter()
            .chain(&f.facts)
            .filter(|m| !m.starts_with("gres.conf"))
            .cloned()
            .collect()
    };
    assert_eq!(not_gres(&unknown[0]), not_gres(&found[0]), "{input:?}");
});

/// `check`'s and `check_isolation`'s findings.
fn findings(
    slurm: &str,
    cgroup: Option<&str>,
    gres: Option<&str>,
    lua: Option<&str>,
    gpu_memory: Option<ByteSize>,
) -> [Findings; 2] {
    let file = |path, text| ConfFile { path, text };
    let slurm = file(PATHS[0], slurm);
    let (cgroup, gres, lua) = (
        cgroup.map(|t| file(PATHS[1], t)),
        gres.map(|t| file(PATHS[2], t)),
        lua.map(|t| file(PATHS[3], t)),
    );
    [
        check(
            Some(ByteSize::from_bytes(1 << 30)),
            gpu_memory,
            POLICY,
            &slurm,
            gres.as_ref(),
            lua.as_ref(),
        ),
        check_isolation(&slurm, cgroup.as_ref()),
    ]
}

/// A finding starts with the file it is about, and `path:N:` names a line of that file.
fn cites_a_line(finding: &str, files: &[Option<&str>; 4]) {
    let (path, rest) = finding
        .split_once(':')
        .unwrap_or_else(|| panic!("{finding:?} names no file"));
    let Some(at) = PATHS.iter().position(|p| *p == path) else {
        assert_eq!(path, POLICY, "{finding:?}");
        return;
    };
    if let Some((line, _)) = rest
        .split_once(':')
        .filter(|(n, _)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    {
        let text = files[at].unwrap_or_else(|| panic!("{finding:?} is about a file not given"));
        let line: usize = line.parse().expect("a line number");
        assert!(
            line >= 1 && line <= text.lines().count(),
            "{finding:?}: {text:?} has {} lines",
            text.lines().count()
        );
    }
}
