//! CUDA graphs of ptxspec launches. [`Queue::begin_capture`] (or
//! [`Queue::capture`]) records what the queue's stream runs — ptxspec's
//! launches in every mode, with bundle or handler values, and the program's
//! own cudarc work on that stream — into a graph; [`Graph::launch`] replays
//! it. A node's specialization constants change without a new capture or
//! instantiation, each where its values live:
//!
//! - in the kernel's parameter space: the node's parameters
//!   (`cuGraphExecKernelNodeSetParams`);
//! - in a global buffer: the buffer's contents, which the graph owns (the
//!   changed values of all nodes go in one copy per launch);
//! - in the code (native, LTO): the node's function, swapped to the code
//!   built for the new values (a function of the same context, which the
//!   driver lets an instantiated graph change).
//!
//! A tiered node runs its emulated code while a worker links the
//! specialized code for its values; once it is linked, a background thread
//! loads it (a replay never waits for a link or a load) and the next replay
//! swaps the node to it. New values start that over.
//!
//! Once a graph's nodes have settled on other code than they were captured
//! with (tiered nodes swapped, adaptive nodes decided) and none waits any
//! more, the graph is instantiated again (`params.rs`): an executable graph
//! whose nodes were given other code replays slower than one made with it.
//! A replay instantiates it just after submitting itself (the nodes' new
//! code set in place for that replay), so the host builds it while the GPU
//! runs and a program that waits for each replay does not wait for it.

mod adapting;
mod arena;
mod capture;
mod params;
mod values;

pub(super) use arena::{Arena, ArenaSlot};
pub(super) use capture::{Capture, Recorded};
pub use capture::{CaptureHandler, Capturing};

use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::Arc;
use values::{Loaded, Rebuilt};

use cudarc::driver::{CudaContext, CudaEvent, CudaStream};

use super::cuda::{self, Exec, Function, NodeHandle};
use super::loader;
use super::tier_switch::{self, TierSwitch};
use super::{CodeRef, LaunchConfig, LoadedModule, ModuleKey};
use crate::bundle::{BuiltImage, SpecMode};
use crate::error::Error;
use crate::image::{Delivery, KernelArg, LaunchLayout, launch_layout};
use crate::spec_id::{SpecConstType, SpecId};

/// A captured launch's argument, kept to set the node's parameters again.
enum NodeArg {
    Value(Vec<u8>),
    Address(u64),
    /// [`Arg::bytes_with_addresses`](super::Arg::bytes_with_addresses).
    Vouched(Vec<u8>),
}

/// A kernel node of a graph and what it runs.
struct Node {
    handle: NodeHandle,
    kernel: Box<str>,
    cfg: LaunchConfig,
    args: Vec<NodeArg>,
    /// Index of the kernel's signature in its image.
    signature: usize,
    /// The image built with the node's values, as its bundle builds it (a
    /// tiered image for a tiered bundle): new values build it again.
    built: Arc<BuiltImage>,
    /// The image whose code the node runs: `built`, or the specialized
    /// tier of a tiered `built` once swapped.
    running: Arc<BuiltImage>,
    /// The node's values: the buffer contents.
    blob: Vec<u8>,
    /// What the node runs (it keeps its module loaded).
    function: Function,
    /// Where the node's values are in the graph's device memory (values in
    /// a global buffer).
    buffer: Option<ArenaSlot>,
    /// A tiered node's switch to its specialized code, until it swapped.
    swap: Option<TierSwitch>,
    /// The variant of adaptive arguments being linked for the node's
    /// arguments, until the node switched to it (or its link failed).
    adapt: Option<crate::runtime::adapt::Pending>,
    /// That variant's code, for a trial of the graph's replays.
    candidate: Option<crate::runtime::adapt::Candidate>,
    /// The kernel's launch layout, with the delivery it was made for.
    layout: Option<(Delivery, LaunchLayout)>,
    /// Its parameters were set in the executable graph since they were
    /// last set in the graph it was made of (`params.rs`).
    graph_stale: bool,
    /// The kernel's parameters that take memory, as its capture's launch
    /// layout had them (the kernel's parameters do not change with its
    /// code or values).
    addresses: crate::image::AddressParams,
    /// New values not yet applied.
    changed: bool,
    /// The constant (its symbolic ID, by address: a `SpecId`'s is
    /// `'static`) and the Rust type last found to suit `built`'s image:
    /// setting the same constant again checks nothing.
    checked: Option<(&'static str, std::any::TypeId)>,
}

impl Node {
    /// Whether new values change the node's code: they do unless its
    /// image is emulated.
    fn code_follows_values(&self) -> bool {
        self.built.tier.is_some() || self.built.mode() != SpecMode::Emulated
    }
}

/// A kernel node of a [`Graph`], as [`Graph::nodes`] lists it.
pub struct GraphNode<'g> {
    node: &'g Node,
}

