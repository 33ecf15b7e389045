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

use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::Arc;

use cudarc::driver::sys;
use cudarc::driver::{CudaContext, CudaStream};

use super::loader;
use super::memory::ArgKind;
use super::module::Function;
use super::tier_switch::TierSwitch;
use super::{CodeRef, LaunchConfig, LoadedModule, ModuleKey, Queue};
use crate::bundle::tier::LinkState;
use crate::bundle::{BuiltImage, Executable, KernelBundle, SpecMode};
use crate::error::Error;
use crate::image::{Delivery, KernelArg, LaunchLayout, launch_layout};
use crate::spec_id::{SpecConstType, SpecId};

/// What a queue records while it captures: the kernel nodes of its
/// launches, the device memory their values live in, the modules they run.
#[derive(Default)]
pub(super) struct Capture {
    nodes: Vec<Node>,
    arena: Arena,
    modules: HashMap<ModuleKey, LoadedModule>,
    /// The memory of the `DeviceBuffer`s the launches took, which the
    /// graph keeps alive.
    buffers: Vec<Arc<cudarc::driver::CudaSlice<u8>>>,
}

/// One launch, recorded by a capture ([`Capture::record`]).
pub(super) struct Recorded<'a, 'b> {
    pub(super) kernel: &'a str,
    pub(super) cfg: LaunchConfig,
    pub(super) args: &'a [super::Arg<'b>],
    pub(super) slice_addresses: &'a [u64],
    pub(super) signature: usize,
    /// The bundle's image (for a tiered bundle, its tiered image).
    pub(super) chosen: &'a Arc<BuiltImage>,
    /// The image whose code ran.
    pub(super) running: &'a Arc<BuiltImage>,
    /// Where a tiered image still runs emulated: its link.
    pub(super) link: Option<&'a Arc<LinkState>>,
    /// Handler values the launch passed over the running image's blob.
    pub(super) values: &'a [(&'a str, super::memory::ValueBytes)],
    pub(super) module: (ModuleKey, &'a LoadedModule),
    /// Where the launch's global buffer was placed in the arena.
    pub(super) buffer: Option<ArenaSlot>,
}

impl Capture {
    /// A device copy of `contents` that the graph owns (for a launch with
    /// its values in a global buffer): its address. Written when the
    /// capture ends.
    pub(super) fn place(&mut self, contents: &[u8]) -> Result<(ArenaSlot, u64), Error> {
        let at = self.arena.place(contents)?;
        Ok((at, self.arena.address(at)))
    }

    /// Records the kernel node the launch just added to the stream's
    /// capture. Out of the launch's line: most launches are not captured.
    #[inline(never)]
    pub(super) fn record(&mut self, stream: &CudaStream, r: Recorded<'_, '_>) -> Result<(), Error> {
        let handle = last_node(stream)?;
        let image = r.running.image();
        let signature = &image.kernels()[r.signature];
        let mut blob = r.running.blob().to_vec();
        if signature.reads_constants() {
            for (id, v) in r.values.iter().filter(|(id, _)| image.slot(id).is_some()) {
                image.write_value(&mut blob, id, v.as_slice())?;
            }
        }
        let mut addresses = r.slice_addresses.iter();
        let args = r
            .args
            .iter()
            .map(|a| match &a.0 {
                ArgKind::Value(v) => NodeArg::Value(v.as_slice().to_vec()),
                ArgKind::Buffer {
                    address, memory, ..
                } => {
                    if !self.buffers.iter().any(|b| Arc::ptr_eq(b, memory)) {
                        self.buffers.push(Arc::clone(memory));
                    }
                    NodeArg::Address(*address)
                }
                ArgKind::Slice(_) | ArgKind::SliceMut(..) => {
                    NodeArg::Address(addresses.next().copied().unwrap_or(0))
                }
            })
            .collect();
        let (key, loaded) = r.module;
        self.modules.entry(key).or_insert_with(|| loaded.clone());
        self.nodes.push(Node {
            handle,
            kernel: r.kernel.into(),
            cfg: r.cfg,
            args,
            signature: r.signature,
            built: Arc::clone(r.chosen),
            running: Arc::clone(r.running),
            blob,
            function: loaded.module.function(r.kernel)?,
            buffer: r.buffer,
            swap: r.link.map(|l| TierSwitch::new(Arc::clone(l))),
            layout: None,
            changed: false,
            checked: None,
        });
        Ok(())
    }
}

