//! A SPIR-V module: its specialization constants read, and the module
//! specialized with its defaults (kept specializable, and frozen); a module
//! specialized reads back.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if ptxspec_core::spirv::read(data, &Default::default()).is_err() {
        return;
    }
    for freeze in [false, true] {
        if let Ok(out) = ptxspec_core::spirv::specialize(data, &[], freeze) {
            ptxspec_core::spirv::read(&out, &Default::default())
                .expect("a specialized module reads back");
        }
    }
});
