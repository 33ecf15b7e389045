//! The launch shape of the blocked matmul kernels (`kernels/matmul.cu`'s
//! and the baselines'), one for the GPU tests and the GPU bench (included
//! by `#[path]`).

use ptxspec::runtime::LaunchConfig;

/// `bs` × `bs` blocks over an `n` × `n` matrix (`n` a multiple of `bs`),
/// with the two `bs` × `bs` tiles of floats each block keeps in shared
/// memory.
pub fn config(n: usize, bs: u32) -> LaunchConfig {
    let g = n as u32 / bs;
    LaunchConfig::new((g, g, 1), (bs, bs, 1)).with_shared_mem(2 * bs * bs * 4)
}
