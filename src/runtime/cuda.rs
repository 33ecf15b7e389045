//! The driver layer: every raw CUDA driver call ptxspec makes and every
//! driver handle it keeps, in this one file (as cudarc's `result` layer is
//! for cudarc). The rest of the crate is `#![deny(unsafe_code)]` and reaches
//! the driver through the safe functions and owning types here, whose
//! invariants the types make true:
//!
//! - **Code.** A [`Module`] owns its `CUmodule` and unloads it once; a
//!   [`Function`] holds its module (`Arc`), so a function never outlives
//!   its code. [`load`] loads PTX through the driver's JIT, cubins as they
//!   are, and — for images that call CUDA's device runtime — links
//!   `libcudadevrt.a` first; the JIT's logs go to the build log, a rejected
//!   image is [`Error::Build`] with the error log.
//! - **Launches.** [`launch`] takes a function and the parameters a launch
//!   layout placed ([`LaunchParams`]: one pointer per parameter to a value
//!   of the parameter's size, alive for the params' lifetime).
//! - **Captures and graphs.** [`begin_capture`], [`end_capture`] (a
//!   [`CapturedGraph`] that destroys itself unless instantiated into an
//!   [`Exec`]), [`is_capturing`], [`last_captured_node`], node parameters
//!   ([`set_kernel_node_params`]), replays ([`graph_launch`]).
//! - **Memory ptxspec allocates itself** ([`DeviceAllocation`]) and copies
//!   into memory it holds ([`copy_into_slice`], [`fill_slice`]), each range
//!   checked against the memory it is given.
//!
//! Handles are identifiers of driver-owned state: `Send`/`Sync` is asserted
//! on each handle newtype alone, never on a struct around one, so that a
//! field added later is not swept in.
#![allow(unsafe_code)]

use std::collections::HashMap;
use std::ffi::{CString, c_void};
use std::sync::{Arc, Mutex};

use cudarc::driver::CudaStream;
use cudarc::driver::sys::{self, CUjit_option, CUjitInputType};

use crate::error::Error;
use ptxspec_core::image::LaunchParams;

/// Whether libcuda can be loaded on this machine.
pub(crate) fn driver_available() -> bool {
    // SAFETY: only tries to open the library; no CUDA call is made.
    unsafe { cudarc::driver::sys::is_culib_present() }
}

