//! The plugin the lab runs fits the Slurm that loads it. Rust links with immediate binding, so one
//! symbol the loading Slurm lacks fails `dlopen` in every sbatch, srun and slurmstepd: every symbol
//! the plugin leaves undefined must be defined by that Slurm's libslurmfull (the SPANK API and the
//! logger, which slurmd, slurmstepd and the clients have loaded when they open a plugin) or, with its
//! version, by one of the libraries the plugin names (glibc, libgcc_s) in that Slurm's root.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::*;

/// `/` for this machine's Slurm, else the root the lab's Slurm runs in.
fn root() -> PathBuf {
    slurm_root().unwrap_or_else(|| PathBuf::from("/"))
}

fn under_root(path: &str) -> PathBuf {
    root().join(path.trim_start_matches('/'))
}

/// The plugin the lab's plugstack.conf loads (the build's in the lab, or the package's), as this
/// process reaches it.
fn plugin() -> PathBuf {
    let plugstack = std::fs::read_to_string(lab().join("etc/plugstack.conf")).unwrap();
    let path = plugstack
        .lines()
        .find_map(|l| l.strip_prefix("required "))
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no plugin in plugstack.conf: {plugstack}"));
    under_root(path)
}

/// `nm -D` of `file` with `flags`: (type letter, symbol with its version if any).
fn dynamic_symbols(file: &Path, flags: &[&str]) -> Vec<(String, String)> {
    let out = run_checked(Command::new("nm").arg("-D").args(flags).arg(file));
    out.lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace().rev();
            let name = words.next()?;
            let kind = words.next()?;
            // A default version is printed `@@`: to a reference it is the same `@`.
            Some((kind.to_string(), name.replace("@@", "@")))
        })
        .collect()
}

/// The shared libraries `file` names (DT_NEEDED).
fn needed(file: &Path) -> Vec<String> {
    let out = run_checked(Command::new("readelf").args(["-d", "--wide"]).arg(file));
    out.lines()
        .filter(|l| l.contains("(NEEDED)"))
        .filter_map(|l| Some(l.split_once('[')?.1.split_once(']')?.0.to_string()))
        .collect()
}

fn library_in_root(name: &str) -> PathBuf {
    [
        "/lib/x86_64-linux-gnu",
        "/usr/lib/x86_64-linux-gnu",
        "/lib64",
        "/usr/lib",
    ]
    .iter()
    .map(|dir| under_root(&format!("{dir}/{name}")))
    .find(|p| p.exists())
    .unwrap_or_else(|| panic!("the plugin needs {name}, which {} lacks", root().display()))
}

#[test]
#[ignore = "needs the dev cluster: slurm/dev-cluster test"]
fn every_symbol_the_plugin_needs_is_in_the_slurm_that_loads_it() {
    let plugin = plugin();
    let slurm = under_root("/usr/lib/x86_64-linux-gnu/slurm-wlm/libslurmfull.so");
    let mut defined: Vec<String> = dynamic_symbols(&slurm, &["--defined-only"])
        .into_iter()
        .map(|(_, name)| name)
        .collect();
    for lib in needed(&plugin) {
        defined.extend(
            dynamic_symbols(&library_in_root(&lib), &["--defined-only"])
                .into_iter()
                .map(|(_, name)| name),
        );
    }
    let undefined = dynamic_symbols(&plugin, &["--undefined-only"]);
    // Weak references (`w`) may stay unresolved; the loader leaves them null.
    let missing: Vec<&String> = undefined
        .iter()
        .filter(|(kind, _)| kind == "U")
        .map(|(_, name)| name)
        .filter(|name| !defined.contains(name))
        .collect();
    assert!(
        undefined.iter().any(|(_, n)| n == "spank_get_item"),
        "nm read no SPANK references from {}: {undefined:?}",
        plugin.display()
    );
    assert!(
        missing.is_empty(),
        "{} needs symbols that {} and its libraries do not define: {missing:?}",
        plugin.display(),
        slurm.display()
    );
}

/// slurmd refuses a plugin whose `plugin_version` differs from its own in major.minor: the one the
/// lab runs was built from this Slurm's headers.
#[test]
#[ignore = "needs the dev cluster: slurm/dev-cluster test"]
fn the_plugin_is_built_for_the_running_slurm() {
    let version = admin("scontrol", &["--version"]);
    // `slurm 22.05.8`; Debian 13's says `slurm-wlm 24.11.5`.
    let running: Vec<u32> = version
        .split_whitespace()
        .last()
        .unwrap_or_default()
        .split(['.', '-'])
        .take(3)
        .map(|n| {
            n.parse()
                .unwrap_or_else(|_| panic!("scontrol --version: {version}"))
        })
        .collect();
    let file = plugin();
    // plugin_version is a u32 in .rodata: at nm's address, through the LOAD segment holding it.
    let nm = run_checked(Command::new("nm").args(["-D", "--defined-only"]).arg(&file));
    let address = nm
        .lines()
        .find(|l| l.ends_with(" plugin_version"))
        .and_then(|l| u64::from_str_radix(l.split_whitespace().next()?, 16).ok())
        .expect("plugin_version exported");
    let offset = file_offset(&file, address);
    let plugin = std::fs::read(&file).unwrap();
    let built = u32::from_le_bytes(plugin[offset..offset + 4].try_into().unwrap());
    assert_eq!(
        (built >> 16, (built >> 8) & 0xff),
        (running[0], running[1]),
        "plugin_version {built:#x} against {version}"
    );
}

/// The file offset of virtual address `address`, from the program headers' LOAD segments.
fn file_offset(file: &Path, address: u64) -> usize {
    let out = run_checked(Command::new("readelf").args(["-l", "--wide"]).arg(file));
    for line in out.lines().filter(|l| l.trim_start().starts_with("LOAD")) {
        let words: Vec<&str> = line.split_whitespace().collect();
        let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap();
        let (offset, vaddr, filesz) = (hex(words[1]), hex(words[2]), hex(words[4]));
        if (vaddr..vaddr + filesz).contains(&address) {
            return (address - vaddr + offset) as usize;
        }
    }
    panic!("address {address:#x} is in no LOAD segment of {}", file.display());
}
