//! `gpu-mem-quota check-config [PATH] [--explain ...]`: validates the admin policy, and explains the
//! quota, cap and actions one identity would get, and which rule supplied each.

use std::fmt::Write as _;
use std::path::Path;
use std::process::ExitCode;

use super::args::{Opt, Parsed, Spec};
use gmq_core::config::values::{after_max_name, format_duration, signal_name};
use gmq_core::config::{self, Config, RuleKind};
use gmq_core::preempt::{rank_of, JobPriority, RankKind};
use gmq_core::quota::{self, Effective, GpuSize, Identity, OverCap, QuotaFrom, Setting, Unchecked};
use gmq_core::size::{parse_size, ByteSize};

const USAGE: &str = "\
Usage: gpu-mem-quota check-config [PATH] [--print] [--slurm-conf PATH]
       gpu-mem-quota check-config [PATH] --explain [--user U] [--account A] [--partition P] [--qos Q]
                                  [--request SIZE] [--gpu-size SIZE]

Validates the GPU memory policy (default /etc/slurm/gpu-mem-quota.toml) and prints every error as
FILE:LINE:COLUMN: KEY: MESSAGE. Exit status 0 when valid, 1 when not, 2 on a usage error.

  --print          print the policy as the plugin reads it, every setting spelt out
  --slurm-conf PATH
                   also check slurm.conf, and the gres.conf and job_submit.lua next to it, against
                   the policy's [scheduling] shard_unit (docs/SCHEDULING.md); each mismatch as
                   FILE:LINE: MESSAGE
  --explain        show the quota, cap and overuse actions of a job of this identity, and the rule
                   that supplied each value
  --user U, --account A, --partition P, --qos Q
                   the job's identity; leave out what a login node would not know, to see what is
                   checked at submission and what only on the compute node
  --request SIZE   the job's --gpu-mem-quota (default: none, the job gets the default quota)
  --gpu-size SIZE  the GPU's memory, to resolve percents (default: [defaults] gpu_memory)
  -h, --help       this help
";

/// What to do, from the command line.
struct Options {
    path: String,
    print: bool,
    /// `--slurm-conf`: the site's slurm.conf to cross-check.
    slurm_conf: Option<String>,
    /// `--explain`: the job to explain.
    explain: Option<JobToExplain>,
}

struct JobToExplain {
    who: Identity,
    request: Option<ByteSize>,
    gpu_size: Option<ByteSize>,
}

pub(crate) const SPEC: Spec = Spec {
    command: "check-config",
    // Every option with a value but --slurm-conf describes the job to explain.
    options: &[
        Opt::value("slurm-conf"),
        Opt::value("user"),
        Opt::value("account"),
        Opt::value("partition"),
        Opt::value("qos"),
        Opt::value("request"),
        Opt::value("gpu-size"),
        Opt::flag("explain"),
        Opt::flag("print"),
    ],
    max_positional: 1,
    help: || USAGE.to_string(),
    error_shows_help: true,
};

pub(super) fn run(argv: Vec<String>) -> ExitCode {
    let options = match SPEC.parse_with(&argv, options) {
        Ok(options) => options,
        Err(status) => return status,
    };
    let path = options.path.as_str();
    let config = match config::load(Path::new(path)) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(1);
        }
    };
    // The policy is valid; the directories it names must also be usable on this machine.
    let here = std::fs::read_to_string(path)
        .map_err(|e| format!("{path}: {e}"))
        .and_then(|text| config::check_directories_here(&text, path).map_err(|e| e.to_string()));
    if let Err(message) = here {
        eprintln!("{message}");
        return ExitCode::from(1);
    }
    if let Some(slurm_conf) = &options.slurm_conf {
        match check_slurm_layout(path, &config, slurm_conf) {
            Ok(facts) => facts.iter().for_each(|fact| println!("{fact}")),
            Err(errors) => {
                errors.iter().for_each(|error| eprintln!("{error}"));
                return ExitCode::from(1);
            }
        }
    }
    if options.print {
        println!("{}", config::render(&config));
    }
    match options.explain {
        Some(job) => print!("{}", explain(path, &config, &job.who, job.request, job.gpu_size)),
        // After --print, the summary is a TOML comment: the output stays a valid policy.
        None if options.print => println!("# {path}: OK: {}", summary(&config)),
        None => println!("{path}: OK: {}", summary(&config)),
    }
    ExitCode::SUCCESS
}

