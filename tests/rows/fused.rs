//! Row ops and reductions of elementwise expressions in one kernel
//! (`ctx.sum_of`, `softmax_of`, `rms_norm_of`, ... with optional epilogues),
//! against f64 references on the host, outputs poisoned with NaN first.
//!
//! References: the elementwise part is computed on the host in f32 exactly
//! as the kernel computes it (+, -, *, |.| are correctly rounded, the scales
//! used are powers of two), then the row op in f64. Tolerances are those of
//! `tests/rows/rowops.rs` plus what the fused part adds (stated per test), plus
//! one rounding of the output for f16 (2^-11 relative) and bf16 (2^-8). Row lengths 1, 7,
//! 127, 1031, 5003 (and a streaming length) with broadcast operands.

use crate::common;

use wgtile::{Axis, Context, DType, Error, Expr, Plan, Reduction, Tensor};

const U: f64 = 1.0 / (1u64 << 24) as f64;
const LENGTHS: [usize; 5] = [1, 7, 127, 1031, 5003];

/// f32, bf16 (read as words and widened in registers; the result rounded
/// to bf16 behind the kernel) and f16 where the adapter has it.
fn dtypes(ctx: &Context) -> Vec<DType> {
    if ctx.profile().shader_f16 {
        vec![DType::F32, DType::BF16, DType::F16]
    } else {
        vec![DType::F32, DType::BF16]
    }
}

fn run_poisoned(ctx: &Context, plan: &Plan) -> Vec<f32> {
    ctx.fill(plan.output(), f32::NAN).unwrap();
    plan.run().unwrap();
    plan.output().to_f32_vec_blocking().unwrap()
}

fn out_rounding(dtype: DType, reference: f64) -> f64 {
    match dtype {
        DType::F32 => 0.0,
        DType::F16 => 2f64.powi(-11) * reference.abs() + 2f64.powi(-24),
        DType::BF16 => 2f64.powi(-8) * reference.abs() + 2f64.powi(-133),
        other => panic!("row ops refuse {other}"),
    }
}

fn log2(n: usize) -> f64 {
    (n.max(2) as f64).log2()
}

/// Reduces `vals` (rows of `n`) the way `op` does, with the error bound of
/// an f32 accumulation (as tests/rows/rowops.rs) plus one f32 rounding per term
/// (a product contracted into an fma may differ by that).
fn reduce_ref(vals: &[f64], n: usize, op: Reduction, dtype: DType) -> (Vec<f64>, Vec<f64>) {
    let mut want = Vec::new();
    let mut bound = Vec::new();
    for row in vals.chunks(n) {
        let sum: f64 = row.iter().sum();
        let mag: f64 = row.iter().map(|v| v.abs()).sum();
        let acc = (2.0 * log2(n) + n as f64 / 256.0 + 9.0) * U * mag;
        let (w, b) = match op {
            Reduction::Sum => (sum, acc),
            Reduction::Mean => (sum / n as f64, acc / n as f64),
            Reduction::Max => (row.iter().copied().fold(f64::NEG_INFINITY, f64::max), 0.0),
        };
        want.push(w);
        bound.push(b + out_rounding(dtype, w) + 1e-30);
    }
    (want, bound)
}

