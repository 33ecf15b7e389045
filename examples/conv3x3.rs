//! DPC++'s SYCL 2020 spec-constant design's 3x3 convolution with the coefficients as a specialization
//! constant: builds the kernel bundle natively and emulated, runs both on
//! the GPU and checks them against a CPU convolution.
//!
//! `cargo run --release --example conv3x3`: with no GPU it runs the CPU
//! stages (bundle, layout, specialization) and says so.

use ptxspec::runtime::{self, Arg, DeviceBuffer, LaunchConfig, Queue};
use ptxspec::{KernelId, SpecId, SpecMode, build, get_kernel_bundle_for};

ptxspec_kernels::register_example_kernels!();

use ptxspec_kernels::reference;

const COEFF: SpecId<[[f32; 3]; 3]> = SpecId::new("coeff_id");

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
    let sobel = [[1.0f32, 0.0, -1.0], [2.0, 0.0, -2.0], [1.0, 0.0, -1.0]];
    let kernel = KernelId::new("conv3x3");
    let mut input = get_kernel_bundle_for(std::slice::from_ref(&kernel))?;
    println!(
        "default coefficients: {:?}",
        input.get_specialization_constant(&COEFF)?
    );
    input.set_specialization_constant(&COEFF, sobel)?;
    let native = build(&input)?;
    let emulated = build(&input.clone().with_mode(SpecMode::Emulated))?;
    let n = native.built_image(&kernel)?;
    let e = emulated.built_image(&kernel)?;
    let count = |ptx: Option<&str>, what: &str| ptx.map_or(0, |p| p.matches(what).count());
    // The default mode builds a cubin by JIT LTO where nvJitLink loads
    // (values folded by NVVM), or specialized PTX (values as immediates).
    let specialized = match n.ptx() {
        Some(ptx) => format!(
            "specialized PTX with {} immediates",
            ptx.matches("mov.b32").count()
        ),
        None => "a cubin linked with the values (JIT LTO)".to_string(),
    };
    println!(
        "image {}: {} bytes of values; built {:?}: {specialized}; emulated: {} loads of them from {:?}",
        n.image().id(),
        e.blob().len(),
        n.mode(),
        count(e.ptx(), "%ptxspec_buf+"),
        e.delivery()
    );
    if let Some(why) = n.fallback() {
        println!("{why}");
    }
    if !runtime::driver_available() {
        println!(
            "no GPU found (no CUDA driver on this machine): ran the CPU stages only, launched nothing"
        );
        return Ok(());
    }
    let q = Queue::new(0)?;
    let (h, w) = (2048usize, 2048usize);
    let img: Vec<f32> = (0..h * w)
        .map(|i| ((i * 7919) % 1000) as f32 / 1000.0)
        .collect();
    let din = q.upload(&img)?;
    let want = reference::conv3x3(&img, h, w, &sobel);
    for (name, bundle) in [("native", &native), ("emulated", &emulated)] {
        let out: DeviceBuffer<f32> = q.upload(&vec![f32::NAN; h * w])?;
        let cfg = LaunchConfig::new(
            (w.div_ceil(16) as u32, h.div_ceil(16) as u32, 1),
            (16, 16, 1),
        );
        q.submit(|hd| {
            hd.use_kernel_bundle(bundle)?;
            hd.launch(
                "conv3x3",
                cfg,
                &[
                    Arg::buffer(&din),
                    Arg::buffer(&out),
                    Arg::value(h as i32),
                    Arg::value(w as i32),
                ],
            )
        })?;
        let got = q.download(&out)?;
        let err = got
            .iter()
            .zip(&want)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        println!(
            "{} {name}: {h}x{w} Sobel, max |GPU - CPU| = {err:e}",
            q.device().name
        );
        if err.is_nan() || err > 1e-4 {
            return Err(format!("{name} result differs from the CPU by {err}").into());
        }
    }
    Ok(())
}
