//! The format of the remote cache's entries (public for tools and benches
//! that write or check entries as ptxspec does). A signed entry of the
//! remote cubin cache: the key it was stored under,
//! the architecture, the cubin, and an ed25519 signature over all of them by
//! a writer's secret key. A reader loads an entry only when every part
//! checks out against what it asked for and a key it trusts signed it.

use ed25519_dalek::{Signature, Signer, SigningKey, Verifier, VerifyingKey};

const MAGIC: &[u8; 8] = b"PXSREM01";
/// Magic, key, architecture, length.
const HEADER: usize = 8 + 16 + 4 + 8;
const SIGNATURE: usize = 64;
/// The largest cubin an entry may hold: far above a kernel's, far below
/// what would exhaust a reader.
pub const MAX_CUBIN: u64 = 256 << 20;

/// Why an entry was refused (each counted and said once per process).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Refusal {
    /// Not an entry: too short, another format, a length that disagrees.
    Malformed,
    /// Larger than any cubin ptxspec loads.
    Oversized,
    /// Stored under another key than it says (another value set's cubin).
    OtherKey,
    /// Linked for another architecture.
    OtherArch,
    /// No trusted key signed it.
    Signature,
    /// The signed payload is not a cubin (an ELF file).
    NotCubin,
}

impl Refusal {
    /// The refusal in words, for messages.
    pub fn words(self) -> &'static str {
        match self {
            Refusal::Malformed => "not an entry of ptxspec's remote cache",
            Refusal::Oversized => "larger than any cubin ptxspec loads",
            Refusal::OtherKey => "stored under another key than it was signed for",
            Refusal::OtherArch => "linked for another architecture",
            Refusal::Signature => "not signed by a trusted key",
            Refusal::NotCubin => "signed, but holds no cubin",
        }
    }
}

/// The entry of `cubin`, linked for `arch` and stored under `key`, signed
/// with `secret`.
pub fn seal(secret: &SigningKey, key: u128, arch: u32, cubin: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER + cubin.len() + SIGNATURE);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&key.to_le_bytes());
    out.extend_from_slice(&arch.to_le_bytes());
    out.extend_from_slice(&(cubin.len() as u64).to_le_bytes());
    out.extend_from_slice(cubin);
    let signature = secret.sign(&out);
    out.extend_from_slice(&signature.to_bytes());
    out
}

/// The cubin of `entry` where it is one for `key` and `arch`, signed by
/// one of `trusted`; else why not.
pub fn open(
    entry: &[u8],
    key: u128,
    arch: u32,
    trusted: &[VerifyingKey],
) -> Result<Vec<u8>, Refusal> {
    if entry.len() < HEADER + SIGNATURE || &entry[..8] != MAGIC {
        return Err(Refusal::Malformed);
    }
    let word = |at: usize, n: usize| -> Result<&[u8], Refusal> {
        entry.get(at..at + n).ok_or(Refusal::Malformed)
    };
    let len = u64::from_le_bytes(word(28, 8)?.try_into().map_err(|_| Refusal::Malformed)?);
    if len > MAX_CUBIN {
        return Err(Refusal::Oversized);
    }
    if entry.len() as u64 != HEADER as u64 + len + SIGNATURE as u64 {
        return Err(Refusal::Malformed);
    }
    let signed = &entry[..entry.len() - SIGNATURE];
    let signature =
        Signature::from_slice(&entry[entry.len() - SIGNATURE..]).map_err(|_| Refusal::Signature)?;
    if !trusted.iter().any(|k| k.verify(signed, &signature).is_ok()) {
        return Err(Refusal::Signature);
    }
    // Signed by a trusted writer, but for this request?
    let stored_key = u128::from_le_bytes(word(8, 16)?.try_into().map_err(|_| Refusal::Malformed)?);
    if stored_key != key {
        return Err(Refusal::OtherKey);
    }
    let stored_arch = u32::from_le_bytes(word(24, 4)?.try_into().map_err(|_| Refusal::Malformed)?);
    if stored_arch != arch {
        return Err(Refusal::OtherArch);
    }
    let cubin = &entry[HEADER..HEADER + len as usize];
    if !cubin.starts_with(b"\x7fELF") {
        return Err(Refusal::NotCubin);
    }
    Ok(cubin.to_vec())
}

