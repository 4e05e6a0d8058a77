//! Which (node, run) entries the `*` summary holds, and the counts each brought: what makes
//! folding exact when its writers keep writing (review K4).
//!
//! Without it the summary is a bare sum: a node whose folded entry another writer had dropped
//! from the text cannot tell that it is already counted, writes its entry again, and the next
//! writer that runs out of room folds it again and adds its counts a second time. With it, an
//! entry is folded once: a writer finds its key here ([`super::Record::holds`]), and one whose
//! counts grew takes its entry back out (the summary less what it brought) before writing it.
//!
//! Text: one field `f<RUN>` per run in the summary item, which readers of earlier releases of
//! format 1 skip as an unknown field (the summary's sums stay right for them):
//! `f0=gpu001*026:gpu030@1/gpu031@2.1.1.1` is nodes gpu001 to gpu026 and gpu030 with one warning
//! each, gpu031 with two warnings, one over_quota, one requeue and the restart it caused. Nodes with the same counts are
//! listed together, numbered names in ranges; the counts are positional ([`ORDER`]), trailing
//! zeros left out. Grammar in docs/ACCOUNTING.md.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::atoms::{decode, encode, number};
use super::error::bad_item;
use super::{EventCounts, EventKind, Facts, RecordError};

/// The most node-runs a summary may list: far more than Slurm's nodes in one job, and a bound on
/// what a range in a hand-edited text expands to.
const MAX_LISTED: usize = 1 << 16;

/// The summed fields of one folded entry.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Counts {
    pub(crate) events: EventCounts,
    pub(crate) restarts: u32,
    pub(crate) over_warn_secs: u64,
}

impl Counts {
    pub(crate) fn of(facts: &Facts) -> Counts {
        Counts {
            events: facts.events,
            restarts: facts.restarts,
            over_warn_secs: facts.over_warn_secs,
        }
    }

    /// Whether every count is at least `other`'s.
    pub(crate) fn covers(&self, other: &Counts) -> bool {
        self.events.max(&other.events) == self.events
            && self.restarts >= other.restarts
            && self.over_warn_secs >= other.over_warn_secs
    }

    pub(crate) fn max(&self, other: &Counts) -> Counts {
        Counts {
            events: self.events.max(&other.events),
            restarts: self.restarts.max(other.restarts),
            over_warn_secs: self.over_warn_secs.max(other.over_warn_secs),
        }
    }

    /// The counts in their order after `@` ([`ORDER`]).
    fn values(&self) -> [u64; ORDER.len()] {
        ORDER.map(|slot| match slot {
            Slot::Event(kind) => u64::from(self.events.get(kind)),
            Slot::Restarts => u64::from(self.restarts),
            Slot::OverWarnSecs => self.over_warn_secs,
        })
    }

    fn render(&self) -> String {
        let values = self.values();
        let used = values.iter().rposition(|&n| n > 0).map_or(0, |at| at + 1);
        values[..used]
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(".")
    }

    fn parse(item: &str, text: &str) -> Result<Counts, RecordError> {
        let mut counts = Counts::default();
        if text.is_empty() {
            return Ok(counts);
        }
        let values: Vec<&str> = text.split('.').collect();
        if values.len() > ORDER.len() {
            return Err(bad_item(item, "a folded node has too many counts"));
        }
        for (slot, value) in ORDER.iter().zip(values) {
            let n =
                number(value).ok_or_else(|| bad_item(item, "a folded node's count is not a whole number"))?;
            let small = || u32::try_from(n).map_err(|_| bad_item(item, "a counter is too large"));
            match *slot {
                Slot::Event(kind) => counts.events.set(kind, small()?),
                Slot::Restarts => counts.restarts = small()?,
                Slot::OverWarnSecs => counts.over_warn_secs = n,
            }
        }
        Ok(counts)
    }
}

/// One count of a folded node.
#[derive(Clone, Copy)]
enum Slot {
    Event(EventKind),
    Restarts,
    OverWarnSecs,
}

/// The order of the counts after `@`, the most common first, so that trailing zeros go: `warn`,
/// `over_quota`, `requeued`, `restarts`, `held`, `cancelled`, `preempted`, `oom`, `node_fail`, `ws`.
const ORDER: [Slot; 10] = [
    Slot::Event(EventKind::Warn),
    Slot::Event(EventKind::OverQuota),
    Slot::Event(EventKind::Requeued),
    Slot::Restarts,
    Slot::Event(EventKind::Held),
    Slot::Event(EventKind::Cancelled),
    Slot::Event(EventKind::Preempted),
    Slot::Event(EventKind::Oom),
    Slot::Event(EventKind::NodeFail),
    Slot::OverWarnSecs,
];

