//! The AdminComment record: round trip, merge with other tools' text, size bound, bad input.

use gmq_core::record::{
    is_recorded, merge, parse, render, Entry, EventKind, Folded, GpuPeaks, Record, RecordError,
    MAX_NODE_NAME_BYTES, MAX_RECORD_BYTES,
};
use gmq_core::size::parse_size;

const GIB: u64 = 1 << 30;

fn entry(node: &str, run: u32) -> Entry {
    Entry::new(node, run, parse_size("40G").unwrap())
}

/// A node that requeued the job once after warning twice, with two GPUs.
fn busy_entry(node: &str, run: u32) -> Entry {
    let mut e = entry(node, run);
    e.observe_gpu(0, Some("1a2b3c4d"), 30 * GIB);
    e.observe_gpu(1, Some("5e6f7a8b"), 41 * GIB + 12345);
    e.facts.over_warn_secs = 95;
    e.count_event(EventKind::Warn, 1_718_000_000);
    e.count_event(EventKind::Warn, 1_718_000_030);
    e.count_event(EventKind::OverQuota, 1_718_000_060);
    e.count_event(EventKind::Requeued, 1_718_000_061);
    e.facts.restarts = 1;
    e.facts.updated_at = 1_718_000_061;
    e
}

fn record_of(entries: Vec<Entry>) -> Record {
    let mut r = Record::default();
    for e in entries {
        r.insert(e);
    }
    r
}

#[test]
fn the_documented_example_reads_as_documented() {
    // The sacct line shown in docs/ACCOUNTING.md, taken from the document so that both agree.
    let doc = include_str!("../../../../docs/ACCOUNTING.md");
    let line = doc
        .lines()
        .find(|l| l.starts_with("4242|"))
        .expect("example in the doc");
    let text = line.strip_prefix("4242|").unwrap();
    assert!(text.starts_with("ticket=INC42 "));
    let r = parse(text).unwrap().unwrap();
    assert_eq!(r.entries().len(), 2);
    let first = r.entry("gpu01", 0).unwrap();
    assert_eq!(first.peak(), 30 * GIB);
    assert_eq!(first.facts.events.get(EventKind::Warn), 2);
    let totals = r.totals();
    assert_eq!(totals.latest_run, Some(1));
    assert_eq!(totals.restarts, 1);
    assert_eq!(totals.events.get(EventKind::Requeued), 1);
    assert_eq!(totals.peak, 30 * GIB);
}

#[test]
fn round_trip() {
    let mut collapsed = busy_entry("gpu02", 1);
    collapsed.peaks = GpuPeaks::Max(7 * GIB);
    let mut folded = Folded::default();
    folded.absorb(&busy_entry("gone", 0));
    let mut with_folded = record_of(vec![entry("b", 0)]);
    with_folded.folded = Some(folded);
    let records = [
        Record::default(),
        record_of(vec![entry("gpu01", 0)]),
        record_of(vec![busy_entry("gpu01", 0), busy_entry("gpu01", 1), collapsed]),
        // Names that need encoding.
        record_of(vec![entry("node with space|and pipe", 3), entry("ünïcode", 0)]),
        with_folded,
    ];
    for r in records {
        let text = render(&r);
        let back = parse(&text).unwrap().unwrap();
        // Peaks were observed rounded up to MiB, so the record survives exactly.
        assert_eq!(back, r, "{text}");
        assert_eq!(render(&back), text);
    }
}

#[test]
fn rendered_text_is_safe_for_slurm_and_sacct() {
    let r = record_of(vec![busy_entry("we'ird \"node\"\\|\n", 0)]);
    let text = render(&r);
    assert!(
        text.bytes()
            .all(|b| b.is_ascii_graphic() && !b"|'\"\\`".contains(&b)),
        "{text}"
    );
    assert_eq!(text.matches('{').count(), 1);
    assert_eq!(text.matches('}').count(), 1);
}

