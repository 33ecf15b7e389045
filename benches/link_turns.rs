//! A launch's synchronous link while background links run (issue 54): in
//! one process nvJitLink takes one call at a time, and a thread that waits
//! for its link goes before queued background work (`toolkit::exit`'s
//! turns). Measured on the CPU (no GPU): the matmul's LTO link of a new
//! value set on the main thread, alone, then while B background threads
//! link other new value sets without a pause — once with those threads
//! marked as background work (as the tier workers, adaptive variants and
//! profile prefetch are), once unmarked (every call in one queue, the
//! behaviour before the turns). Prints the medians and their ratio to the
//! link alone.
//!
//! `source ci/install-nvidia-tools.sh && CUDA_CACHE_DISABLE=1
//! PTXSPEC_CACHE_DIR=$(mktemp -d) cargo bench --bench link_turns [-- B]` (B
//! background threads, default 2). A disk cache of earlier runs would hold
//! the value sets, so a fresh one is needed; and CUDA's own compute cache
//! (`~/.nv/ComputeCache`) answers a second process's nvJitLink links of the
//! same inputs in about 2 ms (seen on the H100 machine): `CUDA_CACHE_DISABLE=1`
//! turns it off.

#![allow(missing_docs)]

use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::time::Instant;

use ptxspec::{KernelBundle, KernelId, SpecId, SpecMode, build, get_kernel_bundle_for};

ptxspec_kernels::register_example_kernels!();

const BLOCK: SpecId<i32> = SpecId::new("block_size_id");

/// Value sets nobody linked yet in this process (the disk cache is fresh).
static NEXT_VALUE: AtomicI32 = AtomicI32::new(1);

/// Links the matmul for a value set not linked before: its time in ms.
fn link_new(base: &KernelBundle<ptxspec::Input>) -> f64 {
    let block = NEXT_VALUE.fetch_add(1, Ordering::Relaxed);
    let mut input = base.clone();
    input
        .set_specialization_constant(&BLOCK, block)
        .expect("set");
    let started = Instant::now();
    let exe = build(&input).expect("build");
    exe.built_image(&KernelId::new("matmul"))
        .expect("image")
        .cubin_for_kernel(90, "matmul")
        .expect("a link");
    started.elapsed().as_secs_f64() * 1e3
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The main thread's links of new value sets, `rounds` of them, while
/// `background` threads link others (marked as background work or not).
fn foreground_links(
    base: &KernelBundle<ptxspec::Input>,
    background: usize,
    marked: bool,
    rounds: usize,
) -> f64 {
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        for _ in 0..background {
            scope.spawn(|| {
                if marked {
                    ptxspec_core::toolkit::exit::this_thread_works_in_the_background();
                }
                while !stop.load(Ordering::Relaxed) {
                    link_new(base);
                }
            });
        }
        // Let the background threads' links get under way first.
        if background > 0 {
            link_new(base);
        }
        let times: Vec<f64> = (0..rounds).map(|_| link_new(base)).collect();
        stop.store(true, Ordering::Relaxed);
        median(times)
    })
}

fn main() {
    let background: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(2);
    let fresh = std::env::var_os("PTXSPEC_CACHE_DIR")
        .is_some_and(|d| std::fs::read_dir(d).is_ok_and(|mut e| e.next().is_none()));
    if !fresh {
        eprintln!(
            "link_turns: set PTXSPEC_CACHE_DIR to a fresh, empty folder (mktemp -d): measured nothing"
        );
        return;
    }
    let Ok(base) = get_kernel_bundle_for(&[KernelId::new("matmul")]) else {
        eprintln!("link_turns: the example kernels are not registered");
        return;
    };
    if base.images().iter().any(|i| !i.has_ltoir()) {
        eprintln!(
            "link_turns: the example images carry no LTO-IR (no NVRTC at build): nothing to measure"
        );
        return;
    }
    let base = base.with_mode(SpecMode::Lto);
    // The toolkit's load and first link are the process's, not a link's.
    link_new(&base);
    let rounds = 9;
    let alone = foreground_links(&base, 0, false, rounds);
    let marked = foreground_links(&base, background, true, rounds);
    let unmarked = foreground_links(&base, background, false, rounds);
    println!(
        "link_turns: a new value set's link on the main thread, median of {rounds}: alone {alone:.1} ms; \
         with {background} background threads linking, marked as background {marked:.1} ms (x{:.2}), \
         unmarked {unmarked:.1} ms (x{:.2})",
        marked / alone,
        unmarked / alone
    );
}
