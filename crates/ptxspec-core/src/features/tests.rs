use super::*;
use crate::ptx::{ItemKind, parse};

/// Used and declared aspects of the one function in `body`.
fn aspects_of(body: &str) -> (BTreeSet<Aspect>, Option<BTreeSet<Aspect>>) {
    let src = format!(
        ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry k()\n{{\n{body}\n}}\n"
    );
    let m = parse("t.ptx", src).unwrap();
    let ItemKind::Function(f) = &m.items[3].kind else {
        panic!()
    };
    (used_aspects(&m, f), declared_aspects(&m, f).unwrap())
}

fn set(a: &[Aspect]) -> BTreeSet<Aspect> {
    a.iter().copied().collect()
}

#[test]
fn inference_per_aspect_from_hand_written_ptx() {
    let cases: &[(&str, &[Aspect])] = &[
        ("add.f16 %rs1, %rs2, %rs3;", &[Aspect::FP16]),
        ("fma.rn.f16x2 %r1, %r2, %r3, %r4;", &[Aspect::FP16]),
        ("cvt.rn.bf16.f32 %rs1, %f1;", &[Aspect::BF16_MATH]),
        ("fma.rn.bf16x2 %r1, %r2, %r3, %r4;", &[Aspect::BF16_MATH]),
        ("mul.f64 %fd1, %fd2, %fd3;", &[Aspect::FP64]),
        ("cvt.f64.f32 %fd1, %f1;", &[Aspect::FP64]),
        ("atom.global.add.u64 %rd1, [%rd2], 1;", &[Aspect::ATOMIC64]),
        ("red.global.add.u64 [%rd2], 1;", &[Aspect::ATOMIC64]),
        (
            "atom.global.cas.b64 %rd1, [%rd2], %rd3, %rd4;",
            &[Aspect::ATOMIC64],
        ),
        (
            "atom.global.add.f64 %fd1, [%rd2], %fd3;",
            &[Aspect::FP64, Aspect::ATOMIC64],
        ),
        // Data movement of doubles and 32-bit atomics use nothing optional.
        (
            "ld.global.f64 %fd1, [%rd1]; st.global.f64 [%rd1], %fd1; mov.f64 %fd2, %fd1;",
            &[],
        ),
        ("ld.global.nc.f64 %fd1, [%rd1];", &[]),
        ("atom.global.add.u32 %r1, [%rd2], 1;", &[]),
        ("add.f32 %f1, %f2, %f3;", &[]),
    ];
    for (body, want) in cases {
        assert_eq!(aspects_of(body).0, set(want), "{body}");
    }
}

#[test]
fn device_has_markers() {
    let (_, d) = aspects_of(
        "// begin inline asm\n// ptxspec.device_has fp16, fp64\n// end inline asm\nret;",
    );
    assert_eq!(d, Some(set(&[Aspect::FP16, Aspect::FP64])));
    let (_, d) = aspects_of("// ptxspec.device_has 28\n// ptxspec.device_has aspect::fp16\nret;");
    assert_eq!(d, Some(set(&[Aspect::ATOMIC64, Aspect::FP16])));
    assert_eq!(aspects_of("ret;").1, None);
    let m = parse(
        "t.ptx",
        ".entry k()\n{\n// ptxspec.device_has fp17\nret;\n}\n".into(),
    )
    .unwrap();
    let ItemKind::Function(f) = &m.items[0].kind else {
        panic!()
    };
    assert!(declared_aspects(&m, f).unwrap_err().contains("fp17"));
}

#[test]
fn device_checks_say_what_is_missing() {
    let r = Requirements {
        aspects: set(&[Aspect::FP16]),
        reqd_sub_group_size: Some(32),
        ..Default::default()
    };
    // A device profile without fp16 (an sm_50).
    let sm50 = [Aspect::GPU, Aspect::FP64, Aspect::ATOMIC64];
    assert_eq!(
        check_device(&r, &sm50, &[32], 1024).unwrap_err(),
        "Kernel uses optional feature corresponding to 'aspect::fp16' but device does not support this aspect."
    );
    let with_fp16 = [Aspect::GPU, Aspect::FP16];
    assert!(check_device(&r, &with_fp16, &[32], 1024).is_ok());
    assert_eq!(
        check_device(&r, &with_fp16, &[64], 1024).unwrap_err(),
        "Kernel has a required sub-group size of '32' but device does not support this sub-group size."
    );
    let big = Requirements {
        reqd_work_group_size: Some(vec![64, 32, 1]),
        ..Default::default()
    };
    assert!(
        check_device(&big, &[], &[32], 1024)
            .unwrap_err()
            .contains("work-group size of '64, 32, 1'")
    );
    assert!(check_device(&big, &[], &[32], 2048).is_ok());
}

#[test]
fn warp_size_reliance_from_hand_written_ptx() {
    let relies = |body: &str| {
        let src = format!(
            ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry k()\n{{\n{body}\n}}\n"
        );
        let m = parse("t.ptx", src).unwrap();
        let ItemKind::Function(f) = &m.items[3].kind else {
            panic!()
        };
        code_features(&m, f)
    };
    for body in [
        "shfl.sync.bfly.b32 %r1, %r2, 1, 31, -1;",
        "vote.sync.ballot.b32 %r1, %p1, -1;",
        "activemask.b32 %r1;",
        "movmatrix.sync.aligned.m8n8.trans.b16 %r1, %r2;",
        "bar.warp.sync -1;",
        "mov.u32 %r1, %laneid;",
        "redux.sync.add.u32 %r1, %r2, -1;",
    ] {
        assert!(relies(body).relies_on_warp_size, "{body}");
    }
    for body in [
        "bar.sync 0;",
        "add.s32 %r1, %r2, %r3;",
        "mov.u32 %r1, %tid.x;",
    ] {
        assert!(!relies(body).relies_on_warp_size, "{body}");
    }
    // Long opcodes are read whole: an fp64 mma is warp-level and fp64.
    let mma = relies(
        "mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%fd1, %fd2}, {%fd3}, {%fd4}, {%fd5, %fd6};",
    );
    assert_eq!(
        (mma.relies_on_warp_size, mma.aspects),
        (true, set(&[Aspect::FP64]))
    );
    assert_eq!(
        relies("copysign.f64 %fd1, %fd2, %fd3;").aspects,
        set(&[Aspect::FP64])
    );
    assert_eq!(relies("prefetchu.L1 [%rd1];").aspects, set(&[]));
}
