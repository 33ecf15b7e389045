// Registration code as ptxspec-build 0.1.0 generated it before the versioned
// entry point (a struct literal of ptxspec's hidden `EmbeddedImage`), kept
// as it was: today's crate must still compile it.
const _: () = {
    #[allow(dead_code)]
    const NAMES: &str = "generated_literal";
    ::ptxspec::inventory::submit! { ::ptxspec::registry::EmbeddedImage { id: "generated_literal", ptx: ".version 7.0\n.target sm_70\n.address_size 64\n.visible .entry lit()\n{\nret;\n}\n", props: "[SYCL/specialization constants]\n", ltoir: &[], kernels: &["lit"], declares_extern_function: Some(false), ltoir_sha256: None } }
};