impl Facts {
    /// Adds the counts of another node or run (folding).
    pub(super) fn add_counts(&mut self, counts: &Counts) {
        self.events = self.events.sum(&counts.events);
        self.restarts = self.restarts.saturating_add(counts.restarts);
        self.over_warn_secs = self.over_warn_secs.saturating_add(counts.over_warn_secs);
    }

    /// Takes back what [`Facts::add_counts`] added (unfolding).
    pub(super) fn sub_counts(&mut self, counts: &Counts) {
        for (kind, n) in counts.events.iter() {
            self.events.set(kind, self.events.get(kind).saturating_sub(n));
        }
        self.restarts = self.restarts.saturating_sub(counts.restarts);
        self.over_warn_secs = self.over_warn_secs.saturating_sub(counts.over_warn_secs);
    }
}

/// (run, node) of every listed entry, with its counts.
pub(super) type Ledger = BTreeMap<(u32, String), Counts>;

/// The `f<RUN>` fields of a summary, in order of run.
pub(super) fn render(ledger: &Ledger) -> Vec<String> {
    let mut runs: BTreeMap<u32, BTreeMap<String, Vec<&str>>> = BTreeMap::new();
    for ((run, node), counts) in ledger {
        runs.entry(*run)
            .or_default()
            .entry(counts.render())
            .or_default()
            .push(node);
    }
    runs.into_iter()
        .map(|(run, groups)| {
            let groups: Vec<String> = groups
                .into_iter()
                .map(|(counts, nodes)| format!("{}@{counts}", hosts_text(nodes)))
                .collect();
            format!("f{run}={}", groups.join("/"))
        })
        .collect()
}

/// Reads one `f<RUN>` field into `ledger`. `Ok(false)`: not such a field.
pub(super) fn parse_field(
    item: &str,
    key: &str,
    value: &str,
    ledger: &mut Ledger,
) -> Result<bool, RecordError> {
    let Some(run) = key.strip_prefix('f') else {
        return Ok(false);
    };
    let Some(run) = number(run).and_then(|n| u32::try_from(n).ok()) else {
        return Ok(false);
    };
    for group in value.split('/') {
        let Some((hosts, counts)) = group.rsplit_once('@') else {
            return Err(bad_item(item, "a folded group is not NODES@COUNTS"));
        };
        let counts = Counts::parse(item, counts)?;
        for host in hosts.split(':') {
            for node in expand(item, host)? {
                if ledger.len() >= MAX_LISTED {
                    return Err(bad_item(item, "too many folded nodes listed"));
                }
                if ledger.insert((run, node), counts).is_some() {
                    return Err(bad_item(item, "a folded node is listed twice"));
                }
            }
        }
    }
    Ok(true)
}

/// A name split into the part before its trailing digits and those digits.
fn split_number(name: &str) -> (&str, &str) {
    let digits = name.bytes().rev().take_while(u8::is_ascii_digit).count();
    let cut = name.len() - digits;
    (&name[..cut], &name[cut..])
}

/// Numbered names with one prefix and one width in ranges `PREFIX<FIRST>*<LAST>`, the others as
/// they are; `:` between them.
fn hosts_text(mut nodes: Vec<&str>) -> String {
    let sort_key = |n: &&str| {
        let (prefix, digits) = split_number(n);
        (
            prefix.to_string(),
            digits.len(),
            digits.parse::<u64>().ok(),
            n.to_string(),
        )
    };
    nodes.sort_by_key(sort_key);
    let mut out: Vec<String> = Vec::new();
    let mut at = 0;
    while at < nodes.len() {
        let (prefix, digits) = split_number(nodes[at]);
        let start = (!digits.is_empty() && digits.len() <= 18)
            .then(|| digits.parse::<u64>().ok())
            .flatten();
        let mut end = at;
        if let Some(first) = start {
            while let Some(next) = nodes.get(end + 1) {
                let (p, d) = split_number(next);
                if p == prefix
                    && d.len() == digits.len()
                    && d.parse::<u64>().ok() == Some(first + (end + 1 - at) as u64)
                {
                    end += 1;
                } else {
                    break;
                }
            }
        }
        let mut text = encode(nodes[at]);
        if end > at {
            let _ = write!(text, "*{}", split_number(nodes[end]).1);
        }
        out.push(text);
        at = end + 1;
    }
    out.join(":")
}