/// `--slurm-conf`: slurm.conf and the gres.conf, job_submit.lua and cgroup.conf beside it (where
/// Slurm looks for them), against the policy, and the job isolation the watchdog relies on (G9). `Ok`: what the layout is; `Err`: every mismatch.
fn check_slurm_layout(
    policy_path: &str,
    config: &Config,
    slurm_conf: &str,
) -> Result<Vec<String>, Vec<String>> {
    let read = |path: &Path| std::fs::read_to_string(path);
    let slurm_text = read(Path::new(slurm_conf)).map_err(|e| vec![format!("{slurm_conf}: {e}")])?;
    let dir = Path::new(slurm_conf).parent().unwrap_or(Path::new("."));
    let beside = |name: &str| {
        let path = dir.join(name);
        read(&path).ok().map(|text| (path.display().to_string(), text))
    };
    let gres = beside("gres.conf");
    let lua = beside("job_submit.lua");
    let cgroup = beside("cgroup.conf");
    fn file(f: &(String, String)) -> crate::slurm_layout::ConfFile<'_> {
        crate::slurm_layout::ConfFile {
            path: f.0.as_str(),
            text: f.1.as_str(),
        }
    }
    let isolation = crate::slurm_layout::check_isolation(
        &crate::slurm_layout::ConfFile {
            path: slurm_conf,
            text: &slurm_text,
        },
        cgroup.as_ref().map(file).as_ref(),
    );
    let mut found = crate::slurm_layout::check(
        config.scheduling.shard_unit,
        config.gpu_memory,
        policy_path,
        &crate::slurm_layout::ConfFile {
            path: slurm_conf,
            text: &slurm_text,
        },
        gres.as_ref().map(file).as_ref(),
        lua.as_ref().map(file).as_ref(),
    );
    found.errors.extend(isolation.errors);
    found.facts.extend(isolation.facts);
    if found.errors.is_empty() {
        Ok(found.facts)
    } else {
        Err(found.errors)
    }
}

/// What the parsed command line asks for, or a usage error.
fn options(parsed: &Parsed) -> Result<Options, String> {
    let path = match parsed.positional.first() {
        None => config::DEFAULT_PATH.to_string(),
        Some(path) => path.clone(),
    };
    let explain = if parsed.flag("explain") {
        let size = |key: &str| {
            parsed
                .value(key)
                .map(|v| parse_size(v).map_err(|e| format!("invalid --{key} '{v}': {e}")))
                .transpose()
        };
        let name = |key: &str| parsed.value(key).map(String::from);
        Some(JobToExplain {
            who: Identity {
                user: name("user"),
                account: name("account"),
                partition: name("partition"),
                qos: name("qos"),
            },
            request: size("request")?,
            gpu_size: size("gpu-size")?,
        })
    } else if let Some(job_option) = SPEC
        .options
        .iter()
        .find(|o| o.long != "slurm-conf" && parsed.value(o.long).is_some())
    {
        return Err(format!("--{} needs --explain", job_option.long));
    } else {
        None
    };
    Ok(Options {
        path,
        print: parsed.flag("print"),
        slurm_conf: parsed.value("slurm-conf").map(String::from),
        explain,
    })
}

/// One line: how many rules, the cluster-wide settings, the action.
fn summary(config: &Config) -> String {
    let counts: Vec<String> = [
        RuleKind::User,
        RuleKind::Account,
        RuleKind::Qos,
        RuleKind::Partition,
    ]
    .into_iter()
    .map(|kind| {
        let n = config.rules(kind).map_or(0, |r| r.len());
        format!("{n} {}", kind.section())
    })
    .collect();
    let e = &config.enforcement;
    format!(
        "rules: {}; defaults: default {}, max {}; on overuse: {} (then {} after {} requeues)",
        counts.join(", "),
        config
            .defaults
            .default
            .map_or("none".to_string(), |d| d.to_string()),
        config.defaults.max.map_or("none".to_string(), |m| m.to_string()),
        e.action,
        e.escalation,
        e.max_requeues
    )
}

