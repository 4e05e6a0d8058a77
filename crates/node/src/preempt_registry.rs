//! The node's registry of watched jobs: how the watchdogs of one node see each other.
//!
//! ```text
//! <runtime_dir>/registry/              root 0700: only root reads it (it names every job's user,
//!                                      quota, rank and watchdog)
//!     <job_id>                         one per job with a watchdog here, root 0600, a JSON object
//!     gpu-<uuid>                       the GPU's last preemption (its cooldown), root 0600
//!     .lock-<job_id>, .lock-gpu-<uuid> flock files, root 0600
//!     .<name>.<pid>.<n>.tmp            a file being replaced (crate::textfile)
//! ```
//! Each watchdog writes its own entry at start, refreshes its heartbeat every interval (an atomic
//! rewrite: readers see the old entry or the new one) and removes it on the way out. Others only
//! read it, except in two places that take a lock first:
//! - [`Registry::claim_for_dead`]: the victim's watchdog is gone (heartbeat older than the timeout
//!   and its process no longer running), so one other watchdog acts on its behalf, once; the
//!   entry records who (`acted_by`).
//! - [`Registry::claim_gpu`]: admits one preemption per GPU per cooldown, whichever watchdog acts.
//!
//! Nothing here follows a symlink: the runtime directory must pass crate::trusted_dir's rule (never
//! changed), the registry is opened and set up through its descriptor, files are opened with `O_NOFOLLOW` and must be regular files we own; anything
//! else is skipped when listing and refused when read directly.

use std::fs;
use std::io::{self, Read};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::attribute::{same_process, ProcessIdentity};
use crate::runtime;
use crate::textfile::{self, Access};
use crate::trusted_dir::TrustedDir;
use gmq_core::preempt::cooldown::{GpuCooldown, Preemption};
use gmq_core::preempt::victim::JobOnGpu;
use gmq_core::preempt::Rank;

pub const REGISTRY_DIR: &str = "registry";
/// Only root reads the registry.
const REGISTRY_MODE: u32 = 0o700;
/// An entry is a few hundred bytes (JSON, about 65 per GPU; 56 MIG devices fit); anything much
/// larger is not one of ours.
const MAX_FILE_BYTES: u64 = 8192;

/// One GPU of a job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuRef {
    pub index: u32,
    pub uuid: String,
}

/// Another watchdog acted for this job because its own watchdog was gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActedBy {
    /// The job whose watchdog acted.
    pub job_id: u32,
    /// Unix seconds.
    pub at: u64,
}

/// One job watched on this node; its file is this as a JSON object, in field order.
///
/// The format changed from `key=value` lines to JSON: an entry written by an older watchdog is
/// not read (it is skipped when listing, as any malformed entry), nor is ours by it. Entries live in
/// the runtime directory, a tmpfs, so only jobs running across an upgrade of the binary are
/// affected: old and new watchdogs do not see each other for preemption until those jobs end.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegistryEntry {
    pub job_id: u32,
    pub user: String,
    /// Per GPU, bytes; `None` (`null`): no quota. Required in the file, as the other fields.
    #[serde(deserialize_with = "Option::deserialize")]
    pub quota: Option<u64>,
    pub rank: Rank,
    pub preemptible: bool,
    pub requeueable: bool,
    /// Times we preempted the job before this run (from its record).
    pub preemptions: u32,
    /// Unix seconds, of this run.
    pub start_time: u64,
    pub gpus: Vec<GpuRef>,
    /// `{"pid":…,"start_time":…}`.
    #[serde(with = "identity")]
    pub watchdog: ProcessIdentity,
    /// Unix seconds of the watchdog's last refresh.
    pub heartbeat: u64,
    /// Absent or `null`: nobody acted for the job.
    #[serde(default)]
    pub acted_by: Option<ActedBy>,
}

/// [`ProcessIdentity`] as `{"pid":…,"start_time":…}` (crate::attribute knows nothing of serde).
mod identity {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use crate::attribute::ProcessIdentity;

    #[derive(Serialize, Deserialize)]
    struct IdentityJson {
        pid: u32,
        start_time: u64,
    }

