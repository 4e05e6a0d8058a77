//! The effective quota of a job: its request or the default, checked against the cap, both taken
//! from the most specific rule that sets them (see [`RuleKind::PRECEDENCE`]).
//!
//! The same pure function serves both places that decide. On the submit host some of the identity
//! (account, partition, QOS) and the GPU size may be unknown: whatever could not be checked is
//! listed in [`Effective::unchecked`], a job is refused only when the refusal is certain, and the
//! node, which knows everything, decides for good.

use std::fmt;

use crate::config::{Amount, Config, DefaultQuota, Percent, Rule, RuleKind};
use crate::request::QUOTA_OPTION;
use crate::size::ByteSize;

/// Who runs the job. `None`: not known here.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Identity {
    pub user: Option<String>,
    pub account: Option<String>,
    pub partition: Option<String>,
    pub qos: Option<String>,
}

impl Identity {
    /// A job's identity: its user (from the job credential's uid), and the account, partition and
    /// QOS as Slurm names them (slurmd's variables, slurmctld's record or the facts the watchdog
    /// kept from it), where an empty name is one Slurm does not know.
    pub fn named(user: &str, account: &str, partition: &str, qos: &str) -> Identity {
        let known = |s: &str| (!s.is_empty()).then(|| s.to_string());
        Identity {
            user: Some(user.to_string()),
            account: known(account),
            partition: known(partition),
            qos: known(qos),
        }
    }

    /// The job's name of this kind, `None` when not known here; `Some("")` for
    /// [`RuleKind::Defaults`], which covers everyone.
    pub fn name(&self, kind: RuleKind) -> Option<&str> {
        match kind {
            RuleKind::User => self.user.as_deref(),
            RuleKind::Account => self.account.as_deref(),
            RuleKind::Qos => self.qos.as_deref(),
            RuleKind::Partition => self.partition.as_deref(),
            RuleKind::Defaults => Some(""),
        }
    }
}

/// A rule of the policy: `[account.physics]`, or `[defaults]` (with an empty name).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleRef {
    pub kind: RuleKind,
    pub(crate) name: String,
}

impl RuleRef {
    /// The rule's table as written in the file: `[account.physics]`, `[defaults]`.
    pub fn table(&self) -> String {
        self.kind.table(&self.name)
    }
}

/// `account 'physics'`, `QOS 'low'`, `this cluster`.
impl fmt::Display for RuleRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            RuleKind::Defaults => write!(f, "this cluster"),
            kind => write!(f, "{} '{}'", kind.noun(), self.name.escape_debug()),
        }
    }
}

/// The two settings a rule may have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Setting {
    Default,
    Max,
}

impl Setting {
    pub(crate) const fn key(self) -> &'static str {
        match self {
            Setting::Default => "default",
            Setting::Max => "max",
        }
    }
}

/// Where the job's quota came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QuotaFrom {
    /// `--gpu-mem-quota`.
    Request,
    /// The default of this rule.
    Default { rule: RuleRef, written: DefaultQuota },
    /// The default of this rule was larger than the cap (set by another rule); the cap is used.
    DefaultCapped { rule: RuleRef, written: DefaultQuota },
    /// No rule sets a default: the job is monitored only.
    NoDefault,
}

/// The largest quota the job may ask for, and the rule it comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cap {
    pub size: ByteSize,
    pub rule: RuleRef,
    pub written: Amount,
}

/// The GPU size percents were resolved against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GpuSize {
    /// The node's real GPU size.
    Measured(ByteSize),
    /// `[defaults] gpu_memory`, used where the real size is not known.
    Assumed(ByteSize),
}

impl GpuSize {
    pub(crate) const fn size(self) -> ByteSize {
        match self {
            GpuSize::Measured(size) | GpuSize::Assumed(size) => size,
        }
    }
}