/// The kernel node a launch just added to `stream`'s capture: the one node
/// the stream's next work would depend on.
fn last_node(stream: &CudaStream) -> Result<sys::CUgraphNode, Error> {
    let mut status = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    let mut id = 0u64;
    let mut graph: sys::CUgraph = std::ptr::null_mut();
    let mut deps: *const sys::CUgraphNode = std::ptr::null();
    let mut count = 0usize;
    // SAFETY: a live stream of the current context; every out-pointer is
    // to a local of the type the call writes.
    unsafe {
        sys::cuStreamGetCaptureInfo_v2(
            stream.cu_stream(),
            &mut status,
            &mut id,
            &mut graph,
            &mut deps,
            &mut count,
        )
        .result()?;
    }
    if status != sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE
        || count != 1
        || deps.is_null()
    {
        return Err(Error::InvalidObject(format!(
            "the queue's stream stopped capturing during the capture (status {status:?}, {count} \
             dependencies after a launch): was its capture ended or invalidated by other work?"
        )));
    }
    // SAFETY: the driver returned `count` (1) nodes at `deps`, valid until
    // the next call on the stream; the node handle is copied out.
    Ok(unsafe { *deps })
}

/// A captured launch's argument, kept to set the node's parameters again.
enum NodeArg {
    Value(Vec<u8>),
    Address(u64),
}

/// A kernel node of a graph and what it runs.
struct Node {
    handle: sys::CUgraphNode,
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
    /// The kernel's launch layout, with the delivery it was made for.
    layout: Option<(Delivery, LaunchLayout)>,
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
    /// Tier code a background thread is loading, by key.
    loading: HashMap<ModuleKey, loader::Slot>,
    /// Nodes with new values not yet applied.
    changed: usize,
    /// Tiered nodes waiting for their link.
    swaps: usize,
    arch: u32,
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    /// The `DeviceBuffer`s' memory the launches took (dropped after the
    /// replays: the graph's drop waits for them first).
    _buffers: Vec<Arc<cudarc::driver::CudaSlice<u8>>>,
    /// The borrowed memory the launches took (see the type's docs).
    _memory: PhantomData<&'m ()>,
}

/// The driver's graph and its executable instance.
struct Exec {
    graph: sys::CUgraph,
    exec: sys::CUgraphExec,
}

// SAFETY: graph handles are identifiers of driver-owned objects that any
// thread may use with their context current; `Graph` uses them through
// `&mut self` (updates) or for a launch, and destroys them once.
unsafe impl Send for Exec {}
// SAFETY: node handles are identifiers, used only through the graph
// (`&mut self` to change them).
unsafe impl Send for Node {}

impl Drop for Exec {
    fn drop(&mut self) {
        // SAFETY: created by `end_capture`, destroyed once; the graph's drop
        // bound the context and waited for its replays first.
        unsafe {
            let _ = cudarc::driver::result::graph::exec_destroy(self.exec);
            let _ = cudarc::driver::result::graph::destroy(self.graph);
        }
    }
}

impl Drop for Graph<'_> {
    fn drop(&mut self) {
        // Replays still queued use the modules and memory dropped next.
        let _ = self.ctx.bind_to_thread();
        let _ = self.stream.synchronize();
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

impl Queue {
    /// Starts recording this queue's launches into a graph (a stream
    /// capture in relaxed mode): launches made through the returned
    /// [`Capturing`] are recorded, not run, until [`Capturing::end`] makes
    /// the graph. While it lasts a launch may take memory of this queue's
    /// stream only (buffers it uploaded or allocated, slices of this
    /// stream), and the queue refuses everything else on its stream:
    /// launches not made through the capture (another thread's, or
    /// [`Queue::submit`]), uploads, downloads and waits. A capture dropped
    /// before it ended is abandoned (its graph discarded).
    pub fn begin_capture<'m>(&self) -> Result<Capturing<'_, 'm>, Error> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if state.capture.is_some() {
            return Err(Error::InvalidObject(
                "begin_capture on a queue that is capturing already".into(),
            ));
        }
        self.ctx.bind_to_thread()?;
        // SAFETY: the queue's live stream, in its context (bound above).
        unsafe {
            cudarc::driver::result::stream::begin_capture(
                self.stream.cu_stream(),
                sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED,
            )?;
        }
        state.capture = Some(Box::default());
        Ok(Capturing {
            queue: self,
            ended: false,
            _memory: PhantomData,
        })
    }

    /// Records the launches `record` makes through its [`Capturing`] into
    /// a graph: [`begin_capture`](Self::begin_capture), `record`,
    /// [`Capturing::end`]. Where `record` fails, the capture is abandoned
    /// and its error returned.
    pub fn capture<'q, 'm>(
        &'q self,
        record: impl FnOnce(&mut Capturing<'q, 'm>) -> Result<(), Error>,
    ) -> Result<Graph<'m>, Error> {
        let mut capturing = self.begin_capture()?;
        match record(&mut capturing) {
            Ok(()) => capturing.end(),
            Err(e) => {
                drop(capturing);
                Err(explain_invalidated(e))
            }
        }
    }

    /// Refuses what cannot happen on the queue's stream while it captures
    /// (an upload, a download, a wait), naming it.
    pub(super) fn not_capturing(&self, what: &str) -> Result<(), Error> {
        let state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        match state.capture {
            Some(_) => Err(Error::InvalidObject(format!(
                "{what} on a queue that is capturing: a capture records launches made through it \
                 alone (end it first)"
            ))),
            None => Ok(()),
        }
    }
}