/// What to load.
pub(crate) enum Bytes<'a> {
    Ptx(&'a str),
    Cubin(&'a [u8]),
}

/// A loaded module and the functions taken from it so far. Unloaded when
/// the last of its owners lets it go (its context must be current then:
/// queues, graphs and the threads that drop modules bind it). Owned
/// through `Arc` by a queue's cache, the functions taken from it (so by
/// launch plans and graph nodes), and graphs: no function outlives its
/// module. Whoever drops the last owner makes sure that the kernels
/// launched from it ran first (see `Queue::retire`, `Graph`'s drop).
pub(crate) struct Module {
    raw: ModuleHandle,
    functions: Mutex<HashMap<String, FunctionHandle>>,
}

/// The driver's handle of a loaded module.
struct ModuleHandle(sys::CUmodule);

// SAFETY: the driver API lets any thread use a module handle (with its
// context current); the handle is only an identifier, the driver keeps the
// module. `Module` unloads it once, in `drop`.
unsafe impl Send for ModuleHandle {}
// SAFETY: as above; `Module` only reads the handle after loading it.
unsafe impl Sync for ModuleHandle {}

/// The driver's handle of a kernel of a loaded module.
#[derive(Clone, Copy)]
struct FunctionHandle(sys::CUfunction);

// SAFETY: the handle is an identifier of driver-owned state of its module,
// which any thread may launch with the module's context current; ptxspec
// never dereferences it. Whoever holds one also holds its module
// (`Function`).
unsafe impl Send for FunctionHandle {}
// SAFETY: as above.
unsafe impl Sync for FunctionHandle {}

/// A kernel of a loaded module, owning the module (as cudarc's
/// `CudaFunction` does): while a `Function` exists its module stays loaded,
/// so a plan, graph node or tier that holds one can always launch it.
#[derive(Clone)]
pub(crate) struct Function {
    raw: FunctionHandle,
    /// Owned, never read: what keeps `raw` valid.
    _module: Arc<Module>,
}

impl Drop for Module {
    fn drop(&mut self) {
        // SAFETY: a module loaded by `load`, unloaded once, when the last of
        // its owners lets it go. Its owners drop it after the kernels launched
        // from it ran: a queue hands what it lets go of to `retire`, which
        // drops it once an event recorded after its launches has completed;
        // a graph waits for the event recorded after its last replay; the
        // loader thread drops only modules whose waiter went before launching
        // anything from them.
        unsafe {
            let _ = sys::cuModuleUnload(self.raw.0);
        }
    }
}

impl Module {
    /// The kernel `name` of the module.
    pub(crate) fn function(self: &Arc<Self>, name: &str) -> Result<Function, Error> {
        let mut functions = self.functions.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(&raw) = functions.get(name) {
            return Ok(Function {
                raw,
                _module: Arc::clone(self),
            });
        }
        let cname = CString::new(name)
            .map_err(|_| Error::kernel_not_found(name, format!("{name:?} holds a NUL byte")))?;
        let mut f: sys::CUfunction = std::ptr::null_mut();
        // SAFETY: a loaded module and a NUL-terminated name.
        let rc = unsafe { sys::cuModuleGetFunction(&mut f, self.raw.0, cname.as_ptr()) };
        if rc != sys::CUresult::CUDA_SUCCESS {
            return Err(Error::kernel_not_found(
                name,
                format!("the loaded image has no kernel {name} ({rc:?})"),
            ));
        }
        functions.insert(name.to_string(), FunctionHandle(f));
        Ok(Function {
            raw: FunctionHandle(f),
            _module: Arc::clone(self),
        })
    }
}

const LOG_BYTES: usize = 16 << 10;

/// The driver's JIT options with room for its logs.
struct JitOptions {
    keys: Vec<CUjit_option>,
    values: Vec<*mut c_void>,
    info: Vec<u8>,
    error: Vec<u8>,
}

impl JitOptions {
    fn new(debug: bool) -> Box<JitOptions> {
        let mut o = Box::new(JitOptions {
            keys: Vec::new(),
            values: Vec::new(),
            info: vec![0; LOG_BYTES],
            error: vec![0; LOG_BYTES],
        });
        let info = o.info.as_mut_ptr() as *mut c_void;
        let error = o.error.as_mut_ptr() as *mut c_void;
        o.keys.extend([
            CUjit_option::CU_JIT_INFO_LOG_BUFFER,
            CUjit_option::CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES,
            CUjit_option::CU_JIT_ERROR_LOG_BUFFER,
            CUjit_option::CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
        ]);
        // Sizes are passed in the pointer's bits, as the driver API wants.
        o.values.extend([
            info,
            std::ptr::without_provenance_mut(LOG_BYTES),
            error,
            std::ptr::without_provenance_mut(LOG_BYTES),
        ]);
        if debug {
            o.keys.extend([
                CUjit_option::CU_JIT_GENERATE_LINE_INFO,
                CUjit_option::CU_JIT_OPTIMIZATION_LEVEL,
                CUjit_option::CU_JIT_LOG_VERBOSE,
            ]);
            // The values are numbers in the pointer's bits: line info on,
            // optimization level 0, a verbose log (registers, spills).
            o.values.extend([
                std::ptr::without_provenance_mut(1),
                std::ptr::null_mut(),
                std::ptr::without_provenance_mut(1),
            ]);
        }
        o
    }

    fn text(buf: &[u8]) -> String {
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        String::from_utf8_lossy(&buf[..end]).trim_end().to_string()
    }
}

/// `Ok` where the driver call succeeded; else a build error saying `what`
/// failed, with the driver's code and the JIT's error log.
fn jit_result(
    rc: sys::CUresult,
    what: impl FnOnce() -> String,
    log: &JitOptions,
) -> Result<(), Error> {
    if rc == sys::CUresult::CUDA_SUCCESS {
        return Ok(());
    }
    Err(Error::Build {
        what: format!("{} ({rc:?})", what()),
        log: JitOptions::text(&log.error),
    })
}

/// The least time between the end of one load off the launch path and the
/// start of the next.
pub(crate) const BACKGROUND_LOAD_GAP: std::time::Duration = std::time::Duration::from_millis(25);

/// Held by each load off the launch path (a variant's on its link thread, a
/// tier's on the loader thread), taken before the load's exit guard
/// (`toolkit::exit::background_driver_call`): one at a time in the
/// process, each [`BACKGROUND_LOAD_GAP`] after the last. A module load
/// waits for an idle moment of the GPU while the program's launches go
/// on, and then holds them up while it loads. Loads that waited for the
/// same moment (a burst of variants linked at once) ran back to back at the
/// start of the program's next step and held it up for all of them (a
/// GPT-2 training step ×1.10 of the median with 40 loads); paced, about
/// one load meets each idle moment.
pub(crate) fn one_background_load() -> BackgroundLoad {
    static LAST_ENDED: Mutex<Option<std::time::Instant>> = Mutex::new(None);
    let last = LAST_ENDED.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(wait) = last.and_then(|ended| {
        (ended + BACKGROUND_LOAD_GAP).checked_duration_since(std::time::Instant::now())
    }) {
        std::thread::sleep(wait);
    }
    BackgroundLoad(last)
}

/// One load off the launch path under way ([`one_background_load`]):
/// the next starts [`BACKGROUND_LOAD_GAP`] after it is dropped.
pub(crate) struct BackgroundLoad(std::sync::MutexGuard<'static, Option<std::time::Instant>>);

impl Drop for BackgroundLoad {
    fn drop(&mut self) {
        *self.0 = Some(std::time::Instant::now());
    }
}

/// Loads `bytes` (image `name`, for messages) into the current context;
/// returns the module and the JIT's info log. With `device_runtime`, links
/// `libcudadevrt.a` in first.
pub(crate) fn load(
    name: &str,
    bytes: Bytes<'_>,
    device_runtime: bool,
    debug: bool,
) -> Result<(Module, String), Error> {
    let (what, len) = match bytes {
        Bytes::Ptx(p) => ("module load (the driver compiles PTX)", p.len()),
        Bytes::Cubin(c) => ("module load (cubin)", c.len()),
    };
    let mut span = ptxspec_core::trace::span(what, "load");
    span.arg("image", name);
    span.arg("bytes", len);
    let mut opts = JitOptions::new(debug);
    let ptx_c;
    let input = match bytes {
        Bytes::Ptx(p) => {
            ptx_c = CString::new(p).map_err(|_| Error::BadImage {
                image: name.to_string(),
                what: "PTX with a NUL byte".into(),
            })?;
            Input {
                data: ptx_c.as_ptr() as *const c_void,
                len: p.len() + 1,
                kind: CUjitInputType::CU_JIT_INPUT_PTX,
            }
        }
        Bytes::Cubin(c) => Input {
            data: c.as_ptr() as *const c_void,
            len: c.len(),
            kind: CUjitInputType::CU_JIT_INPUT_CUBIN,
        },
    };
    let raw = match device_runtime {
        false => load_alone(name, &input, &mut opts)?,
        true => load_with_device_runtime(name, &input, &mut opts)?,
    };
    ptxspec_core::toolkit::exit::driver_used(
        ptxspec_core::toolkit::exit::DriverMoment::ModuleLoaded,
    );
    crate::stats::MODULES_LOADED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    Ok((
        Module {
            raw: ModuleHandle(raw),
            functions: Mutex::default(),
        },
        JitOptions::text(&opts.info),
    ))
}

/// What [`load`] gives the driver: NUL-terminated PTX or a cubin, borrowed
/// from its caller for the call.
struct Input {
    data: *const c_void,
    len: usize,
    kind: CUjitInputType,
}

/// Loads `input` as it is (the driver JIT-compiles PTX).
fn load_alone(name: &str, input: &Input, opts: &mut JitOptions) -> Result<sys::CUmodule, Error> {
    let mut raw: sys::CUmodule = std::ptr::null_mut();
    // SAFETY: `input.data` is a NUL-terminated PTX or a cubin that outlives
    // the call (`load` borrows it); the options' buffers live in `opts`
    // until the call returns.
    let rc = unsafe {
        sys::cuModuleLoadDataEx(
            &mut raw,
            input.data,
            opts.keys.len() as u32,
            opts.keys.as_mut_ptr(),
            opts.values.as_mut_ptr(),
        )
    };
    jit_result(
        rc,
        || format!("the driver could not load image {name}"),
        opts,
    )?;
    Ok(raw)
}

/// A driver link in progress: destroyed when dropped, on every path
/// (after the cubin it owns was loaded, or on an error).
struct LinkState(sys::CUlinkState);

impl Drop for LinkState {
    fn drop(&mut self) {
        // SAFETY: the state was created by `cuLinkCreate` and is destroyed
        // once, here; the cubin it owned was loaded (copied) before.
        unsafe {
            sys::cuLinkDestroy(self.0);
        }
    }
}

/// Links `input` with `libcudadevrt.a` (an image that calls CUDA's device
/// runtime: dynamic parallelism) and loads the result.
fn load_with_device_runtime(
    name: &str,
    input: &Input,
    opts: &mut JitOptions,
) -> Result<sys::CUmodule, Error> {
    let devrt = ptxspec_core::toolkit::cudadevrt().map_err(|e| Error::Build {
        what: format!(
            "image {name} calls CUDA's device runtime (dynamic parallelism), which the driver must link from \
             libcudadevrt.a: {e}"
        ),
        log: String::new(),
    })?;
    let devrt_c = CString::new(devrt.display().to_string()).unwrap_or_default();
    let cname = CString::new(name).unwrap_or_default();
    let mut raw_state: sys::CUlinkState = std::ptr::null_mut();
    // SAFETY: the options' buffers live in `opts` until the call returns.
    let rc = unsafe {
        sys::cuLinkCreate_v2(
            opts.keys.len() as u32,
            opts.keys.as_mut_ptr(),
            opts.values.as_mut_ptr(),
            &mut raw_state,
        )
    };
    jit_result(rc, || "cuLinkCreate failed".to_string(), opts)?;
    let state = LinkState(raw_state);
    // SAFETY: `state` is a live link state (dropped after these calls);
    // `input.data` is the borrowed PTX or cubin of `input.len` bytes, the
    // names are NUL-terminated and outlive the calls.
    let rc = unsafe {
        sys::cuLinkAddData_v2(
            state.0,
            input.kind,
            input.data as *mut c_void,
            input.len,
            cname.as_ptr(),
            0,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        )
    };
    jit_result(
        rc,
        || format!("the driver could not compile image {name}"),
        opts,
    )?;
    // SAFETY: as above; the library's path is NUL-terminated.
    let rc = unsafe {
        sys::cuLinkAddFile_v2(
            state.0,
            CUjitInputType::CU_JIT_INPUT_LIBRARY,
            devrt_c.as_ptr(),
            0,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        )
    };
    jit_result(
        rc,
        || format!("the driver could not add {}", devrt.display()),
        opts,
    )?;
    let mut cubin: *mut c_void = std::ptr::null_mut();
    let mut size = 0usize;
    // SAFETY: as above; the cubin stays the state's until it is destroyed.
    let rc = unsafe { sys::cuLinkComplete(state.0, &mut cubin, &mut size) };
    jit_result(
        rc,
        || format!("the driver could not link image {name}"),
        opts,
    )?;
    let mut raw: sys::CUmodule = std::ptr::null_mut();
    // SAFETY: `cubin` is the state's complete cubin, alive until `state`
    // drops, after this call copied it.
    let rc = unsafe {
        sys::cuModuleLoadDataEx(
            &mut raw,
            cubin,
            0,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        )
    };
    jit_result(
        rc,
        || format!("the driver could not load image {name}"),
        opts,
    )?;
    Ok(raw)
}

/// A launch's grid, block and dynamic shared memory, as the driver takes
/// them (a `LaunchConfig`'s, in the driver layer's own words: it names no
/// type of the runtime above it).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Dims {
    pub(crate) grid: (u32, u32, u32),
    pub(crate) block: (u32, u32, u32),
    pub(crate) shared_mem_bytes: u32,
}

/// A buffer's device memory as a copy writes it: the memory, its address
/// and its length in bytes, which lie in it (a `DeviceBuffer`'s, checked
/// when the buffer was made); borrowing the memory keeps it allocated.
pub(crate) struct BufferRange<'a> {
    pub(crate) _memory: &'a cudarc::driver::CudaSlice<u8>,
    pub(crate) address: u64,
    pub(crate) bytes: usize,
}

