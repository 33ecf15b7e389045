// A launch recorded into a capture whose graph lives on cannot take memory
// that is freed before it, even from a handler inside a loop.
use std::sync::Arc;

use ptxspec::cudarc::driver::CudaStream;
use ptxspec::runtime::{Arg, LaunchConfig, Queue};

fn loop_of_temporaries(q: &Queue, s: &Arc<CudaStream>) -> Result<(), ptxspec::Error> {
    let mut capturing = q.begin_capture()?;
    for _ in 0..2 {
        let temporary = s.alloc_zeros::<f32>(16).map_err(ptxspec::Error::from)?;
        capturing.submit(|h| {
            h.launch("k", LaunchConfig::new((1, 1, 1), (1, 1, 1)), &[Arg::slice(&temporary)])
        })?;
    }
    let mut graph = capturing.end()?;
    graph.launch()
}

fn main() {}
