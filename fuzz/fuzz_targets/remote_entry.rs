//! A remote cache entry, as a hostile store could return it, opened for a
//! fixed key and architecture with one trusted key. What must hold: an
//! entry opens only where it is exactly what the trusted key sealed for
//! that key and architecture (ed25519 signatures are deterministic, so
//! sealing the cubin again gives the same bytes).
#![no_main]

use libfuzzer_sys::fuzz_target;
use ptxspec_core::digest::Digest;
use ptxspec_core::lto::remote::entry::{open, seal, secret_key};

/// The fuzzer's writer key (a fixed seed: the corpus's entries are signed
/// with it).
const SECRET: &str = "4f2b1a6c9d8e7f6051423324150607f8e9dacbbcadbecfd0e1f2031425364758";

fuzz_target!(|data: &[u8]| {
    let secret = secret_key(SECRET).expect("the fuzzer's secret key");
    let trusted = [secret.verifying_key()];
    let key = Digest::of(b"ptxspec fuzz key");
    if let Ok(cubin) = open(data, &key, 90, &trusted) {
        assert_eq!(
            seal(&secret, &key, 90, &cubin),
            data,
            "an entry opened that the trusted key did not seal"
        );
    }
});
