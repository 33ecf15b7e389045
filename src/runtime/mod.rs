//! The CUDA side: devices, queues, launches (driver API through `cudarc`,
//! loaded dynamically, so that a machine without a driver gets
//! [`Error::NoDriver`] instead of a failure to start).
//!
//! A [`Queue`] submits to a CUDA stream on one device (its own, or one of
//! the program's cudarc code) and caches what launches
//! need: loaded modules by (image, code) — a native bundle's specialized PTX
//! differs per value set, an LTO bundle's cubin per value set and
//! architecture; bounded — and, for images whose buffer is in global memory,
//! one device buffer each, written again only when its contents change.
//! Queues of different devices share bundles: each loads its own modules.
//! Device memory ([`DeviceBuffer`], or the program's cudarc slices) may be
//! used by any queue of its context; [`memory`](DeviceBuffer) orders uses
//! on other streams than the memory's own. A queue also records its
//! launches into CUDA graphs ([`Queue::capture`]), whose specialization
//! constants change between replays ([`Graph`]).
//!
//! Where `Queue`'s methods are: its public API here (`new`, `submit`,
//! memory, events, waits), except capture (`begin_capture`, `capture`, and
//! the refusal of other work while one runs), which lives beside
//! [`Capturing`] in `graph/capture.rs`; the crate-internal code loading
//! (`function`, `adopt`) in `module_cache.rs`; a launch's own steps in
//! `launch/`.

mod adapt;
mod cuda;
mod driver;
mod global_buffers;
mod graph;
mod launch;
mod loader;
mod memory;
mod module_cache;
mod retire;
mod stream_gate;
mod tier_switch;
mod transfers;

pub use driver::{devices, driver_available};
pub use graph::{CaptureHandler, Capturing, Graph, GraphNode};
pub use launch::Handler;
pub use memory::{Arg, DeviceBuffer};

use driver::{query, require_driver};
use global_buffers::GlobalBufferCache;
use module_cache::{CodeRef, LoadedModule, ModuleKey};

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use cudarc::driver::{CudaContext, CudaStream};

use crate::bundle::{BuiltImage, Device};
use crate::error::Error;

/// Grid, block and dynamic shared memory of a launch: `LaunchConfig::new`,
/// then `with_` what else the launch needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LaunchConfig {
    /// Blocks in x, y and z.
    pub grid: (u32, u32, u32),
    /// Threads of a block in x, y and z (the work-group size).
    pub block: (u32, u32, u32),
    /// Dynamic shared memory per block, in bytes.
    pub shared_mem_bytes: u32,
}

impl LaunchConfig {
    /// The launch's dimensions as the driver layer takes them.
    pub(crate) fn dims(&self) -> cuda::Dims {
        cuda::Dims {
            grid: self.grid,
            block: self.block,
            shared_mem_bytes: self.shared_mem_bytes,
        }
    }

    /// A launch of `grid` blocks of `block` threads, with no dynamic shared
    /// memory.
    pub fn new(grid: (u32, u32, u32), block: (u32, u32, u32)) -> Self {
        LaunchConfig {
            grid,
            block,
            shared_mem_bytes: 0,
        }
    }

    /// The same launch with `bytes` of dynamic shared memory per block.
    #[must_use]
    pub fn with_shared_mem(mut self, bytes: u32) -> Self {
        self.shared_mem_bytes = bytes;
        self
    }
}

