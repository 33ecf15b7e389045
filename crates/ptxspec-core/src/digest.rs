//! Identities of content: SHA-256 digests, and the canonical encoding that
//! every cache key is made of.
//!
//! A key that picks code to run must not collide, even for inputs chosen
//! to make it collide: every cache of ptxspec (memory, disk, the remote
//! store, compiled source units) and every file hash in a `.prop` is a
//! SHA-256 digest ([`Digest`]) — RustCrypto's implementation, which uses
//! the processor's SHA instructions where it has them.
//!
//! What a key hashes is written by a [`KeyEncoder`]: a domain that names
//! what is keyed and the layout's version, then fields, each prefixed by
//! its length. Two different lists of fields therefore never encode alike
//! (no field can run into the next), and keys of different domains never
//! meet.

use sha2::{Digest as _, Sha256};

/// A SHA-256 digest.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Digest(pub [u8; 32]);

impl Digest {
    /// The digest of `bytes`.
    pub fn of(bytes: &[u8]) -> Digest {
        Digest(Sha256::digest(bytes).into())
    }

    /// The digest of several pieces read as one (no copy of them made).
    pub fn of_parts<'a>(parts: impl IntoIterator<Item = &'a [u8]>) -> Digest {
        let mut h = Sha256::new();
        for p in parts {
            h.update(p);
        }
        Digest(h.finalize().into())
    }

    /// Its 32 bytes.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// 64 lowercase hexadecimal digits.
    pub fn hex(&self) -> String {
        let mut s = String::with_capacity(64);
        for b in self.0 {
            s.push(char::from_digit((b >> 4) as u32, 16).unwrap_or('0'));
            s.push(char::from_digit((b & 15) as u32, 16).unwrap_or('0'));
        }
        s
    }

    /// A digest from 64 hexadecimal digits (either case); `None` for any
    /// other text.
    pub fn from_hex(text: &str) -> Option<Digest> {
        let text = text.as_bytes();
        if text.len() != 64 {
            return None;
        }
        let mut out = [0u8; 32];
        for (o, pair) in out.iter_mut().zip(text.chunks_exact(2)) {
            let digit = |c: u8| (c as char).to_digit(16);
            *o = (digit(pair[0])? << 4 | digit(pair[1])?) as u8;
        }
        Some(Digest(out))
    }
}

impl std::fmt::Debug for Digest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Digest({})", self.hex())
    }
}

impl std::fmt::Display for Digest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.hex())
    }
}

/// The canonical encoding of a key: a domain, then fields in the order the
/// domain's writer gives them, each a little-endian `u64` length and its
/// bytes. The encoding itself serves where a key is compared whole (this
/// process's memory cache); its [`digest`](Self::digest) wherever a key
/// leaves the process or names a file.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct KeyEncoder {
    bytes: Vec<u8>,
}

impl KeyEncoder {
    /// A key of `domain`: what is keyed and the version of its layout
    /// (`"ptxspec cubin v4"`). A change of what a domain's keys hold must
    /// change its name, so that no old key is read as a new one.
    pub fn new(domain: &str) -> KeyEncoder {
        let mut k = KeyEncoder {
            bytes: Vec::with_capacity(96 + domain.len()),
        };
        k.bytes(domain.as_bytes());
        k
    }

    /// Appends a field of bytes.
    pub fn bytes(&mut self, field: &[u8]) -> &mut KeyEncoder {
        self.bytes
            .extend_from_slice(&(field.len() as u64).to_le_bytes());
        self.bytes.extend_from_slice(field);
        self
    }

    /// Appends a field of text.
    pub fn str(&mut self, field: &str) -> &mut KeyEncoder {
        self.bytes(field.as_bytes())
    }

    /// Appends a number (as a field of its 8 little-endian bytes).
    pub fn u64(&mut self, field: u64) -> &mut KeyEncoder {
        self.bytes(&field.to_le_bytes())
    }

    /// Appends a digest.
    pub fn digest_field(&mut self, field: &Digest) -> &mut KeyEncoder {
        self.bytes(field.as_bytes())
    }

    /// Appends an optional field: a marker of presence, then the field.
    pub fn optional(&mut self, field: Option<&[u8]>) -> &mut KeyEncoder {
        match field {
            None => self.u64(0),
            Some(b) => self.u64(1).bytes(b),
        }
    }

    /// Appends a list: its length, then each item as a field.
    pub fn list<'a>(&mut self, items: impl ExactSizeIterator<Item = &'a [u8]>) -> &mut KeyEncoder {
        self.u64(items.len() as u64);
        for i in items {
            self.bytes(i);
        }
        self
    }

    /// The encoding so far.
    pub fn encoded(&self) -> &[u8] {
        &self.bytes
    }

    /// The encoding, taken.
    pub fn into_encoded(self) -> Vec<u8> {
        self.bytes
    }

    /// The SHA-256 of the encoding.
    pub fn digest(&self) -> Digest {
        Digest::of(&self.bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_are_sha256() {
        // FIPS 180-2's test vector.
        assert_eq!(
            Digest::of(b"abc").hex(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(Digest::of_parts([&b"a"[..], b"bc"]), Digest::of(b"abc"));
        let d = Digest::of(b"x");
        assert_eq!(Digest::from_hex(&d.hex()), Some(d));
        assert_eq!(Digest::from_hex(&d.hex().to_uppercase()), Some(d));
        for bad in ["", "00", &"g".repeat(64), &"0".repeat(63), &"0".repeat(65)] {
            assert_eq!(Digest::from_hex(bad), None, "{bad}");
        }
    }

    /// Fields never run into each other: moving a byte from one field to
    /// the next, splitting a field or joining two, changes the encoding
    /// (a generated family of splits of one byte string).
    #[test]
    fn no_two_field_lists_encode_alike() {
        let text = b"abcdef";
        let mut seen = std::collections::HashMap::new();
        // Every way of cutting `text` into fields (2^5 of them), and the
        // same with an empty field in front.
        for cuts in 0u32..32 {
            for lead in [false, true] {
                let mut fields: Vec<&[u8]> = Vec::new();
                if lead {
                    fields.push(b"");
                }
                let mut start = 0;
                for i in 1..text.len() {
                    if cuts & (1 << (i - 1)) != 0 {
                        fields.push(&text[start..i]);
                        start = i;
                    }
                }
                fields.push(&text[start..]);
                let mut k = KeyEncoder::new("test");
                for f in &fields {
                    k.bytes(f);
                }
                let shown = format!("{fields:?}");
                if let Some(other) = seen.insert(k.into_encoded(), shown.clone()) {
                    panic!("{shown} and {other} encode alike");
                }
            }
        }
        // Domains, optional fields and lists are fields too.
        assert_ne!(
            KeyEncoder::new("a").encoded(),
            KeyEncoder::new("b").encoded()
        );
        assert_ne!(
            KeyEncoder::new("a").optional(None).encoded(),
            KeyEncoder::new("a").optional(Some(b"")).encoded()
        );
        assert_ne!(
            KeyEncoder::new("a")
                .list([&b"x"[..], b"y"].into_iter())
                .encoded(),
            KeyEncoder::new("a")
                .list([&b"xy"[..]].into_iter())
                .encoded()
        );
    }
}