/// Whether `ctx` (a context's driver handle, as a number) is the current
/// context of this thread: one driver call, as a launch makes it.
#[inline(always)]
pub(crate) fn is_current(ctx: usize) -> Result<bool, Error> {
    let mut current: sys::CUcontext = std::ptr::null_mut();
    // SAFETY: the driver writes one context handle (or null) to `current`.
    unsafe { sys::cuCtxGetCurrent(&mut current) }.result()?;
    Ok(current as usize == ctx)
}

/// A stream a queue launches on, with the driver's handle of it read once:
/// a launch passes the handle without reading the stream object's memory
/// (another cache line). Derefs to the stream.
pub(crate) struct LaunchStream {
    stream: Arc<CudaStream>,
    /// `stream.cu_stream()`, as a number; the stream lives while `stream`
    /// does, which this type holds.
    raw: usize,
}

impl LaunchStream {
    pub(crate) fn new(stream: Arc<CudaStream>) -> LaunchStream {
        LaunchStream {
            raw: stream.cu_stream() as usize,
            stream,
        }
    }
}

impl std::ops::Deref for LaunchStream {
    type Target = Arc<CudaStream>;

    fn deref(&self) -> &Arc<CudaStream> {
        &self.stream
    }
}

/// Launches `function` on `stream` with `params`, the parameters a launch
/// layout placed for the function's kernel (`LaunchLayout::place`, with the
/// layout made from the kernel's signature).
#[inline(always)]
pub(crate) fn launch(
    function: &Function,
    dims: Dims,
    stream: &LaunchStream,
    params: &mut LaunchParams<'_>,
) -> Result<(), Error> {
    // SAFETY: `params` holds one pointer per kernel parameter to a value of
    // the parameter's size, alive while `params` is (its lifetime borrows
    // them), which the driver copies before returning. `function` owns its
    // module, so the code stays loaded at least until the call returns; its
    // owners keep it loaded until the stream ran the launch (see `Module`).
    // `stream.raw` is the handle of the stream `stream` holds.
    unsafe {
        cudarc::driver::result::launch_kernel(
            function.raw.0,
            dims.grid,
            dims.block,
            dims.shared_mem_bytes,
            stream.raw as cudarc::driver::sys::CUstream,
            params.pointers(),
        )?;
    }
    Ok(())
}