/// A capture under way on a [`Queue`] ([`Queue::begin_capture`],
/// [`Queue::capture`]): launches made through [`submit`](Self::submit) are
/// recorded into the graph that [`end`](Self::end) makes.
///
/// `'m` is how long the memory of the recorded launches lives: every
/// argument of a recorded launch borrows for `'m`, and the [`Graph`] made
/// of them cannot outlive `'m` — memory cannot be freed while a graph that
/// replays it exists.
#[must_use = "a capture records launches made through it, and is abandoned when dropped"]
pub struct Capturing<'q, 'm> {
    queue: &'q Queue,
    ended: bool,
    _memory: PhantomData<&'m ()>,
}

impl<'q, 'm> Capturing<'q, 'm> {
    /// Runs `f` with a handler for one command group whose launch is
    /// recorded, as [`Queue::submit`] runs one that launches.
    pub fn submit<R>(
        &mut self,
        f: impl FnOnce(&mut CaptureHandler<'q, 'm>) -> Result<R, Error>,
    ) -> Result<R, Error> {
        let mut h = CaptureHandler {
            handler: super::Handler::capturing(self.queue),
            _memory: PhantomData,
        };
        f(&mut h)
    }

    /// Ends the capture and instantiates its graph. Tiered nodes ask for
    /// their links now. The capture ends with the queue's lock held, so
    /// that no other launch on the queue can reach the stream in between;
    /// a graph holding work ptxspec did not record (the program's own
    /// cudarc work on the stream, which ptxspec cannot keep the memory of)
    /// is refused — [`end_unchecked`](Self::end_unchecked) takes it. A
    /// capture that the driver invalidated (by work it cannot record) is
    /// `invalid_object`, saying the usual causes.
    pub fn end(mut self) -> Result<Graph<'m>, Error> {
        self.ended = true;
        end_capture(self.queue, false).map_err(explain_invalidated)
    }

    /// [`end`](Self::end), taking a graph that also holds work ptxspec did
    /// not record: the program's own cudarc calls on the queue's stream
    /// while the capture lasted (copies, memsets, its own kernels).
    ///
    /// # Safety
    ///
    /// The memory that work uses must stay allocated for as long as the
    /// returned graph exists (it replays that work with the addresses it
    /// was captured with), as cudarc's own graphs require.
    pub unsafe fn end_unchecked(mut self) -> Result<Graph<'m>, Error> {
        self.ended = true;
        end_capture(self.queue, true).map_err(explain_invalidated)
    }
}

/// Abandons a capture that was not ended: its graph is discarded.
impl Drop for Capturing<'_, '_> {
    fn drop(&mut self) {
        if !self.ended {
            let _ = end_capture(self.queue, false);
        }
    }
}

/// One command group of a [`Capturing`]: [`Handler`](super::Handler)'s
/// methods, and a launch that is recorded — its arguments borrowed for the
/// graph's `'m`.
pub struct CaptureHandler<'q, 'm> {
    handler: super::Handler<'q>,
    _memory: PhantomData<&'m ()>,
}