#[test]
fn merge_keeps_other_tools_text() {
    let update = busy_entry("gpu01", 0);
    let ours = render(&record_of(vec![update.clone()]));
    let table: &[(&str, String)] = &[
        ("", ours.clone()),
        ("ticket=INC42", format!("ticket=INC42 {ours}")),
        ("ticket=INC42 ", format!("ticket=INC42 {ours}")),
        (
            "before gpu-mem-quota:v1{} after|x",
            format!("before {ours} after|x"),
        ),
        (
            "before gpu-mem-quota:v1{gpu01/0:q=40G} after",
            format!("before {ours} after"),
        ),
        // Another tool's multi-line note with odd characters is left byte for byte.
        (
            "line1\nline 2 'quoted' \"x\" {braces} é",
            format!("line1\nline 2 'quoted' \"x\" {{braces}} é {ours}"),
        ),
    ];
    for (existing, want) in table {
        let merged = merge(existing, &update);
        assert_eq!(&merged.admin_comment, want, "{existing:?}");
        assert_eq!(merged.replaced, None);
    }
}

#[test]
fn merge_keeps_other_nodes_and_runs() {
    let a = busy_entry("gpu01", 0);
    let b = busy_entry("gpu02", 0);
    let next_run = entry("gpu01", 1);
    let text = merge("note", &a).admin_comment;
    let text = merge(&text, &b).admin_comment;
    let text = merge(&text, &next_run).admin_comment;
    let r = parse(&text).unwrap().unwrap();
    assert_eq!(r, record_of(vec![a, b, next_run]));
    assert!(text.starts_with("note gpu-mem-quota:v1{"));
}

#[test]
fn merge_is_idempotent_and_order_free() {
    let a = busy_entry("gpu01", 0);
    let mut a_later = a.clone();
    a_later.count_event(EventKind::Warn, 1_718_000_100);
    a_later.facts.updated_at = 1_718_000_100;
    let b = busy_entry("gpu02", 0);

    let once = merge("x", &a).admin_comment;
    assert_eq!(merge(&once, &a).admin_comment, once);
    assert!(is_recorded(&once, &a));
    assert!(!is_recorded(&once, &b));
    assert!(!is_recorded(&once, &a_later));

    // A stale retry of an older report never lowers what a newer one wrote.
    let newer_then_older = merge(&merge("x", &a_later).admin_comment, &a).admin_comment;
    let older_then_newer = merge(&merge("x", &a).admin_comment, &a_later).admin_comment;
    assert_eq!(newer_then_older, older_then_newer);

    // Two nodes writing in either order end with the same text.
    let ab = merge(&merge("x", &a).admin_comment, &b).admin_comment;
    let ba = merge(&merge("x", &b).admin_comment, &a).admin_comment;
    assert_eq!(ab, ba);
}

#[test]
fn a_lost_update_is_repaired_by_the_read_back_retry() {
    // Two nodes read the same AdminComment, then both write: the second write loses the first's entry.
    let a = busy_entry("gpu01", 0);
    let b = busy_entry("gpu02", 0);
    let read = "note gpu-mem-quota:v1{}".to_string();
    let written_by_a = merge(&read, &a).admin_comment;
    let written_by_b = merge(&read, &b).admin_comment;
    let stored = written_by_b; // B's write landed last.
    let _ = written_by_a;
    assert!(
        !is_recorded(&stored, &a),
        "A's read-back shows its entry is missing"
    );
    let stored = merge(&stored, &a).admin_comment; // A retries on what it read back.
    assert!(is_recorded(&stored, &a) && is_recorded(&stored, &b));
}

#[test]
fn several_segments_become_one() {
    let a = busy_entry("gpu01", 0);
    let b = busy_entry("gpu02", 0);
    let seg_a = render(&record_of(vec![a.clone()]));
    let seg_b = render(&record_of(vec![b.clone()]));
    let existing = format!("x {seg_a} y {seg_b} z");
    let r = parse(&existing).unwrap().unwrap();
    assert_eq!(r, record_of(vec![a.clone(), b.clone()]));
    let merged = merge(&existing, &a).admin_comment;
    let both = render(&record_of(vec![a, b]));
    assert_eq!(merged, format!("x {both} y z"));
}