/// The `--explain` report.
fn explain(
    path: &str,
    config: &Config,
    who: &Identity,
    request: Option<ByteSize>,
    gpu_total: Option<ByteSize>,
) -> String {
    let mut out = String::new();
    let given = |v: &Option<String>| v.clone().unwrap_or_else(|| "(not given)".into());
    let _ = writeln!(out, "Policy:   {path} (valid)");
    let _ = writeln!(
        out,
        "Job:      user {}, account {}, partition {}, QOS {}",
        given(&who.user),
        given(&who.account),
        given(&who.partition),
        given(&who.qos)
    );
    let outcome = quota::resolve(config, who, request, gpu_total);
    let gpu = match &outcome {
        Ok(effective) => effective.gpu_size,
        Err(_) => gpu_total
            .map(GpuSize::Measured)
            .or(config.gpu_memory.map(GpuSize::Assumed)),
    };
    let _ = writeln!(
        out,
        "GPU size: {}",
        match gpu {
            Some(GpuSize::Measured(size)) => format!("{size} (--gpu-size)"),
            Some(GpuSize::Assumed(size)) =>
                format!("{size} (assumed: [defaults] gpu_memory; a compute node uses its GPU's real size)"),
            None => "not known (percents are resolved on the compute node)".to_string(),
        }
    );
    let _ = writeln!(out);
    match &outcome {
        Ok(effective) => write_effective(&mut out, effective, request),
        Err(refusal) => {
            let _ = writeln!(out, "Refused:  {refusal}");
            let _ = writeln!(
                out,
                "          (at submission when certain there, and always on the compute node)"
            );
        }
    }
    let _ = writeln!(out);
    write_why(&mut out, config, who, &outcome);
    if let Ok(effective) = &outcome {
        if !effective.is_final() {
            let _ = writeln!(
                out,
                "\nNot checked with what is given (the compute node, which knows all, decides):"
            );
            for item in &effective.unchecked {
                let _ = writeln!(out, "  - {item}");
            }
        }
    }
    let _ = writeln!(out);
    write_enforcement(&mut out, config, outcome.as_ref().ok().and_then(|e| e.quota));
    let _ = writeln!(out);
    write_job_settings(&mut out, config);
    let _ = writeln!(out);
    write_preemption(&mut out, config, who);
    out
}

fn write_effective(out: &mut String, effective: &Effective, request: Option<ByteSize>) {
    let quota = effective
        .quota
        .map_or_else(|| "none".to_string(), |q| q.to_string());
    let from = match &effective.quota_from {
        QuotaFrom::Request => "requested with --gpu-mem-quota".to_string(),
        QuotaFrom::Default { rule, written } => match effective.quota {
            Some(_) => format!("default \"{written}\" from {}", rule.table()),
            None if matches!(written, config::DefaultQuota::MonitorOnly) => {
                format!(
                    "default \"none\" from {}: monitored only, never acted on",
                    rule.table()
                )
            }
            None => format!(
                "default \"{written}\" from {}: resolved on the compute node",
                rule.table()
            ),
        },
        QuotaFrom::DefaultCapped { rule, written } => format!(
            "default \"{written}\" from {} is above the cap and is lowered to it",
            rule.table()
        ),
        QuotaFrom::NoDefault => "no rule sets a default: monitored only, never acted on".to_string(),
    };
    let _ = writeln!(out, "Quota per GPU: {quota}  <- {from}");
    let cap = match &effective.cap {
        Some(cap) => format!(
            "{}  <- max \"{}\" from {}",
            cap.size,
            cap.written,
            cap.rule.table()
        ),
        None if effective.unchecked.iter().any(|u| {
            matches!(
                u,
                Unchecked::Percent {
                    setting: Setting::Max,
                    ..
                }
            )
        }) =>
        {
            "a percent, resolved on the compute node".to_string()
        }
        None => "none (no rule sets max)".to_string(),
    };
    let _ = writeln!(out, "Cap:           {cap}");
    if let Some(request) = request {
        let _ = writeln!(out, "Request:       {request} accepted");
    }
}

