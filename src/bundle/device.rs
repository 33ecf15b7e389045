//! What a device offers, as far as bundles care: its architecture, limits
//! and aspects. The runtime reads these from the driver; a profile can be
//! written by hand (tests, `is_compatible` for a device one does not have).

use crate::error::Error;
use ptxspec_core::device_config::DeviceConfig;
use ptxspec_core::features;
use ptxspec_core::features::{Aspect, Requirements};
use ptxspec_core::toolkit::{Lib, require};

/// Whether this process has the online compiler or linker `aspect` names.
fn online(aspect: Aspect) -> bool {
    match aspect {
        Aspect::ONLINE_COMPILER => require(Lib::Nvrtc).is_ok(),
        Aspect::ONLINE_LINKER => require(Lib::NvJitLink).is_ok(),
        _ => false,
    }
}

/// A CUDA device and what it offers: a queue's device
/// ([`Queue::device`](crate::Queue::device)), or [`Device::profile`] of a
/// compute capability with any field changed.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Device {
    /// The driver's device ordinal.
    pub ordinal: usize,
    /// The driver's name of it (`NVIDIA H100 80GB HBM3`).
    pub name: String,
    /// `(major, minor)`: `(9, 0)` for an H100.
    pub compute_capability: (i32, i32),
    /// The most threads in one block (work-group).
    pub max_threads_per_block: u32,
    /// The most threads of a block in x, y and z.
    pub max_block_dims: [u32; 3],
    /// Static shared memory per block, in bytes.
    pub max_shared_memory_per_block: u32,
    /// Streaming multiprocessors (0 for a profile).
    pub multiprocessors: u32,
    /// The sub-group (warp) size: 32.
    pub sub_group_size: u32,
    /// The SYCL aspects it has.
    pub aspects: Vec<Aspect>,
}

impl Device {
    /// The aspects of a CUDA device of this compute capability, from the
    /// shipped device configuration (`nvidia.yaml`, the one table of them;
    /// see [`DeviceConfig::nvidia_target`]).
    pub fn aspects_of(compute_capability: (i32, i32)) -> Vec<Aspect> {
        DeviceConfig::nvidia_target(compute_capability)
            .map(|t| t.aspects.clone())
            .unwrap_or_default()
    }

    /// A device of this compute capability that need not be present (for
    /// [`is_compatible`](crate::is_compatible) and bound builds): CUDA's
    /// fixed limits — 1024 threads per block, blocks of at most 1024 × 1024
    /// × 64, 48 KiB of static shared memory per block, 32-thread warps —
    /// and [`aspects_of`](Self::aspects_of). Its multiprocessor count is
    /// unknown (0). Change any field for a particular device.
    pub fn profile(ordinal: usize, compute_capability: (i32, i32)) -> Device {
        Device {
            ordinal,
            name: format!(
                "sm_{}{} profile",
                compute_capability.0, compute_capability.1
            ),
            compute_capability,
            max_threads_per_block: 1024,
            max_block_dims: [1024, 1024, 64],
            max_shared_memory_per_block: 48 << 10,
            multiprocessors: 0,
            sub_group_size: 32,
            aspects: Device::aspects_of(compute_capability),
        }
    }

    /// `sm_<arch>` as a number: 90 for compute capability 9.0.
    pub fn arch(&self) -> u32 {
        (self.compute_capability.0 * 10 + self.compute_capability.1) as u32
    }

    /// Whether it has `aspect`: one of [`aspects`](Self::aspects), or
    /// `online_compiler` / `online_linker` where this process can compile
    /// (NVRTC loads) or link (nvJitLink loads) device code for it — what
    /// the process can do, not the card: asked, not listed, since loading a
    /// library costs milliseconds a process that never asks should not pay.
    pub fn has(&self, aspect: Aspect) -> bool {
        self.aspects.contains(&aspect) || online(aspect)
    }

    /// Whether this device can run code with these requirements; the error
    /// is DPC++'s optional kernel features design's message (`kernel_not_supported`).
    pub fn check(&self, r: &Requirements) -> Result<(), Error> {
        features::check_device(
            r,
            &self.aspects,
            &[self.sub_group_size],
            self.max_threads_per_block,
        )
        .map_err(|detail| Error::kernel_not_supported(None, detail))
    }
}