#[test]
fn size_bound_degrades_detail_then_folds_but_keeps_counts() {
    // 24 nodes with 8 GPUs each, over 2 runs: far more than the bound holds in full.
    let mut text = String::from("other-tool: keep me");
    let mut expected_warns = 0;
    let mut writers = Vec::new();
    for run in 0..2u32 {
        for n in 0..24u32 {
            let mut e = entry(&format!("gpu-node-{n:03}"), run);
            for g in 0..8 {
                e.observe_gpu(g, Some(&format!("{:08x}", n * 8 + g)), (u64::from(g) + 1) * GIB);
            }
            e.count_event(EventKind::Warn, u64::from(run * 1000 + n));
            e.facts.updated_at = u64::from(run * 1000 + n);
            expected_warns += 1;
            text = merge(&text, &e).admin_comment;
            let ours = &text["other-tool: keep me ".len()..];
            assert!(ours.len() <= MAX_RECORD_BYTES, "{} bytes", ours.len());
            writers.push(e);
        }
    }
    assert!(text.starts_with("other-tool: keep me gpu-mem-quota:v1{"));
    let r = parse(&text).unwrap().unwrap();
    let totals = r.totals();
    assert_eq!(totals.events.get(EventKind::Warn), expected_warns);
    assert_eq!(totals.peak, 8 * GIB);
    assert_eq!(totals.latest_run, Some(1));
    let folded = r.folded.clone().expect("oldest entries folded");
    assert_eq!(folded.entries as usize + r.entries().len(), writers.len());
    // The newest writer always keeps its own entry.
    let last = writers.last().unwrap();
    assert!(r.entry(&last.node, last.run).is_some());
    // Folded entries are the oldest: every entry kept is newer than every one folded.
    assert!(r
        .entries()
        .iter()
        .all(|e| e.facts.updated_at >= folded.facts.updated_at));
    // The final writer's text is stable under its own retry.
    assert!(is_recorded(&text, last));
}

#[test]
fn render_alone_is_bounded() {
    let entries = (0..200).map(|n| busy_entry(&format!("n{n}"), 0)).collect();
    let r = record_of(entries);
    let text = render(&r);
    assert!(text.len() <= MAX_RECORD_BYTES, "{}", text.len());
    let back = parse(&text).unwrap().unwrap();
    assert_eq!(back.totals().events, r.totals().events);
    assert_eq!(back.totals().restarts, 200);
}

#[test]
fn an_absurd_node_name_is_cut_and_still_merges_idempotently() {
    for name in ["n".repeat(5000), "ü".repeat(500)] {
        let e = busy_entry(&name, 0);
        let merged = merge("", &e).admin_comment;
        assert!(merged.len() <= MAX_RECORD_BYTES);
        let r = parse(&merged).unwrap().unwrap();
        assert_eq!(r.entries().len(), 1);
        assert!(r.entries()[0].node.len() <= MAX_NODE_NAME_BYTES);
        assert!(name.starts_with(&r.entries()[0].node));
        assert_eq!(r.totals().events.get(EventKind::Warn), 2);
        assert!(is_recorded(&merged, &e));
    }
}

