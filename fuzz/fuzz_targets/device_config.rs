//! A device configuration (YAML: target → aspects, sub-group sizes):
//! accepted or refused with an error, never a panic; a configuration read
//! answers the requirements check for each of its targets.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ptxspec_core::device_config::DeviceConfig;
use ptxspec_core::features::Requirements;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(config) = DeviceConfig::parse(text, "fuzz.yaml") {
        for target in config.targets.values() {
            let _ = target.supports(&Requirements::default());
        }
    }
});
