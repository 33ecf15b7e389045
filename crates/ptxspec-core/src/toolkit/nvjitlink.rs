//! nvJitLink: links LTO-IR (and cubins, PTX, libraries) into a cubin,
//! running NVVM's optimizer over the whole program with `-lto`.

use std::ffi::{c_char, c_int, c_uint, c_void};

use super::ffi::{CStrings, Owned, c_string, read_sized, status, text_of};
use super::{Lib, ToolkitError};

const LIBRARY: &str = "nvJitLink";

type Handle = *mut c_void;
type Size = unsafe extern "C" fn(Handle, *mut usize) -> c_int;
type Fill = unsafe extern "C" fn(Handle, *mut c_char) -> c_int;

function_table!(Lib::NvJitLink, "nvJitLink.h", {
    version = "nvJitLinkVersion": unsafe extern "C" fn(*mut c_uint, *mut c_uint) -> c_int,
    create = "nvJitLinkCreate": unsafe extern "C" fn(*mut Handle, u32, *const *const c_char) -> c_int,
    add_data = "nvJitLinkAddData": unsafe extern "C" fn(Handle, c_int, *const c_void, usize, *const c_char) -> c_int,
    complete = "nvJitLinkComplete": unsafe extern "C" fn(Handle) -> c_int,
    destroy = "nvJitLinkDestroy": unsafe extern "C" fn(*mut Handle) -> c_int,
    error_log_size = "nvJitLinkGetErrorLogSize": Size,
    error_log = "nvJitLinkGetErrorLog": Fill,
    info_log_size = "nvJitLinkGetInfoLogSize": Size,
    info_log = "nvJitLinkGetInfoLog": Fill,
    cubin_size = "nvJitLinkGetLinkedCubinSize": Size,
    cubin = "nvJitLinkGetLinkedCubin": unsafe extern "C" fn(Handle, *mut c_void) -> c_int,
    ptx_size = "nvJitLinkGetLinkedPtxSize": Size,
    ptx = "nvJitLinkGetLinkedPtx": Fill,
});

/// The result layer: a status as a [`ToolkitError`] naming `function`
/// (nvJitLink has no error-string function: `nvJitLinkResult`'s names).
fn failure(function: &'static str, rc: c_int, log: String) -> ToolkitError {
    let code = match rc {
        1 => "unrecognized option".to_string(),
        2 => "missing -arch".to_string(),
        3 => "invalid input".to_string(),
        4 => "PTX compilation failed".to_string(),
        5 => "NVVM compilation failed".to_string(),
        6 => "internal error".to_string(),
        7 => "thread pool error".to_string(),
        8 => "unrecognized input".to_string(),
        9 => "finalization failed".to_string(),
        n => format!("error {n}"),
    };
    ToolkitError::Failed {
        library: LIBRARY,
        function,
        code,
        log,
    }
}

fn check(
    function: &'static str,
    rc: c_int,
    log: impl FnOnce() -> String,
) -> Result<(), ToolkitError> {
    status(rc, |rc| failure(function, rc, log()))
}

/// What an input is (nvJitLink's `nvJitLinkInputType`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InputKind {
    /// A cubin.
    Cubin = 1,
    /// PTX text.
    Ptx = 2,
    /// LTO-IR.
    LtoIr = 3,
    /// A fat binary.
    Fatbin = 4,
    /// A host object holding device code.
    Object = 5,
    /// A static library (`libcudadevrt.a`).
    Library = 6,
}

/// What a link made and the linker's information log.
#[derive(Clone, Debug)]
pub struct Linked {
    /// The cubin; where the options hold `-ptx`, the linked PTX instead
    /// (text, without a NUL).
    pub code: Vec<u8>,
    /// nvJitLink's information log.
    pub info_log: String,
}

/// nvJitLink's version, `(major, minor)`.
pub fn version() -> Result<(u32, u32), ToolkitError> {
    let api = api()?;
    let (mut a, mut b) = (0, 0);
    // SAFETY: two valid out-pointers.
    let rc = unsafe { (api.version)(&mut a, &mut b) };
    check("nvJitLinkVersion", rc, String::new)?;
    Ok((a, b))
}

