//! The tier profile (`PTXSPEC_TIER_PROFILE`), a file another process or
//! program may have written: read within its bounds, every line that is a
//! value set (or graph verdict) writes back to a line that reads back the
//! same, a line is never both, and a line's fields never hold a line break
//! or whitespace.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ptxspec_core::tier_profile::{self, GraphVerdict, MAX_LINES, ProfileLine};

fuzz_target!(|data: &[u8]| {
    let Ok(lines) = tier_profile::lines(data) else {
        return;
    };
    assert!(lines.len() <= MAX_LINES);
    for line in &lines {
        assert!(!line.is_empty() && !line.contains('\n'));
        if let Some(verdict) = GraphVerdict::parse(line) {
            assert_eq!(ProfileLine::parse(line), None, "both kinds: {line:?}");
            let written = verdict
                .to_line()
                .expect("a verdict that was read can be written");
            assert_eq!(GraphVerdict::parse(&written), Some(verdict), "{written:?}");
        }
        let Some(set) = ProfileLine::parse(line) else {
            continue;
        };
        let written = set
            .to_line()
            .expect("a line that was read has fields that can be written");
        assert_eq!(
            ProfileLine::parse(&written).as_ref(),
            Some(&set),
            "a written line reads back the same: {written:?}"
        );
        assert_eq!(
            tier_profile::lines(written.as_bytes()).ok(),
            Some(vec![written.clone()])
        );
    }
});
