//! One command group: which bundle (and which of its images), which
//! values, one launch. What the kernel's parameters receive is the
//! device-image contract's to decide (its launch layout); the handler
//! supplies the values, the caller's arguments and, for a global buffer, a
//! device copy of the values.
//!
//! A launch is on the hot path of programs that change values often, so
//! what does not change between launches of one kernel from one built image
//! (its function, signature, the device check) is worked out once per queue
//! and kept as a [`Plan`]; a launch then allocates nothing (with up to two
//! handler values, and arguments of up to 32 bytes each), and reads what
//! it needs from few cache lines: it follows the driver's work for the
//! launch before, which pushes ptxspec's data and code out of the nearest
//! caches. Most launches find their plan among the queue's two most recent,
//! or by the queue's index of plans, and need nothing else made, joined or
//! recorded: they take a short path
//! ([`Handler::ready_plan`]); the others take the whole one
//! ([`Handler::launch_planned`]). Both fill the layout and call the driver
//! through the same code.

mod handler_values;
mod plan;
mod submit;

pub(super) use plan::Plan;
use plan::make_layout;
use std::sync::Arc;
use submit::*;

use super::cuda;
use super::memory::{self, ArgKind, ValueBytes};
use super::tier_switch::TierSwitch;
use super::{Arg, LaunchConfig, Queue, QueueState};
use crate::bundle::{self, DeviceImage, Executable, KernelBundle};
use crate::error::Error;
use crate::image::{KernelArg, LaunchLayout};
use crate::spec_id::{SpecConstType, SpecId};

/// Chooses among the device images of a bundle that define a kernel.
pub type ImageSelector<'q> = Box<dyn Fn(&DeviceImage<Executable>) -> bool + 'q>;