/// Whether `stream` is capturing: its own capture, or another stream's
/// that it joined by waiting for an event recorded there.
/// A new context object of device `ordinal` (its primary context) and a new
/// stream in it — without the context-wide `cuCtxSynchronize` that cudarc's
/// `new_stream` makes when a context object gets its first stream. CUDA
/// forbids that call while any thread captures a stream in global mode, and
/// the driver has crashed the process on it then (SIGSEGV inside
/// `cuCtxSynchronize`, a queue made beside another thread's global capture).
/// cudarc synchronizes there so that slices made before the first stream
/// are safe to use from it; this context object is new and shared with
/// nobody, so it has no slice to make safe.
pub(crate) fn context_with_stream(
    ordinal: usize,
) -> Result<(Arc<cudarc::driver::CudaContext>, Arc<CudaStream>), Error> {
    let ctx = cudarc::driver::CudaContext::new(ordinal)?;
    ptxspec_core::toolkit::exit::driver_used(
        ptxspec_core::toolkit::exit::DriverMoment::ContextMade,
    );
    // SAFETY: turning cudarc's event tracking off and on again changes how
    // the slices made in between track their uses; `ctx` was made just now
    // and is not shared, so no slice is made in between.
    unsafe { ctx.disable_event_tracking() };
    let stream = ctx.new_stream();
    // SAFETY: as above.
    unsafe { ctx.enable_event_tracking() };
    Ok((ctx, stream?))
}