impl<'q, 'm> CaptureHandler<'q, 'm> {
    /// [`Handler::use_kernel_bundle`](super::Handler::use_kernel_bundle).
    pub fn use_kernel_bundle(&mut self, bundle: &'q KernelBundle<Executable>) -> Result<(), Error> {
        self.handler.use_kernel_bundle(bundle)
    }

    /// [`Handler::use_kernel_bundle_with`](super::Handler::use_kernel_bundle_with).
    pub fn use_kernel_bundle_with(
        &mut self,
        bundle: &'q KernelBundle<Executable>,
        selector: impl Fn(&crate::bundle::DeviceImage<Executable>) -> bool + 'q,
    ) -> Result<(), Error> {
        self.handler.use_kernel_bundle_with(bundle, selector)
    }

    /// [`Handler::set_specialization_constant`](super::Handler::set_specialization_constant).
    pub fn set_specialization_constant<T: bytemuck::Pod + SpecConstType>(
        &mut self,
        id: &SpecId<T>,
        value: T,
    ) -> Result<(), Error> {
        self.handler.set_specialization_constant(id, value)
    }

    /// [`Handler::get_specialization_constant`](super::Handler::get_specialization_constant).
    pub fn get_specialization_constant<T: bytemuck::Pod + SpecConstType>(
        &self,
        id: &SpecId<T>,
    ) -> Result<T, Error> {
        self.handler.get_specialization_constant(id)
    }

