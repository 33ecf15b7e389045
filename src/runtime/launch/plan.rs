//! Launch plans: what launches of one kernel from one built image share
//! (function, launch layout, what a launch reads), how a handler finds one
//! or makes one with the queue's lock released for anything slow, and the
//! implicit image that handler values patch.

use std::sync::Arc;

use crate::bundle::built::tier;
use crate::bundle::{self, BuiltImage, Executable, KernelBundle, KernelId, SpecMode};
use crate::error::Error;
use crate::image::{LaunchLayout, launch_layout};
use crate::runtime::CodeRef;
use crate::runtime::cuda;
use crate::runtime::memory::ValueBytes;
use crate::runtime::tier_switch::{self, TierSwitch};
use crate::runtime::{Queue, QueueState};

use super::{HANDLER_VALUES, Handler};

/// What launches of one kernel from one built image share.
///
/// Laid out in declaration order, what every launch reads first: a launch
/// follows the driver's own work, which pushes the plan out of the
/// processor's nearest caches, so each cache line it reads costs time
/// (measured in BENCHMARKS.md, "launch overhead"). A launch that repeats
/// reads four lines: the first two, and its layout's first two (the
/// `plan_lines` test holds them there).
#[repr(C, align(64))]
pub(in crate::runtime) struct Plan {
    // The first cache line: what finds the plan.
    /// The kernel's name, inline where short: finding the plan reads no
    /// other cache line for it.
    pub(super) kernel: KernelName,
    pub(super) source: PlanSource,
    // The second: what a launch runs, how its layout is filled, whether it
    // waits for a tier or adapts.
    pub(super) function: cuda::Function,
    /// What every launch reads of `chosen` and `built`, kept here.
    pub(super) running: Running,
    /// Whether `layout` holds `built`'s own values (no handler values) —
    /// for a global buffer, its address while the queue's buffers had been
    /// written over `buffer_overwrites` times.
    pub(super) layout_filled: bool,
    pub(super) buffer_overwrites: u64,
    /// A tiered image's switch for this kernel, until the plan switched
    /// (its link is asked for once the kernel has been launched for
    /// [`tier::tier_after`], unless someone asked sooner). Boxed: a launch
    /// reads only whether there is one.
    pub(super) upgrade: Option<Box<TierSwitch>>,
    /// Where the bundle adapts to recurring by-value arguments: what this
    /// plan's launches watched and the variants made.
    pub(super) adapt: Option<Box<crate::runtime::adapt::Watch>>,
    /// The kernel's launch layout for `built` (made at the first launch),
    /// at the third line: what a placement reads of it spans two.
    pub(super) layout: Option<LaunchLayout>,
    /// Index of the kernel's signature in its image.
    pub(super) signature: usize,
    // Read by launches with handler values, or to make the layout.
    /// Handler values (symbolic ID, Rust type name) found to suit `built`
    /// already, with the ID's slot there: a launch checks each new pair
    /// and looks its slot up once, not every launch.
    pub(super) checked_values: smallvec::SmallVec<[CheckedValue; HANDLER_VALUES]>,
    /// What a fill reads of `built`, kept here.
    pub(super) built_values: BuiltValues,
    /// The image chosen for the launch (a tiered image, while `built` runs
    /// its emulated code or, once switched, its specialized tier).
    pub(super) chosen: Arc<BuiltImage>,
    pub(super) built: Arc<BuiltImage>,
    /// The loaded module `function` belongs to, and its key (what a
    /// capture records for the graph, whether or not the queue's cache
    /// still holds it).
    pub(super) module: (crate::runtime::ModuleKey, crate::runtime::LoadedModule),
}

/// A kernel's name as a plan keeps it (UTF-8, made from a `&str`).
pub(super) type KernelName = smallvec::SmallVec<[u8; 32]>;

