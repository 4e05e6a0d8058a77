//! Framework memory caps: the allocator settings that make PyTorch, JAX, TensorFlow and MPS clients
//! live within a quota instead of discovering it through an OOM or a requeue.
//!
//! Rule one: a value the user set is never overwritten. Comma lists (`PYTORCH_ALLOC_CONF`) get our
//! keys merged in only where the user has not set that key. Where a framework reads two names for
//! the same setting (a new one first, then the old one), a user value under either name wins.
//!
//! Fractions are of the real GPU size, after leaving `context_reserve` (default 512 MiB) of the quota
//! for the CUDA context, cuBLAS/cuDNN workspaces and whatever else the framework's allocator does not
//! count: `(quota − reserve) / gpu_total`, rounded down to hundredths. When the quota is not smaller
//! than the GPU nothing needs capping, and only the non-cap settings are written.

use std::collections::BTreeMap;

use super::Hundredths;
use crate::size::ByteSize;

/// PyTorch ≥ 2.9 reads this first, ...
pub(crate) const PYTORCH_ALLOC_CONF: &str = "PYTORCH_ALLOC_CONF";
/// ... and falls back to this (the only one older releases read).
pub(crate) const PYTORCH_CUDA_ALLOC_CONF: &str = "PYTORCH_CUDA_ALLOC_CONF";
/// JAX's current name for the preallocated fraction ...
pub(crate) const XLA_CLIENT_MEM_FRACTION: &str = "XLA_CLIENT_MEM_FRACTION";
/// ... and its older one, still read by the releases many sites run.
pub(crate) const XLA_PYTHON_CLIENT_MEM_FRACTION: &str = "XLA_PYTHON_CLIENT_MEM_FRACTION";
/// TensorFlow: grow on demand instead of mapping the whole GPU at start.
pub(crate) const TF_FORCE_GPU_ALLOW_GROWTH: &str = "TF_FORCE_GPU_ALLOW_GROWTH";
/// MPS clients: a hard per-device limit, `0=40448M,1=40448M` (device ordinals as the client sees them).
const CUDA_MPS_PINNED_DEVICE_MEM_LIMIT: &str = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT";

/// Every variable [`framework_vars`] may read from the user's environment: the caller looks these up
/// (and only these) to fill [`CapInputs::user_env`].
pub(crate) const FRAMEWORK_VARS: [&str; 6] = [
    PYTORCH_ALLOC_CONF,
    PYTORCH_CUDA_ALLOC_CONF,
    XLA_CLIENT_MEM_FRACTION,
    XLA_PYTHON_CLIENT_MEM_FRACTION,
    TF_FORCE_GPU_ALLOW_GROWTH,
    CUDA_MPS_PINNED_DEVICE_MEM_LIMIT,
];

/// What is left of a quota for the framework's allocator: the CUDA context of one process is
/// 300–500 MiB on current GPUs and drivers, plus library workspaces. An admin can change it.
pub(crate) const DEFAULT_CONTEXT_RESERVE: ByteSize = ByteSize::from_bytes(512 << 20);

const MIB: u64 = 1 << 20;

/// Which frameworks to configure: each switchable in the admin config.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameworkSwitches {
    /// `expandable_segments:True` in the PyTorch allocator config (less fragmentation, so the
    /// memory a job reserves stays close to what it uses).
    pub pytorch: bool,
    /// Also `per_process_memory_fraction:F` there. Off by default: PyTorch releases before the
    /// option existed refuse the whole config. Only applies together with `pytorch`.
    pub pytorch_memory_fraction: bool,
    /// JAX's preallocation fraction (by default JAX takes 75 % of the GPU, whoever else is on it).
    pub jax: bool,
    /// TensorFlow's allow-growth.
    pub tensorflow: bool,
    /// The MPS pinned-memory limit; only where the node runs MPS.
    pub mps: bool,
}

/// Everything [`framework_vars`] needs, as plain data.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CapInputs<'a> {
    pub(crate) quota: ByteSize,
    /// The real GPU size (NVML's total; the smallest, if the job's GPUs differ).
    pub(crate) gpu_total: ByteSize,
    /// Kept out of the fraction for the CUDA context; see [`DEFAULT_CONTEXT_RESERVE`].
    pub(crate) context_reserve: ByteSize,
    /// How many GPUs the job's processes see (one MPS limit entry each).
    pub(crate) visible_devices: u32,
    pub(crate) switches: FrameworkSwitches,
    /// The user's values of [`FRAMEWORK_VARS`] that are set (set-but-empty included).
    pub(crate) user_env: &'a BTreeMap<String, String>,
}