#[test]
fn sum_of_squares_every_length_both_axes() {
    let Some(ctx) = common::ctx() else { return };
    for dtype in dtypes(&ctx) {
        for (i, &n) in LENGTHS.iter().enumerate() {
            let shape = [3, n];
            let (x, held) =
                common::upload(&ctx, &common::random(3 * n, 10 + i as u64), &shape, dtype);
            // x * x in f32 (the kernel's math), exactly.
            let sq: Vec<f64> = held.iter().map(|&v| f64::from(v * v)).collect();
            for axis in [Axis::Last, Axis::All] {
                let plan = ctx
                    .reduce_of_plan(&(x.expr() * x.expr()), Reduction::Sum, axis)
                    .unwrap();
                let what = format!("{} {axis:?} [{}]", dtype, plan.label());
                // x is read once: bytes = x + output.
                assert_eq!(
                    plan.bytes(),
                    x.size_bytes() + plan.output().size_bytes(),
                    "{what}"
                );
                let got = run_poisoned(&ctx, &plan);
                let row = if axis == Axis::Last { n } else { 3 * n };
                let (want, bound) = reduce_ref(&sq, row, Reduction::Sum, dtype);
                common::assert_close(&what, &got, &want, |i| bound[i]);
                // Fused == unfused (eval, then sum) within the same bound
                // (f16, bf16: the unfused square is rounded first).
                let unfused = ctx
                    .sum(&ctx.eval(&(x.expr() * x.expr())).unwrap(), axis)
                    .unwrap();
                let un = unfused.to_f32_vec_blocking().unwrap();
                let slack = match dtype {
                    DType::F16 => 2f64.powi(-11),
                    DType::BF16 => 2f64.powi(-8),
                    _ => 0.0,
                };
                common::assert_close(
                    &format!("{what} vs unfused"),
                    &got,
                    &un.iter().map(|&v| f64::from(v)).collect::<Vec<_>>(),
                    |i| 2.0 * bound[i] + slack * want[i].abs(),
                );
            }
        }
    }
}

/// mean(|a - b|) and max(|a - b|) with `b` broadcast along rows, over the
/// last axis and over all elements (shapes whose last dimension is not a
/// multiple of 4 while the element count is: the scalar load path under
/// vector chunks).
#[test]
fn mean_and_max_of_abs_difference_with_broadcast() {
    let Some(ctx) = common::ctx() else { return };
    let shapes: &[&[usize]] = &[
        &[1],
        &[4, 7],
        &[2, 3, 127],
        &[3, 1031],
        &[2, 5003],
        &[2, 3, 4, 8],
    ];
    for dtype in dtypes(&ctx) {
        for (s, shape) in shapes.iter().enumerate() {
            let n = *shape.last().unwrap();
            let numel: usize = shape.iter().product();
            let (a, ah) = common::upload(&ctx, &common::random(numel, 40 + s as u64), shape, dtype);
            let (b, bh) = common::upload(&ctx, &common::random(n, 60 + s as u64), &[n], dtype);
            let d: Vec<f64> = (0..numel)
                .map(|i| f64::from((ah[i] - bh[i % n]).abs()))
                .collect();
            let e = (a.expr() - &b).abs();
            for axis in [Axis::Last, Axis::All] {
                for op in [Reduction::Mean, Reduction::Max] {
                    let plan = ctx.reduce_of_plan(&e, op, axis).unwrap();
                    let what = format!("{dtype} {shape:?} {axis:?} [{}]", plan.label());
                    assert_eq!(
                        plan.bytes(),
                        a.size_bytes() + b.size_bytes() + plan.output().size_bytes(),
                        "{what}"
                    );
                    let got = run_poisoned(&ctx, &plan);
                    let row = if axis == Axis::Last { n } else { numel };
                    let (want, bound) = reduce_ref(&d, row, op, dtype);
                    common::assert_close(&what, &got, &want, |i| bound[i]);
                }
            }
        }
    }
}

