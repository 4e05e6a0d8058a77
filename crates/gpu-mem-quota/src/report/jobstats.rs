//! jobstats' job summary (Princeton's jobstats, `slurm/slurmctldepilog.sh`), where a site runs it:
//! `JS1:` then base64 of gzip of a JSON summary, which its EpilogSlurmctld writes as the whole
//! AdminComment (`sacctmgr -i update job ... set AdminComment=JS1:...`). We read its per-GPU
//! memory, decoded as jobstats itself does (`jobstats.py`: `gzip.decompress(base64.b64decode(
//! data[4:]))`), to show it beside ours; we never write it. Pure.
//!
//! `JS1:Short` and `JS1:None` (a job too short to sample, no data) carry no figures.

use std::io::Read;

use flate2::read::GzDecoder;
use serde_json::Value;

/// The marker jobstats puts before its summary (version 1 of its format).
pub const JS1_PREFIX: &str = "JS1:";

/// The most a summary may inflate to: jobstats' largest are a few KiB of JSON ("around 5000"
/// characters of base64 for large jobs, docs/setup/summaries.md); more is not a summary of theirs.
const MAX_JSON_BYTES: u64 = 1 << 20;

/// One GPU of jobstats' summary: its per-node GPU key (the GPU's minor number, as a string in
/// their JSON), the most memory it saw used, and the GPU's total.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobstatsGpu {
    pub node: String,
    pub gpu: String,
    pub used_bytes: u64,
    pub total_bytes: Option<u64>,
}

/// What the AdminComment says of jobstats' summary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Jobstats {
    /// A summary with per-GPU memory, in node then GPU order.
    Gpus(Vec<JobstatsGpu>),
    /// `JS1:Short`, `JS1:None`, or a summary without GPU memory (a CPU job).
    NoGpuFigures,
    /// A `JS1:` token that does not decode: why.
    Unreadable(String),
}

/// jobstats' summary in `admin_comment`: `None` when it holds no whitespace-separated token that
/// starts with `JS1:`. jobstats writes the field whole; a tool (ours included) that kept it and
/// added text leaves it one token.
pub fn find(admin_comment: &str) -> Option<Jobstats> {
    let mut tokens = admin_comment.split_whitespace();
    let token = tokens.find(|t| {
        t.get(..JS1_PREFIX.len())
            .is_some_and(|p| p.eq_ignore_ascii_case(JS1_PREFIX))
    })?;
    let Some(token) = token.strip_prefix(JS1_PREFIX) else {
        // Slurm 22.05's sacctmgr lowercases the values it sets (strip_quotes with make_lower;
        // 23.02 on keep them): base64 does not survive that.
        return Some(Jobstats::Unreadable(
            "lowercased by Slurm 22.05's sacctmgr (23.02 and later keep its case); jobstats' own \
             reader cannot decode it either"
                .to_string(),
        ));
    };
    Some(match token {
        "Short" | "None" => Jobstats::NoGpuFigures,
        payload => match decode(payload) {
            Ok(gpus) if gpus.is_empty() => Jobstats::NoGpuFigures,
            Ok(gpus) => Jobstats::Gpus(gpus),
            Err(why) => Jobstats::Unreadable(why),
        },
    })
}

/// base64 → gzip → JSON → `nodes.<node>.gpu_used_memory.<gpu>` (and `gpu_total_memory`).
fn decode(payload: &str) -> Result<Vec<JobstatsGpu>, String> {
    let gz = base64_decode(payload)?;
    let mut json = Vec::new();
    GzDecoder::new(gz.as_slice())
        .take(MAX_JSON_BYTES + 1)
        .read_to_end(&mut json)
        .map_err(|e| format!("not gzip: {e}"))?;
    if json.len() as u64 > MAX_JSON_BYTES {
        return Err(format!("inflates to more than {MAX_JSON_BYTES} bytes"));
    }
    let summary: Value = serde_json::from_slice(&json).map_err(|e| format!("not JSON: {e}"))?;
    let nodes = summary
        .get("nodes")
        .and_then(Value::as_object)
        .ok_or("no \"nodes\" object")?;
    let mut gpus = Vec::new();
    for (node, stats) in nodes {
        let Some(used) = stats.get("gpu_used_memory").and_then(Value::as_object) else {
            continue;
        };
        let total = stats.get("gpu_total_memory").and_then(Value::as_object);
        for (gpu, bytes) in used {
            let used_bytes = bytes
                .as_u64()
                .or_else(|| bytes.as_f64().filter(|b| *b >= 0.0).map(|b| b as u64))
                .ok_or_else(|| format!("{node} GPU {gpu}: gpu_used_memory is not a number"))?;
            gpus.push(JobstatsGpu {
                node: node.clone(),
                gpu: gpu.clone(),
                used_bytes,
                total_bytes: total.and_then(|t| t.get(gpu)).and_then(Value::as_u64),
            });
        }
    }
    // Numeric GPU keys in numeric order ("10" after "9").
    gpus.sort_by(|a, b| {
        let key = |g: &JobstatsGpu| (g.node.clone(), g.gpu.parse::<u64>().ok(), g.gpu.clone());
        key(a).cmp(&key(b))
    });
    Ok(gpus)
}