    /// Records a launch of `kernel` (as [`Handler::launch`](super::Handler::launch)
    /// launches one): its arguments' memory is borrowed for `'m`, so that it
    /// outlives the graph.
    pub fn launch(
        &mut self,
        kernel: &str,
        cfg: LaunchConfig,
        args: &[super::Arg<'m>],
    ) -> Result<(), Error> {
        self.handler.launch(kernel, cfg, args)
    }
}

/// Ends `q`'s capture and instantiates its graph, with the queue's lock held
/// from before the driver's end of the capture to after its graph's nodes
/// were checked: every node must be one ptxspec recorded, unless
/// `foreign` (`Capturing::end_unchecked`'s caller answers for the others).
fn end_capture<'m>(q: &Queue, foreign: bool) -> Result<Graph<'m>, Error> {
    let mut state = q.state.lock().unwrap_or_else(|p| p.into_inner());
    let capture = state.capture.take().ok_or_else(|| {
        Error::InvalidObject("end of a capture on a queue that is not capturing".into())
    })?;
    q.ctx.bind_to_thread()?;
    // SAFETY: the queue's stream, capturing since `begin_capture` (the
    // capture in the state says so, under the lock).
    let graph = unsafe { cudarc::driver::result::stream::end_capture(q.stream.cu_stream()) };
    // What the queue let go of while it captured can go now.
    q.retire_let_go(&mut state);
    let graph = graph?;
    if graph.is_null() {
        return Err(Error::InvalidObject(
            "the capture made no graph (it was invalidated)".into(),
        ));
    }
    // SAFETY: the graph the capture just made, destroyed once: here where
    // it is refused, else by `Exec`.
    let destroy = || unsafe {
        let _ = cudarc::driver::result::graph::destroy(graph);
    };
    if !foreign && let Err(e) = only_recorded_nodes(graph, &capture.nodes) {
        destroy();
        return Err(e);
    }
    // SAFETY: the graph the capture just made, instantiated once; on
    // failure it is destroyed here, else `Exec` owns both.
    let exec = unsafe {
        match cudarc::driver::result::graph::instantiate(graph, sys::CUgraphInstantiate_flags(0)) {
            Ok(exec) => Exec { graph, exec },
            Err(e) => {
                destroy();
                return Err(e.into());
            }
        }
    };
    drop(state);
    let mut graph = Graph {
        exec,
        swaps: capture.nodes.iter().filter(|n| n.swap.is_some()).count(),
        nodes: capture.nodes,
        arena: capture.arena,
        modules: capture.modules,
        loading: HashMap::new(),
        changed: 0,
        arch: q.device.arch(),
        ctx: Arc::clone(&q.ctx),
        stream: Arc::clone(&q.stream),
        _buffers: capture.buffers,
        _memory: PhantomData,
    };
    for node in &mut graph.nodes {
        if let (Some(switch), Some(tier)) = (&mut node.swap, &node.built.tier) {
            switch.ask_now(tier, graph.arch, &node.kernel);
        }
    }
    // The captured values of global buffers, before the first replay.
    graph.arena.flush(&graph.stream)?;
    Ok(graph)
}

/// Checks that every node of `graph` is one of `recorded`'s: work on the
/// stream that ptxspec did not launch (the program's cudarc calls) would
/// replay memory the graph does not keep.
fn only_recorded_nodes(graph: sys::CUgraph, recorded: &[Node]) -> Result<(), Error> {
    let mut count = 0usize;
    // SAFETY: a live graph; a null array asks for the count alone.
    unsafe {
        sys::cuGraphGetNodes(graph, std::ptr::null_mut(), &mut count).result()?;
    }
    if count == 0 {
        return Ok(());
    }
    let mut nodes: Vec<sys::CUgraphNode> = vec![std::ptr::null_mut(); count];
    // SAFETY: room for `count` handles, which the call fills (at most that
    // many, the count it writes back).
    unsafe {
        sys::cuGraphGetNodes(graph, nodes.as_mut_ptr(), &mut count).result()?;
    }
    nodes.truncate(count);
    let foreign = nodes
        .iter()
        .filter(|n| !recorded.iter().any(|r| r.handle == **n))
        .count();
    if foreign > 0 {
        return Err(Error::InvalidObject(format!(
            "the capture recorded {foreign} node{} that ptxspec did not launch (the program's own work \
             on the queue's stream, whose memory a graph cannot keep): end it with \
             Capturing::end_unchecked, which leaves that memory to the caller",
            if foreign == 1 { "" } else { "s" }
        )));
    }
    Ok(())
}

/// A capture the driver invalidated, as `invalid_object` with its usual
/// causes; other errors as they are.
fn explain_invalidated(e: Error) -> Error {
    use sys::CUresult::{
        CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, CUDA_ERROR_STREAM_CAPTURE_ISOLATION,
        CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
    };
    match e {
        Error::Cuda(d)
            if matches!(
                d.0,
                CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
                    | CUDA_ERROR_STREAM_CAPTURE_ISOLATION
                    | CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
            ) =>
        {
            Error::InvalidObject(format!(
                "the driver invalidated the capture ({:?}): work on the capturing stream waited for an event \
                 recorded outside the capture — cudarc's event tracking does that for a slice used before the \
                 capture (turn it off in programs that capture: CudaContext::disable_event_tracking) — or made a \
                 call that cannot be recorded (a synchronous copy, a wait for the stream)",
                d.0
            ))
        }
        e => e,
    }
}

impl Graph<'_> {
    /// Replays the graph on its queue's stream, with the values set since
    /// the last replay and the tiered nodes whose links are ready swapped
    /// to their specialized code.
    pub fn launch(&mut self) -> Result<(), Error> {
        self.ctx.bind_to_thread()?;
        if self.changed > 0 || self.swaps > 0 {
            self.update()?;
        }
        // SAFETY: the instantiated graph, in the stream's context (bound
        // above); every node is one of ptxspec's launches (`end` refused a
        // graph with others; `end_unchecked`'s caller answers for theirs).
        // The code and values memory its nodes use, and the memory of the
        // `DeviceBuffer`s they took, live in `self` until its replays ran
        // (drop waits for them); the cudarc slices they took are borrowed
        // for `'m`, which `self` cannot outlive.
        unsafe {
            cudarc::driver::result::graph::launch(self.exec.exec, self.stream.cu_stream())?;
        }
        Ok(())
    }

    /// Applies the values set since the last replay and swaps the tiered
    /// nodes whose links are ready ([`launch`](Self::launch) does it first).
    /// Where new values need new code (native, LTO), it is built here: a
    /// lookup for values seen before, else a link or a JIT.
    pub fn update(&mut self) -> Result<(), Error> {
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
        self.arena.flush(&self.stream)?;
        self.retire_spare_modules()
    }

