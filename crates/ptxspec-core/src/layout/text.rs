//! Values written as text (`--set NAME=VALUE`): the same text gives the
//! same value for every format (PTX images and SPIR-V modules alike).
//!
//! * A scalar is a number as C spells it: decimal, or hexadecimal `0x…`
//!   meaning the number it spells (`0x10` is sixteen, for an `int` as for
//!   a `double`), with an optional sign. `bool` takes `0`, `1`, `true`,
//!   `false`. A number the type cannot hold (300 for a `char`, `1e400`
//!   for a `double`) is an error, never a wrapped or infinite value.
//! * A composite is its scalar leaves in memory order, comma-separated.
//! * The raw bytes of a whole value have a spelling of their own:
//!   `bytes:` and two hexadecimal digits per byte, in memory order.

use super::ScalarKind;
use super::float16;

/// The spelling of raw bytes.
pub(crate) const BYTES_PREFIX: &str = "bytes:";

/// A value's bytes from `text`: raw bytes (`bytes:…`, exactly `size` of
/// them), or one number per leaf of `leaves` (`(offset, kind)`, memory
/// order), written over `base` (the value's bytes before, for padding).
/// `leaves` may be empty where a format does not record the types; only
/// raw bytes are accepted then.
pub fn parse_value(
    text: &str,
    size: usize,
    leaves: &[(u32, ScalarKind)],
    base: &[u8],
) -> Result<Vec<u8>, String> {
    if let Some(hex) = text.strip_prefix(BYTES_PREFIX) {
        return parse_bytes(hex, size);
    }
    if leaves.is_empty() {
        return Err(format!(
            "the types in this value are not recorded: give its {size} bytes as {BYTES_PREFIX}<hex>"
        ));
    }
    if let Some((from, to)) = unread_member(leaves) {
        let known: Vec<String> = leaves
            .iter()
            .map(|(o, k)| format!("{} at {o}", k.cpp_name()))
            .collect();
        return Err(format!(
            "its type is only partly known: its kernels read {} of its {size} bytes, and bytes {from} to \
             {to} hold a member none reads, so numbers in memory order cannot be matched to members. \
             Give the whole value as {BYTES_PREFIX}<{} hex digits>",
            known.join(", "),
            size * 2
        ));
    }
    let parts: Vec<&str> = text.split(',').map(str::trim).collect();
    if parts.len() != leaves.len() {
        let kinds: Vec<&str> = leaves.iter().map(|(_, k)| k.cpp_name()).collect();
        return Err(format!(
            "{} given, the constant holds {} ({})",
            count(parts.len(), "value", "values"),
            leaves.len(),
            kinds.join(", ")
        ));
    }
    let mut bytes = base.to_vec();
    bytes.resize(size, 0);
    for (part, &(offset, kind)) in parts.iter().zip(leaves) {
        let leaf = parse_scalar(kind, part)?;
        let at = offset as usize;
        bytes
            .get_mut(at..at + leaf.len())
            .ok_or_else(|| format!("a scalar at offset {offset} lies outside the value"))?
            .copy_from_slice(&leaf);
    }
    Ok(bytes)
}

/// One scalar's value (its little-endian bytes) as text that
/// [`parse_value`] reads back as the same value: `None` for bytes of another
/// size than the kind's.
pub fn format_scalar(kind: ScalarKind, bytes: &[u8]) -> Option<String> {
    if bytes.len() != kind.size() as usize {
        return None;
    }
    let mut word = [0u8; 8];
    word[..bytes.len()].copy_from_slice(bytes);
    let bits = u64::from_le_bytes(word);
    let signed = |n: u32| ((bits << (64 - n)) as i64 >> (64 - n)).to_string();
    Some(match kind {
        ScalarKind::Bool => (bits != 0).to_string(),
        ScalarKind::I8 => signed(8),
        ScalarKind::I16 => signed(16),
        ScalarKind::I32 => signed(32),
        ScalarKind::I64 => signed(64),
        ScalarKind::U8 | ScalarKind::U16 | ScalarKind::U32 | ScalarKind::U64 => bits.to_string(),
        ScalarKind::Bits8 | ScalarKind::Bits16 | ScalarKind::Bits32 | ScalarKind::Bits64 => {
            format!("{bits:#x}")
        }
        ScalarKind::F32 => f32::from_bits(bits as u32).to_string(),
        ScalarKind::F64 => f64::from_bits(bits).to_string(),
        // Every half and bfloat16 is exactly a float.
        ScalarKind::F16 => half_to_f32(bits as u16).to_string(),
        ScalarKind::BF16 => f32::from_bits((bits as u32) << 16).to_string(),
    })
}

