//! A queue's copies between the host and device buffers: buffers made from
//! host data or zeroed, written, filled and read back — each in the queue's
//! order, joined with the buffer's home stream where that is another one
//! (see [`DeviceBuffer`]), and none while a capture lasts.

use super::{DeviceBuffer, Queue, cuda, memory};
use crate::error::Error;

/// The largest piece of a [`Queue::fill`] pattern copied at once.
const FILL_PIECE: usize = 1 << 20;

impl Queue {
    /// A buffer holding a copy of `data` (not while a capture lasts).
    pub fn upload<T: bytemuck::Pod>(&self, data: &[T]) -> Result<DeviceBuffer<T>, Error> {
        let _gate = self.not_capturing("upload")?;
        let slice = self
            .stream
            .clone_htod(bytemuck::cast_slice::<T, u8>(data))?;
        Ok(DeviceBuffer::new(slice, data.len(), &self.gate))
    }

    /// A buffer of `len` zeroed `T`s (not while a capture lasts).
    pub fn alloc_zeros<T: bytemuck::Pod>(&self, len: usize) -> Result<DeviceBuffer<T>, Error> {
        let _gate = self.not_capturing("alloc_zeros")?;
        let bytes = len.checked_mul(std::mem::size_of::<T>()).ok_or_else(|| {
            Error::invalid(
                crate::error::Misuse::OutOfRange,
                format!(
                    "{len} values of {} bytes do not fit in memory",
                    std::mem::size_of::<T>()
                ),
            )
        })?;
        let slice = self.stream.alloc_zeros::<u8>(bytes)?;
        Ok(DeviceBuffer::new(slice, len, &self.gate))
    }

    /// Writes `data` into `buf` from its element `offset` on (not while a
    /// capture lasts). The copy runs in this queue's order — after the work
    /// submitted to it so far and, for a buffer of another queue, after the
    /// work submitted there — and `data` may be reused as soon as this
    /// returns (the driver has taken its copy). A range past the buffer's
    /// end is an error, and nothing is written.
    pub fn write<T: bytemuck::Pod>(
        &self,
        buf: &DeviceBuffer<T>,
        offset: usize,
        data: &[T],
    ) -> Result<(), Error> {
        let _gate = self.not_capturing("write")?;
        let end = offset.checked_add(data.len()).filter(|&e| e <= buf.len());
        if end.is_none() {
            return Err(Error::invalid(
                crate::error::Misuse::OutOfRange,
                format!(
                    "write of {} values at {offset} into a buffer of {}",
                    data.len(),
                    buf.len()
                ),
            ));
        }
        if data.is_empty() {
            return Ok(());
        }
        let copy = memory::Use::on(&self.stream);
        let home = buf.home();
        self.joined(copy.begin(home))?;
        self.stream.context().bind_to_thread()?;
        cuda::copy_into_buffer(
            buf.range(),
            offset * std::mem::size_of::<T>(),
            bytemuck::cast_slice::<T, u8>(data),
            &self.stream,
        )?;
        copy.end(home)?;
        Ok(())
    }

    /// Sets every element of `buf` to `value` (not while a capture lasts),
    /// in this queue's order as [`write`](Self::write) is.
    pub fn fill<T: bytemuck::Pod>(&self, buf: &DeviceBuffer<T>, value: T) -> Result<(), Error> {
        let _gate = self.not_capturing("fill")?;
        let bytes = bytemuck::bytes_of(&value);
        let total = buf.len() * bytes.len();
        if total == 0 {
            return Ok(());
        }
        let copy = memory::Use::on(&self.stream);
        let home = buf.home();
        self.joined(copy.begin(home))?;
        self.stream.context().bind_to_thread()?;
        if bytes.iter().all(|&b| b == bytes[0]) {
            cuda::fill_buffer(buf.range(), bytes[0], &self.stream)?;
        } else {
            // A pattern of whole elements, written piece by piece: no host
            // copy of the whole buffer.
            let per_piece = (FILL_PIECE / bytes.len()).max(1);
            let pattern: Vec<u8> = bytes
                .iter()
                .copied()
                .cycle()
                .take(per_piece.min(buf.len()) * bytes.len())
                .collect();
            let mut at = 0usize;
            while at < total {
                let n = pattern.len().min(total - at);
                cuda::copy_into_buffer(buf.range(), at, &pattern[..n], &self.stream)?;
                at += n;
            }
        }
        copy.end(home)?;
        Ok(())
    }

    /// The contents of a buffer (waits for the queue; a buffer of another
    /// queue is read after the work submitted there so far; not while a
    /// capture lasts).
    pub fn download<T: bytemuck::Pod>(&self, buf: &DeviceBuffer<T>) -> Result<Vec<T>, Error> {
        let _gate = self.not_capturing("download")?;
        let home = buf.home();
        let copy = memory::Use::on(&self.stream);
        self.joined(copy.begin(home))?;
        let bytes = self.stream.clone_dtoh(buf.slice())?;
        copy.end(home)?;
        let mut out = vec![T::zeroed(); buf.len()];
        bytemuck::cast_slice_mut::<T, u8>(&mut out).copy_from_slice(&bytes);
        Ok(out)
    }
}
