// A graph cannot be returned past the slice its launch borrows.
use std::sync::Arc;

use ptxspec::cudarc::driver::CudaStream;
use ptxspec::runtime::{Arg, Graph, LaunchConfig, Queue};

fn graph_of_a_local_slice(
    q: &Queue,
    s: &Arc<CudaStream>,
) -> Result<Graph<'static>, ptxspec::Error> {
    let slice = s.alloc_zeros::<f32>(16).map_err(ptxspec::Error::from)?;
    q.capture(|c| {
        c.submit(|h| h.launch("k", LaunchConfig::new((1, 1, 1), (1, 1, 1)), &[Arg::slice(&slice)]))
    })
}

fn main() {}
