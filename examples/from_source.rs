//! A kernel whose CUDA C++ source the program writes as it runs (here: a
//! polynomial of a degree chosen at run time), compiled by NVRTC into a
//! kernel bundle, its coefficients a specialization constant: built by JIT
//! LTO where nvJitLink loads (natively elsewhere), launched, and checked
//! against the CPU.
//!
//! `cargo run --release --example from_source [DEGREE]`: needs NVRTC (the
//! test command installs it: `source ci/install-nvidia-tools.sh`); with no
//! GPU it compiles, sets the values and builds, and says that it found no
//! GPU.

use ptxspec::runtime::{self, Arg, DeviceBuffer, LaunchConfig, Queue};
use ptxspec::{KernelId, SourceOptions, build, kernel_bundle_from_source};

fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// The source of `poly`, which evaluates a polynomial of `degree` whose
/// coefficients are the specialization constant `coeffs`.
fn source(degree: usize) -> String {
    format!(
        r#"#include "ptxspec.cuh"
typedef ptxspec::array<float, {n}> coeffs_t;
constexpr ptxspec::specialization_id<coeffs_t> coeffs{{}};
extern "C" __global__ void poly(const float *x, float *y, int n, ptxspec::kernel_handler h) {{
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  coeffs_t c = h.get_specialization_constant<coeffs>();
  float acc = 0.0f;
  for (int k = {degree}; k >= 0; --k) acc = acc * x[i] + c[k];
  y[i] = acc;
}}
"#,
        n = degree + 1
    )
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let degree: usize = match std::env::args().nth(1) {
        Some(d) => d
            .parse()
            .map_err(|_| format!("degree {d:?} is not a number"))?,
        None => 3,
    };
    if !(1..=16).contains(&degree) {
        return Err("take a degree from 1 to 16".into());
    }
    let coefficients: Vec<f32> = (0..=degree).map(|k| 1.0 / (k + 1) as f32).collect();
    let mut input =
        kernel_bundle_from_source(&[("poly.cu", &source(degree))], &SourceOptions::default())?;
    let bytes: Vec<u8> = coefficients.iter().flat_map(|c| c.to_le_bytes()).collect();
    // An array whose length the program chose: set as its bytes.
    input.set_specialization_constant_bytes("coeffs", &bytes)?;
    let exe = build(&input)?;
    let kernel = KernelId::new("poly");
    let built = exe.built_image(&kernel)?;
    println!(
        "compiled poly.cu (degree {degree}) at run time; built {:?}{}",
        built.mode(),
        built
            .fallback()
            .map(|why| format!(" ({why})"))
            .unwrap_or_default()
    );
    if !runtime::driver_available() {
        println!(
            "no GPU found (no CUDA driver on this machine): compiled and built only, launched nothing"
        );
        return Ok(());
    }
    let q = Queue::new(0)?;
    let n = 1 << 20;
    let xs: Vec<f32> = (0..n).map(|i| (i % 1000) as f32 / 1000.0).collect();
    let x = q.upload(&xs)?;
    let y: DeviceBuffer<f32> = q.upload(&vec![f32::NAN; n])?;
    q.submit(|h| {
        h.use_kernel_bundle(&exe)?;
        h.launch(
            "poly",
            LaunchConfig::new(((n as u32).div_ceil(256), 1, 1), (256, 1, 1)),
            &[Arg::buffer(&x), Arg::buffer(&y), Arg::value(n as i32)],
        )
    })?;
    let got = q.download(&y)?;
    let err = xs
        .iter()
        .zip(&got)
        .map(|(&xv, &g)| {
            let want = coefficients.iter().rev().fold(0f32, |acc, &c| acc * xv + c);
            (g - want).abs()
        })
        .fold(0f32, f32::max);
    println!(
        "{} poly: {n} values, max |GPU - CPU| = {err:e}",
        q.device().name
    );
    if err.is_nan() || err > 1e-5 {
        return Err(format!("the GPU's values differ from the CPU's by {err}").into());
    }
    Ok(())
}