/// Whether `a` and `b` hold the same bytes, compared here eight at a time:
/// `==` on slices calls the C library's `bcmp`, code that the driver's work
/// between launches leaves out of the nearest caches, for a name of a few
/// words. The bytes past the last whole word are compared as the last
/// eight (or four) bytes, overlapping what was compared, not one by one.
#[inline]
fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let word = |c: Option<&[u8; 8]>| c.map(|c| u64::from_ne_bytes(*c));
    let half = |c: Option<&[u8; 4]>| c.map(|c| u32::from_ne_bytes(*c));
    if a.len() >= 8 {
        let (a_words, b_words) = (a.as_chunks::<8>().0, b.as_chunks::<8>().0);
        a_words
            .iter()
            .zip(b_words)
            .all(|(x, y)| u64::from_ne_bytes(*x) == u64::from_ne_bytes(*y))
            && word(a.last_chunk()) == word(b.last_chunk())
    } else if a.len() >= 4 {
        half(a.first_chunk()) == half(b.first_chunk())
            && half(a.last_chunk()) == half(b.last_chunk())
    } else {
        a.iter().zip(b).all(|(x, y)| x == y)
    }
}

/// A plan's kernel name as text (its bytes came from a `&str`: never
/// lossy).
pub(super) fn name_text(name: &KernelName) -> std::borrow::Cow<'_, str> {
    String::from_utf8_lossy(name)
}

/// What a launch reads of its plan's images, copied into the plan: a
/// launch with unchanged values then reads the plan alone, not the images'
/// memory (which the driver's own work between launches pushes out of the
/// processor's nearest caches).
#[derive(Clone, Copy)]
pub(super) struct Running {
    /// The mode the launch runs in (a tiered image before its switch:
    /// emulated).
    pub(super) mode: SpecMode,
    /// The kernel's required work-group size, where the image has one.
    pub(super) work_group: Option<[u32; 3]>,
    /// Whether handler values travel with the launch: not where a tiered
    /// image of handler values has them in its code.
    pub(super) values_travel: bool,
    /// Whether the chosen image is a tiered one.
    pub(super) chosen_tiered: bool,
}

