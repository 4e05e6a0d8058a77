//! A validated policy written back as TOML, every setting spelt out (built-in ones included):
//! what `check-config --print` shows, and what `parse` reads back to the same policy.

use std::fmt::Write as _;
use std::path::Path;

use super::error::toml_key;
use super::values::{after_max_name, format_duration, non_requeueable_name, signal_name};
use super::{Config, PreemptSettings, RankKind, Rule, RuleKind};

pub fn render(config: &Config) -> String {
    let mut out = String::from("[defaults]\n");
    write_rule(&mut out, &config.defaults);
    if let Some(size) = config.gpu_memory {
        let _ = writeln!(out, "gpu_memory = \"{size}\"");
    }
    for kind in [
        RuleKind::User,
        RuleKind::Account,
        RuleKind::Qos,
        RuleKind::Partition,
    ] {
        for (name, rule) in config.rules(kind).into_iter().flatten() {
            let _ = writeln!(out, "\n{}", kind.table(name));
            write_rule(&mut out, rule);
        }
    }
    let e = &config.enforcement;
    out.push_str("\n[enforcement]\n");
    let _ = writeln!(out, "interval = \"{}\"", format_duration(e.interval));
    let _ = writeln!(out, "warn_threshold = {:?}", e.warn_threshold);
    let _ = writeln!(out, "grace = \"{}\"", format_duration(e.grace));
    let _ = writeln!(out, "grace_over_share = {:?}", e.grace_over_share);
    let _ = writeln!(out, "action = \"{}\"", e.action);
    let _ = writeln!(out, "max_requeues = {}", e.max_requeues);
    let _ = writeln!(out, "escalation = \"{}\"", e.escalation);
    let _ = writeln!(out, "no_requeue_action = \"{}\"", e.no_requeue_action);
    let _ = writeln!(out, "requeue_near_oom = {}", e.requeue_near_oom);
    let _ = writeln!(out, "hard_limit = {}", e.hard_limit);
    let _ = writeln!(out, "kill_leftovers = {}", e.kill_leftovers);
    let _ = writeln!(out, "nvml_library = {}", quoted_path(&e.nvml_library));
    let _ = writeln!(out, "runtime_dir = {}", quoted_path(&e.runtime_dir));
    let _ = writeln!(out, "state_dir = {}", quoted_path(&e.state_dir));
    let _ = writeln!(out, "on_config_error = \"{}\"", e.on_config_error);

    let f = &config.frameworks;
    out.push_str("\n[frameworks]\n");
    let _ = writeln!(out, "pytorch = {}", f.switches.pytorch);
    let _ = writeln!(
        out,
        "pytorch_memory_fraction = {}",
        f.switches.pytorch_memory_fraction
    );
    let _ = writeln!(out, "jax = {}", f.switches.jax);
    let _ = writeln!(out, "tensorflow = {}", f.switches.tensorflow);
    let _ = writeln!(out, "mps = {}", f.switches.mps);
    let _ = writeln!(out, "context_reserve = \"{}\"", f.context_reserve);

    let h = &config.hints;
    out.push_str("\n[hints]\n");
    let _ = writeln!(out, "near_margin = {:?}", h.near_margin);
    let _ = writeln!(out, "safety_margin = {:?}", h.safety_margin);
    if let Some(size) = h.fixed_memory {
        let _ = writeln!(out, "fixed_memory = \"{size}\"");
    }

    let p = &config.prediction;
    out.push_str("\n[prediction]\n");
    let _ = writeln!(out, "enabled = {}", p.enabled);
    let _ = writeln!(out, "horizon = \"{}\"", format_duration(p.horizon));
    let _ = writeln!(out, "signal = \"{}\"", signal_name(p.signal));

    out.push_str("\n[metrics]\n");
    let dir = config.metrics.textfile_dir.as_deref();
    let _ = writeln!(
        out,
        "textfile_dir = {}",
        dir.map_or("\"none\"".to_string(), quoted_path)
    );
    out.push_str("\n[scheduling]\n");
    match config.scheduling.shard_unit {
        Some(unit) => {
            let _ = writeln!(out, "shard_unit = \"{unit}\"");
        }
        None => out.push_str("# shard_unit not set: shards are not GPU-memory units\n"),
    }
    write_preemption(&mut out, &config.preemption);
    out
}

fn write_preemption(out: &mut String, p: &PreemptSettings) {
    out.push_str("\n[preemption]\n");
    let _ = writeln!(out, "enabled = {}", p.enabled);
    let _ = writeln!(out, "reserve = \"{}\"", p.reserve);
    let _ = writeln!(out, "horizon = \"{}\"", format_duration(p.horizon));
    let _ = writeln!(out, "cooldown = \"{}\"", format_duration(p.cooldown));
    let _ = writeln!(out, "max_preemptions_per_job = {}", p.max_preemptions_per_job);
    let _ = writeln!(out, "after_max = \"{}\"", after_max_name(p.after_max));
    let _ = writeln!(
        out,
        "non_requeueable = \"{}\"",
        non_requeueable_name(p.non_requeueable)
    );
    let _ = writeln!(
        out,
        "heartbeat_timeout = \"{}\"",
        format_duration(p.heartbeat_timeout)
    );
    out.push_str("\n[preemption.ranks]\n");
    for kind in RankKind::ALL {
        let entries: Vec<String> = p
            .ranks
            .iter()
            .filter(|((k, _), _)| *k == kind)
            .map(|((_, name), rank)| format!("{} = {rank}", toml_key(name)))
            .collect();
        match entries.as_slice() {
            [] => {
                let _ = writeln!(out, "{} = {{}}", kind.name());
            }
            entries => {
                let _ = writeln!(out, "{} = {{ {} }}", kind.name(), entries.join(", "));
            }
        }
    }
}

fn write_rule(out: &mut String, rule: &Rule) {
    if let Some(default) = rule.default {
        let _ = writeln!(out, "default = \"{default}\"");
    }
    if let Some(max) = rule.max {
        let _ = writeln!(out, "max = \"{max}\"");
    }
}

fn quoted_path(path: &Path) -> String {
    toml::Value::String(path.display().to_string()).to_string()
}
