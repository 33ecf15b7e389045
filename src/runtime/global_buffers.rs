//! A queue's value sets in device memory, for images whose kernels read
//! their values from a global buffer.

use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream};

use crate::error::Error;

/// A queue's value sets in device memory: per image (by address), up to
/// [`GLOBAL_BUFFERS_PER_IMAGE`] buffers, the least recently used written
/// over when another value set comes.
///
/// Laid out in declaration order: `overwrites`, which every launch of a
/// kernel with such values reads, first (the queue keeps it among the
/// lines its launches read: `queue_lines`).
#[derive(Default)]
#[repr(C)]
pub(super) struct GlobalBufferCache {
    /// Buffers written over so far: an address taken when this was `n`
    /// still holds its value set while it is `n` (a launch plan then need
    /// not ask again).
    pub(super) overwrites: u64,
    pub(super) images: ptxspec_core::fasthash::FxHashMap<usize, GlobalBuffers>,
    /// Uses so far, to find the least recently used. (A launch plan that
    /// keeps its address asks no more, so its uses are not counted: a
    /// buffer still in use may be written over, and its next launch writes
    /// it again — slower, never wrong.)
    pub(super) clock: u64,
}

/// How many value sets an image keeps in device memory at once.
pub(super) const GLOBAL_BUFFERS_PER_IMAGE: usize = 8;

/// The global-memory buffers of one image, each holding one value set:
/// launches that alternate between value sets find theirs without an
/// upload, and a new value set overwrites the least recently used buffer
/// (the stream orders the write after the launches that read it).
pub(super) struct GlobalBuffers {
    pub(super) _image: Arc<crate::image::ImageData>,
    pub(super) slots: Vec<GlobalBuffer>,
}

/// One value set in device memory. Used only on its queue's stream, which
/// orders its writes after the launches that read it.
pub(super) struct GlobalBuffer {
    pub(super) contents: Vec<u8>,
    pub(super) slice: CudaSlice<u8>,
    /// The slice's address, taken once: the slice never leaves the queue.
    pub(super) address: u64,
    pub(super) last_use: u64,
}

impl GlobalBufferCache {
    /// The device address of a global buffer of `image` holding `blob`:
    /// one that holds it already, or the least recently used one written
    /// with it (on `stream`, which orders the write after the launches
    /// that read the old values).
    pub(super) fn address(
        &mut self,
        stream: &Arc<CudaStream>,
        image: &Arc<crate::image::ImageData>,
        blob: &[u8],
    ) -> Result<u64, Error> {
        use cudarc::driver::DevicePtr;
        if blob.is_empty() {
            return Ok(0);
        }
        self.clock += 1;
        let now = self.clock;
        let entry = self
            .images
            .entry(Arc::as_ptr(image) as usize)
            .or_insert_with(|| GlobalBuffers {
                _image: Arc::clone(image),
                slots: Vec::new(),
            });
        let i = match entry
            .slots
            .iter()
            .position(|s| s.contents.as_slice() == blob)
        {
            Some(i) => i,
            None if entry.slots.len() < GLOBAL_BUFFERS_PER_IMAGE => {
                let slice = stream.clone_htod(blob)?;
                let address = slice.device_ptr(stream).0;
                entry.slots.push(GlobalBuffer {
                    contents: blob.to_vec(),
                    slice,
                    address,
                    last_use: now,
                });
                entry.slots.len() - 1
            }
            None => {
                let Some((i, _)) = entry
                    .slots
                    .iter()
                    .enumerate()
                    .min_by_key(|(_, s)| s.last_use)
                else {
                    return Err(Error::Internal("a global-buffer cache entry without slots"));
                };
                let slot = &mut entry.slots[i];
                self.overwrites += 1;
                stream.memcpy_htod(blob, &mut slot.slice)?;
                slot.contents.clear();
                slot.contents.extend_from_slice(blob);
                i
            }
        };
        let slot = &mut entry.slots[i];
        slot.last_use = now;
        Ok(slot.address)
    }

    /// Buffers written over so far (see [`GlobalBufferCache::overwrites`]'s
    /// field).
    pub(super) fn overwrites(&self) -> u64 {
        self.overwrites
    }
}
