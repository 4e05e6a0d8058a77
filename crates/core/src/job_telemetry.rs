//! The job's own allocator telemetry (python/src/gpu_mem_quota/telemetry.py's `TelemetryWriter`):
//! the file's name and format, read strictly. Pure; gmq-node's `telemetry` finds and reads the
//! files.
//!
//! ```json
//! {"version":1,"source":"job-reported","job_id":12,"pid":4242,"updated_at":"2026-11-30T06:00:00Z",
//!  "allocator":{"allocated_bytes":30,"reserved_bytes":40,"peak_allocated_bytes":35,
//!               "peak_reserved_bytes":40,"num_alloc_retries":1,"num_ooms":0,"fragmentation":0.25},
//!  "controller":{"micro_batch":4,"grad_accum":2,"effective_batch":8,"activation_checkpointing":false,
//!                "capacity_bytes":42949672960,"last_decision":"step 3: shrink 8x1 -> 4x2: ..."}}
//! ```
//! `controller` may be `null`. The job writes the file in its own space and can write anything
//! there: what is read is the job's word, shown as such (the status file's `job_reported`, the
//! `gpu_mem_quota_job_reported_*` metrics), and never a fact the watchdog enforces with. Hence the
//! strictness: a size cap before parsing, the one known version, numbers that are whole,
//! non-negative and within what a GPU can hold, short strings without control characters, and an
//! error that names the key. Keys this version does not know are ignored (a later writer of the
//! same version may add some).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

pub(crate) const VERSION: u64 = 1;
/// The `source` every file carries, and every status-file entry made from one.
pub const SOURCE: &str = "job-reported";
/// The most a telemetry file may hold: the writer's is under 1 KiB.
pub const MAX_FILE_BYTES: usize = 64 * 1024;
/// The most characters a string may have (`last_decision`, `updated_at`).
pub const MAX_TEXT_CHARS: usize = 512;
/// The most bytes a figure may say: 1 PiB, far above any GPU's memory.
pub const MAX_BYTES: u64 = 1 << 50;
/// The most a count (retries, OOMs, batch sizes) may say.
pub const MAX_COUNT: u64 = 1 << 40;

const FILE_PREFIX: &str = "gpu-mem-quota-telemetry.";
const FILE_SUFFIX: &str = ".json";

/// The file a task of a job writes in its working directory by default:
/// `gpu-mem-quota-telemetry.<job>.<task>.json`.
pub fn file_name(job_id: u32, task: u32) -> String {
    format!("{FILE_PREFIX}{job_id}.{task}{FILE_SUFFIX}")
}

/// The task of a telemetry file of job `job_id`, if `name` is exactly one ([`file_name`]: decimal
/// numbers without a sign or leading zeros). Every other name, the writer's `.<name>.tmp` included,
/// is not one.
pub fn task_of_file_name(name: &str, job_id: u32) -> Option<u32> {
    let rest = name.strip_prefix(FILE_PREFIX)?.strip_suffix(FILE_SUFFIX)?;
    let (job, task) = rest.split_once('.')?;
    (canonical_number(job)? == job_id).then_some(())?;
    canonical_number(task)
}

fn canonical_number(text: &str) -> Option<u32> {
    let plain = !text.is_empty()
        && text.bytes().all(|b| b.is_ascii_digit())
        && (text.len() == 1 || !text.starts_with('0'));
    plain.then(|| text.parse().ok()).flatten()
}

/// What the job's allocator said (PyTorch's caching allocator, as `torch.cuda.memory_stats`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AllocatorTelemetry {
    pub allocated_bytes: u64,
    pub reserved_bytes: u64,
    pub peak_allocated_bytes: u64,
    pub peak_reserved_bytes: u64,
    /// The allocator freed its cache and retried a `cudaMalloc`.
    pub num_alloc_retries: u64,
    pub num_ooms: u64,
    /// 1 − allocated/reserved as the job computed it, in ten-thousandths (2500 = 0.25): the share
    /// of what the process holds that it cannot use now. A number (`0.25`) in the files.
    #[serde(with = "ten_thousandths")]
    pub fragmentation: u32,
}