#[test]
fn garbage_is_an_error_never_a_panic() {
    let table: &[(&str, &str)] = &[
        ("gpu-mem-quota:v1{nonsense}", "expected NODE/RUN"),
        ("gpu-mem-quota:v1{n/0:}", "KEY=VALUE"),
        ("gpu-mem-quota:v1{n/0:g0=1G}", "q= (the quota) is missing"),
        ("gpu-mem-quota:v1{n/x:q=1G}", "run is not a whole number"),
        ("gpu-mem-quota:v1{n/0:q=banana}", "q= is not a size"),
        ("gpu-mem-quota:v1{n/0:q=40}", "q= is not a size"),
        ("gpu-mem-quota:v1{n/0:q=1G,q=2G}", "appears twice"),
        ("gpu-mem-quota:v1{n/0:q=1G,warn=-1}", "not a whole number"),
        ("gpu-mem-quota:v1{n/0:q=1G,warn=99999999999}", "too large"),
        ("gpu-mem-quota:v1{n/0:q=1G,last=boom@1}", "unknown event"),
        ("gpu-mem-quota:v1{n/0:q=1G,last=warn}", "KIND@TIME"),
        ("gpu-mem-quota:v1{n/0:q=1G,g0=1G,pk=1G}", "together"),
        ("gpu-mem-quota:v1{n/0:q=1G,gx=1G}", "gINDEX"),
        // Found by fuzzing: read, this rendered `g8=` twice, which no longer parsed.
        (
            "gpu-mem-quota:v1{n/0:q=1G,g8=1G,g08=2G}",
            "GPU index appears twice",
        ),
        ("gpu-mem-quota:v1{n%zz/0:q=1G}", "badly encoded"),
        ("gpu-mem-quota:v1{*:pk=1G}", "n= (entries folded)"),
        ("gpu-mem-quota:v1{n/0:q=1G;}", "expected NODE/RUN"),
        ("gpu-mem-quota:v1{n/0:Q=1G}", "lowercase"),
        ("gpu-mem-quota:v1{n/0:q=1G|x}", "unexpected character '|'"),
        ("gpu-mem-quota:v1{n/0:q=1G'}", "unexpected character '\\''"),
        ("gpu-mem-quota:v1{é}", "unexpected character 'é' at byte 17"),
        ("x gpu-mem-quota:v1{n/0:q=1G", "at byte 2 has no closing"),
        ("gpu-mem-quota:v1{n/0:q=1G gpu-mem-quota:v1{}", "no closing"),
        ("gpu-mem-quota:v0{whatever}", "version 0 is no longer read"),
        ("gpu-mem-quota:v7{future}", "version 7 is newer"),
    ];
    for (text, want) in table {
        let e = parse(text).unwrap_err();
        assert!(e.to_string().contains(want), "{text:?}: {e}");
    }
    // Unknown fields are a later version's additions: skipped.
    let r = parse("gpu-mem-quota:v1{n/0:q=1G,future_field=xyz}")
        .unwrap()
        .unwrap();
    assert_eq!(r, record_of(vec![Entry::new("n", 0, parse_size("1G").unwrap())]));
    // Nothing of ours.
    assert_eq!(parse("").unwrap(), None);
    assert_eq!(parse("gpu-mem-quota:v is great").unwrap(), None);
}

#[test]
fn merge_replaces_what_it_cannot_read_and_says_so() {
    let e = busy_entry("gpu01", 0);
    let ours = render(&record_of(vec![e.clone()]));
    let table: &[(&str, String, RecordError)] = &[
        (
            "a gpu-mem-quota:v1{broken} b",
            format!("a {ours} b"),
            RecordError::BadItem {
                item: "broken".into(),
                reason: "expected NODE/RUN: or *: before the fields",
            },
        ),
        (
            "a gpu-mem-quota:v1{n/0:q=1G b",
            format!("a {ours} b"),
            RecordError::Unterminated { at: 2 },
        ),
        (
            "gpu-mem-quota:v0{old-format} b",
            format!("{ours} b"),
            RecordError::OlderVersion(0),
        ),
    ];
    for (existing, want, error) in table {
        let merged = merge(existing, &e);
        assert_eq!(&merged.admin_comment, want, "{existing:?}");
        assert_eq!(merged.replaced.as_ref(), Some(error));
    }
}

#[test]
fn a_newer_version_is_left_alone() {
    let e = busy_entry("gpu01", 0);
    let ours = render(&record_of(vec![e.clone()]));
    let existing = "gpu-mem-quota:v2{whatever:the=future;holds}";
    let merged = merge(existing, &e);
    assert_eq!(merged.admin_comment, format!("{existing} {ours}"));
    assert_eq!(merged.replaced, None);
    // A reader of this version reads its own segment and ignores the newer one.
    assert_eq!(parse(&merged.admin_comment).unwrap().unwrap(), record_of(vec![e]));
}

