// A raw address for a pointer parameter: nothing keeps that memory alive
// for the launch (or a graph's replays), so only unsafe code gives one; a
// plain value there is refused at the launch (`Arg::value`).
use ptxspec::runtime::{Arg, DeviceBuffer, LaunchConfig, Queue};

fn raw(q: &Queue, buf: &DeviceBuffer<f32>) -> Result<(), ptxspec::Error> {
    q.submit(|h| {
        h.launch(
            "k",
            LaunchConfig::new((1, 1, 1), (1, 1, 1)),
            &[Arg::address(buf.device_address())],
        )
    })
}

fn main() {}
