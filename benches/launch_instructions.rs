//! Host instructions per launch, counted exactly: each way of launching
//! runs `n` times against a stand-in driver that runs nothing
//! (`launch_instructions/stub_libcuda.c`, every call a success), under
//! callgrind, which counts the instructions of [`launches`] alone. Run with
//! `n` and `2n` launches, the difference over `n` is a way's instructions
//! per launch — what the GPU bench's launch overhead grows with, the more
//! on a slower host (BENCHMARKS.md, "launch overhead"). The driver's own
//! work is not in it: the stand-in's calls are a few instructions each.
//!
//! `bash benches/launch_instructions.sh` builds the stand-in and this
//! binary and runs every way; by hand: `launch_instructions WAY N` with
//! the stand-in first on `LD_LIBRARY_PATH`. WAY is one of [`WAYS`].

// A harness-less binary: `missing_docs` would ask for docs on what its
// macros generate, which is no API.
#![allow(missing_docs)]

use ptxspec::image::Image;
use ptxspec::runtime::{Arg, DeviceBuffer, LaunchConfig, Queue};
use ptxspec::{Executable, KernelBundle, KernelId, SpecId, SpecMode, build, get_kernel_bundle_for};
use ptxspec_core::postlink::{BufferPlacement, Options};

ptxspec_kernels::register_example_kernels!();

#[path = "../tests/support/matmul.rs"]
mod matmul;

type R<T> = Result<T, Box<dyn std::error::Error>>;

const TINY: SpecId<i32> = SpecId::new("tiny_id");
const BLOCK: SpecId<i32> = SpecId::new("block_size_id");

/// The ways, as the GPU bench names them ("launch overhead"), and one of
/// a kernel of four parameters (the matmul's: three buffers and a size).
const WAYS: [&str; 6] = [
    "plain",
    "unchanged",
    "changed",
    "bundles",
    "global",
    "four arguments",
];

fn main() -> R<()> {
    let args: Vec<String> = std::env::args().collect();
    // `cargo test` and `cargo bench` run every bench without a way (`cargo
    // bench` passes `--bench`): this one counts only under callgrind, with
    // the stand-in driver, as its script runs it.
    let (Some(way), Some(n)) = (args.get(1).filter(|a| !a.starts_with("--")), args.get(2)) else {
        println!(
            "launch_instructions: measured nothing (run by benches/launch_instructions.sh, or as \
             launch_instructions WAY N with WAY one of: {})",
            WAYS.join(", ")
        );
        return Ok(());
    };
    let n: i32 = n.parse().map_err(|e| format!("N: {e}"))?;
    let q = Queue::new(0)?;
    let out: DeviceBuffer<i32> = q.alloc_zeros(32)?;
    let one = LaunchConfig::new((1, 1, 1), (32, 1, 1));
    let registered = get_kernel_bundle_for(&[KernelId::new("tiny")])?.with_mode(SpecMode::Emulated);
    let param = build(&registered)?;
    let bundle_launch = |exe: &KernelBundle<Executable>| {
        q.submit(|h| {
            h.use_kernel_bundle(exe)?;
            h.launch("tiny", one, &[Arg::buffer(&out)])
        })
    };
    let mut launch: Box<dyn FnMut(i32) -> R<()>> = match way.as_str() {
        "plain" => {
            // The same PTX loaded by cudarc, launched as the GPU bench's
            // plain way launches: bind the context, one driver call.
            let ptx = param.built_image_named("tiny")?.ptx().ok_or("no PTX")?;
            let f = q
                .context()
                .load_module(cudarc::nvrtc::Ptx::from_src(ptx))?
                .load_function("tiny")?;
            let (q, f) = (&q, f);
            let mut address = out.device_address();
            Box::new(move |i| {
                let mut value = i64::from(i);
                let mut params = [
                    std::ptr::from_mut(&mut address).cast(),
                    std::ptr::from_mut(&mut value).cast(),
                ];
                q.context().bind_to_thread()?;
                // SAFETY: `f` is a function of a module loaded in the
                // queue's context, which is bound; `params` holds one
                // pointer per parameter of `tiny` (an address and its
                // 8-byte values), live across the call, which copies them.
                unsafe {
                    cudarc::driver::result::launch_kernel(
                        f.cu_function(),
                        (1, 1, 1),
                        (32, 1, 1),
                        0,
                        q.cuda_stream().cu_stream(),
                        &mut params,
                    )?;
                }
                Ok(())
            })
        }
        "unchanged" => Box::new(|_| Ok(bundle_launch(&param)?)),
        "changed" => Box::new(|i| {
            Ok(q.submit(|h| {
                h.set_specialization_constant(&TINY, i)?;
                h.launch("tiny", one, &[Arg::buffer(&out)])
            })?)
        }),
        "bundles" => {
            let round = (0..8)
                .map(|v| {
                    let mut b = registered.clone();
                    b.set_specialization_constant(&TINY, 100 + v)?;
                    Ok(build(&b)?)
                })
                .collect::<R<Vec<_>>>()?;
            Box::new(move |i| Ok(bundle_launch(&round[i as usize % round.len()])?))
        }
        "global" => {
            let ptx = include_str!("../kernels/ptx/tiny.ptx");
            let opts = Options {
                buffer: BufferPlacement::Global,
                ..Default::default()
            };
            let img =
                ptxspec_core::postlink::post_link(vec![("tiny.ptx".into(), ptx.into())], &opts)?
                    .remove(0);
            let image = Image::new(img.stem, img.ptx, &img.props.to_text())?;
            let global =
                build(&KernelBundle::from_images(vec![image]).with_mode(SpecMode::Emulated))?;
            Box::new(move |_| Ok(bundle_launch(&global)?))
        }
        "four arguments" => {
            let mut input =
                get_kernel_bundle_for(&[KernelId::new("matmul")])?.with_mode(SpecMode::Emulated);
            input.set_specialization_constant(&BLOCK, 16)?;
            let matmul = build(&input)?;
            let cfg = matmul::config(64, 16);
            let (a, b, c): (DeviceBuffer<f32>, DeviceBuffer<f32>, DeviceBuffer<f32>) = (
                q.alloc_zeros(64 * 64)?,
                q.alloc_zeros(64 * 64)?,
                q.alloc_zeros(64 * 64)?,
            );
            Box::new(move |_| {
                Ok(q.submit(|h| {
                    h.use_kernel_bundle(&matmul)?;
                    h.launch(
                        "matmul",
                        cfg,
                        &[
                            Arg::buffer(&a),
                            Arg::buffer(&b),
                            Arg::buffer(&c),
                            Arg::value(64i32),
                        ],
                    )
                })?)
            })
        }
        other => return Err(format!("no way {other} (ways: {})", WAYS.join(", ")).into()),
    };
    // Plans made, modules loaded: what callgrind counts is the launches.
    launch(0)?;
    launches(&mut *launch, n)
}

/// `n` launches of a way: the function callgrind counts
/// (`--toggle-collect=launch_instructions::launches`).
#[inline(never)]
fn launches(launch: &mut dyn FnMut(i32) -> R<()>, n: i32) -> R<()> {
    for i in 1..=n {
        launch(i)?;
    }
    Ok(())
}
