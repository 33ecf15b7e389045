// A specialization constant named through the typed constants the build
// generates: a misspelled name and a value of another type do not compile
// (a string name would run with the default value, and say so only in the
// build log).
ptxspec_kernels::register_example_kernels!();

fn main() {
    let mut input = ptxspec::get_kernel_bundle().unwrap();
    input
        .set_specialization_constant(&spec_ids::BLOCK_SIZE_ID, 16)
        .unwrap();
    input
        .set_specialization_constant(&spec_ids::BLOK_SIZE_ID, 16)
        .unwrap();
    input
        .set_specialization_constant(&spec_ids::BLOCK_SIZE_ID, 1.5f32)
        .unwrap();
}
