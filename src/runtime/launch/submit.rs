//! A launch's submission: its joins with other streams, cudarc's records
//! of the slices it uses, the driver call, and its errors.

use super::*;

/// What a launch uses of its queue's state: its plan, and what the plan's
/// fill and a capture's record change or read beside it.
pub(super) struct Launching<'s> {
    pub(super) plan: &'s mut Plan,
    pub(super) buffers: &'s mut super::super::GlobalBufferCache,
    pub(super) capture: &'s mut Option<Box<super::super::graph::Capture>>,
}

/// Makes `stream` wait for the memory of other streams that `args` use (a
/// [`memory::Use`] whose `end`, after the launch, makes theirs wait for
/// it). A capture cannot join other streams (they would join the capture):
/// there, memory of another stream is an error.
#[inline(always)]
pub(super) fn wait_for_other_streams<'s>(
    stream: &'s cudarc::driver::CudaStream,
    args: &[Arg<'_>],
    capturing: bool,
    kernel: &str,
) -> Result<memory::Use<'s>, Error> {
    let uses = memory::Use::on(stream);
    for (n, home) in args
        .iter()
        .enumerate()
        .filter_map(|(n, a)| Some((n, a.home()?)))
    {
        if capturing && !uses.is_home(home) {
            return Err(foreign_memory_in_capture(kernel, n));
        }
        uses.begin(home)?;
    }
    Ok(uses)
}

/// Slices a launch keeps inline (their borrows, addresses and cudarc's
/// records): more are on the heap.
const INLINE_SLICES: usize = 8;

/// The launch's mutable borrows of the cudarc slices it writes, in
/// argument order, held until cudarc's records of their use are dropped.
/// Nothing is allocated for up to [`INLINE_SLICES`] of them.
#[inline(always)]
pub(super) fn borrow_written_slices<'s, 'a>(
    args: &'s [Arg<'a>],
) -> Result<
    smallvec::SmallVec<[std::cell::RefMut<'s, &'a mut dyn memory::CudarcSlice>; INLINE_SLICES]>,
    Error,
> {
    let mut written = smallvec::SmallVec::new();
    for a in args {
        if let ArgKind::SliceMut(s, _) = &a.0 {
            written.push(s.try_borrow_mut().map_err(|_| {
                Error::Internal("a slice_mut argument borrowed twice at one launch")
            })?);
        }
    }
    Ok(written)
}

/// The addresses of the cudarc slices among `args` (in argument order) and
/// cudarc's records of their use on `stream` (`written`: the borrows of
/// those written, from [`borrow_written_slices`]). Making them makes
/// `stream` wait for the slices' last uses; dropping a record marks the use
/// — after the launch.
#[inline(always)]
#[allow(clippy::type_complexity)]
pub(super) fn record_slice_uses<'b>(
    stream: &'b cudarc::driver::CudaStream,
    args: &'b [Arg<'_>],
    written: &'b mut [std::cell::RefMut<'_, &mut dyn memory::CudarcSlice>],
) -> Result<
    (
        smallvec::SmallVec<[u64; INLINE_SLICES]>,
        smallvec::SmallVec<[cudarc::driver::SyncOnDrop<'b>; INLINE_SLICES]>,
    ),
    Error,
> {
    let mut records = smallvec::SmallVec::new();
    let mut addresses = smallvec::SmallVec::new();
    let mut written = written.iter_mut();
    for a in args {
        let (address, record) = match &a.0 {
            ArgKind::Slice(s) => s.read(stream),
            ArgKind::SliceMut(..) => match written.next() {
                Some(s) => s.write(stream),
                None => return Err(Error::Internal("a slice_mut argument not borrowed")),
            },
            _ => continue,
        };
        addresses.push(address);
        records.push(record);
    }
    Ok((addresses, records))
}

/// Places the caller's arguments (`user`) by `layout` and launches
/// `function` on `q`'s stream: the one driver call of every launch, with
/// the queue's lock held and its context bound.
///
/// The memory the arguments point to outlives the launch: buffers on the
/// queue's stream are freed on it, after the kernel; memory of other
/// streams is joined with it around the call (by `launch_planned`), so that
/// their frees wait too; global buffers live in the queue, which
/// synchronizes before it drops them; the lock held keeps the queue's
/// global-buffer cache in step with the stream. A parameter that may hold
/// an address takes memory only (the layout refuses a value there), and a
/// raw address only through the unsafe `Arg::address`, whose caller answers
/// for it.
#[inline(always)]
pub(super) fn submit<'a>(
    q: &Queue,
    function: &cuda::Function,
    cfg: &LaunchConfig,
    layout: &'a LaunchLayout,
    user: impl ExactSizeIterator<Item = KernelArg<'a>>,
) -> Result<(), Error> {
    let mut params = ptxspec_core::image::LaunchParams::new();
    layout.place(user, &mut params)?;
    cuda::launch(function, cfg.dims(), &q.stream, &mut params)
}