/// Laid out in declaration order, what every launch reads first (see
/// [`launch::Plan`]: each cache line a launch reads costs it time): with
/// the queue's fields before it, a launch that repeats reads two lines of
/// the queue (the `queue_lines` test holds them there).
#[derive(Default)]
#[repr(C)]
struct QueueState {
    /// The plans of the last launches, the last first (indices into
    /// `plans`, which a launch checks before the others: they may have
    /// moved or gone since; `u32::MAX`: none). Four bytes each, so that
    /// `buffers`' counter fits in the lines a launch reads.
    recent_plans: [u32; 2],
    /// Launch plans, the last made first (see [`launch::Plan`]); past
    /// `launch::plan::PLANS`, a new plan takes the place of the one launched
    /// least recently.
    plans: Vec<launch::Plan>,
    /// While [`Queue::begin_capture`] records launches into a graph: the
    /// nodes so far.
    capture: Option<Box<graph::Capture>>,
    /// How many launches took each path ([`Queue::launch_paths`]).
    paths: LaunchPaths,
    /// Tier up handler values after this many launches of a value set
    /// ([`Queue::tier_up_handler_values`]); `None`: never.
    handler_tier_after: Option<u32>,
    /// The mode of the code the last launch ran.
    last_mode: Option<crate::bundle::SpecMode>,
    /// The stream was found in a capture it did not begin (it waited for
    /// work of a stream that was capturing): until the driver says it left
    /// that capture, the queue submits nothing (`Queue::leave_foreign_capture`).
    foreign_capture: bool,
    /// Value sets in device memory, for images whose kernels take their
    /// values in a global buffer: its first field, the count of buffers
    /// written over, which a launch of such a kernel reads, ends the lines
    /// a launch reads.
    buffers: GlobalBufferCache,
    // Past what a launch that repeats reads.
    /// The plans a launch finds by its bundle and kernel name, by (the
    /// bundle's identity, or 0 for handler values; the name's hash) →
    /// index into `plans`, made again whenever the plans move. A program
    /// whose launches go round more kernels than the recent plans (a
    /// transformer's layer) finds each plan in one look-up, not in a scan
    /// of the plans, each of which is lines of memory.
    plan_index: ptxspec_core::fasthash::FxHashMap<(usize, u64), usize>,
    /// `launch_clock` at each plan's last launch (or its making), in the
    /// order of `plans`: which plan a new one replaces.
    plan_launched: Vec<u64>,
    /// Counts the queue's launches (and plans made).
    launch_clock: u64,
    /// (image, code identity) → the loaded module.
    modules: HashMap<ModuleKey, LoadedModule>,
    /// The modules, the one a plan used least recently first: the next to
    /// be let go.
    module_order: VecDeque<ModuleKey>,
    /// Tier code the loader thread is loading for plans, by key (plans
    /// waiting for the same code share its load).
    tier_loads: HashMap<ModuleKey, loader::Slot>,
    /// Modules being loaded (without the queue's lock) by a launch: others
    /// that need the same code wait on its cell, not on the queue.
    loading: HashMap<ModuleKey, Arc<Mutex<Option<LoadedModule>>>>,
    /// Kernel → the emulated image that handler-set values patch.
    /// By kernel name, with the registry's generation it was chosen in.
    implicit: HashMap<String, (u64, Arc<BuiltImage>)>,
    /// (kernel, buffer contents) → launches so far and, from the
    /// threshold on, the tiered image of those values.
    handler_tiers: HashMap<(String, Vec<u8>), HandlerTier>,
    /// What the queue let go of since its last launch — evicted modules,
    /// plans, replaced functions — to drop once the stream ran their
    /// kernels ([`Queue::retire_let_go`]).
    let_go: Vec<Box<dyn Send>>,
}

/// The queue's stream found in a capture it did not begin (it waited for
/// an event of a capturing stream): the queue does nothing there, so that
/// no graph but its own records its code or values.
#[cold]
pub(crate) fn joined_a_foreign_capture(what: &str) -> Error {
    Error::invalid(
        crate::error::Misuse::Capture,
        format!(
            "{what}: the queue's stream joined a capture the queue did not begin (it waited for work of \
         a stream that was capturing): the queue records nothing into a graph it does not own, \
         whose replays could outlive the code and values its launches use"
        ),
    )
}

