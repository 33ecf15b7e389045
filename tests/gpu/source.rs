//! Kernels compiled from source at run time, launched in every mode and by their C++ names.

use super::*;

/// A bundle compiled from source at run time (issue 33) in every mode,
/// tiered too, with bundle values and handler values, read back; and an
/// `extern "C"` kernel that takes a handler and reads no constant, launched
/// with the caller's arguments alone.
pub(super) fn kernels_from_source_in_every_mode_and_extern_c_handlers(q: &Arc<Queue>) {
    let source = r#"#include "ptxspec.cuh"
constexpr ptxspec::specialization_id<int> add{5};
extern "C" __global__ void added(int *x, ptxspec::kernel_handler h) {
  x[threadIdx.x] = threadIdx.x + h.get_specialization_constant<add>();
}
extern "C" __global__ void untouched(int *x, int v, ptxspec::kernel_handler h) {
  x[threadIdx.x] = v;
}
"#;
    const ADD: SpecId<i32> = SpecId::new("add");
    let block = LaunchConfig::new((1, 1, 1), (32, 1, 1));
    let mut input =
        ptxspec::kernel_bundle_from_source(&[("gpu_source.cu", source)], &Default::default())
            .unwrap();
    input.set_specialization_constant(&ADD, 40).unwrap();
    let plus = |v: i32| (0..32).map(|i| v + i).collect::<Vec<i32>>();
    let run = |exe: &ptxspec::KernelBundle<ptxspec::Executable>, value: Option<i32>| {
        let out: DeviceBuffer<i32> = q.alloc_zeros(32).unwrap();
        q.submit(|h| {
            h.use_kernel_bundle(exe)?;
            if let Some(v) = value {
                h.set_specialization_constant(&ADD, v)?;
            }
            h.launch("added", block, &[Arg::buffer(&out)])
        })
        .unwrap();
        q.download(&out).unwrap()
    };
    for mode in MODES.into_iter().chain([SpecMode::Tiered]) {
        let exe = build(&input.clone().with_mode(mode)).unwrap();
        assert_eq!(run(&exe, None), plus(40), "{mode:?}");
        let out: DeviceBuffer<i32> = q.alloc_zeros(32).unwrap();
        q.submit(|h| {
            h.use_kernel_bundle(&exe)?;
            h.launch("untouched", block, &[Arg::buffer(&out), Arg::value(9i32)])
        })
        .unwrap_or_else(|e| panic!("{mode:?}: {e}"));
        assert_eq!(q.download(&out).unwrap(), vec![9; 32], "{mode:?}");
    }
    // Handler values: the source's images joined the registered kernels,
    // so a launch by name without a bundle finds them.
    for v in [-3, 11, 5] {
        let out: DeviceBuffer<i32> = q.alloc_zeros(32).unwrap();
        q.submit(|h| {
            if v != 5 {
                h.set_specialization_constant(&ADD, v)?;
            }
            h.launch("added", block, &[Arg::buffer(&out)])
        })
        .unwrap();
        assert_eq!(q.download(&out).unwrap(), plus(v), "handler value {v}");
    }
}

/// A kernel declared without `extern "C"` launches by its C++ name, its
/// `KernelId` or a bundle's `Kernel` —
/// from a bundle in every mode, and with handler values from the
/// registered images — again and again (past the fast path, which keeps
/// the image's name), and reads its values each time.
pub(super) fn kernels_launch_by_their_cpp_names(q: &Arc<Queue>) {
    let source = r#"#include "ptxspec.cuh"
constexpr ptxspec::specialization_id<int> offset_cpp{7};
__global__ void shifted_cpp(int *x, ptxspec::kernel_handler h) {
  x[threadIdx.x] = threadIdx.x + h.get_specialization_constant<offset_cpp>();
}
"#;
    const OFFSET: SpecId<i32> = SpecId::new("offset_cpp");
    let block = LaunchConfig::new((1, 1, 1), (32, 1, 1));
    let input =
        ptxspec::kernel_bundle_from_source(&[("gpu_cpp_names.cu", source)], &Default::default())
            .unwrap();
    assert!(input.kernel_ids()[0].name().starts_with("_Z11shifted_cpp"));
    let plus = |v: i32| (0..32).map(|i| v + i).collect::<Vec<i32>>();
    for mode in MODES.into_iter().chain([SpecMode::Tiered]) {
        for v in [3, 3, -4] {
            let mut values = input.clone();
            values.set_specialization_constant(&OFFSET, v).unwrap();
            let exe = build(&values.with_mode(mode)).unwrap();
            let out: DeviceBuffer<i32> = q.alloc_zeros(32).unwrap();
            q.submit(|h| {
                h.use_kernel_bundle(&exe)?;
                h.launch("shifted_cpp", block, &[Arg::buffer(&out)])
            })
            .unwrap_or_else(|e| panic!("{mode:?}: {e}"));
            assert_eq!(q.download(&out).unwrap(), plus(v), "{mode:?} {v}");
        }
    }
    // By its ID and by a bundle's Kernel, as by a name.
    let exe = build(&input).unwrap();
    let id = ptxspec::get_kernel_id("shifted_cpp").unwrap();
    let kernel = exe.get_kernel(&id).unwrap();
    for by in 0..2 {
        let out: DeviceBuffer<i32> = q.alloc_zeros(32).unwrap();
        q.submit(|h| {
            h.use_kernel_bundle(&exe)?;
            match by {
                0 => h.launch(&id, block, &[Arg::buffer(&out)]),
                _ => h.launch(&kernel, block, &[Arg::buffer(&out)]),
            }
        })
        .unwrap();
        assert_eq!(q.download(&out).unwrap(), plus(7), "launched by {by}");
    }
    for v in [-3, 11, 11, 7] {
        let out: DeviceBuffer<i32> = q.alloc_zeros(32).unwrap();
        q.submit(|h| {
            if v != 7 {
                h.set_specialization_constant(&OFFSET, v)?;
            }
            h.launch("shifted_cpp", block, &[Arg::buffer(&out)])
        })
        .unwrap();
        assert_eq!(q.download(&out).unwrap(), plus(v), "handler value {v}");
    }
}
