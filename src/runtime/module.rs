//! Loading a built image's code into a CUDA context: PTX through the
//! driver's JIT, cubins as they are, and — for images that call CUDA's
//! device runtime — through the driver's linker with `libcudadevrt.a`.
//! The JIT's info and error logs go to the bundle's build log; a rejected
//! image is [`Error::Build`] carrying the error log.

use std::collections::HashMap;
use std::ffi::{CString, c_void};
use std::sync::{Arc, Mutex};

use cudarc::driver::sys::{self, CUjit_option, CUjitInputType};

use crate::error::Error;

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
    functions: Mutex<HashMap<String, sys::CUfunction>>,
}

/// The driver's handle of a loaded module.
struct ModuleHandle(sys::CUmodule);

// SAFETY: the driver API lets any thread use a module handle (with its
// context current); the handle is only an identifier, the driver keeps the
// module. `Module` unloads it once, in `drop`.
unsafe impl Send for ModuleHandle {}
// SAFETY: as above; `Module` only reads the handle after loading it.
unsafe impl Sync for ModuleHandle {}

// SAFETY: the functions' handles are identifiers of driver-owned state of
// the module, which any thread may launch (with its context current); the
// map itself is behind its mutex.
unsafe impl Send for Module {}
// SAFETY: as above.
unsafe impl Sync for Module {}

/// A kernel of a loaded module, owning the module (as cudarc's
/// `CudaFunction` does): while a `Function` exists its module stays loaded,
/// so a plan, graph node or tier that holds one can always launch it.
#[derive(Clone)]
pub(crate) struct Function {
    raw: sys::CUfunction,
    /// Owned, never read: what keeps `raw` valid.
    _module: Arc<Module>,
}

// SAFETY: the handle is an identifier of driver-owned state that any thread
// may launch with the module's context current; the module it belongs to
// is kept loaded by the `Arc` beside it.
unsafe impl Send for Function {}
// SAFETY: as above: never dereferenced by ptxspec.
unsafe impl Sync for Function {}

impl Function {
    /// The driver's handle, valid while `self` lives (it owns the module).
    pub(crate) fn raw(&self) -> sys::CUfunction {
        self.raw
    }
}

impl Drop for Module {
    fn drop(&mut self) {
        // SAFETY: a module loaded by `load`, unloaded once, when the last of
        // its owners lets it go — which happens after the kernels launched
        // from it ran: a queue hands what it lets go of to `Queue::retire`,
        // which drops it once an event recorded after its launches has
        // completed; a graph waits for its stream (where it replays) before
        // it drops its modules; the loader thread drops only modules whose
        // waiter went before launching anything from them.
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
        functions.insert(name.to_string(), f);
        Ok(Function {
            raw: f,
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

fn driver_error(what: &str, rc: sys::CUresult, log: &JitOptions) -> Error {
    Error::Build {
        what: format!("{what} ({rc:?})"),
        log: JitOptions::text(&log.error),
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
    let mut opts = JitOptions::new(debug);
    let ptx_c;
    let (data, len, input) = match bytes {
        Bytes::Ptx(p) => {
            ptx_c = CString::new(p).map_err(|_| Error::BadImage {
                image: name.to_string(),
                what: "PTX with a NUL byte".into(),
            })?;
            (
                ptx_c.as_ptr() as *const c_void,
                p.len() + 1,
                CUjitInputType::CU_JIT_INPUT_PTX,
            )
        }
        Bytes::Cubin(c) => (
            c.as_ptr() as *const c_void,
            c.len(),
            CUjitInputType::CU_JIT_INPUT_CUBIN,
        ),
    };
    let mut raw: sys::CUmodule = std::ptr::null_mut();
    if !device_runtime {
        // SAFETY: `data` is a NUL-terminated PTX or a cubin; the options'
        // buffers live in `opts` until the call returns.
        let rc = unsafe {
            sys::cuModuleLoadDataEx(
                &mut raw,
                data,
                opts.keys.len() as u32,
                opts.keys.as_mut_ptr(),
                opts.values.as_mut_ptr(),
            )
        };
        if rc != sys::CUresult::CUDA_SUCCESS {
            return Err(driver_error(
                &format!("the driver could not load image {name}"),
                rc,
                &opts,
            ));
        }
        return Ok((
            Module {
                raw: ModuleHandle(raw),
                functions: Mutex::default(),
            },
            JitOptions::text(&opts.info),
        ));
    }
    let devrt = crate::toolkit::cudadevrt().map_err(|e| Error::Build {
        what: format!(
            "image {name} calls CUDA's device runtime (dynamic parallelism), which the driver must link from \
             libcudadevrt.a: {e}"
        ),
        log: String::new(),
    })?;
    let devrt_c = CString::new(devrt.display().to_string()).unwrap_or_default();
    let cname = CString::new(name).unwrap_or_default();
    let mut state: sys::CUlinkState = std::ptr::null_mut();
    // SAFETY: options as above; the link state is destroyed below on every
    // path, after the cubin it owns was loaded.
    unsafe {
        let rc = sys::cuLinkCreate_v2(
            opts.keys.len() as u32,
            opts.keys.as_mut_ptr(),
            opts.values.as_mut_ptr(),
            &mut state,
        );
        if rc != sys::CUresult::CUDA_SUCCESS {
            return Err(driver_error("cuLinkCreate failed", rc, &opts));
        }
        let result = (|| {
            let rc = sys::cuLinkAddData_v2(
                state,
                input,
                data as *mut c_void,
                len,
                cname.as_ptr(),
                0,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            );
            if rc != sys::CUresult::CUDA_SUCCESS {
                return Err(driver_error(
                    &format!("the driver could not compile image {name}"),
                    rc,
                    &opts,
                ));
            }
            let rc = sys::cuLinkAddFile_v2(
                state,
                CUjitInputType::CU_JIT_INPUT_LIBRARY,
                devrt_c.as_ptr(),
                0,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            );
            if rc != sys::CUresult::CUDA_SUCCESS {
                return Err(driver_error(
                    &format!("the driver could not add {}", devrt.display()),
                    rc,
                    &opts,
                ));
            }
            let mut cubin: *mut c_void = std::ptr::null_mut();
            let mut size = 0usize;
            let rc = sys::cuLinkComplete(state, &mut cubin, &mut size);
            if rc != sys::CUresult::CUDA_SUCCESS {
                return Err(driver_error(
                    &format!("the driver could not link image {name}"),
                    rc,
                    &opts,
                ));
            }
            let rc = sys::cuModuleLoadDataEx(
                &mut raw,
                cubin,
                0,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            );
            if rc != sys::CUresult::CUDA_SUCCESS {
                return Err(driver_error(
                    &format!("the driver could not load image {name}"),
                    rc,
                    &opts,
                ));
            }
            Ok(())
        })();
        sys::cuLinkDestroy(state);
        result?;
    }
    Ok((
        Module {
            raw: ModuleHandle(raw),
            functions: Mutex::default(),
        },
        JitOptions::text(&opts.info),
    ))
}