impl Queue {
    /// Whether the queue may submit, as far as captures it did not begin go:
    /// where its stream was found in one, the driver is asked again, and
    /// the queue refuses (`what`) until the stream has left it.
    fn leave_foreign_capture(&self, state: &mut QueueState, what: &str) -> Result<(), Error> {
        if state.foreign_capture {
            if cuda::is_capturing(&self.stream)? {
                return Err(joined_a_foreign_capture(what));
            }
            state.foreign_capture = false;
        }
        Ok(())
    }

    /// After a failed wait for another stream: where the queue's stream is
    /// now in a capture it did not begin, it says so in `state`, and
    /// submits nothing more until it left it.
    fn note_foreign_capture(&self, state: &mut QueueState) {
        if state.capture.is_none() && cuda::is_capturing(&self.stream).unwrap_or(true) {
            state.foreign_capture = true;
        }
    }
}

/// A handler value set's launches and tiered image.
#[derive(Default)]
struct HandlerTier {
    launches: u32,
    tiered: Option<Arc<BuiltImage>>,
}

/// How many handler value sets a queue counts at once (all are forgotten,
/// their queued links dropped, when more come).
const HANDLER_TIERS: usize = 256;

/// Counts of a queue's launches by the path they took
/// ([`Queue::launch_paths`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LaunchPaths {
    /// Launches whose plan was ready: the plan found among the recent ones
    /// or by the queue's index, its layout filled, the driver called.
    pub short: u64,
    /// Launches that found or made their plan otherwise, or had memory to
    /// join, slices to record or a capture to record into.
    pub whole: u64,
}

/// A CUDA stream on one device, with the caches launches need. `Send +
/// Sync`: threads may submit to one queue; submissions are serialized.
///
/// [`Queue::new`] makes a stream of its own; [`Queue::from_stream`] submits
/// to a stream of the program's own cudarc code. Either way cudarc's event
/// tracking is left as the context has it: ptxspec orders uses of memory
/// across streams itself (see [`DeviceBuffer`]).
#[repr(C, align(64))]
pub struct Queue {
    // In declaration order: what a launch reads first, from the start of a
    // cache line (see `QueueState`).
    ctx: Arc<CudaContext>,
    /// The stream, and the driver's handle of it: what a launch passes the
    /// driver, without reading the stream object's memory for it.
    stream: cuda::LaunchStream,
    /// `device.ordinal`, beside what a launch reads first (`device` lies
    /// past the state, lines away).
    ordinal: usize,
    /// The driver's handle of `ctx`, as a number: what a launch compares
    /// the thread's current context with ([`Queue::bind`]).
    cu_ctx: usize,
    state: Mutex<QueueState>,
    device: Device,
    /// Taken by every check-then-act on the stream's capture state, shared
    /// with the graphs made on it (`stream_gate`).
    gate: stream_gate::StreamGate,
}

impl Queue {
    /// A queue on device `ordinal`, with a new stream (in the device's
    /// primary context, which cudarc and the CUDA runtime share).
    pub fn new(ordinal: usize) -> Result<Queue, Error> {
        require_driver()?;
        let (_, stream) = cuda::context_with_stream(ordinal)?;
        Queue::on_stream(stream)
    }

    /// A queue submitting to `stream`, a stream of the program's own cudarc
    /// code: its launches are ordered with the program's other work there,
    /// and its kernels take the program's `CudaSlice`s ([`Arg::slice`],
    /// [`Arg::slice_mut`]). A program that only needs its streams ordered
    /// with a queue's keeps them apart and uses [`Queue::wait_for`] and
    /// [`Queue::record_event`], which are safe.
    ///
    /// # Safety
    ///
    /// CUDA captures streams, not queues. While the queue exists, and while
    /// a graph, bundle or buffer made through it exists, the program begins
    /// no capture of `stream` (cudarc's `begin_capture`, or CUDA's) other
    /// than through this queue ([`Queue::begin_capture`], [`Queue::capture`]),
    /// and makes no capture of another stream reach it (a wait in `stream`
    /// for an event recorded in a capture). Such a capture would record the
    /// queue's launches — with code and value buffers that the queue and its
    /// bundles free when they are dropped — into a graph the program could
    /// replay after that. Nor does it make a second queue over `stream`.
    #[allow(unsafe_code)]
    pub unsafe fn from_stream(stream: Arc<CudaStream>) -> Result<Queue, Error> {
        Queue::on_stream(stream)
    }

