//! What a device offers, as far as bundles care: its architecture, limits
//! and aspects. The runtime reads these from the driver; a profile can be
//! written by hand (tests, `is_compatible` for a device one does not have).

use crate::error::Error;
use crate::features::{self, Aspect, Requirements};
use ptxspec_core::device_config::DeviceConfig;

/// A CUDA device and what it offers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Device {
    /// The driver's device ordinal.
    pub ordinal: usize,
    pub name: String,
    /// `(major, minor)`: `(9, 0)` for an H100.
    pub compute_capability: (i32, i32),
    pub max_threads_per_block: u32,
    pub max_block_dims: [u32; 3],
    pub max_shared_memory_per_block: u32,
    pub multiprocessors: u32,
    pub sub_group_size: u32,
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

    pub fn has(&self, aspect: Aspect) -> bool {
        self.aspects.contains(&aspect)
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
        .map_err(Error::KernelNotSupported)
    }
}
