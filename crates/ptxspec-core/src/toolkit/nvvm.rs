//! libNVVM: NVVM IR (LLVM assembly) to LTO-IR. ptxspec uses it for the
//! few lines that define specialization constants in an LTO build: it has
//! no C++ front end to start, so it is much faster than NVRTC there.
//! libNVVM documents a thread-safe interface: calls are not serialized.

use std::ffi::{c_char, c_int, c_void};

use super::ffi::{CStrings, Owned, c_string, read_sized, status, text_of};
use super::{Lib, ToolkitError};

const LIBRARY: &str = "libNVVM";

type Prog = *mut c_void;
type Size = unsafe extern "C" fn(Prog, *mut usize) -> c_int;
type Fill = unsafe extern "C" fn(Prog, *mut c_char) -> c_int;

function_table!(Lib::Nvvm, "nvvm.h", {
    ir_version = "nvvmIRVersion": unsafe extern "C" fn(*mut c_int, *mut c_int, *mut c_int, *mut c_int) -> c_int,
    create = "nvvmCreateProgram": unsafe extern "C" fn(*mut Prog) -> c_int,
    add_module = "nvvmAddModuleToProgram": unsafe extern "C" fn(Prog, *const c_char, usize, *const c_char) -> c_int,
    compile = "nvvmCompileProgram": unsafe extern "C" fn(Prog, c_int, *const *const c_char) -> c_int,
    destroy = "nvvmDestroyProgram": unsafe extern "C" fn(*mut Prog) -> c_int,
    result_size = "nvvmGetCompiledResultSize": Size,
    result = "nvvmGetCompiledResult": Fill,
    log_size = "nvvmGetProgramLogSize": Size,
    log = "nvvmGetProgramLog": Fill,
});

/// The result layer: a status as a [`ToolkitError`] naming `function`
/// (`nvvmResult`'s names).
fn check(
    function: &'static str,
    rc: c_int,
    log: impl FnOnce() -> String,
) -> Result<(), ToolkitError> {
    status(rc, |rc| failure(function, rc, log()))
}

fn failure(function: &'static str, rc: c_int, log: String) -> ToolkitError {
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
        library: LIBRARY,
        function,
        code: format!("{code} ({rc})"),
        log,
    }
}

/// The NVVM IR version libNVVM reads: `(major, minor, debug major, debug
/// minor)`, which the IR's `!nvvmir.version` must carry.
pub(crate) fn ir_version() -> Result<(i32, i32, i32, i32), ToolkitError> {
    let api = api()?;
    let _call = super::exit::Call::enter(super::Lib::Nvvm);
    let (mut a, mut b, mut c, mut d) = (0, 0, 0, 0);
    // SAFETY: four valid out-pointers.
    let rc = unsafe { (api.ir_version)(&mut a, &mut b, &mut c, &mut d) };
    check("nvvmIRVersion", rc, String::new)?;
    Ok((a, b, c, d))
}

/// Compiles NVVM IR text with `options` (`-gen-lto`, `-arch=compute_90`);
/// returns the result (LTO-IR with `-gen-lto`, PTX otherwise).
pub fn compile(ir: &str, name: &str, options: &[String]) -> Result<Vec<u8>, ToolkitError> {
    let cname = c_string(LIBRARY, "module name", name)?;
    let opts = CStrings::new(LIBRARY, "option", options)?;
    let api = api()?;
    // None while the process exits (`exit`).
    let _call = super::exit::Call::enter(super::Lib::Nvvm);
    let mut p: Prog = std::ptr::null_mut();
    // SAFETY: a valid out-pointer.
    let rc = unsafe { (api.create)(&mut p) };
    check("nvvmCreateProgram", rc, String::new)?;
    // SAFETY: a program nvvmCreateProgram just made, owned by nothing else.
    let prog = unsafe { Owned::from_raw(p, api.destroy) };
    // SAFETY: the live program; `ir` outlives the call and its length is
    // given.
    let rc = unsafe { (api.add_module)(prog.raw(), ir.as_ptr().cast(), ir.len(), cname.as_ptr()) };
    check("nvvmAddModuleToProgram", rc, String::new)?;
    // SAFETY: the live program and live C strings.
    let rc = unsafe { (api.compile)(prog.raw(), opts.len() as c_int, opts.as_ptr()) };
    check("nvvmCompileProgram", rc, || {
        read_sized(
            // SAFETY: the live program; `n` is a valid out-pointer.
            |n| unsafe { (api.log_size)(prog.raw(), n) },
            // SAFETY: the live program; `b` is a buffer of the size just read (read_sized allocates it).
            |b| unsafe { (api.log)(prog.raw(), b.cast()) },
        )
        .map(text_of)
        .unwrap_or_default()
    })?;
    read_sized(
        // SAFETY: the live program; `n` is a valid out-pointer.
        |n| unsafe { (api.result_size)(prog.raw(), n) },
        // SAFETY: the live program; `b` is a buffer of the size just read (read_sized allocates it).
        |b| unsafe { (api.result)(prog.raw(), b.cast()) },
    )
    .map_err(|rc| failure("nvvmGetCompiledResult", rc, String::new()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_nul_byte_in_an_option_is_reported_as_such() {
        let e = compile("", "defs", &["-arch=compute_90\0".into()])
            .err()
            .unwrap();
        assert!(
            matches!(e, ToolkitError::NulByte { what: "option", .. }),
            "{e}"
        );
    }
}
