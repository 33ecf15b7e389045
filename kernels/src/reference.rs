//! CPU references of the example kernels, shared by the GPU tests, the
//! examples and the GPU bench.

/// DPC++'s SYCL 2020 spec-constant design's 3x3 convolution, zero outside the image.
pub fn conv3x3(input: &[f32], h: usize, w: usize, c: &[[f32; 3]; 3]) -> Vec<f32> {
    let mut out = vec![0f32; h * w];
    for y in 0..h {
        for x in 0..w {
            let mut acc = 0f32;
            for (i, row) in c.iter().enumerate() {
                for (j, &k) in row.iter().enumerate() {
                    let (yy, xx) = (y as isize + i as isize - 1, x as isize + j as isize - 1);
                    if yy >= 0 && yy < h as isize && xx >= 0 && xx < w as isize {
                        acc += k * input[yy as usize * w + xx as usize];
                    }
                }
            }
            out[y * w + x] = acc;
        }
    }
    out
}

/// The n x n row-major matrices A and B the matmul example and the GPU
/// bench multiply: fixed patterns of values in [-0.5, 0.5).
pub fn matmul_inputs(n: usize) -> (Vec<f32>, Vec<f32>) {
    let a = (0..n * n)
        .map(|i| ((i * 31) % 97) as f32 / 97.0 - 0.5)
        .collect();
    let b = (0..n * n)
        .map(|i| ((i * 17) % 89) as f32 / 89.0 - 0.5)
        .collect();
    (a, b)
}

/// C = A * B for n x n row-major matrices.
pub fn matmul(a: &[f32], b: &[f32], n: usize) -> Vec<f32> {
    let mut c = vec![0f32; n * n];
    for i in 0..n {
        for k in 0..n {
            let aik = a[i * n + k];
            for j in 0..n {
                c[i * n + j] += aik * b[k * n + j];
            }
        }
    }
    c
}
