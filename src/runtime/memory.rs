//! Device memory that kernels use, and the one rule that orders its uses
//! across streams: [`DeviceBuffer`]'s docs state it (a buffer's *home*
//! stream, and the join of every use on another stream with it); every use
//! ptxspec makes of memory goes through [`Use`], whether or not cudarc's own
//! event tracking is on in the memory's context.
//!
//! A [`DeviceBuffer`] keeps its `CudaSlice` private: ptxspec's uses of it
//! are the only ones, so its address can be kept and a launch on its home
//! stream records no event. Slices of a program's own cudarc code come in
//! through [`Arg::slice`] and [`Arg::slice_mut`], which also keep cudarc's
//! own bookkeeping of them (its read and write events) true.

use std::cell::RefCell;
use std::marker::PhantomData;
use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream, DevicePtr, DevicePtrMut, SyncOnDrop};

use crate::error::Error;

/// Device memory holding `len` values of `T`, made by a [`Queue`](super::Queue)
/// ([`upload`](super::Queue::upload), [`alloc_zeros`](super::Queue::alloc_zeros))
/// and passed to kernels with [`Arg::buffer`]. Usable from any queue of the
/// same device. Freed when dropped, after every use submitted before.
///
/// Its queue's stream is its *home*: it allocated the buffer and frees it.
/// A use on another queue's stream is joined both ways with the home
/// stream: that stream first waits for the work submitted at home so far
/// (an upload in flight), and after the use the home stream waits for it,
/// so that nothing submitted there later — a copy, a kernel, the free when
/// the buffer is dropped — can overtake it. The same holds for the
/// program's own cudarc slices ([`Arg::slice`], [`Arg::slice_mut`]).
pub struct DeviceBuffer<T> {
    /// Shared with the graphs that captured launches of it: a graph keeps
    /// the memory it replays alive.
    slice: Arc<Memory>,
    /// The slice's device address, taken once (see the module docs).
    address: u64,
    /// The slice's home stream (the same `Arc` as the slice's own): a
    /// launch compares it with its queue's without reading `slice`'s
    /// memory, which its own work has pushed out of the nearest caches.
    home: Arc<CudaStream>,
    len: usize,
    _t: PhantomData<T>,
}

impl<T> DeviceBuffer<T> {
    /// A buffer of `len` values of `T` in `slice`, which holds at least
    /// their bytes (checked: the driver layer copies into the buffer by its
    /// byte length).
    pub(super) fn new(
        slice: CudaSlice<u8>,
        len: usize,
        gate: &super::stream_gate::StreamGate,
    ) -> Self {
        assert!(
            len.checked_mul(std::mem::size_of::<T>())
                .is_some_and(|b| b <= slice.len()),
            "a DeviceBuffer larger than its memory"
        );
        let address = slice.device_ptr(slice.stream()).0;
        let home = Arc::clone(slice.stream());
        DeviceBuffer {
            slice: Arc::new(Memory {
                slice: Some(slice),
                gate: gate.clone(),
            }),
            address,
            home,
            len,
            _t: PhantomData,
        }
    }

    /// Number of `T`s.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds no `T`.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The device address, for launches made outside ptxspec (benchmark
    /// baselines, cudarc's unsafe launches) and for the unsafe
    /// [`Arg::address`]. Such uses are the caller's to order with the
    /// buffer's queue, and must end before the buffer is dropped. A safe
    /// launch does not take it for a parameter that holds an address.
    pub fn device_address(&self) -> u64 {
        self.address
    }

    pub(super) fn slice(&self) -> &CudaSlice<u8> {
        self.slice.slice()
    }

    /// Its home stream (its slice's).
    pub(super) fn home(&self) -> &Arc<CudaStream> {
        &self.home
    }

    /// Its bytes: `len` values of `T`, within its slice (`new`'s caller
    /// allocated at least that many).
    pub(super) fn byte_len(&self) -> usize {
        self.len * std::mem::size_of::<T>()
    }

