//! The watchdog's command line, written by the plugin and read by `gpu-mem-quota watchdog`: one
//! definition for both sides, so they cannot drift apart.

use std::path::PathBuf;

use crate::argv::{Opt, Parsed};
use crate::size::ByteSize;
use crate::sluid::Sluid;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Params {
    pub job_id: u32,
    /// The job's user: the status file is theirs to read (an ACL entry), and nobody else's.
    pub uid: u32,
    /// The job's primary group. No file is the group's any more (users often share one); kept so
    /// that a plugin and a watchdog of different versions agree on the command line.
    pub gid: u32,
    /// The quota per GPU; `None`: record and report only.
    pub quota: Option<ByteSize>,
    /// The job's GPUs on this node, as Slurm names them (gres indices or UUIDs).
    pub gpus: Vec<String>,
    /// The admin policy (enforcement settings).
    pub config: PathBuf,
    /// The user volunteered the job for preemption (`--gpu-mem-preemptible`).
    pub preemptible: bool,
    /// The job's SLUID (slurmd's `SLURM_JOB_SLUID`, 25.11 on): the name of its cgroup/v2 directory
    /// on 26.05. `None` before 25.11.
    pub sluid: Option<Sluid>,
    /// The job prolog lacked a fact its decision needs (the QOS before 26.05): `quota` holds until
    /// the watchdog has slurmctld's record, then it decides again from `request` (the job's
    /// `--gpu-mem-quota` value as the prolog had it, already checked there) and the record.
    pub provisional: Option<Provisional>,
}

/// See [`Params::provisional`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Provisional {
    pub request: Option<String>,
}

impl Params {
    /// The options [`to_args`](Params::to_args) writes and the watchdog reads back.
    pub const OPTIONS: &'static [Opt] = &[
        Opt::value("job"),
        Opt::value("uid"),
        Opt::value("gid"),
        Opt::value("gpus"),
        Opt::value("config"),
        Opt::value("quota-bytes"),
        Opt::flag("preemptible"),
        Opt::value("sluid"),
        Opt::flag("provisional"),
        Opt::value("request"),
    ];

    pub fn to_args(&self) -> Vec<String> {
        let mut argv = vec![
            "watchdog".to_string(),
            format!("--job={}", self.job_id),
            format!("--uid={}", self.uid),
            format!("--gid={}", self.gid),
            format!("--gpus={}", self.gpus.join(",")),
            format!("--config={}", self.config.display()),
        ];
        if let Some(quota) = self.quota {
            argv.push(format!("--quota-bytes={}", quota.bytes()));
        }
        if self.preemptible {
            argv.push("--preemptible".to_string());
        }
        if let Some(sluid) = self.sluid {
            argv.push(format!("--sluid={sluid}"));
        }
        if let Some(provisional) = &self.provisional {
            argv.push("--provisional".to_string());
            if let Some(request) = &provisional.request {
                argv.push(format!("--request={request}"));
            }
        }
        argv
    }

    /// Reads what [`to_args`](Params::to_args) wrote (without the leading `watchdog`).
    #[cfg(test)]
    pub(crate) fn from_args(argv: &[String]) -> Result<Params, String> {
        Params::from_parsed(&crate::argv::parse(argv, Params::OPTIONS)?)
    }

    /// The parameters in a parsed command line, or what is missing or wrong.
    pub fn from_parsed(p: &Parsed) -> Result<Params, String> {
        let number = |key: &str| -> Result<u32, String> {
            let text = p.value(key).ok_or_else(|| format!("--{key} is required"))?;
            text.parse()
                .map_err(|_| format!("--{key}: '{text}' is not a number"))
        };
        let quota = match p.value("quota-bytes") {
            None => None,
            Some(text) => Some(ByteSize::from_bytes(
                text.parse()
                    .map_err(|_| format!("--quota-bytes: '{text}' is not a number"))?,
            )),
        };
        let gpus = crate::job_env::parse_gpu_list(p.value("gpus").unwrap_or(""))?;
        let config = PathBuf::from(p.value("config").ok_or("--config is required")?);
        if !config.is_absolute() {
            return Err("--config must be an absolute path".into());
        }
        let sluid = match p.value("sluid") {
            None => None,
            Some(text) => {
                Some(Sluid::parse(text).ok_or_else(|| format!("--sluid: '{text}' is not a SLUID"))?)
            }
        };
        if !p.positional.is_empty() {
            return Err(format!("unexpected argument '{}'", p.positional[0]));
        }
        Ok(Params {
            job_id: number("job")?,
            uid: number("uid")?,
            gid: number("gid")?,
            quota,
            gpus,
            config,
            preemptible: p.flag("preemptible"),
            sluid,
            provisional: p.flag("provisional").then(|| Provisional {
                request: p.value("request").map(str::to_string),
            }),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let params = Params {
            job_id: 12,
            uid: 2001,
            gid: 2001,
            quota: Some(ByteSize::from_bytes(42949672960)),
            gpus: vec!["0".into(), "2".into()],
            config: PathBuf::from("/etc/slurm/gpu-mem-quota.toml"),
            preemptible: true,
            sluid: Sluid::parse("s0K2Q6ZC8M4T00"),
            provisional: Some(Provisional {
                request: Some("20G".into()),
            }),
        };
        let argv = params.to_args();
        assert!(argv.contains(&"--sluid=s0K2Q6ZC8M4T00".to_string()), "{argv:?}");
        assert_eq!(Params::from_args(&argv[1..]), Ok(params.clone()));
        let before_25_11 = Params {
            sluid: None,
            provisional: Some(Provisional { request: None }),
            ..params
        };
        let argv = before_25_11.to_args();
        assert!(!argv.iter().any(|a| a.starts_with("--sluid")), "{argv:?}");
        assert_eq!(Params::from_args(&argv[1..]), Ok(before_25_11));
    }

    #[test]
    fn refuses_nonsense() {
        let argv = |words: &[&str]| words.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(
            Params::from_args(&argv(&["--job=x", "--uid=1", "--gid=1", "--config=/c"]))
                .unwrap_err()
                .contains("--job")
        );
        assert!(Params::from_args(&argv(&["--job=1", "--uid=1", "--gid=1", "--config=c"])).is_err());
        assert!(Params::from_args(&argv(&[
            "--job=1",
            "--uid=1",
            "--gid=1",
            "--config=/c",
            "--sluid=job_1"
        ]))
        .unwrap_err()
        .contains("--sluid"));
    }
}
