//! The CUDA side: devices, queues, launches (driver API through `cudarc`,
//! loaded dynamically, so that a machine without a driver gets
//! [`Error::NoDriver`] instead of a failure to start).
//!
//! A [`Queue`] owns a CUDA stream on one device and caches what launches
//! need: loaded modules by (image, PTX) — a native bundle's specialized PTX
//! differs per value set, bounded — and, per emulated image, one device
//! buffer that is uploaded again only when its contents change.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use cudarc::driver::sys::CUdevice_attribute as Attr;
use cudarc::driver::{CudaContext, CudaFunction, CudaModule, CudaSlice, CudaStream, DevicePtr};

use crate::bundle::{self, BuiltImage, Executable, KernelBundle, KernelId, SpecMode};
use crate::error::Error;
use crate::features::{self, Aspect};
use crate::spec_id::{SpecConstType, SpecId};

/// Whether libcuda can be loaded on this machine.
pub fn driver_available() -> bool {
    // SAFETY: only tries to open the library; no CUDA call is made.
    unsafe { cudarc::driver::sys::is_culib_present() }
}

fn require_driver() -> Result<(), Error> {
    if driver_available() {
        Ok(())
    } else {
        Err(Error::NoDriver(
            "no libcuda.so on the library path: this machine has no NVIDIA GPU driver".into(),
        ))
    }
}

/// A CUDA device and what it offers.
#[derive(Clone, Debug)]
pub struct Device {
    pub ordinal: usize,
    pub name: String,
    pub compute_capability: (i32, i32),
    pub max_threads_per_block: u32,
    pub max_block_dims: [u32; 3],
    pub max_shared_memory_per_block: u32,
    pub multiprocessors: u32,
    pub sub_group_size: u32,
    pub aspects: Vec<Aspect>,
}

impl Device {
    fn query(ctx: &CudaContext) -> Result<Device, Error> {
        let a = |attr| ctx.attribute(attr).map(|v| v as u32);
        let cc = ctx.compute_capability()?;
        // The same table as the shipped device configuration (nvidia.yaml).
        let mut aspects = vec![
            Aspect::GPU,
            Aspect::FP64,
            Aspect::USM_DEVICE_ALLOCATIONS,
            Aspect::USM_HOST_ALLOCATIONS,
            Aspect::USM_SHARED_ALLOCATIONS,
            Aspect::ATOMIC64,
        ];
        if cc >= (5, 3) {
            aspects.push(Aspect::FP16);
        }
        if cc >= (8, 0) {
            aspects.extend([Aspect::CUDA_ASYNC_BARRIER, Aspect::BF16_MATH]);
        }
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
            aspects,
        })
    }

    pub fn has(&self, aspect: Aspect) -> bool {
        self.aspects.contains(&aspect)
    }

    /// Whether this device can run code with these requirements; the error
    /// is seed 003's message (`kernel_not_supported`).
    pub fn check(&self, r: &features::Requirements) -> Result<(), Error> {
        features::check_device(
            r,
            &self.aspects,
            &[self.sub_group_size],
            self.max_threads_per_block,
        )
        .map_err(Error::KernelNotSupported)
    }
}

/// The CUDA devices of this machine.
pub fn devices() -> Result<Vec<Device>, Error> {
    require_driver()?;
    let n = CudaContext::device_count()?;
    (0..n as usize)
        .map(|i| Device::query(&*CudaContext::new(i)?))
        .collect()
}

/// Device memory holding `T`s.
pub struct DeviceBuffer<T> {
    slice: CudaSlice<u8>,
    len: usize,
    _t: std::marker::PhantomData<T>,
}

impl<T> DeviceBuffer<T> {
    /// The underlying bytes, for interop with `cudarc`.
    pub fn slice(&self) -> &CudaSlice<u8> {
        &self.slice
    }
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// One kernel argument.
pub enum Arg<'a> {
    /// A value passed by value (its bytes).
    Value(Vec<u8>),
    /// A device buffer, passed as its address.
    Buffer(&'a CudaSlice<u8>),
}

impl<'a> Arg<'a> {
    pub fn value<T: bytemuck::Pod>(v: T) -> Self {
        Arg::Value(bytemuck::bytes_of(&v).to_vec())
    }
    pub fn buffer<T>(b: &'a DeviceBuffer<T>) -> Self {
        Arg::Buffer(&b.slice)
    }
    fn size(&self) -> usize {
        match self {
            Arg::Value(v) => v.len(),
            Arg::Buffer(_) => 8,
        }
    }
}

/// Grid, block and dynamic shared memory of a launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaunchConfig {
    pub grid: (u32, u32, u32),
    pub block: (u32, u32, u32),
    pub shared_mem_bytes: u32,
}

