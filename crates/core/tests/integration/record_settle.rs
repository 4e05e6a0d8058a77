//! Review K4: N watchdogs of one multi-node job sharing one AdminComment, the real `Watchdog` code
//! (`tick` and `keep_record_current` once a simulated second on every node), slurmctld's requests
//! counted.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::{Duration, Instant};

use gmq_core::config::{Action, Enforcement};
use gmq_core::controller::{AdminComment, ControlError, Controller, SlurmJob};
use gmq_core::record::{self, EventKind};
use gmq_core::size::ByteSize;
use gmq_core::slurm_text as slurmctl;
use gmq_core::watchdog::gpu::{GpuProcess, GpuSample, GpuSource};
use gmq_core::watchdog::{Attributor, Watchdog};

use crate::common::watchdog_fakes::Lines;

const G: u64 = 1 << 30;

/// The job's AdminComment in slurmctld, and how often it was asked for and replaced.
#[derive(Default)]
struct Ctld {
    admin_comment: String,
    reads: u64,
    writes: u64,
}

/// One node's way to the shared slurmctld.
struct NodeSlurm {
    ctld: Rc<RefCell<Ctld>>,
    nodes: u32,
}

impl Controller for NodeSlurm {
    fn job(&mut self) -> Result<SlurmJob, ControlError> {
        Ok(SlurmJob {
            state: slurmctl::JobState::Running,
            restarts: 0,
            requeueable: true,
            qos: "normal".into(),
            partition: "gpu".into(),
            account: "physics".into(),
            priority: 1,
            node_count: self.nodes,
        })
    }

    fn admin_comment(&mut self) -> Result<AdminComment, ControlError> {
        let mut ctld = self.ctld.borrow_mut();
        ctld.reads += 1;
        Ok(AdminComment::Read(ctld.admin_comment.clone()))
    }

    fn set_admin_comment(&mut self, text: &str) -> Result<(), ControlError> {
        let mut ctld = self.ctld.borrow_mut();
        ctld.writes += 1;
        ctld.admin_comment = text.to_string();
        Ok(())
    }

    fn perform(&mut self, _: Action) -> Result<(), ControlError> {
        panic!("at 37G of a 40G quota nothing is done to the job")
    }

    fn ending(&mut self) -> Result<Option<slurmctl::JobEnd>, ControlError> {
        Ok(None)
    }

    fn requeue_ended(&mut self) -> Result<(), ControlError> {
        panic!("the job does not end here")
    }
}

/// A node's `gpus` GPUs, the job holding `bytes` on each.
struct NodeGpus {
    node: u32,
    gpus: u32,
    bytes: u64,
}

impl GpuSource for NodeGpus {
    fn sample(&mut self) -> Result<Vec<GpuSample>, String> {
        Ok((0..self.gpus)
            .map(|index| GpuSample {
                index,
                uuid: format!("GPU-{:04x}{:04x}-0000-4000-8000-000000000000", self.node, index),
                total: 80 * G,
                used: self.bytes,
                processes: vec![GpuProcess {
                    pid: 1000 + index,
                    used: Some(self.bytes),
                }],
                listed: true,
            })
            .collect())
    }

    fn gpu_total(&self) -> Option<u64> {
        Some(80 * G)
    }
}

struct EveryPid;

impl Attributor for EveryPid {
    fn is_ours(&mut self, _: u32, _: bool) -> Option<bool> {
        Some(true)
    }
}

/// What a run of the job cost slurmctld, and what its record says.
#[derive(Debug)]
struct Figures {
    reads: u64,
    writes: u64,
    /// The record's summed `warn` count (each node warns once).
    warns: u32,
    entries: usize,
    folded: u32,
}

