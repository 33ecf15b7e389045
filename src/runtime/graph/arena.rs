//! The device memory a graph owns for its nodes' values in global
//! buffers, with a host copy flushed once per replay.

use cudarc::driver::CudaStream;

use crate::error::Error;

/// Where a node's values are in a graph's [`Arena`]: chunk and offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::runtime) struct ArenaSlot {
    pub(in crate::runtime) chunk: usize,
    pub(in crate::runtime) offset: usize,
    pub(in crate::runtime) len: usize,
}

/// Device memory a graph owns for the values of its nodes with a global
/// buffer, with a host copy: values changed since the last replay are
/// copied to the device in one transfer per chunk, ordered on the graph's
/// stream after the replays that read the old ones.
#[derive(Default)]
pub(in crate::runtime) struct Arena {
    chunks: Vec<Chunk>,
}

pub(in crate::runtime) struct Chunk {
    memory: crate::runtime::cuda::DeviceAllocation,
    host: Vec<u8>,
    used: usize,
    /// The byte range written since the last flush.
    dirty: Option<(usize, usize)>,
}

/// Bytes of device memory an arena allocates at a time.
const CHUNK_BYTES: usize = 64 << 10;
/// Each node's values start on this boundary (as `cuMemAlloc`'s would).
const SLOT_ALIGN: usize = 256;

impl Arena {
    /// Room for `contents`, holding them from the next flush.
    pub(in crate::runtime) fn place(&mut self, contents: &[u8]) -> Result<ArenaSlot, Error> {
        let len = contents.len();
        let fits = |c: &Chunk| c.used.next_multiple_of(SLOT_ALIGN) + len <= c.host.len();
        if !self.chunks.last().is_some_and(fits) {
            let bytes = len.next_multiple_of(SLOT_ALIGN).max(CHUNK_BYTES);
            // In the current context (the caller's queue or graph bound it);
            // freed when the graph (or an abandoned capture) drops it.
            let memory = crate::runtime::cuda::DeviceAllocation::new(bytes)?;
            self.chunks.push(Chunk {
                memory,
                host: vec![0; bytes],
                used: 0,
                dirty: None,
            });
        }
        let chunk = self.chunks.len() - 1;
        let c = &mut self.chunks[chunk];
        let offset = c.used.next_multiple_of(SLOT_ALIGN);
        c.used = offset + len;
        let at = ArenaSlot { chunk, offset, len };
        self.write(at, contents);
        Ok(at)
    }

    pub(in crate::runtime) fn address(&self, at: ArenaSlot) -> u64 {
        self.chunks[at.chunk].memory.address() + at.offset as u64
    }

    pub(in crate::runtime) fn write(&mut self, at: ArenaSlot, contents: &[u8]) {
        let c = &mut self.chunks[at.chunk];
        let end = at.offset + contents.len();
        c.host[at.offset..end].copy_from_slice(contents);
        c.dirty = Some(match c.dirty {
            Some((lo, hi)) => (lo.min(at.offset), hi.max(end)),
            None => (at.offset, end),
        });
    }

    /// Whether values changed since the last flush.
    pub(in crate::runtime) fn is_dirty(&self) -> bool {
        self.chunks.iter().any(|c| c.dirty.is_some())
    }

    /// Copies what changed to the device, in order on `stream`.
    pub(in crate::runtime) fn flush(&mut self, stream: &CudaStream) -> Result<(), Error> {
        for c in &mut self.chunks {
            if let Some((lo, hi)) = c.dirty.take() {
                c.memory.write_async(lo, &c.host[lo..hi], stream)?;
            }
        }
        Ok(())
    }
}
