//! A Redis server's reply, as a hostile or broken store could send it, read
//! by the remote tier's own client within a call's limits (the first byte
//! chooses them): no panic, no reply past its limits, and an error for
//! what is not RESP.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&pick, reply)) = data.split_first() else {
        return;
    };
    let bulk = [0u64, 7, 64, 4096][pick as usize % 4];
    let elements = [0u64, 1, 16, 4096][(pick as usize / 4) % 4];
    let _ = ptxspec_core::lto::remote::fuzz_reply(reply, bulk, elements);
});