/// A small deterministic generator, so the test needs no dependency and fails reproducibly.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
}

#[test]
fn random_mutations_never_panic_and_merge_always_yields_a_readable_record() {
    let base = merge("note", &busy_entry("gpu01", 0)).admin_comment;
    let base = merge(&base, &busy_entry("gpu02", 1)).admin_comment;
    let alphabet: Vec<char> = "gpu-mem-quota:v1{};,=/@*%|' \n0123456789GMxé".chars().collect();
    let mut rng = Lcg(42);
    let update = busy_entry("gpu03", 2);
    for _ in 0..3000 {
        let mut chars: Vec<char> = base.chars().collect();
        for _ in 0..1 + rng.next() % 4 {
            let at = (rng.next() as usize) % (chars.len() + 1);
            let c = alphabet[(rng.next() as usize) % alphabet.len()];
            match rng.next() % 3 {
                0 if at < chars.len() => chars[at] = c,
                1 if at < chars.len() => {
                    chars.remove(at);
                }
                _ => chars.insert(at, c),
            }
        }
        let text: String = chars.into_iter().collect();
        let _ = parse(&text);
        let merged = merge(&text, &update);
        let r = parse(&merged.admin_comment);
        // Our own segment always reads back (a newer-version segment may sit beside it).
        let r = r.unwrap_or_else(|e| panic!("{text:?} -> {:?}: {e}", merged.admin_comment));
        assert!(r.unwrap().entry("gpu03", 2).is_some());
        assert!(is_recorded(&merged.admin_comment, &update), "{text:?}");
    }
}

/// `nodes` entries of `gpus` GPUs each (with ids), one warning each, merged one after another.
fn job_record(nodes: u32, gpus: u32) -> (String, Vec<Entry>) {
    let mut text = String::new();
    let mut writers = Vec::new();
    for n in 0..nodes {
        let mut e = entry(&format!("gpu{n:03}"), 0);
        for g in 0..gpus {
            e.observe_gpu(g, Some(&format!("{n:04x}{g:04x}")), 37 * GIB);
        }
        e.count_event(EventKind::Warn, 1_796_000_000);
        text = merge(&text, &e).admin_comment;
        writers.push(e);
    }
    (text, writers)
}

#[test]
fn an_entry_whose_detail_another_writer_dropped_is_still_recorded() {
    // K4: after eight 8-GPU nodes wrote, 7 of the 8 entries read as "not recorded" (their GPU ids
    // were dropped to fit), and each writer's merge put its own back and pushed another's out.
    let (text, writers) = job_record(8, 8);
    for w in &writers {
        assert!(is_recorded(&text, w), "{}: {text}", w.node);
    }
    // More than MAX_NODES_WITH_IDS nodes: no GPU id is written at all, the writer's neither.
    assert!(!text.contains("/0000"), "{text}");
    let (small, _) = job_record(2, 8);
    assert!(small.contains("g7=37G/00010007"), "{small}");
}

#[test]
fn a_folded_node_that_writes_again_is_counted_once() {
    // K4: 40 nodes of 4 GPUs summed 26418 warnings for 40 in an hour.
    let (text, writers) = job_record(40, 4);
    let r = parse(&text).unwrap().unwrap();
    let folded = r.folded.clone().expect("some folded");
    assert_eq!(folded.unlisted_entries(), 0, "{text}");
    assert!(text.contains(",f0=gpu000*"), "{text}");
    assert_eq!(r.totals().events.get(EventKind::Warn), 40);
    // Every writer, folded or not, finds itself recorded: nobody writes again.
    assert!(writers.iter().all(|w| is_recorded(&text, w)), "{text}");
    // Merged again anyway (an older release's check), it is still counted once.
    let again = writers
        .iter()
        .fold(text.clone(), |t, w| merge(&t, w).admin_comment);
    assert_eq!(
        parse(&again)
            .unwrap()
            .unwrap()
            .totals()
            .events
            .get(EventKind::Warn),
        40
    );
    // A folded node with something new comes out of the summary, its counts with it.
    let mut more = writers[0].clone();
    more.count_event(EventKind::Warn, 1_796_000_100);
    assert!(!is_recorded(&text, &more));
    let text = merge(&text, &more).admin_comment;
    let r = parse(&text).unwrap().unwrap();
    assert_eq!(r.totals().events.get(EventKind::Warn), 41, "{text}");
    assert_eq!(r.entry("gpu000", 0).unwrap().facts.events.get(EventKind::Warn), 2);
    assert!(is_recorded(&text, &more) && writers.iter().all(|w| is_recorded(&text, w)));
    assert_eq!(r.node_count(), 40);
}