/// A launch of `function` (or what its plan's `watch` chooses) on the
/// short path with cudarc slices among `args`
/// (of the queue's stream, in a context where cudarc keeps no order of its
/// own: `Handler::ready_plan`): their borrows and cudarc's records of
/// their use — which record nothing there, and made the stream wait for
/// nothing — held until the driver has the launch.
#[inline(never)]
pub(super) fn submit_with_slices(
    q: &Queue,
    function: &cuda::Function,
    watch: Option<&mut super::super::adapt::Watch>,
    layout: &LaunchLayout,
    cfg: &LaunchConfig,
    args: &[Arg<'_>],
) -> Result<(), Error> {
    let mut written = borrow_written_slices(args)?;
    let (addresses, records) = record_slice_uses(&q.stream, args, &mut written)?;
    let mut next = addresses.iter();
    let user = args
        .iter()
        .map(|a| a.kernel_arg(|| next.next().unwrap_or(&0)));
    let result = submit_watched(q, function, watch, layout, cfg, args, user);
    drop(records);
    drop(written);
    result
}

/// [`submit`] of `function`, or, for an adapting plan, of what its
/// `watch` chooses for `args` (the short path's submission).
#[inline(always)]
pub(super) fn submit_watched<'a>(
    q: &Queue,
    function: &cuda::Function,
    watch: Option<&mut super::super::adapt::Watch>,
    layout: &'a LaunchLayout,
    cfg: &LaunchConfig,
    args: &[Arg<'_>],
    user: impl ExactSizeIterator<Item = KernelArg<'a>>,
) -> Result<(), Error> {
    match watch {
        Some(watch) => submit_chosen(q, watch.choose(args), function, cfg, layout, user),
        None => submit(q, function, cfg, layout, user),
    }
}

/// [`submit`] of the code a plan's watch chose (`generic`: the plan's
/// own): a launch of a variant's trial between its two events. Out of the
/// line of launches without a watch.
#[inline(never)]
pub(super) fn submit_chosen<'a>(
    q: &Queue,
    chosen: super::super::adapt::Choice<'_>,
    generic: &cuda::Function,
    cfg: &LaunchConfig,
    layout: &'a LaunchLayout,
    user: impl ExactSizeIterator<Item = KernelArg<'a>>,
) -> Result<(), Error> {
    use super::super::adapt::Choice;
    let (function, timed) = match chosen {
        Choice::Generic => (generic, None),
        Choice::Variant(f) => (f, None),
        Choice::Timed(t) => (t.function.unwrap_or(generic), Some(t)),
    };
    if let Some(t) = &timed {
        t.start.record(&q.stream)?;
    }
    submit(q, function, cfg, layout, user)?;
    if let Some(t) = &timed {
        t.end.record(&q.stream)?;
    }
    Ok(())
}

// What a launch does rarely, out of its line (as is `Capture::record`):
// the code a launch runs every time then fits in fewer instruction-cache
// lines (which the driver's work between launches evicts as it does data).

#[cold]
pub(super) fn bundle_after_values() -> Error {
    Error::invalid(
        crate::error::Misuse::CommandGroupOrder,
        "use_kernel_bundle after set_specialization_constant in the same command group".into(),
    )
}

#[cold]
pub(super) fn wrong_work_group(kernel: &str, want: [u32; 3], block: [u32; 3]) -> Error {
    Error::NdRange {
        kernel: kernel.to_string(),
        required: want,
        given: block,
    }
}

#[cold]
pub(super) fn capture_mismatch(capturing: bool) -> Error {
    Error::invalid(
        crate::error::Misuse::Capture,
        match capturing {
            false => {
                "a launch on a queue that is capturing: while a capture lasts, the queue takes the \
                  launches made through it alone (Capturing::submit)"
                    .into()
            }
            true => "a launch recorded for a capture that has ended".into(),
        },
    )
}

#[cold]
pub(super) fn foreign_memory_in_capture(kernel: &str, n: usize) -> Error {
    Error::invalid(
        crate::error::Misuse::Capture,
        format!(
            "kernel {kernel} argument {n}: memory of another stream passed to a launch that is \
         being captured; a captured launch takes memory of the capturing queue's stream"
        ),
    )
}