impl GraphNode<'_> {
    /// The kernel the node launches.
    pub fn kernel(&self) -> &str {
        &self.node.kernel
    }

    /// Which code the node runs now: [`SpecMode::Emulated`],
    /// [`SpecMode::Native`] or [`SpecMode::Lto`] (a tiered node: emulated
    /// until it swapped to its specialized tier).
    pub fn mode(&self) -> SpecMode {
        super::tier_switch::running_mode(&self.node.running)
    }

    /// Whether it waits for a variant of adaptive arguments: its link, its
    /// launches' trial, or a trial of the graph's replays.
    pub fn awaits_variant(&self) -> bool {
        self.node.adapt.is_some()
    }

    /// Whether it is a tiered node that still waits for its link.
    pub fn awaits_tier(&self) -> bool {
        self.node.swap.is_some()
    }

    /// Whether it is a tiered node whose link is ready: a replay (or
    /// [`Graph::update`]) swaps it to its specialized code once a background
    /// thread loaded that.
    pub fn tier_linked(&self) -> bool {
        self.node.swap.as_ref().is_some_and(TierSwitch::is_linked)
    }
}

/// A captured, instantiated CUDA graph of a queue's launches, replayed on
/// the queue's stream. Its kernel nodes' specialization constants can be
/// changed between replays ([`set_specialization_constant`](Self::set_specialization_constant));
/// tiered nodes swap to their specialized code by themselves. The graph
/// keeps what its nodes run loaded, its values' device memory, and the
/// memory of the [`DeviceBuffer`](super::DeviceBuffer)s its launches took,
/// until it is dropped (after its replays have run).
///
/// `'m` is how long the other memory its launches took lives: the
/// program's cudarc slices, which a graph cannot own, stay borrowed for as
/// long as the graph exists, so that no replay can reach freed memory:
///
/// ```compile_fail,E0505
/// # use ptxspec::runtime::{Arg, LaunchConfig, Queue};
/// # fn f(q: &Queue, exe: &ptxspec::KernelBundle<ptxspec::Executable>,
/// #      slice: ptxspec::cudarc::driver::CudaSlice<f32>) -> Result<(), ptxspec::Error> {
/// let mut graph = q.capture(|c| {
///     c.submit(|h| {
///         h.use_kernel_bundle(exe)?;
///         h.launch("k", LaunchConfig::new((1, 1, 1), (1, 1, 1)), &[Arg::slice(&slice)])
///     })
/// })?;
/// drop(slice); // error: the graph still borrows it
/// graph.launch()?;
/// # Ok(()) }
/// ```
pub struct Graph<'m> {
    // Declared first: the executable graph is destroyed before the modules
    // and memory its nodes use (fields drop in this order).
    exec: Exec,
    nodes: Vec<Node>,
    arena: Arena,
    /// Code loaded for the nodes (captured, or for new values), by key.
    modules: HashMap<ModuleKey, LoadedModule>,
    /// Variants of adaptive arguments captured nodes run (until a node's
    /// new values give it other code), kept loaded for the replays.
    _adapted: Vec<super::cuda::Function>,
    /// Tier code a background thread is loading, by key.
    loading: HashMap<ModuleKey, loader::Slot>,
    /// Nodes with new values not yet applied.
    changed: usize,
    /// Tiered nodes waiting for their link.
    swaps: usize,
    /// Nodes waiting for their variant of adaptive arguments.
    adapting: usize,
    /// A trial of those nodes on their variants, by whole replays.
    trial: Option<adapting::GraphTrial>,
    /// No trial can start any more (see `start_trial`).
    trials_over: bool,
    /// The fleet asked for an earlier trial's verdict, under that trial's
    /// key (`adapting.rs`): its answer once in.
    fleet_asked: Option<(ptxspec_core::digest::Digest, adapting::FleetAnswer)>,
    /// A node's code settled on other code (a tier's, a variant kept)
    /// since the executable graph was instantiated: it is instantiated
    /// again once no node waits any more, since an executable graph whose
    /// nodes were given other code replays slower than one instantiated
    /// with it. (Code that follows new values is set in place: a program
    /// that changes values every replay would pay an instantiation each.)
    code_changed: bool,
    arch: u32,
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    /// The queue's lock for check-then-act on the stream's capture state
    /// (`stream_gate`): a replay and its last-use event are one step.
    gate: super::stream_gate::StreamGate,
    /// The `DeviceBuffer`s' memory the launches took (dropped after the
    /// replays: the graph's drop waits for them first).
    _buffers: Vec<Arc<crate::runtime::memory::Memory>>,
    /// Recorded on the stream after the graph's last use of it (a replay,
    /// a copy of its values), never inside a capture: what the graph's
    /// drop waits for (taken by the drop).
    last_use: Option<CudaEvent>,
    /// Modules no node runs any more, kept while the stream was capturing
    /// when they were let go (see `retire_spare_modules`).
    deferred: Vec<Box<dyn Send>>,
    /// The borrowed memory the launches took (see the type's docs).
    _memory: PhantomData<&'m ()>,
}

