//! libNVVM: NVVM IR (LLVM assembly) to LTO-IR. ptxspec uses it for the
//! few lines that define specialization constants in an LTO build: it has
//! no C++ front end to start, so it is much faster than NVRTC there.

use std::ffi::{CString, c_char, c_int};

use super::{CStrings, Lib, Owned, ToolkitError, load, read_sized, text_of};

type Prog = *mut std::ffi::c_void;

fn failed(function: &'static str, rc: c_int, log: String) -> ToolkitError {
    let code = match rc {
        1 => "out of memory",
        2 => "program creation failure",
        3 => "IR version mismatch",
        4 => "invalid input",
        5 => "invalid program",
        6 => "invalid IR",
        7 => "invalid option",
        8 => "no module in program",
        9 => "compilation failed",
        _ => "error",
    };
    ToolkitError::Failed {
        library: "libNVVM",
        function,
        code: format!("{code} ({rc})"),
        log,
    }
}

/// The NVVM IR version libNVVM reads: `(major, minor, debug major, debug
/// minor)`, which the IR's `!nvvmir.version` must carry.
pub fn ir_version() -> Result<(i32, i32, i32, i32), ToolkitError> {
    let lib = load(Lib::Nvvm)?;
    type F = unsafe extern "C" fn(*mut c_int, *mut c_int, *mut c_int, *mut c_int) -> c_int;
    // SAFETY: nvvmIRVersion(int*, int*, int*, int*) -> nvvmResult.
    let f: F = unsafe { lib.get("nvvmIRVersion")? };
    let (mut a, mut b, mut c, mut d) = (0, 0, 0, 0);
    // SAFETY: four valid out-pointers.
    let rc = unsafe { f(&mut a, &mut b, &mut c, &mut d) };
    if rc != 0 {
        return Err(failed("nvvmIRVersion", rc, String::new()));
    }
    Ok((a, b, c, d))
}

/// Compiles NVVM IR text with `options` (`-gen-lto`, `-arch=compute_90`);
/// returns the result (LTO-IR with `-gen-lto`, PTX otherwise).
pub fn compile(ir: &str, name: &str, options: &[String]) -> Result<Vec<u8>, ToolkitError> {
    let lib = load(Lib::Nvvm)?;
    type Create = unsafe extern "C" fn(*mut Prog) -> c_int;
    type Add = unsafe extern "C" fn(Prog, *const c_char, usize, *const c_char) -> c_int;
    type CompileFn = unsafe extern "C" fn(Prog, c_int, *const *const c_char) -> c_int;
    type Size = unsafe extern "C" fn(Prog, *mut usize) -> c_int;
    type Fill = unsafe extern "C" fn(Prog, *mut c_char) -> c_int;
    type Destroy = unsafe extern "C" fn(*mut Prog) -> c_int;
    // SAFETY (all `get`s): the signatures of nvvm.h.
    let create: Create = unsafe { lib.get("nvvmCreateProgram")? };
    let add: Add = unsafe { lib.get("nvvmAddModuleToProgram")? };
    let compile_fn: CompileFn = unsafe { lib.get("nvvmCompileProgram")? };
    let res_size: Size = unsafe { lib.get("nvvmGetCompiledResultSize")? };
    let res_fill: Fill = unsafe { lib.get("nvvmGetCompiledResult")? };
    let log_size: Size = unsafe { lib.get("nvvmGetProgramLogSize")? };
    let log_fill: Fill = unsafe { lib.get("nvvmGetProgramLog")? };
    let destroy: Destroy = unsafe { lib.get("nvvmDestroyProgram")? };
    let mut p: Prog = std::ptr::null_mut();
    // SAFETY: a valid out-pointer.
    let rc = unsafe { create(&mut p) };
    if rc != 0 {
        return Err(failed("nvvmCreateProgram", rc, String::new()));
    }
    let g = Owned::new(p, destroy);
    let cname = CString::new(name).unwrap_or_default();
    // SAFETY: `ir` outlives the call; its length is given.
    let rc = unsafe { add(g.raw, ir.as_ptr().cast(), ir.len(), cname.as_ptr()) };
    if rc != 0 {
        return Err(failed("nvvmAddModuleToProgram", rc, String::new()));
    }
    let opts = CStrings::new(options).map_err(|o| {
        failed(
            "nvvmCompileProgram",
            7,
            format!("option {o:?} contains a NUL byte"),
        )
    })?;
    // SAFETY: live C strings.
    let rc = unsafe { compile_fn(g.raw, opts.len() as c_int, opts.as_ptr()) };
    if rc != 0 {
        // SAFETY: size/fill on the live program.
        let log = read_sized(
            |n| unsafe { log_size(g.raw, n) },
            |b| unsafe { log_fill(g.raw, b.cast()) },
        )
        .map(text_of)
        .unwrap_or_default();
        return Err(failed("nvvmCompileProgram", rc, log));
    }
    // SAFETY: size/fill on the live program.
    read_sized(
        |n| unsafe { res_size(g.raw, n) },
        |b| unsafe { res_fill(g.raw, b.cast()) },
    )
    .map_err(|rc| failed("nvvmGetCompiledResult", rc, String::new()))
}