    /// Its memory as the driver layer's copies write it.
    pub(super) fn range(&self) -> super::cuda::BufferRange<'_> {
        super::cuda::BufferRange {
            _memory: self.slice(),
            address: self.address,
            bytes: self.byte_len(),
        }
    }
}

/// A buffer's memory, freed onto its home stream when the last of its
/// owners (the buffer, the graphs that took it) lets it go — but never into
/// a capture of that stream: another thread's capture would record the free
/// (and cudarc's waits before it) into its graph, and break it. Under the
/// stream's gate, a stream found capturing keeps the memory for the
/// process's life instead (`Stats::kept_until_exit`).
pub(super) struct Memory {
    /// `Some` until dropped.
    slice: Option<CudaSlice<u8>>,
    gate: super::stream_gate::StreamGate,
}

impl Memory {
    pub(super) fn slice(&self) -> &CudaSlice<u8> {
        match &self.slice {
            Some(s) => s,
            // Taken in `drop` alone, after which nothing reads it.
            None => unreachable!("a buffer's memory read after it was let go"),
        }
    }
}

impl Drop for Memory {
    fn drop(&mut self) {
        let Some(slice) = self.slice.take() else {
            return;
        };
        let _gate = self.gate.enter();
        match super::cuda::is_capturing(slice.stream()) {
            Ok(false) => drop(slice),
            _ => super::retire::keep_for_process(
                vec![Box::new(slice)],
                "a buffer let go while its stream captures",
            ),
        }
    }
}

/// One kernel argument: a value, or device memory passed as its address.
pub struct Arg<'a>(pub(super) ArgKind<'a>);

pub(super) enum ArgKind<'a> {
    /// Passed by value: its bytes.
    Value(ValueBytes),
    /// A [`DeviceBuffer`]: its address, kept, its home stream, and its
    /// memory (which a capture's graph keeps).
    Buffer {
        address: u64,
        home: &'a Arc<CudaStream>,
        memory: &'a Arc<Memory>,
    },
    /// A raw device address ([`Arg::address`], whose caller answers for
    /// the memory).
    Raw(u64),
    /// A by-value parameter's bytes with addresses among them
    /// ([`Arg::bytes_with_addresses`], whose caller answers for the
    /// memory they reach).
    Vouched(ValueBytes),
    /// A cudarc slice the kernel reads.
    Slice(&'a dyn CudarcSlice),
    /// A cudarc slice the kernel writes (borrowed mutably at the launch, to
    /// record cudarc's write event), with its home stream.
    SliceMut(RefCell<&'a mut dyn CudarcSlice>, Arc<CudaStream>),
}

/// The bytes of a by-value argument: inline up to [`INLINE_ARG`] bytes (a
/// scalar, a small struct), so that making an argument allocates nothing;
/// on the heap beyond.
pub(super) enum ValueBytes {
    Inline { bytes: [u8; INLINE_ARG], len: u8 },
    Heap(Vec<u8>),
}

/// Bytes of a by-value argument kept without allocating.
const INLINE_ARG: usize = 32;

impl AsRef<[u8]> for ValueBytes {
    fn as_ref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl ValueBytes {
    #[inline]
    pub(super) fn new(v: &[u8]) -> Self {
        match u8::try_from(v.len()) {
            Ok(len) if v.len() <= INLINE_ARG => {
                let mut bytes = [0; INLINE_ARG];
                bytes[..v.len()].copy_from_slice(v);
                ValueBytes::Inline { bytes, len }
            }
            _ => ValueBytes::Heap(v.to_vec()),
        }
    }

    /// Whether the bytes are on the heap (what dropping them frees).
    #[inline]
    pub(super) fn on_heap(&self) -> bool {
        matches!(self, ValueBytes::Heap(_))
    }

    #[inline]
    pub(super) fn as_slice(&self) -> &[u8] {
        match self {
            ValueBytes::Inline { bytes, len } => &bytes[..*len as usize],
            ValueBytes::Heap(v) => v,
        }
    }
}

/// A `CudaSlice` of any element type, as a launch uses it.
pub(super) trait CudarcSlice {
    fn home(&self) -> &Arc<CudaStream>;
    /// cudarc's `device_ptr` on `stream`: waits there for the slice's
    /// writes; the record marks a read when dropped.
    fn read<'b>(&'b self, stream: &'b CudaStream) -> (u64, SyncOnDrop<'b>);
    /// cudarc's `device_ptr_mut` on `stream`: waits there for the slice's
    /// reads and writes; the record marks a write when dropped.
    fn write<'b>(&'b mut self, stream: &'b CudaStream) -> (u64, SyncOnDrop<'b>);
}

