//! What the safe wrappers share: owners of C API objects, C strings, and
//! size-then-fill reads.

use std::ffi::{CString, c_char, c_int, c_void};

use super::ToolkitError;

/// A C API's object (an NVRTC or libNVVM program, an nvJitLink handle),
/// destroyed by its library's destroy function when dropped, on every path
/// out of the call that made it. It holds a raw pointer, so it is neither
/// `Send` nor `Sync`: a handle stays on the thread that made it.
pub(super) struct Owned {
    raw: *mut c_void,
    destroy: unsafe extern "C" fn(*mut *mut c_void) -> c_int,
}

impl Owned {
    /// Takes ownership of `raw`.
    ///
    /// # Safety
    /// `raw` must be a live object that `destroy` releases, made by the same
    /// library, owned by nothing else (this owner destroys it exactly once).
    pub unsafe fn from_raw(
        raw: *mut c_void,
        destroy: unsafe extern "C" fn(*mut *mut c_void) -> c_int,
    ) -> Owned {
        Owned { raw, destroy }
    }

    /// The handle, for calls on it while `self` lives.
    pub fn raw(&self) -> *mut c_void {
        self.raw
    }
}

impl Drop for Owned {
    fn drop(&mut self) {
        // SAFETY: `from_raw`'s contract: a live object of this library,
        // destroyed here once.
        unsafe { (self.destroy)(&mut self.raw) };
    }
}

/// The result layer's one rule: status 0 is success, any other is the
/// error `failure` makes of it (each library names its own statuses).
pub(super) fn status(
    rc: c_int,
    failure: impl FnOnce(c_int) -> ToolkitError,
) -> Result<(), ToolkitError> {
    if rc == 0 { Ok(()) } else { Err(failure(rc)) }
}

/// `value` as a C string; a NUL byte in it is [`ToolkitError::NulByte`].
pub(super) fn c_string(
    library: &'static str,
    what: &'static str,
    value: &str,
) -> Result<CString, ToolkitError> {
    match value.find('\0') {
        Some(at) => Err(ToolkitError::NulByte {
            library,
            what,
            value: super::nul_byte_at(value, at),
        }),
        None => CString::new(value).map_err(|_| ToolkitError::NulByte {
            library,
            what,
            value: String::new(),
        }),
    }
}

/// Strings as a C API takes them: NUL-terminated copies and the array of
/// pointers to them, which live as long as this value.
pub(super) struct CStrings {
    _owned: Vec<CString>,
    ptrs: Vec<*const c_char>,
}

impl CStrings {
    /// The C strings of `items` (`what` names them in the error for one
    /// with a NUL byte).
    pub fn new(
        library: &'static str,
        what: &'static str,
        items: &[String],
    ) -> Result<CStrings, ToolkitError> {
        let owned = items
            .iter()
            .map(|o| c_string(library, what, o))
            .collect::<Result<Vec<_>, _>>()?;
        let ptrs = owned.iter().map(|o| o.as_ptr()).collect();
        Ok(CStrings {
            _owned: owned,
            ptrs,
        })
    }
    pub fn len(&self) -> usize {
        self.ptrs.len()
    }
    pub fn as_ptr(&self) -> *const *const c_char {
        self.ptrs.as_ptr()
    }
}

/// Reads a size-then-fill pair of calls (`GetXSize`, `GetX`) into bytes;
/// the error is the failing call's status.
pub(super) fn read_sized(
    size: impl FnOnce(&mut usize) -> c_int,
    fill: impl FnOnce(*mut u8) -> c_int,
) -> Result<Vec<u8>, c_int> {
    let mut n = 0usize;
    let rc = size(&mut n);
    if rc != 0 {
        return Err(rc);
    }
    let mut buf = vec![0u8; n];
    if n == 0 {
        return Ok(buf);
    }
    let rc = fill(buf.as_mut_ptr());
    if rc != 0 {
        return Err(rc);
    }
    Ok(buf)
}

/// A C string's bytes without the trailing NULs, as text.
pub(super) fn text_of(mut bytes: Vec<u8>) -> String {
    while bytes.last() == Some(&0) {
        bytes.pop();
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_nul_byte_is_its_own_error() {
        let e = CStrings::new("NVRTC", "option", &["-arch=sm_90".into(), "-D\0X".into()])
            .err()
            .unwrap();
        assert_eq!(
            e,
            ToolkitError::NulByte {
                library: "NVRTC",
                what: "option",
                value: "a NUL byte at line 1, column 3, after \"-D\"".into()
            }
        );
        assert_eq!(
            e.to_string(),
            "NVRTC: the option holds a NUL byte at line 1, column 3, after \"-D\""
        );
    }
}
