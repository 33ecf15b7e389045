//! CP015's blocked matrix product with the block size as a specialization
//! constant, for block sizes 8, 16 and 32, checked against a CPU product.
//!
//! For each block size, one bundle holds the kernel twice: built with the
//! default mode (LTO where the image has LTO-IR and nvJitLink is found:
//! the optimizer sees the block size, as it would a literal; native
//! otherwise) and emulated (the block size read at run time). A
//! device-image selector at dispatch (the SYCL modules proposal) chooses between them.
//!
//! `cargo run --release --example matmul`: with no GPU it runs the CPU
//! stages and says so.

use ptxspec::runtime::{self, Arg, DeviceBuffer, LaunchConfig, Queue};
use ptxspec::{KernelId, SpecId, SpecMode, build, get_kernel_bundle_for, join};

ptxspec_kernels::register_example_kernels!();

use ptxspec_kernels::reference;

const BLOCK: SpecId<i32> = SpecId::new("block_size_id");

fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let kernel = KernelId::new("matmul");
    let input = get_kernel_bundle_for(std::slice::from_ref(&kernel))?;
    println!(
        "default block size: {}",
        input.get_specialization_constant(&BLOCK)?
    );
    let gpu = runtime::driver_available();
    if !gpu {
        println!("no GPU found (no CUDA driver on this machine): building the bundles only");
    }
    let q = if gpu { Some(Queue::new(0)?) } else { None };
    let n = 512usize;
    let (a, b) = reference::matmul_inputs(n);
    let want = if gpu {
        reference::matmul(&a, &b, n)
    } else {
        Vec::new()
    };
    for bs in [8, 16, 32] {
        let mut with_value = input.clone();
        with_value.set_specialization_constant(&BLOCK, bs)?;
        // The same kernel in two device images of one bundle.
        let both = join(&[
            build(&with_value)?,
            build(&with_value.clone().with_mode(SpecMode::Emulated))?,
        ])?;
        for image in both.device_images() {
            println!(
                "block {bs}: device image {} built {:?}",
                image.id(),
                image.mode()
            );
            if let Some(why) = image.built().and_then(|b| b.fallback()) {
                println!("  {why}");
            }
        }
        let Some(q) = &q else { continue };
        let (da, db) = (q.upload(&a)?, q.upload(&b)?);
        for native in [true, false] {
            let dc: DeviceBuffer<f32> = q.upload(&vec![f32::NAN; n * n])?;
            let g = (n as i32 / bs) as u32;
            let cfg = LaunchConfig::new((g, g, 1), (bs as u32, bs as u32, 1))
                .with_shared_mem(2 * (bs * bs) as u32 * 4);
            q.submit(|h| {
                // The selector: the image whose values are in the code, or
                // the one that reads them at run time.
                h.use_kernel_bundle_selected(&both, |img| {
                    img.native_specialization_constant() == native
                })?;
                h.launch(
                    "matmul",
                    cfg,
                    &[
                        Arg::buffer(&da),
                        Arg::buffer(&db),
                        Arg::buffer(&dc),
                        Arg::value(n as i32),
                    ],
                )
            })?;
            let got = q.download(&dc)?;
            let err = got
                .iter()
                .zip(&want)
                .map(|(x, y)| (x - y).abs())
                .fold(0f32, f32::max);
            let which = if native {
                "values in the code"
            } else {
                "emulated"
            };
            println!(
                "{} block {bs}, {which}: {n}x{n}, max |GPU - CPU| = {err:e}",
                q.device().name
            );
            if err.is_nan() || err > 1e-3 {
                return Err(format!("block {bs} ({which}) differs from the CPU by {err}").into());
            }
        }
    }
    Ok(())
}