impl<T> CudarcSlice for CudaSlice<T> {
    fn home(&self) -> &Arc<CudaStream> {
        self.stream()
    }
    fn read<'b>(&'b self, stream: &'b CudaStream) -> (u64, SyncOnDrop<'b>) {
        self.device_ptr(stream)
    }
    fn write<'b>(&'b mut self, stream: &'b CudaStream) -> (u64, SyncOnDrop<'b>) {
        self.device_ptr_mut(stream)
    }
}

impl<'a> Arg<'a> {
    /// A value passed by value.
    pub fn value<T: bytemuck::Pod>(v: T) -> Self {
        Arg(ArgKind::Value(ValueBytes::new(bytemuck::bytes_of(&v))))
    }

    /// The raw bytes of a by-value parameter (a struct the kernel takes by
    /// value); their count must be the parameter's size.
    pub fn bytes(bytes: &[u8]) -> Self {
        Arg(ArgKind::Value(ValueBytes::new(bytes)))
    }

    /// A raw device address, for a parameter that takes memory: what a
    /// safe launch cannot take (a plain value there is refused), for memory
    /// ptxspec does not see (allocated by other code, an offset into a
    /// buffer).
    ///
    /// # Safety
    ///
    /// `address` (and whatever the kernel reaches from it) is device memory
    /// of the launching queue's CUDA context that stays allocated, and is
    /// used by nothing else the kernel races with, until every launch that
    /// takes this argument has run — and, for a launch recorded by a
    /// capture, until the graph and every replay of it have ended. ptxspec
    /// neither keeps that memory alive nor orders its uses across streams.
    #[allow(unsafe_code)]
    pub unsafe fn address(address: u64) -> Self {
        Arg(ArgKind::Raw(address))
    }

    /// The raw bytes of a by-value parameter that holds device addresses —
    /// a struct with pointers in it, which a safe launch refuses as it
    /// refuses a number for a pointer (the kernel may use those bytes as
    /// an address). Their count must be the parameter's size.
    ///
    /// # Safety
    ///
    /// Every address the bytes hold (and whatever the kernel reaches from
    /// one) is device memory of the launching queue's CUDA context, as for
    /// [`Arg::address`]: it stays allocated, and is used by nothing else
    /// the kernel races with, until every launch that takes this argument
    /// has run — and, for a launch recorded by a capture, until the graph
    /// and every replay of it have ended. No byte is a host address
    /// (pinned, mapped or managed memory included). ptxspec neither keeps
    /// that memory alive nor orders its uses across streams; adaptive
    /// arguments never fix such a parameter.
    #[allow(unsafe_code)]
    pub unsafe fn bytes_with_addresses(bytes: &[u8]) -> Self {
        Arg(ArgKind::Vouched(ValueBytes::new(bytes)))
    }

    /// A buffer of ptxspec's, which the kernel may read and write.
    pub fn buffer<T>(b: &'a DeviceBuffer<T>) -> Self {
        Arg(ArgKind::Buffer {
            address: b.address,
            home: b.home(),
            memory: &b.slice,
        })
    }

    /// A slice of the program's own cudarc code that the kernel only reads
    /// (cudarc records a read of it). A slice of any stream of the queue's
    /// CUDA context is accepted; uses on other streams are ordered as
    /// [`DeviceBuffer`] says.
    pub fn slice<T>(s: &'a CudaSlice<T>) -> Self {
        Arg(ArgKind::Slice(s))
    }