/// The attention pattern: softmax(x * scale + mask) over [B, H, Sq, Sk] with
/// an additive mask [Sq, Sk] broadcast over B and H (one query row fully
/// masked: zeros), then times a dropout-style keep mask [B, H, Sq, Sk]
/// (0 or 1/0.8) in the epilogue.
#[test]
fn attention_softmax_with_broadcast_mask_and_dropout_epilogue() {
    let Some(ctx) = common::ctx() else { return };
    let (bt, h, sq) = (2, 3, 5);
    for dtype in dtypes(&ctx) {
        for (i, &sk) in LENGTHS.iter().chain(&[9001]).enumerate() {
            let shape = [bt, h, sq, sk];
            let numel = bt * h * sq * sk;
            let data: Vec<f32> = common::random(numel, 100 + i as u64)
                .iter()
                .map(|v| 8.0 * v)
                .collect();
            let (x, xh) = common::upload(&ctx, &data, &shape, dtype);
            let mask: Vec<f32> = (0..sq * sk)
                .map(|k| {
                    let (q, j) = (k / sk, k % sk);
                    if q == 1 || (j > q * 3 && j % 5 != 0) {
                        f32::NEG_INFINITY
                    } else {
                        -0.5 * (j % 3) as f32
                    }
                })
                .collect();
            let (m, mh) = common::upload(&ctx, &mask, &[sq, sk], dtype);
            let keep: Vec<f32> = common::random(numel, 200 + i as u64)
                .iter()
                .map(|&v| if v < 0.6 { 1.25 } else { 0.0 })
                .collect();
            let (k, kh) = common::upload(&ctx, &keep, &shape, dtype);
            // x * 0.125 is exact; one rounding for + mask (as on the GPU).
            let z: Vec<f64> = (0..numel)
                .map(|e| f64::from(xh[e] * 0.125 + mh[e % (sq * sk)]))
                .collect();
            let p = common::softmax_rows(&z, sk);
            let input = x.expr() * 0.125 + &m;
            for epilogue in [None, Some(Expr::acc() * &k)] {
                let plan = ctx.softmax_of_plan(&input, epilogue.as_ref()).unwrap();
                let what = format!("{dtype} {shape:?} [{}]", plan.label());
                assert_eq!(plan.output().shape(), shape);
                assert_eq!(plan.output().dtype(), dtype);
                let extra = if epilogue.is_some() {
                    k.size_bytes()
                } else {
                    0
                };
                assert_eq!(
                    plan.bytes(),
                    x.size_bytes() + m.size_bytes() + extra + plan.output().size_bytes(),
                    "{what}"
                );
                let got = run_poisoned(&ctx, &plan);
                let mut want = Vec::with_capacity(numel);
                let mut bound = Vec::with_capacity(numel);
                for r in 0..numel / sk {
                    let row = &z[r * sk..(r + 1) * sk];
                    let mx = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                    for (j, &zj) in row.iter().enumerate() {
                        let e = r * sk + j;
                        let scale = if epilogue.is_some() {
                            f64::from(kh[e])
                        } else {
                            1.0
                        };
                        let w = p[e] * scale;
                        let d = if zj.is_finite() { (zj - mx).abs() } else { 0.0 };
                        // tests/rows/rowops.rs's softmax bound, + the product.
                        let b = w * (17.0 + 2.0 * d.min(1e3) + 2.0 * log2(sk)) * U;
                        want.push(w);
                        bound.push(b + out_rounding(dtype, w) + 1e-38);
                    }
                }
                common::assert_close(&what, &got, &want, |i| bound[i]);
                // Fused == unfused: eval, softmax, eval of the epilogue.
                let mut un = ctx.softmax(&ctx.eval(&input).unwrap()).unwrap();
                if epilogue.is_some() {
                    un = ctx.eval(&(un.expr() * &k)).unwrap();
                }
                let un: Vec<f64> = un
                    .to_f32_vec_blocking()
                    .unwrap()
                    .iter()
                    .map(|&v| f64::from(v))
                    .collect();
                // f16: the unfused path rounds z and p to f16 on the way.
                let slack = |i: usize| match dtype {
                    DType::F32 => 2.0 * bound[i],
                    DType::F16 => {
                        2.0 * bound[i]
                            + want[i] * (3.0 * 2f64.powi(-11) + 8.0 * 2f64.powi(-11) * 9.0)
                    }
                    DType::BF16 => {
                        2.0 * bound[i] + want[i] * (3.0 * 2f64.powi(-8) + 8.0 * 2f64.powi(-8) * 9.0)
                    }
                    other => panic!("row ops refuse {other}"),
                };
                common::assert_close(&format!("{what} vs unfused"), &got, &un, slack);
            }
        }
    }
}

fn gelu(v: f64) -> f64 {
    0.5 * v * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (v + 0.044715 * v * v * v)).tanh())
}