/// What the job's batch controller said (python's `BatchController`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ControllerTelemetry {
    pub(crate) micro_batch: u64,
    pub(crate) grad_accum: u64,
    pub(crate) effective_batch: u64,
    pub(crate) activation_checkpointing: bool,
    pub(crate) capacity_bytes: Option<u64>,
    pub last_decision: Option<String>,
}

/// One telemetry file, as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobTelemetry {
    /// `null` where the writer had no `SLURM_JOB_ID`.
    pub job_id: Option<u32>,
    /// The writer's pid, in its own pid namespace.
    pub pid: u32,
    /// Unix seconds (RFC 3339 in the file).
    pub updated_at: u64,
    pub allocator: AllocatorTelemetry,
    pub controller: Option<ControllerTelemetry>,
}

/// One task's telemetry on this node, as the watchdog shows it: in the status file's
/// `job_reported` (`source` first, to say whose word it is) and in the metrics.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReportedTask {
    /// Always [`SOURCE`].
    #[serde(default = "source")]
    pub source: String,
    /// From the file's name (`SLURM_PROCID`).
    pub task: u32,
    pub pid: u32,
    #[serde(with = "rfc3339")]
    pub updated_at: u64,
    pub allocator: AllocatorTelemetry,
    #[serde(default)]
    pub controller: Option<ControllerTelemetry>,
}

fn source() -> String {
    SOURCE.to_string()
}

impl ReportedTask {
    pub fn new(task: u32, telemetry: JobTelemetry) -> ReportedTask {
        ReportedTask {
            source: source(),
            task,
            pid: telemetry.pid,
            updated_at: telemetry.updated_at,
            allocator: telemetry.allocator,
            controller: telemetry.controller,
        }
    }
}

/// The most tasks of a job one node shows (status file, metrics): the lowest task numbers, one per
/// process. Why 32: a node has at most eight GPUs in the common case (an HGX/DGX board), and a job
/// runs at most a few ranks on each (MPS, shards): 8 × 4. A job can write any number of files (one
/// process wrote 100 000 in the review, K3: a 90 MB status file, 800 000 Prometheus series); past
/// this they are only counted ([`Shown::not_shown`]). What is shown is the job's word and nothing
/// decides on it, so a task left out costs the admin one task's figures, never enforcement.
pub const MAX_TASKS_SHOWN: usize = 32;

/// What one node shows of a job's telemetry: at most [`MAX_TASKS_SHOWN`] tasks, and how many more
/// it read and did not show. Built by [`Shown::push`] (memory stays bounded however many files
/// are read) and [`Shown::finish`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Shown {
    /// Sorted by `(task, pid)`.
    pub tasks: Vec<ReportedTask>,
    /// Tasks read and valid but not shown: past the cap, or a second file of one process.
    pub not_shown: u64,
}

impl Shown {
    /// Takes `task` as read; the tasks held are cut back to the cap whenever they reach twice it.
    pub fn push(&mut self, task: ReportedTask) {
        self.tasks.push(task);
        if self.tasks.len() >= 2 * MAX_TASKS_SHOWN {
            self.cut(MAX_TASKS_SHOWN);
        }
    }

    /// What is shown once every task has been pushed.
    pub fn finish(mut self) -> Shown {
        self.cut(MAX_TASKS_SHOWN);
        self
    }

    fn cut(&mut self, max: usize) {
        let read = self.tasks.len();
        self.tasks = shown(std::mem::take(&mut self.tasks), max);
        self.not_shown += (read - self.tasks.len()) as u64;
    }
}

/// Which of `tasks` are shown, at most `max` of them: for each process (`pid`) only its lowest
/// task number (a process is one Slurm task and writes one file: more are the job's flood), then
/// the lowest `(task, pid)`. The rest are left out. Pure, and the same answer whether applied
/// once to all the tasks or again to what it kept plus more (so [`Shown::push`] may cut early).
pub(crate) fn shown(mut tasks: Vec<ReportedTask>, max: usize) -> Vec<ReportedTask> {
    tasks.sort_by_key(|t| (t.task, t.pid));
    let mut pids = std::collections::BTreeSet::new();
    tasks.retain(|t| pids.insert(t.pid));
    tasks.truncate(max);
    tasks
}

