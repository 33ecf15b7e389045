//! One command group: which bundle (and which of its images), which
//! values, one launch — and what the kernel's specialization-constant
//! parameter receives, which the built image's [`Delivery`] decides.

use std::collections::BTreeMap;
use std::ffi::c_void;
use std::sync::Arc;

use super::{Arg, LaunchConfig, Queue, QueueState};
use crate::bundle::{
    self, BuiltImage, Delivery, DeviceImage, Executable, KernelBundle, KernelId, SpecMode,
};
use crate::error::Error;
use crate::postlink::KernelSignature;
use crate::spec_id::{SpecConstType, SpecId};

/// Chooses among the device images of a bundle that define a kernel.
pub type ImageSelector<'q> = Box<dyn Fn(&DeviceImage<Executable>) -> bool + 'q>;

/// One command group: which bundle, which values, one launch.
pub struct Handler<'q> {
    queue: &'q Queue,
    bundle: Option<KernelBundle<Executable>>,
    selector: Option<ImageSelector<'q>>,
    values: BTreeMap<String, Vec<u8>>,
}

impl<'q> Handler<'q> {
    pub(super) fn new(queue: &'q Queue) -> Self {
        Handler {
            queue,
            bundle: None,
            selector: None,
            values: BTreeMap::new(),
        }
    }

    /// Launches from `bundle` (kernels outside it are `invalid_kernel`).
    /// Setting values on the handler is then an error, as in SYCL 2020; a
    /// bundle built for other devices than the queue's is `invalid_object`.
    pub fn use_kernel_bundle(&mut self, bundle: &KernelBundle<Executable>) -> Result<(), Error> {
        if !self.values.is_empty() {
            return Err(Error::InvalidObject(
                "use_kernel_bundle after set_specialization_constant in the same command group"
                    .into(),
            ));
        }
        let ordinal = self.queue.device.ordinal;
        if !bundle.runs_on(ordinal) {
            return Err(Error::InvalidObject(format!(
                "the kernel bundle was built for devices {:?}, not for device {ordinal} ({}) of this queue",
                bundle.devices().unwrap_or_default(),
                self.queue.device.name
            )));
        }
        self.bundle = Some(bundle.clone());
        Ok(())
    }

    /// [`use_kernel_bundle`](Self::use_kernel_bundle), launching from the
    /// first image that `selector` keeps among those that define the kernel
    /// (seed 004's device-image selector at dispatch).
    pub fn use_kernel_bundle_with(
        &mut self,
        bundle: &KernelBundle<Executable>,
        selector: impl Fn(&DeviceImage<Executable>) -> bool + 'q,
    ) -> Result<(), Error> {
        self.use_kernel_bundle(bundle)?;
        self.selector = Some(Box::new(selector));
        Ok(())
    }

    /// Sets a value for this submission. The kernel runs from its image
    /// built in emulated mode with the defaults; the values patch them and
    /// travel with the launch (in the parameter space) or in a device
    /// buffer, as the post-link placed it — never a JIT compilation.
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

    /// The built image a launch of `kernel` uses.
    fn image_for(&self, state: &mut QueueState, kernel: &str) -> Result<Arc<BuiltImage>, Error> {
        let Some(b) = &self.bundle else {
            return implicit_image(state, kernel);
        };
        let id = KernelId::new(kernel);
        if !b.has_kernel(&id) {
            return Err(Error::InvalidKernel(format!(
                "kernel {kernel} is not in the bundle given to use_kernel_bundle"
            )));
        }
        let Some(select) = &self.selector else {
            return Ok(Arc::clone(b.built_image(&id)?));
        };
        b.device_images()
            .into_iter()
            .filter(|d| d.has_kernel(&id))
            .find(|d| select(d))
            .and_then(|d| d.built().cloned())
            .ok_or_else(|| {
                Error::KernelNotFound(format!(
                    "the selector keeps no device image of the bundle that defines kernel {kernel}"
                ))
            })
    }