/// Something the decision could not take into account here; the node decides it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unchecked {
    /// Some rule of this kind sets `setting`, but the job's name of that kind is not known here,
    /// so it might override what was found below it.
    Identity { kind: RuleKind, setting: Setting },
    /// This rule's setting is a percent and the GPU size is not known here.
    Percent {
        rule: RuleRef,
        setting: Setting,
        percent: Percent,
    },
}

impl fmt::Display for Unchecked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unchecked::Identity { kind, setting } => write!(
                f,
                "the {} is not known here and some {} rules set '{}'",
                kind.noun(),
                kind.section(),
                setting.key()
            ),
            Unchecked::Percent {
                rule,
                setting,
                percent,
            } => write!(
                f,
                "{} {} = \"{percent}\" needs the GPU's size, which is not known here",
                rule.table(),
                setting.key()
            ),
        }
    }
}

/// The outcome for a job that may run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Effective {
    /// The quota on each GPU the job uses. `None`: monitor only, or not decidable here when
    /// `unchecked` says why.
    pub quota: Option<ByteSize>,
    pub quota_from: QuotaFrom,
    /// The cap the request was checked against (`None`: no rule sets one, or it could not be
    /// resolved here).
    pub cap: Option<Cap>,
    /// The GPU size percents were resolved against, if any was known.
    pub gpu_size: Option<GpuSize>,
    /// What could not be checked here; empty where everything was known (the node).
    pub unchecked: Vec<Unchecked>,
}

impl Effective {
    /// Whether this is the final word: nothing was left unchecked.
    pub fn is_final(&self) -> bool {
        self.unchecked.is_empty()
    }
}

/// A request above the cap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OverCap {
    pub(crate) request: ByteSize,
    pub cap: Cap,
}

/// `--gpu-mem-quota=60G exceeds the 40G cap for account 'physics'`.
impl fmt::Display for OverCap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "--{QUOTA_OPTION}={} exceeds the {} cap for {}",
            self.request, self.cap.size, self.cap.rule
        )?;
        if self.cap.rule.kind == RuleKind::Defaults {
            write!(f, " (defaults.max)")?;
        }
        Ok(())
    }
}

impl std::error::Error for OverCap {}

/// The effective quota for a job of `who` asking for `request` (`None`: asked for nothing) on a
/// GPU of `gpu_total` bytes (`None`: not known here; `[defaults] gpu_memory` stands in for it).
///
/// Each setting is resolved on its own: the cap from the most specific rule that sets `max`,
/// the default from the most specific rule that sets `default`. A request above the cap is
/// refused only when the cap is certain. A default above the cap is lowered to the cap: a job is
/// never refused for what it did not ask for.
pub fn resolve(
    config: &Config,
    who: &Identity,
    request: Option<ByteSize>,
    gpu_total: Option<ByteSize>,
) -> Result<Effective, OverCap> {
    let gpu_size = gpu_total
        .map(GpuSize::Measured)
        .or(config.gpu_memory.map(GpuSize::Assumed));
    let gpu_bytes = gpu_size.map(GpuSize::size);
    let mut unchecked = Vec::new();

    let max = pick(config, who, Setting::Max, |rule| rule.max, &mut unchecked);
    let cap = max
        .found
        .and_then(|(rule, written)| match written.resolve(gpu_bytes) {
            Some(size) => Some(Cap { size, rule, written }),
            None => {
                if let Amount::Percent(percent) = written {
                    unchecked.push(Unchecked::Percent {
                        rule,
                        setting: Setting::Max,
                        percent,
                    });
                }
                None
            }
        });

    let (quota, quota_from) = match request {
        Some(request) => {
            if let Some(cap) = cap.as_ref().filter(|cap| request > cap.size && max.certain) {
                return Err(OverCap {
                    request,
                    cap: cap.clone(),
                });
            }
            (Some(request), QuotaFrom::Request)
        }
        None => {
            let default = pick(config, who, Setting::Default, |rule| rule.default, &mut unchecked);
            default_quota(default.found, cap.as_ref(), gpu_bytes, &mut unchecked)
        }
    };
    Ok(Effective {
        quota,
        quota_from,
        cap,
        gpu_size,
        unchecked,
    })
}