/// `nodes` watchdogs with `gpus` GPUs each at 37G of a 40G quota, `seconds` of one sample a second.
fn run_job(nodes: u32, gpus: u32, seconds: u64) -> Figures {
    let ctld = Rc::new(RefCell::new(Ctld::default()));
    let settings = Enforcement {
        interval: Duration::from_secs(1),
        ..Enforcement::default()
    };
    let mut watchdogs: Vec<(Watchdog, NodeSlurm, NodeGpus)> = (0..nodes)
        .map(|n| {
            let mut watchdog = Watchdog::new(
                7,
                &format!("gpu{n:03}"),
                Some(ByteSize::from_bytes(40 * G)),
                settings.clone(),
            );
            watchdog.set_run(0);
            watchdog.set_node_count(nodes);
            let slurm = NodeSlurm {
                ctld: ctld.clone(),
                nodes,
            };
            let gpus = NodeGpus {
                node: n,
                gpus,
                bytes: 37 * G,
            };
            (watchdog, slurm, gpus)
        })
        .collect();
    let mut lines = Lines::default();
    let t0 = Instant::now();
    for second in 0..seconds {
        let now = t0 + Duration::from_secs(second);
        for (watchdog, slurm, gpus) in &mut watchdogs {
            watchdog.tick(now, gpus, &mut EveryPid, slurm, &mut lines);
            watchdog.keep_record_current(now, slurm, &mut lines);
        }
    }
    let ctld = ctld.borrow();
    if std::env::var_os("K4_SHOW").is_some() {
        println!("{}", ctld.admin_comment);
    }
    let record = record::parse(&ctld.admin_comment).unwrap().unwrap();
    Figures {
        reads: ctld.reads,
        writes: ctld.writes,
        warns: record.totals().events.get(EventKind::Warn),
        entries: record.entries().len(),
        folded: record.folded.as_ref().map_or(0, |f| f.entries),
    }
}

#[test]
fn k4_scenarios_settle_with_exact_counts_whatever_the_run_time() {
    // Review K4, with the real code: 8 x 8 wrote 8401 times and read 16804 times in an hour (7
    // requests/s for the job's whole life); 40 x 4 wrote 26418 times, and its record summed 26418
    // warnings for 40. Now each node writes its peak once and looks for it three times; an hour
    // costs what ten minutes cost.
    for (nodes, gpus) in [(8, 8), (40, 4), (3, 24)] {
        let short = run_job(nodes, gpus, 120);
        let long = run_job(nodes, gpus, 1200);
        for f in [&short, &long] {
            assert_eq!(f.warns, nodes, "{nodes} x {gpus}: {f:?}");
            assert_eq!(f.writes, u64::from(nodes), "{nodes} x {gpus}: {f:?}");
            // The write's read and read-back, and the looks 3 s and 15 s later.
            assert_eq!(f.reads, 4 * u64::from(nodes), "{nodes} x {gpus}: {f:?}");
        }
        assert_eq!(
            (short.entries, short.folded),
            (long.entries, long.folded),
            "{nodes} x {gpus}"
        );
    }
}

#[test]
#[ignore = "prints the figures of review K4's scenarios: cargo test -p gmq-core -- --ignored --nocapture k4_figures"]
fn k4_figures() {
    for (nodes, gpus, seconds) in [
        (8, 8, 3600),
        (40, 4, 3600),
        (3, 24, 3600),
        (8, 8, 600),
        (40, 4, 600),
    ] {
        let f = run_job(nodes, gpus, seconds);
        println!(
            "{nodes} nodes x {gpus} GPUs, {seconds} s: reads {} writes {} ({:.2} requests/s); warn in totals {} (true: {nodes}); entries {}, folded {}",
            f.reads,
            f.writes,
            (f.reads + f.writes) as f64 / seconds as f64,
            f.warns,
            f.entries,
            f.folded
        );
    }
}

/// A small deterministic generator, so the test needs no dependency and fails reproducibly.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // splitmix64
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// One writer of the shared record: its entry as it grows, one version after another.
struct Writer {
    versions: Vec<record::Entry>,
    at: usize,
    /// The AdminComment as it read it, not yet acted on (its write may land after others').
    read: Option<String>,
    /// Writes left for the current version: the watchdog's budget (a due write and its two looks,
    /// each up to `RECORD_ATTEMPTS` writes).
    budget: u32,
}

const WRITE_BUDGET: u32 = 3 * gmq_core::controller::RECORD_ATTEMPTS;

impl Writer {
    fn entry(&self) -> &record::Entry {
        &self.versions[self.at]
    }
}