    /// Launches `kernel` with the caller's arguments; the runtime passes the
    /// specialization constants where the signature marks them.
    pub fn launch(
        &mut self,
        kernel: &str,
        cfg: LaunchConfig,
        args: &[Arg<'_>],
    ) -> Result<(), Error> {
        let q = self.queue;
        q.ctx.bind_to_thread()?;
        let mut state = q.state.lock().unwrap_or_else(|p| p.into_inner());
        let built = self.image_for(&mut state, kernel)?;
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
        if !self.values.is_empty() && !built.delivery.takes_values_at_launch() {
            return Err(Error::SpecConst(format!(
                "values set on the handler cannot reach kernel {kernel}: its image {} has its values in the code",
                built.image.id
            )));
        }
        let func = q.function(&mut state, &built, kernel, self.bundle.as_ref())?;
        let spec = spec_constant_argument(q, &mut state, &built, &self.values, signature)?;
        drop(state);

        // One pointer per kernel parameter to a value of its size: device
        // addresses go into `words` first, then everything is pointed at.
        let user: Vec<Option<&Arg<'_>>> = {
            let mut it = args.iter();
            signature
                .params
                .iter()
                .map(|p| {
                    if p.is_spec_const_buffer() {
                        None
                    } else {
                        it.next()
                    }
                })
                .collect()
        };
        let words: Vec<u64> = user
            .iter()
            .map(|a| match a {
                Some(Arg::Buffer(s)) => {
                    use cudarc::driver::DevicePtr;
                    s.device_ptr(&q.stream).0
                }
                _ => 0,
            })
            .collect();
        let mut params: Vec<*mut c_void> = user
            .iter()
            .zip(&words)
            .map(|(a, w)| match a {
                None => spec.as_ptr() as *mut c_void,
                Some(Arg::Value(v)) => v.as_ptr() as *mut c_void,
                Some(Arg::Buffer(_)) => w as *const u64 as *mut c_void,
            })
            .collect();
        // SAFETY: `params` holds one pointer per kernel parameter to a value
        // of the parameter's size (checked against the signature), alive
        // until the call returns; device buffers outlive the launch through
        // `args`, and the queue's single stream orders their uses.
        unsafe {
            cudarc::driver::result::launch_kernel(
                func,
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

/// What the kernel's specialization-constant parameter receives: zeros
/// (values in the code), the address of a device buffer holding the values,
/// or the values themselves — with handler-set `values` written over the
/// built image's.
fn spec_constant_argument(
    q: &Queue,
    state: &mut QueueState,
    built: &BuiltImage,
    values: &BTreeMap<String, Vec<u8>>,
    signature: &KernelSignature,
) -> Result<Vec<u8>, Error> {
    let size = signature
        .buffer_param()
        .map_or(8, |b| signature.params[b].size as usize)
        .max(8);
    let blob = if values.is_empty() {
        std::borrow::Cow::Borrowed(built.blob.as_slice())
    } else {
        let mut blob = built.blob.as_ref().clone();
        for (id, v) in values {
            built.image.write_value(&mut blob, id, v)?;
        }
        std::borrow::Cow::Owned(blob)
    };
    let mut arg = vec![0u8; size];
    match built.delivery {
        Delivery::InCode => {}
        Delivery::GlobalBuffer => {
            let ptr = q.global_buffer(state, &built.image.id, &blob)?;
            arg[..8].copy_from_slice(&ptr.to_le_bytes());
        }
        Delivery::ParamSpace => arg[..blob.len()].copy_from_slice(&blob),
    }
    Ok(arg)
}

fn check_args(sig: &KernelSignature, args: &[Arg<'_>]) -> Result<(), Error> {
    let expected: Vec<u32> = sig
        .params
        .iter()
        .filter(|p| !p.is_spec_const_buffer())
        .map(|p| p.size)
        .collect();
    if expected.len() != args.len() {
        return Err(Error::KernelArgument(format!(
            "kernel {} takes {} arguments (the specialization constants are added by the runtime), {} given",
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
/// once per queue, which handler-set values patch.
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
