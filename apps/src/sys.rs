//! The apps' one unsafe call: the GEMM crate's raw-pointer interface, behind a safe function
//! that checks the slices it is given.

/// `c = a x b` for row-major `a` (`m x k`), `b` (`k x n`) and `c` (`m x n`), with
/// `matrixmultiply` (chosen over `gemm` 0.18 by measurement on this machine, single-threaded:
/// 39-45 against 49-52 GFLOP/s at n = 1024, 42-44 both at 2048, and 2 crates against 47).
pub trait Gemm: Sized {
    /// `c = a x b` (row-major); panics if a slice is shorter than its matrix.
    fn gemm(m: usize, k: usize, n: usize, a: &[Self], b: &[Self], c: &mut [Self]);
}

macro_rules! gemm_for {
    ($t:ty, $f:path) => {
        impl Gemm for $t {
            fn gemm(m: usize, k: usize, n: usize, a: &[$t], b: &[$t], c: &mut [$t]) {
                assert!(
                    a.len() >= m * k && b.len() >= k * n && c.len() >= m * n,
                    "gemm: slices shorter than their matrices"
                );
                if m == 0 || n == 0 {
                    return;
                }
                // SAFETY: the three pointers are valid for the row-major m x k, k x n and m x n
                // matrices with these strides (checked above); `c` is borrowed mutably, so it
                // overlaps neither `a` nor `b`.
                unsafe {
                    $f(
                        m,
                        k,
                        n,
                        1.0,
                        a.as_ptr(),
                        k as isize,
                        1,
                        b.as_ptr(),
                        n as isize,
                        1,
                        0.0,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_product_of_small_integers_is_exact() {
        let (m, k, n) = (3, 4, 5);
        let a: Vec<f64> = (0..m * k).map(|i| (i % 7) as f64 - 3.0).collect();
        let b: Vec<f64> = (0..k * n).map(|i| (i % 5) as f64 - 2.0).collect();
        let mut c = vec![9.0; m * n];
        f64::gemm(m, k, n, &a, &b, &mut c);
        for i in 0..m {
            for j in 0..n {
                let want: f64 = (0..k).map(|l| a[i * k + l] * b[l * n + j]).sum();
                assert_eq!(c[i * n + j], want);
            }
        }
    }
}