/// A node name in one of the styles sites use.
fn node_name(style: u64, n: u32) -> String {
    match style {
        0 => format!("gpu{n:03}"),
        1 => format!("node{n}"),
        _ => format!("rack{}-n{:02}", n / 16, n % 16),
    }
}

/// The versions of one node's entry: peaks that grow, a warning now and then, seldom a requeue or
/// a preemption. `busy`: several warnings a version and more actions, so that nodes rarely share
/// their counts.
fn versions(rng: &mut Rng, node: &str, run: u32, busy: bool) -> Vec<record::Entry> {
    let gpus = 1 + rng.below(8) as u32;
    let mut entry = record::Entry::new(node, run, ByteSize::from_bytes(40 * G));
    let mut out = Vec::new();
    for v in 0..1 + rng.below(4) {
        for gpu in 0..gpus {
            let peak = (10 + v * 5 + rng.below(10)) * G;
            entry.observe_gpu(gpu, Some(&format!("{:08x}", rng.next() as u32)), peak);
        }
        let at = 1_796_000_000 + v * 60 + rng.below(60);
        let warns = if busy {
            rng.below(3)
        } else {
            u64::from(rng.chance(30))
        };
        for _ in 0..warns {
            entry.count_event(EventKind::Warn, at);
        }
        if rng.chance(if busy { 10 } else { 3 }) {
            gmq_core::watchdog::shared_record::count_action(
                &mut entry,
                EventKind::OverQuota,
                Action::Requeue,
                at,
            );
        }
        if rng.chance(if busy { 5 } else { 2 }) {
            entry.count_event(EventKind::Preempted, at);
        }
        out.push(entry.clone());
    }
    out
}

/// What the writers' current versions add up to.
fn true_totals(writers: &[Writer]) -> (record::EventCounts, u32) {
    let mut events = record::EventCounts::default();
    let mut restarts = 0;
    for w in writers {
        events = events.sum(&w.entry().facts.events);
        restarts += w.entry().facts.restarts;
    }
    (events, restarts)
}

/// Our segment of an AdminComment that starts with another tool's `site:keep-me `.
fn segment(text: &str) -> &str {
    text.strip_prefix("site:keep-me ")
        .expect("the other tool's text stays")
}