    /// The kernel nodes ptxspec launched, in capture order (the indices
    /// [`set_specialization_constant`](Self::set_specialization_constant)
    /// takes). Other nodes of the graph (the program's own work) are not
    /// listed.
    pub fn nodes(&self) -> impl ExactSizeIterator<Item = GraphNode<'_>> {
        self.nodes.iter().map(|node| GraphNode { node })
    }

    /// Sets the value of `id` for kernel node `node` (an index of
    /// [`nodes`](Self::nodes)), from the next replay on. A constant the
    /// node's image does not have, or of another type, is
    /// `spec_const_error`.
    pub fn set_specialization_constant<T: bytemuck::Pod + SpecConstType>(
        &mut self,
        node: usize,
        id: &SpecId<T>,
        value: T,
    ) -> Result<(), Error> {
        let count = self.nodes.len();
        let n = self.nodes.get(node).ok_or_else(|| {
            Error::InvalidObject(format!(
                "the graph has {count} ptxspec kernel nodes; there is no node {node}"
            ))
        })?;
        let slot = n.built.image().constant_slot(id.symbolic_id())?;
        self.write_value(node, id, value, slot)
    }

    /// Writes `value` of `id` at `slot` (`id`'s in the image of node `i`)
    /// in the node's values, checked: the image must take values, and the
    /// type suit the constant (each pair checked once per node).
    fn write_value<T: bytemuck::Pod + SpecConstType>(
        &mut self,
        i: usize,
        id: &SpecId<T>,
        value: T,
        slot: crate::image::Slot,
    ) -> Result<(), Error> {
        let n = &mut self.nodes[i];
        let image = n.built.image();
        let symbolic = id.symbolic_id();
        let ty = std::any::TypeId::of::<T>();
        if !n
            .checked
            .is_some_and(|(s, t)| std::ptr::eq(s, symbolic) && t == ty)
        {
            image.check_settable(symbolic)?;
            image
                .check_value_type(symbolic, &T::spec_type(), std::any::type_name::<T>())
                .map_err(Error::SpecConst)?;
            n.checked = Some((symbolic, ty));
        }
        slot.write(&mut n.blob, symbolic, bytemuck::bytes_of(&value))?;
        if !n.changed {
            n.changed = true;
            self.changed += 1;
        }
        Ok(())
    }

    /// Sets the value of `id` on every kernel node whose image has the
    /// constant; returns how many nodes that is.
    pub fn set_specialization_constant_everywhere<T: bytemuck::Pod + SpecConstType>(
        &mut self,
        id: &SpecId<T>,
        value: T,
    ) -> Result<usize, Error> {
        let mut count = 0;
        // The constant's slot looked up once per image (by address): a
        // graph's nodes mostly share few images.
        let mut last: Option<(usize, Option<crate::image::Slot>)> = None;
        for i in 0..self.nodes.len() {
            let image = self.nodes[i].built.image();
            let slot = match last {
                Some((at, slot)) if at == Arc::as_ptr(image) as usize => slot,
                _ => {
                    let slot = image.slot(id.symbolic_id());
                    last = Some((Arc::as_ptr(image) as usize, slot));
                    slot
                }
            };
            if let Some(slot) = slot {
                self.write_value(i, id, value, slot)?;
                count += 1;
            }
        }
        Ok(count)
    }

    /// The value of `id` for kernel node `node`: the one set last, else the
    /// captured one.
    pub fn get_specialization_constant<T: bytemuck::Pod + SpecConstType>(
        &self,
        node: usize,
        id: &SpecId<T>,
    ) -> Result<T, Error> {
        let n = self.nodes.get(node).ok_or_else(|| {
            Error::InvalidObject(format!(
                "the graph has {} ptxspec kernel nodes; there is no node {node}",
                self.nodes.len()
            ))
        })?;
        let image = n.built.image();
        let slot = image.constant_slot(id.symbolic_id())?;
        // The type as the bundle's get checks it: another type of the
        // same size would read the bytes reinterpreted.
        image
            .check_value_type(
                id.symbolic_id(),
                &T::spec_type(),
                std::any::type_name::<T>(),
            )
            .map_err(Error::SpecConst)?;
        let at = slot.offset as usize..(slot.offset + slot.size) as usize;
        Ok(bytemuck::pod_read_unaligned(&n.blob[at]))
    }

    /// The stream the graph replays on (its queue's).
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
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
        let (running, swap) = match &built.tier {
            Some(tier) => {
                let link = tier.link_state(self.arch, &node.kernel);
                if tier.ready_or_cached(&link, self.arch, &node.kernel) {
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
        if !Arc::ptr_eq(node.built.image(), built.image()) {
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
                if let Err(e) = self.run(i, Arc::clone(tier.specialized()), loaded) {
                    // As a queue's plan does: the node stays emulated, the
                    // log says why.
                    tier.stays_emulated(
                        &format!("graph node of kernel {}", self.nodes[i].kernel),
                        &e,
                    );
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
                loaded.0.push(LoadedFunction {
                    running: Arc::clone(&running),
                    kernel: kernel.clone(),
                    function: function.clone(),
                });
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

    /// Sets node `i`'s parameters in the executable graph from its values,
    /// arguments and function (`always`: also where only a global buffer's
    /// contents changed, which needs no new parameters).
    fn set_params(&mut self, i: usize, always: bool) -> Result<(), Error> {
        let Graph { nodes, arena, .. } = self;
        let node = &mut nodes[i];
        let running = &node.running;
        let image = running.image();
        let signature = &image.kernels()[node.signature];
        let delivery = running.delivery();
        let args = node.args.iter().map(|a| match a {
            NodeArg::Value(v) => KernelArg::Value(v),
            NodeArg::Address(a) => KernelArg::Address(a),
        });
        // The node's layout, made again only where its code's delivery
        // changed (emulated ↔ specialized).
        if node
            .layout
            .as_ref()
            .is_none_or(|(made_for, _)| *made_for != delivery)
        {
            node.layout = Some((delivery, launch_layout(signature, delivery, args.len())?));
        }
        let Some((_, layout)) = node.layout.as_mut() else {
            return Err(Error::Internal(
                "a graph node's layout missing after it was made",
            ));
        };
        let buffer = &mut node.buffer;
        layout.fill(image, &node.blob, &[] as &[(&str, &[u8])], |contents| {
            let at = match *buffer {
                Some(at) if at.len == contents.len() => {
                    arena.write(at, contents);
                    at
                }
                _ => arena.place(contents)?,
            };
            *buffer = Some(at);
            Ok::<u64, Error>(arena.address(at))
        })?;
        if !always && delivery == Delivery::GlobalBuffer {
            return Ok(());
        }
        let mut params = layout.params(args)?;
        let params = params.pointers();
        let (grid, block) = (node.cfg.grid, node.cfg.block);
        let p = sys::CUDA_KERNEL_NODE_PARAMS {
            func: node.function.raw(),
            gridDimX: grid.0,
            gridDimY: grid.1,
            gridDimZ: grid.2,
            blockDimX: block.0,
            blockDimY: block.1,
            blockDimZ: block.2,
            sharedMemBytes: node.cfg.shared_mem_bytes,
            kernelParams: params.as_mut_ptr(),
            extra: std::ptr::null_mut(),
            kern: std::ptr::null_mut(),
            ctx: std::ptr::null_mut(),
        };
        // SAFETY: a kernel node of this executable graph; `params` holds one
        // pointer per kernel parameter to a value of its size
        // (the layout checked them against the signature), read by
        // the call, which copies them; the function owns its module
        // (`node` holds it while the node runs it), loaded in the graph's
        // context (bound by the caller).
        unsafe {
            sys::cuGraphExecKernelNodeSetParams_v2(self.exec.exec, node.handle, &p).result()?;
        }
        Ok(())
    }

    /// Unloads code no node runs any more, past [`SPARE_MODULES`], once
    /// the replays that may run it have run ([`retire`](super::retire):
    /// nothing waits for them here).
    fn retire_spare_modules(&mut self) -> Result<(), Error> {
        let spare: Vec<ModuleKey> = self
            .modules
            .iter()
            .filter(|(_, m)| Arc::strong_count(&m.module) == 1)
            .map(|(k, _)| *k)
            .collect();
        if spare.len() <= SPARE_MODULES {
            return Ok(());
        }
        let retired: Vec<Box<dyn Send>> = spare
            .into_iter()
            .filter_map(|k| self.modules.remove(&k))
            .map(|m| Box::new(m) as Box<dyn Send>)
            .collect();
        super::retire::after_stream(&self.stream, retired);
        Ok(())
    }
}

/// The images one [`Graph::update`] built for new values, by the image
/// they rebuilt (held, so that its address is not reused meanwhile) and
/// the values.
#[derive(Default)]
struct Rebuilt(Vec<(Arc<BuiltImage>, Vec<u8>, Arc<BuiltImage>)>);

impl Rebuilt {
    fn get_or_build(
        &mut self,
        from: &Arc<BuiltImage>,
        blob: &[u8],
    ) -> Result<Arc<BuiltImage>, Error> {
        if let Some((_, _, b)) = self
            .0
            .iter()
            .find(|(f, v, _)| Arc::ptr_eq(f, from) && v == blob)
        {
            return Ok(Arc::clone(b));
        }
        let built = from.with_blob(blob.to_vec())?;
        self.0
            .push((Arc::clone(from), blob.to_vec(), Arc::clone(&built)));
        Ok(built)
    }
}

/// The functions one [`Graph::update`] found for nodes, by the image whose
/// code they are (held) and the kernel: nodes that swap to the same code
/// look it up once.
#[derive(Default)]
struct Loaded(Vec<LoadedFunction>);

struct LoadedFunction {
    running: Arc<BuiltImage>,
    kernel: Box<str>,
    function: Function,
}

impl Loaded {
    fn find(&self, running: &Arc<BuiltImage>, kernel: &str) -> Option<Function> {
        self.0
            .iter()
            .find(|l| Arc::ptr_eq(&l.running, running) && *l.kernel == *kernel)
            .map(|l| l.function.clone())
    }
}

/// Where a node's values are in a graph's [`Arena`]: chunk and offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct ArenaSlot {
    chunk: usize,
    offset: usize,
    len: usize,
}

/// Device memory a graph owns for the values of its nodes with a global
/// buffer, with a host copy: values changed since the last replay are
/// copied to the device in one transfer per chunk, ordered on the graph's
/// stream after the replays that read the old ones.
#[derive(Default)]
struct Arena {
    chunks: Vec<Chunk>,
}

struct Chunk {
    address: u64,
    host: Vec<u8>,
    used: usize,
    /// The byte range written since the last flush.
    dirty: Option<(usize, usize)>,
}

/// Bytes of device memory an arena allocates at a time.
const CHUNK_BYTES: usize = 64 << 10;
/// Each node's values start on this boundary (as `cuMemAlloc`'s would).
const SLOT_ALIGN: usize = 256;

impl Arena {
    /// Room for `contents`, holding them from the next flush.
    fn place(&mut self, contents: &[u8]) -> Result<ArenaSlot, Error> {
        let len = contents.len();
        let fits = |c: &Chunk| c.used.next_multiple_of(SLOT_ALIGN) + len <= c.host.len();
        if !self.chunks.last().is_some_and(fits) {
            let bytes = len.next_multiple_of(SLOT_ALIGN).max(CHUNK_BYTES);
            // SAFETY: a plain allocation in the current context (the
            // caller's queue or graph bound it); freed once, in `drop`.
            let address = unsafe { cudarc::driver::result::malloc_sync(bytes)? };
            self.chunks.push(Chunk {
                address,
                host: vec![0; bytes],
                used: 0,
                dirty: None,
            });
        }
        let chunk = self.chunks.len() - 1;
        let c = &mut self.chunks[chunk];
        let offset = c.used.next_multiple_of(SLOT_ALIGN);
        c.used = offset + len;
        let at = ArenaSlot { chunk, offset, len };
        self.write(at, contents);
        Ok(at)
    }

    fn address(&self, at: ArenaSlot) -> u64 {
        self.chunks[at.chunk].address + at.offset as u64
    }

    fn write(&mut self, at: ArenaSlot, contents: &[u8]) {
        let c = &mut self.chunks[at.chunk];
        let end = at.offset + contents.len();
        c.host[at.offset..end].copy_from_slice(contents);
        c.dirty = Some(match c.dirty {
            Some((lo, hi)) => (lo.min(at.offset), hi.max(end)),
            None => (at.offset, end),
        });
    }

    /// Copies what changed to the device, in order on `stream`.
    fn flush(&mut self, stream: &CudaStream) -> Result<(), Error> {
        for c in &mut self.chunks {
            if let Some((lo, hi)) = c.dirty.take() {
                // SAFETY: `lo..hi` lies in the chunk's allocation and its host
                // copy; a copy from pageable memory is staged before the call
                // returns, so the host copy may change after it.
                unsafe {
                    cudarc::driver::result::memcpy_htod_async(
                        c.address + lo as u64,
                        &c.host[lo..hi],
                        stream.cu_stream(),
                    )?;
                }
            }
        }
        Ok(())
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        for c in &self.chunks {
            // SAFETY: allocated by `place`, freed once; the graph waited for
            // its replays (an abandoned capture ran nothing).
            unsafe {
                let _ = cudarc::driver::result::free_sync(c.address);
            }
        }
    }
}