pub(crate) fn is_capturing(stream: &CudaStream) -> Result<bool, Error> {
    let mut status = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    // SAFETY: a live stream (borrowed); the out-pointer is to a local of the
    // type the call writes.
    unsafe { sys::cuStreamIsCapturing(stream.cu_stream(), &mut status).result()? };
    Ok(status != sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE)
}

/// Starts a relaxed-mode capture of `stream` (its context bound by the
/// caller).
pub(crate) fn begin_capture(stream: &CudaStream) -> Result<(), Error> {
    // SAFETY: a live stream (borrowed).
    unsafe {
        cudarc::driver::result::stream::begin_capture(
            stream.cu_stream(),
            sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED,
        )?;
    }
    Ok(())
}

/// A graph a capture made, destroyed when dropped unless instantiated.
pub(crate) struct CapturedGraph(GraphHandle);

struct GraphHandle(sys::CUgraph);
// SAFETY: an identifier of a driver-owned graph, which any thread may use
// with its context current; its owner destroys it once.
unsafe impl Send for GraphHandle {}

/// Ends the capture of `stream` (its context bound by the caller): the
/// graph it made, or `None` where the driver made none.
pub(crate) fn end_capture(stream: &CudaStream) -> Result<Option<CapturedGraph>, Error> {
    // SAFETY: a live stream (borrowed); the graph returned is owned by the
    // `CapturedGraph`, which destroys it once.
    let graph = unsafe { cudarc::driver::result::stream::end_capture(stream.cu_stream())? };
    Ok((!graph.is_null()).then_some(CapturedGraph(GraphHandle(graph))))
}

impl CapturedGraph {
    /// The graph's nodes.
    pub(crate) fn nodes(&self) -> Result<Vec<NodeHandle>, Error> {
        let mut count = 0usize;
        // SAFETY: a live graph; a null array asks for the count alone.
        unsafe {
            sys::cuGraphGetNodes(self.0.0, std::ptr::null_mut(), &mut count).result()?;
        }
        if count == 0 {
            return Ok(Vec::new());
        }
        let mut nodes: Vec<sys::CUgraphNode> = vec![std::ptr::null_mut(); count];
        // SAFETY: room for `count` handles, which the call fills (at most
        // that many, the count it writes back).
        unsafe {
            sys::cuGraphGetNodes(self.0.0, nodes.as_mut_ptr(), &mut count).result()?;
        }
        nodes.truncate(count);
        Ok(nodes.into_iter().map(NodeHandle).collect())
    }

