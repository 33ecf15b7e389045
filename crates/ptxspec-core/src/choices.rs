//! The choices that change which code runs, made the same everywhere:
//! what adaptive arguments kept for each variant (its identity: a hash of
//! the image's code, values, architecture, kernel and fixed arguments) —
//! the variant through LTO or PTX, or the generic code.
//!
//! A process records each choice it makes ([`record`]); [`made`] gives them
//! as a [`ChoiceTable`], whose text is one line a choice, sorted, and whose
//! [`digest`](ChoiceTable::digest) two runs (or the ranks of one job)
//! compare. A process *pinned* to a table ([`pin`]) times nothing: each
//! variant takes the table's choice, and one the table does not hold runs
//! the generic code — it never differs from the table. A table read to pin
//! is signed ([`sign`], [`read_signed`]) by a key the reader trusts, as the
//! fleet's entries are: it decides what code runs.

use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock};

use crate::digest::Digest;
use crate::tier_profile::Kept;

/// The first line of a table's text.
const HEADER: &str = "# ptxspec choices v1: variant identity, architecture, kept, kernel";
/// The line that carries a signed table's signature.
#[cfg(feature = "remote")]
const SIGNATURE: &str = "# signature ";
/// The most lines a table holds (a bound on what a file makes this read).
pub const MAX_LINES: usize = 1 << 20;

/// Choices by (variant identity, architecture): what was kept, and the
/// kernel it is of (for people: the identity decides).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ChoiceTable {
    entries: BTreeMap<(String, u32), (Kept, String)>,
}

impl ChoiceTable {
    /// What was kept for the variant `identity` on `sm_<arch>`.
    pub fn get(&self, identity: &Digest, arch: u32) -> Option<Kept> {
        self.entries
            .get(&(identity.hex(), arch))
            .map(|(kept, _)| *kept)
    }

    /// Records a choice (a later one for the same variant replaces it).
    pub fn insert(&mut self, identity: &Digest, arch: u32, kernel: &str, kept: Kept) {
        self.entries
            .insert((identity.hex(), arch), (kept, kernel.to_string()));
    }

    /// How many choices it holds.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The table as text: its header, then a line a choice, sorted.
    pub fn to_text(&self) -> String {
        let mut out = format!("{HEADER}\n");
        for ((identity, arch), (kept, kernel)) in &self.entries {
            out.push_str(&format!("{identity} sm_{arch} {} {kernel}\n", kept.word()));
        }
        out
    }

    /// The SHA-256 of [`to_text`](Self::to_text): the same for every
    /// process that made the same choices.
    pub fn digest(&self) -> Digest {
        Digest::of(self.to_text().as_bytes())
    }

    /// A table's text (a signature line, where there is one, is ignored
    /// here: [`read_signed`] checks it). A malformed line is an error
    /// naming its number.
    pub fn parse(text: &str) -> Result<ChoiceTable, String> {
        let mut table = ChoiceTable::default();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            if table.entries.len() >= MAX_LINES {
                return Err(format!("more than {MAX_LINES} choices"));
            }
            let bad = |what: &str| format!("line {}: {what}", n + 1);
            let mut words = line.split_whitespace();
            let (Some(identity), Some(arch), Some(kept), Some(kernel)) =
                (words.next(), words.next(), words.next(), words.next())
            else {
                return Err(bad("expected IDENTITY sm_ARCH KEPT KERNEL"));
            };
            if identity.len() != 64 || !identity.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(bad("an identity is 64 hexadecimal digits"));
            }
            let arch: u32 = arch
                .strip_prefix("sm_")
                .and_then(|a| a.parse().ok())
                .ok_or_else(|| bad("an architecture is sm_NN"))?;
            let kept = Kept::from_word(kept).ok_or_else(|| bad("kept is lto, ptx or generic"))?;
            table.entries.insert(
                (identity.to_ascii_lowercase(), arch),
                (kept, kernel.to_string()),
            );
        }
        Ok(table)
    }

    /// What differs between this table and `other`, a line each: choices
    /// one holds and the other not, and choices that differ.
    pub fn differences(&self, other: &ChoiceTable) -> Vec<String> {
        let mut out = Vec::new();
        for (key, (kept, kernel)) in &self.entries {
            match other.entries.get(key) {
                None => out.push(format!(
                    "{} sm_{} ({kernel}): {} in the first, none in the second",
                    key.0,
                    key.1,
                    kept.word()
                )),
                Some((k, _)) if k != kept => out.push(format!(
                    "{} sm_{} ({kernel}): {} in the first, {} in the second",
                    key.0,
                    key.1,
                    kept.word(),
                    k.word()
                )),
                Some(_) => {}
            }
        }
        for (key, (kept, kernel)) in &other.entries {
            if !self.entries.contains_key(key) {
                out.push(format!(
                    "{} sm_{} ({kernel}): none in the first, {} in the second",
                    key.0,
                    key.1,
                    kept.word()
                ));
            }
        }
        out
    }
}