    /// A queue on `stream`, which nothing but the queue captures (a stream
    /// of its own, or the caller's promise).
    fn on_stream(stream: Arc<CudaStream>) -> Result<Queue, Error> {
        ptxspec_core::toolkit::exit::guard_this_thread(); // exit waits for background work
        let ctx = Arc::clone(stream.context());
        let device = query(&ctx)?;
        let cu_ctx = ctx.cu_ctx() as usize;
        Ok(Queue {
            ctx,
            stream: cuda::LaunchStream::new(stream),
            ordinal: device.ordinal,
            cu_ctx,
            device,
            state: Mutex::default(),
            gate: stream_gate::StreamGate::default(),
        })
    }

    /// Makes the queue's context current on this thread where it is not:
    /// `CudaContext::bind_to_thread` without its first step, which takes
    /// (and returns) an error that cudarc's own drops recorded in the
    /// context object — the next cudarc call there reports it still. A
    /// launch's path then reads the queue alone, not the context object,
    /// and makes no atomic write.
    #[inline]
    fn bind(&self) -> Result<(), Error> {
        match cuda::is_current(self.cu_ctx) {
            Ok(true) => Ok(()),
            _ => self.bind_now(),
        }
    }

    /// [`bind`](Self::bind) where the queue's context is not current (or
    /// the driver did not say): out of the line of launches, which find it
    /// current — their code then spans fewer instruction-cache lines.
    #[cold]
    #[inline(never)]
    fn bind_now(&self) -> Result<(), Error> {
        match cuda::is_current(self.cu_ctx)? {
            true => Ok(()),
            false => Ok(self.ctx.bind_to_thread()?),
        }
    }

