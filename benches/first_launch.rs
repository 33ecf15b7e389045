//! A new process's first specialized launches of value sets: values set,
//! the bundle built by JIT LTO, the matmul launched and waited for — timed
//! from setting the values to the launch returning, for each value set in
//! turn (the first pays the process's first look-up; the next ones find the
//! connection and the library warm), with where the cubin came from (linked
//! here, the disk cache, or the remote cache another process filled) and
//! how much of it the remote look-up took (`RemoteStats::hit_nanos`: the
//! request, its reply, the signature check). Run it once as a writer and
//! then as fresh readers to see what the remote cache saves a fleet.
//!
//! Each value set's time is said in its steps too: the values and `build`,
//! then the launch (where the cubin is looked up and its module loaded)
//! returned, then the wait for the kernel.
//!
//! `PTXSPEC_BENCH_WARM_DRIVER=1` first launches the same kernel's emulated
//! (PTX) image once, untimed: what is left of the first value set's extra
//! time after it is the process's first module load and launch, not the
//! look-up's.
//!
//! `cargo bench --bench first_launch -- BLOCK [BLOCK...]` (default 16 8;
//! with `PTXSPEC_REMOTE_CACHE` and its keys set as README's "Sharing across
//! machines" says). Needs a GPU; without one it says so and measures
//! nothing.

use std::time::Instant;

use ptxspec::runtime::{self, Arg, DeviceBuffer, LaunchConfig, Queue};
use ptxspec::{KernelId, SpecId, SpecMode, build, get_kernel_bundle_for};

ptxspec_kernels::register_example_kernels!();

const BLOCK: SpecId<i32> = SpecId::new("block_size_id");

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut blocks: Vec<i32> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    if blocks.is_empty() {
        blocks = vec![16, 8];
    }
    if !runtime::driver_available() {
        println!("first_launch: no GPU found: measured nothing");
        return Ok(());
    }
    let made = Instant::now();
    let q = Queue::new(0)?;
    println!(
        "first_launch: the queue made in {:.3} ms (the process's first context)",
        made.elapsed().as_secs_f64() * 1e3
    );
    let n = 256usize;
    let a = q.upload(&vec![1.0f32; n * n])?;
    let b = q.upload(&vec![1.0f32; n * n])?;
    let kernel = KernelId::new("matmul");
    // Everything before the values is the process's own start.
    let input = get_kernel_bundle_for(std::slice::from_ref(&kernel))?.with_mode(SpecMode::Lto);
    let n_i32 = n as i32;
    if std::env::var_os("PTXSPEC_BENCH_WARM_DRIVER").is_some_and(|v| v == "1") {
        let c: DeviceBuffer<f32> = q.alloc_zeros(n * n)?;
        let emulated = build(&input.clone().with_mode(SpecMode::Emulated))?;
        q.submit(|h| {
            h.use_kernel_bundle(&emulated)?;
            h.launch(
                "matmul",
                LaunchConfig::new((16, 16, 1), (16, 16, 1)).with_shared_mem(2 * 16 * 16 * 4),
                &[
                    Arg::buffer(&a),
                    Arg::buffer(&b),
                    Arg::buffer(&c),
                    Arg::value(n_i32),
                ],
            )
        })?;
        q.wait()?;
    }
    // `PTXSPEC_BENCH_SETTLE_MS`: a pause before the values, for the
    // background connection to the store to be made for sure (what a
    // program that creates its bundle early gets).
    if let Some(ms) = std::env::var("PTXSPEC_BENCH_SETTLE_MS")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        std::thread::sleep(std::time::Duration::from_millis(ms));
    }
    for (i, &block) in blocks.iter().enumerate() {
        let c: DeviceBuffer<f32> = q.alloc_zeros(n * n)?;
        let before = ptxspec_core::lto::remote::stats();
        let started = Instant::now();
        let mut input = input.clone();
        input.set_specialization_constant(&BLOCK, block)?;
        let exe = build(&input)?;
        let built = started.elapsed();
        let cfg = LaunchConfig::new(
            ((n as u32) / block as u32, (n as u32) / block as u32, 1),
            (block as u32, block as u32, 1),
        )
        .with_shared_mem(2 * (block * block) as u32 * 4);
        q.submit(|h| {
            h.use_kernel_bundle(&exe)?;
            h.launch(
                "matmul",
                cfg,
                &[
                    Arg::buffer(&a),
                    Arg::buffer(&b),
                    Arg::buffer(&c),
                    Arg::value(n_i32),
                ],
            )
        })?;
        let launched = started.elapsed();
        q.wait()?;
        let ms = started.elapsed().as_secs_f64() * 1e3;
        let out = q.download(&c)?;
        assert!(out.iter().all(|&v| v == n as f32), "wrong product");
        let after = ptxspec_core::lto::remote::stats();
        let source = if after.hits > before.hits {
            "the remote cache"
        } else if after.writes > before.writes {
            "a link here (stored remotely)"
        } else {
            "a link here or the disk cache"
        };
        let lookup_ms = (after.hit_nanos - before.hit_nanos) as f64 / 1e6;
        println!(
            "first_launch value set {} (block {block}): values -> first launch returned {ms:.3} ms; \
             cubin from {source}; remote look-up {lookup_ms:.3} ms; \
             steps: values and build {:.3} ms, launch returned {:.3} ms, wait {:.3} ms",
            i + 1,
            built.as_secs_f64() * 1e3,
            (launched - built).as_secs_f64() * 1e3,
            ms - launched.as_secs_f64() * 1e3,
        );
    }
    ptxspec_core::lto::flush(std::time::Duration::from_secs(5));
    Ok(())
}
