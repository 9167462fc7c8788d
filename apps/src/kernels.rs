//! Kernels the DSM apps share with their MPI yardsticks (`bench/mpi` includes this file as its
//! own module): one source, so the two programs compare distribution and communication, not
//! two compilers' takes on two loops. No dependencies.

use std::cell::Cell;

/// Red-black SOR's relaxation factor.
pub const SOR_OMEGA: f64 = 1.25;

/// One red-black SOR half-sweep of grid row `i` (of an (n + 2)-wide grid with fixed borders),
/// in place: the cells of `colour` ((i + j) % 2 == colour) from their four neighbours, which
/// are of the other colour and not written in this half-sweep. `up` and `down` are rows i - 1
/// and i + 1.
///
/// The row is walked as cells (`Cell`), zipped with the rows above and below: no index is
/// checked in the loop (an indexed loop checked two per cell and ran 8-15% slower here), and
/// each cell's arithmetic, in this order, is that of a plain indexed loop, bit for bit.
pub fn sor_row(up: &[f64], row: &mut [f64], down: &[f64], i: usize, n: usize, colour: usize) {
    // The first cell of `colour` in this row: column 1 or 2.
    let first = if (i + 1) % 2 == colour { 1 } else { 2 };
    if first > n {
        return;
    }
    let row = Cell::from_mut(&mut row[..n + 2]).as_slice_of_cells();
    let left = row[first - 1..].iter().step_by(2);
    let cells = row[first..=n].iter().step_by(2);
    let right = row[first + 1..].iter().step_by(2);
    let above = up[first..=n].iter().step_by(2);
    let below = down[first..=n].iter().step_by(2);
    for ((((c, l), r), u), d) in cells.zip(left).zip(right).zip(above).zip(below) {
        let x = c.get();
        c.set(x + SOR_OMEGA * ((u + d + l.get() + r.get()) / 4.0 - x));
    }
}

/// The rows `first..last`, the two boundary rows last. A stencil sweep that reads its
/// neighbours' rows (which a barrier has just invalidated, and which are being fetched again
/// meanwhile) computes its interior first, while they travel. For sweeps whose result does not
/// depend on the order of their rows (Jacobi, one colour of red-black SOR).
pub fn interior_first(first: usize, last: usize) -> impl Iterator<Item = usize> {
    let interior = (first + 1)..last.saturating_sub(1).max(first + 1);
    let edges = [
        (first < last).then_some(first),
        (last > first + 1).then(|| last - 1),
    ];
    interior.chain(edges.into_iter().flatten())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The indexed loop `sor_row` replaces.
    fn sor_row_indexed(up: &[f64], row: &mut [f64], down: &[f64], i: usize, n: usize, c: usize) {
        let first = if (i + 1) % 2 == c { 1 } else { 2 };
        for j in (first..=n).step_by(2) {
            row[j] =
                row[j] + SOR_OMEGA * ((up[j] + down[j] + row[j - 1] + row[j + 1]) / 4.0 - row[j]);
        }
    }

    #[test]
    fn sor_row_matches_the_indexed_loop_bit_for_bit() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed >> 11) as f64 / (1u64 << 53) as f64 * 100.0 - 50.0
        };
        for n in [1, 2, 3, 4, 7, 64, 129] {
            for i in 1..=4 {
                for colour in 0..2 {
                    let up: Vec<f64> = (0..n + 2).map(|_| next()).collect();
                    let down: Vec<f64> = (0..n + 2).map(|_| next()).collect();
                    let row: Vec<f64> = (0..n + 2).map(|_| next()).collect();
                    let (mut a, mut b) = (row.clone(), row.clone());
                    sor_row(&up, &mut a, &down, i, n, colour);
                    sor_row_indexed(&up, &mut b, &down, i, n, colour);
                    let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                    assert_eq!(bits(&a), bits(&b), "n={n} i={i} colour={colour}");
                    // Borders and the other colour are kept; every cell of the colour moved.
                    for j in 0..n + 2 {
                        let mine = j >= 1 && j <= n && (i + j) % 2 == colour;
                        assert_eq!(a[j] != row[j], mine, "n={n} i={i} colour={colour} j={j}");
                    }
                }
            }
        }
    }
}