    /// A slice of the program's own cudarc code that the kernel writes
    /// (cudarc records a write of it, so that its later uses on other
    /// streams wait for the kernel).
    pub fn slice_mut<T>(s: &'a mut CudaSlice<T>) -> Self {
        let home = Arc::clone(s.stream());
        Arg(ArgKind::SliceMut(RefCell::new(s), home))
    }

    /// What the kernel's parameter receives: a value's bytes, or memory's
    /// address — for a cudarc slice, the one the launch took
    /// (`slice_address`).
    #[inline]
    pub(super) fn kernel_arg<'s>(
        &'s self,
        slice_address: impl FnOnce() -> &'s u64,
    ) -> crate::image::KernelArg<'s> {
        use crate::image::KernelArg;
        match &self.0 {
            ArgKind::Value(v) => KernelArg::Value(v.as_slice()),
            ArgKind::Vouched(v) => KernelArg::Vouched(v.as_slice()),
            ArgKind::Buffer { address, .. } | ArgKind::Raw(address) => KernelArg::Address(address),
            ArgKind::Slice(_) | ArgKind::SliceMut(..) => KernelArg::Address(slice_address()),
        }
    }

    /// The home stream of the memory it passes, if it passes memory.
    pub(super) fn home(&self) -> Option<&CudaStream> {
        match &self.0 {
            ArgKind::Value(_) | ArgKind::Raw(_) | ArgKind::Vouched(_) => None,
            ArgKind::Buffer { home, .. } => Some(home),
            ArgKind::Slice(s) => Some(s.home()),
            ArgKind::SliceMut(_, home) => Some(home),
        }
    }
}

/// A use of device memory on `stream`, joined with the memory's home
/// stream where that is another one: [`Use::begin`] before submitting it,
/// [`Use::end`] after.
pub(super) struct Use<'s> {
    stream: &'s CudaStream,
}

impl<'s> Use<'s> {
    pub(super) fn on(stream: &'s CudaStream) -> Self {
        Use { stream }
    }

    /// Whether `home` is this stream (the same object, which a launch's
    /// buffers of its own queue are: known without reading either).
    pub(super) fn is_home(&self, home: &CudaStream) -> bool {
        std::ptr::eq(home, self.stream) || home.cu_stream() == self.stream.cu_stream()
    }

    /// Checks that `home` is usable here and makes this stream wait for the
    /// work submitted to it so far. A `home` that is capturing is refused,
    /// and so is a wait that joined this stream to a capture all the same
    /// (one begun by another thread in between): this stream then records
    /// nothing more, and that capture, left unjoined, cannot make a graph.
    pub(super) fn begin(&self, home: &CudaStream) -> Result<(), Error> {
        if self.is_home(home) {
            return Ok(());
        }
        if super::cuda::is_capturing(home)? {
            return Err(Error::invalid(
                crate::error::Misuse::Capture,
                "memory (or a stream) of a stream that is capturing, used by a queue: the queue's \
                 stream would join that capture, and a graph the queue does not own would record \
                 its work"
                    .into(),
            ));
        }
        if home.context().cu_ctx() != self.stream.context().cu_ctx() {
            return Err(Error::invalid(
                crate::error::Misuse::OtherDevice,
                format!(
                    "a buffer of device {} (or of another CUDA context) passed to a queue of device {}: \
                 device memory is used in the context that allocated it",
                    home.context().ordinal(),
                    self.stream.context().ordinal()
                ),
            ));
        }
        // This stream in a capture it did not begin (callers in a capture
        // of their own never join other streams): it waits for nothing
        // more there.
        if super::cuda::is_capturing(self.stream)? {
            return Err(super::joined_a_foreign_capture(
                "a use of another stream's memory",
            ));
        }
        self.stream.join(home)?;
        if super::cuda::is_capturing(self.stream)? {
            return Err(super::joined_a_foreign_capture(
                "a use of another stream's memory",
            ));
        }
        Ok(())
    }

    /// Makes `home` wait for what was submitted to this stream so far.
    pub(super) fn end(&self, home: &CudaStream) -> Result<(), Error> {
        if !self.is_home(home) {
            home.join(self.stream)?;
        }
        Ok(())
    }
}
