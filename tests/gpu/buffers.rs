//! Device memory: buffers used across queues, written and filled, a program's own cudarc memory, values in global and parameter buffers.

use super::*;

/// A kernel that waits `spin_ns` nanoseconds (the GPU's global timer), then
/// copies `n` words from `src` to `dst`: long enough for the host to act
/// while it runs.
pub(super) const SPIN_COPY: &str = ".version 7.0\n.target sm_70\n.address_size 64\n\
    .visible .entry spin_copy(.param .u64 src, .param .u64 dst, .param .u32 n, .param .u64 spin_ns)\n{\n\
    .reg .pred %p<3>; .reg .b32 %r<10>; .reg .b64 %rd<12>;\n\
    ld.param.u64 %rd1, [src]; ld.param.u64 %rd2, [dst]; ld.param.u32 %r1, [n]; ld.param.u64 %rd3, [spin_ns];\n\
    cvta.to.global.u64 %rd1, %rd1; cvta.to.global.u64 %rd2, %rd2;\n\
    mov.u64 %rd4, %globaltimer;\n\
    WAIT: mov.u64 %rd5, %globaltimer; sub.s64 %rd6, %rd5, %rd4; setp.lt.u64 %p1, %rd6, %rd3; @%p1 bra WAIT;\n\
    mov.u32 %r2, %tid.x; mov.u32 %r3, %ctaid.x; mov.u32 %r4, %ntid.x; mov.u32 %r5, %nctaid.x;\n\
    mad.lo.s32 %r6, %r3, %r4, %r2; mul.lo.s32 %r7, %r4, %r5;\n\
    LOOP: setp.ge.u32 %p2, %r6, %r1; @%p2 bra DONE;\n\
    mul.wide.u32 %rd7, %r6, 4; add.s64 %rd8, %rd1, %rd7; ld.global.u32 %r8, [%rd8];\n\
    add.s64 %rd9, %rd2, %rd7; st.global.u32 [%rd9], %r8;\n\
    add.s32 %r6, %r6, %r7; bra LOOP;\n\
    DONE: ret;\n}\n";

pub(super) fn spin_copy_bundle() -> KernelBundle<Executable> {
    let opts = ptxspec_core::postlink::Options::default();
    let img = ptxspec_core::postlink::post_link(vec![("spin.ptx".into(), SPIN_COPY.into())], &opts)
        .unwrap()
        .remove(0);
    let image = Image::new(img.stem, img.ptx, &img.props.to_text()).unwrap();
    build(&KernelBundle::from_images([image])).unwrap()
}

pub(super) fn spin_copy<'a>(
    q: &Queue,
    exe: &KernelBundle<Executable>,
    src: Arg<'a>,
    dst: Arg<'a>,
    n: usize,
    spin_ms: u64,
) {
    q.submit(|h| {
        h.use_kernel_bundle(exe)?;
        h.launch(
            "spin_copy",
            LaunchConfig::new((1024, 1, 1), (256, 1, 1)),
            &[
                src,
                dst,
                Arg::value(n as u32),
                Arg::value(spin_ms * 1_000_000),
            ],
        )
    })
    .unwrap();
}

