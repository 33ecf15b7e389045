//! Recording a queue's launches into a graph: the capture's state, the
//! capturing handle and handler, and the end that makes the graph (and
//! refuses nodes it did not record).

use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::Arc;

use cudarc::driver::CudaStream;

use crate::bundle::built::tier::LinkState;
use crate::bundle::{BuiltImage, Executable, KernelBundle};
use crate::error::Error;
use crate::runtime::memory::ArgKind;
use crate::runtime::tier_switch::TierSwitch;
use crate::runtime::{LaunchConfig, LoadedModule, ModuleKey, Queue};
use crate::spec_id::{SpecConstType, SpecId};

use super::{Arena, ArenaSlot, Graph, Node, NodeArg};
use crate::runtime::cuda::{self, NodeHandle};
/// What a queue records while it captures: the kernel nodes of its
/// launches, the device memory their values live in, the modules they run.
#[derive(Default)]
pub(in crate::runtime) struct Capture {
    nodes: Vec<Node>,
    arena: Arena,
    modules: HashMap<ModuleKey, LoadedModule>,
    /// The memory of the `DeviceBuffer`s the launches took, which the
    /// graph keeps alive.
    buffers: Vec<Arc<crate::runtime::memory::Memory>>,
    /// Variants of adaptive arguments the launches ran (their modules,
    /// which the graph keeps loaded).
    adapted: Vec<crate::runtime::cuda::Function>,
}

/// One launch, recorded by a capture ([`Capture::record`]).
pub(in crate::runtime) struct Recorded<'a, 'b> {
    pub(in crate::runtime) kernel: &'a str,
    pub(in crate::runtime) cfg: LaunchConfig,
    pub(in crate::runtime) args: &'a [crate::runtime::Arg<'b>],
    pub(in crate::runtime) slice_addresses: &'a [u64],
    pub(in crate::runtime) signature: usize,
    /// The bundle's image (for a tiered bundle, its tiered image).
    pub(in crate::runtime) chosen: &'a Arc<BuiltImage>,
    /// The image whose code ran.
    pub(in crate::runtime) running: &'a Arc<BuiltImage>,
    /// Where a tiered image still runs emulated: its link.
    pub(in crate::runtime) link: Option<&'a Arc<LinkState>>,
    /// Handler values the launch passed over the running image's blob.
    pub(in crate::runtime) values: &'a [(&'a str, crate::runtime::memory::ValueBytes)],
    pub(in crate::runtime) module: (ModuleKey, &'a LoadedModule),
    /// Where the launch's global buffer was placed in the arena.
    pub(in crate::runtime) buffer: Option<ArenaSlot>,
    /// The variant of adaptive arguments the launch ran, if it ran one.
    pub(in crate::runtime) adapted: Option<&'a crate::runtime::cuda::Function>,
    /// The variant being linked for the launch's arguments, which the node
    /// switches to once it is there.
    /// The variant of the launch's arguments being linked or timed: its
    /// verdict, and its candidate code where it links here.
    pub(in crate::runtime) pending: Option<(
        crate::runtime::adapt::Pending,
        Option<crate::runtime::adapt::Candidate>,
    )>,
    /// The kernel's parameters that take memory (its launch layout's).
    pub(in crate::runtime) addresses: crate::image::AddressParams,
}

impl Capture {
    /// A device copy of `contents` that the graph owns (for a launch with
    /// its values in a global buffer): its address. Written when the
    /// capture ends.
    pub(in crate::runtime) fn place(&mut self, contents: &[u8]) -> Result<(ArenaSlot, u64), Error> {
        let at = self.arena.place(contents)?;
        Ok((at, self.arena.address(at)))
    }

    /// Records the kernel node the launch just added to the stream's
    /// capture. Out of the launch's line: most launches are not captured.
    #[inline(never)]
    pub(in crate::runtime) fn record(
        &mut self,
        stream: &CudaStream,
        r: Recorded<'_, '_>,
    ) -> Result<(), Error> {
        let handle = last_node(stream)?;
        let image = r.running.image_data();
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
                ArgKind::Vouched(v) => NodeArg::Vouched(v.as_slice().to_vec()),
                ArgKind::Buffer {
                    address, memory, ..
                } => {
                    if !self.buffers.iter().any(|b| Arc::ptr_eq(b, memory)) {
                        self.buffers.push(Arc::clone(memory));
                    }
                    NodeArg::Address(*address)
                }
                ArgKind::Raw(address) => NodeArg::Address(*address),
                ArgKind::Slice(_) | ArgKind::SliceMut(..) => {
                    NodeArg::Address(addresses.next().copied().unwrap_or(0))
                }
            })
            .collect();
        let (key, loaded) = r.module;
        self.modules.entry(key).or_insert_with(|| loaded.clone());
        // What the node runs: the variant its launch ran, else the code of
        // its image (the variant's module stays loaded with the graph).
        let function = match r.adapted {
            Some(f) => {
                self.adapted.push(f.clone());
                f.clone()
            }
            None => loaded.module.function(r.kernel)?,
        };
        self.nodes.push(Node {
            handle,
            kernel: r.kernel.into(),
            cfg: r.cfg,
            args,
            signature: r.signature,
            built: Arc::clone(r.chosen),
            running: Arc::clone(r.running),
            blob,
            function,
            adapt: r.pending.as_ref().map(|p| Arc::clone(&p.0)),
            candidate: r.pending.and_then(|p| p.1),
            buffer: r.buffer,
            swap: r.link.map(|l| TierSwitch::new(Arc::clone(l))),
            layout: None,
            graph_stale: false,
            addresses: r.addresses,
            changed: false,
            checked: None,
        });
        Ok(())
    }
}