    /// The device the queue launches on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Values set on handlers tier up as a JIT's counter decides: once a
    /// kernel has been launched `after` times with one value set, a
    /// background worker links the specialized code for those values (as
    /// [`SpecMode::Tiered`](crate::SpecMode::Tiered) does), and launches
    /// with them run it when it is ready — emulated until then, never
    /// waiting. Keyed by kernel, values and the device's architecture, with
    /// the LTO caches shared. `None` (the default) keeps handler values
    /// emulated: bit-exact between launches (see `SpecMode::Tiered` on FMA).
    /// Counting costs each launch with handler values a hash of its buffer.
    pub fn tier_up_handler_values(&self, after: Option<u32>) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.handler_tier_after = after.map(|n| n.max(1));
        if after.is_none() {
            state.handler_tiers.clear();
        }
    }

    /// Which code the last launch on this queue ran: [`SpecMode::Emulated`],
    /// [`SpecMode::Native`] or [`SpecMode::Lto`] — for a
    /// [`SpecMode::Tiered`] bundle, whether its specialized tier had taken
    /// over. `None` before the first launch.
    ///
    /// [`SpecMode::Emulated`]: crate::SpecMode::Emulated
    /// [`SpecMode::Native`]: crate::SpecMode::Native
    /// [`SpecMode::Lto`]: crate::SpecMode::Lto
    /// [`SpecMode::Tiered`]: crate::SpecMode::Tiered
    pub fn last_launch_mode(&self) -> Option<crate::bundle::SpecMode> {
        self.state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .last_mode
    }

    /// How many of the queue's launches took the short path — their plan
    /// found ready, nothing to make, join or record — and how many the
    /// whole one: what a program whose launches should cost little (a
    /// server's small requests) checks. A selector, cudarc slices, memory
    /// of another stream, a capture, a tier on its way or a new kernel take
    /// the whole path.
    pub fn launch_paths(&self) -> LaunchPaths {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).paths
    }

    /// The CUDA stream submissions go to, for the program's own cudarc work
    /// in order with the queue's (its kernels, copies). Ordering alone needs
    /// no access: [`record_event`](Self::record_event) and
    /// [`wait_for`](Self::wait_for) are safe.
    ///
    /// # Safety
    ///
    /// As [`Queue::from_stream`]'s: the program begins no capture of the
    /// stream other than through the queue, nor makes another stream's
    /// capture reach it, while the queue or what it made exists (a capture
    /// would take the queue's launches, whose code and values the queue
    /// frees, into a graph the program could replay later). The memory the
    /// program's own work there uses is the program's to keep valid, as for
    /// cudarc's own (unsafe) launches.
    #[allow(unsafe_code)]
    pub unsafe fn cuda_stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// An event recorded on the queue's stream after the work submitted to
    /// it so far, with timing: a program's own stream waits for the queue
    /// with cudarc's `stream.wait(&event)`, and two events time the work
    /// between them (`elapsed_ms`). Not while a capture lasts.
    pub fn record_event(&self) -> Result<cudarc::driver::CudaEvent, Error> {
        let _gate = self.not_capturing("record_event")?;
        self.ctx.bind_to_thread()?;
        // The stream never records into a capture it did not begin (an
        // event waited for elsewhere would join that capture to it).
        if cuda::is_capturing(&self.stream)? {
            return Err(joined_a_foreign_capture("record_event"));
        }
        Ok(self
            .stream
            .record_event(Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT))?)
    }

    /// The queue's work submitted from now on waits for the work submitted
    /// to `other` (a stream of the program's, in the queue's context) so
    /// far. Not while a capture lasts; refused while `other` is capturing,
    /// whose capture the queue's stream would otherwise join.
    pub fn wait_for(&self, other: &CudaStream) -> Result<(), Error> {
        // No capture of the queue's stream may begin between the check and
        // the join.
        let _gate = self.not_capturing("wait_for")?;
        self.ctx.bind_to_thread()?;
        self.joined(memory::Use::on(&self.stream).begin(other))
    }

    /// `result` of a wait for another stream, noting a capture that the
    /// queue's stream may have joined where it failed.
    fn joined(&self, result: Result<(), Error>) -> Result<(), Error> {
        if result.is_err() {
            let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
            self.note_foreign_capture(&mut state);
        }
        result
    }

    /// The CUDA context of the queue's device.
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// Waits for everything submitted so far (not while a capture lasts).
    pub fn wait(&self) -> Result<(), Error> {
        // Not held across the synchronize: a capture begun meanwhile makes
        // the synchronize fail, which says so.
        drop(self.not_capturing("wait")?);
        // What the queue let go of so far (short of a batch, see
        // `retire_let_go`) was last launched before now: once the stream
        // ran what was submitted, it can go without an event — here, not
        // under the lock. A program that waits holds nothing longer.
        let let_go = {
            let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
            match state.capture {
                None => std::mem::take(&mut state.let_go),
                Some(_) => Vec::new(),
            }
        };
        match self.stream.synchronize() {
            Ok(()) => {
                // Modules unload in their context.
                let _ = self.ctx.bind_to_thread();
                drop(let_go);
                Ok(())
            }
            Err(e) => {
                if let Err(kept) = retire::after_stream(&self.stream, let_go) {
                    // Kept for the next hand-over outside the capture.
                    let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
                    state.let_go.extend(kept);
                }
                Err(e.into())
            }
        }
    }

    /// Free and total device memory, in bytes.
    pub fn memory_info(&self) -> Result<(usize, usize), Error> {
        Ok(self.ctx.mem_get_info()?)
    }

    /// Readies `bundle` for this queue before its first launches, so that
    /// they pay for nothing but the launch: every kernel's code is loaded
    /// into the queue's context now (a launch otherwise loads its kernel's
    /// module on first use — and a module load waits while the GPU runs the
    /// work queued before it), and the variants of adaptive arguments that
    /// the tier profile names are linked or fetched and loaded, waited for
    /// at most `within` (those not ready by then come as they would have).
    /// A program that times its first step, or a server that must answer
    /// its first request as fast as its next, calls this after building
    /// its bundles. Returns how many kernels were readied; not while the
    /// queue captures.
    pub fn prepare(
        &self,
        bundle: &crate::bundle::KernelBundle<crate::bundle::Executable>,
        within: std::time::Duration,
    ) -> Result<usize, Error> {
        let until = std::time::Instant::now() + within;
        drop(self.not_capturing("prepare")?);
        let mut h = Handler::new(self);
        h.use_kernel_bundle(bundle)?;
        h.prepare(until)
    }

    /// Runs `f` with a handler for one command group, as SYCL's `submit`.
    pub fn submit<'q, R>(
        &'q self,
        f: impl FnOnce(&mut Handler<'q>) -> Result<R, Error>,
    ) -> Result<R, Error> {
        let mut h = Handler::new(self);
        f(&mut h)
    }
}