impl LaunchConfig {
    pub fn new(grid: (u32, u32, u32), block: (u32, u32, u32)) -> Self {
        LaunchConfig {
            grid,
            block,
            shared_mem_bytes: 0,
        }
    }
    pub fn with_shared_mem(mut self, bytes: u32) -> Self {
        self.shared_mem_bytes = bytes;
        self
    }
}

/// How many native modules a queue keeps loaded.
const MODULE_CACHE: usize = 64;

struct LoadedModule {
    _ptx: Arc<String>,
    module: Arc<CudaModule>,
    functions: HashMap<String, CudaFunction>,
}

#[derive(Default)]
struct QueueState {
    /// (image, PTX identity) → the PTX (kept alive so that its address
    /// stays its identity), the loaded module and its functions.
    modules: HashMap<(String, usize), LoadedModule>,
    /// Load order, for eviction.
    module_order: VecDeque<(String, usize)>,
    /// Emulated image → its buffer and what was last uploaded to it.
    buffers: HashMap<String, (CudaSlice<u8>, Vec<u8>)>,
    /// Kernel → the emulated image that handler-set values patch.
    implicit: HashMap<String, Arc<BuiltImage>>,
}

/// A CUDA stream on one device, with the caches launches need. `Send +
/// Sync`: threads may submit to one queue; submissions are serialized.
pub struct Queue {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    device: Device,
    state: Mutex<QueueState>,
}

impl Queue {
    /// A queue on device `ordinal`.
    pub fn new(ordinal: usize) -> Result<Queue, Error> {
        require_driver()?;
        let ctx = CudaContext::new(ordinal)?;
        // SAFETY: a queue uses one stream, whose order already sequences
        // every use of the buffers made on it; cudarc's per-buffer events
        // (a record and a wait per buffer argument of every launch) would
        // only add launch overhead.
        unsafe { ctx.disable_event_tracking() };
        let device = Device::query(&ctx)?;
        let stream = ctx.new_stream()?;
        Ok(Queue {
            ctx,
            stream,
            device,
            state: Mutex::default(),
        })
    }

    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The CUDA stream submissions go to (for events and interop).
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// The CUDA context of the queue's device.
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// Waits for everything submitted so far.
    pub fn wait(&self) -> Result<(), Error> {
        self.stream.synchronize()?;
        Ok(())
    }

    /// Free and total device memory, in bytes.
    pub fn memory_info(&self) -> Result<(usize, usize), Error> {
        Ok(self.ctx.mem_get_info()?)
    }

    /// A buffer holding a copy of `data`.
    pub fn upload<T: bytemuck::Pod>(&self, data: &[T]) -> Result<DeviceBuffer<T>, Error> {
        let slice = self
            .stream
            .clone_htod(bytemuck::cast_slice::<T, u8>(data))?;
        Ok(DeviceBuffer {
            slice,
            len: data.len(),
            _t: std::marker::PhantomData,
        })
    }

    /// A buffer of `len` zeroed `T`s.
    pub fn alloc_zeros<T: bytemuck::Pod>(&self, len: usize) -> Result<DeviceBuffer<T>, Error> {
        let slice = self
            .stream
            .alloc_zeros::<u8>(len * std::mem::size_of::<T>())?;
        Ok(DeviceBuffer {
            slice,
            len,
            _t: std::marker::PhantomData,
        })
    }

    /// The contents of a buffer (waits for the queue).
    pub fn download<T: bytemuck::Pod>(&self, buf: &DeviceBuffer<T>) -> Result<Vec<T>, Error> {
        let bytes = self.stream.clone_dtoh(&buf.slice)?;
        let mut out = vec![T::zeroed(); buf.len];
        bytemuck::cast_slice_mut::<T, u8>(&mut out).copy_from_slice(&bytes);
        Ok(out)
    }

