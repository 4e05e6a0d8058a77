//! The job's status file (`GPU_MEM_QUOTA_STATUS_FILE`): JSON a training loop can poll.
//! Schema (docs/HINTS.md has the full reference):
//!
//! ```json
//! {"job_id":12,"updated_at":1764480000,"state":"warn","quota_bytes":42949672960,"action":null,
//!  "gpus":[{"index":0,"uuid":"GPU-…","used_bytes":38654705664,"peak_bytes":38654705664,"total_bytes":85899345920}]}
//! ```
//! `state`: `ok`, `warn` (at or above the warn threshold), `over-quota` (grace period running),
//! `acted` (requeued, held or cancelled: `action` says which).

use crate::json::Json;

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
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    pub job_id: u32,
    pub updated_at: u64,
    pub health: JobHealth,
    pub quota_bytes: Option<u64>,
    pub action: Option<&'static str>,
    pub gpus: Vec<GpuStatus>,
}

impl Status {
    pub fn to_json(&self) -> String {
        let gpus = self
            .gpus
            .iter()
            .map(|g| {
                Json::Obj(vec![
                    ("index", Json::Int(g.index.into())),
                    ("uuid", Json::str(&g.uuid)),
                    ("used_bytes", Json::Int(g.used_bytes)),
                    ("peak_bytes", Json::Int(g.peak_bytes)),
                    ("total_bytes", Json::Int(g.total_bytes)),
                ])
            })
            .collect();
        let mut text = Json::Obj(vec![
            ("job_id", Json::Int(self.job_id.into())),
            ("updated_at", Json::Int(self.updated_at)),
            ("state", Json::str(self.health.name())),
            (
                "quota_bytes",
                self.quota_bytes.map(Json::Int).unwrap_or(Json::Null),
            ),
            ("action", self.action.map(Json::str).unwrap_or(Json::Null)),
            ("gpus", Json::Arr(gpus)),
        ])
        .render();
        text.push('\n');
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_the_documented_schema() {
        let status = Status {
            job_id: 12,
            updated_at: 100,
            health: JobHealth::Warn,
            quota_bytes: Some(40),
            action: None,
            gpus: vec![GpuStatus {
                index: 0,
                uuid: "GPU-a".into(),
                used_bytes: 37,
                peak_bytes: 38,
                total_bytes: 80,
            }],
        };
        assert_eq!(
            status.to_json(),
            "{\"job_id\":12,\"updated_at\":100,\"state\":\"warn\",\"quota_bytes\":40,\"action\":null,\
             \"gpus\":[{\"index\":0,\"uuid\":\"GPU-a\",\"used_bytes\":37,\"peak_bytes\":38,\"total_bytes\":80}]}\n"
        );
    }
}
