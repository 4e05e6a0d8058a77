//! A job's facts file on its node (`<runtime_dir>/jobs/<id>/facts`: account, partition, QOS and
//! shard count from slurmctld, read by the job's srun steps).
//!
//! Never panics. Facts read render to four `key=value` lines that read back equal and render the
//! same again; the values read are the text's own (the text is those four lines, in order, each
//! ended by `\n` alone as written: a `\r` belongs to the value).
#![no_main]

use gmq_core::node_files::NodeFacts;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    let Some(facts) = NodeFacts::parse(text) else {
        return;
    };
    let rendered = facts.render();
    assert_eq!(rendered.lines().count(), 4, "{rendered:?}");
    let again = NodeFacts::parse(&rendered).unwrap_or_else(|| panic!("{text:?} rendered to {rendered:?}"));
    assert_eq!(again, facts, "{text:?} rendered to {rendered:?}");
    assert_eq!(again.render(), rendered);
    let lines: Vec<&str> = text.strip_suffix('\n').unwrap_or(text).split('\n').collect();
    assert_eq!(lines.len(), 4, "{text:?}");
    assert_eq!(lines[0], format!("account={}", facts.account));
    assert_eq!(lines[1], format!("partition={}", facts.partition));
    assert_eq!(lines[2], format!("qos={}", facts.qos));
    let shards = lines[3]
        .strip_prefix("shards=")
        .expect("the fourth line is the shard count");
    assert_eq!(shards.parse::<u64>().ok(), facts.shards, "{text:?}");
});