    /// Runs `f` with a handler for one command group, as SYCL's `submit`.
    pub fn submit<R>(
        &self,
        f: impl FnOnce(&mut Handler<'_>) -> Result<R, Error>,
    ) -> Result<R, Error> {
        let mut h = Handler {
            queue: self,
            bundle: None,
            values: BTreeMap::new(),
        };
        f(&mut h)
    }

    /// The module of a built image in this queue's context.
    fn function(
        &self,
        state: &mut QueueState,
        built: &BuiltImage,
        kernel: &str,
    ) -> Result<CudaFunction, Error> {
        let key = (built.image.id.clone(), Arc::as_ptr(&built.ptx) as usize);
        if !state.modules.contains_key(&key) {
            if state.module_order.len() >= MODULE_CACHE
                && let Some(old) = state.module_order.pop_front()
            {
                state.modules.remove(&old);
            }
            let module = self
                .ctx
                .load_module(cudarc::nvrtc::Ptx::from_src(built.ptx.as_str()))?;
            state.modules.insert(
                key.clone(),
                LoadedModule {
                    _ptx: Arc::clone(&built.ptx),
                    module,
                    functions: HashMap::new(),
                },
            );
            state.module_order.push_back(key.clone());
        }
        let loaded = state
            .modules
            .get_mut(&key)
            .ok_or_else(|| Error::Cuda("module cache".into()))?;
        if let Some(f) = loaded.functions.get(kernel) {
            return Ok(f.clone());
        }
        let f = loaded.module.load_function(kernel)?;
        loaded.functions.insert(kernel.to_string(), f.clone());
        Ok(f)
    }

    /// The device address of an emulated image's buffer holding `blob`,
    /// uploading only when the contents changed.
    fn buffer(&self, state: &mut QueueState, image: &str, blob: &[u8]) -> Result<u64, Error> {
        if blob.is_empty() {
            return Ok(0);
        }
        match state.buffers.get_mut(image) {
            Some((slice, last)) if slice.len() == blob.len() => {
                if last.as_slice() != blob {
                    self.stream.memcpy_htod(blob, slice)?;
                    last.clear();
                    last.extend_from_slice(blob);
                }
            }
            _ => {
                let slice = self.stream.clone_htod(blob)?;
                state
                    .buffers
                    .insert(image.to_string(), (slice, blob.to_vec()));
            }
        }
        let (slice, _) = state
            .buffers
            .get(image)
            .ok_or_else(|| Error::Cuda("buffer cache".into()))?;
        let (ptr, _sync) = slice.device_ptr(&self.stream);
        Ok(ptr)
    }
}

/// One command group: which bundle, which values, one launch.
pub struct Handler<'q> {
    queue: &'q Queue,
    bundle: Option<KernelBundle<Executable>>,
    values: BTreeMap<String, Vec<u8>>,
}