/// The `f32` an IEEE half's bits stand for (exactly).
fn half_to_f32(h: u16) -> f32 {
    let sign = if h & 0x8000 != 0 { -1.0 } else { 1.0 };
    let exp = ((h >> 10) & 0x1f) as i32;
    let mant = (h & 0x3ff) as f32;
    sign * match exp {
        0 => mant * 2f32.powi(-24),
        31 if mant == 0.0 => f32::INFINITY,
        31 => f32::NAN,
        e => (1024.0 + mant) * 2f32.powi(e - 25),
    }
}

/// The first run of bytes between known leaves (offset order) that
/// alignment cannot explain — at least as long as the next leaf, so a
/// member no kernel reads: `(from, to)`.
fn unread_member(leaves: &[(u32, ScalarKind)]) -> Option<(u32, u32)> {
    let mut end = 0u32;
    for &(offset, kind) in leaves {
        if offset > end && offset - end >= kind.size() {
            return Some((end, offset));
        }
        end = end.max(offset.saturating_add(kind.size()));
    }
    None
}

/// `n` and the noun for it, singular or plural: "1 value", "2 values".
pub fn count(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// `size` bytes from two hexadecimal digits each.
fn parse_bytes(hex: &str, size: usize) -> Result<Vec<u8>, String> {
    let digits: Vec<u32> = hex
        .chars()
        .map(|c| c.to_digit(16))
        .collect::<Option<_>>()
        .ok_or_else(|| {
            format!("{BYTES_PREFIX}{hex} holds a character that is not a hexadecimal digit")
        })?;
    if digits.len() != size * 2 {
        return Err(format!(
            "{BYTES_PREFIX} takes {size} bytes ({} hexadecimal digits) for this value, {} given",
            size * 2,
            digits.len()
        ));
    }
    Ok(digits.chunks(2).map(|d| (d[0] * 16 + d[1]) as u8).collect())
}

/// An integer as C spells it: optional sign, then decimal or `0x` hex.
fn parse_int(t: &str) -> Option<i128> {
    let (negative, digits) = match t.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, t.strip_prefix('+').unwrap_or(t)),
    };
    let magnitude = match digits
        .strip_prefix("0x")
        .or_else(|| digits.strip_prefix("0X"))
    {
        Some(h) if !h.is_empty() && h.bytes().all(|b| b.is_ascii_hexdigit()) => {
            i128::from_str_radix(h, 16).ok()?
        }
        Some(_) => return None,
        None if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) => {
            digits.parse().ok()?
        }
        None => return None,
    };
    Some(if negative { -magnitude } else { magnitude })
}

/// A finite floating-point number: decimal (`2.5`, `1e-3`) or an integer
/// as C spells it (`0x10` is 16.0).
fn parse_float(t: &str) -> Option<f64> {
    let v = match parse_int(t) {
        Some(i) => i as f64,
        None => t.parse::<f64>().ok()?,
    };
    v.is_finite().then_some(v)
}