    /// The executable graph (which then owns the graph).
    pub(crate) fn instantiate(self) -> Result<Exec, Error> {
        // SAFETY: a live graph, instantiated once; on failure `self` still
        // owns (and destroys) it.
        let exec = unsafe {
            cudarc::driver::result::graph::instantiate(self.0.0, sys::CUgraphInstantiate_flags(0))?
        };
        // The graph is the `Exec`'s now: not destroyed here.
        let this = std::mem::ManuallyDrop::new(self);
        Ok(Exec {
            graph: GraphHandle(this.0.0),
            exec: ExecHandle(exec),
        })
    }
}

impl CapturedGraph {
    /// The graph owned as an [`Exec`] with no executable graph yet: its
    /// owner sets its nodes and then instantiates it
    /// ([`Exec::instantiate_again`]); a replay before that is an error,
    /// not a launch.
    pub(crate) fn uninstantiated(self) -> Exec {
        // The graph is the `Exec`'s now: not destroyed here.
        let this = std::mem::ManuallyDrop::new(self);
        Exec {
            graph: GraphHandle(this.0.0),
            exec: ExecHandle(std::ptr::null_mut()),
        }
    }
}

impl Drop for CapturedGraph {
    fn drop(&mut self) {
        if !self.0.0.is_null() {
            // SAFETY: a graph this value owns, destroyed once.
            unsafe {
                let _ = cudarc::driver::result::graph::destroy(self.0.0);
            }
        }
    }
}

/// A graph node's handle: an identifier, compared, never dereferenced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct NodeHandle(sys::CUgraphNode);
// SAFETY: an identifier of a node of a driver-owned graph; used only
// through the graph that owns the node.
unsafe impl Send for NodeHandle {}
// SAFETY: as above.
unsafe impl Sync for NodeHandle {}

/// The kernel node a launch just added to `stream`'s capture: the one node
/// the stream's next work depends on. `Err` with the capture's status and
/// dependency count where that is not one node of an active capture.
pub(crate) fn last_captured_node(
    stream: &CudaStream,
) -> Result<Result<NodeHandle, (sys::CUstreamCaptureStatus, usize)>, Error> {
    let mut status = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    let mut id = 0u64;
    let mut graph: sys::CUgraph = std::ptr::null_mut();
    let mut deps: *const sys::CUgraphNode = std::ptr::null();
    let mut count = 0usize;
    // SAFETY: a live stream; every out-pointer is to a local of the type
    // the call writes.
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
        return Ok(Err((status, count)));
    }
    // SAFETY: the driver returned `count` (1) nodes at `deps`, valid until
    // the next call on the stream; the handle is copied out.
    Ok(Ok(NodeHandle(unsafe { *deps })))
}

/// An instantiated graph and the graph it was made of, destroyed together.
pub(crate) struct Exec {
    graph: GraphHandle,
    exec: ExecHandle,
}

struct ExecHandle(sys::CUgraphExec);
// SAFETY: an identifier of a driver-owned executable graph, which any
// thread may launch or update with its context current; `Exec` destroys it
// once.
unsafe impl Send for ExecHandle {}

impl Drop for Exec {
    fn drop(&mut self) {
        self.destroy_exec();
        // SAFETY: the graph this value owns, destroyed once, after its
        // executable graph. The owner (a `Graph`) waited for its replays
        // first.
        unsafe {
            let _ = cudarc::driver::result::graph::destroy(self.graph.0);
        }
    }
}

impl Exec {
    /// Whether it holds an executable graph (an instantiation that failed
    /// after destroying the last one leaves none).
    pub(crate) fn instantiated(&self) -> bool {
        !self.exec.0.is_null()
    }
}

/// Replays `exec` on `stream`. The caller keeps what its nodes use (code,
/// memory) until the replay ran.
pub(crate) fn graph_launch(exec: &Exec, stream: &CudaStream) -> Result<(), Error> {
    if exec.exec.0.is_null() {
        return Err(Error::Internal(
            "a graph whose instantiation failed is replayed (its update returned the error)",
        ));
    }
    // SAFETY: a live executable graph (not null: checked) and stream
    // (borrowed).
    unsafe {
        cudarc::driver::result::graph::launch(exec.exec.0, stream.cu_stream())?;
    }
    Ok(())
}

