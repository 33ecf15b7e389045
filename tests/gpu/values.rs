//! Values of every kind reach kernels in every mode: scalars, composites, SYCL's POD, vec and marray, each C++ entity its own constant.

use super::*;

pub(super) const POD: SpecId<Pod> = SpecId::new("pod_id");

pub(super) fn run_scalars(
    q: &Queue,
    bundle: &ptxspec::KernelBundle<ptxspec::Executable>,
) -> Vec<i64> {
    let out: DeviceBuffer<i64> = q.upload(&[0x5a5a_5a5a_i64; 9]).unwrap();
    q.submit(|h| {
        h.use_kernel_bundle(bundle)?;
        h.launch(
            "scalars",
            LaunchConfig::new((1, 1, 1), (1, 1, 1)),
            &[Arg::buffer(&out)],
        )
    })
    .unwrap();
    q.download(&out).unwrap()
}

pub(super) fn scalars_and_composites_in_both_modes(q: &Arc<Queue>) {
    for mode in MODES {
        let input = get_kernel_bundle_for(&[KernelId::new("scalars")])
            .unwrap()
            .with_mode(mode);
        // Defaults.
        let got = run_scalars(q, &build(&input).unwrap());
        assert_eq!(got, scalars_defaults(), "{mode:?} defaults");
        // Set values, including sign extension and a composite with padding.
        let mut input = input;
        input.set_specialization_constant(&CHAR, -128).unwrap();
        input.set_specialization_constant(&DOUBLE, -0.125).unwrap();
        input.set_specialization_constant(&BOOL, Bool(0)).unwrap();
        input.set_specialization_constant(&SHORT, 32767).unwrap();
        input
            .set_specialization_constant(&U64, u64::MAX - 1)
            .unwrap();
        input
            .set_specialization_constant(&PADDED, padded(-1, -2, i32::MIN, 127))
            .unwrap();
        let got = run_scalars(q, &build(&input).unwrap());
        let want = scalars_expected(
            -128,
            -0.125,
            false,
            32767,
            u64::MAX - 1,
            padded(-1, -2, i32::MIN, 127),
        );
        assert_eq!(got, want, "{mode:?} set values");
    }
}

pub(super) fn seed000_pod(q: &Arc<Queue>) {
    for mode in MODES {
        let mut input = get_kernel_bundle_for(&[KernelId::new("pod")])
            .unwrap()
            .with_mode(mode);
        let run = |b: &ptxspec::KernelBundle<ptxspec::Executable>| {
            let out: DeviceBuffer<i32> = q.upload(&[0x5a5a5a5a; 6]).unwrap();
            q.submit(|h| {
                h.use_kernel_bundle(b)?;
                h.launch(
                    "pod",
                    LaunchConfig::new((1, 1, 1), (1, 1, 1)),
                    &[Arg::buffer(&out)],
                )
            })
            .unwrap();
            q.download(&out).unwrap()
        };
        let f = |x: f32| x.to_bits() as i32;
        assert_eq!(
            run(&build(&input).unwrap()),
            [1, f(2.0), 2, f(3.0), 44, 44],
            "{mode:?}"
        );
        let v = Pod {
            a: [A { x: -3, y: 0.5 }, A { x: 9, y: -7.25 }],
            b: [100, -100],
        };
        input.set_specialization_constant(&POD, v).unwrap();
        assert_eq!(
            run(&build(&input).unwrap()),
            [-3, f(0.5), 9, f(-7.25), 100, -100],
            "{mode:?}"
        );
    }
}

