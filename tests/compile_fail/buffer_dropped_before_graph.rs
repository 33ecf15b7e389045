// A DeviceBuffer a captured launch takes is borrowed for as long as the
// graph exists (which also keeps its memory): dropping it first does not
// compile.
use ptxspec::runtime::{Arg, DeviceBuffer, LaunchConfig, Queue};

fn replay_freed(q: &Queue, out: DeviceBuffer<i32>) -> Result<(), ptxspec::Error> {
    let mut graph = q.capture(|c| {
        c.submit(|h| h.launch("k", LaunchConfig::new((1, 1, 1), (1, 1, 1)), &[Arg::buffer(&out)]))
    })?;
    drop(out);
    graph.launch()
}

fn main() {}