/// The choices this process made, and their table's digest, kept up to
/// date as each is recorded (choices are few and rare; the digest is read
/// by every `stats()`).
struct Made {
    table: ChoiceTable,
    digest: Digest,
}

fn made_here() -> &'static Mutex<Made> {
    static MADE: OnceLock<Mutex<Made>> = OnceLock::new();
    MADE.get_or_init(|| {
        let table = ChoiceTable::default();
        Mutex::new(Made {
            digest: table.digest(),
            table,
        })
    })
}

/// Records a choice this process made (a trial's verdict, or one taken
/// from the fleet or a pinned table), on the trace too.
pub fn record(identity: &Digest, arch: u32, kernel: &str, kept: Kept) {
    {
        let mut made = made_here().lock().unwrap_or_else(|p| p.into_inner());
        made.table.insert(identity, arch, kernel, kept);
        made.digest = made.table.digest();
    }
    crate::trace::instant(
        &format!("choice: {}", kept.word()),
        "choices",
        &[
            ("kernel", crate::trace::Arg::Text(kernel)),
            ("arch", crate::trace::Arg::Number(arch.into())),
            ("variant", crate::trace::Arg::Text(&identity.hex())),
        ],
    );
}

/// The choices this process made so far.
pub fn made() -> ChoiceTable {
    made_here()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .table
        .clone()
}

/// How many choices this process made so far, and their table's digest
/// (that of [`made`]'s table), without copying the table.
pub fn made_count_and_digest() -> (usize, Digest) {
    let made = made_here().lock().unwrap_or_else(|p| p.into_inner());
    (made.table.len(), made.digest)
}

fn pinned_table() -> &'static Mutex<Option<std::sync::Arc<ChoiceTable>>> {
    static PINNED: OnceLock<Mutex<Option<std::sync::Arc<ChoiceTable>>>> = OnceLock::new();
    PINNED.get_or_init(Mutex::default)
}

/// Pins this process to `table` (or unpins it, with `None`): from now on
/// no variant is timed; each takes the table's choice, or the generic code
/// where the table holds none.
pub fn pin(table: Option<ChoiceTable>) {
    *pinned_table().lock().unwrap_or_else(|p| p.into_inner()) = table.map(std::sync::Arc::new);
}

/// The table this process is pinned to, if any.
pub fn pinned() -> Option<std::sync::Arc<ChoiceTable>> {
    pinned_table()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone()
}

/// `table`'s text signed with `secret` (a key of `ptxspec cache keygen`):
/// the text, then a signature line.
#[cfg(feature = "remote")]
pub fn sign(table: &ChoiceTable, secret: &ed25519_dalek::SigningKey) -> String {
    use ed25519_dalek::Signer as _;
    let text = table.to_text();
    let signature = secret.sign(&signed_message(&text));
    format!(
        "{text}{SIGNATURE}{}\n",
        crate::lto::remote::entry::hex(&signature.to_bytes())
    )
}

/// A signed table's choices, where one of `trusted` signed exactly its
/// text; else why not (no signature, a signature no trusted key made, a
/// line changed).
#[cfg(feature = "remote")]
pub fn read_signed(
    text: &str,
    trusted: &[ed25519_dalek::VerifyingKey],
) -> Result<ChoiceTable, String> {
    let at = text
        .rfind(SIGNATURE)
        .ok_or("not signed: no signature line (ptxspec sign-choices writes one)")?;
    let (body, sig) = text.split_at(at);
    let signature = crate::tier_profile::from_hex(sig[SIGNATURE.len()..].trim())
        .and_then(|bytes| ed25519_dalek::Signature::from_slice(&bytes).ok())
        .ok_or("the signature line holds no signature")?;
    let message = signed_message(body);
    if !trusted
        .iter()
        .any(|k| k.verify_strict(&message, &signature).is_ok())
    {
        return Err("not signed by a trusted key (or changed since it was signed)".into());
    }
    ChoiceTable::parse(body)
}

