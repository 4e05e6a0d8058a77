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

use crate::json::Json;

pub const VERSION: u64 = 1;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuStatus {
    pub index: u32,
    pub uuid: String,
    pub used_bytes: u64,
    pub peak_bytes: u64,
    pub total_bytes: u64,
    pub health: JobHealth,
}

/// The soonest predicted crossing of the quota.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PredictionStatus {
    pub gpu_index: u32,
    pub seconds_to_quota: u64,
    /// In hundredths (62 = 0.62), as `GPU_MEM_QUOTA_BATCH_SCALE`.
    pub suggested_batch_scale: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    pub job_id: u32,
    /// Unix seconds.
    pub updated_at: u64,
    pub health: JobHealth,
    pub quota_bytes: Option<u64>,
    pub action: Option<&'static str>,
    pub gpus: Vec<GpuStatus>,
    pub prediction: Option<PredictionStatus>,
}

impl Status {
    pub fn to_json(&self) -> String {
        let quota = self.quota_bytes.map(Json::Int).unwrap_or(Json::Null);
        let gpus = self
            .gpus
            .iter()
            .map(|g| {
                Json::Obj(vec![
                    ("index", Json::Int(g.index.into())),
                    ("uuid", Json::str(&g.uuid)),
                    ("used_bytes", Json::Int(g.used_bytes)),
                    ("peak_bytes", Json::Int(g.peak_bytes)),
                    ("quota_bytes", quota.clone()),
                    ("total_bytes", Json::Int(g.total_bytes)),
                    ("state", Json::str(g.health.name())),
                ])
            })
            .collect();
        let prediction = match self.prediction {
            None => Json::Null,
            Some(p) => Json::Obj(vec![
                ("gpu_index", Json::Int(p.gpu_index.into())),
                ("seconds_to_quota", Json::Int(p.seconds_to_quota)),
                (
                    "suggested_batch_scale",
                    Json::Num(f64::from(p.suggested_batch_scale) / 100.0),
                ),
            ]),
        };
        let mut text = Json::Obj(vec![
            ("version", Json::Int(VERSION)),
            ("job_id", Json::Int(self.job_id.into())),
            ("updated_at", Json::str(rfc3339(self.updated_at))),
            ("state", Json::str(self.health.name())),
            ("quota_bytes", quota),
            ("action", self.action.map(Json::str).unwrap_or(Json::Null)),
            ("gpus", Json::Arr(gpus)),
            ("prediction", prediction),
        ])
        .render();
        text.push('\n');
        text
    }
}

/// Unix seconds as RFC 3339 in UTC (`2026-11-30T06:00:00Z`), by the civil-from-days algorithm.
pub fn rfc3339(unix: u64) -> String {
    let days = (unix / 86_400) as i64;
    let secs = unix % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}

/// The inverse of [`rfc3339`] for its own form (`YYYY-MM-DDTHH:MM:SSZ`); `None` for anything else.
pub fn parse_rfc3339(text: &str) -> Option<u64> {
    let b = text.as_bytes();
    if b.len() != 20
        || b[4] != b'-'
        || b[7] != b'-'
        || b[10] != b'T'
        || b[13] != b':'
        || b[16] != b':'
        || b[19] != b'Z'
    {
        return None;
    }
    let num = |r: std::ops::Range<usize>| text.get(r)?.parse::<i64>().ok();
    let (y, m, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hh, mm, ss) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) || hh > 23 || mm > 59 || ss > 60 {
        return None;
    }
    // Days from civil (the inverse of the algorithm in `rfc3339`).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    u64::try_from(days * 86_400 + hh * 3600 + mm * 60 + ss).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_the_documented_schema() {
        let status = Status {
            job_id: 12,
            updated_at: 0,
            health: JobHealth::Warn,
            quota_bytes: Some(40),
            action: None,
            gpus: vec![GpuStatus {
                index: 0,
                uuid: "GPU-a".into(),
                used_bytes: 37,
                peak_bytes: 38,
                total_bytes: 80,
                health: JobHealth::Warn,
            }],
            prediction: Some(PredictionStatus {
                gpu_index: 0,
                seconds_to_quota: 240,
                suggested_batch_scale: 62,
            }),
        };
        assert_eq!(
            status.to_json(),
            "{\"version\":1,\"job_id\":12,\"updated_at\":\"1970-01-01T00:00:00Z\",\"state\":\"warn\",\
             \"quota_bytes\":40,\"action\":null,\"gpus\":[{\"index\":0,\"uuid\":\"GPU-a\",\"used_bytes\":37,\
             \"peak_bytes\":38,\"quota_bytes\":40,\"total_bytes\":80,\"state\":\"warn\"}],\
             \"prediction\":{\"gpu_index\":0,\"seconds_to_quota\":240,\"suggested_batch_scale\":0.62}}\n"
        );
    }

    #[test]
    fn dates() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_796_018_770), "2026-11-30T06:06:10Z");
        for t in [0, 951_782_400, 1_796_018_770, 4_102_444_800] {
            assert_eq!(parse_rfc3339(&rfc3339(t)), Some(t));
        }
        assert_eq!(parse_rfc3339("2026-13-01T00:00:00Z"), None);
        assert_eq!(parse_rfc3339("yesterday"), None);
    }
}
