//! The job's status file (`GPU_MEM_QUOTA_STATUS_FILE`): JSON a training loop can poll.
//! docs/HINTS.md has the reference; the shape:
//!
//! ```json
//! {"version":1,"job_id":12,"updated_at":"2026-11-30T06:00:00Z","state":"warn","quota_bytes":42949672960,
//!  "action":null,"gpus":[{"index":0,"uuid":"GPU-…","used_bytes":38654705664,"peak_bytes":38654705664,
//!  "quota_bytes":42949672960,"total_bytes":85899345920,"state":"warn"}],
//!  "prediction":{"gpu_index":0,"seconds_to_quota":240,"suggested_batch_scale":0.62}}
//! ```
//! `state` (job and per GPU): `ok`, `warn` (at or above the warn threshold, or a crossing predicted
//! within the horizon), `over-quota` (grace period running), `acted` (job only: requeued, held or
//! cancelled; `action` says which).
//!
//! `job_reported` (only where a task of the job wrote allocator telemetry, `crate::job_telemetry`):
//! per task, what the job's own allocator says, each entry marked `"source":"job-reported"`: the
//! job's word, shown to the admin and never a fact the watchdog enforces with.
//! ```json
//!  "job_reported":[{"source":"job-reported","task":0,"pid":4242,"updated_at":"2026-11-30T05:59:58Z",
//!    "allocator":{"allocated_bytes":30,"reserved_bytes":40,"peak_allocated_bytes":35,
//!                 "peak_reserved_bytes":40,"num_alloc_retries":1,"num_ooms":0,"fragmentation":0.25},
//!    "controller":null}],
//!  "job_reported_not_shown":1968
//! ```
//! At most `job_telemetry::MAX_TASKS_SHOWN` tasks (the lowest task numbers, one per process) are
//! listed; `job_reported_not_shown` (absent when 0) counts the rest, so the file stays small
//! however many files the job writes (review K3).

use serde::{Deserialize, Serialize};

use crate::job_telemetry::ReportedTask;

pub const VERSION: u64 = 1;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum JobHealth {
    Ok,
    Warn,
    OverQuota,
    Acted,
}

impl JobHealth {
    pub const fn name(self) -> &'static str {
        match self {
            JobHealth::Ok => "ok",
            JobHealth::Warn => "warn",
            JobHealth::OverQuota => "over-quota",
            JobHealth::Acted => "acted",
        }
    }
}

/// One GPU of the job. The watchdog writes every field; a reader takes a file without the ones
/// docs/HINTS.md does not promise (`total_bytes`) or that an older writer left out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuStatus {
    pub index: u32,
    #[serde(default)]
    pub uuid: String,
    pub used_bytes: u64,
    pub peak_bytes: u64,
    /// The job's quota on this GPU (the job's `quota_bytes`).
    #[serde(default)]
    pub quota_bytes: Option<u64>,
    #[serde(default)]
    pub total_bytes: Option<u64>,
    #[serde(rename = "state", default)]
    pub health: Option<JobHealth>,
    /// The driver's hard limit on this GPU for the job's cgroup (`nvmlDeviceSetMemoryLimits_v1`),
    /// when one is in force: an allocation past it fails at once. Absent: the watchdog alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hard_limit_bytes: Option<u64>,
}

/// The soonest predicted crossing of the quota.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PredictionStatus {
    pub(crate) gpu_index: u32,
    pub seconds_to_quota: u64,
    /// In hundredths (62 = 0.62), as `GPU_MEM_QUOTA_BATCH_SCALE`; a number (`0.62`) in the file.
    #[serde(with = "hundredths")]
    pub suggested_batch_scale: u32,
}

/// The status file, as the watchdog writes it and `gpu-mem-quota status` reads it. Fields in file
/// order; unknown fields are ignored when reading (docs/HINTS.md: readers must ignore them), and
/// the job-level ones docs/HINTS.md does not promise may be absent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Status {
    /// [`VERSION`]; a file without one is read as this version.
    #[serde(default = "version")]
    pub version: u64,
    pub job_id: u32,
    /// Unix seconds; RFC 3339 in UTC in the file (`2026-11-30T06:00:00Z`). A reader also takes a
    /// number of seconds, and reads a time it cannot parse, or could not write (past 9999), as none.
    #[serde(with = "unix_time", default)]
    pub updated_at: Option<u64>,
    #[serde(rename = "state", default)]
    pub health: Option<JobHealth>,
    #[serde(default)]
    pub quota_bytes: Option<u64>,
    /// `requeue`, `hold`, `cancel` once the watchdog acted.
    #[serde(default)]
    pub action: Option<String>,
    #[serde(default)]
    pub gpus: Vec<GpuStatus>,
    #[serde(default)]
    pub prediction: Option<PredictionStatus>,
    /// The job's own allocator telemetry on this node, by task: the job's word, not a measurement.
    /// Absent (not written) while no task wrote any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub job_reported: Vec<ReportedTask>,
    /// How many more tasks wrote telemetry here than `job_reported` shows (it shows at most
    /// `job_telemetry::MAX_TASKS_SHOWN`, one per process). Absent while none was left out.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub job_reported_not_shown: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn version() -> u64 {
    VERSION
}