    pub(crate) fn serialize<S: Serializer>(p: &ProcessIdentity, s: S) -> Result<S::Ok, S::Error> {
        IdentityJson {
            pid: p.pid,
            start_time: p.start_time,
        }
        .serialize(s)
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<ProcessIdentity, D::Error> {
        let IdentityJson { pid, start_time } = IdentityJson::deserialize(d)?;
        Ok(ProcessIdentity { pid, start_time })
    }
}

impl RegistryEntry {
    /// The entry's file: compact JSON and a newline.
    pub fn render(&self) -> String {
        let mut text = serde_json::to_string(self).expect("a registry entry always serializes");
        text.push('\n');
        text
    }

    /// Reads an entry's file. Unknown fields are ignored (a newer writer); a missing, repeated or
    /// malformed field is an error naming it, and so are a user name or GPU UUID that
    /// [`Registry::write`] would refuse.
    pub fn parse(text: &str) -> Result<RegistryEntry, String> {
        let entry: RegistryEntry = serde_json::from_str(text).map_err(|e| e.to_string())?;
        if !is_plain_word(&entry.user) {
            return Err(format!("bad user {:?}", entry.user));
        }
        if let Some(gpu) = entry.gpus.iter().find(|g| !is_gpu_uuid(&g.uuid)) {
            return Err(format!("bad GPU UUID {:?}", gpu.uuid));
        }
        Ok(entry)
    }

    pub fn uses_gpu(&self, uuid: &str) -> bool {
        self.gpus.iter().any(|g| g.uuid == uuid)
    }

    /// The job as victim selection sees it on one GPU where its processes use `used` bytes.
    pub fn on_gpu(&self, used: u64) -> JobOnGpu {
        JobOnGpu {
            job_id: self.job_id,
            quota: self.quota,
            used,
            rank: self.rank,
            preemptible: self.preemptible,
            start_time: self.start_time,
            requeueable: self.requeueable,
            preemptions: self.preemptions,
        }
    }

    /// Whether its watchdog is gone: no heartbeat for longer than `timeout`, and its process no
    /// longer runs. Both: a live but slow watchdog is never replaced, and a watchdog that just
    /// exited cleanly removes its entry itself.
    pub fn is_stale(&self, now: u64, timeout: Duration, proc_root: &Path) -> bool {
        now.saturating_sub(self.heartbeat) > timeout.as_secs() && !same_process(proc_root, &self.watchdog)
    }
}

/// What [`Registry::claim_for_dead`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeadClaim {
    /// The caller acts for the victim now; the entry (returned) records it.
    Granted(RegistryEntry),
    /// Another watchdog is claiming it at this moment.
    Busy,
    /// Another watchdog (or this one) already acted for it.
    AlreadyActed(ActedBy),
    /// Its watchdog is alive, or was heard from within the timeout: it acts itself.
    NotStale,
    /// No entry: the job left the node.
    Gone,
}

/// The registry of one node, its directory checked once.
#[derive(Debug, Clone)]
pub struct Registry {
    dir: PathBuf,
}

impl Registry {
    /// Opens (creating) `<runtime_dir>/registry`, ours with mode 0700. Refuses a runtime directory
    /// that fails crate::trusted_dir's rule and a registry that is a symlink, not a directory, or
    /// owned by someone else.
    pub fn open(runtime_dir: &Path) -> io::Result<Registry> {
        let dir = runtime::open_runtime_dir(runtime_dir)?.child_dir(REGISTRY_DIR, REGISTRY_MODE)?;
        Ok(Registry {
            dir: dir.path().to_path_buf(),
        })
    }