impl Handler<'_> {
    /// Launches from `bundle` (kernels outside it are `invalid_kernel`).
    /// Setting values on the handler is then an error, as in SYCL 2020.
    pub fn use_kernel_bundle(&mut self, bundle: &KernelBundle<Executable>) -> Result<(), Error> {
        if !self.values.is_empty() {
            return Err(Error::InvalidObject(
                "use_kernel_bundle after set_specialization_constant in the same command group"
                    .into(),
            ));
        }
        self.bundle = Some(bundle.clone());
        Ok(())
    }

    /// Sets a value for this submission; the kernel's bundle is built on
    /// demand with it, cached by the values, in emulated mode (a change of
    /// value costs a buffer upload rather than a JIT compilation).
    pub fn set_specialization_constant<T: bytemuck::Pod + SpecConstType>(
        &mut self,
        id: &SpecId<T>,
        value: T,
    ) -> Result<(), Error> {
        if self.bundle.is_some() {
            return Err(Error::InvalidObject(
                "set_specialization_constant after use_kernel_bundle: set values on the bundle"
                    .into(),
            ));
        }
        self.values.insert(
            id.symbolic_id().to_string(),
            bytemuck::bytes_of(&value).to_vec(),
        );
        Ok(())
    }

    /// Launches `kernel` with the caller's arguments; the runtime passes the
    /// specialization-constant buffer where the signature marks it.
    pub fn launch(
        &mut self,
        kernel: &str,
        cfg: LaunchConfig,
        args: &[Arg<'_>],
    ) -> Result<(), Error> {
        let q = self.queue;
        let mut state = q.state.lock().unwrap_or_else(|p| p.into_inner());
        let built = match &self.bundle {
            Some(b) => {
                let id = KernelId::new(kernel);
                if !b.has_kernel(&id) {
                    return Err(Error::InvalidKernel(format!(
                        "kernel {kernel} is not in the bundle given to use_kernel_bundle"
                    )));
                }
                Arc::clone(b.built_image(&id)?)
            }
            None => implicit_image(&mut state, kernel)?,
        };
        let signature = built
            .image
            .kernel(kernel)
            .ok_or_else(|| Error::KernelNotFound(kernel.to_string()))?;
        // Synchronously, before the image is loaded: can this device run it,
        // and does the launch honour a required work-group size?
        q.device.check(&built.image.requirements)?;
        if let Some(w) = &built.image.requirements.reqd_work_group_size {
            let block = [cfg.block.0, cfg.block.1, cfg.block.2];
            let want: Vec<u32> = (0..3).map(|d| w.get(d).copied().unwrap_or(1)).collect();
            if block[..] != want[..] {
                return Err(Error::NdRange(format!(
                    "kernel {kernel} has a required work-group size of {want:?} but is launched with {block:?}"
                )));
            }
        }
        check_args(signature, args)?;
        let func = q.function(&mut state, &built, kernel)?;
        let buffer = match (built.mode, &self.bundle) {
            (SpecMode::Native, _) => 0,
            (SpecMode::Emulated, Some(_)) => q.buffer(&mut state, &built.image.id, &built.blob)?,
            // Handler-set values patch the defaults here: no bundle is built.
            (SpecMode::Emulated, None) => {
                let blob = patched(&built, &self.values)?;
                q.buffer(&mut state, &built.image.id, &blob)?
            }
        };
        // One 8-byte slot per pointer-sized argument, values by address.
        let mut words: Vec<u64> = Vec::with_capacity(signature.params.len());
        let mut user = args.iter();
        for p in &signature.params {
            words.push(if p.is_spec_const_buffer() {
                buffer
            } else {
                match user.next() {
                    Some(Arg::Buffer(s)) => s.device_ptr(&q.stream).0,
                    _ => 0,
                }
            });
        }
        let mut user = args.iter();
        let mut params: Vec<*mut std::ffi::c_void> = Vec::with_capacity(words.len());
        for (p, w) in signature.params.iter().zip(words.iter_mut()) {
            let value = if p.is_spec_const_buffer() {
                None
            } else {
                user.next()
            };
            params.push(match value {
                Some(Arg::Value(v)) => v.as_ptr() as *mut std::ffi::c_void,
                _ => w as *mut u64 as *mut std::ffi::c_void,
            });
        }
        q.ctx.bind_to_thread()?;
        // SAFETY: `params` holds one pointer per kernel parameter to a value
        // of the parameter's size (checked against the signature), alive
        // until the call returns; device buffers outlive the launch through
        // `args`, and the queue's single stream orders their uses.
        unsafe {
            cudarc::driver::result::launch_kernel(
                func.cu_function(),
                cfg.grid,
                cfg.block,
                cfg.shared_mem_bytes,
                q.stream.cu_stream(),
                &mut params,
            )?;
        }
        Ok(())
    }
}

/// The buffer contents of `built` with handler-set `values` written over
/// its defaults; an unknown constant or a wrong size is `spec_const_error`.
fn patched(built: &BuiltImage, values: &BTreeMap<String, Vec<u8>>) -> Result<Vec<u8>, Error> {
    let mut blob = built.blob.as_ref().clone();
    for (id, v) in values {
        built.image.write_value(&mut blob, id, v)?;
    }
    Ok(blob)
}

fn check_args(sig: &crate::postlink::KernelSignature, args: &[Arg<'_>]) -> Result<(), Error> {
    let expected: Vec<u32> = sig
        .params
        .iter()
        .filter(|p| !p.is_spec_const_buffer())
        .map(|p| p.size)
        .collect();
    if expected.len() != args.len() {
        return Err(Error::KernelArgument(format!(
            "kernel {} takes {} arguments (the specialization-constant buffer is added by the runtime), {} given",
            sig.name,
            expected.len(),
            args.len()
        )));
    }
    for (i, (want, got)) in expected.iter().zip(args).enumerate() {
        if *want as usize != got.size() {
            return Err(Error::KernelArgument(format!(
                "kernel {} argument {i}: {} bytes given, the parameter has {want}",
                sig.name,
                got.size()
            )));
        }
    }
    Ok(())
}

/// The emulated image (with its defaults) of a registered kernel, built
/// once per queue. Emulated, so that values that change per submission cost
/// an upload of the buffer, not a JIT compilation.
fn implicit_image(state: &mut QueueState, kernel: &str) -> Result<Arc<BuiltImage>, Error> {
    if let Some(b) = state.implicit.get(kernel) {
        return Ok(Arc::clone(b));
    }
    let id = KernelId::new(kernel);
    let input =
        bundle::get_kernel_bundle_for(std::slice::from_ref(&id))?.with_mode(SpecMode::Emulated);
    let built = Arc::clone(bundle::build(&input)?.built_image(&id)?);
    state
        .implicit
        .insert(kernel.to_string(), Arc::clone(&built));
    Ok(built)
}
