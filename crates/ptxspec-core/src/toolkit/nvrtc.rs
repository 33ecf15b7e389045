//! NVRTC: CUDA C++ to PTX, LTO-IR or a cubin.

use std::ffi::{CStr, c_char, c_int, c_void};

use super::ffi::{CStrings, Owned, c_string, read_sized, status, text_of};
use super::{Lib, ToolkitError};

const LIBRARY: &str = "NVRTC";

type Prog = *mut c_void;
type Size = unsafe extern "C" fn(Prog, *mut usize) -> c_int;
type Fill = unsafe extern "C" fn(Prog, *mut c_char) -> c_int;

function_table!(Lib::Nvrtc, "nvrtc.h", {
    version = "nvrtcVersion": unsafe extern "C" fn(*mut c_int, *mut c_int) -> c_int,
    error_string = "nvrtcGetErrorString": unsafe extern "C" fn(c_int) -> *const c_char,
    create = "nvrtcCreateProgram": unsafe extern "C" fn(
        *mut Prog,
        *const c_char,
        *const c_char,
        c_int,
        *const *const c_char,
        *const *const c_char,
    ) -> c_int,
    compile = "nvrtcCompileProgram": unsafe extern "C" fn(Prog, c_int, *const *const c_char) -> c_int,
    destroy = "nvrtcDestroyProgram": unsafe extern "C" fn(*mut Prog) -> c_int,
    log_size = "nvrtcGetProgramLogSize": Size,
    log = "nvrtcGetProgramLog": Fill,
    ptx_size = "nvrtcGetPTXSize": Size,
    ptx = "nvrtcGetPTX": Fill,
    ltoir_size = "nvrtcGetLTOIRSize": Size,
    ltoir = "nvrtcGetLTOIR": Fill,
    cubin_size = "nvrtcGetCUBINSize": Size,
    cubin = "nvrtcGetCUBIN": Fill,
    num_archs = "nvrtcGetNumSupportedArchs": unsafe extern "C" fn(*mut c_int) -> c_int,
    archs = "nvrtcGetSupportedArchs": unsafe extern "C" fn(*mut c_int) -> c_int,
});

impl Api {
    /// The result layer: a status as a [`ToolkitError`] naming `function`.
    fn check(&self, function: &'static str, rc: c_int, log: String) -> Result<(), ToolkitError> {
        status(rc, |rc| self.failure(function, rc, log))
    }

    fn failure(&self, function: &'static str, rc: c_int, log: String) -> ToolkitError {
        // SAFETY: NVRTC returns a static NUL-terminated string (or null).
        let p = unsafe { (self.error_string)(rc) };
        let code = if p.is_null() {
            format!("error {rc}")
        } else {
            // SAFETY: non-null, static, NUL-terminated.
            unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
        };
        ToolkitError::Failed {
            library: LIBRARY,
            function,
            code,
            log,
        }
    }
}

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
    let api = api()?;
    let (mut a, mut b) = (0, 0);
    // SAFETY: two valid out-pointers.
    let rc = unsafe { (api.version)(&mut a, &mut b) };
    api.check("nvrtcVersion", rc, String::new())?;
    Ok((a, b))
}

/// The architectures this NVRTC compiles for (`sm_` numbers, ascending):
/// what an `--arch` may name with this toolkit.
pub fn supported_archs() -> Result<Vec<i32>, ToolkitError> {
    let api = api()?;
    let mut n: c_int = 0;
    // SAFETY: a valid out-pointer.
    let rc = unsafe { (api.num_archs)(&mut n) };
    api.check("nvrtcGetNumSupportedArchs", rc, String::new())?;
    // Far more than any toolkit has: a count beyond it is not believed.
    let count = match usize::try_from(n) {
        Ok(c) if (1..=256).contains(&c) => c,
        _ => return Ok(Vec::new()),
    };
    let mut archs = vec![0 as c_int; count];
    // SAFETY: room for the `count` numbers the call writes.
    let rc = unsafe { (api.archs)(archs.as_mut_ptr()) };
    api.check("nvrtcGetSupportedArchs", rc, String::new())?;
    archs.sort_unstable();
    Ok(archs)
}

/// Compiles `source` (named `name` in messages) with `options`; a failed
/// compilation is [`ToolkitError::Failed`] with NVRTC's log, a NUL byte in
/// any string [`ToolkitError::NulByte`].
pub fn compile(
    source: &str,
    name: &str,
    options: &[String],
    output: Output,
) -> Result<Compiled, ToolkitError> {
    let src = c_string(LIBRARY, "source", source)?;
    let cname = c_string(LIBRARY, "program name", name)?;
    let opts = CStrings::new(LIBRARY, "option", options)?;
    let api = api()?;
    // Beside other calls (on their own programs), and none while the
    // process exits (`exit`).
    let _call = super::exit::Call::enter(super::Lib::Nvrtc);
    let mut prog: Prog = std::ptr::null_mut();
    // SAFETY: valid C strings that outlive the call; no headers.
    let rc = unsafe {
        (api.create)(
            &mut prog,
            src.as_ptr(),
            cname.as_ptr(),
            0,
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    api.check("nvrtcCreateProgram", rc, String::new())?;
    // SAFETY: a program nvrtcCreateProgram just made, owned by nothing else.
    let prog = unsafe { Owned::from_raw(prog, api.destroy) };
    // SAFETY: the live program; `opts` points at live C strings.
    let rc = unsafe { (api.compile)(prog.raw(), opts.len() as c_int, opts.as_ptr()) };
    let log = read_sized(
        // SAFETY: the live program; `n` is a valid out-pointer.
        |n| unsafe { (api.log_size)(prog.raw(), n) },
        // SAFETY: the live program; `p` is a buffer of the size just read (read_sized allocates it).
        |p| unsafe { (api.log)(prog.raw(), p.cast()) },
    )
    .map(text_of)
    .unwrap_or_default();
    api.check("nvrtcCompileProgram", rc, format!("{name}: {log}"))?;
    let (size, fill, fill_name) = match output {
        Output::Ptx => (api.ptx_size, api.ptx, "nvrtcGetPTX"),
        Output::LtoIr => (api.ltoir_size, api.ltoir, "nvrtcGetLTOIR"),
        Output::Cubin => (api.cubin_size, api.cubin, "nvrtcGetCUBIN"),
    };
    let mut code = read_sized(
        // SAFETY: the live program; `n` is a valid out-pointer.
        |n| unsafe { size(prog.raw(), n) },
        // SAFETY: the live program; `p` is a buffer of the size just read (read_sized allocates it).
        |p| unsafe { fill(prog.raw(), p.cast()) },
    )
    .map_err(|rc| api.failure(fill_name, rc, String::new()))?;
    if output == Output::Ptx {
        while code.last() == Some(&0) {
            code.pop();
        }
    }
    Ok(Compiled { code, log })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_nul_byte_in_an_option_is_reported_as_such() {
        // Checked before NVRTC is loaded or called (it was reported as the
        // status of a call that never happened: "NVRTC_SUCCESS").
        let e = compile("", "x.cu", &["-DX=\0".into()], Output::Ptx)
            .err()
            .unwrap();
        assert!(
            matches!(e, ToolkitError::NulByte { what: "option", .. }),
            "{e}"
        );
        let e = compile("a\0b", "x.cu", &[], Output::Ptx).err().unwrap();
        assert!(
            matches!(e, ToolkitError::NulByte { what: "source", .. }),
            "{e}"
        );
    }
}