/// A kernel node's parameters: `function` launched with `dims` and
/// `params` (a launch layout's, placed for the function's kernel).
fn kernel_node_params(
    function: &Function,
    dims: Dims,
    params: &mut LaunchParams<'_>,
) -> sys::CUDA_KERNEL_NODE_PARAMS {
    let (grid, block) = (dims.grid, dims.block);
    sys::CUDA_KERNEL_NODE_PARAMS {
        func: function.raw.0,
        gridDimX: grid.0,
        gridDimY: grid.1,
        gridDimZ: grid.2,
        blockDimX: block.0,
        blockDimY: block.1,
        blockDimZ: block.2,
        sharedMemBytes: dims.shared_mem_bytes,
        kernelParams: params.pointers().as_mut_ptr(),
        extra: std::ptr::null_mut(),
        kern: std::ptr::null_mut(),
        ctx: std::ptr::null_mut(),
    }
}

/// Sets kernel node `node` of `exec` to launch `function` with `params` (a
/// launch layout's, placed for the function's kernel). Where the
/// executable graph is gone (its instantiation failed), nothing.
pub(crate) fn set_kernel_node_params(
    exec: &mut Exec,
    node: NodeHandle,
    function: &Function,
    dims: Dims,
    params: &mut LaunchParams<'_>,
) -> Result<(), Error> {
    if exec.exec.0.is_null() {
        return Ok(());
    }
    let p = kernel_node_params(function, dims, params);
    // SAFETY: a node of this executable graph (the caller's), which is
    // live (not null); `params` holds one pointer per kernel parameter to
    // a value of its size, read by the call, which copies them; the
    // function owns its module, which its owner keeps while the node may
    // run it.
    unsafe {
        sys::cuGraphExecKernelNodeSetParams_v2(exec.exec.0, node.0, &p).result()?;
    }
    Ok(())
}

/// Sets kernel node `node` of the graph `exec` was made of (which its
/// next instantiation copies, [`Exec::instantiate_again`]) as
/// [`set_kernel_node_params`] sets the executable graph's.
pub(crate) fn set_graph_kernel_node_params(
    _exec: &Exec,
    node: NodeHandle,
    function: &Function,
    dims: Dims,
    params: &mut LaunchParams<'_>,
) -> Result<(), Error> {
    let p = kernel_node_params(function, dims, params);
    // SAFETY: a node of the live graph `exec` owns (borrowed: it outlives
    // the call); the parameters as for the executable graph, copied by the
    // call.
    unsafe {
        sys::cuGraphKernelNodeSetParams_v2(node.0, &p).result()?;
    }
    Ok(())
}

impl Exec {
    /// Instantiates its graph again — with each node's code and
    /// parameters as last set — in place of the executable graph, which
    /// the driver frees once its replays in flight have run. A graph with
    /// memory nodes (cuBLAS's stream-ordered workspace) may have one
    /// executable graph at a time: then `wait` (for its replays) runs
    /// first and the old one goes before the new is made; where that
    /// fails, the graph has none and its replays are errors.
    pub(crate) fn instantiate_again(
        &mut self,
        wait: impl FnOnce() -> Result<(), Error>,
    ) -> Result<(), Error> {
        let instantiate = |graph: &GraphHandle| {
            // SAFETY: a live graph (this value's own), instantiated into
            // an executable graph that this value then owns.
            unsafe {
                cudarc::driver::result::graph::instantiate(
                    graph.0,
                    sys::CUgraphInstantiate_flags(0),
                )
            }
        };
        let fresh = match instantiate(&self.graph) {
            Ok(fresh) => fresh,
            Err(e) if e.0 == sys::cudaError_enum::CUDA_ERROR_NOT_SUPPORTED => {
                wait()?;
                self.destroy_exec();
                instantiate(&self.graph)?
            }
            Err(e) => return Err(e.into()),
        };
        self.destroy_exec();
        self.exec = ExecHandle(fresh);
        Ok(())
    }

    /// Destroys the executable graph (the driver frees one in flight once
    /// it completes), leaving none.
    fn destroy_exec(&mut self) {
        let old = std::mem::replace(&mut self.exec, ExecHandle(std::ptr::null_mut()));
        if !old.0.is_null() {
            // SAFETY: the executable graph this value owned, destroyed once
            // (its nodes' code and memory stay with the owner `Graph` until
            // its replays have run).
            unsafe {
                let _ = cudarc::driver::result::graph::exec_destroy(old.0);
            }
        }
    }
}

/// Device memory ptxspec allocates for itself (a graph's values), freed
/// once when dropped: its owner waits for the work that uses it first.
pub(crate) struct DeviceAllocation {
    address: u64,
    bytes: usize,
}

