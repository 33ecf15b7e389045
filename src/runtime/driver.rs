//! The CUDA driver: whether it is there, and the devices it has.

use cudarc::driver::CudaContext;
use cudarc::driver::sys::CUdevice_attribute as Attr;

use crate::bundle::Device;
use crate::error::Error;

/// Whether libcuda can be loaded on this machine.
pub fn driver_available() -> bool {
    super::cuda::driver_available()
}

pub(super) fn require_driver() -> Result<(), Error> {
    if driver_available() {
        Ok(())
    } else {
        Err(Error::NoDriver(
            "no libcuda.so on the library path: this machine has no NVIDIA GPU driver".into(),
        ))
    }
}

pub(super) fn query(ctx: &CudaContext) -> Result<Device, Error> {
    let a = |attr| ctx.attribute(attr).map(|v| v as u32);
    let cc = ctx.compute_capability()?;
    Ok(Device {
        ordinal: ctx.ordinal(),
        name: ctx.name()?,
        compute_capability: cc,
        max_threads_per_block: a(Attr::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK)?,
        max_block_dims: [
            a(Attr::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X)?,
            a(Attr::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y)?,
            a(Attr::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z)?,
        ],
        max_shared_memory_per_block: a(Attr::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK)?,
        multiprocessors: a(Attr::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?,
        sub_group_size: a(Attr::CU_DEVICE_ATTRIBUTE_WARP_SIZE)?,
        aspects: Device::aspects_of(cc),
    })
}

/// The CUDA devices of this machine.
pub fn devices() -> Result<Vec<Device>, Error> {
    require_driver()?;
    let n = CudaContext::device_count()?;
    (0..n as usize)
        .map(|i| query(&*CudaContext::new(i)?))
        .collect()
}
