//! The names a fleet's entries, leases, verdicts and counters have in the
//! store: each within the trust domain of the keys its readers trust, so
//! that fleets sharing a store but trusting other keys never read, wait
//! for or count each other's.

use ed25519_dalek::VerifyingKey;

use crate::digest::Digest;

/// The trust domain of `trusted`: the SHA-256 of the keys in ascending
/// order, each once — the same for every process given the same keys, in
/// any order or repeated.
pub(super) fn trust_domain(trusted: &[VerifyingKey]) -> Digest {
    let mut keys: Vec<&[u8; 32]> = trusted.iter().map(VerifyingKey::as_bytes).collect();
    keys.sort_unstable();
    keys.dedup();
    let mut encoder = crate::digest::KeyEncoder::new("ptxspec remote trust domain");
    encoder.list(keys.into_iter().map(|k| &k[..]));
    Digest::of(encoder.encoded())
}

/// The store's name of the entry of `key` in trust domain `domain`.
pub(super) fn store_key(domain: &Digest, key: &Digest) -> String {
    format!("ptxspec:cubin:v3:{domain}:{key}")
}

/// The store's name of the counters of trust domain `domain`: fleets that
/// share a store and trust other keys count apart, as they link apart.
pub(super) fn counters_key(domain: &Digest) -> String {
    format!("ptxspec:stats:v2:{domain}")
}

/// The store's name of the lease on linking `key` in trust domain
/// `domain`.
pub(super) fn lease_key(domain: &Digest, key: &Digest) -> String {
    format!("ptxspec:lease:v3:{domain}:{key}")
}

/// The store's name of the verdict of the adaptive variant `key` (its
/// identity) in trust domain `domain`.
pub(super) fn verdict_key(domain: &Digest, key: &Digest) -> String {
    format!("ptxspec:verdict:v1:{domain}:{key}")
}

/// The store's name of the lease on timing the adaptive variant `key` (its
/// identity) for the fleet, in trust domain `domain`.
pub(super) fn trial_lease_key(domain: &Digest, key: &Digest) -> String {
    format!("ptxspec:trial:v1:{domain}:{key}")
}