/// One scalar's bytes (little-endian) from its text.
pub(crate) fn parse_scalar(kind: ScalarKind, t: &str) -> Result<Vec<u8>, String> {
    let bad = |why: &str| format!("{t:?} is not a {}{why}", kind.cpp_name());
    let int = |bits: u32, signed: bool| -> Result<Vec<u8>, String> {
        let v = parse_int(t).ok_or_else(|| bad(""))?;
        let (lo, hi) = if signed {
            (-(1i128 << (bits - 1)), (1i128 << (bits - 1)) - 1)
        } else {
            (0, (1i128 << bits) - 1)
        };
        if !(lo..=hi).contains(&v) {
            return Err(bad(&format!(": it holds {lo} to {hi}")));
        }
        Ok((v as u128).to_le_bytes()[..(bits / 8) as usize].to_vec())
    };
    match kind {
        ScalarKind::Bool => match t {
            "true" | "1" => Ok(vec![1]),
            "false" | "0" => Ok(vec![0]),
            _ => Err(bad(": it takes 0, 1, true or false")),
        },
        ScalarKind::I8 => int(8, true),
        ScalarKind::U8 => int(8, false),
        ScalarKind::I16 => int(16, true),
        ScalarKind::U16 => int(16, false),
        ScalarKind::I32 => int(32, true),
        ScalarKind::U32 => int(32, false),
        ScalarKind::I64 => int(64, true),
        ScalarKind::U64 => int(64, false),
        ScalarKind::Bits8 | ScalarKind::Bits16 | ScalarKind::Bits32 | ScalarKind::Bits64 => {
            // Either signedness: from the signed minimum to the unsigned
            // maximum.
            let bits = kind.size() * 8;
            let v = parse_int(t).ok_or_else(|| bad(""))?;
            let (lo, hi) = (-(1i128 << (bits - 1)), (1i128 << bits) - 1);
            if !(lo..=hi).contains(&v) {
                return Err(bad(&format!(": it holds {lo} to {hi}")));
            }
            Ok((v as u128).to_le_bytes()[..(bits / 8) as usize].to_vec())
        }
        ScalarKind::F16 | ScalarKind::BF16 => {
            let (format, max) = match kind {
                ScalarKind::F16 => (float16::HALF, "65504"),
                _ => (float16::BFLOAT16, "3.39e38"),
            };
            let v = parse_float(t).ok_or_else(|| bad(""))?;
            let h = float16::from_text(format, t, v)
                .ok_or_else(|| bad(&format!(": it holds at most {max} in magnitude")))?;
            Ok(h.to_le_bytes().to_vec())
        }
        ScalarKind::F32 => {
            // Rounded once, as C's strtof does (not to f64 first).
            let f = match parse_int(t) {
                Some(i) => i as f32,
                None => t.parse::<f32>().map_err(|_| bad(""))?,
            };
            if !f.is_finite() {
                return Err(bad(": it holds at most 3.4e38 in magnitude"));
            }
            Ok(f.to_le_bytes().to_vec())
        }
        ScalarKind::F64 => {
            let v = parse_float(t).ok_or_else(|| bad(": a finite number"))?;
            Ok(v.to_le_bytes().to_vec())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ScalarKind::*;

    #[test]
    fn formatted_scalars_read_back_as_the_same_bytes() {
        let cases: &[(ScalarKind, &[u8])] = &[
            (Bool, &[1]),
            (I8, &[0xfb]),
            (U8, &[250]),
            (I16, &(-300i16).to_le_bytes()),
            (U32, &u32::MAX.to_le_bytes()),
            (I64, &i64::MIN.to_le_bytes()),
            (Bits32, &0x8000_0001u32.to_le_bytes()),
            (F32, &0.1f32.to_le_bytes()),
            (F64, &(-2.5e-300f64).to_le_bytes()),
            (F16, &0x3e00u16.to_le_bytes()),
            (F16, &0x0001u16.to_le_bytes()),
            (BF16, &0xbfc0u16.to_le_bytes()),
        ];
        for &(kind, bytes) in cases {
            let text = format_scalar(kind, bytes).unwrap();
            assert_eq!(
                parse_scalar(kind, &text).as_deref(),
                Ok(bytes),
                "{kind:?} {text}"
            );
        }
        assert_eq!(format_scalar(F16, &0x3e00u16.to_le_bytes()).unwrap(), "1.5");
        assert_eq!(format_scalar(I32, &[0; 3]), None);
    }

    #[test]
    fn a_hex_literal_is_the_number_it_spells() {
        assert_eq!(
            parse_scalar(I32, "0x00000010"),
            Ok(16i32.to_le_bytes().to_vec())
        );
        assert_eq!(
            parse_scalar(I32, "-0x10"),
            Ok((-16i32).to_le_bytes().to_vec())
        );
        assert_eq!(parse_scalar(U16, "0xFFFF"), Ok(vec![0xff, 0xff]));
        assert_eq!(parse_scalar(F64, "0x10"), Ok(16f64.to_le_bytes().to_vec()));
        assert_eq!(parse_scalar(F32, "2.5"), Ok(2.5f32.to_le_bytes().to_vec()));
    }

    #[test]
    fn out_of_range_and_malformed_are_errors() {
        assert!(parse_scalar(I8, "300").unwrap_err().contains("-128 to 127"));
        assert!(parse_scalar(U8, "-1").is_err());
        assert!(parse_scalar(I32, "2147483648").is_err());
        assert_eq!(
            parse_scalar(I32, "2147483647"),
            Ok(i32::MAX.to_le_bytes().to_vec())
        );
        assert_eq!(
            parse_scalar(U32, "4294967295"),
            Ok(u32::MAX.to_le_bytes().to_vec())
        );
        assert!(parse_scalar(F64, "1e400").is_err());
        assert!(parse_scalar(F64, "inf").is_err());
        assert!(parse_scalar(F32, "1e39").is_err());
        assert!(parse_scalar(Bool, "2").is_err());
        assert!(parse_scalar(Bool, "0x02").is_err());
        assert_eq!(parse_scalar(Bool, "true"), Ok(vec![1]));
        assert!(parse_scalar(I16, "0x0é0").is_err());
        assert!(parse_scalar(I16, "0x").is_err());
        assert!(parse_scalar(I16, "--1").is_err());
        assert!(parse_scalar(I16, "1_000").is_err());
    }

    #[test]
    fn halves_round_to_nearest_even() {
        let h = |t: &str| u16::from_le_bytes(parse_scalar(F16, t).unwrap().try_into().unwrap());
        assert_eq!(h("1"), 0x3c00);
        assert_eq!(h("-2"), 0xc000);
        assert_eq!(h("0.5"), 0x3800);
        assert_eq!(h("65504"), 0x7bff);
        assert_eq!(h("0"), 0);
        assert_eq!(h("5.960464477539063e-8"), 0x0001);
        assert_eq!(h("0.1"), 0x2e66);
        assert!(parse_scalar(F16, "65520").is_err());
    }

    #[test]
    fn values_raw_bytes_and_counts() {
        let leaves = [(0, I32), (4, I8)];
        assert_eq!(
            parse_value("7, -1", 8, &leaves, &[9; 8]),
            Ok(vec![7, 0, 0, 0, 0xff, 9, 9, 9])
        );
        assert_eq!(
            parse_value("bytes:0001020304050607", 8, &leaves, &[0; 8]),
            Ok((0..8).collect())
        );
        assert!(
            parse_value("bytes:00", 8, &leaves, &[0; 8])
                .unwrap_err()
                .contains("16 hexadecimal digits")
        );
        assert!(parse_value("bytes:0é", 1, &[], &[0]).is_err());
        assert!(
            parse_value("7", 8, &leaves, &[0; 8])
                .unwrap_err()
                .contains("1 value given")
        );
        assert!(
            parse_value("7", 4, &[], &[0; 4])
                .unwrap_err()
                .contains("bytes:<hex>")
        );
    }
}
