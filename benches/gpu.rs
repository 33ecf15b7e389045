//! The GPU benchmark: each kernel in four variants on the same data, in one
//! run — the constant as a literal (the physical limit), ptxspec native
//! (specialized PTX), ptxspec emulated (buffer), and a plain by-value kernel
//! parameter (what a CUDA user writes by hand); launch overhead; the cost of
//! native specialization. Prints a table and writes JSON lines to
//! `$PTXSPEC_BENCH_OUT` (default `target/gpu-bench.jsonl`).
//!
//! `cargo bench --bench gpu` (with no GPU it says so and exits).

use std::fmt::Write as _;
use std::time::Instant;

use cudarc::driver::{CudaFunction, CudaModule, CudaStream, DevicePtr, sys::CUevent_flags};
use ptxspec::runtime::{self, Arg, DeviceBuffer, LaunchConfig, Queue};
use ptxspec::{KernelBundle, KernelId, SpecId, SpecMode, build, get_kernel_bundle_for};
use std::sync::Arc;

include!(concat!(env!("OUT_DIR"), "/example_kernels.rs"));

const BASELINES: &str = include_str!("../kernels/ptx/bench/baselines.ptx");
const COEFF: SpecId<[[f32; 3]; 3]> = SpecId::new("coeff_id");
const BLOCK: SpecId<i32> = SpecId::new("block_size_id");
const TINY: SpecId<i32> = SpecId::new("tiny_id");
const SOBEL: [[f32; 3]; 3] = [[1.0, 0.0, -1.0], [2.0, 0.0, -2.0], [1.0, 0.0, -1.0]];
/// Timed repetitions (the median is reported) and launches per repetition.
const REPS: usize = 7;
const LAUNCHES: usize = 20;

type R<T> = Result<T, Box<dyn std::error::Error>>;

/// Pointers to each argument value, as `cuLaunchKernel` takes them.
macro_rules! params {
    ($($v:ident),*) => {
        &mut [$(&mut $v as *mut _ as *mut std::ffi::c_void),*]
    };
}

/// Median milliseconds per launch of `launch`, timed with CUDA events.
fn time_ms(stream: &Arc<CudaStream>, mut launch: impl FnMut() -> R<()>) -> R<f64> {
    for _ in 0..3 {
        launch()?;
    }
    stream.synchronize()?;
    let mut samples = Vec::with_capacity(REPS);
    for _ in 0..REPS {
        let start = stream.record_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
        for _ in 0..LAUNCHES {
            launch()?;
        }
        let end = stream.record_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
        end.synchronize()?;
        samples.push(start.elapsed_ms(&end)? as f64 / LAUNCHES as f64);
    }
    samples.sort_by(f64::total_cmp);
    Ok(samples[REPS / 2])
}

/// A raw launch of a baseline kernel: `args` are pointers to each value.
fn raw_launch(
    q: &Queue,
    f: &CudaFunction,
    cfg: LaunchConfig,
    args: &mut [*mut std::ffi::c_void],
) -> R<()> {
    q.context().bind_to_thread()?;
    unsafe {
        cudarc::driver::result::launch_kernel(
            f.cu_function(),
            cfg.grid,
            cfg.block,
            cfg.shared_mem_bytes,
            q.stream().cu_stream(),
            args,
        )?;
    }
    Ok(())
}

fn ptr<T>(q: &Queue, b: &DeviceBuffer<T>) -> u64 {
    // The address stays valid while `b` lives; the stream orders all uses.
    let (p, _) = b.slice().device_ptr(q.stream());
    p
}

struct Row {
    kernel: String,
    variant: &'static str,
    ms: f64,
}