fn default_quota(
    found: Option<(RuleRef, DefaultQuota)>,
    cap: Option<&Cap>,
    gpu_bytes: Option<ByteSize>,
    unchecked: &mut Vec<Unchecked>,
) -> (Option<ByteSize>, QuotaFrom) {
    let Some((rule, written)) = found else {
        return (None, QuotaFrom::NoDefault);
    };
    let amount = match written {
        DefaultQuota::MonitorOnly => return (None, QuotaFrom::Default { rule, written }),
        DefaultQuota::Amount(amount) => amount,
    };
    let Some(size) = amount.resolve(gpu_bytes) else {
        if let Amount::Percent(percent) = amount {
            unchecked.push(Unchecked::Percent {
                rule: rule.clone(),
                setting: Setting::Default,
                percent,
            });
        }
        return (None, QuotaFrom::Default { rule, written });
    };
    match cap {
        Some(cap) if size > cap.size => (Some(cap.size), QuotaFrom::DefaultCapped { rule, written }),
        _ => (Some(size), QuotaFrom::Default { rule, written }),
    }
}

/// The smallest cap that may apply to a job of `who` whose unknown names could be any: the cap of
/// the most specific known rule that sets `max`, and every `max` of the rules of unknown kinds
/// more specific than it. What the node enforces when slurmctld cannot tell it the job's account,
/// partition or QOS: an unknown identity never widens a cap. Percents unresolvable without the GPU
/// size are left out.
pub(crate) fn strictest_cap(config: &Config, who: &Identity, gpu_total: Option<ByteSize>) -> Option<Cap> {
    let gpu_bytes = gpu_total.or(config.gpu_memory);
    let mut candidates: Vec<Cap> = Vec::new();
    let mut consider = |kind: RuleKind, name: &str, rule: &Rule| {
        if let Some(written) = rule.max {
            if let Some(size) = written.resolve(gpu_bytes) {
                let rule = RuleRef {
                    kind,
                    name: name.to_string(),
                };
                candidates.push(Cap { size, rule, written });
            }
        }
    };
    for kind in RuleKind::PRECEDENCE {
        match who.name(kind) {
            Some(name) => {
                if let Some(rule) = config.rule(kind, name).filter(|r| r.max.is_some()) {
                    consider(kind, name, rule);
                    break;
                }
            }
            None => {
                for (name, rule) in config.rules(kind).into_iter().flatten() {
                    consider(kind, name, rule);
                }
            }
        }
    }
    candidates.into_iter().min_by_key(|cap| cap.size)
}

/// The outcome of walking the precedence list for one setting.
struct Picked<T> {
    /// The most specific known rule that sets it.
    found: Option<(RuleRef, T)>,
    /// No rule above `found` could override it: every more specific name was known.
    certain: bool,
}

fn pick<T>(
    config: &Config,
    who: &Identity,
    setting: Setting,
    get: impl Fn(&Rule) -> Option<T>,
    unchecked: &mut Vec<Unchecked>,
) -> Picked<T> {
    let mut certain = true;
    for kind in RuleKind::PRECEDENCE {
        match who.name(kind) {
            Some(name) => {
                if let Some(value) = config.rule(kind, name).and_then(&get) {
                    let rule = RuleRef {
                        kind,
                        name: name.to_string(),
                    };
                    return Picked {
                        found: Some((rule, value)),
                        certain,
                    };
                }
            }
            None => {
                let rules = config.rules(kind).into_iter().flat_map(|r| r.values());
                if rules.into_iter().any(|rule| get(rule).is_some()) {
                    certain = false;
                    unchecked.push(Unchecked::Identity { kind, setting });
                }
            }
        }
    }
    Picked { found: None, certain }
}