impl Drop for Queue {
    fn drop(&mut self) {
        // Modules unload in their context, after the kernels launched from
        // them have run.
        let _ = self.ctx.bind_to_thread();
        let state = self.state.get_mut().unwrap_or_else(|p| p.into_inner());
        if state.capture.take().is_some() {
            // A capture never ended: its graph goes unlaunched (destroyed
            // as it drops).
            drop(cuda::end_capture(&self.stream));
        }
        if self.stream.synchronize().is_ok() {
            state.modules.clear();
            return;
        }
        // The driver would not wait (another thread's capture in global
        // mode forbids it) or the stream is in error: work queued on the
        // stream may still run the queue's modules and read its buffers.
        // All the queue holds goes to the retiring thread, which waits for
        // an event recorded after that work (again and again while a
        // capture forbids waiting) — or, where none can be recorded, stays
        // for the process's life. Never freed under running work.
        let held: Vec<Box<dyn Send>> = vec![Box::new(std::mem::take(state))];
        match self.stream.record_event(None) {
            Ok(event) => retire::after_event(Arc::clone(&self.ctx), event, held),
            Err(_) => retire::keep_for_process(held, "a dropped queue's stream took no event"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Mutex, Queue, QueueState};

    /// What a launch that repeats reads of its queue (the fields before the
    /// state, the lock, the state's first fields, and for a kernel whose
    /// values are in a global buffer the count of buffers written over) lies
    /// in two cache lines.
    #[test]
    fn queue_lines() {
        use std::mem::{align_of, offset_of, size_of};
        assert_eq!(align_of::<Queue>(), 64);
        let lock = Mutex::new(QueueState::default());
        let data_at = {
            let data = &*lock.lock().unwrap_or_else(|p| p.into_inner());
            std::ptr::from_ref(data) as usize - std::ptr::from_ref(&lock) as usize
        };
        let state_at = offset_of!(Queue, state) + data_at;
        let read_end = state_at + offset_of!(QueueState, foreign_capture) + size_of::<bool>();
        assert!(
            read_end <= 128,
            "a launch reads {read_end} bytes of its queue"
        );
        // A launch whose values are in a global buffer reads the count of
        // buffers written over too.
        let global_end = state_at
            + offset_of!(QueueState, buffers)
            + offset_of!(super::GlobalBufferCache, overwrites)
            + size_of::<u64>();
        assert!(
            global_end <= 128,
            "a launch of a global buffer's kernel reads {global_end} bytes of its queue"
        );
    }
}