impl Drop for Graph<'_> {
    fn drop(&mut self) {
        // Replays still queued use the modules and memory dropped next: wait
        // for the event recorded after the last of them — outside any
        // capture, whatever the stream does now (a synchronize of a
        // capturing stream fails, and would invalidate that capture). Where
        // the driver will not wait now (a capture in global mode forbids
        // it), what the replays use goes to the retiring thread, which
        // waits for the same event; the executable graph itself may go at
        // once (the driver frees one in flight when it completes).
        let _ = self.ctx.bind_to_thread();
        let Some(last_use) = self.last_use.take() else {
            return;
        };
        if last_use.synchronize().is_ok() {
            return;
        }
        let kept: Vec<Box<dyn Send>> = vec![
            Box::new(std::mem::take(&mut self.nodes)),
            Box::new(std::mem::take(&mut self.arena)),
            Box::new(std::mem::take(&mut self.modules)),
            Box::new(std::mem::take(&mut self._adapted)),
            Box::new(self.trial.take().map(adapting::GraphTrial::into_functions)),
            Box::new(std::mem::take(&mut self._buffers)),
            Box::new(std::mem::take(&mut self.deferred)),
        ];
        super::retire::after_event(Arc::clone(&self.ctx), last_use, kept);
    }
}

// A graph may move to another thread (a server's worker) with its queue's
// stream and context.
const _: fn() = || {
    fn send<T: Send>() {}
    send::<Graph<'static>>();
};

/// How many modules a graph keeps loaded beyond those its nodes run (code
/// of values it ran before, which they may come back to).
const SPARE_MODULES: usize = 32;