/// One command group: which bundle, which values, one launch.
pub struct Handler<'q> {
    queue: &'q Queue,
    /// Borrowed, not cloned: a launch's own reference count would be two
    /// atomic operations on the hot path of every bundle launch.
    bundle: Option<&'q KernelBundle<Executable>>,
    /// Dropped by `Handler`'s own `drop` where there is one.
    selector: std::mem::ManuallyDrop<Option<ImageSelector<'q>>>,
    /// Values set on the handler, by symbolic ID (a few inline: a command
    /// group with handler values allocates nothing).
    /// Dropped by `Handler`'s own `drop` where they hold anything.
    values:
        std::mem::ManuallyDrop<smallvec::SmallVec<[(&'static str, ValueBytes); HANDLER_VALUES]>>,
    /// The type of each value (same index): its layout and name, checked
    /// against the image the launch uses.
    value_types: std::mem::ManuallyDrop<smallvec::SmallVec<[ValueType; HANDLER_VALUES]>>,
    /// Whether it holds what its drop must free: a selector, a value on
    /// the heap, value lists spilled to the heap (`values` and
    /// `value_types` spill together, as they grow together).
    holds: bool,
    /// Whether its launch is recorded by the queue's capture (a
    /// [`CaptureHandler`](super::CaptureHandler)'s): the one kind of launch
    /// a capturing queue takes.
    capturing: bool,
}

/// Handler values kept inline.
const HANDLER_VALUES: usize = 2;

/// A value's layout (made when checked) and its Rust type's name.
type ValueType = (fn() -> ptxspec_core::layout::SpecType, &'static str);

impl<'q> Handler<'q> {
    #[inline(always)]
    pub(super) fn new(queue: &'q Queue) -> Self {
        Handler {
            queue,
            bundle: None,
            selector: std::mem::ManuallyDrop::new(None),
            values: std::mem::ManuallyDrop::new(smallvec::SmallVec::new()),
            value_types: std::mem::ManuallyDrop::new(smallvec::SmallVec::new()),
            holds: false,
            capturing: false,
        }
    }

    /// A handler whose launch the queue's capture records.
    pub(super) fn capturing(queue: &'q Queue) -> Self {
        let mut h = Handler::new(queue);
        h.capturing = true;
        h
    }

    /// Launches from `bundle` (a kernel outside it is `kernel_not_supported`, as SYCL 2020 says).
    /// Setting values on the handler is then an error, as in SYCL 2020; a
    /// bundle built for other devices than the queue's is `invalid_object`.
    /// The bundle is borrowed for the submission (made before `submit`, as
    /// bundles are: a launch then counts no reference).
    #[inline]
    pub fn use_kernel_bundle(&mut self, bundle: &'q KernelBundle<Executable>) -> Result<(), Error> {
        if !self.values.is_empty() {
            return Err(bundle_after_values());
        }
        if !bundle.runs_on(self.queue.ordinal) {
            return Err(self.bundle_of_other_devices(bundle));
        }
        self.bundle = Some(bundle);
        Ok(())
    }

    #[cold]
    fn bundle_of_other_devices(&self, bundle: &KernelBundle<Executable>) -> Error {
        Error::invalid(
            crate::error::Misuse::OtherDevice,
            format!(
                "the kernel bundle was built for devices {:?}, not for device {} ({}) of this queue",
                bundle.devices().unwrap_or_default(),
                self.queue.ordinal,
                self.queue.device.name
            ),
        )
    }

    /// [`use_kernel_bundle`](Self::use_kernel_bundle), launching from the
    /// first image that `selector` keeps among those that define the kernel
    /// (the SYCL modules proposal's device-image selector at dispatch).
    pub fn use_kernel_bundle_selected(
        &mut self,
        bundle: &'q KernelBundle<Executable>,
        selector: impl Fn(&DeviceImage<Executable>) -> bool + 'q,
    ) -> Result<(), Error> {
        self.use_kernel_bundle(bundle)?;
        *self.selector = Some(Box::new(selector));
        self.holds = true;
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
            return Err(Error::invalid(
                crate::error::Misuse::CommandGroupOrder,
                "set_specialization_constant after use_kernel_bundle: set values on the bundle"
                    .into(),
            ));
        }
        let bytes = ValueBytes::new(bytemuck::bytes_of(&value));
        let ty = (T::spec_type as fn() -> _, std::any::type_name::<T>());
        // What the handler's drop must free: a value on the heap, a list
        // spilled to the heap. A few small values own nothing.
        let owns = bytes.on_heap();
        match self.values.iter().position(|(n, _)| *n == id.symbolic_id()) {
            Some(i) => {
                self.values[i].1 = bytes;
                self.value_types[i] = ty;
            }
            None => {
                self.values.push((id.symbolic_id(), bytes));
                self.value_types.push(ty);
            }
        }
        if owns || self.values.spilled() {
            self.holds = true;
        }
        Ok(())
    }

    /// The value of `id` for this command group (SYCL 2020's
    /// `handler::get_specialization_constant`): the one set on the handler,
    /// else the bundle's (after [`use_kernel_bundle`](Self::use_kernel_bundle)),
    /// else the default — the registered images' (where one uses the
    /// constant), else the one `id` carries.
    pub fn get_specialization_constant<T: bytemuck::Pod + SpecConstType>(
        &self,
        id: &SpecId<T>,
    ) -> Result<T, Error> {
        if let Some((_, v)) = self.values.iter().find(|(n, _)| *n == id.symbolic_id())
            && v.as_slice().len() == std::mem::size_of::<T>()
        {
            return Ok(bytemuck::pod_read_unaligned(v.as_slice()));
        }
        match self.bundle {
            Some(b) => b.get_specialization_constant(id),
            None => bundle::get_kernel_bundle()?.get_specialization_constant(id),
        }
    }

    /// Launches `kernel` (its name, [`KernelId`](crate::KernelId) or
    /// [`Kernel`](crate::bundle::Kernel)) with the caller's arguments; the
    /// runtime passes the specialization constants where the signature
    /// marks it.
    ///
    /// Safe by the trust model (the crate docs, `docs/guide/trust-model.md`):
    /// a parameter the kernel may use as an address takes device memory of
    /// the queue's context only ([`Arg::buffer`](super::Arg::buffer),
    /// [`Arg::slice`](super::Arg::slice)); a number for it is refused
    /// (`Error::KernelArgument`), and the memory outlives the kernel. What
    /// the kernel does inside the memory it was given — an index past a
    /// buffer's end — is the kernel's contract: device data, never Rust's
    /// memory.
    pub fn launch<K: crate::bundle::KernelName + ?Sized>(
        &mut self,
        kernel: &K,
        cfg: LaunchConfig,
        args: &[Arg<'_>],
    ) -> Result<(), Error> {
        self.launch_named(kernel.kernel_name(), &cfg, args)
    }

    fn launch_named(
        &mut self,
        kernel: &str,
        cfg: &LaunchConfig,
        args: &[Arg<'_>],
    ) -> Result<(), Error> {
        let q = self.queue;
        q.bind()?;
        let mut guard = q.state.lock().unwrap_or_else(|p| p.into_inner());
        let state = &mut *guard;
        if let Some((at, slices)) = self.ready_plan(state, kernel, cfg, args) {
            state.paths.short += 1;
            let Launching {
                plan,
                buffers,
                capture,
                ..
            } = self.launching(state, at)?;
            plan.fill_layout(q, self.travelling_values(plan.running), capture, buffers)?;
            let Some(layout) = &plan.layout else {
                return Err(Error::Internal("a launch layout missing after its fill"));
            };
            let watch = plan.adapt.as_deref_mut();
            if slices {
                return submit_with_slices(q, &plan.function, watch, layout, cfg, args);
            }
            let user = args.iter().map(|a| a.kernel_arg(|| &0));
            return submit_watched(q, &plan.function, watch, layout, cfg, args, user);
        }
        self.launch_found(guard, kernel, *cfg, args)
    }

    /// A launch that [`ready_plan`](Self::ready_plan) did not take: it
    /// finds (or makes) its plan, then takes
    /// [`launch_planned`](Self::launch_planned). Out of the line of the
    /// others.
    #[inline(never)]
    fn launch_found(
        &self,
        mut guard: std::sync::MutexGuard<'q, QueueState>,
        kernel: &str,
        cfg: LaunchConfig,
        args: &[Arg<'_>],
    ) -> Result<(), Error> {
        guard.paths.whole += 1;
        if guard.capture.is_some() != self.capturing {
            return Err(capture_mismatch(self.capturing));
        }
        let kernel = self.kernel_name(&guard, kernel)?;
        let (mut guard, at) = self.plan(guard, &kernel)?;
        self.launch_planned(&mut guard, at, &kernel, cfg, args)
    }

    /// The name a launch of `kernel` runs by: `kernel` itself where the
    /// bundle (without one, a registered image) has it, else the one
    /// mangled kernel whose C++ function is `kernel` (a kernel declared
    /// without `extern "C"`, launched as `damp`). Plans keep the image's
    /// name: a launch by the C++ name finds its plan past the fast path.
    fn kernel_name<'k>(
        &self,
        state: &QueueState,
        kernel: &'k str,
    ) -> Result<std::borrow::Cow<'k, str>, Error> {
        use std::borrow::Cow;
        // Nothing allocated where the name is the kernel's own.
        let found = match self.bundle {
            Some(b) => b
                .find_kernel(kernel)
                .filter(|id| id.name() != kernel)
                .map(|id| id.name().to_string()),
            None if state.implicit.contains_key(kernel) => None,
            None => crate::registry::resolve_kernel_cached(kernel)?,
        };
        Ok(match found {
            Some(name) if name != kernel => Cow::Owned(name),
            _ => Cow::Borrowed(kernel),
        })
    }

    /// The plan a launch can use as it stands, where it brings nothing to
    /// find, make, join or record: one of the queue's two most recent
    /// plans, or the one its index names, for this kernel and this bundle
    /// (or the registered images, with the handler's values), not waiting
    /// for a tier, its layout made
    /// for as many arguments, the launch's work-group size its required
    /// one; no selector, no capture, no counting of handler values for a
    /// tier; arguments that are values, buffers of the queue's stream, or
    /// cudarc slices of it where cudarc keeps no order of its own in the
    /// context (its event tracking off: its records of their uses then
    /// record nothing, and make the stream wait for nothing). Returns the
    /// plan's index and whether there are slices.
    /// The launch then checks its handler values and fills the layout as
    /// any launch does. `None`: it takes
    /// [`launch_planned`](Self::launch_planned).
    ///
    /// What most launches do, in little code and few cache lines: the
    /// driver's work between launches pushes both out of the processor's
    /// nearest caches.
    #[inline]
    fn ready_plan(
        &self,
        state: &QueueState,
        kernel: &str,
        cfg: &LaunchConfig,
        args: &[Arg<'_>],
    ) -> Option<(usize, bool)> {
        // Handler values counted for a tier of theirs choose their plan.
        if self.selector.is_some()
            || state.capture.is_some()
            || state.foreign_capture
            || (!self.values.is_empty() && state.handler_tier_after.is_some())
        {
            return None;
        }
        // Handler values not counted: no tier of theirs.
        let at = state.plan_for(self.identity(), kernel, |p| {
            self.launches_from(p, None) && p.is_for(kernel)
        })?;
        let plan = &state.plans[at];
        let layout = plan.layout.as_ref()?;
        let stream = &self.queue.stream;
        let ready = plan.upgrade.is_none()
            && layout.arguments() == args.len()
            && plan
                .running
                .work_group
                .is_none_or(|w| w == [cfg.block.0, cfg.block.1, cfg.block.2]);
        if !ready {
            return None;
        }
        let mut slices = false;
        for a in args {
            let home = match &a.0 {
                ArgKind::Value(_) | ArgKind::Raw(_) | ArgKind::Vouched(_) => continue,
                ArgKind::Buffer { home, .. } => home,
                ArgKind::Slice(s) => {
                    slices = true;
                    s.home()
                }
                ArgKind::SliceMut(_, home) => {
                    slices = true;
                    home
                }
            };
            if !Arc::ptr_eq(home, stream) {
                return None;
            }
        }
        if slices && self.queue.ctx.is_managing_stream_synchronization() {
            return None;
        }
        Some((at, slices))
    }

    /// Plan `at` runs this launch: it is the queue's last launched, the
    /// handler's values checked against it, its mode the last launch's.
    /// Returns what the launch uses of the queue's state, borrowed apart.
    #[inline(always)]
    fn launching<'s>(&self, state: &'s mut QueueState, at: usize) -> Result<Launching<'s>, Error> {
        state.launched(at);
        let QueueState {
            plans,
            buffers,
            last_mode,
            capture,
            ..
        } = state;
        let Some(plan) = plans.get_mut(at) else {
            return Err(Error::Internal("a launch's plan missing from its queue"));
        };
        if !self.values.is_empty() {
            self.check_values(&plan.built_values.image, &mut plan.checked_values)?;
        }
        *last_mode = Some(plan.running.mode);
        Ok(Launching {
            plan,
            buffers,
            capture,
        })
    }

    /// A launch that finds or makes its plan (and its layout), joins other
    /// streams' memory, records cudarc's uses of its slices and a capture,
    /// as it needs: every launch [`ready_plan`](Self::ready_plan) does not
    /// take.
    #[inline(never)]
    fn launch_planned(
        &self,
        state: &mut QueueState,
        at: usize,
        kernel: &str,
        cfg: LaunchConfig,
        args: &[Arg<'_>],
    ) -> Result<(), Error> {
        let q = self.queue;
        q.leave_foreign_capture(state, "a launch")?;
        let result = self.launch_joined(state, at, kernel, cfg, args);
        if result.is_err() {
            q.note_foreign_capture(state);
        }
        result
    }

    /// [`launch_planned`](Self::launch_planned), once the queue's stream is
    /// known to be in no capture it did not begin.
    fn launch_joined(
        &self,
        state: &mut QueueState,
        at: usize,
        kernel: &str,
        cfg: LaunchConfig,
        args: &[Arg<'_>],
    ) -> Result<(), Error> {
        let q = self.queue;
        let Launching {
            plan,
            buffers,
            capture,
        } = self.launching(state, at)?;
        let running = plan.running;
        if let Some(want) = running.work_group {
            let block = [cfg.block.0, cfg.block.1, cfg.block.2];
            if block != want {
                return Err(wrong_work_group(kernel, want, block));
            }
        }
        let uses = wait_for_other_streams(&q.stream, args, capture.is_some(), kernel)?;
        // cudarc slices: cudarc's own records of the use, made when these
        // are dropped — after the launch. Nothing is allocated without them.
        let mut written = borrow_written_slices(args)?;
        let (slice_addresses, records) = record_slice_uses(&q.stream, args, &mut written)?;
        // cudarc's own tracking made the stream wait for the slices' last
        // uses: where one was recorded in a capture of another stream, the
        // queue's stream joined that capture. It launches nothing there,
        // and records none of cudarc's uses (which would let that capture
        // join back and make a graph of the queue's work).
        // (Where cudarc keeps no order of its own, it made no wait.)
        if !records.is_empty()
            && capture.is_none()
            && q.ctx.is_managing_stream_synchronization()
            && cuda::is_capturing(&q.stream)?
        {
            std::mem::forget(records);
            return Err(super::joined_a_foreign_capture(&format!(
                "a launch of kernel {kernel}"
            )));
        }
        let mut next_slice = slice_addresses.iter();
        let user = args
            .iter()
            .map(|a| a.kernel_arg(|| next_slice.next().unwrap_or(&0)));
        if plan
            .layout
            .as_ref()
            .is_none_or(|l| l.arguments() != args.len())
        {
            plan.layout_filled = false;
            plan.layout = Some(make_layout(&plan.built, plan.signature, args.len())?);
        }
        let values = self.travelling_values(running);
        let placed = plan.fill_layout(q, values, capture, buffers)?;
        let capturing = capture.is_some();
        let Plan {
            built,
            function,
            layout,
            chosen,
            upgrade,
            module,
            signature,
            adapt,
            ..
        } = &mut *plan;
        let Some(l) = layout else {
            return Err(Error::Internal("a launch layout missing after it was made"));
        };
        // A capture runs a variant made already for the launch's
        // arguments, which stay the node's for the graph's life (the graph
        // keeps the variant loaded), and counts nothing.
        let generic: &cuda::Function = function;
        let (adapted, pending) = match adapt.as_deref_mut() {
            Some(watch) if !capturing => {
                submit_chosen(q, watch.choose(args), generic, &cfg, l, user)?;
                (None, None)
            }
            Some(watch) => {
                let (function, pending) = match watch.for_node(args) {
                    super::adapt::ForNode::Ready(f) => (f, None),
                    super::adapt::ForNode::Pending(p, c) => (generic, Some((p, c))),
                    super::adapt::ForNode::Generic => (generic, None),
                };
                submit(q, function, &cfg, l, user)?;
                (
                    (!std::ptr::eq(function, generic)).then_some(function),
                    pending,
                )
            }
            None => {
                submit(q, generic, &cfg, l, user)?;
                (None, None)
            }
        };
        if capturing && let Some(c) = capture.as_mut() {
            c.record(
                &q.stream,
                super::graph::Recorded {
                    kernel,
                    cfg,
                    args,
                    slice_addresses: &slice_addresses,
                    signature: *signature,
                    chosen,
                    running: built,
                    link: upgrade.as_deref().map(TierSwitch::link),
                    values,
                    module: (module.0, &module.1),
                    buffer: placed,
                    adapted,
                    pending,
                    addresses: l.addresses(),
                },
            )?;
        }
        drop(records);
        drop(written);
        // Memory of other streams: theirs now waits for the launch.
        for home in args.iter().filter_map(Arg::home) {
            uses.end(home)?;
        }
        q.retire_let_go(state);
        Ok(())
    }
}