    /// Opens `<runtime_dir>/registry` only if it is there (a node without preemption has none):
    /// for cleaning up, which must create nothing (the registry's own mode is still set to 0700).
    pub fn open_existing(runtime_dir: &Path) -> io::Result<Option<Registry>> {
        let root = match TrustedDir::open(runtime_dir) {
            Ok(root) => root,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        if root.open_child(REGISTRY_DIR)?.is_none() {
            return Ok(None);
        }
        let dir = root.child_dir(REGISTRY_DIR, REGISTRY_MODE)?;
        Ok(Some(Registry {
            dir: dir.path().to_path_buf(),
        }))
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Writes (replaces) the job's entry.
    pub fn write(&self, entry: &RegistryEntry) -> io::Result<()> {
        let bad = if !is_plain_word(&entry.user) {
            Some(format!("user {:?}", entry.user))
        } else {
            entry
                .gpus
                .iter()
                .find(|g| !is_gpu_uuid(&g.uuid))
                .map(|g| format!("GPU UUID {:?}", g.uuid))
        };
        if let Some(bad) = bad {
            return Err(invalid(format!("job {}: cannot register {bad}", entry.job_id)));
        }
        textfile::write_atomically_as(
            &self.dir,
            &entry.job_id.to_string(),
            &entry.render(),
            Access::ROOT_ONLY,
        )
    }

    /// The watchdog's refresh each interval: a new heartbeat, the entry rewritten.
    pub fn heartbeat(&self, entry: &mut RegistryEntry, now: u64) -> io::Result<()> {
        entry.heartbeat = now;
        self.write(entry)
    }

    /// The job's entry; `Ok(None)` when there is none, an error when it is not a valid entry.
    pub fn read(&self, job_id: u32) -> io::Result<Option<RegistryEntry>> {
        let Some(text) = read_own_file(&self.dir.join(job_id.to_string()))? else {
            return Ok(None);
        };
        let entry =
            RegistryEntry::parse(&text).map_err(|e| invalid(format!("registry entry {job_id}: {e}")))?;
        if entry.job_id != job_id {
            return Err(invalid(format!(
                "registry entry {job_id} names job {}",
                entry.job_id
            )));
        }
        Ok(Some(entry))
    }

    /// Removes the job's entry and its lock file (the job left the node).
    pub fn remove(&self, job_id: u32) -> io::Result<()> {
        textfile::remove(&self.dir, &job_id.to_string())?;
        // After the entry: a claimant that still holds the old lock finds no entry and does nothing.
        remove_if_present(&self.lock_path(&job_id.to_string()))
    }

    /// Every valid entry, by job id. Anything else in the directory (malformed files, symlinks,
    /// files of other owners, temporary and lock files) is skipped.
    pub fn list(&self) -> io::Result<Vec<RegistryEntry>> {
        let mut entries = Vec::new();
        for dirent in fs::read_dir(&self.dir)? {
            let name = dirent?.file_name();
            let Some(job_id) = name
                .to_str()
                .and_then(|n| n.parse::<u32>().ok().filter(|id| id.to_string() == n))
            else {
                continue;
            };
            if let Ok(Some(entry)) = self.read(job_id) {
                entries.push(entry);
            }
        }
        entries.sort_by_key(|e| e.job_id);
        Ok(entries)
    }

    /// The entries whose watchdog is gone (see [`RegistryEntry::is_stale`]).
    pub fn stale(&self, now: u64, timeout: Duration, proc_root: &Path) -> io::Result<Vec<RegistryEntry>> {
        let mut entries = self.list()?;
        entries.retain(|e| e.is_stale(now, timeout, proc_root));
        Ok(entries)
    }

    /// Claims the right to act for `victim`, whose watchdog is gone, as the watchdog of job `me`.
    /// Under the victim's lock: at most one watchdog is granted, and only once per entry.
    pub fn claim_for_dead(
        &self,
        victim: u32,
        me: u32,
        now: u64,
        timeout: Duration,
        proc_root: &Path,
    ) -> io::Result<DeadClaim> {
        let Some(_lock) = runtime::try_lock_file(&self.lock_path(&victim.to_string()))? else {
            return Ok(DeadClaim::Busy);
        };
        let Some(mut entry) = self.read(victim)? else {
            return Ok(DeadClaim::Gone);
        };
        if let Some(acted) = entry.acted_by {
            return Ok(DeadClaim::AlreadyActed(acted));
        }
        if !entry.is_stale(now, timeout, proc_root) {
            return Ok(DeadClaim::NotStale);
        }
        entry.acted_by = Some(ActedBy { job_id: me, at: now });
        self.write(&entry)?;
        Ok(DeadClaim::Granted(entry))
    }

    /// Gives back a granted claim whose action failed, so that a watchdog may try again.
    /// Does nothing unless `me` holds the claim.
    pub fn withdraw_claim(&self, victim: u32, me: u32) -> io::Result<()> {
        let Some(_lock) = runtime::try_lock_file(&self.lock_path(&victim.to_string()))? else {
            return Err(io::Error::new(
                io::ErrorKind::WouldBlock,
                format!("registry entry {victim} is locked by another watchdog"),
            ));
        };
        match self.read(victim)? {
            Some(mut entry) if entry.acted_by.is_some_and(|a| a.job_id == me) => {
                entry.acted_by = None;
                self.write(&entry)
            }
            _ => Ok(()),
        }
    }

    /// The GPU's last preemption, as recorded by [`Registry::claim_gpu`].
    pub fn gpu_cooldown(&self, uuid: &str) -> io::Result<GpuCooldown> {
        check_gpu_uuid(uuid)?;
        let Some(text) = read_own_file(&self.dir.join(gpu_file(uuid)))? else {
            return Ok(GpuCooldown::default());
        };
        parse_gpu_cooldown(&text)
            .map(|last| GpuCooldown { last: Some(last) })
            .map_err(|e| invalid(format!("registry {}: {e}", gpu_file(uuid))))
    }

    /// Admits the preemption of `victim` on the GPU at `now`, once per cooldown whichever watchdog
    /// asks: `Ok(Err(until))` when the GPU still cools down from another preemption.
    pub fn claim_gpu(
        &self,
        uuid: &str,
        victim: u32,
        now: u64,
        cooldown: Duration,
    ) -> io::Result<Result<(), u64>> {
        check_gpu_uuid(uuid)?;
        // Another claim holds the lock for a read and a write: wait for it (up to a second) rather
        // than answer "busy", since its outcome decides ours.
        let mut lock = None;
        for _ in 0..100 {
            lock = runtime::try_lock_file(&self.lock_path(&gpu_file(uuid)))?;
            if lock.is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let Some(lock) = lock else {
            return Err(io::Error::new(
                io::ErrorKind::WouldBlock,
                format!("the preemption lock of GPU {uuid} is held for more than a second"),
            ));
        };
        let mut state = self.gpu_cooldown(uuid)?;
        let admitted = state.try_record(victim, now, cooldown);
        if admitted.is_ok() {
            let last = state.last.expect("just recorded");
            textfile::write_atomically_as(
                &self.dir,
                &gpu_file(uuid),
                &format!("victim={}\nat={}\n", last.victim, last.at),
                Access::ROOT_ONLY,
            )?;
        }
        drop(lock);
        Ok(admitted)
    }

    fn lock_path(&self, name: &str) -> PathBuf {
        self.dir.join(format!(".lock-{name}"))
    }
}

fn gpu_file(uuid: &str) -> String {
    format!("gpu-{uuid}")
}

fn parse_gpu_cooldown(text: &str) -> Result<Preemption, String> {
    let mut victim = None;
    let mut at = None;
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        match line.split_once('=') {
            Some(("victim", v)) => victim = Some(number("victim", v)?),
            Some(("at", v)) => at = Some(number("at", v)?),
            _ => return Err(format!("unexpected line {line:?}")),
        }
    }
    Ok(Preemption {
        victim: victim.ok_or("no victim")?,
        at: at.ok_or("no at")?,
    })
}

/// Reads a small regular file we own, without following a symlink: `Ok(None)` when absent.
fn read_own_file(path: &Path) -> io::Result<Option<String>> {
    let file = match fs::OpenOptions::new()
        .read(true)
        // O_NONBLOCK: a FIFO planted here must not hang the watchdog.
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(path)
    {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let meta = file.metadata()?;
    if !meta.file_type().is_file() || meta.uid() != euid() || meta.len() > MAX_FILE_BYTES {
        return Err(invalid(format!(
            "{} is not a small regular file owned by uid {}",
            path.display(),
            euid()
        )));
    }
    let mut text = String::new();
    file.take(MAX_FILE_BYTES).read_to_string(&mut text)?;
    Ok(Some(text))
}

fn remove_if_present(path: &Path) -> io::Result<()> {
    match fs::remove_file(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

fn euid() -> u32 {
    nix::unistd::geteuid().as_raw()
}

fn invalid(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message)
}

/// A user name: no spaces, no control characters.
fn is_plain_word(word: &str) -> bool {
    !word.is_empty() && !word.chars().any(|c| c.is_whitespace() || c.is_control())
}

/// NVML's UUIDs (`GPU-8c6f...`, `MIG-...`): safe in a file name.
fn is_gpu_uuid(uuid: &str) -> bool {
    !uuid.is_empty() && uuid.len() <= 96 && uuid.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
}

fn check_gpu_uuid(uuid: &str) -> io::Result<()> {
    if is_gpu_uuid(uuid) {
        Ok(())
    } else {
        Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("not a GPU UUID: {uuid:?}"),
        ))
    }
}

fn number<T: std::str::FromStr>(key: &str, value: &str) -> Result<T, String> {
    value
        .parse()
        .map_err(|_| format!("bad {key} {value:?} (want a number)"))
}
