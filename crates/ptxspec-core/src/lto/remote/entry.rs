//! The format of the remote cache's entries (public for tools and benches
//! that write or check entries as ptxspec does), and of its key files.
//!
//! An entry holds the key it was stored under (the SHA-256 of everything
//! its cubin depends on), the architecture, the cubin, and an ed25519
//! signature by a writer's secret key over a message that binds all three:
//! a domain, the whole key, the architecture, the cubin's length and the
//! cubin's own SHA-256. A reader loads an entry only when a key it trusts
//! signed exactly that, verified strictly (`verify_strict`: no small-order
//! keys or commitments, no malleable signatures), for the key and
//! architecture it asked for.
//!
//! Key files are text: a secret key is 64 hexadecimal digits (its 32-byte
//! seed) in a file only its owner can read; a trusted-keys file holds
//! public keys, 64 hexadecimal digits a line, blank lines and `#` comments
//! skipped. A public key of small order (such as 32 zero bytes, a
//! plausible placeholder) would verify forged entries: it is refused.

use ed25519_dalek::{Signature, Signer, SigningKey, VerifyingKey};

use crate::digest::Digest;

const MAGIC: &[u8; 8] = b"PXSREM02";
/// Magic, key, architecture, length.
const HEADER: usize = 8 + 32 + 4 + 8;
const SIGNATURE: usize = 64;
/// What a signature signs before the entry's own fields: no signature made
/// for anything else of a writer's key can pass for an entry's.
const DOMAIN: &[u8] = b"ptxspec remote cubin entry v2\0";
/// The largest cubin an entry may hold: far above a kernel's, far below
/// what would exhaust a reader.
pub const MAX_CUBIN: u64 = 256 << 20;
/// The largest entry: a cubin of [`MAX_CUBIN`] with its header and
/// signature. No reply larger than this is read from a store.
pub const MAX_ENTRY: u64 = MAX_CUBIN + (HEADER + SIGNATURE) as u64;

/// Why an entry was refused (each counted and said once per process).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Refusal {
    /// Not an entry: too short, another format, a length that disagrees.
    Malformed,
    /// Larger than any entry of its kind ptxspec loads (found by its size,
    /// before it is read).
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
    /// Every reason, in declaration order (`r as usize` indexes it).
    pub const ALL: [Refusal; 6] = [
        Refusal::Malformed,
        Refusal::Oversized,
        Refusal::OtherKey,
        Refusal::OtherArch,
        Refusal::Signature,
        Refusal::NotCubin,
    ];
}

impl Refusal {
    /// The refusal in words, for messages.
    pub fn words(self) -> &'static str {
        match self {
            Refusal::Malformed => "not an entry of ptxspec's remote cache",
            Refusal::Oversized => "larger than any entry of its kind ptxspec loads",
            Refusal::OtherKey => "stored under another key than it was signed for",
            Refusal::OtherArch => "linked for another architecture",
            Refusal::Signature => "not signed by a trusted key",
            Refusal::NotCubin => "signed, but holds no cubin",
        }
    }
}

/// What an entry holds: a cubin, or the verdict of a trial of adaptive
/// arguments (what the fleet kept for a variant). Each kind has its own
/// magic and signing domain: no signature of one passes for the other.
#[derive(Clone, Copy)]
enum Kind {
    Cubin,
    Verdict,
}

impl Kind {
    fn magic(self) -> &'static [u8; 8] {
        match self {
            Kind::Cubin => MAGIC,
            Kind::Verdict => VERDICT_MAGIC,
        }
    }

    fn domain(self) -> &'static [u8] {
        match self {
            Kind::Cubin => DOMAIN,
            Kind::Verdict => VERDICT_DOMAIN,
        }
    }

    fn max(self) -> u64 {
        match self {
            Kind::Cubin => MAX_CUBIN,
            Kind::Verdict => MAX_VERDICT,
        }
    }
}

const VERDICT_MAGIC: &[u8; 8] = b"PXSVRD01";
const VERDICT_DOMAIN: &[u8] = b"ptxspec remote adaptive verdict v1\0";
/// The largest verdict: a word (`lto`, `ptx`, `generic`).
pub const MAX_VERDICT: u64 = 16;
/// The largest verdict entry.
pub const MAX_VERDICT_ENTRY: u64 = MAX_VERDICT + (HEADER + SIGNATURE) as u64;