/// A task as the worst a file can say (for the tests of what is written from it): the largest
/// figures, and the longest text with the most bytes (four UTF-8 bytes each, and quotes, which
/// JSON escapes).
#[cfg(test)]
pub(crate) fn worst_case_task(task: u32) -> ReportedTask {
    ReportedTask {
        source: SOURCE.into(),
        task,
        pid: u32::MAX - task,
        updated_at: 253_402_300_799,
        allocator: AllocatorTelemetry {
            allocated_bytes: MAX_BYTES,
            reserved_bytes: MAX_BYTES,
            peak_allocated_bytes: MAX_BYTES,
            peak_reserved_bytes: MAX_BYTES,
            num_alloc_retries: MAX_COUNT,
            num_ooms: MAX_COUNT,
            fragmentation: 1234,
        },
        controller: Some(ControllerTelemetry {
            micro_batch: MAX_COUNT,
            grad_accum: MAX_COUNT,
            effective_batch: MAX_COUNT,
            activation_checkpointing: true,
            capacity_bytes: Some(MAX_BYTES),
            last_decision: Some("\u{1F600}".repeat(MAX_TEXT_CHARS)),
        }),
    }
}

/// Why a file was not taken: the file, the key (dotted, `allocator.reserved_bytes`; none for the
/// file as a whole) and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TelemetryError {
    pub(crate) file: String,
    pub(crate) key: Option<String>,
    pub(crate) why: String,
}

impl std::fmt::Display for TelemetryError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.key {
            Some(key) => write!(f, "{}: {key}: {}", self.file, self.why),
            None => write!(f, "{}: {}", self.file, self.why),
        }
    }
}

impl std::error::Error for TelemetryError {}

/// What is wrong, and where, before the file's name is added.
type Wrong = (Option<String>, String);

fn wrong(key: &str, why: impl Into<String>) -> Wrong {
    (Some(key.to_string()), why.into())
}

/// Reads the telemetry file `file` (its name, for the error) whose content is `bytes`: refused
/// when over [`MAX_FILE_BYTES`] before anything is parsed.
pub fn parse(file: &str, bytes: &[u8]) -> Result<JobTelemetry, TelemetryError> {
    parse_document(bytes).map_err(|(key, why)| TelemetryError {
        file: file.to_string(),
        key,
        why,
    })
}

fn parse_document(bytes: &[u8]) -> Result<JobTelemetry, Wrong> {
    if bytes.len() > MAX_FILE_BYTES {
        return Err((None, format!("larger than {MAX_FILE_BYTES} bytes")));
    }
    let text = std::str::from_utf8(bytes).map_err(|_| (None, "not UTF-8".to_string()))?;
    let value: Value = serde_json::from_str(text).map_err(|e| (None, format!("not JSON: {e}")))?;
    let Value::Object(top) = value else {
        return Err((None, "not a JSON object".into()));
    };
    let version = whole(&top, "version", "version", u64::MAX)?;
    if version != VERSION {
        return Err(wrong(
            "version",
            format!("{version} is not a known version ({VERSION})"),
        ));
    }
    match text_of(&top, "source", "source")? {
        Some(s) if s == SOURCE => {}
        _ => return Err(wrong("source", format!("must be \"{SOURCE}\""))),
    }
    let job_id = match top.get("job_id") {
        None | Some(Value::Null) => None,
        Some(_) => Some(whole(&top, "job_id", "job_id", u64::from(u32::MAX))? as u32),
    };
    let pid = whole(&top, "pid", "pid", u64::from(u32::MAX))? as u32;
    let updated_at = match text_of(&top, "updated_at", "updated_at")? {
        Some(at) => {
            parse_rfc3339(at).ok_or_else(|| wrong("updated_at", "not an RFC 3339 time after 1970"))?
        }
        None => return Err(wrong("updated_at", "missing")),
    };
    let allocator =
        allocator(object(&top, "allocator", "allocator")?.ok_or_else(|| wrong("allocator", "missing"))?)?;
    let controller = object(&top, "controller", "controller")?
        .map(controller)
        .transpose()?;
    Ok(JobTelemetry {
        job_id,
        pid,
        updated_at,
        allocator,
        controller,
    })
}