impl Status {
    /// The file's text: compact JSON and a newline.
    pub fn to_json(&self) -> String {
        let mut text = serde_json::to_string(self).expect("a Status always serializes");
        text.push('\n');
        text
    }

    /// Reads a status file (any job's: the caller checks `job_id`).
    pub fn from_json(text: &str) -> Result<Status, String> {
        serde_json::from_str(text).map_err(|e| e.to_string())
    }
}

/// Unix seconds as RFC 3339 in UTC (`2026-11-30T06:00:00Z`); `None` past year 9999.
fn rfc3339(unix: u64) -> Option<String> {
    let at = time::OffsetDateTime::from_unix_timestamp(i64::try_from(unix).ok()?).ok()?;
    at.format(&time::format_description::well_known::Rfc3339).ok()
}

/// An RFC 3339 time as Unix seconds (fractions dropped); `None` for anything else, an invalid date
/// (`2026-02-31`) included, and for times before 1970.
fn parse_rfc3339(text: &str) -> Option<u64> {
    let at = time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339).ok()?;
    u64::try_from(at.unix_timestamp()).ok()
}

/// `updated_at`: written as RFC 3339; read from RFC 3339 or a number of seconds that can be written
/// back (a later one would make [`Status::to_json`] fail).
mod unix_time {
    use serde::{de::IgnoredAny, ser::Error, Deserialize, Deserializer, Serializer};

    pub(crate) fn serialize<S: Serializer>(unix: &Option<u64>, s: S) -> Result<S::Ok, S::Error> {
        match unix {
            Some(unix) => {
                let text = super::rfc3339(*unix).ok_or_else(|| S::Error::custom("time out of range"))?;
                s.serialize_str(&text)
            }
            None => s.serialize_none(),
        }
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Time {
            Unix(u64),
            Text(String),
            Other(IgnoredAny),
        }
        Ok(match Time::deserialize(d)? {
            Time::Unix(unix) => Some(unix).filter(|&unix| super::rfc3339(unix).is_some()),
            Time::Text(text) => super::parse_rfc3339(&text),
            Time::Other(_) => None,
        })
    }
}

/// `suggested_batch_scale`: hundredths in memory, a number with two decimals in the file.
mod hundredths {
    use serde::{de::Error, Deserialize, Deserializer, Serializer};

