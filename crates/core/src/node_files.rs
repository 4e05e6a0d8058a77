//! The runtime directory's layout and the formats of its files, as the plugin and the watchdog
//! agree on them (gmq-node's `runtime` makes the directories and does the I/O; its module doc
//! draws the tree). Pure.

use std::path::{Path, PathBuf};

pub const STATUS_FILE: &str = "status.json";
pub const LOCK_FILE: &str = "watchdog.lock";
pub const PID_FILE: &str = "watchdog.pid";
pub const INVENTORY_FILE: &str = "gpus";
/// The watchdog's latest record entry for this node and run (our AdminComment format), which the
/// plugin writes into the job's AdminComment when the batch script ends, while slurmctld still
/// accepts updates.
pub const RECORD_FILE: &str = "record";
/// The same entry while it may be missing from a multi-node job's AdminComment
/// (`Watchdog::settling_text`): the plugin puts it back there when a step's task ends here.
pub const SETTLING_RECORD_FILE: &str = "record-settling";
pub const FACTS_FILE: &str = "facts";
/// The job prolog's word on the job here ([`PrologWord`]), written before any step of the run:
/// every task of the job reads it before it starts, and its presence tells a step that the job has
/// GPUs here (a step of a job without asks slurmctld nothing).
pub const PROLOG_FILE: &str = "prolog";

/// The watchdog's word on the driver's hard limit for the job here (one line: what its log says),
/// written once the limit is in force, or once the watchdog knows it will not be: each task of the
/// job waits for it before it starts, so that nothing is allocated before the limit is set.
pub const HARD_LIMIT_FILE: &str = "hard-limit";

/// What the job prolog decided for the job on this node (`gmq_core::prolog`), as every task of
/// the job finds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PrologWord {
    /// The prolog started the job's watchdog.
    Watched,
    /// The job's request is refused here: so is every task of the job, for this reason.
    Refused(String),
}

impl PrologWord {
    pub fn render(&self) -> String {
        match self {
            PrologWord::Watched => "watched\n".to_string(),
            PrologWord::Refused(why) => format!("refused {}\n", why.replace('\n', " ")),
        }
    }

    /// The word [`PrologWord::render`] wrote; anything else is a refusal (fail closed: a task
    /// starts only where the prolog said the job is watched).
    pub fn parse(text: &str) -> PrologWord {
        let line = text.strip_suffix('\n').unwrap_or(text);
        match line.split_once(' ') {
            _ if line == "watched" => PrologWord::Watched,
            Some(("refused", why)) => PrologWord::Refused(why.to_string()),
            _ => PrologWord::Refused("the job prolog's word on this node cannot be read".into()),
        }
    }
}

pub fn jobs_dir(runtime_dir: &Path) -> PathBuf {
    runtime_dir.join("jobs")
}

pub fn job_dir(runtime_dir: &Path, job_id: u32) -> PathBuf {
    jobs_dir(runtime_dir).join(job_id.to_string())
}

pub fn status_file(runtime_dir: &Path, job_id: u32) -> PathBuf {
    job_dir(runtime_dir, job_id).join(STATUS_FILE)
}

/// What slurmctld's record says of the job on this node, that the job credential does not: read
/// by the watchdog once, at its start, and kept in [`FACTS_FILE`] for the job's srun steps (whose
/// environment the user's srun built). Names of accounts, partitions and QOS are the admin's; an
/// empty one is unknown.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeFacts {
    pub account: String,
    pub partition: String,
    pub qos: String,
    /// The job's `gres/shard` count on this node; `None`: slurmctld's record did not say.
    pub shards: Option<u64>,
}

impl NodeFacts {
    const KEYS: [&'static str; 4] = ["account", "partition", "qos", "shards"];

    /// One `key=value` line each, in [`NodeFacts::KEYS`] order.
    pub fn render(&self) -> String {
        let shards = self.shards.map_or(String::new(), |n| n.to_string());
        let values = [&self.account, &self.partition, &self.qos, &shards];
        Self::KEYS
            .iter()
            .zip(values)
            .map(|(key, value)| format!("{key}={value}\n"))
            .collect()
    }

    /// The text [`NodeFacts::render`] wrote; anything else (a key missing, twice, unknown, out of
    /// order, a count that is not one) is `None`, and the facts are asked of slurmctld instead.
    /// Lines end at `\n` alone, as written: a value's own `\r` is kept.
    pub fn parse(text: &str) -> Option<NodeFacts> {
        let mut lines = text.strip_suffix('\n').unwrap_or(text).split('\n');
        let mut values = Self::KEYS.iter().map(|key| {
            let (k, value) = lines.next()?.split_once('=')?;
            (k == *key).then_some(value)
        });
        let mut next = || values.next().flatten();
        let (account, partition, qos, shards) = (next()?, next()?, next()?, next()?);
        if lines.next().is_some() {
            return None;
        }
        Some(NodeFacts {
            account: account.to_string(),
            partition: partition.to_string(),
            qos: qos.to_string(),
            shards: match shards {
                "" => None,
                n => Some(n.parse().ok()?),
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_prolog_word_reads_back_and_anything_else_refuses() {
        for word in [PrologWord::Watched, PrologWord::Refused("over the 8G cap".into())] {
            assert_eq!(PrologWord::parse(&word.render()), word);
        }
        let multi = PrologWord::Refused("one\ntwo".into());
        assert_eq!(
            PrologWord::parse(&multi.render()),
            PrologWord::Refused("one two".into())
        );
        for bad in ["", "watched now\n", "Watched\n", "refused", "accepted\n"] {
            assert!(
                matches!(PrologWord::parse(bad), PrologWord::Refused(_)),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn node_facts_read_back_what_was_written_and_nothing_else() {
        let facts = NodeFacts {
            account: "physics".into(),
            partition: "gpu".into(),
            qos: String::new(),
            shards: Some(8),
        };
        assert_eq!(facts.render(), "account=physics\npartition=gpu\nqos=\nshards=8\n");
        assert_eq!(NodeFacts::parse(&facts.render()), Some(facts.clone()));
        let unknown = NodeFacts {
            shards: None,
            ..facts
        };
        assert_eq!(NodeFacts::parse(&unknown.render()), Some(unknown.clone()));
        // A value ending in `\r` reads back whole (found by fuzzing: `str::lines` dropped it).
        let carriage = NodeFacts {
            account: "physics\r".into(),
            ..unknown
        };
        assert_eq!(NodeFacts::parse(&carriage.render()), Some(carriage));
        for bad in [
            "",
            "account=a\npartition=p\nqos=q\n",
            "partition=p\naccount=a\nqos=q\nshards=1\n",
            "account=a\npartition=p\nqos=q\nshards=x\n",
            "account=a\npartition=p\nqos=q\nshards=1\nshards=2\n",
        ] {
            assert_eq!(NodeFacts::parse(bad), None, "{bad:?}");
        }
    }
}
