//! Scalar types as getters' mangled names and PTX's loads spell them.

use super::*;

/// The scalar type in a getter's Itanium-mangled name: a scalar getter's
/// builtin type, or CUDA's 16-bit float classes, which compilers read
/// through the composite getter (`…ValueI6__halfE…`,
/// `…ValueI13__nv_bfloat16E…`).
pub(super) fn mangled_kind(name: &str) -> Option<ScalarKind> {
    for (class, kind) in [
        ("6__halfE", ScalarKind::F16),
        ("13__nv_bfloat16E", ScalarKind::BF16),
    ] {
        let getter = [SCALAR_GETTER, COMPOSITE_GETTER]
            .iter()
            .find_map(|g| Some(&name[name.find(g)? + g.len()..]));
        if getter.is_some_and(|after| {
            after
                .strip_prefix('I')
                .is_some_and(|c| c.starts_with(class))
        }) {
            return Some(kind);
        }
    }
    let after = &name[name.find(SCALAR_GETTER)? + SCALAR_GETTER.len()..];
    let code = after.strip_prefix('I')?;
    Some(match code.as_bytes().first()? {
        b'b' => ScalarKind::Bool,
        b'c' | b'a' => ScalarKind::I8,
        b'h' => ScalarKind::U8,
        b's' => ScalarKind::I16,
        b't' => ScalarKind::U16,
        b'i' => ScalarKind::I32,
        b'j' => ScalarKind::U32,
        b'l' | b'x' => ScalarKind::I64,
        b'm' | b'y' => ScalarKind::U64,
        b'f' => ScalarKind::F32,
        b'd' => ScalarKind::F64,
        b'D' if code.starts_with("Dh") || code.starts_with("DF16_") => ScalarKind::F16,
        _ => return None,
    })
}

/// The scalar a load of PTX type `ty` reads: `.sN`/`.uN` as signed and
/// unsigned integers, `.bN` as an integer of unknown signedness.
pub(super) fn ptx_kind(ty: &str) -> Option<ScalarKind> {
    Some(match ty {
        "f16" => ScalarKind::F16,
        "f32" => ScalarKind::F32,
        "f64" => ScalarKind::F64,
        "s8" => ScalarKind::I8,
        "u8" => ScalarKind::U8,
        "b8" => ScalarKind::Bits8,
        "s16" => ScalarKind::I16,
        "u16" => ScalarKind::U16,
        "b16" => ScalarKind::Bits16,
        "s32" => ScalarKind::I32,
        "u32" => ScalarKind::U32,
        "b32" => ScalarKind::Bits32,
        "s64" => ScalarKind::I64,
        "u64" => ScalarKind::U64,
        "b64" => ScalarKind::Bits64,
        _ => return None,
    })
}

/// Size and signedness of the scalar type in a getter's Itanium-mangled
/// name (`…ValueIaET_…` is `signed char`).
pub(super) fn mangled_scalar(name: &str) -> Option<(u32, bool)> {
    let after = &name[name.find(SCALAR_GETTER)? + SCALAR_GETTER.len()..];
    let code = after.strip_prefix('I')?;
    Some(match code.as_bytes().first()? {
        b'b' | b'h' => (1, false),
        b'c' | b'a' => (1, true),
        b's' => (2, true),
        b't' => (2, false),
        b'i' => (4, true),
        b'j' | b'f' => (4, false),
        b'l' | b'x' => (8, true),
        b'm' | b'y' | b'd' => (8, false),
        b'D' if code.starts_with("Dh") || code.starts_with("DF16_") => (2, false),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    pub(super) fn mangled_scalars() {
        let n = |t: &str| format!("_Z37{SCALAR_GETTER}I{t}ET_PKcPKvS4_");
        assert_eq!(mangled_scalar(&n("b")), Some((1, false)));
        assert_eq!(mangled_scalar(&n("a")), Some((1, true)));
        assert_eq!(mangled_scalar(&n("s")), Some((2, true)));
        assert_eq!(mangled_scalar(&n("y")), Some((8, false)));
        assert_eq!(mangled_scalar(&n("Dh")), Some((2, false)));
        assert_eq!(mangled_scalar(&n("6Padded")), None);
        let c = |t: &str| format!("_Z40{COMPOSITE_GETTER}I{t}ET_PKcPKvS5_");
        assert_eq!(mangled_kind(&c("6__half")), Some(ScalarKind::F16));
        assert_eq!(mangled_kind(&c("13__nv_bfloat16")), Some(ScalarKind::BF16));
        assert_eq!(mangled_kind(&c("6Padded")), None);
        assert_eq!(mangled_kind(&n("Dh")), Some(ScalarKind::F16));
    }
}