/// A buffer made on one queue and read by a kernel on another: the launch
/// waits for the upload, and dropping the buffer (then reusing its memory on
/// its own queue) waits for the kernel.
pub(super) fn buffers_used_across_queues(_: &Arc<Queue>) {
    let (qa, qb) = (Queue::new(0).unwrap(), Queue::new(0).unwrap());
    let exe = spin_copy_bundle();
    const N: usize = 64 << 20; // 256 MiB of words
    let data: Vec<u32> = (0..N as u32)
        .map(|i| i.wrapping_mul(2_654_435_761))
        .collect();
    // A large upload on A, read at once by a kernel on B.
    let src = qa.upload(&data).unwrap();
    let dst: DeviceBuffer<u32> = qb.alloc_zeros(N).unwrap();
    spin_copy(&qb, &exe, Arg::buffer(&src), Arg::buffer(&dst), N, 0);
    assert!(
        qb.download(&dst).unwrap() == data,
        "the kernel on B ran before A's upload ended"
    );
    // Dropped while a kernel on B still waits to read it; its memory is then
    // reused by an upload on A of other contents.
    let small: Vec<u32> = (0..1u32 << 20).collect();
    let other: Vec<u32> = vec![0xdead_beef; small.len()];
    let src = qa.upload(&small).unwrap();
    let dst: DeviceBuffer<u32> = qb.alloc_zeros(small.len()).unwrap();
    qa.wait().unwrap();
    spin_copy(
        &qb,
        &exe,
        Arg::buffer(&src),
        Arg::buffer(&dst),
        small.len(),
        300,
    );
    drop(src);
    let reuse = qa.upload(&other).unwrap();
    qa.wait().unwrap();
    let got = qb.download(&dst).unwrap();
    let wrong = got.iter().zip(&small).filter(|(g, w)| g != w).count();
    assert_eq!(
        wrong, 0,
        "{wrong} words read after the buffer was freed under the kernel"
    );
    drop(reuse);
    // A buffer of another device is refused (only with two GPUs).
    if runtime::devices().map_or(0, |d| d.len()) >= 2 {
        let q1 = Queue::new(1).unwrap();
        let far = q1.upload(&[1u32]).unwrap();
        let e = qa
            .submit(|h| {
                h.use_kernel_bundle(&exe)?;
                h.launch(
                    "spin_copy",
                    LaunchConfig::new((1, 1, 1), (1, 1, 1)),
                    &[
                        Arg::buffer(&far),
                        Arg::buffer(&far),
                        Arg::value(1u32),
                        Arg::value(0u64),
                    ],
                )
            })
            .unwrap_err();
        assert_eq!(e.errc(), ptxspec::Errc::Invalid, "{e}");
    }
}

/// `Queue::write` and `Queue::fill`: a range written into a buffer, a fill
/// of elements whose bytes are all equal (a memset) and of elements whose
/// bytes differ (a pattern, past one piece), the same on a buffer of
/// another queue (ordered after its upload), and ranges past the end
/// refused with nothing written.
pub(super) fn buffers_are_written_and_filled(q: &Arc<Queue>) {
    let buf = q.alloc_zeros::<u32>(10).unwrap();
    q.write(&buf, 3, &[7, 8, 9]).unwrap();
    assert_eq!(q.download(&buf).unwrap(), [0, 0, 0, 7, 8, 9, 0, 0, 0, 0]);
    q.write(&buf, 10, &[]).unwrap();
    for (offset, len) in [(8, 3), (11, 0), (usize::MAX, 2)] {
        let e = q.write(&buf, offset, &vec![1u32; len]).unwrap_err();
        assert_eq!(e.errc(), ptxspec::Errc::Invalid, "{e}");
    }
    assert_eq!(q.download(&buf).unwrap(), [0, 0, 0, 7, 8, 9, 0, 0, 0, 0]);
    q.fill(&buf, 0x0101_0101u32).unwrap();
    assert_eq!(q.download(&buf).unwrap(), [0x0101_0101; 10]);
    // 12-byte elements, more than one piece of the pattern.
    let n = (3 << 20) / 12 + 5;
    let big = q.alloc_zeros::<[u32; 3]>(n).unwrap();
    q.fill(&big, [1, 2, 3]).unwrap();
    let got = q.download(&big).unwrap();
    assert!(got.iter().all(|e| *e == [1, 2, 3]), "a pattern fill");
    let floats = q.alloc_zeros::<f32>(1000).unwrap();
    q.fill(&floats, 3.5f32).unwrap();
    assert_eq!(q.download(&floats).unwrap(), vec![3.5f32; 1000]);
    // A buffer of another queue: written after its home's upload.
    let other = Queue::new(0).unwrap();
    let theirs = other.upload(&vec![5u32; 1 << 20]).unwrap();
    q.write(&theirs, 0, &[6, 6]).unwrap();
    let got = other.download(&theirs).unwrap();
    assert_eq!(&got[..3], &[6, 6, 5]);
}

