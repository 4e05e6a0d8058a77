//! What NVML answers, computed from the scenario and the claims. Pure.

use crate::claims::{Claim, Kind, Used, PID_LIMIT};
use crate::scenario::{Gpu, Memory, Mig};

/// NVML_VALUE_NOT_AVAILABLE as `usedGpuMemory` and as an instance id.
pub const NOT_AVAILABLE_U64: u64 = u64::MAX;
pub const NO_INSTANCE: u32 = 0xFFFF_FFFF;
/// Memory each phantom process (see `procs_grow_between_calls`) is listed with.
pub const PHANTOM_BYTES: u64 = 1 << 20;

/// `nvmlMemory_v2_t` without its version: total = reserved + used + free, always.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryV2 {
    pub total: u64,
    pub reserved: u64,
    pub free: u64,
    pub used: u64,
}

impl MemoryV2 {
    /// `nvmlMemory_t` (v1): (total, free, used), where v1's `used` includes the reserved memory.
    pub fn v1(&self) -> (u64, u64, u64) {
        (self.total, self.free, self.total - self.free)
    }
}

/// One `nvmlProcessInfo_t` entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessRow {
    pub pid: u32,
    pub used_gpu_memory: u64,
    pub gpu_instance_id: u32,
    pub compute_instance_id: u32,
}

/// Memory of a GPU or MIG device whose processes are `claims`. `used` is capped at what is not
/// reserved, as on a real GPU, so a scenario that over-claims shows a full GPU, not a negative free.
pub fn memory_info<'a>(memory: &Memory, claims: impl Iterator<Item = &'a Claim>) -> MemoryV2 {
    let claimed = claims.fold(memory.extra_used, |sum, claim| {
        sum.saturating_add(claim.counted_bytes())
    });
    let usable = memory.total - memory.reserved;
    let used = claimed.min(usable);
    MemoryV2 {
        total: memory.total,
        reserved: memory.reserved,
        free: usable - used,
        used,
    }
}

/// What process `pid` holds among `claims` now: its live claim's counted bytes, or 0.
pub fn held_by(claims: &[Claim], pid: u32) -> u64 {
    claims
        .iter()
        .filter(|claim| claim.pid == pid)
        .map(Claim::counted_bytes)
        .sum()
}

/// Whether process `pid` may hold `bytes` in all on a GPU (or MIG device) with `memory` whose live
/// claims are `claims`, as a real GPU decides an allocation: what [`memory_info`] reports as
/// reserved + used without `pid`'s own claim (it is replaced), plus `bytes`, at most `total`, i.e.
/// `bytes` fits in the `free` that the others leave. A claim that does not grow is always granted,
/// even on an over-full GPU: giving memory back never fails.
pub fn claim_fits(memory: &Memory, claims: &[Claim], pid: u32, bytes: u64) -> bool {
    if bytes <= held_by(claims, pid) {
        return true;
    }
    let others = memory_info(memory, claims.iter().filter(|claim| claim.pid != pid));
    bytes <= others.free
}

/// The claims that belong to `mig` (a MIG device index) or, for `None`, to the whole GPU.
pub fn claims_of(claims: &[Claim], mig: Option<usize>) -> impl Iterator<Item = &Claim> {
    claims
        .iter()
        .filter(move |claim| mig.is_none() || claim.mig == mig)
}

/// The process list NVML gives for `gpu` (or its MIG device `mig`) and `kind`, sorted by pid.
pub fn process_rows(gpu: &Gpu, mig: Option<usize>, claims: &[Claim], kind: Kind) -> Vec<ProcessRow> {
    let mig_devices = match &gpu.mig {
        Mig::Enabled(devices) => devices.as_slice(),
        _ => &[],
    };
    claims_of(claims, mig)
        .filter(|claim| claim.kind == kind)
        .map(|claim| {
            let instance = claim.mig.and_then(|k| mig_devices.get(k));
            ProcessRow {
                pid: claim.pid,
                used_gpu_memory: match claim.used {
                    Used::Bytes(bytes) => bytes,
                    Used::Unavailable { .. } => NOT_AVAILABLE_U64,
                },
                gpu_instance_id: instance.map_or(NO_INSTANCE, |d| d.gpu_instance_id),
                compute_instance_id: if instance.is_some() { 0 } else { NO_INSTANCE },
            }
        })
        .collect()
}