fn allocator(map: &Map<String, Value>) -> Result<AllocatorTelemetry, Wrong> {
    let bytes = |name: &str| whole(map, name, &format!("allocator.{name}"), MAX_BYTES);
    let count = |name: &str| whole(map, name, &format!("allocator.{name}"), MAX_COUNT);
    let allocated_bytes = bytes("allocated_bytes")?;
    let reserved_bytes = bytes("reserved_bytes")?;
    let peak_allocated_bytes = bytes("peak_allocated_bytes")?;
    let peak_reserved_bytes = bytes("peak_reserved_bytes")?;
    // What a caching allocator cannot say: it allocates out of what it reserved, and a peak is at
    // least the present.
    if allocated_bytes > reserved_bytes {
        return Err(wrong("allocator.allocated_bytes", "more than reserved_bytes"));
    }
    if peak_allocated_bytes < allocated_bytes {
        return Err(wrong(
            "allocator.peak_allocated_bytes",
            "less than allocated_bytes",
        ));
    }
    if peak_reserved_bytes < reserved_bytes {
        return Err(wrong("allocator.peak_reserved_bytes", "less than reserved_bytes"));
    }
    let fragmentation = match map.get("fragmentation") {
        Some(Value::Number(n)) => n
            .as_f64()
            .filter(|x| (0.0..=1.0).contains(x))
            .map(|x| (x * 10_000.0).round() as u32)
            .ok_or_else(|| wrong("allocator.fragmentation", "not a number from 0 to 1"))?,
        Some(_) => return Err(wrong("allocator.fragmentation", "not a number from 0 to 1")),
        None => return Err(wrong("allocator.fragmentation", "missing")),
    };
    Ok(AllocatorTelemetry {
        allocated_bytes,
        reserved_bytes,
        peak_allocated_bytes,
        peak_reserved_bytes,
        num_alloc_retries: count("num_alloc_retries")?,
        num_ooms: count("num_ooms")?,
        fragmentation,
    })
}

fn controller(map: &Map<String, Value>) -> Result<ControllerTelemetry, Wrong> {
    let count = |name: &str| whole(map, name, &format!("controller.{name}"), MAX_COUNT);
    let activation_checkpointing = match map.get("activation_checkpointing") {
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(wrong("controller.activation_checkpointing", "not true or false")),
        None => return Err(wrong("controller.activation_checkpointing", "missing")),
    };
    let capacity_bytes = match map.get("capacity_bytes") {
        None | Some(Value::Null) => None,
        Some(_) => Some(whole(
            map,
            "capacity_bytes",
            "controller.capacity_bytes",
            MAX_BYTES,
        )?),
    };
    Ok(ControllerTelemetry {
        micro_batch: count("micro_batch")?,
        grad_accum: count("grad_accum")?,
        effective_batch: count("effective_batch")?,
        activation_checkpointing,
        capacity_bytes,
        last_decision: text_of(map, "last_decision", "controller.last_decision")?.map(str::to_string),
    })
}

/// `map[name]`: a whole number from 0 to `max` (`1.0` and `-1` are not). `key` names it in errors.
fn whole(map: &Map<String, Value>, name: &str, key: &str, max: u64) -> Result<u64, Wrong> {
    match map.get(name) {
        None => Err(wrong(key, "missing")),
        Some(Value::Number(n)) => match n.as_u64() {
            Some(x) if x <= max => Ok(x),
            Some(_) => Err(wrong(key, format!("larger than {max}"))),
            None => Err(wrong(key, "not a whole number from 0")),
        },
        Some(_) => Err(wrong(key, "not a number")),
    }
}

/// `map[name]`: `None` when missing or `null`; else a string of at most [`MAX_TEXT_CHARS`]
/// characters, none a control character (it is printed on terminals).
fn text_of<'a>(map: &'a Map<String, Value>, name: &str, key: &str) -> Result<Option<&'a str>, Wrong> {
    match map.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.chars().count() > MAX_TEXT_CHARS => {
            Err(wrong(key, format!("longer than {MAX_TEXT_CHARS} characters")))
        }
        Some(Value::String(s)) if s.chars().any(char::is_control) => {
            Err(wrong(key, "has a control character"))
        }
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(wrong(key, "not a string")),
    }
}