/// Two new streams of `ctx` (a program's own) and a queue over the first.
fn queue_over_own_stream(
    ctx: &Arc<cudarc::driver::CudaContext>,
) -> (
    Queue,
    Arc<cudarc::driver::CudaStream>,
    Arc<cudarc::driver::CudaStream>,
) {
    let (mine, other) = (ctx.new_stream().unwrap(), ctx.new_stream().unwrap());
    // SAFETY: the tests begin no capture of `mine`, and make no other queue
    // over it.
    let q = unsafe { Queue::from_stream(Arc::clone(&mine)) }.unwrap();
    (q, mine, other)
}

/// A program's own cudarc context, stream and slices: a queue over its
/// stream, slices as arguments (read and written), a slice of another of
/// its streams, results read back through cudarc.
pub(super) fn bring_your_own_cudarc(_: &Arc<Queue>) {
    let ctx = cudarc::driver::CudaContext::new(0).unwrap();
    let (q, mine, other) = queue_over_own_stream(&ctx);
    // SAFETY: the test begins no capture of `mine`; only its handle is read.
    assert_eq!(unsafe { q.cuda_stream() }.cu_stream(), mine.cu_stream());
    let exe = spin_copy_bundle();
    let data: Vec<u32> = (0..1u32 << 20).map(|i| i ^ 0x5a5a).collect();
    // Made on the other stream; the queue's launch waits for it.
    let src = other.clone_htod(&data).unwrap();
    let mut dst = mine.alloc_zeros::<u32>(data.len()).unwrap();
    spin_copy(
        &q,
        &exe,
        Arg::slice(&src),
        Arg::slice_mut(&mut dst),
        data.len(),
        50,
    );
    // Read on the other stream: cudarc waits for the kernel's write.
    assert!(other.clone_dtoh(&dst).unwrap() == data);
    // The example kernels too, on the program's stream.
    let out = mine.alloc_zeros::<i64>(9).unwrap();
    let mut out = out;
    q.submit(|h| {
        h.launch(
            "scalars",
            LaunchConfig::new((1, 1, 1), (1, 1, 1)),
            &[Arg::slice_mut(&mut out)],
        )
    })
    .unwrap();
    assert_eq!(mine.clone_dtoh(&out).unwrap().len(), 9);
}

pub(super) fn conv_launch(
    q: &Queue,
    exe: &KernelBundle<Executable>,
    h: usize,
    w: usize,
    din: &DeviceBuffer<f32>,
) -> Vec<f32> {
    let out: DeviceBuffer<f32> = q.upload(&vec![f32::NAN; h * w]).unwrap();
    let cfg = LaunchConfig::new(
        (w.div_ceil(16) as u32, h.div_ceil(16) as u32, 1),
        (16, 16, 1),
    );
    q.submit(|hd| {
        hd.use_kernel_bundle(exe)?;
        hd.launch(
            "conv3x3",
            cfg,
            &[
                Arg::buffer(din),
                Arg::buffer(&out),
                Arg::value(h as i32),
                Arg::value(w as i32),
            ],
        )
    })
    .unwrap();
    q.download(&out).unwrap()
}

pub(super) fn global_and_param_buffers_with_handler_values(q: &Arc<Queue>) {
    let (h, w) = (40usize, 70usize);
    let img = pseudo_random(h * w, 3);
    let din = q.upload(&img).unwrap();
    let sobel = [[1.0, 0.0, -1.0], [2.0, 0.0, -2.0], [1.0, 0.0, -1.0]];
    for (buffer, delivery) in [
        (BufferPlacement::Global, Delivery::GlobalBuffer),
        (BufferPlacement::Param, Delivery::ParamSpace),
    ] {
        let mut input = KernelBundle::from_images(images_placed(&["conv3x3"], buffer))
            .with_mode(SpecMode::Emulated);
        input.set_specialization_constant(&COEFF, sobel).unwrap();
        let exe = build(&input).unwrap();
        assert_eq!(
            exe.built_image(&KernelId::new("conv3x3"))
                .unwrap()
                .delivery(),
            delivery
        );
        let err = max_rel_err(
            &conv_launch(q, &exe, h, w, &din),
            &reference::conv3x3(&img, h, w, &sobel),
        );
        assert!(err < 1e-5, "{buffer:?}: relative error {err}");
        // Native from the same images.
        let exe = build(&input.clone().with_mode(SpecMode::Native)).unwrap();
        let err = max_rel_err(
            &conv_launch(q, &exe, h, w, &din),
            &reference::conv3x3(&img, h, w, &sobel),
        );
        assert!(err < 1e-5, "{buffer:?} native: relative error {err}");
    }
}