/// Standard base64 (RFC 4648 §4) with `=` padding, as Python's `base64.b64encode` writes it.
fn base64_decode(text: &str) -> Result<Vec<u8>, String> {
    let value = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    };
    let body = text.trim_end_matches('=');
    if !text.len().is_multiple_of(4) || text.len() - body.len() > 2 {
        return Err("not base64: its length or padding is wrong".to_string());
    }
    let mut out = Vec::with_capacity(body.len() * 3 / 4);
    let (mut bits, mut held) = (0u32, 0u32);
    for c in body.bytes() {
        let v = value(c).ok_or_else(|| format!("not base64: {:?}", c as char))?;
        bits = (bits << 6) | v;
        held += 6;
        if held >= 8 {
            held -= 8;
            out.push((bits >> held) as u8);
            bits &= (1 << held) - 1;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use flate2::write::GzEncoder;
    use std::io::Write;

    /// `"JS1:" + base64.b64encode(gzip.compress(json))`, as jobstats.py writes it.
    fn js1(json: &str) -> String {
        let mut gz = GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(json.as_bytes()).unwrap();
        format!("JS1:{}", base64_encode(&gz.finish().unwrap()))
    }

    fn base64_encode(bytes: &[u8]) -> String {
        const ABC: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let mut out = String::new();
        for chunk in bytes.chunks(3) {
            let n = chunk.iter().fold(0u32, |n, b| (n << 8) | *b as u32) << (8 * (3 - chunk.len()));
            for i in 0..4 {
                if i <= chunk.len() {
                    out.push(ABC[(n >> (18 - 6 * i)) as usize & 63] as char);
                } else {
                    out.push('=');
                }
            }
        }
        out
    }

    /// The example of jobstats' docs/setup/summaries.md.
    const SUMMARY: &str = r#"{"nodes":{"della-l01g2":{"total_memory":33554432000,"used_memory":27482066944,"total_time":8591.7,"cpus":1,"gpu_total_memory":{"1":10200547328},"gpu_used_memory":{"1":124780544}}},"total_time":432301,"gpus":1}"#;

    #[test]
    fn reads_the_per_gpu_memory_of_a_summary_as_jobstats_writes_it() {
        let found = find(&js1(SUMMARY));
        assert_eq!(
            found,
            Some(Jobstats::Gpus(vec![JobstatsGpu {
                node: "della-l01g2".into(),
                gpu: "1".into(),
                used_bytes: 124_780_544,
                total_bytes: Some(10_200_547_328),
            }]))
        );
    }

    /// A Python-made payload (jobstats' own tests/test_jobstats.py way: `base64.b64encode(
    /// gzip.compress(...))`), not one of our encoder's.
    #[test]
    fn reads_a_payload_that_python_made() {
        let python =
            "JS1:H4sIAO7FFmsC/6tWystPSS1WslKoVsozBFPpBaXxpcWpKfG5qbn5RZVgMQMgaWhgYFALBACcyHxiMwAAAA==";
        let Some(Jobstats::Gpus(gpus)) = find(python) else {
            panic!("{:?}", find(python))
        };
        assert_eq!(gpus.len(), 1);
        assert_eq!(gpus[0].node, "n1");
        assert_eq!(gpus[0].used_bytes, 1_000);
    }

    #[test]
    fn finds_the_summary_beside_other_text_and_orders_gpus_by_number() {
        let json = r#"{"nodes":{"b":{"gpu_used_memory":{"10":3,"9":2}},"a":{"gpu_used_memory":{"0":1}}}}"#;
        let text = format!("ticket=INC1 {} gpu-mem-quota:v1{{}}", js1(json));
        let Some(Jobstats::Gpus(gpus)) = find(&text) else {
            panic!()
        };
        let order: Vec<(&str, &str)> = gpus.iter().map(|g| (g.node.as_str(), g.gpu.as_str())).collect();
        assert_eq!(order, [("a", "0"), ("b", "9"), ("b", "10")]);
    }

    #[test]
    fn short_none_and_cpu_jobs_have_no_gpu_figures() {
        assert_eq!(find("JS1:Short"), Some(Jobstats::NoGpuFigures));
        assert_eq!(find("JS1:None"), Some(Jobstats::NoGpuFigures));
        let cpu = js1(r#"{"nodes":{"n":{"cpus":4,"used_memory":1}},"total_time":9}"#);
        assert_eq!(find(&cpu), Some(Jobstats::NoGpuFigures));
        assert_eq!(find("gpu-mem-quota:v1{} sku=x"), None);
        assert!(matches!(find("js1:h4siaaaa"), Some(Jobstats::Unreadable(m)) if m.contains("22.05")));
        assert_eq!(find(""), None);
    }

    #[test]
    fn a_broken_summary_says_why_and_never_panics() {
        for (text, why) in [
            ("JS1:abc", "length"),
            ("JS1:ab!d", "not base64"),
            ("JS1:aGVsbG8=", "not gzip"),
        ] {
            match find(text) {
                Some(Jobstats::Unreadable(message)) => assert!(message.contains(why), "{text}: {message}"),
                other => panic!("{text}: {other:?}"),
            }
        }
        let not_json = js1("nope");
        assert!(matches!(find(&not_json), Some(Jobstats::Unreadable(m)) if m.contains("not JSON")));
        let no_nodes = js1("{}");
        assert!(matches!(find(&no_nodes), Some(Jobstats::Unreadable(m)) if m.contains("nodes")));
    }

    #[test]
    fn a_gzip_bomb_is_refused() {
        let big = format!(r#"{{"nodes":{{}},"pad":"{}"}}"#, "x".repeat(2 << 20));
        assert!(matches!(find(&js1(&big)), Some(Jobstats::Unreadable(m)) if m.contains("inflates")));
    }
}
