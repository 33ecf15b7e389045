//! The slot of a cubin being linked: asked without waiting for its link.
use super::*;
use std::sync::mpsc;

/// A launch asking whether a cubin is there gets its answer while
/// another thread links that cubin (it does not wait for the link), and
/// finds the cubin once the link stored it.
#[test]
fn peeking_never_waits_for_a_link() {
    let code = Arc::new(LtoCode::new(LinkFrom::LtoIr));
    let (linking, started) = mpsc::channel();
    let (finish, may_finish) = mpsc::channel::<()>();
    let linker = {
        let code = Arc::clone(&code);
        std::thread::spawn(move || {
            let slot = code.slot(90, Some("k"));
            let mut cubin = slot.lock().unwrap();
            linking.send(()).unwrap();
            may_finish.recv().unwrap();
            *cubin = Some(Arc::new(vec![7u8]));
        })
    };
    started.recv().unwrap();
    // The link is under way, its slot locked: answers come at once.
    assert_eq!(code.peek(90, Some("k")), None);
    assert_eq!(code.peek(90, None), None);
    // Other cubins' slots are free to be linked meanwhile.
    let other = code.slot(90, None);
    *other.try_lock().expect("another cubin's slot is not held") = Some(Arc::new(vec![1u8]));
    assert_eq!(code.peek(90, None).as_deref(), Some(&vec![1u8]));
    finish.send(()).unwrap();
    linker.join().unwrap();
    assert_eq!(code.peek(90, Some("k")).as_deref(), Some(&vec![7u8]));
    assert_eq!(code.peek(80, Some("k")), None);
}
