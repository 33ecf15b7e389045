//! What the trace costs where nothing records it (issue 68.1): a span
//! opened and closed, and an instant, with no `PTXSPEC_TRACE` and no
//! profiler injecting NVTX — side by side with an empty call, the baseline
//! of the same run. The launch path makes no such call (spans are links,
//! loads, look-ups and waits); this is their floor wherever one sits.
//!
//! `cargo bench --bench trace_off`

// A harness-less binary: `missing_docs` would ask for docs on what its
// macros generate, which is no API.
#![allow(missing_docs)]

use std::hint::black_box;

use criterion::{Criterion, criterion_group};

fn trace_off(c: &mut Criterion) {
    // SAFETY: nothing else runs yet: no thread reads the environment while
    // it changes.
    unsafe { std::env::remove_var("NVTX_INJECTION64_PATH") };
    assert!(!ptxspec_core::trace::on(), "nothing records");
    let mut group = c.benchmark_group("trace off");
    group.bench_function("empty call (baseline)", |b| b.iter(|| black_box(())));
    group.bench_function("span opened and closed", |b| {
        b.iter(|| {
            drop(black_box(ptxspec_core::trace::span(
                "link (nvJitLink)",
                "link",
            )))
        })
    });
    group.bench_function("instant", |b| {
        b.iter(|| ptxspec_core::trace::instant(black_box("choice: lto"), "choices", &[]))
    });
    group.finish();
}

criterion_group!(benches, trace_off);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
}