fn main() -> R<()> {
    if std::env::args().any(|a| a == "--list") {
        return Ok(());
    }
    if !runtime::driver_available() {
        println!("gpu bench: no GPU found (no CUDA driver on this machine); nothing measured");
        return Ok(());
    }
    let q = Queue::new(0)?;
    let module: Arc<CudaModule> = q
        .context()
        .load_module(cudarc::nvrtc::Ptx::from_src(BASELINES))?;
    let mut rows: Vec<Row> = Vec::new();
    let mut notes = String::new();
    println!(
        "device: {} (sm_{}{})",
        q.device().name,
        q.device().compute_capability.0,
        q.device().compute_capability.1
    );

    // 3x3 convolution, 8192^2 floats.
    let (h, w) = (8192usize, 8192usize);
    let img: Vec<f32> = (0..h * w)
        .map(|i| ((i * 7919) % 1013) as f32 / 1013.0)
        .collect();
    let din = q.upload(&img)?;
    let dout: DeviceBuffer<f32> = q.alloc_zeros(h * w)?;
    let cfg = LaunchConfig::new(((w / 32) as u32, (h / 8) as u32, 1), (32, 8, 1));
    let (pin, pout, hi, wi) = (ptr(&q, &din), ptr(&q, &dout), h as i32, w as i32);
    let lit = module.load_function("conv3x3_literal")?;
    let param = module.load_function("conv3x3_param")?;
    let mut sobel_flat = SOBEL;
    let kernel = || {
        let mut b = get_kernel_bundle_for(&[KernelId::new("conv3x3")]).unwrap();
        b.set_specialization_constant(&COEFF, SOBEL).unwrap();
        b
    };
    let check = |q: &Queue, what: &str| -> R<()> {
        let got = q.download(&dout)?;
        let (y, x) = (h / 2, w / 2);
        let mut want = 0f32;
        for i in 0..3 {
            for j in 0..3 {
                want += SOBEL[i][j] * img[(y + i - 1) * w + x + j - 1];
            }
        }
        let g = got[y * w + x];
        if (g - want).abs() > 1e-4 {
            return Err(format!("conv3x3 {what}: got {g}, want {want}").into());
        }
        Ok(())
    };
    let literal = time_ms(q.stream(), || {
        let (mut a, mut b, mut c, mut d) = (pin, pout, hi, wi);
        raw_launch(&q, &lit, cfg, params!(a, b, c, d))
    })?;
    check(&q, "literal")?;
    rows.push(Row {
        kernel: "conv3x3 8192²".into(),
        variant: "literal",
        ms: literal,
    });
    for (variant, mode) in [
        ("ptxspec native", SpecMode::Native),
        ("ptxspec emulated", SpecMode::Emulated),
    ] {
        let exe = build(&kernel().with_mode(mode))?;
        let ms = time_ms(q.stream(), || {
            q.submit(|hd| {
                hd.use_kernel_bundle(&exe)?;
                hd.launch(
                    "conv3x3",
                    cfg,
                    &[
                        Arg::buffer(&din),
                        Arg::buffer(&dout),
                        Arg::value(hi),
                        Arg::value(wi),
                    ],
                )
            })?;
            Ok(())
        })?;
        check(&q, variant)?;
        rows.push(Row {
            kernel: "conv3x3 8192²".into(),
            variant,
            ms,
        });
    }
    let by_value = time_ms(q.stream(), || {
        let (mut a, mut b, mut c, mut d) = (pin, pout, hi, wi);
        raw_launch(&q, &param, cfg, params!(a, b, c, d, sobel_flat))
    })?;
    check(&q, "by-value")?;
    rows.push(Row {
        kernel: "conv3x3 8192²".into(),
        variant: "by-value parameter",
        ms: by_value,
    });
    drop((din, dout));

    // Blocked matmul, N = 4096.
    let n = 4096usize;
    let a: Vec<f32> = (0..n * n)
        .map(|i| ((i * 31) % 97) as f32 / 97.0 - 0.5)
        .collect();
    let b: Vec<f32> = (0..n * n)
        .map(|i| ((i * 17) % 89) as f32 / 89.0 - 0.5)
        .collect();
    let (da, db) = (q.upload(&a)?, q.upload(&b)?);
    let dc: DeviceBuffer<f32> = q.alloc_zeros(n * n)?;
    let (pa, pb, pc, ni) = (ptr(&q, &da), ptr(&q, &db), ptr(&q, &dc), n as i32);
    let want00: f32 = (0..n).map(|k| a[k] * b[k * n]).sum();
    let check_mm = |q: &Queue, what: &str| -> R<()> {
        let got = q.download(&dc)?[0];
        if (got - want00).abs() > 1e-2 * want00.abs().max(1.0) {
            return Err(format!("matmul {what}: c[0][0] = {got}, want {want00}").into());
        }
        Ok(())
    };
    for bs in [8u32, 16, 32] {
        let label = format!("matmul 4096, block {bs}");
        let g = n as u32 / bs;
        let cfg = LaunchConfig::new((g, g, 1), (bs, bs, 1)).with_shared_mem(2 * bs * bs * 4);
        let lit = module.load_function(&format!("matmul_literal_{bs}"))?;
        let param = module.load_function("matmul_param")?;
        let ms = time_ms(q.stream(), || {
            let (mut x, mut y, mut z, mut m) = (pa, pb, pc, ni);
            raw_launch(&q, &lit, cfg, params!(x, y, z, m))
        })?;
        check_mm(&q, "literal")?;
        rows.push(Row {
            kernel: label.clone(),
            variant: "literal",
            ms,
        });
        for (kname, variant, mode) in [
            ("matmul", "ptxspec native", SpecMode::Native),
            ("matmul", "ptxspec emulated", SpecMode::Emulated),
            (
                "matmul_rolled",
                "ptxspec native, rolled loop",
                SpecMode::Native,
            ),
            (
                "matmul_rolled",
                "ptxspec emulated, rolled loop",
                SpecMode::Emulated,
            ),
        ] {
            let mut input = get_kernel_bundle_for(&[KernelId::new(kname)])?.with_mode(mode);
            input.set_specialization_constant(&BLOCK, bs as i32)?;
            let exe = build(&input)?;
            let ms = time_ms(q.stream(), || {
                q.submit(|h| {
                    h.use_kernel_bundle(&exe)?;
                    h.launch(
                        kname,
                        cfg,
                        &[
                            Arg::buffer(&da),
                            Arg::buffer(&db),
                            Arg::buffer(&dc),
                            Arg::value(ni),
                        ],
                    )
                })?;
                Ok(())
            })?;
            check_mm(&q, variant)?;
            rows.push(Row {
                kernel: label.clone(),
                variant,
                ms,
            });
        }
        let ms = time_ms(q.stream(), || {
            let (mut x, mut y, mut z, mut m, mut s) = (pa, pb, pc, ni, bs as i32);
            raw_launch(&q, &param, cfg, params!(x, y, z, m, s))
        })?;
        check_mm(&q, "by-value")?;
        rows.push(Row {
            kernel: label,
            variant: "by-value parameter",
            ms,
        });
    }

    // Launch overhead: host time per launch of a tiny kernel, synchronized
    // once at the end (launches queue up as an application's would).
    let out: DeviceBuffer<i32> = q.alloc_zeros(1)?;
    let pout = ptr(&q, &out);
    let plain = module.load_function("tiny_plain")?;
    let one = LaunchConfig::new((1, 1, 1), (32, 1, 1));
    let per_launch_us = |f: &mut dyn FnMut(i32) -> R<()>| -> R<f64> {
        for i in 0..200 {
            f(i)?;
        }
        q.wait()?;
        let mut samples = Vec::new();
        for _ in 0..5 {
            let t = Instant::now();
            for i in 0..10_000 {
                f(i)?;
            }
            q.wait()?;
            samples.push(t.elapsed().as_secs_f64() * 1e6 / 10_000.0);
        }
        samples.sort_by(f64::total_cmp);
        Ok(samples[2])
    };
    let plain_us = per_launch_us(&mut |i| {
        let (mut p, mut v) = (pout, i);
        raw_launch(
            &q,
            &plain,
            one,
            &mut [&mut p as *mut _ as _, &mut v as *mut _ as _],
        )
    })?;
    let tiny_exe =
        build(&get_kernel_bundle_for(&[KernelId::new("tiny")])?.with_mode(SpecMode::Emulated))?;
    let unchanged_us = per_launch_us(&mut |_| {
        q.submit(|h| {
            h.use_kernel_bundle(&tiny_exe)?;
            h.launch("tiny", one, &[Arg::buffer(&out)])
        })?;
        Ok(())
    })?;
    let changed_us = per_launch_us(&mut |i| {
        q.submit(|h| {
            h.set_specialization_constant(&TINY, i)?;
            h.launch("tiny", one, &[Arg::buffer(&out)])
        })?;
        Ok(())
    })?;
    if q.download(&out)?[0] != 9_999 {
        return Err("tiny kernel did not see the last value".into());
    }
    let _ = writeln!(
        notes,
        "launch overhead (host µs per launch, 10 000 launches, median of 5): plain {plain_us:.2}; ptxspec unchanged values {unchanged_us:.2} (+{:.2}); value changed before every launch {changed_us:.2} (+{:.2})",
        unchanged_us - plain_us,
        changed_us - plain_us
    );

    // Native specialization: a new value (PTX rewrite, then driver JIT at
    // the first launch) and a repeat build (cache hit).
    let base = get_kernel_bundle_for(&[KernelId::new("matmul")])?;
    let mut rewrite_us = Vec::new();
    let mut first_launch_ms = Vec::new();
    for (k, bs) in [4i32, 2, 1].iter().enumerate() {
        let mut input: KernelBundle<_> = base.clone();
        input.set_specialization_constant(&BLOCK, *bs)?;
        let t = Instant::now();
        let exe = build(&input)?;
        rewrite_us.push(t.elapsed().as_secs_f64() * 1e6);
        let small: DeviceBuffer<f32> = q.alloc_zeros(64 * 64)?;
        let g = 64 / *bs as u32;
        let cfg = LaunchConfig::new((g, g, 1), (*bs as u32, *bs as u32, 1))
            .with_shared_mem(2 * (*bs * *bs) as u32 * 4);
        let t = Instant::now();
        q.submit(|h| {
            h.use_kernel_bundle(&exe)?;
            h.launch(
                "matmul",
                cfg,
                &[
                    Arg::buffer(&small),
                    Arg::buffer(&small),
                    Arg::buffer(&small),
                    Arg::value(64i32),
                ],
            )
        })?;
        q.wait()?;
        first_launch_ms.push(t.elapsed().as_secs_f64() * 1e3);
        let _ = k;
    }
    let mut input: KernelBundle<_> = base.clone();
    input.set_specialization_constant(&BLOCK, 4)?;
    let t = Instant::now();
    let reps = 10_000;
    for _ in 0..reps {
        std::hint::black_box(build(std::hint::black_box(&input))?);
    }
    let hit_us = t.elapsed().as_secs_f64() * 1e6 / reps as f64;
    let _ = writeln!(
        notes,
        "native specialization: PTX rewrite for new values {:.0}/{:.0}/{:.0} µs; first launch (driver JIT + load) {:.1}/{:.1}/{:.1} ms; repeat build (cache hit) {hit_us:.2} µs",
        rewrite_us[0],
        rewrite_us[1],
        rewrite_us[2],
        first_launch_ms[0],
        first_launch_ms[1],
        first_launch_ms[2]
    );

    // The table: ratio of each variant to the literal of the same kernel.
    println!("\n| kernel | variant | ms (median) | × literal |\n|---|---|---|---|");
    let out_path =
        std::env::var("PTXSPEC_BENCH_OUT").unwrap_or_else(|_| "target/gpu-bench.jsonl".into());
    let mut jsonl = String::new();
    for r in &rows {
        let lit = rows
            .iter()
            .find(|x| x.kernel == r.kernel && x.variant == "literal")
            .map_or(f64::NAN, |x| x.ms);
        println!(
            "| {} | {} | {:.4} | {:.3} |",
            r.kernel,
            r.variant,
            r.ms,
            r.ms / lit
        );
        let _ = writeln!(
            jsonl,
            "{{\"kernel\":\"{}\",\"variant\":\"{}\",\"ms\":{:.6},\"ratio\":{:.5}}}",
            r.kernel,
            r.variant,
            r.ms,
            r.ms / lit
        );
    }
    println!("\n{notes}");
    std::fs::write(&out_path, jsonl)?;
    println!("wrote {out_path}");
    Ok(())
}