/// rms_norm(x + residual) * weight, and layer_norm(x + residual) -> gelu.
#[test]
fn norms_of_a_residual_sum_with_gelu_epilogue() {
    let Some(ctx) = common::ctx() else { return };
    for dtype in dtypes(&ctx) {
        for (i, &n) in LENGTHS.iter().chain(&[9001, 33001]).enumerate() {
            let rows = 3;
            let shape = [rows, n];
            let seed = 300 + 10 * i as u64;
            let (x, xh) = common::upload(&ctx, &common::random(rows * n, seed), &shape, dtype);
            let (r, rh) = common::upload(&ctx, &common::random(rows * n, seed + 1), &shape, dtype);
            let wd: Vec<f32> = common::random(n, seed + 2)
                .iter()
                .map(|v| 1.0 + v)
                .collect();
            let (w, wh) = common::upload(&ctx, &wd, &[n], dtype);
            let (bias, bh) = common::upload(&ctx, &common::random(n, seed + 3), &[n], dtype);
            let hsum: Vec<f64> = xh.iter().zip(&rh).map(|(a, b)| f64::from(a + b)).collect();
            let input = x.expr() + &r;
            for rms in [true, false] {
                let epi = (!rms).then(|| Expr::acc().gelu());
                let plan = if rms {
                    ctx.rms_norm_of_plan(&input, Some(&w), 1e-6, None)
                } else {
                    ctx.layer_norm_of_plan(&input, Some(&w), Some(&bias), 1e-5, epi.as_ref())
                }
                .unwrap();
                let eps = if rms { 1e-6 } else { 1e-5 };
                let what = format!("{dtype} {shape:?} [{}]", plan.label());
                let params = w.size_bytes() + if rms { 0 } else { bias.size_bytes() };
                assert_eq!(
                    plan.bytes(),
                    x.size_bytes() + r.size_bytes() + params + plan.output().size_bytes(),
                    "{what}"
                );
                let got = run_poisoned(&ctx, &plan);
                let mut want = Vec::new();
                let mut bound = Vec::new();
                for row in hsum.chunks(n) {
                    let mean = if rms {
                        0.0
                    } else {
                        row.iter().sum::<f64>() / n as f64
                    };
                    let var = row.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n as f64;
                    let std = (var + eps).sqrt();
                    for j in 0..n {
                        let xhat = (row[j] - mean) / std;
                        let gw = f64::from(wh[j]);
                        let gb = if rms { 0.0 } else { f64::from(bh[j]) };
                        let y = xhat * gw + gb;
                        let cancel = if rms {
                            0.0
                        } else {
                            mean.abs() / std * log2(n) * gw.abs()
                        };
                        // tests/rows/rowops.rs's norm bound.
                        let b = (32.0 + 4.0 * log2(n))
                            * U
                            * ((xhat * gw).abs() + gb.abs() + 1.0 + cancel);
                        let (w_, b_) = if rms {
                            (y, b)
                        } else {
                            // gelu: |gelu'| <= 1.13, and exp's 3 + 2|arg| ulp.
                            let g = gelu(y);
                            let u = 0.8 * (y.abs() + 0.045 * y.abs().powi(3));
                            (g, 1.2 * b + (16.0 + 4.0 * u) * U * g.abs() + 1e-30)
                        };
                        want.push(w_);
                        bound.push(b_ + out_rounding(dtype, w_));
                    }
                }
                common::assert_close(&what, &got, &want, |i| bound[i]);
                // Fused == unfused composition.
                let h = ctx.eval(&input).unwrap();
                let un = if rms {
                    ctx.rms_norm(&h, Some(&w), 1e-6).unwrap()
                } else {
                    let y = ctx.layer_norm(&h, Some(&w), Some(&bias), 1e-5).unwrap();
                    ctx.eval(&y.expr().gelu()).unwrap()
                };
                let un: Vec<f64> = un
                    .to_f32_vec_blocking()
                    .unwrap()
                    .iter()
                    .map(|&v| f64::from(v))
                    .collect();
                let slack = |i: usize| match dtype {
                    DType::F32 => 2.0 * bound[i],
                    // Unfused f16 rounds h and y to f16 on the way (the
                    // normalised row then moves by up to 2^-11 |h| / std).
                    DType::F16 => 2.0 * bound[i] + 64.0 * 2f64.powi(-11) * (want[i].abs() + 1.0),
                    DType::BF16 => 2.0 * bound[i] + 64.0 * 2f64.powi(-8) * (want[i].abs() + 1.0),
                    other => panic!("row ops refuse {other}"),
                };
                common::assert_close(&format!("{what} vs unfused"), &got, &un, slack);
            }
        }
    }
}