/// More value sets of one global-buffer image than a queue keeps buffers
/// for (8), launched in turn: each launch reads its own values — also a
/// bundle launched again after others wrote over its buffer (its plan then
/// takes the buffer's address anew rather than the one it kept).
pub(super) fn global_buffers_written_over_give_each_launch_its_values(q: &Arc<Queue>) {
    let input = KernelBundle::from_images(images_placed(&["scalars"], BufferPlacement::Global))
        .with_mode(SpecMode::Emulated);
    let exes: Vec<_> = (0..12i16)
        .map(|v| {
            let mut b = input.clone();
            b.set_specialization_constant(&SHORT, 100 + v).unwrap();
            build(&b).unwrap()
        })
        .collect();
    assert_eq!(
        exes[0]
            .built_image(&KernelId::new("scalars"))
            .unwrap()
            .delivery(),
        Delivery::GlobalBuffer
    );
    let read = |exe: &KernelBundle<Executable>| run_scalars(q, exe)[3];
    // The first twice (its plan keeps its address), then every set in turn,
    // three times: from the ninth on, each writes over another's buffer.
    assert_eq!(read(&exes[0]), 100);
    assert_eq!(read(&exes[0]), 100);
    for round in 0..3 {
        for (v, exe) in exes.iter().enumerate() {
            assert_eq!(read(exe), 100 + v as i64, "round {round}, value set {v}");
        }
    }
}

/// cudarc slices of the queue's stream take the short launch path where
/// cudarc keeps no order of its own in the context (its event tracking
/// off: its records of their uses record nothing), and the whole path
/// where it does, or where a slice is of another stream — each launch's
/// results read back, in both contexts and for read and written slices.
pub(super) fn cudarc_slices_take_the_short_path_where_cudarc_keeps_no_order(_: &Arc<Queue>) {
    use cudarc::driver::CudaContext;
    let exe = spin_copy_bundle();
    let data: Vec<u32> = (0..1u32 << 16)
        .map(|i| i.wrapping_mul(2_654_435_761))
        .collect();
    for tracking in [true, false] {
        let ctx = CudaContext::new(0).unwrap();
        if !tracking {
            // SAFETY: set before any slice of this context object is made.
            unsafe { ctx.disable_event_tracking() };
        }
        let (q, mine, other) = queue_over_own_stream(&ctx);
        let src = mine.clone_htod(&data).unwrap();
        let before = q.launch_paths();
        for round in 0..6u32 {
            let mut dst = mine.alloc_zeros::<u32>(data.len()).unwrap();
            spin_copy(
                &q,
                &exe,
                Arg::slice(&src),
                Arg::slice_mut(&mut dst),
                data.len(),
                0,
            );
            assert!(
                mine.clone_dtoh(&dst).unwrap() == data,
                "tracking {tracking}, round {round}"
            );
        }
        let paths = q.launch_paths();
        let (short, whole) = (paths.short - before.short, paths.whole - before.whole);
        match tracking {
            true => assert_eq!((short, whole), (0, 6), "cudarc tracks the slices' uses"),
            false => assert_eq!((short, whole), (5, 1), "the first launch makes the plan"),
        }
        // A slice of another stream: the whole path joins the streams.
        let theirs = other.clone_htod(&data).unwrap();
        let mut dst = mine.alloc_zeros::<u32>(data.len()).unwrap();
        let before = q.launch_paths();
        spin_copy(
            &q,
            &exe,
            Arg::slice(&theirs),
            Arg::slice_mut(&mut dst),
            data.len(),
            0,
        );
        assert_eq!(q.launch_paths().whole - before.whole, 1);
        assert!(
            mine.clone_dtoh(&dst).unwrap() == data,
            "tracking {tracking}, another stream"
        );
    }
}