/// What a table's signature signs: a domain and the SHA-256 of its text.
#[cfg(feature = "remote")]
fn signed_message(text: &str) -> Vec<u8> {
    let mut m = b"ptxspec choices table v1\0".to_vec();
    m.extend_from_slice(Digest::of(text.as_bytes()).as_bytes());
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u8) -> Digest {
        Digest::of(&[n])
    }

    /// A table reads back as written, its digest follows its choices and
    /// not their order of making, and the differences of two tables name
    /// each choice one lacks or makes otherwise.
    #[test]
    fn tables_read_back_digest_and_differ() {
        let mut a = ChoiceTable::default();
        a.insert(&id(1), 90, "layernorm", Kept::Lto);
        a.insert(&id(2), 90, "softmax", Kept::Generic);
        let mut b = ChoiceTable::default();
        b.insert(&id(2), 90, "softmax", Kept::Generic);
        b.insert(&id(1), 90, "layernorm", Kept::Lto);
        assert_eq!(a.digest(), b.digest());
        assert_eq!(ChoiceTable::parse(&a.to_text()).unwrap(), a);
        assert!(a.differences(&b).is_empty());
        b.insert(&id(1), 90, "layernorm", Kept::Ptx);
        b.insert(&id(3), 80, "gelu", Kept::Ptx);
        assert_ne!(a.digest(), b.digest());
        let d = a.differences(&b);
        assert_eq!(d.len(), 2, "{d:?}");
        assert!(
            d.iter()
                .any(|l| l.contains("lto in the first, ptx in the second"))
        );
        assert!(
            d.iter()
                .any(|l| l.contains("none in the first, ptx in the second"))
        );
        for bad in [
            "x sm_90 lto k",
            &format!("{} 90 lto k", id(1).hex()),
            &format!("{} sm_90 best k", id(1).hex()),
        ] {
            assert!(
                ChoiceTable::parse(bad).unwrap_err().starts_with("line 1:"),
                "{bad}"
            );
        }
    }

    /// The count and digest kept as choices are recorded are those of the
    /// table `made` copies, after each record (a replaced choice too).
    #[test]
    fn the_kept_digest_follows_every_record() {
        let check = || {
            let (count, digest) = made_count_and_digest();
            let table = made();
            assert_eq!((count, digest), (table.len(), table.digest()));
        };
        check();
        for (n, kept) in [(201, Kept::Lto), (202, Kept::Ptx), (201, Kept::Generic)] {
            record(&id(n), 90, "k", kept);
            check();
        }
        assert_eq!(made().get(&id(201), 90), Some(Kept::Generic));
    }

    /// A signed table reads where a trusted key signed exactly its text:
    /// not with another key, not with a line changed, not unsigned.
    #[cfg(feature = "remote")]
    #[test]
    fn signed_tables_are_checked() {
        let secret = ed25519_dalek::SigningKey::from_bytes(&[7; 32]);
        let other = ed25519_dalek::SigningKey::from_bytes(&[9; 32]);
        let mut t = ChoiceTable::default();
        t.insert(&id(1), 90, "k", Kept::Lto);
        let signed = sign(&t, &secret);
        let trusted = [secret.verifying_key()];
        assert_eq!(read_signed(&signed, &trusted).unwrap(), t);
        assert!(read_signed(&signed, &[other.verifying_key()]).is_err());
        assert!(read_signed(&signed.replace(" lto ", " ptx "), &trusted).is_err());
        assert!(read_signed(&t.to_text(), &trusted).is_err());
        // A signature line of odd length or with a non-hex digit holds none.
        let hex = signed.rsplit(SIGNATURE).next().unwrap().trim().to_string();
        for bad in [&hex[1..], &format!("{}g", &hex[1..])] {
            let text = format!("{}{SIGNATURE}{bad}\n", t.to_text());
            let e = read_signed(&text, &trusted).unwrap_err();
            assert!(e.contains("holds no signature"), "{e}");
        }
    }
}
