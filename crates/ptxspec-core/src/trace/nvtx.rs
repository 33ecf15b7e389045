//! The trace's spans and instants as NVTX ranges and marks, so that Nsight
//! Systems (or any NVTX tool) shows ptxspec's links, look-ups and waits on
//! the timeline beside the kernels — without linking or shipping any NVIDIA
//! library.
//!
//! NVTX is a protocol more than a library: a tool that profiles a process
//! names its *injection library* in `NVTX_INJECTION64_PATH`. On the first
//! range the process loads it and calls its `InitializeInjectionNvtx2` with
//! a function that hands out the process's *export tables*; through them
//! the tool writes its handlers into the process's slots of NVTX's core
//! module (`RangeStartA`, `RangeEnd`, `MarkA`, ...). This module is that
//! process side, as NVIDIA's header-only NVTX v3 implements it in C: slots
//! for every module, of the sizes the protocol fixes, and the two export
//! tables (callbacks, version). Without the variable nothing is loaded and
//! a range costs one atomic load; with a library that cannot be loaded or
//! refuses, NVTX is off for the process (said once).
//!
//! The variable is the tool's, like `LD_PRELOAD`: whoever sets a process's
//! environment already chooses its code.

use std::ffi::{CString, c_char, c_int, c_uint, c_void};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The variable a tool names its injection library in (64-bit processes).
pub const INJECTION_VARIABLE: &str = "NVTX_INJECTION64_PATH";

/// `NvtxExportTableID`: the tables a tool may ask for.
const ETID_CALLBACKS: u32 = 1;
const ETID_VERSIONINFO: u32 = 3;
/// The NVTX version this side speaks (v3's export tables).
const NVTX_VERSION: u32 = 3;

/// `NvtxCallbackModule`, from 1: each module's number of slots
/// (`NVTX_CBID_<MODULE>_SIZE`, slot 0 unused) — core, CUDA, OpenCL, CUDA
/// runtime, core 2 (domains), sync. A tool may ask for any of them, and
/// writes only within the size it is told.
const MODULE_SIZES: [usize; 6] = [16, 9, 15, 7, 16, 7];
/// `NVTX_CBID_CORE_*`: the core module's slots this side calls.
const CORE_MARK_A: usize = 2;
const CORE_RANGE_START_A: usize = 5;
const CORE_RANGE_END: usize = 7;

/// `NvtxExportTableCallbacks`.
#[repr(C)]
struct CallbacksTable {
    struct_size: usize,
    get_module_function_table: unsafe extern "C" fn(
        module: c_int,
        out_table: *mut *mut *mut usize,
        out_size: *mut c_uint,
    ) -> c_int,
}

/// `NvtxExportTableVersionInfo`.
#[repr(C)]
struct VersionTable {
    struct_size: usize,
    version: u32,
    reserved0: u32,
    set_injection_nvtx_version: unsafe extern "C" fn(version: u32),
}

static CALLBACKS: CallbacksTable = CallbacksTable {
    struct_size: std::mem::size_of::<CallbacksTable>(),
    get_module_function_table,
};

static VERSION: VersionTable = VersionTable {
    struct_size: std::mem::size_of::<VersionTable>(),
    version: NVTX_VERSION,
    reserved0: 0,
    set_injection_nvtx_version,
};

/// A module's slots and the table of pointers to them that a tool writes
/// through (`NvtxFunctionTable`: slot 0 unused, and one null past the end
/// so that a tool reading too far stops at it).
struct Module {
    slots: Box<[AtomicUsize]>,
    table: Box<[*mut usize]>,
}

/// Every module's slots, made once and never freed (a tool keeps the
/// tables' addresses).
struct Modules(Vec<Module>);

// SAFETY: the tables hold addresses of the slots, which are atomics; the
// raw pointers are only handed to the tool, never dereferenced here.
unsafe impl Sync for Modules {}
// SAFETY: as above: nothing here dereferences the tables' pointers.
unsafe impl Send for Modules {}

static MODULES: OnceLock<Modules> = OnceLock::new();

fn modules() -> &'static Modules {
    MODULES.get_or_init(|| {
        Modules(
            MODULE_SIZES
                .iter()
                .map(|&size| {
                    let slots: Box<[AtomicUsize]> =
                        (0..size).map(|_| AtomicUsize::new(0)).collect();
                    let mut table: Box<[*mut usize]> = slots
                        .iter()
                        .map(|s| s.as_ptr())
                        .chain(std::iter::once(std::ptr::null_mut()))
                        .collect();
                    table[0] = std::ptr::null_mut();
                    Module { slots, table }
                })
                .collect(),
        )
    })
}

/// `GetModuleFunctionTable`: the tool asks for a module's table and size.
unsafe extern "C" fn get_module_function_table(
    module: c_int,
    out_table: *mut *mut *mut usize,
    out_size: *mut c_uint,
) -> c_int {
    let Some(m) = usize::try_from(module)
        .ok()
        .and_then(|i| i.checked_sub(1))
        .and_then(|i| modules().0.get(i))
    else {
        return 0;
    };
    if !out_size.is_null() {
        // SAFETY: the tool passes a valid pointer or null (checked).
        unsafe { *out_size = m.slots.len() as c_uint };
    }
    if !out_table.is_null() {
        // SAFETY: as above. The table lives for the process (`MODULES`).
        unsafe { *out_table = m.table.as_ptr().cast_mut() };
    }
    1
}

