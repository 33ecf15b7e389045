//! The fast, non-cryptographic hasher for maps whose keys no adversary
//! chooses (the post-link's names and statement indices, the runtime's maps
//! keyed by an image's address): the standard SipHash resists adversarial
//! keys, at several times the cost per key. rustc's FxHash, from the
//! `rustc-hash` crate.

pub use rustc_hash::{FxHashMap, FxHashSet, FxHasher};
