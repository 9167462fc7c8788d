//! The apps' unsafe code: the GEMM crate's raw-pointer interface, behind a safe function
//! that checks the slices it is given; and the rows a plain threads program shares.

/// `c = a x b` for row-major `a` (`m x k`), `b` (`k x n`) and `c` (`m x n`), with
/// `matrixmultiply` (chosen over `gemm` 0.18 by measurement on this machine, single-threaded:
/// 39-45 against 49-52 GFLOP/s at n = 1024, 42-44 both at 2048, and 2 crates against 47).
pub trait Gemm: Sized {
    /// `c = a x b`, or `c += a x b` if `accumulate`, for row-major `a` (`m x k`, rows `lda`
    /// apart: a block of columns of a wider matrix), `b` (`k x n`) and `c` (`m x n`); panics if
    /// a slice is shorter than its matrix or `lda < k`.
    #[allow(
        clippy::too_many_arguments,
        reason = "BLAS's shape: dimensions, operands, a stride"
    )]
    fn gemm(
        m: usize,
        k: usize,
        n: usize,
        a: &[Self],
        lda: usize,
        b: &[Self],
        c: &mut [Self],
        accumulate: bool,
    );
}

macro_rules! gemm_for {
    ($t:ty, $f:path) => {
        impl Gemm for $t {
            #[allow(
                clippy::too_many_arguments,
                reason = "BLAS's shape: dimensions, operands, a stride"
            )]
            fn gemm(
                m: usize,
                k: usize,
                n: usize,
                a: &[$t],
                lda: usize,
                b: &[$t],
                c: &mut [$t],
                accumulate: bool,
            ) {
                if m == 0 || n == 0 {
                    return;
                }
                assert!(
                    lda >= k
                        && a.len() >= (m - 1) * lda + k
                        && b.len() >= k * n
                        && c.len() >= m * n,
                    "gemm: slices shorter than their matrices"
                );
                // SAFETY: the three pointers are valid for the row-major m x k (rows lda apart),
                // k x n and m x n matrices with these strides (checked above); `c` is borrowed
                // mutably, so it overlaps neither `a` nor `b`.
                unsafe {
                    $f(
                        m,
                        k,
                        n,
                        1.0,
                        a.as_ptr(),
                        lda as isize,
                        1,
                        b.as_ptr(),
                        n as isize,
                        1,
                        if accumulate { 1.0 } else { 0.0 },
                        c.as_mut_ptr(),
                        n as isize,
                        1,
                    )
                };
            }
        }
    };
}

gemm_for!(f64, matrixmultiply::dgemm);
gemm_for!(f32, matrixmultiply::sgemm);

/// A grid of rows shared by the threads of a plain (no DSM) program that write disjoint cells
/// between barriers: the ceiling the DSM's threads are measured against (`plain`).
pub struct SharedRows<'a> {
    ptr: *mut f64,
    len: usize,
    width: usize,
    _grid: std::marker::PhantomData<&'a mut [f64]>,
}

// SAFETY: the pointer is to memory borrowed mutably for 'a; which thread touches which cells is
// the caller's promise at each access (`row_and_neighbours`).
unsafe impl Send for SharedRows<'_> {}
// SAFETY: as above.
unsafe impl Sync for SharedRows<'_> {}

