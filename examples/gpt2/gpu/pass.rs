//! One pass's launches: through the queue, or recorded into a CUDA graph.
//!
//! The model's code names its kernels' arguments as [`In`]s (memory read,
//! memory written, a value); a [`Pass`] turns them into ptxspec's
//! arguments. Run at once, memory goes as cudarc slices (safe: ptxspec
//! orders and checks them); recorded into a graph, memory goes as raw
//! device addresses, because the graph outlives the borrows of one pass —
//! the model keeps that memory alive as long as the graph (`StepGraph`).

use std::cell::RefCell;

use cudarc::driver::{CudaSlice, CudaStream, DevicePtr};
use ptxspec::runtime::{Arg, Capturing, LaunchConfig};

use super::{Error, Launcher};
use crate::reference::Config;

/// A slice of any element type, as a kernel's argument.
pub trait Memory {
    fn read(&self) -> Arg<'_>;
    fn write(&mut self) -> Arg<'_>;
    /// Its device address on `stream`.
    fn address(&self, stream: &CudaStream) -> u64;
}

impl<T> Memory for CudaSlice<T> {
    fn read(&self) -> Arg<'_> {
        Arg::slice(self)
    }
    fn write(&mut self) -> Arg<'_> {
        Arg::slice_mut(self)
    }
    fn address(&self, stream: &CudaStream) -> u64 {
        let (address, _record) = self.device_ptr(stream);
        address
    }
}

/// One argument of a launch.
pub enum In<'a> {
    Read(&'a dyn Memory),
    Write(&'a mut dyn Memory),
    /// A value's bytes (at most `VALUE_BYTES`) and their count.
    Value([u8; VALUE_BYTES], usize),
}

/// The largest value a launch of the model passes (the generic build's
/// dimensions).
const VALUE_BYTES: usize = 16;

impl In<'_> {
    /// As a launch run at once takes it.
    fn now(&mut self) -> Arg<'_> {
        match self {
            In::Read(m) => m.read(),
            In::Write(m) => m.write(),
            In::Value(bytes, len) => Arg::bytes(&bytes[..*len]),
        }
    }

    /// As a graph's node takes it: memory by its address.
    ///
    /// # Safety
    ///
    /// The memory stays allocated while the graph exists, and every use of
    /// it is on `stream`.
    unsafe fn recorded(&self, stream: &CudaStream) -> Arg<'static> {
        match self {
            // SAFETY: the caller's.
            In::Read(m) => unsafe { Arg::address(m.address(stream)) },
            // SAFETY: the caller's.
            In::Write(m) => unsafe { Arg::address(m.address(stream)) },
            In::Value(bytes, len) => Arg::bytes(&bytes[..*len]),
        }
    }
}

/// Memory the kernel reads.
pub fn rd<T>(s: &CudaSlice<T>) -> In<'_> {
    In::Read(s)
}

/// Memory the kernel writes.
pub fn wr<T>(s: &mut CudaSlice<T>) -> In<'_> {
    In::Write(s)
}

/// A value.
///
/// # Panics
///
/// Where `T` is larger than `VALUE_BYTES`: the model's own code passes
/// nothing larger.
pub fn val<'a, T: bytemuck::Pod>(x: T) -> In<'a> {
    let from = bytemuck::bytes_of(&x);
    let mut bytes = [0; VALUE_BYTES];
    bytes[..from.len()].copy_from_slice(from);
    In::Value(bytes, from.len())
}

/// One pass's launches: run at once, or recorded into `capture`.
pub struct Pass<'p> {
    pub config: Config,
    pub run: &'p Launcher,
    pub capture: Option<RefCell<Capturing<'p, 'static>>>,
}

impl<'p> Pass<'p> {
    /// Launches a kernel that takes no dimensions.
    pub fn launch(
        &self,
        kernel: &'static str,
        cfg: LaunchConfig,
        args: Vec<In<'_>>,
    ) -> Result<(), Error> {
        let run = self.run;
        let mut args = args;
        let Some(capture) = &self.capture else {
            let args: Vec<Arg<'_>> = args.iter_mut().map(In::now).collect();
            return run.timed(kernel, || {
                run.queue.submit(|h| {
                    h.use_kernel_bundle(&run.kernels)?;
                    h.launch(kernel, cfg, &args)
                })?;
                Ok(())
            });
        };
        let args: Vec<Arg<'static>> = args
            .iter()
            // SAFETY: the address is of the model's own memory, which stays
            // allocated while the graph exists (a `StepGraph` is dropped
            // before the memory it replays: first among the model's fields,
            // and before any reallocation), and every use of it is on the
            // queue's one stream.
            .map(|a| unsafe { a.recorded(&run.stream) })
            .collect();
        capture.borrow_mut().submit(|h| {
            h.use_kernel_bundle(&run.kernels)?;
            h.launch(kernel, cfg, &args)
        })?;
        Ok(())
    }

    /// Launches a kernel that reads the model's dimensions: from the
    /// specialization constants, or (the generic build) from one more
    /// argument.
    pub fn launch_sized(
        &self,
        kernel: &'static str,
        cfg: LaunchConfig,
        mut args: Vec<In<'_>>,
    ) -> Result<(), Error> {
        if let Some(dims) = self.run.generic {
            args.push(val(dims));
        }
        self.launch(kernel, cfg, args)
    }

    /// Runs `work` (cuBLAS's) between two timed events while a run is
    /// profiled.
    pub fn timed(
        &self,
        name: &'static str,
        work: impl FnOnce() -> Result<(), Error>,
    ) -> Result<(), Error> {
        self.run.timed(name, work)
    }
}