/// The precedence table: for each kind, the rule that matches (if known) and its settings; the
/// rule that supplied each effective setting is marked.
fn write_why(out: &mut String, config: &Config, who: &Identity, outcome: &Result<Effective, OverCap>) {
    let _ = writeln!(
        out,
        "Why: each setting comes from the most specific rule that sets it,"
    );
    let _ = writeln!(out, "     user > account > QOS > partition > defaults:");
    let (default_from, max_from) = match outcome {
        Err(refusal) => (None, Some(refusal.cap.rule.kind)),
        Ok(e) => {
            let default_from = match &e.quota_from {
                QuotaFrom::Default { rule, .. } | QuotaFrom::DefaultCapped { rule, .. } => Some(rule.kind),
                QuotaFrom::Request | QuotaFrom::NoDefault => None,
            };
            let unresolved_max = e.unchecked.iter().find_map(|u| match u {
                Unchecked::Percent {
                    rule,
                    setting: Setting::Max,
                    ..
                } => Some(rule.kind),
                _ => None,
            });
            (
                default_from,
                e.cap.as_ref().map(|c| c.rule.kind).or(unresolved_max),
            )
        }
    };
    let _ = writeln!(out, "  {:<28} {:<10} max", "rule", "default");
    for kind in RuleKind::PRECEDENCE {
        let Some(name) = who.name(kind) else {
            let count = config.rules(kind).map_or(0, |r| r.len());
            let _ = writeln!(
                out,
                "  {:<28} {} not given ({count} {} rule{} in the policy)",
                format!("[{}.?]", kind.section()),
                kind.noun(),
                kind.section(),
                if count == 1 { "" } else { "s" }
            );
            continue;
        };
        let table = kind.table(name);
        let Some(rule) = config.rule(kind, name) else {
            let _ = writeln!(out, "  {table:<28} (no such rule)");
            continue;
        };
        let default = rule.default.map_or("-".to_string(), |d| d.to_string());
        let max = rule.max.map_or("-".to_string(), |m| m.to_string());
        let mut marks = Vec::new();
        if default_from == Some(kind) {
            marks.push("default");
        }
        if max_from == Some(kind) {
            marks.push("max");
        }
        let line = match marks.as_slice() {
            [] => format!("  {table:<28} {default:<10} {max}"),
            marks => format!("  {table:<28} {default:<10} {max:<8}  <- {}", marks.join(", ")),
        };
        let _ = writeln!(out, "{line}");
    }
}

fn write_enforcement(out: &mut String, config: &Config, quota: Option<ByteSize>) {
    let e = &config.enforcement;
    let percent = (e.warn_threshold * 10_000.0).round() / 100.0;
    let warn_at = quota.map_or(String::new(), |q| {
        let bytes = (q.bytes() as f64 * e.warn_threshold) as u64;
        format!(" = {}", ByteSize::from_bytes(bytes).floor_mib())
    });
    let rows = [
        ("sample every", format_duration(e.interval)),
        ("warn at", format!("{percent}% of the quota{warn_at}")),
        (
            "act after",
            format!("{} over the quota", format_duration(e.grace)),
        ),
        ("action", e.action.to_string()),
        (
            &*format!("after {} requeues", e.max_requeues),
            e.escalation.to_string(),
        ),
        ("if not requeueable", e.no_requeue_action.to_string()),
        (
            "failed near OOM",
            if e.requeue_near_oom {
                "requeued with near-OOM hints (requeue_near_oom)"
            } else {
                "left FAILED (requeue_near_oom = false)"
            }
            .to_string(),
        ),
        (
            "driver hard limit",
            if e.hard_limit {
                "set where the driver offers it, else the watchdog alone (hard_limit)"
            } else {
                "off: the watchdog alone enforces (hard_limit = false)"
            }
            .to_string(),
        ),
        ("NVML library", e.nvml_library.display().to_string()),
        ("runtime dir", e.runtime_dir.display().to_string()),
        ("state dir", e.state_dir.display().to_string()),
        ("if policy is broken", e.on_config_error.to_string()),
    ];
    let _ = writeln!(out, "On overuse (the same for every job):");
    for (what, value) in rows {
        let _ = writeln!(out, "  {what:<21} {value}");
    }
}