/// A secret key from its file: 64 hexadecimal digits (what `ptxspec cache
/// keygen` writes), surrounding white space allowed.
pub fn secret_key(text: &str) -> Option<SigningKey> {
    Some(SigningKey::from_bytes(&hex32(text.trim())?))
}

/// The public keys of a trusted-keys file: one a line in hexadecimal; blank
/// lines and `#` comments skipped. A line that is no key is an error naming
/// its number.
pub fn trusted_keys(text: &str) -> Result<Vec<VerifyingKey>, String> {
    let mut keys = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let key = hex32(line)
            .and_then(|b| VerifyingKey::from_bytes(&b).ok())
            .ok_or_else(|| {
                format!(
                    "line {}: not an ed25519 public key (64 hexadecimal digits)",
                    n + 1
                )
            })?;
        keys.push(key);
    }
    Ok(keys)
}

/// 32 bytes from 64 hexadecimal digits.
fn hex32(text: &str) -> Option<[u8; 32]> {
    if text.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, pair) in text.as_bytes().chunks(2).enumerate() {
        let s = std::str::from_utf8(pair).ok()?;
        out[i] = u8::from_str_radix(s, 16).ok()?;
    }
    Some(out)
}

/// Bytes as lowercase hexadecimal.
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A new key pair from the system's randomness: (secret, public) as the
/// files hold them.
pub fn generate_key_pair() -> std::io::Result<(String, String)> {
    use std::io::Read;
    let mut seed = [0u8; 32];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut seed)?;
    let secret = SigningKey::from_bytes(&seed);
    let public = secret.verifying_key();
    Ok((hex(&seed), hex(public.as_bytes())))
}

#[cfg(test)]
mod tests {
    use super::*;

    const CUBIN: &[u8] = b"\x7fELF cubin bytes";

    fn keys() -> (SigningKey, VerifyingKey) {
        let (secret, public) = generate_key_pair().unwrap();
        let s = secret_key(&secret).unwrap();
        let p = trusted_keys(&format!("# mine\n{public}\n")).unwrap()[0];
        (s, p)
    }

    #[test]
    fn a_sealed_entry_opens_for_its_key_and_arch_only() {
        let (s, p) = keys();
        let e = seal(&s, 7, 90, CUBIN);
        assert_eq!(open(&e, 7, 90, &[p]).unwrap(), CUBIN);
        assert_eq!(open(&e, 8, 90, &[p]), Err(Refusal::OtherKey));
        assert_eq!(open(&e, 7, 80, &[p]), Err(Refusal::OtherArch));
        let (_, other) = keys();
        assert_eq!(open(&e, 7, 90, &[other]), Err(Refusal::Signature));
        assert_eq!(open(&e, 7, 90, &[]), Err(Refusal::Signature));
    }

    #[test]
    fn damaged_entries_are_refused() {
        let (s, p) = keys();
        let e = seal(&s, 7, 90, CUBIN);
        for cut in 0..e.len() {
            assert!(open(&e[..cut], 7, 90, &[p]).is_err(), "{cut}");
        }
        for i in 0..e.len() {
            let mut bad = e.clone();
            bad[i] ^= 1;
            assert!(open(&bad, 7, 90, &[p]).is_err(), "{i}");
        }
        let mut huge = e.clone();
        huge[28..36].copy_from_slice(&(MAX_CUBIN + 1).to_le_bytes());
        assert_eq!(open(&huge, 7, 90, &[p]), Err(Refusal::Oversized));
        let not_elf = seal(&s, 7, 90, b"no elf");
        assert_eq!(open(&not_elf, 7, 90, &[p]), Err(Refusal::NotCubin));
    }

    #[test]
    fn key_files() {
        assert!(secret_key("xyz").is_none());
        let e = trusted_keys("abc\n").unwrap_err();
        assert!(e.contains("line 1"), "{e}");
        assert!(trusted_keys("\n# none\n").unwrap().is_empty());
    }
}
