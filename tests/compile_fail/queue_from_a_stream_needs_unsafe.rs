// A queue over a stream the program keeps: the program could capture it
// behind the queue's back, so making one is unsafe.
use std::sync::Arc;

use ptxspec::cudarc::driver::CudaStream;
use ptxspec::runtime::Queue;

fn shared(stream: &Arc<CudaStream>) -> Queue {
    Queue::from_stream(Arc::clone(stream)).unwrap()
}

fn main() {}
