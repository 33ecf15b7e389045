//! The model's matmuls through cuBLAS, every matrix row-major as the kernels
//! keep them: `y = op(p) · op(q)` is cuBLAS's column-major
//! `yᵀ = op(q)ᵀ · op(p)ᵀ`, which reads the row-major `q` and `p` as they
//! are. Each product is checked against its slices before cuBLAS sees it.

use cudarc::cublas::sys::cublasOperation_t::{CUBLAS_OP_N, CUBLAS_OP_T};
use cudarc::cublas::{Gemm, GemmConfig, StridedBatchedConfig};
use cudarc::driver::CudaSlice;

use super::Error;
use super::pass::Pass;

/// `y[rows × cols] = op(p) · op(q)`, summed over `inner`: `p` is
/// `rows × inner` (stored `inner × rows` when transposed), `q` is
/// `inner × cols` (stored `cols × inner` when transposed).
#[derive(Clone, Copy, Debug)]
pub struct Product {
    pub rows: usize,
    pub cols: usize,
    pub inner: usize,
    pub p_transposed: bool,
    pub q_transposed: bool,
}

impl Product {
    pub fn new(rows: usize, cols: usize, inner: usize) -> Self {
        Product {
            rows,
            cols,
            inner,
            p_transposed: false,
            q_transposed: false,
        }
    }

    pub fn p_transposed(mut self) -> Self {
        self.p_transposed = true;
        self
    }

    pub fn q_transposed(mut self) -> Self {
        self.q_transposed = true;
        self
    }

    /// The elements of `p`, `q` and `y`.
    fn sizes(&self) -> [usize; 3] {
        [
            self.rows * self.inner,
            self.inner * self.cols,
            self.rows * self.cols,
        ]
    }

    /// cuBLAS's column-major form (`a` is `q`, `b` is `p`); an empty shape
    /// or one beyond `i32` is an error.
    fn gemm(&self) -> Result<GemmConfig<f32>, Error> {
        let int = |x: usize| {
            i32::try_from(x)
                .ok()
                .filter(|&x| x > 0)
                .ok_or_else(|| format!("a product of an empty or too large shape ({self:?})"))
        };
        let op = |t| if t { CUBLAS_OP_T } else { CUBLAS_OP_N };
        Ok(GemmConfig {
            transa: op(self.q_transposed),
            transb: op(self.p_transposed),
            m: int(self.cols)?,
            n: int(self.rows)?,
            k: int(self.inner)?,
            alpha: 1.0,
            lda: int(if self.q_transposed {
                self.inner
            } else {
                self.cols
            })?,
            ldb: int(if self.p_transposed {
                self.rows
            } else {
                self.inner
            })?,
            beta: 0.0,
            ldc: int(self.cols)?,
        })
    }
}

impl Pass<'_> {
    /// `y = op(p) · op(q)`, refused unless each matrix lies inside its
    /// slice.
    pub(super) fn matmul(
        &self,
        label: &'static str,
        shape: Product,
        y: &mut CudaSlice<f32>,
        p: &CudaSlice<f32>,
        q: &CudaSlice<f32>,
    ) -> Result<(), Error> {
        let cfg = shape.gemm()?;
        let [p_len, q_len, y_len] = shape.sizes();
        if p.len() < p_len || q.len() < q_len || y.len() < y_len {
            return Err(format!("a product does not fit its slices ({shape:?})").into());
        }
        self.timed(label, || {
            // SAFETY: each matrix lies inside its slice (checked above),
            // every slice of the queue's stream.
            unsafe { Ok(self.run.blas.gemm(cfg, q, p, y)?) }
        })
    }

    /// `matmul` for each of `batches` matrices, one (batch, head) each,
    /// laid one after another in each slice.
    pub(super) fn per_head(
        &self,
        shape: Product,
        batches: usize,
        y: &mut CudaSlice<f32>,
        p: &CudaSlice<f32>,
        q: &CudaSlice<f32>,
    ) -> Result<(), Error> {
        let gemm = shape.gemm()?;
        let [p_len, q_len, y_len] = shape.sizes();
        let fits =
            |len: usize, each: usize| batches.checked_mul(each).is_some_and(|all| all <= len);
        if batches == 0 || !fits(p.len(), p_len) || !fits(q.len(), q_len) || !fits(y.len(), y_len) {
            return Err(format!(
                "a per-head product does not fit its slices ({shape:?}, {batches} batches)"
            )
            .into());
        }
        let stride = |each: usize| i64::try_from(each).map_err(|_| "a per-head stride beyond i64");
        let cfg = StridedBatchedConfig {
            gemm,
            batch_size: i32::try_from(batches)
                .map_err(|_| "more per-head batches than i32 holds")?,
            stride_a: stride(q_len)?,
            stride_b: stride(p_len)?,
            stride_c: stride(y_len)?,
        };
        self.timed("matmul (cuBLAS, attention)", || {
            // SAFETY: every matrix of the batch lies inside its slice
            // (checked above), every slice of the queue's stream.
            unsafe { Ok(self.run.blas.gemm_strided_batched(cfg, q, p, y)?) }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The column-major forms of the row-major products the model runs,
    /// against cuBLAS's reading of them (`m × n` of `k`, leading dimensions
    /// the stored rows' lengths).
    #[test]
    fn row_major_products_read_as_cublas_reads_them() {
        // A linear layer: out[rows × outputs] = inp[rows × inputs] · wᵀ.
        let g = Product::new(6, 4, 3).q_transposed().gemm().expect("shape");
        assert_eq!((g.transa, g.transb), (CUBLAS_OP_T, CUBLAS_OP_N));
        assert_eq!((g.m, g.n, g.k, g.lda, g.ldb, g.ldc), (4, 6, 3, 3, 3, 4));
        // Its weight's gradient: dw[outputs × inputs] = doutᵀ · inp.
        let g = Product::new(4, 3, 6).p_transposed().gemm().expect("shape");
        assert_eq!((g.transa, g.transb), (CUBLAS_OP_N, CUBLAS_OP_T));
        assert_eq!((g.m, g.n, g.k, g.lda, g.ldb, g.ldc), (3, 4, 6, 3, 4, 3));
        // Its input's: dinp[rows × inputs] = dout · w.
        let g = Product::new(6, 3, 4).gemm().expect("shape");
        assert_eq!((g.transa, g.transb), (CUBLAS_OP_N, CUBLAS_OP_N));
        assert_eq!((g.m, g.n, g.k, g.lda, g.ldb, g.ldc), (3, 6, 4, 3, 4, 3));
        assert!(Product::new(0, 3, 4).gemm().is_err());
        assert!(Product::new(1 << 31, 3, 4).gemm().is_err());
    }
}