/// `(quota − reserve) / gpu_total` rounded down to hundredths; `None` when there is nothing to cap
/// (the quota is not smaller than the GPU) or nothing left (the reserve eats the quota).
fn memory_fraction(quota: ByteSize, gpu_total: ByteSize, reserve: ByteSize) -> Option<Hundredths> {
    let usable = capped_bytes(quota, gpu_total, reserve)?;
    Hundredths::floor_ratio(usable, gpu_total.bytes()).filter(|f| f.get() > 0)
}

/// The quota less the reserve, when the quota is smaller than the GPU and the result is positive.
fn capped_bytes(quota: ByteSize, gpu_total: ByteSize, reserve: ByteSize) -> Option<u64> {
    if quota >= gpu_total {
        return None;
    }
    Some(quota.bytes().saturating_sub(reserve.bytes())).filter(|&b| b > 0)
}

/// The variables to set for a job with a quota, in a fixed order. A variable the user set is absent
/// unless it is a comma list that needed our keys merged in.
pub(crate) fn framework_vars(inputs: &CapInputs) -> Vec<(&'static str, String)> {
    let user = |name: &str| inputs.user_env.get(name).map(String::as_str);
    let switches = inputs.switches;
    let fraction = memory_fraction(inputs.quota, inputs.gpu_total, inputs.context_reserve);
    let mut vars = Vec::new();

    if switches.pytorch {
        let mut ours = vec![("expandable_segments", "True".to_string())];
        if let (true, Some(f)) = (switches.pytorch_memory_fraction, fraction) {
            ours.push(("per_process_memory_fraction", f.to_string()));
        }
        for (name, other) in [
            (PYTORCH_ALLOC_CONF, PYTORCH_CUDA_ALLOC_CONF),
            (PYTORCH_CUDA_ALLOC_CONF, PYTORCH_ALLOC_CONF),
        ] {
            // An unset name starts from the user's value under the other name, so that whichever
            // name a PyTorch release reads, it sees the user's keys.
            let base = user(name).or(user(other)).unwrap_or("");
            if let Some(merged) = merge_alloc_conf(base, &ours) {
                vars.push((name, merged));
            }
        }
    }

    if let (true, Some(f)) = (switches.jax, fraction) {
        // A user fraction under either name is the user's choice: set neither.
        if user(XLA_CLIENT_MEM_FRACTION).is_none() && user(XLA_PYTHON_CLIENT_MEM_FRACTION).is_none() {
            vars.push((XLA_CLIENT_MEM_FRACTION, f.to_string()));
            vars.push((XLA_PYTHON_CLIENT_MEM_FRACTION, f.to_string()));
        }
    }

    if switches.tensorflow && user(TF_FORCE_GPU_ALLOW_GROWTH).is_none() {
        vars.push((TF_FORCE_GPU_ALLOW_GROWTH, "true".to_string()));
    }

    if switches.mps && inputs.visible_devices > 0 && user(CUDA_MPS_PINNED_DEVICE_MEM_LIMIT).is_none() {
        if let Some(usable) = capped_bytes(inputs.quota, inputs.gpu_total, inputs.context_reserve) {
            vars.push((
                CUDA_MPS_PINNED_DEVICE_MEM_LIMIT,
                mps_limit(usable / MIB, inputs.visible_devices),
            ));
        }
    }
    vars
}

/// `0=NM,1=NM,...`: whole MiB, one entry per visible device ordinal.
fn mps_limit(mib: u64, devices: u32) -> String {
    (0..devices)
        .map(|d| format!("{d}={mib}M"))
        .collect::<Vec<_>>()
        .join(",")
}