impl Graph<'_> {
    /// Replays the graph on its queue's stream, with the values set since
    /// the last replay and the tiered nodes whose links are ready swapped
    /// to their specialized code.
    /// Not while its stream captures (its queue's capture): a replay would
    /// be recorded into that graph, not run.
    pub fn launch(&mut self) -> Result<(), Error> {
        self.ctx.bind_to_thread()?;
        if self.changed > 0 || self.swaps > 0 {
            // Links and loads happen here, without the stream's gate.
            self.apply_changes_in_place()?;
        }
        // An instantiation after an earlier replay failed and left no
        // executable graph: made now, whether or not the nodes settled.
        if !self.exec.instantiated() {
            self.instantiate_with_params()?;
        }
        // The check, the values' copy, the replay and the event after it,
        // with no capture of the stream beginning in between.
        let gate = self.gate.clone();
        let _gate = gate.enter();
        self.not_capturing("a graph's replay")?;
        self.submit_changes()?;
        let turn = self.trial_turn()?;
        let events = turn.and_then(|slot| self.trial.as_ref()?.events(slot));
        if let Some((start, _)) = events {
            start.record(&self.stream)?;
        }
        // Every node is one of ptxspec's launches (`end` refused a graph
        // with others; `end_unchecked`'s caller answers for theirs). The
        // code and values memory its nodes use, and the memory of the
        // `DeviceBuffer`s they took, live in `self` until the replay ran
        // (drop waits for `last_use`); the cudarc slices they took are
        // borrowed for `'m`, which `self` cannot outlive.
        cuda::graph_launch(&self.exec, &self.stream)?;
        if let Some((_, end)) = events {
            end.record(&self.stream)?;
        }
        self.used()?;
        // What adapting nodes and a trial change for the next replay —
        // a verdict's code, the next contender's — is set in the
        // executable graph now, while the GPU runs this replay (setting a
        // node's parameters leaves replays already submitted as they are):
        // a program that waits for each replay does not wait for it too.
        if self.adapting > 0 || self.trial.is_some() {
            self.adapt_for_the_next_replay();
        }
        // Nodes that settled on other code run it from the next replay on,
        // set in place; the graph made with it is instantiated now, while
        // the GPU runs this replay, not before the next. The replay ran: a
        // failure is said and tried again at the next replay (first thing
        // there, where it left no executable graph).
        if let Err(e) = self.instantiate_once_settled() {
            tracing::warn!(
                target: "ptxspec::graph",
                error = %e,
                "a graph's instantiation with its settled code failed; tried again at the next replay"
            );
        }
        Ok(())
    }

    /// Records `last_use` after what was submitted to the stream so far
    /// (the caller checked that the stream does not capture).
    fn used(&mut self) -> Result<(), Error> {
        if let Some(event) = &self.last_use {
            event.record(&self.stream)?;
        }
        Ok(())
    }

    /// Refuses `what` while the graph's stream captures: nothing the graph
    /// submits may be recorded into a graph instead of running.
    fn not_capturing(&self, what: &str) -> Result<(), Error> {
        if cuda::is_capturing(&self.stream)? {
            return Err(Error::invalid(
                crate::error::Misuse::Capture,
                format!(
                    "{what} on a stream that is capturing: end the capture of the graph's queue first"
                ),
            ));
        }
        Ok(())
    }

    /// Applies the values set since the last replay and swaps the tiered
    /// nodes whose links are ready ([`launch`](Self::launch) does it first).
    /// Where new values need new code (native, LTO), it is built here: a
    /// lookup for values seen before, else a link or a JIT.
    pub fn update(&mut self) -> Result<(), Error> {
        self.apply_changes()?;
        let gate = self.gate.clone();
        let _gate = gate.enter();
        self.submit_changes()
    }

    /// What [`update`](Self::update) does off the stream: new values into
    /// the nodes (building their code where it must), tiered nodes swapped,
    /// adapting nodes switched. Not under the stream's gate: this may link.
    fn apply_changes(&mut self) -> Result<(), Error> {
        self.apply_changes_in_place()?;
        if self.adapting > 0 {
            self.poll_adapting()?;
        }
        self.instantiate_once_settled()
    }

    /// New values and tier swaps, each node's new code and parameters set
    /// in the executable graph ([`apply_changes`](Self::apply_changes) but
    /// adapting nodes and the instantiation, which a replay looks at after
    /// it is submitted).
    fn apply_changes_in_place(&mut self) -> Result<(), Error> {
        let mut span = ptxspec_core::trace::span("graph update", "graph");
        span.arg(
            "nodes",
            format!(
                "{} changed, {} swapping, {} adapting",
                self.changed, self.swaps, self.adapting
            ),
        );
        self.ctx.bind_to_thread()?;
        // Nodes of one image given the same values share their new build
        // (and a tiered one, its link).
        let mut rebuilt = Rebuilt::default();
        let mut loaded = Loaded::default();
        for i in 0..self.nodes.len() {
            if self.nodes[i].changed {
                // Where the new values cannot be applied (their link
                // failed), the node keeps running its old code and values,
                // and the next update tries again.
                self.apply_values(i, &mut rebuilt, &mut loaded)?;
                self.nodes[i].changed = false;
                self.changed -= 1;
            }
        }
        if self.swaps > 0 {
            for i in 0..self.nodes.len() {
                self.poll_swap(i, &mut loaded)?;
            }
        }
        Ok(())
    }

    /// What [`update`](Self::update) submits to the stream — values copied
    /// into the graph's memory, code no node runs handed to the retiring
    /// thread — with the stream's gate held by the caller. Node parameters
    /// are set on the executable graph, not on the stream; the copies are
    /// stream work, which a capture of the stream would record instead of
    /// running.
    fn submit_changes(&mut self) -> Result<(), Error> {
        if self.arena.is_dirty() {
            self.not_capturing("a graph's update of values in its memory")?;
            self.arena.flush(&self.stream)?;
            self.used()?;
        }
        self.retire_spare_modules()
    }

    /// Node `i`'s new values: new code where the code holds them, then its
    /// parameters (or only its buffer's contents).
    fn apply_values(
        &mut self,
        i: usize,
        rebuilt: &mut Rebuilt,
        loaded: &mut Loaded,
    ) -> Result<(), Error> {
        if !self.nodes[i].code_follows_values() {
            return self.set_params(i, false);
        }
        let node = &self.nodes[i];
        let built = rebuilt.get_or_build(&node.built, &node.blob)?;
        // As a queue's new plan starts: specialized where the tier is ready
        // and its code loaded in the graph, else emulated meanwhile.
        let (running, swap) = match &built.tier {
            Some(tier) => {
                let link = tier.link_state(self.arch, &node.kernel);
                if tier_switch::starts_specialized(tier, &link, self.arch, &node.kernel, |key| {
                    self.modules.contains_key(key)
                }) {
                    (Arc::clone(tier.specialized()), None)
                } else {
                    let mut switch = TierSwitch::new(link);
                    switch.ask_now(tier, self.arch, &node.kernel);
                    (Arc::clone(&built), Some(switch))
                }
            }
            None => (Arc::clone(&built), None),
        };
        let was_waiting = node.swap.is_some();
        self.run(i, running, loaded)?;
        let node = &mut self.nodes[i];
        // A check made against another image says nothing of this one.
        if !Arc::ptr_eq(node.built.image_data(), built.image_data()) {
            node.checked = None;
        }
        node.built = built;
        match (was_waiting, swap.is_some()) {
            (false, true) => self.swaps += 1,
            (true, false) => self.swaps -= 1,
            _ => {}
        }
        node.swap = swap;
        Ok(())
    }

    /// Node `i`'s switch to its tiered image's specialized code, looked
    /// at: swapped once linked and its code loaded here (a background
    /// thread loads it: no replay waits for a load); where the link or the
    /// load failed, the node stays emulated, the tier's log saying why.
    fn poll_swap(&mut self, i: usize, loaded: &mut Loaded) -> Result<(), Error> {
        let Graph {
            nodes,
            modules,
            loading,
            ctx,
            arch,
            ..
        } = self;
        let node = &mut nodes[i];
        let (Some(switch), Some(tier)) = (node.swap.as_mut(), node.built.tier.clone()) else {
            return Ok(());
        };
        let site = super::tier_switch::Site {
            tier: &tier,
            ctx,
            arch: *arch,
            kernel: &node.kernel,
            ask_after: std::time::Duration::ZERO,
        };
        match switch.poll(&site, loading, |k| modules.contains_key(k)) {
            super::tier_switch::Step::Wait => Ok(()),
            super::tier_switch::Step::StayEmulated(why) => {
                tier.stays_emulated(&format!("graph node of kernel {}", node.kernel), &why);
                node.swap = None;
                self.swaps -= 1;
                Ok(())
            }
            super::tier_switch::Step::Switch(module) => {
                if let Some((key, m)) = module {
                    modules.insert(key, m);
                }
                node.swap = None;
                self.swaps -= 1;
                match self.run(i, Arc::clone(tier.specialized()), loaded) {
                    Ok(()) => self.code_changed = true,
                    // As a queue's plan does: the node stays emulated, the
                    // log says why.
                    Err(e) => tier.stays_emulated(
                        &format!("graph node of kernel {}", self.nodes[i].kernel),
                        &e,
                    ),
                }
                Ok(())
            }
        }
    }

    /// Node `i` runs `running`'s code with its values from now on.
    fn run(
        &mut self,
        i: usize,
        running: Arc<BuiltImage>,
        loaded: &mut Loaded,
    ) -> Result<(), Error> {
        // A variant being linked for the node was made with its old code's
        // values: it must never run after these.
        if self.trial.as_ref().is_some_and(|t| t.has(i)) {
            self.abandon_trial()?;
        }
        if self.nodes[i].adapt.take().is_some() {
            self.adapting -= 1;
        }
        let kernel = &self.nodes[i].kernel;
        let function = match loaded.find(&running, kernel) {
            Some(hit) => hit,
            None => {
                let code = CodeRef::of(&running, self.arch, kernel)?;
                let module = match self.modules.entry(code.key) {
                    std::collections::hash_map::Entry::Occupied(m) => Arc::clone(&m.get().module),
                    std::collections::hash_map::Entry::Vacant(e) => {
                        Arc::clone(&e.insert(code.load(&running, None)?).module)
                    }
                };
                let function = module.function(kernel)?;
                loaded.add(&running, kernel, &function);
                function
            }
        };
        let node = &mut self.nodes[i];
        let (old_function, old_running) = (
            std::mem::replace(&mut node.function, function),
            std::mem::replace(&mut node.running, running),
        );
        if let Err(e) = self.set_params(i, true) {
            let node = &mut self.nodes[i];
            node.function = old_function;
            node.running = old_running;
            return Err(e);
        }
        // Replays already queued may run the old function: its module stays
        // in the graph's cache (every module a node runs is there) until
        // `retire_spare_modules` hands it on after them.
        drop(old_function);
        Ok(())
    }
}
