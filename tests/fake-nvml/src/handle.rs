//! Device handles (`nvmlDevice_t`): opaque pointers to the caller, never dereferenced here. They
//! encode which GPU (and MIG device) they name, behind a tag, so that a null pointer, a handle of
//! another library or a real heap pointer is refused rather than mistaken for a GPU.
//!
//! Layout (64-bit): `0x4E564D4C_00_MM_GGGG`: tag "NVML", MIG slot MM (0 = the whole GPU,
//! k+1 = MIG device k), GPU slot GGGG = index + 1.

#[cfg(not(target_pointer_width = "64"))]
compile_error!("fake-nvml encodes handles in 64-bit pointers");

const TAG: u64 = 0x4E56_4D4C << 32;
const TAG_MASK: u64 = 0xFFFF_FFFF_FF00_0000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Handle {
    pub gpu: usize,
    /// `Some(k)`: MIG device k of the GPU.
    pub mig: Option<usize>,
}

impl Handle {
    pub fn encode(self) -> u64 {
        let mig_slot = self.mig.map_or(0, |k| k as u64 + 1);
        TAG | mig_slot << 16 | (self.gpu as u64 + 1)
    }

    /// `None` for anything [`Handle::encode`] cannot have made. Whether the GPU exists is the
    /// caller's question: the scenario may have changed since the handle was given out.
    pub fn decode(raw: u64) -> Option<Handle> {
        if raw & TAG_MASK != TAG {
            return None;
        }
        let gpu_slot = (raw & 0xFFFF) as usize;
        let mig_slot = ((raw >> 16) & 0xFF) as usize;
        let gpu = gpu_slot.checked_sub(1)?;
        Some(Handle {
            gpu,
            mig: mig_slot.checked_sub(1),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        for handle in [
            Handle { gpu: 0, mig: None },
            Handle { gpu: 7, mig: Some(0) },
            Handle {
                gpu: 63,
                mig: Some(6),
            },
        ] {
            assert_eq!(Handle::decode(handle.encode()), Some(handle));
        }
        assert_eq!(Handle { gpu: 0, mig: None }.encode(), 0x4E56_4D4C_0000_0001);
        assert_eq!(Handle { gpu: 2, mig: Some(1) }.encode(), 0x4E56_4D4C_0002_0003);
    }

    #[test]
    fn foreign_pointers_are_refused() {
        for raw in [
            0,
            1,
            0x7fff_1234_5678,
            0x4E56_4D4C_0000_0000,
            0x4E56_4D4C_0100_0001,
            u64::MAX,
        ] {
            assert_eq!(Handle::decode(raw), None, "{raw:#x}");
        }
    }
}