/// SYCL-CTS same_name_stress, defined_various_ways and
/// same_name_internal_linkage on the GPU: one name in ten scopes, two
/// instantiations of a variable template, every declaration form and an
/// internal constant of one name in two units each read their own value, in
/// every mode and as handler values.
pub(super) fn each_cpp_entity_reads_its_own_value(q: &Arc<Queue>) {
    use ptxspec_kernels::same_name::*;
    let launch = |kernel: &str,
                  n: usize,
                  bundle: Option<&ptxspec::KernelBundle<ptxspec::Executable>>,
                  handler: &[(&'static str, i32)]| {
        let out: DeviceBuffer<i32> = q.alloc_zeros(n).unwrap();
        q.submit(|h| {
            if let Some(b) = bundle {
                h.use_kernel_bundle(b)?;
            }
            for (id, v) in handler {
                h.set_specialization_constant(&SpecId::<i32>::new(id), *v)?;
            }
            h.launch(
                kernel,
                LaunchConfig::new((1, 1, 1), (1, 1, 1)),
                &[Arg::buffer(&out)],
            )
        })
        .unwrap_or_else(|e| panic!("{kernel}: {e}"));
        q.download(&out).unwrap()
    };
    let kernels = [STRESS, WAYS, HERE, THERE].map(KernelId::new);
    // Defaults: each scope's index, the float instantiation 0; the forms
    // 10 to 16; the two units' internal constants 20 and 21.
    let mut defaults: Vec<i32> = (0..10).collect();
    defaults.push(0);
    assert_eq!(launch(STRESS, 11, None, &[]), defaults);
    assert_eq!(launch(WAYS, 7, None, &[]), (10..17).collect::<Vec<_>>());
    assert_eq!(launch(HERE, 1, None, &[]), [20]);
    assert_eq!(launch(THERE, 1, None, &[]), [21]);
    for mode in MODES {
        let mut input = get_kernel_bundle_for(&kernels).unwrap().with_mode(mode);
        for (i, id) in SCOPES.iter().chain(&FORMS).enumerate() {
            input
                .set_specialization_constant(&SpecId::<i32>::new(id), 100 + i as i32)
                .unwrap();
        }
        input
            .set_specialization_constant(&SpecId::<f32>::new("same<float>"), 77.0)
            .unwrap();
        input
            .set_specialization_constant(&SpecId::<i32>::new(THERE_ID), -21)
            .unwrap();
        let exe = build(&input).unwrap();
        let mut stress: Vec<i32> = (100..110).collect();
        stress.push(77);
        assert_eq!(launch(STRESS, 11, Some(&exe), &[]), stress, "{mode:?}");
        assert_eq!(
            launch(WAYS, 7, Some(&exe), &[]),
            (110..117).collect::<Vec<_>>(),
            "{mode:?}"
        );
        assert_eq!(launch(HERE, 1, Some(&exe), &[]), [20], "{mode:?}");
        assert_eq!(launch(THERE, 1, Some(&exe), &[]), [-21], "{mode:?}");
    }
    // Handler values: one scope's constant and one unit's.
    let mut expected = defaults.clone();
    expected[5] = -5;
    let inner = SCOPES[5];
    assert_eq!(launch(STRESS, 11, None, &[(inner, -5)]), expected);
    assert_eq!(launch(HERE, 1, None, &[(HERE_ID, 8), (THERE_ID, 9)]), [8]);
    assert_eq!(launch(THERE, 1, None, &[(HERE_ID, 8), (THERE_ID, 9)]), [9]);
}

/// SYCL 2020's vec (every length) and marray as constants' types (intel
/// marray_vec.cpp, SYCL-CTS specialization_constants): defaults and set
/// values read back byte for byte in every mode, and as handler values.
pub(super) fn vec_and_marray_values_in_every_mode(q: &Arc<Queue>) {
    use ptxspec::{Marray, SyclVec};
    const F3: SpecId<SyclVec<f32, 3>> = SpecId::new("vec_f3_id");
    const MF3: SpecId<Marray<f32, 3>> = SpecId::new("marray_f3_id");
    const I1: SpecId<SyclVec<i32, 1>> = SpecId::new("vec_i1_id");
    const S2: SpecId<SyclVec<i16, 2>> = SpecId::new("vec_s2_id");
    const D4: SpecId<SyclVec<f64, 4>> = SpecId::new("vec_d4_id");
    const U8: SpecId<SyclVec<u8, 8>> = SpecId::new("vec_u8_id");
    const I16: SpecId<SyclVec<i32, 16>> = SpecId::new("vec_i16_id");
    const D16: SpecId<SyclVec<f64, 16>> = SpecId::new("vec_d16_id");
    const C5: SpecId<Marray<i8, 5>> = SpecId::new("marray_c5_id");
    /// What the kernel writes: each value at a multiple of 128 bytes.
    fn slots(values: &[&[u8]]) -> Vec<u8> {
        let mut out = vec![0u8; 128 * 9];
        for (i, v) in values.iter().enumerate() {
            out[128 * i..128 * i + v.len()].copy_from_slice(v);
        }
        out
    }
    let mut ints: [i32; 16] = std::array::from_fn(|i| i as i32);
    ints[15] = -15;
    let doubles: [f64; 16] = std::array::from_fn(|i| i as f64 + 1.0);
    let defaults = slots(&[
        bytemuck::bytes_of(&SyclVec::new([1.0f32, 2.0, 3.0])),
        bytemuck::bytes_of(&Marray([1.0f32, 2.0, 3.0])),
        &(-7i32).to_le_bytes(),
        bytemuck::bytes_of(&SyclVec::new([-1i16, 2])),
        bytemuck::bytes_of(&SyclVec::new([0.5f64, 1.5, 2.5, 3.5])),
        &[1, 2, 3, 4, 5, 6, 7, 250],
        bytemuck::bytes_of(&SyclVec::new(ints)),
        bytemuck::bytes_of(&SyclVec::new(doubles)),
        b"abcde",
    ]);
    let run = |bundle: Option<&ptxspec::KernelBundle<ptxspec::Executable>>, handler: bool| {
        let out: DeviceBuffer<u8> = q.alloc_zeros(128 * 9).unwrap();
        q.submit(|h| {
            if let Some(b) = bundle {
                h.use_kernel_bundle(b)?;
            }
            if handler {
                h.set_specialization_constant(&F3, SyclVec::new([-1.0, -2.0, -3.0]))?;
                h.set_specialization_constant(&D16, SyclVec::new([0.25; 16]))?;
                h.set_specialization_constant(&C5, Marray([1, -2, 3, -4, 5]))?;
            }
            h.launch(
                "vec_types",
                LaunchConfig::new((1, 1, 1), (1, 1, 1)),
                &[Arg::buffer(&out)],
            )
        })
        .unwrap();
        q.download(&out).unwrap()
    };
    let set = slots(&[
        bytemuck::bytes_of(&SyclVec::new([10.0f32, 20.0, 30.0])),
        bytemuck::bytes_of(&Marray([4.0f32, 5.0, 6.0])),
        &i32::MIN.to_le_bytes(),
        bytemuck::bytes_of(&SyclVec::new([i16::MAX, i16::MIN])),
        bytemuck::bytes_of(&SyclVec::new([-0.0f64, 1e300, -2.0, 4.0])),
        &[255, 0, 1, 2, 3, 4, 5, 6],
        bytemuck::bytes_of(&SyclVec::new([7i32; 16])),
        bytemuck::bytes_of(&SyclVec::new([-1.5f64; 16])),
        bytemuck::bytes_of(&Marray([0i8, 1, 2, 3, -128])),
    ]);
    for mode in MODES {
        let input = get_kernel_bundle_for(&[KernelId::new("vec_types")])
            .unwrap()
            .with_mode(mode);
        let exe = build(&input).unwrap();
        assert_eq!(run(Some(&exe), false), defaults, "{mode:?}: defaults");
        let mut input = input;
        input
            .set_specialization_constant(&F3, SyclVec::new([10.0, 20.0, 30.0]))
            .unwrap();
        input
            .set_specialization_constant(&MF3, Marray([4.0, 5.0, 6.0]))
            .unwrap();
        input
            .set_specialization_constant(&I1, SyclVec::new([i32::MIN]))
            .unwrap();
        input
            .set_specialization_constant(&S2, SyclVec::new([i16::MAX, i16::MIN]))
            .unwrap();
        input
            .set_specialization_constant(&D4, SyclVec::new([-0.0, 1e300, -2.0, 4.0]))
            .unwrap();
        input
            .set_specialization_constant(&U8, SyclVec::new([255, 0, 1, 2, 3, 4, 5, 6]))
            .unwrap();
        input
            .set_specialization_constant(&I16, SyclVec::new([7; 16]))
            .unwrap();
        input
            .set_specialization_constant(&D16, SyclVec::new([-1.5; 16]))
            .unwrap();
        input
            .set_specialization_constant(&C5, Marray([0, 1, 2, 3, -128]))
            .unwrap();
        assert_eq!(
            input.get_specialization_constant(&D4).unwrap().elems[1],
            1e300
        );
        let exe = build(&input).unwrap();
        assert_eq!(run(Some(&exe), false), set, "{mode:?}: set values");
    }
    // Handler values (the emulated image), the others at their defaults.
    let mut want = defaults.clone();
    want[..16].copy_from_slice(bytemuck::bytes_of(&SyclVec::new([-1.0f32, -2.0, -3.0])));
    want[128 * 7..128 * 8].copy_from_slice(bytemuck::bytes_of(&SyclVec::new([0.25f64; 16])));
    want[128 * 8..128 * 8 + 5].copy_from_slice(bytemuck::bytes_of(&Marray([1i8, -2, 3, -4, 5])));
    assert_eq!(run(None, true), want, "handler values");
}
