//! Post-link throughput on a large generated module (thousands of kernels
//! and getters, over 10 MB of PTX), its peak heap against the input size,
//! and — side by side in the same run — `ptxas -arch=sm_90` on the same
//! module, plus blob patching.
//!
//! `cargo bench --bench postlink` (set PTXSPEC_PTXAS or put ptxas on PATH for
//! the ptxas comparison; `source ci/install-nvidia-tools.sh` does both).

// A harness-less binary: `missing_docs` would ask for docs on what its macros
// (spec_struct!, criterion_group!) generate, which is no API.
#![allow(missing_docs)]

use std::alloc::{GlobalAlloc, Layout as AllocLayout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

// The example kernels (with LTO-IR where NVRTC built them), for the link bench.
ptxspec_kernels::register_example_kernels!();

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use ptxspec_core::postlink::{self, Mode, Options, Split};

/// Counts live and peak heap bytes.
struct Counting;
static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is passed on to the system allocator unchanged; the
// counters only observe.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: AllocLayout) -> *mut u8 {
        // SAFETY: the caller's layout, as `GlobalAlloc::alloc` requires.
        let p = unsafe { System.alloc(l) };
        if !p.is_null() {
            let now = LIVE.fetch_add(l.size(), Ordering::Relaxed) + l.size();
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, l: AllocLayout) {
        // SAFETY: `p` came from `alloc` above with this layout.
        unsafe { System.dealloc(p, l) };
        LIVE.fetch_sub(l.size(), Ordering::Relaxed);
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// An example's kernel repeated `n` times under new names, NVRTC's exact
/// code shape: `scalars` has six getters of every width per kernel (dense),
/// `conv3x3` one composite getter among real work.
fn large_module(example: &str, n: usize) -> String {
    let src = match example {
        "scalars" => include_str!("../kernels/ptx/scalars.ptx"),
        _ => include_str!("../kernels/ptx/conv3x3.ptx"),
    };
    let entry = src
        .find(&format!(".visible .entry {example}("))
        .expect("kernel");
    let (head, kernel) = src.split_at(entry);
    let mut out = String::with_capacity(head.len() + n * (kernel.len() + 64));
    out.push_str(head);
    for i in 0..n {
        out.push_str(&kernel.replace(example, &format!("{example}_{i}")));
    }
    out
}

fn bench(c: &mut Criterion) {
    for (example, n) in [("scalars", 2500), ("conv3x3", 2500)] {
        bench_module(c, example, n);
    }
}

fn bench_module(c: &mut Criterion, example: &str, kernels: usize) {
    let ptx = large_module(example, kernels);
    let mb = ptx.len() as f64 / 1e6;
    let opts = Options {
        mode: Mode::Emulated,
        split: Split::Off,
        ..Default::default()
    };
    let input = || vec![("large.ptx".to_string(), ptx.clone())];

    // Peak heap of one post-link, above what was live before (the input
    // copy handed in counts: it is the module's source).
    let before = LIVE.load(Ordering::Relaxed);
    PEAK.store(before, Ordering::Relaxed);
    let images = postlink::post_link(input(), &opts).expect("post-link");
    let peak = PEAK.load(Ordering::Relaxed) - before;
    let out_len = images[0].ptx.len();
    drop(images);
    eprintln!(
        "post-link of {mb:.1} MB ({kernels} x {example}): peak heap {:.1} MB = {:.2}x the input; output {:.1} MB",
        peak as f64 / 1e6,
        peak as f64 / ptx.len() as f64,
        out_len as f64 / 1e6
    );

    let mut g = c.benchmark_group("postlink");
    g.sample_size(10);
    g.throughput(Throughput::Bytes(ptx.len() as u64));
    g.bench_function(format!("emulated_{kernels}x{example}"), |b| {
        b.iter_batched(
            input,
            |i| postlink::post_link(i, &opts).expect("post-link"),
            criterion::BatchSize::LargeInput,
        )
    });
    // Every kernel in an image of its own: per-image work must not grow
    // with the module (it once passed over every getter of the module for
    // every image).
    if example == "scalars" {
        let per_kernel = Options {
            split: Split::PerKernel,
            ..opts.clone()
        };
        g.bench_function(format!("per_kernel_{kernels}x{example}"), |b| {
            b.iter_batched(
                input,
                |i| postlink::post_link(i, &per_kernel).expect("post-link"),
                criterion::BatchSize::LargeInput,
            )
        });
    }
    // The parse alone, side by side: what the rest of the post-link adds.
    g.bench_function(format!("parse_only_{kernels}x{example}"), |b| {
        b.iter_batched(
            || ptx.clone(),
            |text| ptxspec_core::ptx::parse("large.ptx", text).expect("parse"),
            criterion::BatchSize::LargeInput,
        )
    });
    g.finish();

    // One post-link and one ptxas run, timed in the same process.
    let t = Instant::now();
    let images = postlink::post_link(input(), &opts).expect("post-link");
    let ours = t.elapsed().as_secs_f64();
    // Only under `cargo bench` (`--bench`): `cargo test` runs benches once,
    // unoptimized, as a smoke test — a throughput printed then would be a
    // tenth of the real one, beside README's figures. And ptxas on this
    // module takes seconds.
    let benching = std::env::args().any(|a| a == "--bench");
    if benching {
        eprintln!(
            "{example}: post-link once: {:.3} s = {:.0} MB/s",
            ours,
            mb / ours
        );
    }
    match ptxas().filter(|_| benching) {
        Some(ptxas) => {
            let dir = std::env::temp_dir().join(format!("ptxspec-bench-{}", std::process::id()));
            std::fs::create_dir_all(&dir).expect("temp dir");
            let file = dir.join("large_0.ptx");
            std::fs::write(&file, &images[0].ptx).expect("write");
            let t = Instant::now();
            let st = std::process::Command::new(&ptxas)
                .arg("-arch=sm_90")
                .arg(&file)
                .arg("-o")
                .arg(dir.join("large.cubin"))
                .status()
                .expect("run ptxas");
            let theirs = t.elapsed().as_secs_f64();
            assert!(st.success(), "ptxas failed on the post-linked module");
            eprintln!(
                "{example}: ptxas -arch=sm_90 on the same module: {theirs:.2} s; post-link is {:.2}% of it",
                100.0 * ours / theirs
            );
            let _ = std::fs::remove_dir_all(&dir);
        }
        None if benching => {
            eprintln!("ptxas not found (PTXSPEC_PTXAS / PATH): no ptxas comparison this run")
        }
        None => {}
    }

    // Patching one value into a blob, as the runtime does per set.
    if example != "scalars" {
        return;
    }
    let layout = &images[0].layout;
    let mut blob = layout.default_blob().to_vec();
    c.bench_function("layout/patch_f64", |b| {
        b.iter(|| {
            layout
                .patch(
                    std::hint::black_box(&mut blob),
                    "double_id",
                    &1.25f64.to_le_bytes(),
                )
                .expect("patch")
        })
    });
}

fn ptxas() -> Option<std::path::PathBuf> {
    if let Some(p) = std::env::var_os("PTXSPEC_PTXAS") {
        return Some(p.into());
    }
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join("ptxas"))
        .find(|p| p.is_file())
}

/// `build` of a native bundle whose values were built before: a lookup of
/// the specialized PTX by image and values.
fn bundle_build_cache_hit(c: &mut Criterion) {
    let ptx = include_str!("../kernels/ptx/matmul.ptx").to_string();
    let opts = Options {
        mode: Mode::Emulated,
        split: Split::Off,
        ..Default::default()
    };
    let img = postlink::post_link(vec![("matmul.ptx".into(), ptx)], &opts)
        .expect("post-link")
        .remove(0);
    let image = ptxspec::image::Image::new(img.stem, img.ptx, &img.props.to_text()).expect("image");
    let mut input = ptxspec::KernelBundle::from_images([image]);
    input
        .set_specialization_constant(&ptxspec::SpecId::<i32>::new("block_size_id"), 32)
        .expect("set");
    ptxspec::build(&input).expect("first build");
    c.bench_function("bundle/build_native_cache_hit", |b| {
        b.iter(|| ptxspec::build(std::hint::black_box(&input)).expect("build"))
    });
}

/// The definitions unit of a new LTO value set (one `int` constant, as the
/// matmul's block size), compiled by libNVVM from NVVM IR and by NVRTC from
/// CUDA C++: which of the two `SpecMode::Lto` uses (libNVVM where found).
fn lto_definitions(c: &mut Criterion) {
    use ptxspec_core::lto::{Definition, DefinitionsCompiler, compile_definitions};
    use ptxspec_core::toolkit::{Lib, available};
    let value = 32i32.to_le_bytes();
    let defs = [Definition {
        symbol: "ptxspec_lto_block_size_id",
        align: 4,
        bytes: &value,
    }];
    for (name, lib, compiler) in [
        ("nvvm", Lib::Nvvm, DefinitionsCompiler::Nvvm),
        ("nvrtc", Lib::Nvrtc, DefinitionsCompiler::Nvrtc),
    ] {
        if !available(lib) {
            eprintln!(
                "lto/definitions_{name}: SKIPPED, {lib:?} not found (source ci/install-nvidia-tools.sh)"
            );
            continue;
        }
        let mut g = c.benchmark_group("lto");
        g.sample_size(10);
        g.bench_function(format!("definitions_{name}"), |b| {
            b.iter(|| {
                compile_definitions(&defs, 90, compiler, &Default::default()).expect("definitions")
            })
        });
        g.finish();
    }
}

/// A cold LTO link of the matmul image (two kernels: `matmul`,
/// `matmul_rolled`) for sm_90: the whole image, and `matmul` alone
/// (nvJitLink's `-kernels-used`), each link a cache miss (a new identity per
/// iteration; the disk cache in a folder of this run's own).
fn lto_link_one_kernel(c: &mut Criterion) {
    use ptxspec_core::lto::{LinkRequest, cubin};
    if !ptxspec_core::toolkit::available(ptxspec_core::toolkit::Lib::NvJitLink) {
        eprintln!(
            "lto/link_matmul_*: SKIPPED, nvJitLink not found (source ci/install-nvidia-tools.sh)"
        );
        return;
    }
    // The image as the contract reads it (the LTO definitions are not
    // ptxspec's API), from the registration the example kernels embed.
    let Some(image) = ptxspec::registry::images()
        .into_iter()
        .filter(|e| !e.ltoir.is_empty())
        .map(|e| {
            ptxspec_core::image::ImageData::new(e.id, e.ptx, e.props)
                .and_then(|i| i.with_ltoir(e.ltoir))
                .expect("registered image")
        })
        .find(|i| i.kernels().iter().any(|k| k.name == "matmul_rolled"))
    else {
        eprintln!(
            "lto/link_matmul_*: SKIPPED, the example images carry no LTO-IR (built without NVRTC)"
        );
        return;
    };
    let cache = std::env::temp_dir().join(format!("ptxspec-bench-link-{}", std::process::id()));
    // SAFETY: set before the benches start threads of their own.
    unsafe { std::env::set_var("PTXSPEC_CACHE_DIR", &cache) };
    let lto = image.ltoir().expect("LTO-IR");
    let mut blob = image.default_blob().to_vec();
    image
        .write_value(&mut blob, "block_size_id", &16i32.to_le_bytes())
        .expect("block size");
    let definitions = image.lto_definitions(&blob).expect("definitions");
    let mut g = c.benchmark_group("lto");
    g.sample_size(10);
    let mut n = 0u64;
    for (name, kernel) in [
        ("link_matmul_whole", None),
        ("link_matmul_one_kernel", Some("matmul")),
    ] {
        g.bench_function(name, |b| {
            b.iter(|| {
                n += 1;
                cubin(&LinkRequest {
                    ltoir: &lto.ir,
                    // Another identity each time: a link, not a cache hit.
                    ltoir_identity: ptxspec_core::digest::KeyEncoder::new("bench link")
                        .digest_field(&lto.identity)
                        .u64(n)
                        .digest(),
                    definitions: &definitions,
                    arch: 90,
                    options: &[],
                    toolkit: &Default::default(),
                    kernel,
                    arguments: None,
                })
                .expect("link")
            })
        });
    }
    g.finish();
    let _ = std::fs::remove_dir_all(&cache);
}

criterion_group!(
    benches,
    bench,
    bundle_build_cache_hit,
    lto_definitions,
    lto_link_one_kernel
);
criterion_main!(benches);
