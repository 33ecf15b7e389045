//! The base64 of LLVM's `Support/Base64.cpp` that property files use.
//!
//! Not RFC 4648: bits are packed least-significant first (the first character
//! holds the low six bits of the first byte) and there is no `=` padding; a
//! trailing group of one byte is 2 characters, of two bytes 3 characters.

const TABLE: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Why a string is not this base64.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Base64Error {
    #[error("invalid character {0:?} at position {1}")]
    InvalidChar(char, usize),
    #[error("invalid length {0}: a trailing group must have 2 or 3 characters")]
    InvalidLength(usize),
}

/// Appends the encoding of `bytes` to `out`.
pub(crate) fn encode_into(bytes: &[u8], out: &mut String) {
    out.reserve(bytes.len().div_ceil(3) * 4);
    let ch = |v: u32| TABLE[(v & 0x3f) as usize] as char;
    let mut chunks = bytes.chunks_exact(3);
    for c in &mut chunks {
        let v = c[0] as u32 | (c[1] as u32) << 8 | (c[2] as u32) << 16;
        out.extend([ch(v), ch(v >> 6), ch(v >> 12), ch(v >> 18)]);
    }
    match *chunks.remainder() {
        [b0] => out.extend([ch(b0 as u32), ch(b0 as u32 >> 6)]),
        [b0, b1] => {
            let v = b0 as u32 | (b1 as u32) << 8;
            out.extend([ch(v), ch(v >> 6), ch(v >> 12)]);
        }
        _ => {}
    }
}

#[cfg(test)]
pub(crate) fn encode(bytes: &[u8]) -> String {
    let mut s = String::new();
    encode_into(bytes, &mut s);
    s
}

fn value(c: u8, pos: usize) -> Result<u32, Base64Error> {
    Ok(match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        _ => return Err(Base64Error::InvalidChar(c as char, pos)),
    } as u32)
}

pub(crate) fn decode(text: &str) -> Result<Vec<u8>, Base64Error> {
    let src = text.as_bytes();
    if src.len() % 4 == 1 {
        return Err(Base64Error::InvalidLength(src.len()));
    }
    let mut out = Vec::with_capacity(src.len() * 3 / 4);
    for (g, group) in src.chunks(4).enumerate() {
        let mut v = 0u32;
        for (i, &c) in group.iter().enumerate() {
            v |= value(c, g * 4 + i)? << (6 * i);
        }
        let n = group.len() * 6 / 8; // 4 chars → 3 bytes, 3 → 2, 2 → 1
        out.extend_from_slice(&v.to_le_bytes()[..n]);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hand_checked_vectors() {
        // From DPC++'s sycl-post-link tests (spec-constants padding test):
        // 72 bits, then 20 (int), 'c', 3 padding bytes, true.
        let bytes = decode("IBAAAAAAAAAFAAAAjBAAAEA").unwrap();
        assert_eq!(
            bytes,
            [0x48, 0, 0, 0, 0, 0, 0, 0, 0x14, 0, 0, 0, 0x63, 0, 0, 0, 1]
        );
        assert_eq!(encode(&bytes), "IBAAAAAAAAAFAAAAjBAAAEA");
        // One byte 0xff: low six bits '/' (63), high two bits 'D' (3).
        assert_eq!(encode(&[0xff]), "/D");
        // 0x01 0x02: 0x0201 → 1, 8, 0.
        assert_eq!(encode(&[1, 2]), "BIA");
        assert_eq!(decode("BIA").unwrap(), [1, 2]);
        assert_eq!(encode(&[]), "");
    }

    #[test]
    fn round_trips_every_length() {
        for n in 0..64usize {
            let bytes: Vec<u8> = (0..n).map(|i| (i * 37 + n * 11) as u8).collect();
            let text = encode(&bytes);
            assert_eq!(text.len(), (n * 8).div_ceil(6));
            assert_eq!(decode(&text).unwrap(), bytes);
        }
    }

    #[test]
    fn rejects_bad_input() {
        assert_eq!(decode("AB=C"), Err(Base64Error::InvalidChar('=', 2)));
        assert_eq!(decode("ABCDE"), Err(Base64Error::InvalidLength(5)));
    }
}