/// `map[name]`: `None` when missing or `null`; else an object.
fn object<'a>(
    map: &'a Map<String, Value>,
    name: &str,
    key: &str,
) -> Result<Option<&'a Map<String, Value>>, Wrong> {
    match map.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(inner)) => Ok(Some(inner)),
        Some(_) => Err(wrong(key, "not an object")),
    }
}

/// An RFC 3339 time as Unix seconds (fractions dropped); `None` for anything else and before 1970.
fn parse_rfc3339(text: &str) -> Option<u64> {
    let at = time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339).ok()?;
    u64::try_from(at.unix_timestamp()).ok()
}

/// `updated_at`: Unix seconds in memory, RFC 3339 in UTC in the status file.
mod rfc3339 {
    use serde::{de::Error as _, ser::Error as _, Deserialize, Deserializer, Serializer};

    pub(crate) fn serialize<S: Serializer>(unix: &u64, s: S) -> Result<S::Ok, S::Error> {
        let at = i64::try_from(*unix)
            .ok()
            .and_then(|t| time::OffsetDateTime::from_unix_timestamp(t).ok())
            .and_then(|at| at.format(&time::format_description::well_known::Rfc3339).ok())
            .ok_or_else(|| S::Error::custom("time out of range"))?;
        s.serialize_str(&at)
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        super::parse_rfc3339(&String::deserialize(d)?).ok_or_else(|| D::Error::custom("not an RFC 3339 time"))
    }
}

/// `fragmentation`: ten-thousandths in memory, a number from 0 to 1 in the files.
mod ten_thousandths {
    use serde::{de::Error as _, Deserialize, Deserializer, Serializer};