/// `[frameworks]`, `[hints]`, `[prediction]` and `[metrics]`: what a job with a quota gets besides
/// enforcement.
fn write_job_settings(out: &mut String, config: &Config) {
    let percent = |fraction: f64| (fraction * 10_000.0).round() / 100.0;
    let f = &config.frameworks.switches;
    let frameworks: Vec<&str> = [
        (
            f.pytorch && f.pytorch_memory_fraction,
            "PyTorch (with memory fraction)",
        ),
        (f.pytorch && !f.pytorch_memory_fraction, "PyTorch"),
        (f.jax, "JAX"),
        (f.tensorflow, "TensorFlow"),
        (f.mps, "MPS"),
    ]
    .into_iter()
    .filter_map(|(on, name)| on.then_some(name))
    .collect();
    let h = &config.hints;
    let p = &config.prediction;
    let rows = [
        (
            "framework caps",
            if frameworks.is_empty() {
                "none".to_string()
            } else {
                frameworks.join(", ")
            },
        ),
        ("context reserve", config.frameworks.context_reserve.to_string()),
        (
            "near-OOM",
            format!(
                "a peak within {}% of the quota or the GPU",
                percent(h.near_margin)
            ),
        ),
        (
            "hints aim",
            format!("{}% below the quota", percent(h.safety_margin)),
        ),
        (
            "fixed memory",
            h.fixed_memory.map_or("not known".to_string(), |s| s.to_string()),
        ),
        (
            "early warning",
            if p.enabled {
                format!(
                    "when the trend reaches the quota within {}, signal {}",
                    format_duration(p.horizon),
                    signal_name(p.signal)
                )
            } else {
                "off".to_string()
            },
        ),
        (
            "metrics dir",
            config
                .metrics
                .textfile_dir
                .as_ref()
                .map_or("none".to_string(), |d| d.display().to_string()),
        ),
    ];
    let _ = writeln!(out, "For a job with a quota (the same for every job):");
    for (what, value) in rows {
        let _ = writeln!(out, "  {what:<21} {value}");
    }
    if f.pytorch && f.pytorch_memory_fraction {
        let _ = writeln!(out, "  warning: {PYTORCH_FRACTION_WARNING}");
    }
}

/// `[frameworks] pytorch_memory_fraction = true` can break jobs: said wherever it is switched on.
const PYTORCH_FRACTION_WARNING: &str = "pytorch_memory_fraction is on: PYTORCH_ALLOC_CONF and \
PYTORCH_CUDA_ALLOC_CONF get per_process_memory_fraction, which PyTorch accepts only from 2.10; 2.9 and \
older refuse the whole setting (an unrecognized allocator option) and the job fails at its first CUDA \
allocation. Keep it off unless every job runs PyTorch 2.10 or newer.";

/// `[preemption]`: whether it is on, and this job's rank (the first of QOS, partition, account
/// that `[preemption.ranks]` names, else 0; Slurm's priority breaks ties on the node).
fn write_preemption(out: &mut String, config: &Config, who: &Identity) {
    let p = &config.preemption;
    let name = |kind: RankKind| match kind {
        RankKind::Qos => who.qos.as_deref(),
        RankKind::Partition => who.partition.as_deref(),
        RankKind::Account => who.account.as_deref(),
    };
    let job = JobPriority {
        qos: name(RankKind::Qos).unwrap_or_default().to_string(),
        partition: name(RankKind::Partition).unwrap_or_default().to_string(),
        account: name(RankKind::Account).unwrap_or_default().to_string(),
        slurm_priority: 0,
    };
    let rank = rank_of(&p.ranks, &job).value;
    // The kinds in the order rank_of consults them, up to the one that names the job.
    let mut source = None;
    let mut unknown = Vec::new();
    for kind in RankKind::ALL {
        match name(kind) {
            Some(n) if p.ranks.contains_key(&(kind, n.to_string())) => {
                source = Some((kind, n));
                break;
            }
            Some(_) => {}
            None if p.ranks.keys().any(|(k, _)| *k == kind) => unknown.push(kind.name()),
            None => {}
        }
    }
    let from = match source {
        Some((kind, n)) => format!("[preemption.ranks] {}.{}", kind.name(), config::toml_key(n)),
        None => "no rank names this job's QOS, partition or account".to_string(),
    };
    let after_max = match p.after_max {
        gmq_core::preempt::AfterMax::Hold => "held",
        gmq_core::preempt::AfterMax::LeaveAlone => "left alone",
    };
    let rows = [
        (
            "enabled",
            if p.enabled { "yes" } else { "no (enabled = false)" }.to_string(),
        ),
        ("this job's rank", format!("{rank}  <- {from}")),
        ("reserve", format!("{} of each GPU kept free", p.reserve)),
        (
            "cooldown",
            format!(
                "{} per GPU; {after_max} (\"{}\") after {} preemptions",
                format_duration(p.cooldown),
                after_max_name(p.after_max),
                p.max_preemptions_per_job
            ),
        ),
    ];
    let _ = writeln!(
        out,
        "Preemption on a shared GPU (lower rank goes first, ties by Slurm priority):"
    );
    for (what, value) in rows {
        let _ = writeln!(out, "  {what:<21} {value}");
    }
    if !unknown.is_empty() {
        let _ = writeln!(
            out,
            "  (the rank may differ: {} not given, and [preemption.ranks] names some)",
            unknown.join(", ")
        );
    }
}
