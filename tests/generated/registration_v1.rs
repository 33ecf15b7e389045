// Registration code of the versioned entry point's first form
// (`EmbeddedImage::v1`), as ptxspec-build generates it: today's crate, and
// every later one, must compile it.
const _: () = {
    #[allow(dead_code)]
    const NAMES: &str = "generated_v1";
    ::ptxspec::inventory::submit! { ::ptxspec::registry::EmbeddedImage::v1("generated_v1", ".version 7.0\n.target sm_70\n.address_size 64\n.visible .entry v1k()\n{\nret;\n}\n", "[SYCL/specialization constants]\n", &[], &["v1k"], Some(false), None) }
};