/// Runs one seeded interleaving; returns (writes while the writers wrote, writes to settle).
fn interleaving(seed: u64) -> (u32, u32) {
    let mut rng = Rng(seed);
    let nodes = 2 + rng.below(47) as u32;
    let style = rng.below(3);
    // Some jobs were requeued: the same nodes write a second run's entries.
    let runs = if rng.chance(25) { 2 } else { 1 };
    let mut writers: Vec<Writer> = Vec::new();
    for run in 0..runs {
        for n in 0..nodes {
            writers.push(Writer {
                versions: versions(&mut rng, &node_name(style, n), run, false),
                at: 0,
                read: None,
                budget: WRITE_BUDGET,
            });
        }
    }
    let mut text = "site:keep-me".to_string();
    let mut writes = 0;
    let check = |text: &str, writers: &[Writer], seed: u64| {
        let ours = segment(text);
        assert!(ours.len() <= record::MAX_RECORD_BYTES, "seed {seed}: {ours}");
        let r = record::parse(text).unwrap().unwrap();
        let folded = r.folded.as_ref();
        assert_eq!(
            folded.map_or(0, |f| f.unlisted_entries()),
            0,
            "seed {seed}: {ours}"
        );
        // Never more than the writers counted: no entry is counted twice.
        let (events, restarts) = true_totals(writers);
        let totals = r.totals();
        for (kind, n) in totals.events.iter() {
            assert!(
                n <= events.get(kind),
                "seed {seed}: {kind} {n} > {}: {ours}",
                events.get(kind)
            );
        }
        assert!(totals.restarts <= restarts, "seed {seed}: {ours}");
    };
    // Any interleaving: a writer reads, and writes its merge of what it read later, after any
    // number of other writers' reads and writes; its entry grows meanwhile.
    for _ in 0..30 * writers.len() {
        let i = rng.below(writers.len() as u64) as usize;
        let w = &mut writers[i];
        if w.at + 1 < w.versions.len() && rng.chance(5) {
            w.at += 1;
            w.budget = WRITE_BUDGET;
        } else if let Some(read) = w.read.take() {
            if w.budget > 0 && !record::is_recorded(&read, w.entry()) {
                text = record::merge(&read, w.entry()).admin_comment;
                w.budget -= 1;
                writes += 1;
                check(&text, &writers, seed);
            }
        } else {
            w.read = Some(text.clone());
        }
    }
    // The last versions, still interleaved.
    for w in &mut writers {
        if w.at + 1 < w.versions.len() {
            w.at = w.versions.len() - 1;
            w.budget = WRITE_BUDGET;
        }
    }
    for _ in 0..5 * writers.len() {
        let i = rng.below(writers.len() as u64) as usize;
        let w = &mut writers[i];
        match w.read.take() {
            Some(read) if w.budget > 0 && !record::is_recorded(&read, w.entry()) => {
                text = record::merge(&read, w.entry()).admin_comment;
                w.budget -= 1;
                writes += 1;
                check(&text, &writers, seed);
            }
            Some(_) => {}
            None => w.read = Some(text.clone()),
        }
    }
    let versions: u32 = writers.iter().map(|w| w.versions.len() as u32).sum();
    assert!(writes <= versions * WRITE_BUDGET, "seed {seed}");
    // Then the writers look once more, one after another (what the look 15 s after a write does
    // once the others have written): one pass settles the record, the next writes nothing.
    let mut settle = 0;
    for pass in 0..2 {
        for w in &writers {
            if !record::is_recorded(&text, w.entry()) {
                assert_eq!(pass, 0, "seed {seed}: still not there after a pass: {text}");
                text = record::merge(&text, w.entry()).admin_comment;
                settle += 1;
                check(&text, &writers, seed);
            }
        }
    }
    assert!(settle <= writers.len() as u32, "seed {seed}");
    // Settled: every writer's entry is there, and the counts are exactly the writers' own.
    let r = record::parse(&text).unwrap().unwrap();
    let (events, restarts) = true_totals(&writers);
    assert_eq!(r.totals().events, events, "seed {seed}: {text}");
    assert_eq!(r.totals().restarts, restarts, "seed {seed}: {text}");
    let nodes_named = r.node_count();
    assert_eq!(nodes_named, nodes as usize, "seed {seed}: {text}");
    if nodes_named > record::MAX_NODES_WITH_IDS {
        assert!(r.entries().iter().all(|e| match &e.peaks {
            record::GpuPeaks::Each(gpus) => gpus.iter().all(|g| g.id.is_none()),
            record::GpuPeaks::Max(_) => true,
        }));
    }
    (writes, settle)
}

#[test]
fn any_interleaving_of_writers_settles_on_the_true_counts_with_bounded_writes() {
    let (mut writes, mut settle) = (0, 0);
    for seed in 0..80 {
        let (w, s) = interleaving(seed);
        writes += w;
        settle += s;
    }
    println!("80 interleavings: {writes} writes while writing, {settle} to settle");
}

#[test]
fn writers_one_after_another_write_each_version_once() {
    // No write lost to another: every write of a version that is not there yet puts it there
    // for good (another writer's folding keeps it), so a version costs one write, whatever the
    // number of nodes. The code before K4's fix wrote for ever here.
    for seed in 0..60 {
        let mut rng = Rng(seed);
        let nodes = 2 + rng.below(60) as u32;
        let mut writers: Vec<Vec<record::Entry>> = (0..nodes)
            .map(|n| versions(&mut rng, &node_name(0, n), 0, false))
            .collect();
        let mut text = String::new();
        let mut writes = 0;
        let total_versions: usize = writers.iter().map(Vec::len).sum();
        for round in 0..6 {
            for w in &mut writers {
                let entry = &w[round.min(w.len() - 1)];
                if !record::is_recorded(&text, entry) {
                    text = record::merge(&text, entry).admin_comment;
                    writes += 1;
                }
            }
        }
        assert!(
            writes <= total_versions,
            "seed {seed}: {writes} writes for {total_versions} versions"
        );
        let r = record::parse(&text).unwrap().unwrap();
        let want = writers.iter().fold(record::EventCounts::default(), |sum, w| {
            sum.sum(&w.last().unwrap().facts.events)
        });
        assert_eq!(r.totals().events, want, "seed {seed}: {text}");
    }
}

