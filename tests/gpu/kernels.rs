//! The example kernels against their CPU references: the convolution with values changed between launches, the blocked matmul for each block size, two translation units.

use super::*;

pub(super) const COEFF: SpecId<[[f32; 3]; 3]> = SpecId::new("coeff_id");

pub(super) fn convolution_matches_cpu_with_values_changed_between_launches(q: &Arc<Queue>) {
    let (h, w) = (67usize, 130usize);
    let img = pseudo_random(h * w, 7);
    let input_buf = q.upload(&img).unwrap();
    let out: DeviceBuffer<f32> = q.alloc_zeros(h * w).unwrap();
    let cfg = LaunchConfig::new(
        (w.div_ceil(16) as u32, h.div_ceil(16) as u32, 1),
        (16, 16, 1),
    );
    let sobel = [[1.0, 0.0, -1.0], [2.0, 0.0, -2.0], [1.0, 0.0, -1.0]];
    let box9 = [[1.0f32 / 9.0; 3]; 3];
    let sharpen = [[0.0, -1.0, 0.0], [-1.0, 5.0, -1.0], [0.0, -1.0, 0.0]];
    for mode in MODES {
        for (name, c) in [
            ("default box", None),
            ("sobel", Some(sobel)),
            ("sharpen", Some(sharpen)),
            ("sobel again", Some(sobel)),
        ] {
            let mut input = get_kernel_bundle_for(&[KernelId::new("conv3x3")])
                .unwrap()
                .with_mode(mode);
            if let Some(c) = c {
                input.set_specialization_constant(&COEFF, c).unwrap();
            }
            let exe = build(&input).unwrap();
            q.upload(&vec![f32::NAN; h * w]).unwrap(); // unrelated traffic
            q.submit(|hd| {
                hd.use_kernel_bundle(&exe)?;
                hd.launch(
                    "conv3x3",
                    cfg,
                    &[
                        Arg::buffer(&input_buf),
                        Arg::buffer(&out),
                        Arg::value(h as i32),
                        Arg::value(w as i32),
                    ],
                )
            })
            .unwrap();
            let got = q.download(&out).unwrap();
            let want = reference::conv3x3(&img, h, w, &c.unwrap_or(box9));
            let err = max_rel_err(&got, &want);
            assert!(err < 1e-5, "{mode:?} {name}: relative error {err}");
        }
    }
}

pub(super) const BLOCK: SpecId<i32> = SpecId::new("block_size_id");

/// One launch of the blocked matmul (C = A·B, n×n, blocks of `bs`) from
/// `bundle`, or without one with `bs` as a handler value: C, and the code
/// the launch ran.
pub(super) fn matmul_once(
    q: &Queue,
    bundle: Option<&KernelBundle<Executable>>,
    (da, db): (&DeviceBuffer<f32>, &DeviceBuffer<f32>),
    n: usize,
    bs: u32,
) -> (Vec<f32>, Option<SpecMode>) {
    let dc: DeviceBuffer<f32> = q.upload(&vec![f32::NAN; n * n]).unwrap();
    let cfg = crate::matmul::config(n, bs);
    q.submit(|h| {
        match bundle {
            Some(b) => h.use_kernel_bundle(b)?,
            None => h.set_specialization_constant(&BLOCK, bs as i32)?,
        }
        h.launch(
            "matmul",
            cfg,
            &[
                Arg::buffer(da),
                Arg::buffer(db),
                Arg::buffer(&dc),
                Arg::value(n as i32),
            ],
        )
    })
    .unwrap();
    (q.download(&dc).unwrap(), q.last_launch_mode())
}

pub(super) fn blocked_matmul_for_each_block_size(q: &Arc<Queue>) {
    let n = 128usize;
    let (a, b) = (pseudo_random(n * n, 1), pseudo_random(n * n, 2));
    let want = reference::matmul(&a, &b, n);
    let (da, db) = (q.upload(&a).unwrap(), q.upload(&b).unwrap());
    for mode in MODES {
        for bs in [8u32, 16, 32] {
            let mut input = get_kernel_bundle_for(&[KernelId::new("matmul")])
                .unwrap()
                .with_mode(mode);
            input
                .set_specialization_constant(&BLOCK, bs as i32)
                .unwrap();
            let exe = build(&input).unwrap();
            let (c, _) = matmul_once(q, Some(&exe), (&da, &db), n, bs);
            let err = max_rel_err(&c, &want);
            assert!(err < 1e-5, "{mode:?} block {bs}: relative error {err}");
        }
    }
}

pub(super) fn two_translation_units_on_the_gpu(q: &Arc<Queue>) {
    let scale: SpecId<f32> = SpecId::new("scale_id");
    let offset: SpecId<i32> = SpecId::new("offset_id");
    let x: Vec<f32> = (0..100).map(|i| i as f32).collect();
    let din = q.upload(&x).unwrap();
    for mode in MODES {
        for (s, o) in [(None, None), (Some(0.5f32), Some(-4i32))] {
            let mut input = get_kernel_bundle_for(&[KernelId::new("two_tu")])
                .unwrap()
                .with_mode(mode);
            if let (Some(s), Some(o)) = (s, o) {
                input.set_specialization_constant(&scale, s).unwrap();
                input.set_specialization_constant(&offset, o).unwrap();
            }
            let exe = build(&input).unwrap();
            let out: DeviceBuffer<f32> = q.alloc_zeros(100).unwrap();
            q.submit(|h| {
                h.use_kernel_bundle(&exe)?;
                h.launch(
                    "two_tu",
                    LaunchConfig::new((1, 1, 1), (128, 1, 1)),
                    &[Arg::buffer(&din), Arg::buffer(&out), Arg::value(100i32)],
                )
            })
            .unwrap();
            let (s, o) = (s.unwrap_or(3.0), o.unwrap_or(10) as f32);
            let want: Vec<f32> = x.iter().map(|v| v * s + o + s).collect();
            assert_eq!(q.download(&out).unwrap(), want, "{mode:?}");
        }
    }
}
