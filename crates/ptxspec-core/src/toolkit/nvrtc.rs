//! NVRTC: CUDA C++ to PTX, LTO-IR or a cubin.

use std::ffi::{CString, c_char, c_int};

use super::{CStrings, Lib, Owned, ToolkitError, load, read_sized, text_of};

type Prog = *mut std::ffi::c_void;

/// What to ask NVRTC for besides the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Output {
    /// PTX text (`-arch=compute_XX`).
    Ptx,
    /// LTO-IR for nvJitLink (`-dlto`).
    LtoIr,
    /// A cubin (`-arch=sm_XX`).
    Cubin,
}

/// A compiled translation unit.
#[derive(Clone, Debug)]
pub struct Compiled {
    /// PTX text, LTO-IR or cubin bytes, as asked.
    pub code: Vec<u8>,
    /// Warnings NVRTC printed (empty when none).
    pub log: String,
}

/// NVRTC's version, `(major, minor)`.
pub fn version() -> Result<(i32, i32), ToolkitError> {
    let lib = load(Lib::Nvrtc)?;
    // SAFETY: nvrtcVersion(int*, int*) -> nvrtcResult.
    let f: unsafe extern "C" fn(*mut c_int, *mut c_int) -> c_int =
        unsafe { lib.get("nvrtcVersion")? };
    let (mut a, mut b) = (0, 0);
    // SAFETY: two valid out-pointers.
    let rc = unsafe { f(&mut a, &mut b) };
    if rc != 0 {
        return Err(failed("nvrtcVersion", rc, String::new()));
    }
    Ok((a, b))
}

fn failed(function: &'static str, rc: c_int, log: String) -> ToolkitError {
    ToolkitError::Failed {
        library: "NVRTC",
        function,
        code: error_string(rc),
        log,
    }
}

fn error_string(rc: c_int) -> String {
    let name = load(Lib::Nvrtc).ok().and_then(|lib| {
        // SAFETY: nvrtcGetErrorString(nvrtcResult) -> const char* (static).
        let f: unsafe extern "C" fn(c_int) -> *const c_char =
            unsafe { lib.get("nvrtcGetErrorString").ok()? };
        // SAFETY: NVRTC returns a static NUL-terminated string.
        let p = unsafe { f(rc) };
        (!p.is_null()).then(|| {
            unsafe { std::ffi::CStr::from_ptr(p) }
                .to_string_lossy()
                .into_owned()
        })
    });
    name.unwrap_or_else(|| format!("error {rc}"))
}

/// Compiles `source` (named `name` in messages) with `options`; a failed
/// compilation is [`ToolkitError::Failed`] with NVRTC's log.
pub fn compile(
    source: &str,
    name: &str,
    options: &[String],
    output: Output,
) -> Result<Compiled, ToolkitError> {
    let lib = load(Lib::Nvrtc)?;
    // SAFETY (all `get`s): the signatures are NVRTC 12's, from nvrtc.h.
    type Create = unsafe extern "C" fn(
        *mut Prog,
        *const c_char,
        *const c_char,
        c_int,
        *const *const c_char,
        *const *const c_char,
    ) -> c_int;
    type CompileFn = unsafe extern "C" fn(Prog, c_int, *const *const c_char) -> c_int;
    type Size = unsafe extern "C" fn(Prog, *mut usize) -> c_int;
    type Fill = unsafe extern "C" fn(Prog, *mut c_char) -> c_int;
    type Destroy = unsafe extern "C" fn(*mut Prog) -> c_int;
    let create: Create = unsafe { lib.get("nvrtcCreateProgram")? };
    let compile_fn: CompileFn = unsafe { lib.get("nvrtcCompileProgram")? };
    let log_size: Size = unsafe { lib.get("nvrtcGetProgramLogSize")? };
    let log_fill: Fill = unsafe { lib.get("nvrtcGetProgramLog")? };
    let destroy: Destroy = unsafe { lib.get("nvrtcDestroyProgram")? };
    let (size_name, fill_name) = match output {
        Output::Ptx => ("nvrtcGetPTXSize", "nvrtcGetPTX"),
        Output::LtoIr => ("nvrtcGetLTOIRSize", "nvrtcGetLTOIR"),
        Output::Cubin => ("nvrtcGetCUBINSize", "nvrtcGetCUBIN"),
    };
    let out_size: Size = unsafe { lib.get(size_name)? };
    let out_fill: Fill = unsafe { lib.get(fill_name)? };

    let nul = |s: &str, what: &'static str| {
        CString::new(s).map_err(|_| failed(what, 0, format!("{what} contains a NUL byte")))
    };
    let src = nul(source, "nvrtcCreateProgram")?;
    let cname = nul(name, "nvrtcCreateProgram")?;
    let opts = CStrings::new(options).map_err(|o| {
        failed(
            "nvrtcCompileProgram",
            0,
            format!("option {o:?} contains a NUL byte"),
        )
    })?;
    let mut prog: Prog = std::ptr::null_mut();
    // SAFETY: valid C strings; no headers.
    let rc = unsafe {
        create(
            &mut prog,
            src.as_ptr(),
            cname.as_ptr(),
            0,
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    if rc != 0 {
        return Err(failed("nvrtcCreateProgram", rc, String::new()));
    }
    let guard = Owned::new(prog, destroy);
    // SAFETY: `opts` points at live C strings.
    let rc = unsafe { compile_fn(guard.raw, opts.len() as c_int, opts.as_ptr()) };
    // SAFETY: size/fill pairs on the live program, into a buffer of the size.
    let log = read_sized(
        |n| unsafe { log_size(guard.raw, n) },
        |p| unsafe { log_fill(guard.raw, p.cast()) },
    )
    .map(text_of)
    .unwrap_or_default();
    if rc != 0 {
        return Err(failed("nvrtcCompileProgram", rc, format!("{name}: {log}")));
    }
    let mut code = read_sized(
        |n| unsafe { out_size(guard.raw, n) },
        |p| unsafe { out_fill(guard.raw, p.cast()) },
    )
    .map_err(|rc| failed(fill_name, rc, String::new()))?;
    if output == Output::Ptx {
        while code.last() == Some(&0) {
            code.pop();
        }
    }
    Ok(Compiled { code, log })
}
