// `SyclVec`'s `Pod` impl relies on `VecLayout`'s padding and alignment:
// no other crate can implement it (and so make a vector with padding bytes
// that safe code reads as `Pod`), even for an element type of its own.
use ptxspec::sycl_types::{Len, VecLayout};

#[derive(Clone, Copy, Default)]
struct Unaligned;

#[derive(Clone, Copy)]
struct Mine(u8);

impl VecLayout<Mine> for Len<5> {
    type Pad = [u8; 3];
    type Align = Unaligned;
    const KIND: ptxspec::layout::ScalarKind = ptxspec::layout::ScalarKind::U8;
}

fn main() {}