/// What a signature of an entry of `kind` signs.
fn message(kind: Kind, key: &Digest, arch: u32, payload: &[u8]) -> Vec<u8> {
    let domain = kind.domain();
    let mut m = Vec::with_capacity(domain.len() + 32 + 4 + 8 + 32);
    m.extend_from_slice(domain);
    m.extend_from_slice(key.as_bytes());
    m.extend_from_slice(&arch.to_le_bytes());
    m.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    m.extend_from_slice(Digest::of(payload).as_bytes());
    m
}

/// The entry of `cubin`, linked for `arch` and stored under `key`, signed
/// with `secret`.
pub fn seal(secret: &SigningKey, key: &Digest, arch: u32, cubin: &[u8]) -> Vec<u8> {
    seal_kind(Kind::Cubin, secret, key, arch, cubin)
}

/// The entry of a verdict (`word`: what a trial of adaptive arguments
/// kept) for the variant of identity `key` on `sm_<arch>`, signed with
/// `secret`.
pub fn seal_verdict(secret: &SigningKey, key: &Digest, arch: u32, word: &[u8]) -> Vec<u8> {
    seal_kind(Kind::Verdict, secret, key, arch, word)
}

fn seal_kind(kind: Kind, secret: &SigningKey, key: &Digest, arch: u32, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER + payload.len() + SIGNATURE);
    out.extend_from_slice(kind.magic());
    out.extend_from_slice(key.as_bytes());
    out.extend_from_slice(&arch.to_le_bytes());
    out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    out.extend_from_slice(payload);
    let signature = secret.sign(&message(kind, key, arch, payload));
    out.extend_from_slice(&signature.to_bytes());
    out
}

/// The cubin of `entry` where it is one for `key` and `arch`, signed by
/// one of `trusted`; else why not.
pub fn open(
    entry: &[u8],
    key: &Digest,
    arch: u32,
    trusted: &[VerifyingKey],
) -> Result<Vec<u8>, Refusal> {
    let cubin = open_kind(Kind::Cubin, entry, key, arch, trusted)?;
    if !cubin.starts_with(b"\x7fELF") {
        return Err(Refusal::NotCubin);
    }
    Ok(cubin)
}

/// The verdict of `entry` where it is one for `key` and `arch`, signed by
/// one of `trusted`; else why not (what the word means is the caller's).
pub fn open_verdict(
    entry: &[u8],
    key: &Digest,
    arch: u32,
    trusted: &[VerifyingKey],
) -> Result<Vec<u8>, Refusal> {
    open_kind(Kind::Verdict, entry, key, arch, trusted)
}

fn open_kind(
    kind: Kind,
    entry: &[u8],
    key: &Digest,
    arch: u32,
    trusted: &[VerifyingKey],
) -> Result<Vec<u8>, Refusal> {
    if entry.len() < HEADER + SIGNATURE || &entry[..8] != kind.magic() {
        return Err(Refusal::Malformed);
    }
    let field = |at: usize, n: usize| -> Result<&[u8], Refusal> {
        entry.get(at..at + n).ok_or(Refusal::Malformed)
    };
    let stored_key = Digest(field(8, 32)?.try_into().map_err(|_| Refusal::Malformed)?);
    let stored_arch = u32::from_le_bytes(field(40, 4)?.try_into().map_err(|_| Refusal::Malformed)?);
    let len = u64::from_le_bytes(field(44, 8)?.try_into().map_err(|_| Refusal::Malformed)?);
    if len > kind.max() {
        return Err(Refusal::Oversized);
    }
    if entry.len() as u64 != HEADER as u64 + len + SIGNATURE as u64 {
        return Err(Refusal::Malformed);
    }
    let payload = &entry[HEADER..HEADER + len as usize];
    let signature =
        Signature::from_slice(&entry[entry.len() - SIGNATURE..]).map_err(|_| Refusal::Signature)?;
    let signed = message(kind, &stored_key, stored_arch, payload);
    if !trusted
        .iter()
        .any(|k| k.verify_strict(&signed, &signature).is_ok())
    {
        return Err(Refusal::Signature);
    }
    // Signed by a trusted writer, but for this request?
    if stored_key != *key {
        return Err(Refusal::OtherKey);
    }
    if stored_arch != arch {
        return Err(Refusal::OtherArch);
    }
    Ok(payload.to_vec())
}

