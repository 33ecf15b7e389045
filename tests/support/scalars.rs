//! What the GPU tests share: the `scalars` example kernel's constants and
//! what it writes for them, and images post-linked here from the committed
//! PTX with a chosen buffer placement.

#![allow(dead_code)]

use ptxspec::image::Image;
use ptxspec::{Bool, SpecId};
use ptxspec_core::postlink::{BufferPlacement, Options};

pub const CHAR: SpecId<i8> = SpecId::new("char_id");
pub const DOUBLE: SpecId<f64> = SpecId::new("double_id");
pub const BOOL: SpecId<Bool> = SpecId::new("bool_id");
pub const SHORT: SpecId<i16> = SpecId::new("short_id");
pub const U64: SpecId<u64> = SpecId::new("u64_id");

ptxspec::spec_struct! {
    /// `struct Padded { int a; char b; int c; char d; }` with its padding.
    pub struct Padded { pub a: i32, pub b: i8, pub _p0: ptxspec::Pad<3>, pub c: i32, pub d: i8, pub _p1: ptxspec::Pad<3> }
}
pub const PADDED: SpecId<Padded> = SpecId::new("padded_id");

/// What the `scalars` kernel writes for these values.
pub fn scalars_expected(c: i8, d: f64, b: bool, s: i16, u: u64, p: Padded) -> Vec<i64> {
    vec![
        c as i64,
        d.to_bits() as i64,
        b as i64,
        s as i64,
        u as i64,
        p.a as i64,
        p.b as i64,
        p.c as i64,
        p.d as i64,
    ]
}

/// What the `scalars` kernel writes with its defaults.
pub fn scalars_defaults() -> Vec<i64> {
    scalars_expected(
        -5,
        2.5,
        true,
        -300,
        0x1234_5678_9abc_def0,
        padded(7, b'x' as i8, -9, b'y' as i8),
    )
}

/// A `Padded` with zeroed padding.
pub fn padded(a: i32, b: i8, c: i32, d: i8) -> Padded {
    Padded {
        a,
        b,
        _p0: ptxspec::Pad::default(),
        c,
        d,
        _p1: ptxspec::Pad::default(),
    }
}

/// Images post-linked here from the committed PTX of `names` with the
/// buffer placed as asked (the embedded ones use `auto`: the parameter
/// space).
pub fn images_placed(names: &[&str], buffer: BufferPlacement) -> Vec<Image> {
    // Embedded: the binary runs on another machine than the one it was
    // built on.
    let committed = |n: &str| match n {
        "conv3x3" => include_str!("../../kernels/ptx/conv3x3.ptx"),
        "scalars" => include_str!("../../kernels/ptx/scalars.ptx"),
        "matmul" => include_str!("../../kernels/ptx/matmul.ptx"),
        _ => panic!("no committed PTX named {n} here"),
    };
    let inputs = names
        .iter()
        .map(|n| (format!("{n}.ptx"), committed(n).to_string()))
        .collect();
    let opts = Options {
        buffer,
        ..Default::default()
    };
    ptxspec_core::postlink::post_link(inputs, &opts)
        .unwrap()
        .into_iter()
        .map(|i| Image::new(i.stem, i.ptx, &i.props.to_text()).unwrap())
        .collect()
}