#[test]
fn a_summary_without_a_list_reads_as_before() {
    // Written by an earlier release: counts summed, nodes not listed.
    let text = "gpu-mem-quota:v1{a/0:q=40G,pk=1G,warn=1;*:n=3,pk=2G,warn=3,restarts=1}";
    let r = parse(text).unwrap().unwrap();
    let folded = r.folded.clone().unwrap();
    assert_eq!((folded.entries, folded.unlisted_entries()), (3, 3));
    assert_eq!(r.totals().events.get(EventKind::Warn), 4);
    assert_eq!(r.node_count(), 4);
    assert_eq!(render(&r), text);
    // A reader of an earlier release skips the list and keeps the sums.
    let listed = "gpu-mem-quota:v1{*:n=2,pk=2G,warn=2,f0=b1*2@1}";
    let r = parse(listed).unwrap().unwrap();
    assert_eq!(r.folded.as_ref().unwrap().unlisted_entries(), 0);
    assert_eq!(render(&r), listed);
    let mut b2 = entry("b2", 0);
    b2.count_event(EventKind::Warn, 5);
    assert!(
        !is_recorded(listed, &b2),
        "no peak or last event as late in the summary"
    );
    b2.facts.last_event = None;
    assert!(is_recorded(listed, &b2));
}

#[test]
fn random_mutations_of_a_folded_record_read_and_render_stably() {
    // What the record_parse and record_merge fuzz targets check, on a record whose summary lists
    // the nodes it folded: read, it renders within the bound to a text that reads back and renders
    // the same, with the same highest peak; merged into, it holds the writer's entry.
    let (base, _) = job_record(40, 4);
    let base = merge(&base, &busy_entry("gpu017", 1)).admin_comment;
    let alphabet: Vec<char> = "gpu0123456789*@/:.f=,;{}GM%x".chars().collect();
    let mut rng = Lcg(7);
    let update = busy_entry("gpu003", 0);
    let mut read = 0;
    for _ in 0..3000 {
        let mut chars: Vec<char> = base.chars().collect();
        for _ in 0..1 + rng.next() % 3 {
            let at = (rng.next() as usize) % (chars.len() + 1);
            let c = alphabet[(rng.next() as usize) % alphabet.len()];
            match rng.next() % 3 {
                0 if at < chars.len() => chars[at] = c,
                1 if at < chars.len() => {
                    chars.remove(at);
                }
                _ => chars.insert(at, c),
            }
        }
        let text: String = chars.into_iter().collect();
        if let Ok(Some(found)) = parse(&text) {
            read += 1;
            let rendered = render(&found);
            assert!(rendered.len() <= MAX_RECORD_BYTES, "{text:?}");
            let again = parse(&rendered).unwrap().unwrap();
            assert_eq!(render(&again), rendered, "{text:?}");
            assert_eq!(again.totals().peak, found.totals().peak, "{text:?}");
        }
        let merged = merge(&text, &update).admin_comment;
        let r = parse(&merged).unwrap_or_else(|e| panic!("{text:?} -> {merged:?}: {e}"));
        assert!(r.unwrap().entry("gpu003", 0).is_some(), "{merged:?}");
        assert!(is_recorded(&merged, &update), "{text:?} -> {merged:?}");
        assert_eq!(merge(&merged, &update).admin_comment, merged, "{text:?}");
    }
    assert!(read > 500, "{read} of 3000 read");
}