/// A secret key from its file's text: 64 hexadecimal digits (what `ptxspec
/// cache keygen` writes), surrounding white space allowed.
pub fn secret_key(text: &str) -> Result<SigningKey, String> {
    hex32(text.trim())
        .map(|seed| SigningKey::from_bytes(&seed))
        .ok_or_else(|| "not a secret key (64 hexadecimal digits)".to_string())
}

/// The public keys of a trusted-keys file's text. A line that is no key,
/// or a key of small order (which would verify forged entries), is an
/// error naming its number.
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
        if key.is_weak() {
            return Err(format!(
                "line {}: a weak public key (a point of small order, which verifies forged \
                 signatures): use a key `ptxspec cache keygen` made",
                n + 1
            ));
        }
        keys.push(key);
    }
    Ok(keys)
}

/// 32 bytes from 64 hexadecimal digits.
fn hex32(text: &str) -> Option<[u8; 32]> {
    Digest::from_hex(text).map(|d| d.0)
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

/// Makes a new key pair and writes it: the secret key to `secret` (mode
/// 0600), the public key to `public` (mode 0644), each a line of 64
/// hexadecimal digits. Both must be new files: where either path exists
/// (a file, a folder or a link), nothing is written. Each is written whole
/// to a temporary name beside it, flushed to the disk, and only then linked
/// at its name — which fails rather than replace anything there — so a full
/// disk or a process killed mid-write leaves no key file, empty or short,
/// at either name (a retry then works); where the public key cannot be
/// written, the secret key written just before is removed again. Returns
/// the public key.
pub fn write_key_pair(
    secret: &std::path::Path,
    public: &std::path::Path,
) -> std::io::Result<String> {
    for path in [secret, public] {
        if std::fs::symlink_metadata(path).is_ok() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                format!(
                    "{} exists: key files are written new, never over another",
                    path.display()
                ),
            ));
        }
    }
    let (s, p) = generate_key_pair()?;
    write_new_file(secret, 0o600, &format!("{s}\n"))?;
    if let Err(e) = write_new_file(public, 0o644, &format!("{p}\n")) {
        let _ = std::fs::remove_file(secret);
        return Err(e);
    }
    Ok(p)
}