impl DeviceAllocation {
    /// `bytes` of device memory in the current context (bound by the
    /// caller).
    pub(crate) fn new(bytes: usize) -> Result<Self, Error> {
        // SAFETY: a plain allocation; freed once, in `drop`.
        let address = unsafe { cudarc::driver::result::malloc_sync(bytes)? };
        Ok(DeviceAllocation { address, bytes })
    }

    pub(crate) fn address(&self) -> u64 {
        self.address
    }

    /// Copies `data` to `offset` on `stream`; a range past the end is an
    /// error.
    pub(crate) fn write_async(
        &self,
        offset: usize,
        data: &[u8],
        stream: &CudaStream,
    ) -> Result<(), Error> {
        if offset
            .checked_add(data.len())
            .is_none_or(|end| end > self.bytes)
        {
            return Err(Error::Internal(
                "a copy past the end of a device allocation",
            ));
        }
        // SAFETY: the range lies in this allocation (checked), which lives
        // until its owner dropped it after the work on `stream`; a copy from
        // pageable memory is staged before the call returns.
        unsafe {
            cudarc::driver::result::memcpy_htod_async(
                self.address + offset as u64,
                data,
                stream.cu_stream(),
            )?;
        }
        Ok(())
    }
}

impl Drop for DeviceAllocation {
    fn drop(&mut self) {
        // SAFETY: allocated by `new`, freed once.
        unsafe {
            let _ = cudarc::driver::result::free_sync(self.address);
        }
    }
}

/// Copies `data` into `buf` from byte `offset` on, on `stream` (the
/// context bound by the caller); a range past the buffer's end is an error.
pub(crate) fn copy_into_buffer(
    buf: BufferRange<'_>,
    offset: usize,
    data: &[u8],
    stream: &CudaStream,
) -> Result<(), Error> {
    if offset
        .checked_add(data.len())
        .is_none_or(|end| end > buf.bytes)
    {
        return Err(Error::Internal("a copy past the end of a device buffer"));
    }
    // SAFETY: the range lies in `buf`'s memory (checked: its address and
    // byte length are its slice's, `DeviceBuffer::new`), which `buf` keeps
    // allocated while borrowed and frees on its home stream, which the
    // caller orders after this copy (`memory::Use`); a copy from pageable
    // memory is staged before the call returns, so `data` need not outlive
    // it.
    unsafe {
        cudarc::driver::result::memcpy_htod_async(
            buf.address + offset as u64,
            data,
            stream.cu_stream(),
        )?;
    }
    Ok(())
}

/// Sets every byte of `buf` to `byte`, on `stream` (ordered as
/// [`copy_into_buffer`]).
pub(crate) fn fill_buffer(
    buf: BufferRange<'_>,
    byte: u8,
    stream: &CudaStream,
) -> Result<(), Error> {
    // SAFETY: the buffer's whole range, kept allocated and ordered before
    // its free as `copy_into_buffer` says.
    unsafe {
        cudarc::driver::result::memset_d8_async(buf.address, byte, buf.bytes, stream.cu_stream())?;
    }
    Ok(())
}

/// The driver's errors as ptxspec's own ([`crate::error::CudaError`]): here,
/// beside the calls that make them, so that the error module below calls
/// nothing of the runtime.
impl From<cudarc::driver::DriverError> for Error {
    fn from(e: cudarc::driver::DriverError) -> Self {
        // The status's name from its type (no driver call); its words
        // from the driver, which a DriverError shows is loaded.
        let name = format!("{:?}", e.0);
        let message = if driver_available() {
            e.error_string()
                .map(|m| m.to_string_lossy().into_owned())
                .unwrap_or_default()
        } else {
            String::new()
        };
        Error::Cuda(crate::error::CudaError {
            status: e.0 as u32,
            name,
            message,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Loads off the launch path from several threads: one at a time, each
    /// starting at least the gap after the last one ended (a loaded machine
    /// only lengthens the gaps).
    #[test]
    fn background_loads_are_paced() {
        let spans = Mutex::new(Vec::new());
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    let load = one_background_load();
                    let started = std::time::Instant::now();
                    std::thread::sleep(std::time::Duration::from_millis(2));
                    let ended = std::time::Instant::now();
                    spans.lock().unwrap().push((started, ended));
                    drop(load);
                });
            }
        });
        let mut spans = spans.into_inner().unwrap();
        spans.sort();
        for pair in spans.windows(2) {
            let (_, ended) = pair[0];
            let (started, _) = pair[1];
            assert!(
                started.duration_since(ended) >= BACKGROUND_LOAD_GAP,
                "a load began {:?} after the last ended",
                started.duration_since(ended)
            );
        }
    }
}