#[test]
fn a_record_that_cannot_list_every_folded_node_still_costs_a_bounded_number_of_writes() {
    // 150 nodes with names that share no numbering and counts that differ from node to node:
    // even the list of folded nodes outgrows the bound, and a node the list left out cannot tell
    // that it is counted. Its writer's budget still bounds what it costs.
    for seed in 0..4 {
        let mut rng = Rng(1000 + seed);
        let mut writers: Vec<Vec<record::Entry>> = (0..150)
            .map(|_| {
                let name = format!("{:08x}", rng.next() as u32);
                versions(&mut rng, &name, 0, true)
            })
            .collect();
        let mut text = String::new();
        let mut writes = 0;
        let mut budgets = vec![WRITE_BUDGET; writers.len()];
        let total_versions: usize = writers.iter().map(Vec::len).sum();
        let mut unlisted = 0;
        for round in 0..20 {
            for (w, budget) in writers.iter_mut().zip(&mut budgets) {
                let at = round.min(w.len() - 1);
                if round > 0 && at == round && round < w.len() {
                    *budget = WRITE_BUDGET;
                }
                if *budget > 0 && !record::is_recorded(&text, &w[at]) {
                    text = record::merge(&text, &w[at]).admin_comment;
                    *budget -= 1;
                    writes += 1;
                    let r = record::parse(&text).unwrap().unwrap();
                    unlisted = unlisted.max(r.folded.as_ref().map_or(0, |f| f.unlisted_entries()));
                }
            }
        }
        assert!(unlisted > 0, "seed {seed}: the list fitted");
        assert!(
            writes <= total_versions * WRITE_BUDGET as usize,
            "seed {seed}: {writes} writes for {total_versions} versions"
        );
    }
}

#[test]
fn an_entry_is_settling_while_another_nodes_merge_may_have_replaced_it() {
    // What the plugin puts back when a step's task ends (`record-settling`): a run that ends
    // seconds after its nodes' first writes, before the watchdog looks again, keeps each entry.
    for nodes in [1, 2] {
        let ctld = Rc::new(RefCell::new(Ctld::default()));
        let mut slurm = NodeSlurm {
            ctld: ctld.clone(),
            nodes,
        };
        let settings = Enforcement {
            interval: Duration::from_secs(1),
            ..Enforcement::default()
        };
        let mut watchdog = Watchdog::new(7, "gpu001", Some(ByteSize::from_bytes(40 * G)), settings);
        watchdog.set_run(0);
        watchdog.set_node_count(nodes);
        let mut gpus = NodeGpus {
            node: 1,
            gpus: 1,
            bytes: 0,
        };
        let mut lines = Lines::default();
        let t0 = Instant::now();
        let mut second = |watchdog: &mut Watchdog, gpus: &mut NodeGpus, s: u64| {
            let now = t0 + Duration::from_secs(s);
            watchdog.tick(now, gpus, &mut EveryPid, &mut slurm, &mut lines);
            watchdog.keep_record_current(now, &mut slurm, &mut lines);
        };
        second(&mut watchdog, &mut gpus, 0);
        assert_eq!(watchdog.settling_text(), None, "no GPU memory used yet");
        gpus.bytes = 8 * G;
        second(&mut watchdog, &mut gpus, 1);
        assert_eq!(ctld.borrow().writes, 1);
        let settling = watchdog.settling_text();
        if nodes == 1 {
            // The batch script's end writes a one-node job's record; nobody else writes it.
            assert_eq!(settling, None);
            continue;
        }
        let text = settling.expect("written, not looked for again yet");
        let entry = record::parse(&text).unwrap().unwrap().entries()[0].clone();
        assert!(record::is_recorded(&ctld.borrow().admin_comment, &entry));
        // Past the looks 3 s and 15 s after the write (and the node's stagger): settled.
        for s in 2..20 {
            second(&mut watchdog, &mut gpus, s);
        }
        assert_eq!(watchdog.settling_text(), None);
        assert_eq!(
            ctld.borrow().writes,
            1,
            "nothing replaced it: nothing written again"
        );
    }
}
