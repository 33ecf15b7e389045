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
//! caches. Most launches find their plan among the queue's two most recent
//! and need nothing else made, joined or recorded: they take a short path
//! ([`Handler::ready_plan`]); the others take the whole one
//! ([`Handler::launch_planned`]). Both fill the layout and call the driver
//! through the same code.

use std::sync::Arc;

use super::CodeRef;
use super::memory::{self, ArgKind, ValueBytes};
use super::module;
use super::tier_switch::{self, TierSwitch};
use super::{Arg, LaunchConfig, Queue, QueueState};
use crate::bundle::tier;
use crate::bundle::{self, BuiltImage, DeviceImage, Executable, KernelBundle, KernelId, SpecMode};
use crate::error::Error;
use crate::image::{KernelArg, LaunchLayout, launch_layout};
use crate::spec_id::{SpecConstType, SpecId};

/// Chooses among the device images of a bundle that define a kernel.
pub type ImageSelector<'q> = Box<dyn Fn(&DeviceImage<Executable>) -> bool + 'q>;

/// One command group: which bundle, which values, one launch.
pub struct Handler<'q> {
    queue: &'q Queue,
    /// Borrowed, not cloned: a launch's own reference count would be two
    /// atomic operations on the hot path of every bundle launch.
    bundle: Option<&'q KernelBundle<Executable>>,
    selector: Option<ImageSelector<'q>>,
    /// Values set on the handler, by symbolic ID (a few inline: a command
    /// group with handler values allocates nothing).
    values: smallvec::SmallVec<[(&'static str, ValueBytes); HANDLER_VALUES]>,
    /// The type of each value (same index): its layout and name, checked
    /// against the image the launch uses.
    value_types: smallvec::SmallVec<[ValueType; HANDLER_VALUES]>,
    /// Whether its launch is recorded by the queue's capture (a
    /// [`CaptureHandler`](super::CaptureHandler)'s): the one kind of launch
    /// a capturing queue takes.
    capturing: bool,
}

/// Handler values kept inline.
const HANDLER_VALUES: usize = 2;

/// A value's layout (made when checked) and its Rust type's name.
type ValueType = (fn() -> crate::layout::SpecType, &'static str);

/// What launches of one kernel from one built image share.
///
/// Laid out in declaration order, what every launch reads first: a launch
/// follows the driver's own work, which pushes the plan out of the
/// processor's nearest caches, so each cache line it reads costs time
/// (measured in BENCHMARKS.md, "launch overhead").
#[repr(C, align(64))]
pub(super) struct Plan {
    // Read by every launch (the first cache line: what finds the plan).
    /// The kernel's name, inline where short: finding the plan reads no
    /// other cache line for it.
    kernel: KernelName,
    source: PlanSource,
    function: module::Function,
    /// What every launch reads of `chosen` and `built`, kept here.
    running: Running,
    /// Whether `layout` holds `built`'s own values (no handler values) —
    /// for a global buffer, its address while the queue's buffers had been
    /// written over `buffer_overwrites` times.
    layout_filled: bool,
    buffer_overwrites: u64,
    /// The kernel's launch layout for `built` (made at the first launch).
    layout: Option<LaunchLayout>,
    /// A tiered image's switch for this kernel, until the plan switched
    /// (its link is asked for once the kernel has been launched for
    /// [`tier::tier_after`], unless someone asked sooner).
    upgrade: Option<TierSwitch>,
    // Read by launches with handler values, or to make the layout.
    /// Handler values (symbolic ID, Rust type name) found to suit `built`
    /// already, with the ID's slot there: a launch checks each new pair
    /// and looks its slot up once, not every launch.
    checked_values: smallvec::SmallVec<[CheckedValue; HANDLER_VALUES]>,
    /// What a fill reads of `built`, kept here.
    built_values: BuiltValues,
    /// The image chosen for the launch (a tiered image, while `built` runs
    /// its emulated code or, once switched, its specialized tier).
    chosen: Arc<BuiltImage>,
    built: Arc<BuiltImage>,
    /// The loaded module `function` belongs to, and its key (what a
    /// capture records for the graph, whether or not the queue's cache
    /// still holds it).
    module: (super::ModuleKey, super::LoadedModule),
    /// Index of the kernel's signature in its image.
    signature: usize,
}

/// A kernel's name as a plan keeps it (UTF-8, made from a `&str`).
type KernelName = smallvec::SmallVec<[u8; 32]>;

/// A plan's kernel name as text (its bytes came from a `&str`: never
/// lossy).
fn name_text(name: &KernelName) -> std::borrow::Cow<'_, str> {
    String::from_utf8_lossy(name)
}

/// What a launch reads of its plan's images, copied into the plan: a
/// launch with unchanged values then reads the plan alone, not the images'
/// memory (which the driver's own work between launches pushes out of the
/// processor's nearest caches).
#[derive(Clone, Copy)]
struct Running {
    /// The mode the launch runs in (a tiered image before its switch:
    /// emulated).
    mode: SpecMode,
    /// The kernel's required work-group size, where the image has one.
    work_group: Option<[u32; 3]>,
    /// Whether handler values travel with the launch: not where a tiered
    /// image of handler values has them in its code.
    values_travel: bool,
    /// Whether the chosen image is a tiered one.
    chosen_tiered: bool,
}

impl Running {
    fn of(chosen: &BuiltImage, built: &BuiltImage) -> Running {
        Running {
            mode: tier_switch::running_mode(built),
            work_group: built
                .image()
                .requirements()
                .reqd_work_group_size
                .as_ref()
                // A plan is made for a device that can run the image: its
                // dimensions fit (one that did not would refuse every block).
                .map(|w| {
                    [0, 1, 2]
                        .map(|d| u32::try_from(w.get(d).copied().unwrap_or(1)).unwrap_or(u32::MAX))
                }),
            values_travel: chosen.tier.is_none() || built.delivery().takes_values_at_launch(),
            chosen_tiered: chosen.tier.is_some(),
        }
    }
}

/// What a fill of a plan's launch layout reads of its built image: the
/// image (its slots, and the key of its global buffers) and its values, a
/// copy in the plan (a fill then reads one line of them, not the built
/// image's and its buffer's first).
struct BuiltValues {
    image: Arc<crate::image::Image>,
    blob: Box<[u8]>,
}

impl BuiltValues {
    fn of(built: &BuiltImage) -> BuiltValues {
        BuiltValues {
            image: Arc::clone(built.image()),
            blob: built.blob().as_slice().into(),
        }
    }
}

/// A handler value's symbolic ID and Rust type name, checked against a
/// plan's image, and the ID's slot there (`None`: the image has no such
/// constant; the value is for other kernels).
type CheckedValue = (&'static str, &'static str, Option<crate::image::Slot>);

/// How many checked (ID, type) pairs a plan remembers.
const CHECKED_VALUES: usize = 64;

impl Plan {
    /// Whether the plan is for `kernel`.
    #[inline]
    fn is_for(&self, kernel: &str) -> bool {
        self.kernel.as_slice() == kernel.as_bytes()
    }

    /// Fills the plan's layout for a launch with `values` (the handler's,
    /// checked) where it holds other values: a launch with the plan's own
    /// values fills it once — for a global buffer, again once the queue
    /// wrote over one of its buffers (it may have been this one), and while
    /// capturing (the graph keeps its own). Returns where a captured
    /// launch's buffer was placed.
    #[inline]
    fn fill_layout(
        &mut self,
        q: &Queue,
        values: &[(&str, ValueBytes)],
        capture: &mut Option<Box<super::graph::Capture>>,
        buffers: &mut super::GlobalBufferCache,
    ) -> Result<Option<super::graph::ArenaSlot>, Error> {
        let Some(layout) = self.layout.as_mut() else {
            return Err(Error::Internal("a launch layout filled before it was made"));
        };
        let global = layout.delivery() == crate::image::Delivery::GlobalBuffer;
        if self.layout_filled
            && values.is_empty()
            && !(global && (capture.is_some() || self.buffer_overwrites != buffers.overwrites()))
        {
            return Ok(None);
        }
        // Not the plan's own values while it is being filled (a fill that
        // fails leaves it partly written).
        self.layout_filled = false;
        let placed = fill(
            q,
            layout,
            &self.built_values,
            values,
            &self.checked_values,
            capture,
            buffers,
        )?;
        // An address in a graph's memory serves that graph alone.
        self.layout_filled = values.is_empty() && placed.is_none();
        self.buffer_overwrites = buffers.overwrites();
        Ok(placed)
    }
}

/// What a plan was made for.
enum PlanSource {
    /// Launches with handler values (the kernel's implicit image).
    Implicit,
    /// Launches from this bundle (kept, so that its address, which finds the
    /// plan, is not reused while the plan lives).
    Bundle(KernelBundle<Executable>),
    /// Launches from a bundle through a selector: found by the image.
    Selected,
}

/// Plans a queue keeps (most recent first).
pub(super) const PLANS: usize = 32;

/// What a launch looking for its plan (or its handler tier) found under
/// the queue's lock, or the work to do without it first.
enum Lookup<T> {
    Found(T),
    /// A handler value set reached its tier threshold: build its tiered
    /// image (of `image` with `values`), then keep it under `key`.
    BuildTier {
        key: (String, Vec<u8>),
        image: Arc<crate::image::Image>,
        values: std::collections::BTreeMap<String, Vec<u8>>,
    },
    /// A new plan: its code to link and load.
    Make(Box<PlanRecipe>),
}

/// A new plan as decided under the queue's lock, before its code is
/// loaded.
struct PlanRecipe {
    chosen: Arc<BuiltImage>,
    built: Arc<BuiltImage>,
    upgrade: Option<TierSwitch>,
    signature: usize,
}

impl<'q> Handler<'q> {
    pub(super) fn new(queue: &'q Queue) -> Self {
        Handler {
            queue,
            bundle: None,
            selector: None,
            values: smallvec::SmallVec::new(),
            value_types: smallvec::SmallVec::new(),
            capturing: false,
        }
    }

    /// A handler whose launch the queue's capture records.
    pub(super) fn capturing(queue: &'q Queue) -> Self {
        Handler {
            capturing: true,
            ..Handler::new(queue)
        }
    }

    /// Launches from `bundle` (a kernel outside it is `kernel_not_supported`, as SYCL 2020 says).
    /// Setting values on the handler is then an error, as in SYCL 2020; a
    /// bundle built for other devices than the queue's is `invalid_object`.
    /// The bundle is borrowed for the submission (made before `submit`, as
    /// bundles are: a launch then counts no reference).
    pub fn use_kernel_bundle(&mut self, bundle: &'q KernelBundle<Executable>) -> Result<(), Error> {
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
        self.bundle = Some(bundle);
        Ok(())
    }

    /// [`use_kernel_bundle`](Self::use_kernel_bundle), launching from the
    /// first image that `selector` keeps among those that define the kernel
    /// (the SYCL modules proposal's device-image selector at dispatch).
    pub fn use_kernel_bundle_with(
        &mut self,
        bundle: &'q KernelBundle<Executable>,
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
        let bytes = bytemuck::bytes_of(&value);
        let ty = (T::spec_type as fn() -> _, std::any::type_name::<T>());
        match self.values.iter().position(|(n, _)| *n == id.symbolic_id()) {
            Some(i) => {
                self.values[i].1 = ValueBytes::new(bytes);
                self.value_types[i] = ty;
            }
            None => {
                self.values.push((id.symbolic_id(), ValueBytes::new(bytes)));
                self.value_types.push(ty);
            }
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

    /// For launches with handler values, once the queue counts them
    /// ([`Queue::tier_up_handler_values`]): the tiered image of this value
    /// set, made when its launches reach the threshold — built by the
    /// launch without the queue's lock ([`Lookup::BuildTier`]). `None`
    /// below it, or where the values do not make a blob (the launch
    /// reports that).
    fn handler_tier(
        &self,
        state: &mut QueueState,
        kernel: &str,
    ) -> Result<Lookup<Option<Arc<BuiltImage>>>, Error> {
        let Some(after) = state.handler_tier_after else {
            return Ok(Lookup::Found(None));
        };
        if self.bundle.is_some() || self.values.is_empty() {
            return Ok(Lookup::Found(None));
        }
        let implicit = implicit_image(state, kernel)?;
        let image = implicit.image();
        let values: std::collections::BTreeMap<String, Vec<u8>> = self
            .values
            .iter()
            .filter(|(id, _)| image.slot(id).is_some())
            .map(|(id, v)| (id.to_string(), v.as_slice().to_vec()))
            .collect();
        if values.is_empty() {
            return Ok(Lookup::Found(None));
        }
        let Ok(blob) = image.blob_with(&values) else {
            return Ok(Lookup::Found(None));
        };
        if state.handler_tiers.len() >= super::HANDLER_TIERS {
            state.handler_tiers.clear();
        }
        let key = (kernel.to_string(), blob);
        let entry = state.handler_tiers.entry(key.clone()).or_default();
        entry.launches = entry.launches.saturating_add(1);
        if entry.tiered.is_none() && entry.launches >= after {
            return Ok(Lookup::BuildTier {
                key,
                image: Arc::clone(image),
                values,
            });
        }
        Ok(Lookup::Found(entry.tiered.clone()))
    }

    /// The built image a launch of `kernel` uses.
    fn image_for(&self, state: &mut QueueState, kernel: &str) -> Result<Arc<BuiltImage>, Error> {
        let Some(b) = self.bundle else {
            return implicit_image(state, kernel);
        };
        if !b.kernel_ids().iter().any(|k| k.name() == kernel) {
            // SYCL 2020 (SYCL-CTS
            // use_kernel_bundle_invoke_kernel_without_bundle_no_second_queue.cpp).
            return Err(Error::KernelNotSupported(format!(
                "kernel {kernel} is not in the bundle given to use_kernel_bundle"
            )));
        }
        let Some(select) = &self.selector else {
            return Ok(Arc::clone(b.built_image_named(kernel)?));
        };
        let id = KernelId::new(kernel);
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

    /// Whether this handler's launches use plans made like `plan` (by its
    /// bundle, or its handler values: their tiered image `handler_tier`,
    /// or none); a selector's plans are found by their image instead.
    #[inline]
    fn launches_from(&self, plan: &Plan, handler_tier: Option<&Arc<BuiltImage>>) -> bool {
        match (&plan.source, self.bundle, &self.selector) {
            (PlanSource::Implicit, None, _) => match handler_tier {
                Some(t) => Arc::ptr_eq(&plan.chosen, t),
                None => !plan.running.chosen_tiered,
            },
            (PlanSource::Bundle(b), Some(mine), None) => b.identity() == mine.identity(),
            _ => false,
        }
    }

    /// The plan of `kernel` for this handler's bundle (or its handler
    /// values), found by the bundle and the kernel's name (switched to its
    /// tier where that became ready) — or what must be done, without the
    /// queue's lock, before there is one: a handler tier's image to build,
    /// or a new plan whose code is to be linked and loaded. Choosing the
    /// image and checking that the device can run it happen here. Plans
    /// chosen by a selector are not kept for the bundle.
    fn find_plan(&self, state: &mut QueueState, kernel: &str) -> Result<Lookup<usize>, Error> {
        let handler_tier = match self.handler_tier(state, kernel)? {
            Lookup::Found(t) => t,
            Lookup::BuildTier { key, image, values } => {
                return Ok(Lookup::BuildTier { key, image, values });
            }
            Lookup::Make(_) => return Err(Error::Internal("a handler tier asked for a plan")),
        };
        let found = |p: &Plan| self.launches_from(p, handler_tier.as_ref()) && p.is_for(kernel);
        if let Some(i) = state
            .recent_plan(found)
            .or_else(|| state.plans.iter().position(found))
        {
            return self.switch_when_ready(state, i).map(Lookup::Found);
        }
        let chosen = match handler_tier {
            Some(t) => t,
            None => self.image_for(state, kernel)?,
        };
        if self.selector.is_some()
            && let Some(i) = state.plans.iter().position(|p| {
                matches!(p.source, PlanSource::Selected)
                    && Arc::ptr_eq(&p.chosen, &chosen)
                    && p.is_for(kernel)
            })
        {
            return self.switch_when_ready(state, i).map(Lookup::Found);
        }
        // A tiered image runs its specialized tier where that is linked (or
        // its cubin is in this process already), else its emulated code
        // while a worker links the tier.
        let q = self.queue;
        let (built, upgrade) = match &chosen.tier {
            Some(tier) => {
                let link = tier.link_state(q.device.arch(), kernel);
                if tier.ready_or_cached(&link, q.device.arch(), kernel) {
                    (Arc::clone(tier.specialized()), None)
                } else {
                    (Arc::clone(&chosen), Some(TierSwitch::new(link)))
                }
            }
            None => (Arc::clone(&chosen), None),
        };
        let signature = built
            .image()
            .kernels()
            .iter()
            .position(|k| k.name == kernel)
            .ok_or_else(|| Error::KernelNotFound(kernel.to_string()))?;
        // Before anything is loaded: can this device run the image?
        q.device.check(built.image().requirements())?;
        Ok(Lookup::Make(Box::new(PlanRecipe {
            chosen,
            built,
            upgrade,
            signature,
        })))
    }

    /// Links (where it is an LTO image's) and loads the code of a new plan
    /// for `kernel`, with the queue's lock released (taken only to look in
    /// the queue's cache): other threads' launches go on meanwhile.
    /// Threads that load the same code at once share one load.
    fn make_code(&self, recipe: &PlanRecipe, kernel: &str) -> Result<(), Error> {
        let q = self.queue;
        let code = CodeRef::of(&recipe.built, q.device.arch(), kernel)?;
        let key = code.key;
        let cell = {
            let mut state = q.state.lock().unwrap_or_else(|p| p.into_inner());
            if state.modules.contains_key(&key) {
                return Ok(());
            }
            Arc::clone(state.loading.entry(key).or_default())
        };
        let mut slot = cell.lock().unwrap_or_else(|p| p.into_inner());
        let loaded = match &*slot {
            Some(loaded) => loaded.clone(),
            None => {
                let loaded = code.load(&recipe.built, self.bundle);
                let mut state = q.state.lock().unwrap_or_else(|p| p.into_inner());
                let loaded = match loaded {
                    Ok(l) => l,
                    Err(e) => {
                        state.loading.remove(&key);
                        return Err(e);
                    }
                };
                *slot = Some(loaded.clone());
                loaded
            }
        };
        drop(slot);
        let mut state = q.state.lock().unwrap_or_else(|p| p.into_inner());
        if !state.modules.contains_key(&key) {
            q.adopt(&mut state, key, loaded);
        }
        state.loading.remove(&key);
        Ok(())
    }

    /// The plan `recipe` describes, its code loaded already
    /// ([`make_code`](Self::make_code)): one made meanwhile by another
    /// thread where there is one, else made now.
    fn insert_plan(
        &self,
        state: &mut QueueState,
        kernel: &str,
        recipe: PlanRecipe,
    ) -> Result<usize, Error> {
        let q = self.queue;
        let PlanRecipe {
            chosen,
            built,
            upgrade,
            signature,
        } = recipe;
        if let Some(i) = state.plans.iter().position(|p| {
            Arc::ptr_eq(&p.chosen, &chosen)
                && Arc::ptr_eq(&p.built, &built)
                && p.is_for(kernel)
                && match (&p.source, self.bundle, &self.selector) {
                    (PlanSource::Implicit, None, _) => true,
                    (PlanSource::Bundle(b), Some(mine), None) => b.identity() == mine.identity(),
                    (PlanSource::Selected, Some(_), Some(_)) => true,
                    _ => false,
                }
        }) {
            return Ok(i);
        }
        let (function, module) = q.function(state, &built, kernel, self.bundle)?;
        let running = Running::of(&chosen, &built);
        let built_values = BuiltValues::of(&built);
        if state.plans.len() >= PLANS
            && let Some(old) = state.plans.pop()
        {
            // Its function may be the last owner of its module.
            state.let_go.push(Box::new(old));
        }
        state.plans.insert(
            0,
            Plan {
                source: match (self.bundle, &self.selector) {
                    (None, _) => PlanSource::Implicit,
                    (Some(b), None) => PlanSource::Bundle(b.clone()),
                    (Some(_), Some(_)) => PlanSource::Selected,
                },
                chosen,
                built,
                upgrade,
                kernel: KernelName::from_slice(kernel.as_bytes()),
                function,
                module,
                signature,
                checked_values: smallvec::SmallVec::new(),
                built_values,
                layout: None,
                layout_filled: false,
                buffer_overwrites: 0,
                running,
            },
        );
        // A tiered plan asks for its link here too where no delay is wanted.
        self.switch_when_ready(state, 0)
    }

    /// The plan of a launch on the whole path: found, or made — with what
    /// is slow (a link, the driver's JIT, a handler tier's image) done
    /// while the queue's lock is released, so that other threads'
    /// launches on the queue never wait for it. Returns the lock again,
    /// and the plan's index under it.
    fn plan<'g>(
        &self,
        mut guard: std::sync::MutexGuard<'g, QueueState>,
        kernel: &str,
    ) -> Result<(std::sync::MutexGuard<'g, QueueState>, usize), Error>
    where
        'q: 'g,
    {
        let q = self.queue;
        // Each pass does one piece of work; a pass finds what the one
        // before made (another thread may have made it first).
        for _ in 0..8 {
            match self.find_plan(&mut guard, kernel)? {
                Lookup::Found(at) => return Ok((guard, at)),
                Lookup::BuildTier { key, image, values } => {
                    drop(guard);
                    let tiered = bundle::built::build_image(
                        &image,
                        &values,
                        SpecMode::Tiered,
                        false,
                        &crate::toolkit::worker::Toolkit::InProcess,
                    )?;
                    guard = q.state.lock().unwrap_or_else(|p| p.into_inner());
                    let entry = guard.handler_tiers.entry(key).or_default();
                    if entry.tiered.is_none() {
                        entry.tiered = Some(tiered);
                    }
                    // Counted once: this launch's count is in already.
                    entry.launches = entry.launches.saturating_sub(1);
                }
                Lookup::Make(recipe) => {
                    drop(guard);
                    self.make_code(&recipe, kernel)?;
                    guard = q.state.lock().unwrap_or_else(|p| p.into_inner());
                    let at = self.insert_plan(&mut guard, kernel, *recipe)?;
                    return Ok((guard, at));
                }
            }
        }
        Err(Error::Internal(
            "a launch's plan was made and lost again eight times",
        ))
    }

    /// Plan `at`, switched to its tiered image's specialized tier if that
    /// became ready and its code is loaded (on the loader thread: until
    /// then the plan's launches run emulated, none waiting for the load).
    /// Where the link or the load failed, the plan stays emulated and the
    /// bundle's log says why. The plan keeps its index.
    fn switch_when_ready(&self, state: &mut QueueState, at: usize) -> Result<usize, Error> {
        let q = self.queue;
        let QueueState {
            plans,
            modules,
            tier_loads,
            ..
        } = &mut *state;
        let Plan {
            upgrade,
            chosen,
            kernel,
            ..
        } = &mut plans[at];
        // A plan that is not waiting for a tier (most launches) stops here,
        // before it reads its image.
        let (Some(switch), Some(tier)) = (upgrade.as_mut(), chosen.tier.as_ref()) else {
            return Ok(at);
        };
        let kernel = name_text(kernel);
        let site = tier_switch::Site {
            tier,
            ctx: &q.ctx,
            arch: q.device.arch(),
            kernel: &kernel,
            ask_after: tier::tier_after(),
        };
        let module = match switch.poll(&site, tier_loads, |k| modules.contains_key(k)) {
            tier_switch::Step::Wait => return Ok(at),
            tier_switch::Step::StayEmulated(why) => {
                tier.stays_emulated(&format!("kernel {kernel}"), &why);
                *upgrade = None;
                return Ok(at);
            }
            tier_switch::Step::Switch(module) => module,
        };
        let tier = Arc::clone(tier);
        let kernel = kernel.into_owned();
        let specialized = Arc::clone(tier.specialized());
        if let Some((key, loaded)) = module {
            q.adopt(state, key, loaded);
        }
        match q.function(state, &specialized, &kernel, self.bundle) {
            Ok((function, module)) => {
                let p = &mut state.plans[at];
                p.running = Running::of(&p.chosen, &specialized);
                p.built_values = BuiltValues::of(&specialized);
                p.built = specialized;
                p.checked_values.clear();
                p.layout = None;
                let old = std::mem::replace(&mut p.function, function);
                p.module = module;
                p.upgrade = None;
                // Its module may have left the cache: the function may be
                // its last owner, and the stream may still run it.
                state.let_go.push(Box::new(old));
            }
            Err(e) => {
                tier.stays_emulated(&format!("kernel {kernel}"), &e);
                state.plans[at].upgrade = None;
            }
        }
        Ok(at)
    }

    /// Checks the handler's values against `image` (their types, where it
    /// has the constant), each (ID, type) pair once per plan; remembers the
    /// ID's slot. Out of the launch's line: most launches set no values.
    #[inline(never)]
    fn check_values(
        &self,
        image: &crate::image::Image,
        checked_values: &mut smallvec::SmallVec<[CheckedValue; HANDLER_VALUES]>,
    ) -> Result<(), Error> {
        for ((id, _), (ty, name)) in self.values.iter().zip(&self.value_types) {
            // By address: the same `SpecId` and type name each launch (a
            // copy elsewhere is checked again, which is only slower).
            if checked_values
                .iter()
                .any(|(i, n, _)| std::ptr::eq(*i, *id) && std::ptr::eq(*n, *name))
            {
                continue;
            }
            let slot = image.slot(id);
            if slot.is_some() {
                image
                    .check_value_type(id, &ty(), name)
                    .map_err(Error::SpecConst)?;
            }
            if checked_values.len() < CHECKED_VALUES {
                checked_values.push((id, name, slot));
            }
        }
        Ok(())
    }

    /// The handler's values that travel with a launch that runs `running`:
    /// none where a tiered image of handler values has them in its blob
    /// and, once switched, in its code.
    #[inline]
    fn travelling_values(&self, running: Running) -> &[(&'static str, ValueBytes)] {
        match running.values_travel {
            true => &self.values,
            false => &[],
        }
    }

    /// Launches `kernel` with the caller's arguments; the runtime passes the
    /// specialization constants where the signature marks it.
    pub fn launch(
        &mut self,
        kernel: &str,
        cfg: LaunchConfig,
        args: &[Arg<'_>],
    ) -> Result<(), Error> {
        let q = self.queue;
        q.ctx.bind_to_thread()?;
        let mut guard = q.state.lock().unwrap_or_else(|p| p.into_inner());
        let state = &mut *guard;
        if let Some(at) = self.ready_plan(state, kernel, &cfg, args) {
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
            // No slices here (`ready_plan`).
            let user = args.iter().map(|a| a.kernel_arg(|| &0));
            return submit(q, &plan.function, cfg, layout, user);
        }
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
    /// name: a launch by the C++ name finds its plan past the fast path's
    /// two most recent plans.
    fn kernel_name<'k>(
        &self,
        state: &QueueState,
        kernel: &'k str,
    ) -> Result<std::borrow::Cow<'k, str>, Error> {
        use std::borrow::Cow;
        let found = match self.bundle {
            Some(b) => b.find_kernel(kernel).map(|id| id.name().to_string()),
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
    /// plans, for this kernel and this bundle (or the registered images,
    /// with the handler's values), not waiting for a tier, its layout made
    /// for as many arguments, the launch's work-group size its required
    /// one; no selector, no capture, no counting of handler values for a
    /// tier; arguments that are values or buffers of the queue's stream.
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
    ) -> Option<usize> {
        // Handler values counted for a tier of theirs choose their plan.
        if self.selector.is_some()
            || state.capture.is_some()
            || (!self.values.is_empty() && state.handler_tier_after.is_some())
        {
            return None;
        }
        // Handler values not counted: no tier of theirs.
        let at = state.recent_plan(|p| self.launches_from(p, None) && p.is_for(kernel))?;
        let plan = &state.plans[at];
        let layout = plan.layout.as_ref()?;
        let stream = &self.queue.stream;
        let ready = plan.upgrade.is_none()
            && layout.arguments() == args.len()
            && plan
                .running
                .work_group
                .is_none_or(|w| w == [cfg.block.0, cfg.block.1, cfg.block.2])
            && args.iter().all(|a| match &a.0 {
                ArgKind::Value(_) => true,
                ArgKind::Buffer { home, .. } => Arc::ptr_eq(home, stream),
                ArgKind::Slice(_) | ArgKind::SliceMut(..) => false,
            });
        ready.then_some(at)
    }

    /// Plan `at` runs this launch: it is the queue's last launched, the
    /// handler's values checked against it, its mode the last launch's.
    /// Returns what the launch uses of the queue's state, borrowed apart.
    #[inline]
    fn launching<'s>(&self, state: &'s mut QueueState, at: usize) -> Result<Launching<'s>, Error> {
        state.launched(at);
        let QueueState {
            plans,
            buffers,
            last_mode,
            capture,
            ..
        } = state;
        let plan = plans
            .get_mut(at)
            .ok_or(Error::Internal("a launch's plan missing from its queue"))?;
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
        // Memory of other streams: this stream first waits for theirs. A
        // capture cannot join other streams (they would join the capture).
        let uses = memory::Use::on(&q.stream);
        for (n, home) in args
            .iter()
            .enumerate()
            .filter_map(|(n, a)| Some((n, a.home()?)))
        {
            if capture.is_some() && !uses.is_home(home) {
                return Err(foreign_memory_in_capture(kernel, n));
            }
            uses.begin(home)?;
        }
        // cudarc slices: cudarc's own records of the use, made when these
        // are dropped — after the launch. Nothing is allocated without them.
        let mut written = Vec::new();
        for a in args {
            if let ArgKind::SliceMut(s, _) = &a.0 {
                written.push(s.try_borrow_mut().map_err(|_| {
                    Error::Internal("a slice_mut argument borrowed twice at one launch")
                })?);
            }
        }
        let mut records = Vec::new();
        let mut slice_addresses = Vec::new();
        let mut written_iter = written.iter_mut();
        for a in args {
            let (address, record) = match &a.0 {
                ArgKind::Slice(s) => s.read(&q.stream),
                ArgKind::SliceMut(..) => match written_iter.next() {
                    Some(s) => s.write(&q.stream),
                    None => return Err(Error::Internal("a slice_mut argument not borrowed")),
                },
                _ => continue,
            };
            slice_addresses.push(address);
            records.push(record);
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
        let Plan {
            built,
            function,
            layout,
            chosen,
            upgrade,
            module,
            signature,
            ..
        } = &*plan;
        let Some(l) = layout else {
            return Err(Error::Internal("a launch layout missing after it was made"));
        };
        // Asked before the launch: the driver's call pushes the queue's
        // state out of the nearest caches.
        let capturing = capture.is_some();
        submit(q, function, cfg, l, user)?;
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
                    link: upgrade.as_ref().map(TierSwitch::link),
                    values,
                    module: (module.0, &module.1),
                    buffer: placed,
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

/// What a launch uses of its queue's state: its plan, and what the plan's
/// fill and a capture's record change or read beside it.
struct Launching<'s> {
    plan: &'s mut Plan,
    buffers: &'s mut super::GlobalBufferCache,
    capture: &'s mut Option<Box<super::graph::Capture>>,
}

/// Places the caller's arguments (`user`) by `layout` and launches
/// `function` on `q`'s stream: the one driver call of every launch, with
/// the queue's lock held and its context bound.
///
/// The memory the arguments point to outlives the launch: buffers on the
/// queue's stream are freed on it, after the kernel; memory of other
/// streams is joined with it around the call (by `launch_planned`), so that
/// their frees wait too; global buffers live in the queue, which
/// synchronizes before it drops them; the lock held keeps the queue's
/// global-buffer cache in step with the stream.
#[inline(always)]
fn submit<'a>(
    q: &Queue,
    function: &module::Function,
    cfg: LaunchConfig,
    layout: &'a LaunchLayout,
    user: impl ExactSizeIterator<Item = KernelArg<'a>>,
) -> Result<(), Error> {
    let mut params = ptxspec_core::image::LaunchParams::new();
    let params = layout.place(user, &mut params)?;
    // SAFETY: `params` holds one pointer per kernel parameter to a value
    // of the parameter's size (the layout checked the count and sizes
    // against the signature), alive until the call returns. `function`
    // owns its module (loaded in the stream's context, which the caller
    // bound), which is dropped only after the stream ran this launch
    // (`Queue::retire_let_go`). The arguments' memory outlives the launch
    // (see above).
    unsafe {
        cudarc::driver::result::launch_kernel(
            function.raw(),
            cfg.grid,
            cfg.block,
            cfg.shared_mem_bytes,
            q.stream.cu_stream(),
            params,
        )?;
    }
    Ok(())
}

// What a launch does rarely, out of its line (as is `Capture::record`):
// the code a launch runs every time then fits in fewer instruction-cache
// lines (which the driver's work between launches evicts as it does data).

#[cold]
fn wrong_work_group(kernel: &str, want: [u32; 3], block: [u32; 3]) -> Error {
    Error::NdRange(format!(
        "kernel {kernel} has a required work-group size of {want:?} but is launched with {block:?}"
    ))
}

#[cold]
fn capture_mismatch(capturing: bool) -> Error {
    Error::InvalidObject(match capturing {
        false => {
            "a launch on a queue that is capturing: while a capture lasts, the queue takes the \
                  launches made through it alone (Capturing::submit)"
                .into()
        }
        true => "a launch recorded for a capture that has ended".into(),
    })
}

#[cold]
fn foreign_memory_in_capture(kernel: &str, n: usize) -> Error {
    Error::InvalidObject(format!(
        "kernel {kernel} argument {n}: memory of another stream passed to a launch that is \
         being captured; a captured launch takes memory of the capturing queue's stream"
    ))
}

/// The launch layout of a plan's kernel (signature `signature` of `built`)
/// for `arguments` arguments.
#[inline(never)]
fn make_layout(
    built: &BuiltImage,
    signature: usize,
    arguments: usize,
) -> Result<LaunchLayout, Error> {
    let kernel_signature = built
        .image()
        .kernels()
        .get(signature)
        .ok_or(Error::Internal(
            "a plan's signature index past its image's kernels",
        ))?;
    Ok(launch_layout(
        kernel_signature,
        built.delivery(),
        arguments,
    )?)
}

/// Fills `layout` with a plan's `built_values` and the launch's `values` (their
/// slots as the plan checked them): in a global buffer of the queue's, or
/// of the capture's graph; returns where a captured launch's buffer was
/// placed.
#[inline(never)]
fn fill(
    q: &Queue,
    layout: &mut LaunchLayout,
    built_values: &BuiltValues,
    values: &[(&str, ValueBytes)],
    checked_values: &[CheckedValue],
    capture: &mut Option<Box<super::graph::Capture>>,
    buffers: &mut super::GlobalBufferCache,
) -> Result<Option<super::graph::ArenaSlot>, Error> {
    let mut placed = None;
    // The slots of the values the plan checked (else the image's).
    let slot_of = |id: &str| match checked_values.iter().find(|(i, ..)| std::ptr::eq(*i, id)) {
        Some((_, _, slot)) => *slot,
        None => built_values.image.slot(id),
    };
    layout.fill_with_slots(
        &built_values.image,
        &built_values.blob,
        values,
        slot_of,
        // A captured launch's values live in the graph's memory: the
        // queue's buffers are overwritten by later value sets.
        |values| match capture.as_mut() {
            Some(c) => {
                let (at, address) = c.place(values)?;
                placed = Some(at);
                Ok(address)
            }
            None => buffers.address(&q.stream, &built_values.image, values),
        },
    )?;
    Ok(placed)
}

/// The emulated image (with its defaults) of a registered kernel, built
/// once per queue, which handler-set values patch.
fn implicit_image(state: &mut QueueState, kernel: &str) -> Result<Arc<BuiltImage>, Error> {
    // Images registered since (a source compiled at run time) may define
    // the kernel anew.
    let generation = crate::registry::generation();
    if let Some((g, b)) = state.implicit.get(kernel)
        && *g == generation
    {
        return Ok(Arc::clone(b));
    }
    let id = KernelId::new(kernel);
    let input =
        bundle::get_kernel_bundle_for(std::slice::from_ref(&id))?.with_mode(SpecMode::Emulated);
    let built = Arc::clone(bundle::build(&input)?.built_image(&id)?);
    state
        .implicit
        .insert(kernel.to_string(), (generation, Arc::clone(&built)));
    Ok(built)
}
