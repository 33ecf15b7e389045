//! The host's cost of a value set seen before (issue 31, item 3): a build
//! in LTO mode and the lookup of its cubin in the memory cache, measured on
//! the CPU (nvJitLink links the first one; no GPU needed), side by side
//! with its parts: the build alone, and the lookup in a built image; then
//! a disk-cache hit in new processes (the bundle, the build and the cubin
//! read from the disk cache, each timed from the process's first ptxspec
//! call), printed after criterion's table.
//!
//! `source ci/install-nvidia-tools.sh && cargo bench --bench cache_hit`

// A harness-less binary: `missing_docs` would ask for docs on what its
// macros generate, which is no API.
#![allow(missing_docs)]

use criterion::{Criterion, criterion_group};
use ptxspec::{KernelId, SpecId, SpecMode, build, get_kernel_bundle_for};

ptxspec_kernels::register_example_kernels!();

const BLOCK: SpecId<i32> = SpecId::new("block_size_id");

#[path = "support/counting_alloc.rs"]
mod counting_alloc;

/// Heap allocations per call of `f`, over 1 000 calls.
fn allocations_per_call(mut f: impl FnMut()) -> f64 {
    let before = counting_alloc::allocations();
    for _ in 0..1_000 {
        f();
    }
    let after = counting_alloc::allocations();
    (after - before) as f64 / 1_000.0
}

fn memory_hit(c: &mut Criterion) {
    let matmul = KernelId::new("matmul");
    let Ok(base) = get_kernel_bundle_for(std::slice::from_ref(&matmul)) else {
        eprintln!("cache_hit: the example kernels are not registered");
        return;
    };
    if base.images().iter().any(|i| !i.has_ltoir()) {
        eprintln!(
            "cache_hit: the example images carry no LTO-IR (no NVRTC at build): nothing to measure"
        );
        return;
    }
    let mut input = base.with_mode(SpecMode::Lto);
    input.set_specialization_constant(&BLOCK, 16).expect("set");
    // The first link: every later lookup is a memory hit.
    let first = build(&input).expect("build");
    if let Err(e) = first
        .built_image(&matmul)
        .expect("image")
        .cubin_for_kernel(90, "matmul")
    {
        eprintln!("cache_hit: the first link failed (is nvJitLink installed?): {e}");
        return;
    }
    let hit = || {
        let exe = build(std::hint::black_box(&input)).expect("build");
        let cubin = exe
            .built_image(&matmul)
            .expect("image")
            .cubin_for_kernel(90, "matmul");
        std::hint::black_box(cubin.expect("cubin"));
    };
    let built_once = first.built_image(&matmul).expect("image");
    println!(
        "memory hit: heap allocations per build + cubin lookup {:.1}, per build alone {:.1}, per lookup in a built image {:.1}",
        allocations_per_call(hit),
        allocations_per_call(|| {
            std::hint::black_box(build(std::hint::black_box(&input)).expect("build"));
        }),
        allocations_per_call(|| {
            std::hint::black_box(built_once.cubin_for_kernel(90, "matmul").expect("cubin"));
        })
    );
    let mut g = c.benchmark_group("memory_hit");
    g.bench_function("build + cubin lookup", |b| b.iter(hit));
    g.bench_function("build alone", |b| {
        b.iter(|| build(std::hint::black_box(&input)).expect("build"))
    });
    let built = first.built_image(&matmul).expect("image");
    g.bench_function("lookup in a built image", |b| {
        b.iter(|| std::hint::black_box(built.cubin_for_kernel(90, "matmul").expect("cubin")))
    });
    g.finish();
}

/// In a new process (`--disk-hit DIR`): the registered matmul, block 16,
/// built in LTO mode, its sm_90 cubin read from the disk cache `DIR`;
/// prints the time of each step in µs.
fn disk_hit_here() {
    use std::time::Instant;
    let matmul = KernelId::new("matmul");
    let t = Instant::now();
    let mut input = get_kernel_bundle_for(std::slice::from_ref(&matmul))
        .expect("bundle")
        .with_mode(SpecMode::Lto);
    input.set_specialization_constant(&BLOCK, 16).expect("set");
    let bundle = t.elapsed();
    let exe = build(&input).expect("build");
    let built = t.elapsed();
    let cubin = exe
        .built_image(&matmul)
        .expect("image")
        .cubin_for_kernel(90, "matmul")
        .expect("cubin");
    let done = t.elapsed();
    assert_eq!(
        cubin.source,
        ptxspec_core::lto::Source::Disk,
        "expected a disk hit"
    );
    println!(
        "disk hit us {:.0} {:.0} {:.0}",
        bundle.as_secs_f64() * 1e6,
        (built - bundle).as_secs_f64() * 1e6,
        (done - built).as_secs_f64() * 1e6
    );
}

/// Disk hits in five new processes sharing one disk cache (linked once
/// first): the median of each step.
fn disk_hits() {
    let dir = std::env::temp_dir().join(format!("ptxspec-cache-hit-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let run = || {
        let out = std::process::Command::new(std::env::current_exe().expect("exe"))
            .args(["--disk-hit"])
            .env("PTXSPEC_CACHE_DIR", &dir)
            .env_remove("PTXSPEC_REMOTE_CACHE")
            .output()
            .expect("spawn");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    // The first process links (its assertion fails: not a disk hit).
    let _ = run();
    let mut steps: Vec<[f64; 3]> = Vec::new();
    for _ in 0..5 {
        let text = run();
        let Some(v) = text.lines().find_map(|l| l.strip_prefix("disk hit us ")) else {
            eprintln!("cache_hit: no disk hit measured: {text:?}");
            return;
        };
        let v: Vec<f64> = v.split(' ').filter_map(|x| x.parse().ok()).collect();
        steps.push([v[0], v[1], v[2]]);
    }
    let median = |i: usize| {
        let mut v: Vec<f64> = steps.iter().map(|s| s[i]).collect();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    println!(
        "disk-cache hit in a new process, medians of 5 (µs): bundle {:.0}, build {:.0}, cubin {:.0}; total {:.0}",
        median(0),
        median(1),
        median(2),
        median(0) + median(1) + median(2)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

criterion_group!(benches, memory_hit);

fn main() {
    if std::env::args().any(|a| a == "--disk-hit") {
        disk_hit_here();
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
    disk_hits();
}