/// log_softmax of an expression with an epilogue, and a norm whose input is
/// a bare tensor expression with an epilogue reading the input tensor again.
#[test]
fn log_softmax_and_epilogues_reading_the_input() {
    let Some(ctx) = common::ctx() else { return };
    // 33001: longer than any register row (the streaming kernels read twice).
    for &n in &[7usize, 1031, 33001] {
        let shape = [4, n];
        let (x, xh) = common::upload(&ctx, &common::random(4 * n, 7), &shape, DType::F32);
        // log_softmax(2x) - 1, fused.
        let plan = ctx
            .log_softmax_of_plan(&(x.expr() * 2.0), Some(&(Expr::acc() - 1.0)))
            .unwrap();
        if n == 33001 {
            assert!(plan.label().contains("online"), "{}", plan.label());
        }
        let got = run_poisoned(&ctx, &plan);
        let mut want = Vec::new();
        for row in xh.chunks(n) {
            let z: Vec<f64> = row.iter().map(|&v| 2.0 * f64::from(v)).collect();
            let m = z.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let lse = m + z.iter().map(|v| (v - m).exp()).sum::<f64>().ln();
            want.extend(z.iter().map(|v| v - lse - 1.0));
        }
        common::assert_close(plan.label(), &got, &want, |i| {
            (8.0 + want[i].abs()) * 2f64.powi(-21)
        });
        // rms_norm(x) + x: the epilogue reads x again (bound once).
        let plan = ctx
            .rms_norm_of_plan(&x.expr(), None, 0.0, Some(&(Expr::acc() + &x)))
            .unwrap();
        assert_eq!(plan.bytes(), 2 * x.size_bytes(), "x is read once");
        if n == 33001 {
            assert!(plan.label().contains("streaming"), "{}", plan.label());
        }
        let got = run_poisoned(&ctx, &plan);
        let mut want = Vec::new();
        for row in xh.chunks(n) {
            let ms = row.iter().map(|&v| f64::from(v).powi(2)).sum::<f64>() / n as f64;
            want.extend(row.iter().map(|&v| f64::from(v) / ms.sqrt() + f64::from(v)));
        }
        common::assert_close(plan.label(), &got, &want, |i| {
            (40.0 + 4.0 * log2(n)) * U * (want[i].abs() + 2.0)
        });
    }
}

/// Mixed dtypes: an f32 input plus an f16 mask gives an f32 softmax (the
/// module gets `enable f16;`), an f16 input with an f32 epilogue tensor
/// stays f16.
#[test]
fn mixed_dtypes() {
    let Some(ctx) = common::ctx() else { return };
    if !ctx.profile().shader_f16 {
        return;
    }
    let n = 127;
    let (x, xh) = common::upload(&ctx, &common::random(3 * n, 1), &[3, n], DType::F32);
    let (m, mh) = common::upload(&ctx, &common::random(n, 2), &[n], DType::F16);
    let plan = ctx.softmax_of_plan(&(x.expr() + &m), None).unwrap();
    assert_eq!(plan.output().dtype(), DType::F32);
    let got = run_poisoned(&ctx, &plan);
    let z: Vec<f64> = (0..3 * n).map(|e| f64::from(xh[e] + mh[e % n])).collect();
    let want = common::softmax_rows(&z, n);
    common::assert_close(plan.label(), &got, &want, |i| want[i] * 40.0 * U);
    let (h, hh) = common::upload(&ctx, &common::random(3 * n, 3), &[3, n], DType::F16);
    let plan = ctx
        .softmax_of_plan(&h.expr(), Some(&(Expr::acc() * &x)))
        .unwrap();
    assert_eq!(plan.output().dtype(), DType::F16);
    let got = run_poisoned(&ctx, &plan);
    let p = common::softmax_rows(&hh.iter().map(|&v| f64::from(v)).collect::<Vec<_>>(), n);
    let want: Vec<f64> = p.iter().zip(&xh).map(|(p, &x)| p * f64::from(x)).collect();
    common::assert_close(plan.label(), &got, &want, |i| {
        out_rounding(DType::F16, want[i]) + want[i].abs() * 40.0 * U
    });
}