    pub(crate) fn serialize<S: Serializer>(n: &u32, s: S) -> Result<S::Ok, S::Error> {
        match *n {
            0 => s.serialize_u64(0),
            10_000 => s.serialize_u64(1),
            n => s.serialize_f64(f64::from(n) / 10_000.0),
        }
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
        let x = f64::deserialize(d)?;
        if !(0.0..=1.0).contains(&x) {
            return Err(D::Error::custom("fragmentation out of range"));
        }
        Ok((x * 10_000.0).round() as u32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What python's `TelemetryWriter` writes (indented, as it does).
    const WRITTEN: &str = r#"{
  "version": 1,
  "source": "job-reported",
  "job_id": 12,
  "pid": 4242,
  "updated_at": "2026-11-30T06:00:00Z",
  "allocator": {
    "allocated_bytes": 30,
    "reserved_bytes": 40,
    "peak_allocated_bytes": 35,
    "peak_reserved_bytes": 40,
    "num_alloc_retries": 1,
    "num_ooms": 0,
    "fragmentation": 0.25
  },
  "controller": {
    "micro_batch": 4,
    "grad_accum": 2,
    "effective_batch": 8,
    "activation_checkpointing": false,
    "capacity_bytes": null,
    "last_decision": "step 3: shrink 8x1 -> 4x2: predicted 3 MiB"
  }
}
"#;

    fn written() -> JobTelemetry {
        JobTelemetry {
            job_id: Some(12),
            pid: 4242,
            updated_at: 1_796_018_400,
            allocator: AllocatorTelemetry {
                allocated_bytes: 30,
                reserved_bytes: 40,
                peak_allocated_bytes: 35,
                peak_reserved_bytes: 40,
                num_alloc_retries: 1,
                num_ooms: 0,
                fragmentation: 2500,
            },
            controller: Some(ControllerTelemetry {
                micro_batch: 4,
                grad_accum: 2,
                effective_batch: 8,
                activation_checkpointing: false,
                capacity_bytes: None,
                last_decision: Some("step 3: shrink 8x1 -> 4x2: predicted 3 MiB".into()),
            }),
        }
    }

    /// [`WRITTEN`] with one value replaced (`"key": value` as written), or the text given.
    fn with(old: &str, new: &str) -> String {
        assert!(WRITTEN.contains(old), "{old}");
        WRITTEN.replacen(old, new, 1)
    }

    #[test]
    fn reads_what_the_python_writer_writes() {
        assert_eq!(parse("t.json", WRITTEN.as_bytes()), Ok(written()));
        let mut none = written();
        none.controller = None;
        none.job_id = None;
        let text = with("\"job_id\": 12", "\"job_id\": null");
        let text = text[..text.find("\"controller\"").unwrap()].to_string() + "\"controller\": null}";
        assert_eq!(parse("t.json", text.as_bytes()), Ok(none));
        // A key this version does not know is ignored; fractions of a second are dropped.
        let text = with("\"pid\": 4242", "\"pid\": 4242, \"host\": \"n1\"");
        assert_eq!(parse("t.json", text.as_bytes()), Ok(written()));
        let text = with("06:00:00Z", "06:00:00.75+00:00");
        assert_eq!(parse("t.json", text.as_bytes()), Ok(written()));
    }

    #[test]
    fn refuses_malformed_files_naming_the_key() {
        let long = format!("\"last_decision\": \"{}\"", "x".repeat(MAX_TEXT_CHARS + 1));
        // (what the file says, the key named, or None for the file as a whole)
        let table: Vec<(String, Option<&str>)> = vec![
            (String::new(), None),
            ("[]".into(), None),
            ("{\"version\": 1".into(), None),
            (with("\"version\": 1", "\"version\": 2"), Some("version")),
            (with("\"version\": 1", "\"version\": \"1\""), Some("version")),
            (with("\"version\": 1,", ""), Some("version")),
            (with("\"job-reported\"", "\"measured\""), Some("source")),
            (with("\"source\": \"job-reported\",", ""), Some("source")),
            (with("\"job_id\": 12", "\"job_id\": -12"), Some("job_id")),
            (with("\"job_id\": 12", "\"job_id\": 4294967296"), Some("job_id")),
            (with("\"pid\": 4242", "\"pid\": 4242.0"), Some("pid")),
            (with("\"pid\": 4242", "\"pid\": true"), Some("pid")),
            (
                with("\"2026-11-30T06:00:00Z\"", "\"yesterday\""),
                Some("updated_at"),
            ),
            (with("\"2026-11-30T06:00:00Z\"", "1796018400"), Some("updated_at")),
            (
                with("\"2026-11-30T06:00:00Z\"", "\"1969-12-31T23:59:59Z\""),
                Some("updated_at"),
            ),
            (
                with("\"allocated_bytes\": 30", "\"allocated_bytes\": -30"),
                Some("allocator.allocated_bytes"),
            ),
            (
                with("\"allocated_bytes\": 30", "\"allocated_bytes\": 41"),
                Some("allocator.allocated_bytes"),
            ),
            (
                with("\"reserved_bytes\": 40", "\"reserved_bytes\": 1e20"),
                Some("allocator.reserved_bytes"),
            ),
            (
                with("\"reserved_bytes\": 40", "\"reserved_bytes\": 1125899906842625"),
                Some("allocator.reserved_bytes"),
            ),
            (
                with("\"peak_allocated_bytes\": 35", "\"peak_allocated_bytes\": 29"),
                Some("allocator.peak_allocated_bytes"),
            ),
            (
                with("\"peak_reserved_bytes\": 40", "\"peak_reserved_bytes\": 39"),
                Some("allocator.peak_reserved_bytes"),
            ),
            (
                with("\"num_ooms\": 0", "\"num_ooms\": null"),
                Some("allocator.num_ooms"),
            ),
            (with("\"num_ooms\": 0,", ""), Some("allocator.num_ooms")),
            (
                with("\"fragmentation\": 0.25", "\"fragmentation\": 1.5"),
                Some("allocator.fragmentation"),
            ),
            (
                with("\"fragmentation\": 0.25", "\"fragmentation\": -0.1"),
                Some("allocator.fragmentation"),
            ),
            (
                with("\"fragmentation\": 0.25", "\"fragmentation\": \"a\""),
                Some("allocator.fragmentation"),
            ),
            (
                with("\"allocator\": {", "\"allocator\": 3, \"x\": {"),
                Some("allocator"),
            ),
            (
                with("\"controller\": {", "\"controller\": [], \"x\": {"),
                Some("controller"),
            ),
            (
                with("\"micro_batch\": 4", "\"micro_batch\": \"4\""),
                Some("controller.micro_batch"),
            ),
            (
                with(
                    "\"activation_checkpointing\": false",
                    "\"activation_checkpointing\": 0",
                ),
                Some("controller.activation_checkpointing"),
            ),
            (
                with("\"capacity_bytes\": null", "\"capacity_bytes\": -1"),
                Some("controller.capacity_bytes"),
            ),
            (
                with(
                    "\"last_decision\": \"step 3: shrink 8x1 -> 4x2: predicted 3 MiB\"",
                    &long,
                ),
                Some("controller.last_decision"),
            ),
            (
                with("predicted 3 MiB", "predicted\\u001b[2J 3 MiB"),
                Some("controller.last_decision"),
            ),
            (
                with("predicted 3 MiB", "predicted\\n3 MiB"),
                Some("controller.last_decision"),
            ),
        ];
        for (text, key) in table {
            let e = parse("/w/gpu-mem-quota-telemetry.12.0.json", text.as_bytes()).unwrap_err();
            assert_eq!(e.key.as_deref(), key, "{text}: {e}");
            assert!(
                e.to_string()
                    .starts_with("/w/gpu-mem-quota-telemetry.12.0.json: "),
                "{e}"
            );
            if let Some(key) = key {
                assert!(e.to_string().contains(&format!(": {key}: ")), "{e}");
            }
        }
    }

    #[test]
    fn refuses_an_oversize_file_before_parsing_it() {
        let mut big = WRITTEN.trim_end().to_string();
        big.insert_str(1, &" ".repeat(MAX_FILE_BYTES));
        let e = parse("t.json", big.as_bytes()).unwrap_err();
        assert_eq!(
            (e.key, e.why),
            (None, format!("larger than {MAX_FILE_BYTES} bytes"))
        );
        let e = parse("t.json", b"{\"version\":1,\xff}").unwrap_err();
        assert_eq!(e.why, "not UTF-8");
        // Deep nesting is refused by the JSON parser's own depth limit, not a stack overflow.
        let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
        assert!(parse("t.json", deep.as_bytes()).is_err());
    }

    #[test]
    fn file_names() {
        assert_eq!(file_name(12, 3), "gpu-mem-quota-telemetry.12.3.json");
        assert_eq!(
            task_of_file_name("gpu-mem-quota-telemetry.12.3.json", 12),
            Some(3)
        );
        assert_eq!(
            task_of_file_name("gpu-mem-quota-telemetry.12.0.json", 12),
            Some(0)
        );
        for other in [
            "gpu-mem-quota-telemetry.13.3.json",
            "gpu-mem-quota-telemetry.012.3.json",
            "gpu-mem-quota-telemetry.12.03.json",
            "gpu-mem-quota-telemetry.12.+3.json",
            "gpu-mem-quota-telemetry.12..json",
            "gpu-mem-quota-telemetry.12.3.4.json",
            "gpu-mem-quota-telemetry.12.local.json",
            "gpu-mem-quota-telemetry.local.0.json",
            "gpu-mem-quota-telemetry.12.99999999999.json",
            ".gpu-mem-quota-telemetry.12.3.json.tmp",
            "gpu-mem-quota-telemetry.12.3.json.tmp",
            "gpu-mem-quota-telemetry.12.json",
        ] {
            assert_eq!(task_of_file_name(other, 12), None, "{other}");
        }
    }

    /// A task `task` written by process `pid`, its allocated bytes saying which file it was.
    fn task(task: u32, pid: u32, file: u64) -> ReportedTask {
        let mut t = ReportedTask::new(task, written());
        t.pid = pid;
        t.allocator.allocated_bytes = file;
        t
    }

    fn ids(tasks: &[ReportedTask]) -> Vec<(u32, u32, u64)> {
        tasks
            .iter()
            .map(|t| (t.task, t.pid, t.allocator.allocated_bytes))
            .collect()
    }

    #[test]
    fn the_lowest_tasks_are_shown_one_per_process() {
        // (tasks read as (task, pid, file), the cap, shown)
        type Case = (Vec<(u32, u32, u64)>, usize, Vec<(u32, u32, u64)>);
        let table: Vec<Case> = vec![
            (vec![], 3, vec![]),
            (vec![(1, 11, 0), (0, 10, 1)], 3, vec![(0, 10, 1), (1, 11, 0)]),
            // Past the cap: the lowest task numbers.
            (
                vec![(3, 13, 0), (0, 10, 1), (2, 12, 2), (1, 11, 3)],
                2,
                vec![(0, 10, 1), (1, 11, 3)],
            ),
            // One process's many files (K3): its lowest task only, whatever order they came in.
            (
                vec![(7, 10, 0), (5, 10, 1), (900, 10, 2), (6, 11, 3)],
                3,
                vec![(5, 10, 1), (6, 11, 3)],
            ),
            // Two processes writing one task number (a mistake of the job's): both, by pid.
            (vec![(0, 11, 0), (0, 10, 1)], 3, vec![(0, 10, 1), (0, 11, 0)]),
            // One file seen twice (two directories, one process): the first read.
            (vec![(0, 10, 0), (0, 10, 1)], 3, vec![(0, 10, 0)]),
            (vec![(0, 10, 0)], 0, vec![]),
        ];
        for (read, max, want) in table {
            let tasks = read.iter().map(|&(t, p, f)| task(t, p, f)).collect();
            assert_eq!(ids(&shown(tasks, max)), want, "{read:?} cap {max}");
        }
    }

    #[test]
    fn a_flood_of_files_is_shown_as_the_capped_few_and_a_count() {
        // 5 000 tasks of 300 processes in a scrambled order, pushed one by one (cut on the way),
        // show what one cut of them all shows.
        let mut all = Vec::new();
        let mut shown_so = Shown::default();
        let mut x: u64 = 1;
        for n in 0..5_000u64 {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            let t = task((x >> 40) as u32 % 100_000, 1000 + (x >> 20) as u32 % 300, n);
            all.push(t.clone());
            shown_so.push(t);
            assert!(shown_so.tasks.len() < 2 * MAX_TASKS_SHOWN);
        }
        let once = shown(all.clone(), MAX_TASKS_SHOWN);
        let pushed = shown_so.finish();
        assert_eq!(once.len(), MAX_TASKS_SHOWN);
        assert_eq!(ids(&pushed.tasks), ids(&once));
        assert_eq!(pushed.not_shown, (all.len() - MAX_TASKS_SHOWN) as u64);
        // Within the cap, nothing is left out.
        let mut few = Shown::default();
        for n in 0..MAX_TASKS_SHOWN as u32 {
            few.push(task(n, 100 + n, 0));
        }
        let few = few.finish();
        assert_eq!((few.tasks.len(), few.not_shown), (MAX_TASKS_SHOWN, 0));
    }

    #[test]
    fn a_reported_task_renders_marked_as_the_jobs_word_and_reads_back() {
        let task = ReportedTask::new(3, written());
        let text = serde_json::to_string(&task).unwrap();
        assert!(
            text.starts_with("{\"source\":\"job-reported\",\"task\":3,\"pid\":4242,\"updated_at\":\"2026-11-30T06:00:00Z\""),
            "{text}"
        );
        assert!(
            text.contains("\"fragmentation\":0.25,") || text.contains("\"fragmentation\":0.25}"),
            "{text}"
        );
        assert_eq!(serde_json::from_str::<ReportedTask>(&text).unwrap(), task);
        for (n, want) in [(0, "0"), (10_000, "1"), (1, "0.0001"), (1234, "0.1234")] {
            let mut t = task.clone();
            t.allocator.fragmentation = n;
            let text = serde_json::to_string(&t).unwrap();
            assert!(text.contains(&format!("\"fragmentation\":{want}}}")), "{text}");
            assert_eq!(serde_json::from_str::<ReportedTask>(&text).unwrap(), t);
        }
    }
}
