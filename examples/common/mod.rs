//! Helpers shared by the examples: seeded matrices and a sampled f64 check.

#![allow(dead_code)]

use wgtile::{Context, DType, Plan, Tensor};

/// Outputs compared with the f64 reference per matrix: all of them up to this
/// many, else this many spread over the matrix (the reference costs 2K flops each).
pub const CHECKED_OUTPUTS: usize = 1 << 16;

/// A seeded `n x n` matrix uniform in [-1, 1) as `dtype`, and the values it
/// holds (after rounding to f16 where asked) widened to f32.
pub fn random_matrix(
    ctx: &Context,
    n: usize,
    seed: u64,
    dtype: DType,
) -> wgtile::Result<(Tensor, Vec<f32>)> {
    let host = wgtile::uniform_values(n * n, -1.0, 1.0, seed);
    let widened = host.iter().map(|&v| dtype.round(v)).collect();
    Ok((ctx.tensor_from_f32(&host, [n, n], dtype)?, widened))
}

/// `values` (an `n x n` matrix, as `random_matrix` returns them) stored
/// transposed as a `dtype` tensor: the operand for a product that reads it
/// with a transpose flag, giving the same logical matrix.
pub fn stored_transposed(
    ctx: &Context,
    values: &[f32],
    n: usize,
    dtype: DType,
) -> wgtile::Result<Tensor> {
    let t: Vec<f32> = (0..n * n).map(|i| values[(i % n) * n + i / n]).collect();
    ctx.tensor_from_f32(&t, [n, n], dtype)
}

/// Largest |C - A B| over all outputs (small n) or an even spread of outputs
/// plus the whole last row and column (where the padding layer's split
/// fringe lands), against f64 dot products.
pub fn max_error(a: &[f32], b: &[f32], c: &[f32], n: usize) -> f64 {
    let total = n * n;
    let step = total.div_ceil(CHECKED_OUTPUTS).max(1);
    // An odd stride visits every column over the rows instead of one column.
    let step = if step > 1 && step.is_multiple_of(2) {
        step + 1
    } else {
        step
    };
    let last_row = (n - 1) * n..total;
    let last_col = (0..n).map(|i| i * n + n - 1);
    let mut worst = 0.0f64;
    for idx in (0..total).step_by(step).chain(last_row).chain(last_col) {
        let (i, j) = (idx / n, idx % n);
        let reference: f64 = (0..n)
            .map(|p| f64::from(a[i * n + p]) * f64::from(b[p * n + j]))
            .sum();
        let err = (f64::from(c[idx]) - reference).abs();
        worst = if err.is_nan() {
            f64::INFINITY
        } else {
            worst.max(err)
        };
    }
    worst
}

/// The copy ceiling in GB/s: a large f32 tensor (2^26 elements, 2^20 when
/// `quick`) read and written once, timed by `time` (seconds per run).
pub fn copy_ceiling(
    ctx: &Context,
    quick: bool,
    time: impl Fn(&Plan) -> wgtile::Result<f64>,
) -> wgtile::Result<f64> {
    let big = ctx.rand_uniform(
        [if quick { 1 << 20 } else { 1 << 26 }],
        -1.0,
        1.0,
        DType::F32,
        1,
    )?;
    let copy = ctx.copy_plan(&big)?;
    Ok(copy.bytes() as f64 / time(&copy)? / 1e9)
}

/// The weight shapes `KxN` of the quantised GEMV measurements: `specs`
/// parsed, or by default 4096 x 4096 and 4096 x 14336 (1024 x 1024 when
/// `quick`).
pub fn weight_shapes(specs: &[String], quick: bool) -> Result<Vec<(usize, usize)>, String> {
    if specs.is_empty() {
        return Ok(if quick {
            vec![(1024, 1024)]
        } else {
            vec![(4096, 4096), (4096, 14336)]
        });
    }
    specs
        .iter()
        .map(|s| {
            let (k, n) = s
                .split_once('x')
                .ok_or_else(|| format!("shape {s:?} is not KxN"))?;
            let num = |v: &str| v.trim().parse::<usize>().map_err(|e| format!("{s}: {e}"));
            Ok((num(k)?, num(n)?))
        })
        .collect()
}