/// Processes that started right after the caller's count query. Their pids lie above any Linux
/// pid, so they cannot be confused with real processes.
pub fn phantom_rows(count: u32) -> impl Iterator<Item = ProcessRow> {
    (0..count).map(|n| ProcessRow {
        pid: PID_LIMIT + n,
        used_gpu_memory: PHANTOM_BYTES,
        gpu_instance_id: NO_INSTANCE,
        compute_instance_id: NO_INSTANCE,
    })
}

/// How a `Get*RunningProcesses` call ends, given how many processes there are and the caller's
/// `*infoCount` (`capacity`) and whether it passed a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListReply {
    /// `*infoCount` = count; SUCCESS if 0, else INSUFFICIENT_SIZE. A count query, or too small a buffer.
    Count { count: u32, is_query: bool },
    /// Write `count` entries, `*infoCount` = count, SUCCESS.
    Fill { count: u32 },
    /// A non-zero capacity with a NULL buffer: INVALID_ARGUMENT.
    MissingBuffer,
}

pub fn list_reply(available: usize, capacity: u32, has_buffer: bool) -> ListReply {
    let count = u32::try_from(available).unwrap_or(u32::MAX);
    if capacity == 0 {
        ListReply::Count {
            count,
            is_query: true,
        }
    } else if !has_buffer {
        ListReply::MissingBuffer
    } else if capacity < count {
        ListReply::Count {
            count,
            is_query: false,
        }
    } else {
        ListReply::Fill { count }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::MigDevice;

    const GIB: u64 = 1 << 30;

    fn claim(pid: u32, used: Used, kind: Kind, mig: Option<usize>) -> Claim {
        Claim { pid, used, kind, mig }
    }

    #[test]
    fn memory_counts_every_claim_and_extra_used() {
        let memory = Memory {
            total: 80 * GIB,
            reserved: GIB / 2,
            extra_used: GIB,
        };
        let claims = [
            claim(10, Used::Bytes(30 * GIB), Kind::Compute, None),
            claim(11, Used::Bytes(2 * GIB), Kind::Graphics, None),
            claim(12, Used::Unavailable { counted: GIB }, Kind::Compute, None),
        ];
        let info = memory_info(&memory, claims.iter());
        assert_eq!(
            info,
            MemoryV2 {
                total: 80 * GIB,
                reserved: GIB / 2,
                used: 34 * GIB,
                free: 45 * GIB + GIB / 2
            }
        );
        assert_eq!(info.v1(), (80 * GIB, 45 * GIB + GIB / 2, 34 * GIB + GIB / 2));
    }

    #[test]
    fn over_claiming_fills_the_gpu() {
        let memory = Memory {
            total: 10 * GIB,
            reserved: GIB,
            extra_used: 0,
        };
        let claims = [claim(1, Used::Bytes(u64::MAX), Kind::Compute, None)];
        let info = memory_info(&memory, claims.iter());
        assert_eq!((info.used, info.free, info.reserved), (9 * GIB, 0, GIB));
    }

    #[test]
    fn a_claim_fits_in_what_the_others_leave_free() {
        // 80G, 1G reserved, 2G used by no listed process: 77G free for the processes.
        let memory = Memory {
            total: 80 * GIB,
            reserved: GIB,
            extra_used: 2 * GIB,
        };
        let others = [
            claim(10, Used::Bytes(30 * GIB), Kind::Compute, None),
            claim(
                11,
                Used::Unavailable { counted: 5 * GIB },
                Kind::Graphics,
                Some(1),
            ),
        ];
        // 80 - 1 - 2 - 30 - 5 = 42G left.
        assert!(claim_fits(&memory, &others, 20, 42 * GIB));
        assert!(!claim_fits(&memory, &others, 20, 42 * GIB + 1));
        assert!(claim_fits(&memory, &others, 20, 0));
        // Without reserved and extra_used counted, 45G would fit.
        assert!(!claim_fits(&memory, &others, 20, 45 * GIB));
    }

    #[test]
    fn the_callers_own_claim_is_replaced_not_added() {
        let memory = Memory {
            total: 80 * GIB,
            reserved: 0,
            extra_used: 0,
        };
        let claims = [
            claim(10, Used::Bytes(30 * GIB), Kind::Compute, None),
            claim(20, Used::Bytes(40 * GIB), Kind::Compute, None),
        ];
        assert_eq!(held_by(&claims, 20), 40 * GIB);
        assert_eq!(held_by(&claims, 21), 0);
        // Process 20 grows from 40G to 50G: 30 + 50 = 80, fits; not 30 + 40 + 50.
        assert!(claim_fits(&memory, &claims, 20, 50 * GIB));
        assert!(!claim_fits(&memory, &claims, 20, 50 * GIB + 1));
        // A new process gets only the 10G left.
        assert!(claim_fits(&memory, &claims, 21, 10 * GIB));
        assert!(!claim_fits(&memory, &claims, 21, 10 * GIB + 1));
    }

    #[test]
    fn giving_memory_back_never_fails_even_over_full() {
        // Claim files written directly can over-fill a GPU: 60 + 50 on 80G.
        let memory = Memory {
            total: 80 * GIB,
            reserved: GIB,
            extra_used: 0,
        };
        let claims = [
            claim(10, Used::Bytes(60 * GIB), Kind::Compute, None),
            claim(20, Used::Bytes(50 * GIB), Kind::Compute, None),
        ];
        assert!(claim_fits(&memory, &claims, 20, 50 * GIB), "stays");
        assert!(claim_fits(&memory, &claims, 20, 10 * GIB), "shrinks");
        assert!(claim_fits(&memory, &claims, 20, 0), "frees all");
        // Growing is refused while the others alone leave only 19G...
        assert!(!claim_fits(&memory, &claims, 20, 50 * GIB + 1));
        // ...and the one over-filling it gets nothing more.
        assert!(!claim_fits(&memory, &claims, 10, 60 * GIB + 1));
        // Others past the usable memory leave nothing free (used is capped, not negative free).
        let huge = [claim(10, Used::Bytes(u64::MAX), Kind::Compute, None)];
        assert!(!claim_fits(&memory, &huge, 20, 1));
        assert!(claim_fits(&memory, &huge, 20, 0));
    }

    #[test]
    fn rows_by_kind_with_instances() {
        let mig = |gi| MigDevice {
            uuid: String::new(),
            name: String::new(),
            memory: Memory {
                total: GIB,
                reserved: 0,
                extra_used: 0,
            },
            gpu_instance_id: gi,
        };
        let gpu = Gpu {
            uuid: String::new(),
            name: String::new(),
            memory: Memory {
                total: 80 * GIB,
                reserved: 0,
                extra_used: 0,
            },
            mig: Mig::Enabled(vec![mig(3), mig(5)]),
            lost: false,
            minor: 0,
        };
        let claims = [
            claim(10, Used::Bytes(GIB), Kind::Compute, Some(1)),
            claim(11, Used::Unavailable { counted: 0 }, Kind::Compute, None),
            claim(12, Used::Bytes(GIB), Kind::Graphics, Some(0)),
            claim(13, Used::Bytes(GIB), Kind::Compute, Some(6)),
        ];
        let row = |pid, used, gi, ci| ProcessRow {
            pid,
            used_gpu_memory: used,
            gpu_instance_id: gi,
            compute_instance_id: ci,
        };
        assert_eq!(
            process_rows(&gpu, None, &claims, Kind::Compute),
            [
                row(10, GIB, 5, 0),
                row(11, u64::MAX, NO_INSTANCE, NO_INSTANCE),
                row(13, GIB, NO_INSTANCE, NO_INSTANCE)
            ]
        );
        assert_eq!(
            process_rows(&gpu, None, &claims, Kind::Graphics),
            [row(12, GIB, 3, 0)]
        );
        assert_eq!(
            process_rows(&gpu, Some(1), &claims, Kind::Compute),
            [row(10, GIB, 5, 0)]
        );
        assert_eq!(process_rows(&gpu, Some(0), &claims, Kind::Compute), []);
    }

    #[test]
    fn phantoms_have_impossible_pids() {
        let pids: Vec<u32> = phantom_rows(2).map(|row| row.pid).collect();
        assert_eq!(pids, [1 << 22, (1 << 22) + 1]);
    }

    #[test]
    fn the_two_call_protocol() {
        use ListReply::*;
        let cases = [
            (
                (0, 0, false),
                Count {
                    count: 0,
                    is_query: true,
                },
            ),
            (
                (3, 0, false),
                Count {
                    count: 3,
                    is_query: true,
                },
            ),
            (
                (3, 0, true),
                Count {
                    count: 3,
                    is_query: true,
                },
            ),
            (
                (3, 2, true),
                Count {
                    count: 3,
                    is_query: false,
                },
            ),
            ((3, 3, true), Fill { count: 3 }),
            ((3, 8, true), Fill { count: 3 }),
            ((0, 8, true), Fill { count: 0 }),
            ((3, 8, false), MissingBuffer),
        ];
        for ((available, capacity, has_buffer), want) in cases {
            assert_eq!(
                list_reply(available, capacity, has_buffer),
                want,
                "{available} {capacity} {has_buffer}"
            );
        }
    }
}