/// The kernel node a launch just added to `stream`'s capture: the one node
/// the stream's next work would depend on.
fn last_node(stream: &CudaStream) -> Result<NodeHandle, Error> {
    cuda::last_captured_node(stream)?.map_err(|(status, count)| {
        Error::invalid(crate::error::Misuse::Capture, format!(
            "the queue's stream stopped capturing during the capture (status {status:?}, {count} \
             dependencies after a launch): was its capture ended or invalidated by other work?"
        ))
    })
}

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
        // No replay of a graph of this stream, nor a wait joined into it, is
        // between its check and its submission now.
        let _gate = self.gate.enter();
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if state.capture.is_some() {
            return Err(Error::invalid(
                crate::error::Misuse::Capture,
                "begin_capture on a queue that is capturing already".into(),
            ));
        }
        self.leave_foreign_capture(&mut state, "begin_capture")?;
        self.ctx.bind_to_thread()?;
        cuda::begin_capture(&self.stream)?;
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
    /// (an upload, a download, a wait), naming it. The stream's gate comes
    /// back held: the caller submits under it, so that no capture begins
    /// between the check and the work (an allocation made in another
    /// thread's capture is memory of that graph, which the driver crashed
    /// on when used at once).
    pub(in crate::runtime) fn not_capturing(
        &self,
        what: &str,
    ) -> Result<std::sync::MutexGuard<'_, ()>, Error> {
        let gate = self.gate.enter();
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        self.leave_foreign_capture(&mut state, what)?;
        match state.capture {
            Some(_) => Err(Error::invalid(
                crate::error::Misuse::Capture,
                format!(
                    "{what} on a queue that is capturing: a capture records launches made through it \
                 alone (end it first)"
                ),
            )),
            None => Ok(gate),
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
            handler: crate::runtime::Handler::capturing(self.queue),
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
    #[allow(unsafe_code)]
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

/// One command group of a [`Capturing`]: [`Handler`](crate::runtime::Handler)'s
/// methods, and a launch that is recorded — its arguments borrowed for the
/// graph's `'m`.
pub struct CaptureHandler<'q, 'm> {
    handler: crate::runtime::Handler<'q>,
    _memory: PhantomData<&'m ()>,
}

impl<'q, 'm> CaptureHandler<'q, 'm> {
    /// [`Handler::use_kernel_bundle`](crate::runtime::Handler::use_kernel_bundle).
    pub fn use_kernel_bundle(&mut self, bundle: &'q KernelBundle<Executable>) -> Result<(), Error> {
        self.handler.use_kernel_bundle(bundle)
    }

    /// [`Handler::use_kernel_bundle_selected`](crate::runtime::Handler::use_kernel_bundle_selected).
    pub fn use_kernel_bundle_selected(
        &mut self,
        bundle: &'q KernelBundle<Executable>,
        selector: impl Fn(&crate::bundle::DeviceImage<Executable>) -> bool + 'q,
    ) -> Result<(), Error> {
        self.handler.use_kernel_bundle_selected(bundle, selector)
    }

    /// [`Handler::set_specialization_constant`](crate::runtime::Handler::set_specialization_constant).
    pub fn set_specialization_constant<T: bytemuck::Pod + SpecConstType>(
        &mut self,
        id: &SpecId<T>,
        value: T,
    ) -> Result<(), Error> {
        self.handler.set_specialization_constant(id, value)
    }

    /// [`Handler::get_specialization_constant`](crate::runtime::Handler::get_specialization_constant).
    pub fn get_specialization_constant<T: bytemuck::Pod + SpecConstType>(
        &self,
        id: &SpecId<T>,
    ) -> Result<T, Error> {
        self.handler.get_specialization_constant(id)
    }

    /// Records a launch of `kernel` (as [`Handler::launch`](crate::runtime::Handler::launch)
    /// launches one): its arguments' memory is borrowed for `'m`, so that it
    /// outlives the graph.
    pub fn launch<K: crate::bundle::KernelName + ?Sized>(
        &mut self,
        kernel: &K,
        cfg: LaunchConfig,
        args: &[crate::runtime::Arg<'m>],
    ) -> Result<(), Error> {
        self.handler.launch(kernel, cfg, args)
    }
}

/// Ends `q`'s capture and instantiates its graph, with the queue's lock held
/// from before the driver's end of the capture to after its graph's nodes
/// were checked: every node must be one ptxspec recorded, unless
/// `foreign` (`Capturing::end_unchecked`'s caller answers for the others).
pub(super) fn end_capture<'m>(q: &Queue, foreign: bool) -> Result<Graph<'m>, Error> {
    // Held until the new graph's values are copied and its last use is
    // recorded: no other capture of the stream may take those.
    let gate = q.gate.clone();
    let _gate = gate.enter();
    let mut state = q.state.lock().unwrap_or_else(|p| p.into_inner());
    let capture = state.capture.take().ok_or_else(|| {
        Error::invalid(
            crate::error::Misuse::Capture,
            "end of a capture on a queue that is not capturing".into(),
        )
    })?;
    q.ctx.bind_to_thread()?;
    // The queue's stream, capturing since `begin_capture` (the capture in
    // the state says so, under the lock).
    let graph = cuda::end_capture(&q.stream);
    // What the queue let go of while it captured can go now.
    q.retire_all_let_go(&mut state);
    let graph = graph?.ok_or_else(|| {
        Error::invalid(
            crate::error::Misuse::Capture,
            "the capture made no graph (it was invalidated)".into(),
        )
    })?;
    // A graph refused here is destroyed as it drops.
    if !foreign {
        only_recorded_nodes(&graph, &capture.nodes)?;
    }
    // A graph with adapting nodes is instantiated once they had their
    // chance to take a verdict known now (below): a node whose variant is
    // linked — as `Queue::prepare` links the profile's — and kept, by
    // launches or an earlier trial of this graph in the tier profile, runs
    // the kept code from the first replay, instantiated once.
    let adapting = capture.nodes.iter().any(|n| n.adapt.is_some());
    let exec = match adapting {
        true => graph.uninstantiated(),
        false => graph.instantiate()?,
    };
    // What the graph's drop waits for: recorded after each use of the
    // stream (the first, the copy of its values below).
    let last_use = q.stream.record_event(Some(
        cudarc::driver::sys::CUevent_flags::CU_EVENT_DISABLE_TIMING,
    ))?;
    drop(state);
    let mut graph = Graph {
        exec,
        swaps: capture.nodes.iter().filter(|n| n.swap.is_some()).count(),
        adapting: capture.nodes.iter().filter(|n| n.adapt.is_some()).count(),
        trial: None,
        trials_over: false,
        fleet_asked: None,
        code_changed: false,
        nodes: capture.nodes,
        arena: capture.arena,
        modules: capture.modules,
        _adapted: capture.adapted,
        loading: HashMap::new(),
        changed: 0,
        arch: q.device.arch(),
        ctx: Arc::clone(&q.ctx),
        stream: Arc::clone(&q.stream),
        gate: q.gate.clone(),
        _buffers: capture.buffers,
        last_use: Some(last_use),
        deferred: Vec::new(),
        _memory: PhantomData,
    };
    if adapting {
        graph.poll_adapting()?;
        graph.instantiate_with_params()?;
    }
    for node in &mut graph.nodes {
        if let (Some(switch), Some(tier)) = (&mut node.swap, &node.built.tier) {
            switch.ask_now(tier, graph.arch, &node.kernel);
        }
    }
    // The captured values of global buffers, before the first replay.
    graph.arena.flush(&graph.stream)?;
    graph.used()?;
    Ok(graph)
}

/// Checks that every node of `graph` is one of `recorded`'s: work on the
/// stream that ptxspec did not launch (the program's cudarc calls) would
/// replay memory the graph does not keep.
fn only_recorded_nodes(graph: &cuda::CapturedGraph, recorded: &[Node]) -> Result<(), Error> {
    let nodes = graph.nodes()?;
    let foreign = nodes
        .iter()
        .filter(|n| !recorded.iter().any(|r| r.handle == **n))
        .count();
    if foreign > 0 {
        return Err(Error::invalid(
            crate::error::Misuse::Capture,
            format!(
                "the capture recorded {foreign} node{} that ptxspec did not launch (the program's own work \
             on the queue's stream, whose memory a graph cannot keep): end it with \
             Capturing::end_unchecked, which leaves that memory to the caller",
                if foreign == 1 { "" } else { "s" }
            ),
        ));
    }
    Ok(())
}

/// A capture the driver invalidated, as `invalid_object` with its usual
/// causes; other errors as they are.
fn explain_invalidated(e: Error) -> Error {
    use cudarc::driver::sys::CUresult::{
        CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, CUDA_ERROR_STREAM_CAPTURE_ISOLATION,
        CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
    };
    match e {
        Error::Cuda(d)
            if [
                CUDA_ERROR_STREAM_CAPTURE_INVALIDATED,
                CUDA_ERROR_STREAM_CAPTURE_ISOLATION,
                CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
            ]
            .map(|s| s as u32)
            .contains(&d.status()) =>
        {
            Error::invalid(
                crate::error::Misuse::Capture,
                format!(
                    "the driver invalidated the capture ({}): work on the capturing stream waited for an event \
                 recorded outside the capture — cudarc's event tracking does that for a slice used before the \
                 capture (turn it off in programs that capture: CudaContext::disable_event_tracking) — or made a \
                 call that cannot be recorded (a synchronous copy, a wait for the stream)",
                    d.name()
                ),
            )
        }
        e => e,
    }
}
