//! nvJitLink: links LTO-IR (and cubins, PTX, libraries) into a cubin,
//! running NVVM's optimizer over the whole program with `-lto`.

use std::ffi::{CString, c_char, c_uint};

use super::{CStrings, Lib, Owned, ToolkitError, load, read_sized, text_of};

type Handle = *mut std::ffi::c_void;

/// What an input is (nvJitLink's `nvJitLinkInputType`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InputKind {
    Cubin = 1,
    Ptx = 2,
    LtoIr = 3,
    Fatbin = 4,
    Object = 5,
    Library = 6,
}

/// A linked cubin and the linker's information log.
#[derive(Clone, Debug)]
pub struct Linked {
    pub cubin: Vec<u8>,
    pub info_log: String,
}

/// nvJitLink's version, `(major, minor)`.
pub fn version() -> Result<(u32, u32), ToolkitError> {
    let lib = load(Lib::NvJitLink)?;
    // SAFETY: nvJitLinkVersion(unsigned*, unsigned*) -> nvJitLinkResult.
    let f: unsafe extern "C" fn(*mut c_uint, *mut c_uint) -> i32 =
        unsafe { lib.get("nvJitLinkVersion")? };
    let (mut a, mut b) = (0, 0);
    // SAFETY: two valid out-pointers.
    let rc = unsafe { f(&mut a, &mut b) };
    if rc != 0 {
        return Err(failed("nvJitLinkVersion", rc, String::new()));
    }
    Ok((a, b))
}

fn failed(function: &'static str, rc: i32, log: String) -> ToolkitError {
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
        library: "nvJitLink",
        function,
        code,
        log,
    }
}

/// Links `inputs` (kind, bytes, name) with `options` (`-arch=sm_90`,
/// `-lto`, `-O3`, ...). A failure carries the linker's error log.
pub fn link(
    inputs: &[(InputKind, &[u8], &str)],
    options: &[String],
) -> Result<Linked, ToolkitError> {
    let lib = load(Lib::NvJitLink)?;
    type Create = unsafe extern "C" fn(*mut Handle, u32, *const *const c_char) -> i32;
    type Add =
        unsafe extern "C" fn(Handle, i32, *const std::ffi::c_void, usize, *const c_char) -> i32;
    type Complete = unsafe extern "C" fn(Handle) -> i32;
    type Size = unsafe extern "C" fn(Handle, *mut usize) -> i32;
    type Fill = unsafe extern "C" fn(Handle, *mut std::ffi::c_void) -> i32;
    type Destroy = unsafe extern "C" fn(*mut Handle) -> i32;
    // SAFETY (all `get`s): the signatures of nvJitLink.h (CUDA 12).
    let create: Create = unsafe { lib.get("nvJitLinkCreate")? };
    let add: Add = unsafe { lib.get("nvJitLinkAddData")? };
    let complete: Complete = unsafe { lib.get("nvJitLinkComplete")? };
    let err_size: Size = unsafe { lib.get("nvJitLinkGetErrorLogSize")? };
    let err_fill: Fill = unsafe { lib.get("nvJitLinkGetErrorLog")? };
    let info_size: Size = unsafe { lib.get("nvJitLinkGetInfoLogSize")? };
    let info_fill: Fill = unsafe { lib.get("nvJitLinkGetInfoLog")? };
    let cubin_size: Size = unsafe { lib.get("nvJitLinkGetLinkedCubinSize")? };
    let cubin_fill: Fill = unsafe { lib.get("nvJitLinkGetLinkedCubin")? };
    let destroy: Destroy = unsafe { lib.get("nvJitLinkDestroy")? };

    let opts = CStrings::new(options).map_err(|o| failed("nvJitLinkCreate", 1, o))?;
    let mut h: Handle = std::ptr::null_mut();
    // SAFETY: live C strings.
    let rc = unsafe { create(&mut h, opts.len() as u32, opts.as_ptr()) };
    if rc != 0 {
        return Err(failed("nvJitLinkCreate", rc, options.join(" ")));
    }
    let g = Owned::new(h, destroy);
    let error_log = |g: &Owned| {
        // SAFETY: size/fill on the live handle.
        read_sized(
            |n| unsafe { err_size(g.raw, n) },
            |p| unsafe { err_fill(g.raw, p.cast()) },
        )
        .map(text_of)
        .unwrap_or_default()
    };
    for (kind, data, name) in inputs {
        let cname = CString::new(*name).unwrap_or_default();
        // PTX is text that nvJitLink wants NUL-terminated.
        let with_nul;
        let data: &[u8] = if *kind == InputKind::Ptx && data.last() != Some(&0) {
            with_nul = [*data, &[0]].concat();
            &with_nul
        } else {
            data
        };
        // SAFETY: `data` outlives the call (nvJitLink copies it).
        let rc = unsafe {
            add(
                g.raw,
                *kind as i32,
                data.as_ptr().cast(),
                data.len(),
                cname.as_ptr(),
            )
        };
        if rc != 0 {
            return Err(failed(
                "nvJitLinkAddData",
                rc,
                format!("{name}: {}", error_log(&g)),
            ));
        }
    }
    // SAFETY: the live handle.
    let rc = unsafe { complete(g.raw) };
    if rc != 0 {
        return Err(failed("nvJitLinkComplete", rc, error_log(&g)));
    }
    // SAFETY: size/fill on the live handle.
    let cubin = read_sized(
        |n| unsafe { cubin_size(g.raw, n) },
        |p| unsafe { cubin_fill(g.raw, p.cast()) },
    )
    .map_err(|rc| failed("nvJitLinkGetLinkedCubin", rc, String::new()))?;
    let info_log = read_sized(
        |n| unsafe { info_size(g.raw, n) },
        |p| unsafe { info_fill(g.raw, p.cast()) },
    )
    .map(text_of)
    .unwrap_or_default();
    Ok(Linked { cubin, info_log })
}