/// A one-element tensor operand (read at element 0 for every element).
#[test]
fn one_element_operand() {
    let Some(ctx) = common::ctx() else { return };
    for n in [7usize, 1024] {
        let (x, xh) = common::upload(&ctx, &common::random(5 * n, 9), &[5, n], DType::F32);
        let s = ctx.tensor(&[-1.5f32], [1]).unwrap();
        let plan = ctx
            .reduce_of_plan(&(x.expr() * &s), Reduction::Sum, Axis::Last)
            .unwrap();
        let got = run_poisoned(&ctx, &plan);
        let vals: Vec<f64> = xh.iter().map(|&v| f64::from(v * -1.5)).collect();
        let (want, bound) = reduce_ref(&vals, n, Reduction::Sum, DType::F32);
        common::assert_close(plan.label(), &got, &want, |i| bound[i]);
    }
}

/// `x * 2` and `y * 3` (same shapes, same kernel) share one pipeline: the
/// scalar is data, not text.
#[test]
fn expressions_of_one_structure_share_a_pipeline() {
    if common::ctx().is_none() {
        return;
    }
    // A context of its own: its cache sees only this test.
    let ctx = Context::new_blocking(Default::default()).unwrap();
    let x = ctx.tensor(&common::random(3 * 127, 1), [3, 127]).unwrap();
    let y = ctx.tensor(&common::random(3 * 127, 2), [3, 127]).unwrap();
    let before = ctx.fused_kernel_count();
    let a = ctx.sum_of(&(x.expr() * 2.0), Axis::Last).unwrap();
    assert_eq!(ctx.fused_kernel_count(), before + 1);
    let b = ctx.sum_of(&(y.expr() * 3.0), Axis::Last).unwrap();
    assert_eq!(
        ctx.fused_kernel_count(),
        before + 1,
        "same structure, same pipeline"
    );
    let (a, b) = (
        a.to_vec_blocking::<f32>().unwrap(),
        b.to_vec_blocking::<f32>().unwrap(),
    );
    let xs = common::random(3 * 127, 1);
    let ys = common::random(3 * 127, 2);
    for r in 0..3 {
        let wa: f64 = xs[r * 127..(r + 1) * 127]
            .iter()
            .map(|&v| 2.0 * f64::from(v))
            .sum();
        let wb: f64 = ys[r * 127..(r + 1) * 127]
            .iter()
            .map(|&v| f64::from(v * 3.0))
            .sum();
        assert!((f64::from(a[r]) - wa).abs() < 1e-4, "{} vs {wa}", a[r]);
        assert!((f64::from(b[r]) - wb).abs() < 1e-4, "{} vs {wb}", b[r]);
    }
    // A different structure is a new pipeline.
    ctx.sum_of(&(x.expr() + 2.0), Axis::Last).unwrap();
    assert_eq!(ctx.fused_kernel_count(), before + 2);
}