/// Links `inputs` (kind, bytes, name) with `options` (`-arch=sm_90`,
/// `-lto`, `-O3`, ...; with `-ptx`, PTX is made instead of a cubin). A
/// failure carries the linker's error log.
pub fn link(
    inputs: &[(InputKind, &[u8], &str)],
    options: &[String],
) -> Result<Linked, ToolkitError> {
    let opts = CStrings::new(LIBRARY, "option", options)?;
    let names = inputs
        .iter()
        .map(|(_, _, name)| c_string(LIBRARY, "input name", name))
        .collect::<Result<Vec<_>, _>>()?;
    let api = api()?;
    // One call at a time in this process, and none while it exits (`exit`).
    // Each stage is a span of the trace: a link that waits for another
    // shows it, and which stage takes a link's time.
    let waiting = crate::trace::span("link stage: wait for the linker", "link");
    let _call = super::exit::Call::enter(super::Lib::NvJitLink);
    drop(waiting);
    let mut adding = crate::trace::span("link stage: add inputs", "link");
    adding.arg("inputs", inputs.len());
    adding.arg(
        "bytes",
        inputs.iter().map(|(_, d, _)| d.len()).sum::<usize>(),
    );
    let mut h: Handle = std::ptr::null_mut();
    // SAFETY: a valid out-pointer and live C strings.
    let rc = unsafe { (api.create)(&mut h, opts.len() as u32, opts.as_ptr()) };
    check("nvJitLinkCreate", rc, || options.join(" "))?;
    // SAFETY: a handle nvJitLinkCreate just made, owned by nothing else.
    let handle = unsafe { Owned::from_raw(h, api.destroy) };
    let error_log = || {
        read_sized(
            // SAFETY: the live handle; `n` is a valid out-pointer.
            |n| unsafe { (api.error_log_size)(handle.raw(), n) },
            // SAFETY: the live handle; `p` is a buffer of the size just read (read_sized allocates it).
            |p| unsafe { (api.error_log)(handle.raw(), p.cast()) },
        )
        .map(text_of)
        .unwrap_or_default()
    };
    for ((kind, data, name), cname) in inputs.iter().zip(&names) {
        // PTX is text that nvJitLink wants NUL-terminated.
        let with_nul;
        let data: &[u8] = if *kind == InputKind::Ptx && data.last() != Some(&0) {
            with_nul = [*data, &[0]].concat();
            &with_nul
        } else {
            data
        };
        // SAFETY: the live handle; `data` outlives the call (nvJitLink
        // copies it) and its length is given.
        let rc = unsafe {
            (api.add_data)(
                handle.raw(),
                *kind as c_int,
                data.as_ptr().cast(),
                data.len(),
                cname.as_ptr(),
            )
        };
        check("nvJitLinkAddData", rc, || {
            format!("{name}: {}", error_log())
        })?;
    }
    drop(adding);
    let completing = crate::trace::span("link stage: complete (optimize, ptxas)", "link");
    // SAFETY: the live handle.
    let rc = unsafe { (api.complete)(handle.raw()) };
    drop(completing);
    check("nvJitLinkComplete", rc, error_log)?;
    let code = if options.iter().any(|o| o == "-ptx") {
        read_sized(
            // SAFETY: the live handle; `n` is a valid out-pointer.
            |n| unsafe { (api.ptx_size)(handle.raw(), n) },
            // SAFETY: the live handle; `p` is a buffer of the size just read (read_sized allocates it).
            |p| unsafe { (api.ptx)(handle.raw(), p.cast()) },
        )
        .map(|mut ptx| {
            // The size counts the terminating NUL.
            while ptx.last() == Some(&0) {
                ptx.pop();
            }
            ptx
        })
        .map_err(|rc| failure("nvJitLinkGetLinkedPtx", rc, String::new()))?
    } else {
        read_sized(
            // SAFETY: the live handle; `n` is a valid out-pointer.
            |n| unsafe { (api.cubin_size)(handle.raw(), n) },
            // SAFETY: the live handle; `p` is a buffer of the size just read (read_sized allocates it).
            |p| unsafe { (api.cubin)(handle.raw(), p.cast()) },
        )
        .map_err(|rc| failure("nvJitLinkGetLinkedCubin", rc, String::new()))?
    };
    let info_log = read_sized(
        // SAFETY: the live handle; `n` is a valid out-pointer.
        |n| unsafe { (api.info_log_size)(handle.raw(), n) },
        // SAFETY: the live handle; `p` is a buffer of the size just read (read_sized allocates it).
        |p| unsafe { (api.info_log)(handle.raw(), p.cast()) },
    )
    .map(text_of)
    .unwrap_or_default();
    Ok(Linked { code, info_log })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_nul_byte_is_reported_before_the_linker_is_loaded() {
        let e = link(&[], &["-arch=sm_90\0".into()]).err().unwrap();
        assert!(
            matches!(e, ToolkitError::NulByte { what: "option", .. }),
            "{e}"
        );
        let e = link(&[(InputKind::LtoIr, &[], "a\0b")], &[]).err().unwrap();
        assert!(
            matches!(
                e,
                ToolkitError::NulByte {
                    what: "input name",
                    ..
                }
            ),
            "{e}"
        );
    }
}