/// Appends our `key:value` entries whose keys the user's list lacks, keeping the user's text as it
/// is. `None` when there is nothing to add. `expandable_segments` is left out when the user chose the
/// `cudaMallocAsync` backend, whose allocator has no segments to expand.
fn merge_alloc_conf(user: &str, ours: &[(&str, String)]) -> Option<String> {
    let user_keys: Vec<(&str, &str)> = user
        .split(',')
        .map(|entry| {
            let (key, value) = entry.split_once(':').unwrap_or((entry, ""));
            (key.trim(), value.trim())
        })
        .filter(|(key, _)| !key.is_empty())
        .collect();
    let has = |key: &str| user_keys.iter().any(|(k, _)| *k == key);
    let async_backend = user_keys.contains(&("backend", "cudaMallocAsync"));
    let added: Vec<String> = ours
        .iter()
        .filter(|(key, _)| !has(key))
        .filter(|(key, _)| !(async_backend && *key == "expandable_segments"))
        .map(|(key, value)| format!("{key}:{value}"))
        .collect();
    if added.is_empty() {
        return None;
    }
    let user = user.trim().trim_end_matches(',');
    Some(if user.is_empty() {
        added.join(",")
    } else {
        format!("{user},{}", added.join(","))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const G: u64 = 1 << 30;
    const ALL: FrameworkSwitches = FrameworkSwitches {
        pytorch: true,
        pytorch_memory_fraction: true,
        jax: true,
        tensorflow: true,
        mps: true,
    };

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn vars(
        quota_g: u64,
        switches: FrameworkSwitches,
        user: &[(&str, &str)],
        devices: u32,
    ) -> Vec<(&'static str, String)> {
        let user_env = env(user);
        framework_vars(&CapInputs {
            quota: ByteSize::from_bytes(quota_g * G),
            gpu_total: ByteSize::from_bytes(80 * G),
            context_reserve: DEFAULT_CONTEXT_RESERVE,
            visible_devices: devices,
            switches,
            user_env: &user_env,
        })
    }

    fn owned(pairs: &[(&'static str, &str)]) -> Vec<(&'static str, String)> {
        pairs.iter().map(|(k, v)| (*k, v.to_string())).collect()
    }

    /// The acceptance case: 40G on an 80G GPU. (40960 − 512) MiB / 81920 MiB = 0.49375 → 0.49.
    #[test]
    fn quota_40g_on_80g_gpu() {
        assert_eq!(
            vars(40, ALL, &[], 2),
            owned(&[
                (
                    "PYTORCH_ALLOC_CONF",
                    "expandable_segments:True,per_process_memory_fraction:0.49"
                ),
                (
                    "PYTORCH_CUDA_ALLOC_CONF",
                    "expandable_segments:True,per_process_memory_fraction:0.49"
                ),
                ("XLA_CLIENT_MEM_FRACTION", "0.49"),
                ("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.49"),
                ("TF_FORCE_GPU_ALLOW_GROWTH", "true"),
                ("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "0=40448M,1=40448M"),
            ])
        );
    }

    #[test]
    fn user_alloc_conf_survives_with_ours_merged() {
        let no_fraction = FrameworkSwitches {
            pytorch_memory_fraction: false,
            ..ALL
        };
        type Vars = &'static [(&'static str, &'static str)];
        let table: &[(Vars, Vars)] = &[
            // The case, under either name; the other name gets the user's keys too.
            (
                &[("PYTORCH_ALLOC_CONF", "max_split_size_mb:128")],
                &[
                    (
                        "PYTORCH_ALLOC_CONF",
                        "max_split_size_mb:128,expandable_segments:True",
                    ),
                    (
                        "PYTORCH_CUDA_ALLOC_CONF",
                        "max_split_size_mb:128,expandable_segments:True",
                    ),
                ],
            ),
            (
                &[("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:128")],
                &[
                    (
                        "PYTORCH_ALLOC_CONF",
                        "max_split_size_mb:128,expandable_segments:True",
                    ),
                    (
                        "PYTORCH_CUDA_ALLOC_CONF",
                        "max_split_size_mb:128,expandable_segments:True",
                    ),
                ],
            ),
            // The user's own expandable_segments wins, whatever its value: nothing to add or copy.
            (&[("PYTORCH_ALLOC_CONF", "expandable_segments:False")], &[]),
            // Both names set differently: each keeps its own and gets only what it lacks.
            (
                &[
                    ("PYTORCH_ALLOC_CONF", "expandable_segments:False"),
                    ("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:64"),
                ],
                &[(
                    "PYTORCH_CUDA_ALLOC_CONF",
                    "max_split_size_mb:64,expandable_segments:True",
                )],
            ),
            // Spaces and a trailing comma are the user's; keys are compared trimmed.
            (&[("PYTORCH_ALLOC_CONF", " expandable_segments : True ,")], &[]),
            (
                &[("PYTORCH_ALLOC_CONF", "garbage_collection_threshold:0.6,")],
                &[
                    (
                        "PYTORCH_ALLOC_CONF",
                        "garbage_collection_threshold:0.6,expandable_segments:True",
                    ),
                    (
                        "PYTORCH_CUDA_ALLOC_CONF",
                        "garbage_collection_threshold:0.6,expandable_segments:True",
                    ),
                ],
            ),
            // Set but empty counts as set, with no keys.
            (
                &[("PYTORCH_ALLOC_CONF", "")],
                &[
                    ("PYTORCH_ALLOC_CONF", "expandable_segments:True"),
                    ("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True"),
                ],
            ),
            // The cudaMallocAsync backend has no segments to expand.
            (&[("PYTORCH_ALLOC_CONF", "backend:cudaMallocAsync")], &[]),
        ];
        let pytorch_only = FrameworkSwitches {
            jax: false,
            tensorflow: false,
            mps: false,
            ..no_fraction
        };
        for (user, want) in table {
            assert_eq!(vars(40, pytorch_only, user, 1), owned(want), "{user:?}");
        }
    }

    #[test]
    fn memory_fraction_is_merged_only_when_switched_on_and_missing() {
        let pytorch_only = FrameworkSwitches {
            jax: false,
            tensorflow: false,
            mps: false,
            ..ALL
        };
        assert_eq!(
            vars(
                40,
                pytorch_only,
                &[("PYTORCH_ALLOC_CONF", "per_process_memory_fraction:0.3")],
                1
            ),
            owned(&[
                (
                    "PYTORCH_ALLOC_CONF",
                    "per_process_memory_fraction:0.3,expandable_segments:True"
                ),
                (
                    "PYTORCH_CUDA_ALLOC_CONF",
                    "per_process_memory_fraction:0.3,expandable_segments:True"
                ),
            ])
        );
        assert_eq!(
            vars(
                40,
                pytorch_only,
                &[("PYTORCH_ALLOC_CONF", "backend:cudaMallocAsync")],
                1
            ),
            owned(&[
                (
                    "PYTORCH_ALLOC_CONF",
                    "backend:cudaMallocAsync,per_process_memory_fraction:0.49"
                ),
                (
                    "PYTORCH_CUDA_ALLOC_CONF",
                    "backend:cudaMallocAsync,per_process_memory_fraction:0.49"
                ),
            ])
        );
    }

    #[test]
    fn user_values_are_never_overwritten() {
        let user = [
            ("XLA_PYTHON_CLIENT_MEM_FRACTION", ".3"),
            ("TF_FORCE_GPU_ALLOW_GROWTH", "false"),
            ("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "0=8G"),
            (
                "PYTORCH_ALLOC_CONF",
                "expandable_segments:True,per_process_memory_fraction:0.2",
            ),
        ];
        assert_eq!(vars(40, ALL, &user, 1), vec![]);
        // A JAX fraction under the new name alone also keeps us off both names.
        let out = vars(40, ALL, &[("XLA_CLIENT_MEM_FRACTION", "0.6")], 1);
        assert!(out.iter().all(|(k, _)| !k.starts_with("XLA_")), "{out:?}");
    }

    #[test]
    fn switches_turn_each_framework_off() {
        let none = FrameworkSwitches {
            pytorch: false,
            pytorch_memory_fraction: true,
            jax: false,
            tensorflow: false,
            mps: false,
        };
        assert_eq!(vars(40, none, &[], 1), vec![]);
        let mps_only = FrameworkSwitches { mps: true, ..none };
        assert_eq!(
            vars(40, mps_only, &[], 1),
            owned(&[("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "0=40448M")])
        );
        assert_eq!(vars(40, mps_only, &[], 0), vec![]);
    }

    #[test]
    fn no_caps_when_the_quota_is_the_whole_gpu() {
        assert_eq!(
            vars(80, ALL, &[], 1),
            owned(&[
                ("PYTORCH_ALLOC_CONF", "expandable_segments:True"),
                ("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True"),
                ("TF_FORCE_GPU_ALLOW_GROWTH", "true"),
            ])
        );
    }

    #[test]
    fn fractions() {
        let b = ByteSize::from_bytes;
        let table = [
            ((40 * G, 80 * G, 512 << 20), Some("0.49")),
            // An H100's real NVML total is 81559 MiB: 40448 / 81559 = 0.4959.
            ((40 * G, 81559 << 20, 512 << 20), Some("0.49")),
            ((20 * G, 80 * G, 0), Some("0.25")),
            ((79 * G, 80 * G, 512 << 20), Some("0.98")),
            ((80 * G, 80 * G, 512 << 20), None),
            ((100 * G, 80 * G, 512 << 20), None),
            ((512 << 20, 80 * G, 512 << 20), None),
            ((600 << 20, 80 * G, 512 << 20), None),
        ];
        for ((quota, total, reserve), want) in table {
            assert_eq!(
                memory_fraction(b(quota), b(total), b(reserve))
                    .map(|f| f.to_string())
                    .as_deref(),
                want,
                "{quota} {total} {reserve}"
            );
        }
    }
}