/// The names one host item stands for.
fn expand(item: &str, host: &str) -> Result<Vec<String>, RecordError> {
    let bad = || bad_item(item, "a folded node name is badly written");
    let Some((first, last)) = host.split_once('*') else {
        return Ok(vec![decode(host).ok_or_else(bad)?]);
    };
    // The numbers have the width of the last one: the prefix, percent-encoded, may itself end in
    // digits (`x%201*3` is `x 1` to `x 3`).
    let width = last.len();
    let cut = first.len().checked_sub(width).ok_or_else(bad)?;
    if width == 0 || width > 18 || !first.is_char_boundary(cut) {
        return Err(bad());
    }
    let (prefix, digits) = first.split_at(cut);
    let (Some(from), Some(to)) = (number(digits), number(last)) else {
        return Err(bad());
    };
    if from >= to || to - from >= MAX_LISTED as u64 {
        return Err(bad());
    }
    let prefix = decode(prefix).ok_or_else(bad)?;
    if prefix.ends_with(|c: char| c.is_ascii_digit()) {
        // Not how it is written: the number takes every digit at the end of the name.
        return Err(bad());
    }
    Ok((from..=to).map(|n| format!("{prefix}{n:0width$}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(warn: u32, requeued: u32) -> Counts {
        let mut c = Counts::default();
        c.events.set(EventKind::Warn, warn);
        c.events.set(EventKind::Requeued, requeued);
        c.restarts = requeued;
        c
    }

    #[test]
    fn numbered_nodes_with_the_same_counts_take_a_few_bytes() {
        let mut ledger = Ledger::new();
        for n in 1..=26 {
            ledger.insert((0, format!("gpu{n:03}")), counts(1, 0));
        }
        ledger.insert((0, "gpu030".into()), counts(1, 0));
        ledger.insert((0, "gpu031".into()), counts(2, 1));
        ledger.insert((0, "login.x y".into()), counts(0, 0));
        ledger.insert((1, "n9".into()), counts(0, 0));
        for n in 1..=3 {
            ledger.insert((2, format!("x {n}")), counts(0, 0));
            ledger.insert((2, format!("%{n:02}")), counts(1, 0));
        }
        ledger.insert((1, "n10".into()), counts(0, 0));
        let fields = render(&ledger);
        assert_eq!(
            fields,
            [
                "f0=login.x%20y@/gpu001*026:gpu030@1/gpu031@2.0.1.1",
                "f1=n9:n10@",
                "f2=x%201*3@/%2501*03@1"
            ]
        );
        let mut back = Ledger::new();
        for field in &fields {
            let (key, value) = field.split_once('=').unwrap();
            assert!(parse_field("x", key, value, &mut back).unwrap());
        }
        assert_eq!(back, ledger);
    }

    #[test]
    fn any_names_and_counts_read_back() {
        let mut seed = 1u64;
        let mut next = || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            seed >> 33
        };
        let alphabet: Vec<char> = "ab0123456789 %*@/:.-_é".chars().collect();
        for _ in 0..500 {
            let mut ledger = Ledger::new();
            for _ in 0..next() % 40 {
                let len = 1 + next() % 6;
                let name: String = (0..len)
                    .map(|_| alphabet[next() as usize % alphabet.len()])
                    .collect();
                let mut c = counts((next() % 3) as u32, (next() % 2) as u32);
                c.over_warn_secs = next() % 2 * next();
                ledger.insert(((next() % 3) as u32, name), c);
            }
            let mut back = Ledger::new();
            for field in render(&ledger) {
                let (key, value) = field.split_once('=').unwrap();
                assert!(parse_field("x", key, value, &mut back).unwrap(), "{field}");
            }
            assert_eq!(back, ledger);
        }
    }

    #[test]
    fn bad_lists_are_errors() {
        for value in [
            "gpu001*026",
            "gpu001*26@1",
            "gpu026*001@1",
            "gpu*010@1",
            "gpu1*010@1",
            "*1@1",
            "a*@1",
            "n0*99999999@",
            "a@1/a@2",
            "a%zz@",
            "a@1.x",
            "a@1.1.1.1.1.1.1.1.1.1.1",
            "a@1.0.0.99999999999",
            "a@99999999999",
        ] {
            let mut ledger = Ledger::new();
            assert!(parse_field("x", "f0", value, &mut ledger).is_err(), "{value}");
        }
        let mut ledger = Ledger::new();
        assert!(!parse_field("x", "ws", "1", &mut ledger).unwrap());
        assert!(!parse_field("x", "fx", "1", &mut ledger).unwrap());
    }
}