/// `SetInjectionNvtxVersion`: reserved; nothing to do.
unsafe extern "C" fn set_injection_nvtx_version(_version: u32) {}

/// `nvtxGetExportTable`: the export tables by their number.
unsafe extern "C" fn get_export_table(id: u32) -> *const c_void {
    match id {
        ETID_CALLBACKS => (&raw const CALLBACKS).cast(),
        ETID_VERSIONINFO => (&raw const VERSION).cast(),
        _ => std::ptr::null(),
    }
}

/// The tool's handlers this side calls, read once after its initialization.
#[derive(Clone, Copy)]
struct Handlers {
    range_start: Option<unsafe extern "C" fn(*const c_char) -> u64>,
    range_end: Option<unsafe extern "C" fn(u64)>,
    mark: Option<unsafe extern "C" fn(*const c_char)>,
}

/// The process's NVTX: `None` where no tool injects (or it failed).
static HANDLERS: OnceLock<Option<Handlers>> = OnceLock::new();

fn handlers() -> Option<&'static Handlers> {
    HANDLERS.get_or_init(inject).as_ref()
}

/// Loads the injection library the environment names and lets it fill the
/// slots; its handlers, or `None` (said once where a library was named).
fn inject() -> Option<Handlers> {
    let path = std::env::var_os(INJECTION_VARIABLE)?;
    let off = |why: String| {
        crate::notice::once(format!(
            "NVTX: {} ({INJECTION_VARIABLE}): {why}; no NVTX ranges",
            std::path::Path::new(&path).display()
        ));
        None
    };
    // SAFETY: loading runs the library's initializers: the library is the
    // profiling tool's, named by the process's environment (see the
    // module's docs); it stays loaded for the process (its handlers are
    // called until exit).
    let library = match unsafe { libloading::Library::new(&path) } {
        Ok(l) => l,
        Err(e) => return off(e.to_string()),
    };
    type Initialize = unsafe extern "C" fn(unsafe extern "C" fn(u32) -> *const c_void) -> c_int;
    // SAFETY: NVTX's injection entry point has this signature.
    let initialize = match unsafe { library.get::<Initialize>(b"InitializeInjectionNvtx2\0") } {
        Ok(f) => *f,
        Err(e) => return off(e.to_string()),
    };
    std::mem::forget(library);
    modules();
    // SAFETY: the tool's entry point, given the export-table function; it
    // writes function pointers into the slots through the tables.
    if unsafe { initialize(get_export_table) } == 0 {
        return off("its InitializeInjectionNvtx2 refused".into());
    }
    let core = &modules().0[0].slots;
    let slot = |i: usize| core[i].load(Ordering::Acquire);
    let (start, end, mark) = (
        slot(CORE_RANGE_START_A),
        slot(CORE_RANGE_END),
        slot(CORE_MARK_A),
    );
    Some(Handlers {
        range_start: (start != 0).then(|| {
            // SAFETY: a non-zero RangeStartA slot holds the tool's handler
            // of that signature, written by its initialization above.
            unsafe {
                std::mem::transmute::<usize, unsafe extern "C" fn(*const c_char) -> u64>(start)
            }
        }),
        range_end: (end != 0).then(|| {
            // SAFETY: as above, the tool's RangeEnd handler.
            unsafe { std::mem::transmute::<usize, unsafe extern "C" fn(u64)>(end) }
        }),
        mark: (mark != 0).then(|| {
            // SAFETY: as above, the tool's MarkA handler.
            unsafe { std::mem::transmute::<usize, unsafe extern "C" fn(*const c_char)>(mark) }
        }),
    })
}

/// A C string of `text` (a NUL inside cut there).
fn c_text(text: &str) -> CString {
    let text = text.split('\0').next().unwrap_or_default();
    CString::new(text).unwrap_or_default()
}

/// Starts an NVTX range named `name` where a tool injects: its id, to end.
pub(crate) fn range_start(name: &str) -> Option<u64> {
    let start = handlers()?.range_start?;
    let name = c_text(&format!("ptxspec: {name}"));
    // SAFETY: the tool's RangeStartA handler, given a NUL-terminated string
    // that outlives the call.
    Some(unsafe { start(name.as_ptr()) })
}

/// Ends the range `id` that [`range_start`] started.
pub(crate) fn range_end(id: u64) {
    if let Some(end) = handlers().and_then(|h| h.range_end) {
        // SAFETY: the tool's RangeEnd handler, given an id it returned.
        unsafe { end(id) }
    }
}

/// Marks an instant named `name` where a tool injects.
pub(crate) fn mark(name: &str) {
    if let Some(mark) = handlers().and_then(|h| h.mark) {
        let name = c_text(&format!("ptxspec: {name}"));
        // SAFETY: the tool's MarkA handler, given a NUL-terminated string
        // that outlives the call.
        unsafe { mark(name.as_ptr()) }
    }
}