impl<'a> SharedRows<'a> {
    /// The rows of `grid`, `width` cells each.
    pub fn new(grid: &'a mut [f64], width: usize) -> SharedRows<'a> {
        SharedRows {
            ptr: grid.as_mut_ptr(),
            len: grid.len(),
            width,
            _grid: std::marker::PhantomData,
        }
    }

    /// Rows `i - 1`, `i` (to write) and `i + 1`.
    ///
    /// # Safety
    ///
    /// Until the returned slices are dropped, no other thread writes any cell of rows `i - 1`
    /// and `i + 1` nor touches any cell of row `i` (an interior row of a thread's share in
    /// red-black SOR, between barriers; a share's edge rows go through
    /// [`SharedRows::sor_row_cells`]).
    #[allow(
        clippy::mut_from_ref,
        reason = "threads share the grid; which rows each writes is the caller's promise"
    )]
    pub unsafe fn row_and_neighbours(&self, i: usize) -> (&[f64], &mut [f64], &[f64]) {
        let w = self.width;
        assert!(i >= 1 && (i + 2) * w <= self.len, "row {i} out of the grid");
        // SAFETY: the three rows lie inside the grid (checked above) and do not overlap; the
        // caller promises no other thread writes the rows read nor touches the row written.
        unsafe {
            (
                std::slice::from_raw_parts(self.ptr.add((i - 1) * w), w),
                std::slice::from_raw_parts_mut(self.ptr.add(i * w), w),
                std::slice::from_raw_parts(self.ptr.add((i + 1) * w), w),
            )
        }
    }

    /// LU's elimination of row `i` by pivot row `p` (`p < i`, a row-major N x N matrix): the
    /// multiplier goes into column `p`, the rest of the row loses its multiple of the pivot
    /// row. The arithmetic of `lu`'s, in its order.
    ///
    /// # Safety
    ///
    /// Until it returns, no other thread touches row `i` nor writes row `p` (LU between steps:
    /// each row updated by one thread, the pivot rows only read).
    pub unsafe fn eliminate_row(&self, i: usize, p: usize) {
        let w = self.width;
        assert!(
            p < i && (i + 1) * w <= self.len,
            "rows {i}, {p} out of the matrix"
        );
        // SAFETY: both rows lie inside the matrix (checked above) and differ; the caller
        // promises no other thread touches row i nor writes row p.
        let (row, pivot) = unsafe {
            (
                std::slice::from_raw_parts_mut(self.ptr.add(i * w), w),
                std::slice::from_raw_parts(self.ptr.add(p * w), w),
            )
        };
        let l = row[p] / pivot[p];
        row[p] = l;
        for (x, &y) in row[p + 1..].iter_mut().zip(&pivot[p + 1..]) {
            *x -= l * y;
        }
    }

    /// One red-black SOR half-sweep of row `i` (of an (n + 2)-wide grid), cell by cell through
    /// the raw pointer, no reference to any row: for a share's edge rows, whose other-colour
    /// cells a neighbouring thread reads meanwhile. The arithmetic of
    /// [`crate::kernels::sor_row`], in its order.
    ///
    /// # Safety
    ///
    /// Until it returns, no other thread writes the cells of `colour` in row `i` nor the cells
    /// of the other colour in rows `i - 1`, `i` and `i + 1`, nor reads the cells of `colour` in
    /// row `i` (red-black SOR between barriers, each row written by one thread).
    pub unsafe fn sor_row_cells(&self, i: usize, n: usize, colour: usize) {
        let w = self.width;
        assert!(
            i >= 1 && (i + 2) * w <= self.len && n + 2 <= w,
            "row {i} out of the grid"
        );
        let first = if (i + 1) % 2 == colour { 1 } else { 2 };
        let at = |r: usize, j: usize| r * w + j;
        for j in (first..=n).step_by(2) {
            // SAFETY: every index is inside the grid (checked above: j + 1 <= n + 1 < w); the
            // caller promises no other thread writes the cells read nor touches the one
            // written; reads and writes go through the pointer, no reference is made.
            unsafe {
                let get = |k: usize| self.ptr.add(k).read();
                let x = get(at(i, j));
                let (u, d) = (get(at(i - 1, j)), get(at(i + 1, j)));
                let (l, r) = (get(at(i, j - 1)), get(at(i, j + 1)));
                self.ptr
                    .add(at(i, j))
                    .write(x + crate::kernels::SOR_OMEGA * ((u + d + l + r) / 4.0 - x));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_product_of_small_integers_is_exact() {
        let (m, k, n) = (3, 4, 5);
        let a: Vec<f64> = (0..m * k).map(|i| (i % 7) as f64 - 3.0).collect();
        let b: Vec<f64> = (0..k * n).map(|i| (i % 5) as f64 - 2.0).collect();
        let mut c = vec![9.0; m * n];
        f64::gemm(m, k, n, &a, k, &b, &mut c, false);
        let want = |i: usize, j: usize, l: std::ops::Range<usize>| -> f64 {
            l.map(|l| a[i * k + l] * b[l * n + j]).sum()
        };
        for i in 0..m {
            for j in 0..n {
                assert_eq!(c[i * n + j], want(i, j, 0..k));
            }
        }
        // In two parts: columns 0..1 of a with row 0 of b, then the rest accumulated.
        let mut d = vec![9.0; m * n];
        f64::gemm(m, 1, n, &a, k, &b, &mut d, false);
        for i in 0..m {
            for j in 0..n {
                assert_eq!(d[i * n + j], want(i, j, 0..1));
            }
        }
        f64::gemm(m, k - 1, n, &a[1..], k, &b[n..], &mut d, true);
        assert_eq!(c, d);
    }
}
