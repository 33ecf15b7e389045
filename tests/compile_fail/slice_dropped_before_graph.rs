// A cudarc slice a captured launch reads is borrowed for as long as the
// graph exists: dropping it first does not compile.
use ptxspec::cudarc::driver::CudaSlice;
use ptxspec::runtime::{Arg, LaunchConfig, Queue};

fn replay_freed(q: &Queue, slice: CudaSlice<f32>) -> Result<(), ptxspec::Error> {
    let mut graph = q.capture(|c| {
        c.submit(|h| h.launch("k", LaunchConfig::new((1, 1, 1), (1, 1, 1)), &[Arg::slice(&slice)]))
    })?;
    drop(slice);
    graph.launch()
}

fn main() {}