#[test]
fn errors_name_the_problem() {
    let Some(ctx) = common::ctx() else { return };
    let x = ctx.tensor(&common::random(24, 1), [2, 3, 4]).unwrap();
    let bad = ctx.tensor(&common::random(5, 2), [5]).unwrap();
    // The input expression does not broadcast.
    match ctx.sum_of(&(x.expr() + &bad), Axis::Last) {
        Err(Error::ShapeMismatch { op, .. }) => assert_eq!(op, "elementwise"),
        other => panic!("{other:?}"),
    }
    // The epilogue would enlarge the output.
    let big = ctx.tensor(&common::random(48, 3), [2, 2, 3, 4]).unwrap();
    match ctx.softmax_of(&x.expr(), Some(&(Expr::acc() * &big))) {
        Err(Error::ShapeMismatch { op, lhs, rhs, .. }) => {
            assert_eq!(op, "row-op epilogue");
            assert_eq!((lhs, rhs), (vec![2, 3, 4], vec![2, 2, 3, 4]));
        }
        other => panic!("{other:?}"),
    }
    match ctx.softmax_of(&x.expr(), Some(&(Expr::acc() * &bad))) {
        Err(Error::ShapeMismatch { op, .. }) => assert_eq!(op, "row-op epilogue"),
        other => panic!("{other:?}"),
    }
    // The row op's result placeholder belongs in the epilogue.
    assert!(matches!(
        ctx.softmax_of(&(x.expr() + Expr::acc()), None),
        Err(Error::InvalidArgument(_))
    ));
    // Affine parameters: shape and dtype of the expression's result.
    let w = ctx.tensor(&common::random(3, 4), [3]).unwrap();
    match ctx.rms_norm_of(&(x.expr() * 2.0), Some(&w), 1e-5, None) {
        Err(Error::ShapeMismatch { op, .. }) => assert_eq!(op, "rms_norm"),
        other => panic!("{other:?}"),
    }
    // Rank 0 has no last axis; symbols cannot run; max of nothing.
    let s = ctx.tensor(&[1.5f32], [0usize; 0]).unwrap();
    assert!(matches!(
        ctx.softmax_of(&s.expr(), None),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        ctx.sum_of(&Expr::input(0, [4], DType::F32), Axis::All),
        Err(Error::InvalidArgument(_))
    ));
    let empty = ctx.zeros([3, 0], DType::F32).unwrap();
    assert!(matches!(
        ctx.max_of(&(empty.expr() * 2.0), Axis::Last),
        Err(Error::InvalidArgument(_))
    ));
    // Padded tensors are refused, in the input and in the epilogue.
    let padded = ctx
        .tensor_padded(&common::random(24, 5), [2, 3, 4], 8)
        .unwrap();
    assert!(ctx.sum_of(&(padded.expr() * 2.0), Axis::Last).is_err());
    assert!(
        ctx.softmax_of(&x.expr(), Some(&(Expr::acc() * &padded)))
            .is_err()
    );
    // Parameters a row op does not take.
    assert!(matches!(
        ctx.row_op_of_plan(wgtile::RowOp::Softmax, &x.expr(), Some(&w), None, 0.0, None),
        Err(Error::InvalidArgument(_))
    ));
}

#[test]
fn empty_inputs_give_numpy_answers() {
    let Some(ctx) = common::ctx() else { return };
    let empty = ctx.zeros([3, 0], DType::F32).unwrap();
    let sums = ctx.sum_of(&(empty.expr() * 2.0), Axis::Last).unwrap();
    assert_eq!(sums.to_vec_blocking::<f32>().unwrap(), vec![0.0; 3]);
    let mean = ctx.mean_of(&(empty.expr() * 2.0), Axis::All).unwrap();
    assert!(mean.to_vec_blocking::<f32>().unwrap()[0].is_nan());
    let rows = ctx.zeros([0, 5], DType::F32).unwrap();
    let p = ctx
        .softmax_of(&(rows.expr() + 1.0), Some(&Expr::acc().gelu()))
        .unwrap();
    assert_eq!(p.shape(), &[0, 5]);
    let t: Tensor = ctx
        .layer_norm_of(&rows.expr(), None, None, 1e-5, None)
        .unwrap();
    assert_eq!(t.shape(), &[0, 5]);
}
