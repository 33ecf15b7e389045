//! Kernels as users write them: a kernel that takes a `kernel_handler` and
//! reads no constant behaves alike whether its name is C++ (the mangled name
//! shows the handler) or `extern "C"` (the handler's shape in PTX and a body
//! that never reads it say so): the runtime passes the handler, the caller
//! passes its own arguments alone.

mod common;

use common::*;
use ptxspec_core::compile::{self, CompileOptions};
use ptxspec_core::image::ImageData;
use ptxspec_core::postlink::{Mode, Split};

fn ptx_of(name: &str, source: &str) -> (String, String) {
    let header = compile::header_dir(None).unwrap();
    let unit = compile::compile_unit(name, source, &CompileOptions::default(), &header)
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    (name.to_string(), unit.ptx)
}

fn both_spellings_of_a_kernel_with_an_unread_handler_are_marked() {
    for (linkage, user) in [("extern \"C\"", 2), ("", 2)] {
        let src = format!(
            r#"#include "ptxspec.cuh"
{linkage} __global__ void only_handler(int *out, int n, ptxspec::kernel_handler h) {{ *out = n; }}
"#
        );
        let images = post_link(vec![ptx_of("h.ptx", &src)], Mode::Emulated, Split::Off);
        let image = ImageData::new("h", images[0].ptx.clone(), &images[0].props.to_text()).unwrap();
        let k = &image.kernels()[0];
        assert_eq!(
            k.handler.map(|h| (h.index, h.reads_constants)),
            Some((2, false)),
            "{linkage:?}"
        );
        assert_eq!(k.user_params().count(), user, "{linkage:?}");
    }
    // An extern "C" kernel whose last 8-byte struct parameter it reads is
    // the user's: not a handler.
    let src = r#"#include "ptxspec.cuh"
struct Pair { int a, b; };
extern "C" __global__ void reads_pair(int *out, Pair p) { *out = p.a + p.b; }
"#;
    let images = post_link(vec![ptx_of("p.ptx", src)], Mode::Emulated, Split::Off);
    assert_eq!(images[0].kernels[0].handler, None);
}

fn main() -> std::process::ExitCode {
    harness::run(
        "spellings",
        vec![(
            "both_spellings_of_a_kernel_with_an_unread_handler_are_marked",
            both_spellings_of_a_kernel_with_an_unread_handler_are_marked as fn(),
            harness::NVIDIA,
        )],
    )
}
