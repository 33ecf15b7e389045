// CUDA captures streams, not queues: a capture of the queue's stream that
// the queue does not know of would take its launches — code and values the
// queue frees — into a graph the program replays later. Safe code cannot
// reach the stream to begin one.
use ptxspec::cudarc::driver::sys::CUstreamCaptureMode;
use ptxspec::runtime::Queue;

fn foreign_capture(q: &Queue) {
    q.cuda_stream()
        .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED)
        .unwrap();
}

fn main() {}