/// Writes `text` to the new file `path` with `mode`: whole, under a
/// temporary name beside it, synced, then hard-linked at `path` (which
/// fails where anything is there) and the temporary name removed.
fn write_new_file(path: &std::path::Path, mode: u32, text: &str) -> std::io::Result<()> {
    use std::io::Write as _;
    let named =
        |e: std::io::Error| std::io::Error::new(e.kind(), format!("{}: {e}", path.display()));
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(std::path::Path::new("."));
    let name = path
        .file_name()
        .map_or_else(|| "key".into(), |n| n.to_string_lossy().into_owned());
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let tmp = dir.join(format!(
        "{}{}-{nanos}",
        crate::files::temporary_prefix(&name),
        std::process::id()
    ));
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, mode);
    let written = options
        .open(&tmp)
        .and_then(|mut f| f.write_all(text.as_bytes()).and_then(|()| f.sync_all()))
        .and_then(|()| std::fs::hard_link(&tmp, path));
    let _ = std::fs::remove_file(&tmp);
    written.map_err(named)
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

    fn key(n: u8) -> Digest {
        Digest([n; 32])
    }

    /// A verdict opens as a verdict for its key and architecture only; a
    /// cubin entry never opens as a verdict nor a verdict as a cubin entry
    /// (another magic, another signing domain), even with the magic
    /// swapped; a verdict over its bound is refused.
    #[test]
    fn verdicts_and_cubins_never_pass_for_each_other() {
        let (s, p) = keys();
        let v = seal_verdict(&s, &key(7), 90, b"ptx");
        assert_eq!(open_verdict(&v, &key(7), 90, &[p]).unwrap(), b"ptx");
        assert_eq!(open_verdict(&v, &key(8), 90, &[p]), Err(Refusal::OtherKey));
        assert_eq!(open_verdict(&v, &key(7), 80, &[p]), Err(Refusal::OtherArch));
        assert_eq!(open(&v, &key(7), 90, &[p]), Err(Refusal::Malformed));
        let long_cubin = [CUBIN, &[0u8; 48][..]].concat();
        let c = seal(&s, &key(7), 90, &long_cubin);
        assert_eq!(open_verdict(&c, &key(7), 90, &[p]), Err(Refusal::Malformed));
        let mut as_verdict = c.clone();
        as_verdict[..8].copy_from_slice(VERDICT_MAGIC);
        assert_eq!(
            open_verdict(&as_verdict, &key(7), 90, &[p]),
            Err(Refusal::Oversized),
            "a cubin's length is over a verdict's"
        );
        let small = seal(&s, &key(7), 90, b"\x7fELF");
        let mut as_verdict = small.clone();
        as_verdict[..8].copy_from_slice(VERDICT_MAGIC);
        assert_eq!(
            open_verdict(&as_verdict, &key(7), 90, &[p]),
            Err(Refusal::Signature),
            "signed in the cubins' domain"
        );
        let mut as_cubin = seal_verdict(&s, &key(7), 90, b"\x7fELF");
        as_cubin[..8].copy_from_slice(MAGIC);
        assert_eq!(open(&as_cubin, &key(7), 90, &[p]), Err(Refusal::Signature));
        let long = seal_verdict(&s, &key(7), 90, &[b'x'; MAX_VERDICT as usize + 1]);
        assert_eq!(
            open_verdict(&long, &key(7), 90, &[p]),
            Err(Refusal::Oversized)
        );
    }

    #[test]
    fn a_sealed_entry_opens_for_its_key_and_arch_only() {
        let (s, p) = keys();
        let e = seal(&s, &key(7), 90, CUBIN);
        assert_eq!(open(&e, &key(7), 90, &[p]).unwrap(), CUBIN);
        assert_eq!(open(&e, &key(8), 90, &[p]), Err(Refusal::OtherKey));
        assert_eq!(open(&e, &key(7), 80, &[p]), Err(Refusal::OtherArch));
        let (_, other) = keys();
        assert_eq!(open(&e, &key(7), 90, &[other]), Err(Refusal::Signature));
        assert_eq!(open(&e, &key(7), 90, &[]), Err(Refusal::Signature));
    }

    /// The signature binds every field: an entry of a trusted writer whose
    /// key, architecture or cubin is replaced (one bit at a time, in every
    /// byte) is refused, and so is every truncation.
    #[test]
    fn damaged_entries_are_refused() {
        let (s, p) = keys();
        let e = seal(&s, &key(7), 90, CUBIN);
        for cut in 0..e.len() {
            assert!(open(&e[..cut], &key(7), 90, &[p]).is_err(), "{cut}");
        }
        for i in 0..e.len() {
            for bit in 0..8 {
                let mut bad = e.clone();
                bad[i] ^= 1 << bit;
                assert!(open(&bad, &key(7), 90, &[p]).is_err(), "{i}:{bit}");
                // Asked for what the damaged entry now claims: still refused.
                let claimed = Digest(bad[8..40].try_into().unwrap());
                let arch = u32::from_le_bytes(bad[40..44].try_into().unwrap());
                assert!(open(&bad, &claimed, arch, &[p]).is_err(), "{i}:{bit}");
            }
        }
        let mut huge = e.clone();
        huge[44..52].copy_from_slice(&(MAX_CUBIN + 1).to_le_bytes());
        assert_eq!(open(&huge, &key(7), 90, &[p]), Err(Refusal::Oversized));
        let not_elf = seal(&s, &key(7), 90, b"no elf");
        assert_eq!(open(&not_elf, &key(7), 90, &[p]), Err(Refusal::NotCubin));
    }

    /// The eight points of small order on Ed25519 (their canonical
    /// encodings), each of which a naive verification lets forge: every one
    /// is refused when a trusted-keys file is read, by line number.
    #[test]
    fn weak_keys_are_refused_by_line() {
        let small_order = [
            "0000000000000000000000000000000000000000000000000000000000000000",
            "0100000000000000000000000000000000000000000000000000000000000000",
            "ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
            "0000000000000000000000000000000000000000000000000000000000000080",
            "26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05",
            "26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc85",
            "c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a",
            "c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac03fa",
        ];
        let (_, good) = generate_key_pair().unwrap();
        for weak in small_order {
            if VerifyingKey::from_bytes(&hex32(weak).unwrap()).is_err() {
                // Not even a point: refused as no key.
                let e = trusted_keys(&format!("{good}\n\n{weak}\n")).unwrap_err();
                assert!(e.starts_with("line 3:"), "{weak}: {e}");
                continue;
            }
            let e = trusted_keys(&format!("{good}\n# a comment\n{weak}\n")).unwrap_err();
            assert!(
                e.starts_with("line 3:") && e.contains("weak"),
                "{weak}: {e}"
            );
        }
    }

    /// Entries forged with no secret key against a small-order key verify
    /// nowhere: signatures of the identity point's shape (R = identity,
    /// s = 0) for the weak keys a lax reader might hold.
    #[test]
    fn forged_signatures_for_weak_keys_do_not_verify() {
        for weak in [
            "0100000000000000000000000000000000000000000000000000000000000000",
            "ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
        ] {
            let k = VerifyingKey::from_bytes(&hex32(weak).unwrap()).unwrap();
            let mut forged = Vec::new();
            forged.extend_from_slice(MAGIC);
            forged.extend_from_slice(key(7).as_bytes());
            forged.extend_from_slice(&90u32.to_le_bytes());
            forged.extend_from_slice(&(CUBIN.len() as u64).to_le_bytes());
            forged.extend_from_slice(CUBIN);
            let mut sig = [0u8; 64];
            sig[0] = 1; // R: the identity's encoding; s = 0
            forged.extend_from_slice(&sig);
            assert_eq!(
                open(&forged, &key(7), 90, &[k]),
                Err(Refusal::Signature),
                "{weak}"
            );
        }
    }

    /// Key pairs are written whole or not at all: an existing secret or
    /// public file (or a link at either path) stops the write before
    /// anything is written, and both files read back as a pair.
    #[test]
    fn key_pairs_are_written_whole_or_not_at_all() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("ptxspec-keys-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let (s, p) = (dir.join("k.secret"), dir.join("k.pub"));
        let public = write_key_pair(&s, &p).unwrap();
        let mode = |f: &std::path::Path| std::fs::metadata(f).unwrap().permissions().mode() & 0o777;
        assert_eq!((mode(&s), mode(&p)), (0o600, 0o644));
        let secret = secret_key(&std::fs::read_to_string(&s).unwrap()).unwrap();
        let trusted = trusted_keys(&std::fs::read_to_string(&p).unwrap()).unwrap();
        assert_eq!(trusted, [secret.verifying_key()]);
        assert_eq!(public, hex(secret.verifying_key().as_bytes()));
        // Either path taken: nothing is written, the old files are kept.
        let before = (std::fs::read(&s).unwrap(), std::fs::read(&p).unwrap());
        for (new_s, new_p) in [
            (s.clone(), dir.join("new.pub")),
            (dir.join("new.secret"), p.clone()),
        ] {
            assert!(write_key_pair(&new_s, &new_p).is_err());
            assert!(!dir.join("new.pub").exists() && !dir.join("new.secret").exists());
        }
        std::os::unix::fs::symlink("/nonexistent", dir.join("dangling")).unwrap();
        assert!(write_key_pair(&dir.join("dangling"), &dir.join("n2.pub")).is_err());
        assert!(!dir.join("n2.pub").exists());
        assert_eq!(
            before,
            (std::fs::read(&s).unwrap(), std::fs::read(&p).unwrap())
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn key_files() {
        assert!(secret_key("xyz").is_err());
        let e = trusted_keys("abc\n").unwrap_err();
        assert!(e.contains("line 1"), "{e}");
        assert!(trusted_keys("\n# none\n").unwrap().is_empty());
    }
}