    pub(crate) fn serialize<S: Serializer>(n: &u32, s: S) -> Result<S::Ok, S::Error> {
        crate::json_number::rounded(&(f64::from(*n) / 100.0), s)
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
        let x = f64::deserialize(d)? * 100.0;
        if !(0.0..=f64::from(u32::MAX)).contains(&x) {
            return Err(D::Error::custom("suggested_batch_scale out of range"));
        }
        Ok(x.round() as u32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn example() -> Status {
        Status {
            version: VERSION,
            job_id: 12,
            updated_at: Some(0),
            health: Some(JobHealth::Warn),
            quota_bytes: Some(40),
            action: None,
            gpus: vec![GpuStatus {
                index: 0,
                uuid: "GPU-a".into(),
                used_bytes: 37,
                peak_bytes: 38,
                quota_bytes: Some(40),
                total_bytes: Some(80),
                health: Some(JobHealth::Warn),
                hard_limit_bytes: None,
            }],
            prediction: Some(PredictionStatus {
                gpu_index: 0,
                seconds_to_quota: 240,
                suggested_batch_scale: 62,
            }),
            job_reported: Vec::new(),
            job_reported_not_shown: 0,
        }
    }

    #[test]
    fn renders_the_documented_schema() {
        let status = example();
        assert_eq!(
            status.to_json(),
            "{\"version\":1,\"job_id\":12,\"updated_at\":\"1970-01-01T00:00:00Z\",\"state\":\"warn\",\
             \"quota_bytes\":40,\"action\":null,\"gpus\":[{\"index\":0,\"uuid\":\"GPU-a\",\"used_bytes\":37,\
             \"peak_bytes\":38,\"quota_bytes\":40,\"total_bytes\":80,\"state\":\"warn\"}],\
             \"prediction\":{\"gpu_index\":0,\"seconds_to_quota\":240,\"suggested_batch_scale\":0.62}}\n"
        );
        assert_eq!(Status::from_json(&status.to_json()), Ok(status));
    }

    #[test]
    fn the_jobs_telemetry_comes_last_marked_as_the_jobs_word() {
        let mut status = example();
        let written = status.to_json();
        status.job_reported = vec![ReportedTask {
            source: crate::job_telemetry::SOURCE.into(),
            task: 1,
            pid: 4242,
            updated_at: 60,
            allocator: crate::job_telemetry::AllocatorTelemetry {
                allocated_bytes: 30,
                reserved_bytes: 40,
                peak_allocated_bytes: 35,
                peak_reserved_bytes: 40,
                num_alloc_retries: 1,
                num_ooms: 0,
                fragmentation: 2500,
            },
            controller: None,
        }];
        let text = status.to_json();
        // Only an addition: what was written before stays as it was.
        assert_eq!(
            text,
            format!(
                "{},\"job_reported\":[{{\"source\":\"job-reported\",\"task\":1,\"pid\":4242,\
                 \"updated_at\":\"1970-01-01T00:01:00Z\",\"allocator\":{{\"allocated_bytes\":30,\
                 \"reserved_bytes\":40,\"peak_allocated_bytes\":35,\"peak_reserved_bytes\":40,\
                 \"num_alloc_retries\":1,\"num_ooms\":0,\"fragmentation\":0.25}},\"controller\":null}}]}}\n",
                written.strip_suffix("}\n").unwrap()
            )
        );
        assert_eq!(Status::from_json(&text), Ok(status));
    }

    /// However many telemetry files the job writes, its status file stays small (K3: one process's
    /// 100 000 files made 90 MB): the watchdog's tasks are capped, each task's text is bounded by
    /// the parser, and the rest is one number.
    #[test]
    fn the_status_file_stays_small_at_the_worst_telemetry() {
        let mut status = example();
        let mut shown = crate::job_telemetry::Shown::default();
        for task in 0..10_000 {
            shown.push(crate::job_telemetry::worst_case_task(task));
        }
        let shown = shown.finish();
        status.job_reported = shown.tasks;
        status.job_reported_not_shown = shown.not_shown;
        let text = status.to_json();
        assert_eq!(status.job_reported.len(), crate::job_telemetry::MAX_TASKS_SHOWN);
        assert!(text.len() <= 96 * 1024, "{} bytes", text.len());
        let expected = format!(
            ",\"job_reported_not_shown\":{}}}\n",
            10_000 - crate::job_telemetry::MAX_TASKS_SHOWN
        );
        assert!(text.ends_with(&expected), "{}", &text[text.len() - 80..]);
        assert_eq!(Status::from_json(&text), Ok(status));
    }

    #[test]
    fn a_whole_batch_scale_is_written_without_a_fraction() {
        let mut status = example();
        status.prediction = Some(PredictionStatus {
            gpu_index: 0,
            seconds_to_quota: 1,
            suggested_batch_scale: 100,
        });
        assert!(status.to_json().contains("\"suggested_batch_scale\":1}"));
        assert_eq!(Status::from_json(&status.to_json()), Ok(status));
    }

    #[test]
    fn dates() {
        assert_eq!(rfc3339(0).unwrap(), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400).unwrap(), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_796_018_770).unwrap(), "2026-11-30T06:06:10Z");
        for t in [0, 951_782_400, 1_796_018_770, 4_102_444_800] {
            assert_eq!(parse_rfc3339(&rfc3339(t).unwrap()), Some(t));
        }
        assert_eq!(parse_rfc3339("2026-13-01T00:00:00Z"), None);
        // The calendar is checked, not only 1..=31 (the hand-written parser read this as 3 March).
        assert_eq!(parse_rfc3339("2026-02-31T00:00:00Z"), None);
        assert_eq!(parse_rfc3339("2023-02-29T00:00:00Z"), None);
        assert_eq!(parse_rfc3339("2024-02-29T00:00:00Z"), Some(1_709_164_800));
        assert_eq!(parse_rfc3339("yesterday"), None);
        assert_eq!(parse_rfc3339("1969-12-31T23:59:59Z"), None);
        assert_eq!(rfc3339(u64::MAX), None);
    }

    #[test]
    fn reads_the_time_as_rfc3339_or_seconds_and_an_invalid_one_as_none() {
        let read = |at: &str| {
            Status::from_json(&format!("{{\"job_id\":1,\"updated_at\":{at}}}"))
                .unwrap()
                .updated_at
        };
        assert_eq!(read("\"2025-06-01T12:00:00Z\""), Some(1_748_779_200));
        assert_eq!(read("1000"), Some(1000));
        assert_eq!(read("\"2026-02-31T00:00:00Z\""), None);
        assert_eq!(read("null"), None);
        assert_eq!(read("true"), None);
        // Past year 9999: no RFC 3339 time to write it back as (found by fuzzing: to_json panicked).
        assert_eq!(read("253402300799"), Some(253_402_300_799));
        assert_eq!(read("253402300800"), None);
        assert_eq!(read("17996018777996018770"), None);
        let status = Status::from_json("{\"job_id\":4,\"updated_at\":17996018777996018770}").unwrap();
        assert_eq!(Status::from_json(&status.to_json()), Ok(status));
    }
}