impl Running {
    pub(super) fn of(chosen: &BuiltImage, built: &BuiltImage) -> Running {
        Running {
            mode: tier_switch::running_mode(built),
            work_group: built
                .image_data()
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
pub(super) struct BuiltValues {
    pub(super) image: Arc<crate::image::ImageData>,
    /// Inline where small (a parameter-space blob is): a fill with
    /// handler values copies it from the plan's own lines.
    pub(super) blob: smallvec::SmallVec<[u8; 16]>,
}

impl BuiltValues {
    pub(super) fn of(built: &BuiltImage) -> BuiltValues {
        BuiltValues {
            image: Arc::clone(built.image_data()),
            blob: smallvec::SmallVec::from_slice(built.blob()),
        }
    }
}

/// A handler value's symbolic ID and Rust type name, checked against a
/// plan's image, and the ID's slot there (`None`: the image has no such
/// constant; the value is for other kernels).
pub(super) type CheckedValue = (&'static str, &'static str, Option<crate::image::Slot>);

/// How many checked (ID, type) pairs a plan remembers.
pub(super) const CHECKED_VALUES: usize = 64;

/// The key of `plan_index` for launches of `kernel` from the bundle of
/// identity `identity` (0: handler values).
#[inline]
fn plan_key(identity: usize, kernel: &[u8]) -> (usize, u64) {
    use std::hash::Hasher;
    let mut hasher = ptxspec_core::fasthash::FxHasher::default();
    hasher.write(kernel);
    (identity, hasher.finish())
}

impl Plan {
    /// The key a launch finds the plan by in the queue's index: a bundle's
    /// plans, and those of handler values without a tier of theirs (the
    /// plans `Handler::launches_from` matches without a handler tier).
    fn index_key(&self) -> Option<(usize, u64)> {
        let identity = match &self.source {
            PlanSource::Bundle(b) => b.identity(),
            PlanSource::Implicit if !self.running.chosen_tiered => 0,
            _ => return None,
        };
        Some(plan_key(identity, &self.kernel))
    }

    /// Whether the plan is for `kernel`.
    #[inline]
    pub(super) fn is_for(&self, kernel: &str) -> bool {
        same_bytes(self.kernel.as_slice(), kernel.as_bytes())
    }

    /// Fills the plan's layout for a launch with `values` (the handler's,
    /// checked) where it holds other values: a launch with the plan's own
    /// values fills it once — for a global buffer, again once the queue
    /// wrote over one of its buffers (it may have been this one), and while
    /// capturing (the graph keeps its own). Returns where a captured
    /// launch's buffer was placed.
    #[inline]
    pub(super) fn fill_layout(
        &mut self,
        q: &Queue,
        values: &[(&str, ValueBytes)],
        capture: &mut Option<Box<crate::runtime::graph::Capture>>,
        buffers: &mut crate::runtime::GlobalBufferCache,
    ) -> Result<Option<crate::runtime::graph::ArenaSlot>, Error> {
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
pub(super) enum PlanSource {
    /// Launches with handler values (the kernel's implicit image).
    Implicit,
    /// Launches from this bundle (kept, so that its address, which finds the
    /// plan, is not reused while the plan lives).
    Bundle(KernelBundle<Executable>),
    /// Launches from a bundle through a selector: found by the image.
    Selected,
}

/// Plans a queue keeps: the kernels a program's launches go round (each
/// bundle's kernels count apart) without making plans again.
pub(in crate::runtime) const PLANS: usize = 64;

/// What a launch looking for its plan (or its handler tier) found under
/// the queue's lock, or the work to do without it first.
pub(super) enum Lookup<T> {
    Found(T),
    /// A handler value set reached its tier threshold: build its tiered
    /// image (of `image` with `values`), then keep it under `key`.
    BuildTier {
        key: (String, Vec<u8>),
        image: Arc<crate::image::ImageData>,
        values: std::collections::BTreeMap<String, Vec<u8>>,
    },
    /// A new plan: its code to link and load.
    Make(Box<PlanRecipe>),
}

/// A new plan as decided under the queue's lock, before its code is
/// loaded.
pub(super) struct PlanRecipe {
    pub(super) chosen: Arc<BuiltImage>,
    pub(super) built: Arc<BuiltImage>,
    pub(super) upgrade: Option<Box<TierSwitch>>,
    pub(super) signature: usize,
}

impl<'q> Handler<'q> {
    /// For launches with handler values, once the queue counts them
    /// ([`Queue::tier_up_handler_values`]): the tiered image of this value
    /// set, made when its launches reach the threshold — built by the
    /// launch without the queue's lock ([`Lookup::BuildTier`]). `None`
    /// below it, or where the values do not make a blob (the launch
    /// reports that).
    pub(super) fn handler_tier(
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
        let image = implicit.image_data();
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
        if state.handler_tiers.len() >= crate::runtime::HANDLER_TIERS {
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

    /// Makes the plan of every kernel of the handler's bundle that this
    /// queue's device runs — each kernel's code loaded, and the variants
    /// of adaptive arguments that the tier profile names asked for — and
    /// waits, until `until`, for those variants' links and loads: what
    /// [`Queue::prepare`](super::Queue::prepare) does. How many kernels.
    pub(in crate::runtime) fn prepare(&self, until: std::time::Instant) -> Result<usize, Error> {
        let q = self.queue;
        let Some(bundle) = self.bundle else {
            return Ok(0);
        };
        q.ctx.bind_to_thread()?;
        let mut links = Vec::new();
        let mut kernels = 0;
        for id in bundle.kernel_ids() {
            if !bundle.has_kernel_on(id, &q.device) {
                continue;
            }
            let guard = q.state.lock().unwrap_or_else(|p| p.into_inner());
            let (guard, at) = self.plan(guard, id.name())?;
            if let Some(watch) = guard.plans.get(at).and_then(|p| p.adapt.as_deref()) {
                links.extend(watch.links_under_way());
            }
            kernels += 1;
        }
        // Polled, not waited on: a link's cell has no waiter (the launches
        // that use it look at it), and this is once per bundle and queue.
        while !links.iter().all(|l| l.linked()) && std::time::Instant::now() < until {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        Ok(kernels)
    }

    /// The built image a launch of `kernel` uses.
    pub(super) fn image_for(
        &self,
        state: &mut QueueState,
        kernel: &str,
    ) -> Result<Arc<BuiltImage>, Error> {
        let Some(b) = self.bundle else {
            return implicit_image(state, kernel);
        };
        if !b.kernel_ids().iter().any(|k| k.name() == kernel) {
            // SYCL 2020 (SYCL-CTS
            // use_kernel_bundle_invoke_kernel_without_bundle_no_second_queue.cpp).
            return Err(Error::kernel_not_supported(
                Some(kernel),
                format!("kernel {kernel} is not in the bundle given to use_kernel_bundle"),
            ));
        }
        let Some(select) = &*self.selector else {
            return Ok(Arc::clone(b.built_image_named(kernel)?));
        };
        let id = KernelId::new(kernel);
        b.device_images()
            .into_iter()
            .filter(|d| d.has_kernel(&id))
            .find(|d| select(d))
            .and_then(|d| d.built().cloned())
            .ok_or_else(|| {
                Error::kernel_not_found(
                    kernel,
                    format!(
                        "the selector keeps no device image of the bundle that defines kernel {kernel}"
                    ),
                )
            })
    }

    /// The identity of the handler's bundle in the queue's plan index (0:
    /// none, its launches take handler values).
    #[inline]
    pub(super) fn identity(&self) -> usize {
        self.bundle.map_or(0, KernelBundle::identity)
    }

    /// Whether this handler's launches use plans made like `plan` (by its
    /// bundle, or its handler values: their tiered image `handler_tier`,
    /// or none); a selector's plans are found by their image instead.
    #[inline]
    pub(super) fn launches_from(
        &self,
        plan: &Plan,
        handler_tier: Option<&Arc<BuiltImage>>,
    ) -> bool {
        match (&plan.source, self.bundle, &*self.selector) {
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
    pub(super) fn find_plan(
        &self,
        state: &mut QueueState,
        kernel: &str,
    ) -> Result<Lookup<usize>, Error> {
        let handler_tier = match self.handler_tier(state, kernel)? {
            Lookup::Found(t) => t,
            Lookup::BuildTier { key, image, values } => {
                return Ok(Lookup::BuildTier { key, image, values });
            }
            Lookup::Make(_) => return Err(Error::Internal("a handler tier asked for a plan")),
        };
        let found = |p: &Plan| self.launches_from(p, handler_tier.as_ref()) && p.is_for(kernel);
        if let Some(i) = state
            .plan_for(self.identity(), kernel, found)
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
        // A tiered image runs its specialized tier where that is ready and
        // loaded in the queue, else its emulated code while a worker links
        // the tier and the loader thread loads it.
        let q = self.queue;
        let (built, upgrade) = match &chosen.tier {
            Some(tier) => {
                let (arch, link) = (q.device.arch(), tier.link_state(q.device.arch(), kernel));
                if tier_switch::starts_specialized(tier, &link, arch, kernel, |key| {
                    state.modules.contains_key(key)
                }) {
                    (Arc::clone(tier.specialized()), None)
                } else {
                    (Arc::clone(&chosen), Some(Box::new(TierSwitch::new(link))))
                }
            }
            None => (Arc::clone(&chosen), None),
        };
        let signature = built
            .image_data()
            .kernels()
            .iter()
            .position(|k| k.name == kernel)
            .ok_or_else(|| {
                Error::kernel_not_found(kernel, format!("no image defines kernel {kernel}"))
            })?;
        // Before anything is loaded: can this device run the image?
        q.device.check(built.image_data().requirements())?;
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
    pub(super) fn make_code(&self, recipe: &PlanRecipe, kernel: &str) -> Result<(), Error> {
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
    pub(super) fn insert_plan(
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
                && match (&p.source, self.bundle, &*self.selector) {
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
        let adapt = match (
            self.bundle.and_then(|b| b.adaptive_arguments()),
            &*self.selector,
        ) {
            (Some(policy), None) if Arc::ptr_eq(&chosen, &built) => {
                crate::runtime::adapt::Watch::new(policy, &built, kernel, q.device.arch(), &q.ctx)
                    .map_err(|why| crate::stats::not_adapted(kernel, why))
                    .ok()
            }
            // Asked for, but this launch runs other code (a selector's
            // choice, or a tier's).
            (Some(_), _) => {
                crate::stats::not_adapted(kernel, crate::stats::NotAdapted::OtherCode);
                None
            }
            _ => None,
        };
        let built_values = BuiltValues::of(&built);
        state.keep_plan(Plan {
            source: match (self.bundle, &*self.selector) {
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
            adapt,
        });
        // A tiered plan asks for its link here too where no delay is wanted.
        self.switch_when_ready(state, 0)
    }

    /// The plan of a launch on the whole path: found, or made — with what
    /// is slow (a link, the driver's JIT, a handler tier's image) done
    /// while the queue's lock is released, so that other threads'
    /// launches on the queue never wait for it. Returns the lock again,
    /// and the plan's index under it.
    pub(super) fn plan<'g>(
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
                        &ptxspec_core::toolkit::worker::Toolkit::InProcess,
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
    pub(super) fn switch_when_ready(
        &self,
        state: &mut QueueState,
        at: usize,
    ) -> Result<usize, Error> {
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
}

/// The launch layout of a plan's kernel (signature `signature` of `built`)
/// for `arguments` arguments.
#[inline(never)]
pub(super) fn make_layout(
    built: &BuiltImage,
    signature: usize,
    arguments: usize,
) -> Result<LaunchLayout, Error> {
    let Some(kernel_signature) = built.image_data().kernels().get(signature) else {
        return Err(Error::Internal(
            "a plan's signature index past its image's kernels",
        ));
    };
    Ok(launch_layout(
        kernel_signature,
        built.delivery(),
        arguments,
        built.image_data().address_params(kernel_signature),
    )?)
}

/// Fills `layout` with a plan's `built_values` and the launch's `values` (their
/// slots as the plan checked them): in a global buffer of the queue's, or
/// of the capture's graph; returns where a captured launch's buffer was
/// placed. (Inlined into the fill of a plan's layout, which calls the
/// layout's own fill: one call, not two, where values change.)
#[inline(always)]
pub(super) fn fill(
    q: &Queue,
    layout: &mut LaunchLayout,
    built_values: &BuiltValues,
    values: &[(&str, ValueBytes)],
    checked_values: &[CheckedValue],
    capture: &mut Option<Box<crate::runtime::graph::Capture>>,
    buffers: &mut crate::runtime::GlobalBufferCache,
) -> Result<Option<crate::runtime::graph::ArenaSlot>, Error> {
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
pub(super) fn implicit_image(
    state: &mut QueueState,
    kernel: &str,
) -> Result<Arc<BuiltImage>, Error> {
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

/// A queue's plans: found, stamped at each launch, kept.
impl QueueState {
    /// The plan of `kernel` from the bundle of identity `identity` (0:
    /// handler values) that is `wanted`: among the recent plans (see
    /// `recent_plans`) — a program that launches one kernel, or two in
    /// turn, finds its plan without reading the others — else where the
    /// index says. `None`: none of those is `wanted` (a plan the index
    /// does not hold — a selector's, a handler tier's — is found by a
    /// scan, [`Handler::find_plan`]).
    #[inline]
    pub(super) fn plan_for(
        &self,
        identity: usize,
        kernel: &str,
        wanted: impl Fn(&Plan) -> bool,
    ) -> Option<usize> {
        let wanted_at = |at: usize| self.plans.get(at).is_some_and(&wanted);
        self.recent_plans
            .into_iter()
            .map(|at| at as usize)
            .find(|&at| wanted_at(at))
            .or_else(|| {
                self.indexed_plan(identity, kernel)
                    .filter(|&at| wanted_at(at))
            })
    }

    /// Where the index puts the plan of `kernel` from the bundle of
    /// identity `identity`: out of the line of the launches that find
    /// theirs among the recent plans (a hash and a probe: inlined, its code
    /// lay among theirs, and they ran over more instruction-cache lines).
    #[inline(never)]
    fn indexed_plan(&self, identity: usize, kernel: &str) -> Option<usize> {
        self.plan_index
            .get(&plan_key(identity, kernel.as_bytes()))
            .copied()
    }

    /// Makes `plan_index` again from `plans` (after they moved): where two
    /// plans share a key, the first (the newer), as a scan finds it.
    fn index_plans(&mut self) {
        self.plan_index.clear();
        for (at, plan) in self.plans.iter().enumerate() {
            if let Some(key) = plan.index_key() {
                self.plan_index.entry(key).or_insert(at);
            }
        }
    }

    /// Plan `at` is the last launched. Where it was already, nothing
    /// changes: its stamp is the newest (what `keep_plan` orders by), and
    /// a launch that repeats the last writes nothing here.
    #[inline]
    pub(super) fn launched(&mut self, at: usize) {
        // An index past `u32` (never: at most `PLANS`) is kept as none.
        let at_u32 = u32::try_from(at).unwrap_or(u32::MAX);
        if self.recent_plans[0] == at_u32 {
            return;
        }
        self.recent_plans = [at_u32, self.recent_plans[0]];
        self.launch_clock += 1;
        if let Some(stamp) = self.plan_launched.get_mut(at) {
            *stamp = self.launch_clock;
        }
    }

    /// Keeps `plan` as the newest (index 0), in the place of the plan
    /// launched least recently where the queue keeps [`PLANS`]
    /// already: a program whose launches go round more kernels than that
    /// makes plans again for those it left longest, not for every launch
    /// (as replacing the oldest made would).
    pub(super) fn keep_plan(&mut self, plan: Plan) {
        if self.plans.len() >= PLANS
            && let Some((least, _)) = self
                .plan_launched
                .iter()
                .enumerate()
                .min_by_key(|(_, stamp)| **stamp)
        {
            self.plan_launched.remove(least);
            // Its function may be the last owner of its module.
            let old = self.plans.remove(least);
            self.let_go.push(Box::new(old));
        }
        self.launch_clock += 1;
        self.plans.insert(0, plan);
        self.plan_launched.insert(0, self.launch_clock);
        // The plans moved: the recent ones are found again (and stamped at
        // their next launch, which `launched` skips for the last one).
        self.recent_plans = [u32::MAX; 2];
        self.index_plans();
        crate::stats::LAUNCH_PLANS_MADE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::{Plan, same_bytes};

    /// What a launch that repeats reads of its plan lies in four cache
    /// lines: the first two, and the layout's first two (which hold what a
    /// placement reads: `LaunchLayout`'s own test).
    #[test]
    fn plan_lines() {
        use std::mem::{align_of, offset_of, size_of};
        assert_eq!(align_of::<Plan>(), 64);
        // Line 0: kernel, source; line 1: function … adapt.
        assert_eq!(offset_of!(Plan, function), 64);
        assert_eq!(offset_of!(Plan, layout), 128);
        // The layout sits at the start of its `Option` (a niche, no tag).
        assert_eq!(
            size_of::<Option<crate::image::LaunchLayout>>(),
            size_of::<crate::image::LaunchLayout>()
        );
    }

    /// Equal exactly where the slices are, for every length around the
    /// word and every place a byte may differ.
    #[test]
    fn same_bytes_is_slice_equality() {
        for len in 0..=40usize {
            let a: Vec<u8> = (0..len as u8)
                .map(|i| i.wrapping_mul(37).wrapping_add(1))
                .collect();
            assert!(same_bytes(&a, &a.clone()), "length {len}");
            assert!(!same_bytes(&a, &a[..len.saturating_sub(1)]) || len == 0);
            let mut longer = a.clone();
            longer.push(0);
            assert!(!same_bytes(&a, &longer), "length {len} against {}", len + 1);
            for at in 0..len {
                let mut b = a.clone();
                b[at] ^= 0x40;
                assert!(!same_bytes(&a, &b), "length {len}, byte {at}");
            }
        }
    }
}
