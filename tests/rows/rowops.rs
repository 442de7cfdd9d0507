//! Reductions (sum, max, mean), softmax, log-softmax, LayerNorm and RMSNorm
//! against f64 CPU references.
//!
//! Tolerances (u = 2^-24, the f32 unit roundoff; n = row length):
//! - sum / mean: (2 log2 n + n / 256 + 8) u sum|x| (each invocation adds up to
//!   n / 1024 chunks per lane in order, then a log-depth tree), over n for mean;
//! - max: exact;
//! - softmax: p (16 + 2|x - max| + 2 log2 n) u (exp is accurate to 3 + 2|x| ulp
//!   in WGSL, the sum adds log2 n roundings); log-softmax: absolute
//!   (4 + |x| + |max| + |ref|) 2^-21 (log is accurate to 2^-21 absolute near 1);
//! - softmax over a middle axis (the column kernel): the same plus
//!   (n / 4 + 16 log2 n) u of relative error in the line's sum, p times it
//!   (softmax) or absolute (log-softmax): each of four accumulators adds up
//!   to n / 4 terms in order, rescaled by an exp each time its running max
//!   grows (`column_sum_u`);
//! - norms: (32 + 4 log2 n) u (|x_hat w| + |b| + 1 + (|mean| / std) log2 n |w|);
//! - norms over a middle axis (the column kernel): the same plus
//!   `column_sum_u(n)` u (|x_hat w| + (max|x| / std) |w|) (LayerNorm) or
//!   u |x_hat w| (RMSNorm, L2): each of four accumulators takes up to n / 4
//!   Welford steps in order, each rounding the running mean at up to
//!   max|x| and M2 relatively, then log-depth Chan merges;
//! - f16 inputs: the reference uses the f16-rounded inputs; the output adds
//!   one f16 rounding, 2^-11 |ref| + 2^-24 (subnormals).
//!
//! Outputs are poisoned with NaN before each kernel runs (the plan's output is
//! filled, then the plan runs), so an element the kernel skips fails.

use crate::common;

use wgtile::{
    Axis, Context, ContextOptions, DType, Error, Plan, Reduction, RowOp, RowOptions, Tensor, wgpu,
};

const U: f64 = 1.0 / (1u64 << 24) as f64;

fn f16_ok(ctx: &Context) -> bool {
    ctx.profile().shader_f16
}

/// The plan's output poisoned with NaN, then the plan run and read back.
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

/// A second context on the same adapter without some features.
fn ctx_without(features: wgpu::Features) -> Context {
    Context::new_blocking(ContextOptions {
        disabled_features: features,
        ..ContextOptions::default()
    })
    .unwrap()
}

fn rows_n(shape: &[usize]) -> (usize, usize) {
    let n = *shape.last().unwrap();
    (shape.iter().product::<usize>() / n.max(1), n)
}

// ---------------------------------------------------------------- reductions

fn check_reduce(ctx: &Context, data: &[f32], shape: &[usize], dtype: DType, axis: Axis) {
    let (x, held) = common::upload(ctx, data, shape, dtype);
    let (rows, n) = match axis {
        Axis::Last => rows_n(shape),
        Axis::All => (1, held.len()),
        Axis::Dim(_) => panic!("any-axis reductions: reductions_and_softmax_over_any_axis"),
    };
    for op in [Reduction::Sum, Reduction::Mean, Reduction::Max] {
        let plan = ctx.reduce_plan(&x, op, axis).unwrap();
        let what = format!("{op:?} {shape:?} {dtype} {axis:?} [{}]", plan.label());
        let want_shape: Vec<usize> = match axis {
            Axis::Last => shape[..shape.len() - 1].to_vec(),
            Axis::All => vec![],
            Axis::Dim(_) => unreachable!(),
        };
        assert_eq!(plan.output().shape(), want_shape.as_slice(), "{what}");
        let got = run_poisoned(ctx, &plan);
        let mut want = Vec::with_capacity(rows);
        let mut bound = Vec::with_capacity(rows);
        for r in 0..rows {
            let row = &held[r * n..(r + 1) * n];
            let sum: f64 = row.iter().map(|&v| f64::from(v)).sum();
            let mag: f64 = row.iter().map(|&v| f64::from(v).abs()).sum();
            let acc = (2.0 * log2(n) + n as f64 / 256.0 + 8.0) * U * mag;
            let (w, b) = match op {
                Reduction::Sum => (sum, acc),
                Reduction::Mean => (sum / n as f64, acc / n as f64),
                Reduction::Max => (
                    row.iter()
                        .map(|&v| f64::from(v))
                        .fold(f64::NEG_INFINITY, f64::max),
                    0.0,
                ),
            };
            bound.push(b + out_rounding(dtype, w) + 1e-30);
            want.push(w);
        }
        common::assert_close(&what, &got, &want, |i| bound[i]);
    }
}

const REDUCE_SHAPES: &[&[usize]] = &[
    &[1],
    &[7],
    &[2, 3, 5],
    &[4, 127],
    &[3, 1024],
    &[2, 3, 4, 8],
    &[300, 17],
    &[2, 1031],
    &[3, 5003],
    &[1, 8192],
    &[3, 70001],
    &[2, 65536],
];

#[test]
fn reductions_over_the_last_axis_f32() {
    let Some(ctx) = common::ctx() else { return };
    for (i, shape) in REDUCE_SHAPES.iter().enumerate() {
        let data = common::random(shape.iter().product(), 100 + i as u64);
        check_reduce(&ctx, &data, shape, DType::F32, Axis::Last);
    }
}

#[test]
fn reductions_over_all_elements() {
    let Some(ctx) = common::ctx() else { return };
    for (i, shape) in [&[1usize][..], &[13], &[3, 1031], &[100_003], &[64, 1024]]
        .iter()
        .enumerate()
    {
        let data = common::random(shape.iter().product(), 200 + i as u64);
        check_reduce(&ctx, &data, shape, DType::F32, Axis::All);
        if f16_ok(&ctx) {
            check_reduce(&ctx, &data, shape, DType::F16, Axis::All);
        }
    }
    // A rank-0 tensor reduces to itself.
    let x = ctx.tensor(&[2.5f32], []).unwrap();
    let s = ctx.sum(&x, Axis::All).unwrap();
    assert_eq!(s.shape(), &[] as &[usize]);
    assert_eq!(s.to_vec_blocking::<f32>().unwrap(), vec![2.5]);
}

#[test]
fn reductions_f16_and_without_subgroups() {
    let Some(ctx) = common::ctx() else { return };
    if f16_ok(&ctx) {
        for (i, shape) in [
            &[7usize][..],
            &[4, 127],
            &[3, 1024],
            &[3, 5003],
            &[2, 65536],
        ]
        .iter()
        .enumerate()
        {
            let data = common::random(shape.iter().product(), 300 + i as u64);
            check_reduce(&ctx, &data, shape, DType::F16, Axis::Last);
        }
    }
    let plain = ctx_without(wgpu::Features::SUBGROUP);
    assert!(!plain.profile().subgroups);
    for (i, shape) in [&[4usize, 127][..], &[3, 1024], &[3, 5003], &[2, 65536]]
        .iter()
        .enumerate()
    {
        let data = common::random(shape.iter().product(), 400 + i as u64);
        check_reduce(&plain, &data, shape, DType::F32, Axis::Last);
    }
}

#[test]
fn reductions_propagate_nan_and_handle_infinities() {
    let Some(ctx) = common::ctx() else { return };
    for n in [5usize, 8, 1031, 70001] {
        let mut data = common::random(3 * n, 7);
        data[n + n / 2] = f32::NAN; // row 1
        data[2 * n + 1] = f32::INFINITY; // row 2
        data[2 * n + 2] = f32::NEG_INFINITY;
        data[1] = 3e38; // row 0: huge but finite
        let x = ctx.tensor(&data, [3, n]).unwrap();
        let max = run_poisoned(
            &ctx,
            &ctx.reduce_plan(&x, Reduction::Max, Axis::Last).unwrap(),
        );
        assert_eq!(max[0], 3e38, "n {n}");
        assert!(max[1].is_nan(), "n {n}: max of a NaN row is {}", max[1]);
        assert_eq!(max[2], f32::INFINITY, "n {n}");
        let sum = run_poisoned(
            &ctx,
            &ctx.reduce_plan(&x, Reduction::Sum, Axis::Last).unwrap(),
        );
        assert!(sum[1].is_nan(), "n {n}");
        assert!(sum[2].is_nan(), "n {n}: inf + -inf");
        let all = run_poisoned(
            &ctx,
            &ctx.reduce_plan(&x, Reduction::Max, Axis::All).unwrap(),
        );
        assert!(all[0].is_nan(), "n {n}: max over all with a NaN");
    }
}

#[test]
fn empty_reductions_follow_numpy() {
    let Some(ctx) = common::ctx() else { return };
    // Empty rows: sum 0, mean NaN, max an error.
    let x = ctx.zeros([3, 0], DType::F32).unwrap();
    let s = run_poisoned(
        &ctx,
        &ctx.reduce_plan(&x, Reduction::Sum, Axis::Last).unwrap(),
    );
    assert_eq!(s, vec![0.0; 3]);
    let m = run_poisoned(
        &ctx,
        &ctx.reduce_plan(&x, Reduction::Mean, Axis::Last).unwrap(),
    );
    assert!(m.len() == 3 && m.iter().all(|v| v.is_nan()));
    assert!(matches!(
        ctx.max(&x, Axis::Last),
        Err(Error::InvalidArgument(_))
    ));
    let s = ctx.sum(&x, Axis::All).unwrap();
    assert_eq!(s.to_vec_blocking::<f32>().unwrap(), vec![0.0]);
    assert!(
        ctx.mean(&x, Axis::All)
            .unwrap()
            .to_vec_blocking::<f32>()
            .unwrap()[0]
            .is_nan()
    );
    assert!(matches!(
        ctx.max(&x, Axis::All),
        Err(Error::InvalidArgument(_))
    ));
    // No rows: an empty result for every reduction, max included.
    let x = ctx.zeros([0, 5], DType::F32).unwrap();
    for op in [Reduction::Sum, Reduction::Mean, Reduction::Max] {
        let y = ctx.reduce(&x, op, Axis::Last).unwrap();
        assert_eq!(y.shape(), &[0]);
    }
    if f16_ok(&ctx) {
        let x = ctx.zeros([2, 0], DType::F16).unwrap();
        let m = run_poisoned(
            &ctx,
            &ctx.reduce_plan(&x, Reduction::Mean, Axis::Last).unwrap(),
        );
        assert!(m.iter().all(|v| v.is_nan()));
        let s = run_poisoned(
            &ctx,
            &ctx.reduce_plan(&x, Reduction::Sum, Axis::Last).unwrap(),
        );
        assert_eq!(s, vec![0.0; 2]);
    }
    // Rank 0 has no last axis.
    let x = ctx.tensor(&[1.0f32], []).unwrap();
    assert!(matches!(
        ctx.sum(&x, Axis::Last),
        Err(Error::InvalidArgument(_))
    ));
}

// ------------------------------------------------------------------ softmax

fn softmax_ref(row: &[f32], log: bool) -> Vec<f64> {
    let x: Vec<f64> = row.iter().map(|&v| f64::from(v)).collect();
    if x.iter().any(|v| v.is_nan() || *v == f64::INFINITY) {
        return vec![f64::NAN; x.len()];
    }
    let m = x.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if m == f64::NEG_INFINITY {
        return vec![if log { f64::NEG_INFINITY } else { 0.0 }; x.len()];
    }
    let s: f64 = x.iter().map(|v| (v - m).exp()).sum();
    x.iter()
        .map(|v| {
            if log {
                v - m - s.ln()
            } else {
                (v - m).exp() / s
            }
        })
        .collect()
}

/// Compares with NaN == NaN and inf == inf as exact matches.
fn assert_rows(what: &str, got: &[f32], want: &[f64], bound: impl Fn(usize) -> f64) {
    let special = |w: f64| w.is_nan() || w.is_infinite();
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        if special(w) {
            let ok = (w.is_nan() && g.is_nan()) || f64::from(g) == w;
            assert!(ok, "{what}: element {i} is {g} but should be {w}");
        }
    }
    let got2: Vec<f32> = got
        .iter()
        .zip(want)
        .map(|(&g, &w)| if special(w) { 0.0 } else { g })
        .collect();
    let want2: Vec<f64> = want
        .iter()
        .map(|&w| if special(w) { 0.0 } else { w })
        .collect();
    common::assert_close(what, &got2, &want2, |i| {
        if special(want[i]) { 1.0 } else { bound(i) }
    });
}

/// The softmax tolerance of the module header for element `x` of a line of
/// length `n` with max `m` and reference `w`, in `dtype`, plus `sum_u` u of
/// relative error in the line's sum (the column kernel's, see
/// `column_sum_u`).
fn softmax_bound(x: f32, m: f64, w: f64, log: bool, n: usize, dtype: DType, sum_u: f64) -> f64 {
    let d = (f64::from(x) - m).abs();
    let b = if log {
        (4.0 + f64::from(x).abs() + m.abs() + w.abs()) * 2f64.powi(-21) + sum_u * U
    } else {
        w * (16.0 + 2.0 * d.min(1e3) + 2.0 * log2(n) + sum_u) * U
    };
    b + out_rounding(dtype, w) + 1e-38
}

fn check_softmax(ctx: &Context, data: &[f32], shape: &[usize], dtype: DType) {
    check_softmax_with(ctx, data, shape, dtype, RowOptions::default());
}

fn check_softmax_with(
    ctx: &Context,
    data: &[f32],
    shape: &[usize],
    dtype: DType,
    options: RowOptions,
) {
    let (x, held) = common::upload(ctx, data, shape, dtype);
    let (rows, n) = rows_n(shape);
    for log in [false, true] {
        let plan = if options.streaming {
            let op = if log {
                RowOp::LogSoftmax
            } else {
                RowOp::Softmax
            };
            ctx.row_op_plan(op, &x, None, None, 0.0, options)
        } else if log {
            ctx.log_softmax_plan(&x)
        } else {
            ctx.softmax_plan(&x)
        }
        .unwrap();
        let what = format!("{} {shape:?} {dtype}", plan.label());
        assert_eq!(plan.output().shape(), shape);
        assert_eq!(plan.output().dtype(), dtype);
        let got = run_poisoned(ctx, &plan);
        let mut want = Vec::with_capacity(held.len());
        let mut bound = Vec::with_capacity(held.len());
        for r in 0..rows {
            let row = &held[r * n..(r + 1) * n];
            let m = row
                .iter()
                .map(|&v| f64::from(v))
                .fold(f64::NEG_INFINITY, f64::max);
            let reference = softmax_ref(row, log);
            for (j, &w) in reference.iter().enumerate() {
                // What f32 can hold: -3e38 - 3e38 is -inf in log-softmax.
                let w = f64::from(w as f32);
                bound.push(softmax_bound(row[j], m, w, log, n, dtype, 0.0));
                want.push(w);
            }
        }
        assert_rows(&what, &got, &want, |i| bound[i]);
    }
}

const ROW_SHAPES: &[&[usize]] = &[
    &[1],
    &[7],
    &[2, 3, 5],
    &[4, 127],
    &[3, 1024],
    &[2, 3, 4, 8],
    &[300, 17],
    &[2, 1031],
    &[3, 5003],
    &[1, 8192],
    &[2, 9001],
    &[2, 33001],
    &[2, 40000],
];

#[test]
fn softmax_f32_every_path() {
    let Some(ctx) = common::ctx() else { return };
    for (i, shape) in ROW_SHAPES.iter().enumerate() {
        let data = common::random(shape.iter().product(), 500 + i as u64);
        // Scale so exp sees a useful range.
        let data: Vec<f32> = data.iter().map(|v| v * 4.0).collect();
        check_softmax(&ctx, &data, shape, DType::F32);
    }
}

#[test]
fn softmax_f16_and_without_subgroups() {
    let Some(ctx) = common::ctx() else { return };
    if f16_ok(&ctx) {
        for (i, shape) in [
            &[7usize][..],
            &[4, 127],
            &[3, 1024],
            &[3, 5003],
            &[2, 33001],
        ]
        .iter()
        .enumerate()
        {
            let data = common::random(shape.iter().product(), 600 + i as u64);
            check_softmax(&ctx, &data, shape, DType::F16);
        }
    }
    let plain = ctx_without(wgpu::Features::SUBGROUP);
    for (i, shape) in [
        &[4usize, 127][..],
        &[3, 1024],
        &[3, 5003],
        &[2, 9001],
        &[2, 40000],
    ]
    .iter()
    .enumerate()
    {
        let data = common::random(shape.iter().product(), 700 + i as u64);
        check_softmax(&plain, &data, shape, DType::F32);
    }
}

/// Six lines of `n` values (line k at `k * n ..`) for softmax's special
/// cases: 0 has -inf entries (masked) including the first and last and a
/// finite second; 1 is all -inf; 2 has one NaN; 3 huge values that
/// overflow a naive exp or sum; 4 a +inf entry (a NaN line, as PyTorch);
/// 5 plain random (a neighbour of the special lines).
fn special_softmax_lines(n: usize, seed: u64) -> Vec<f32> {
    let mut v = common::random(6 * n, seed);
    for j in (0..n).step_by(3) {
        v[j] = f32::NEG_INFINITY;
    }
    v[n - 1] = f32::NEG_INFINITY;
    if n > 1 {
        v[1] = 0.5;
    }
    v[n..2 * n].fill(f32::NEG_INFINITY);
    v[2 * n + n / 2] = f32::NAN;
    for (j, x) in v[3 * n..4 * n].iter_mut().enumerate() {
        *x = match j % 4 {
            0 => 3e38,
            1 => -3e38,
            2 => 1e30,
            _ => 3e38 * 0.999_999,
        };
    }
    v[4 * n + (n - 1).min(1)] = f32::INFINITY;
    v
}

#[test]
fn softmax_masking_nan_and_huge_values() {
    let Some(ctx) = common::ctx() else { return };
    // Row lengths for each kernel: registers (short, vec4, scalar), the
    // 1024-invocation layout and the online (streaming) kernel.
    for n in [6usize, 8, 1031, 9001, 33001, 40000] {
        let rows = 6;
        let data = special_softmax_lines(n, n as u64);
        check_softmax(&ctx, &data, &[rows, n], DType::F32);
        let x = ctx.tensor(&data, [rows, n]).unwrap();
        let p = ctx.softmax(&x).unwrap().to_vec_blocking::<f32>().unwrap();
        assert!(p[n..2 * n].iter().all(|&v| v == 0.0), "n {n}: all -inf row");
        assert!(p[2 * n..3 * n].iter().all(|v| v.is_nan()), "n {n}: NaN row");
        let s0: f64 = p[..n].iter().map(|&v| f64::from(v)).sum();
        assert!((s0 - 1.0).abs() < 1e-4, "n {n}: masked row sums to {s0}");
        let s3: f64 = p[3 * n..4 * n].iter().map(|&v| f64::from(v)).sum();
        assert!((s3 - 1.0).abs() < 1e-4, "n {n}: huge row sums to {s3}");
        let s5: f64 = p[5 * n..].iter().map(|&v| f64::from(v)).sum();
        assert!((s5 - 1.0).abs() < 1e-4, "n {n}: random row sums to {s5}");
    }
}

// -------------------------------------------------------------------- norms

#[allow(clippy::too_many_arguments)]
fn check_norm(
    ctx: &Context,
    data: &[f32],
    shape: &[usize],
    dtype: DType,
    rms: bool,
    affine: bool,
    eps: f32,
    seed: u64,
) {
    check_norm_with(
        ctx,
        data,
        shape,
        dtype,
        (rms, affine),
        eps,
        seed,
        RowOptions::default(),
    );
}

#[allow(clippy::too_many_arguments)]
fn check_norm_with(
    ctx: &Context,
    data: &[f32],
    shape: &[usize],
    dtype: DType,
    (rms, affine): (bool, bool),
    eps: f32,
    seed: u64,
    options: RowOptions,
) {
    let (x, held) = common::upload(ctx, data, shape, dtype);
    let (rows, n) = rows_n(shape);
    let w_data: Vec<f32> = common::random(n, seed).iter().map(|v| 1.0 + v).collect();
    let b_data = common::random(n, seed + 1);
    let (w, w_held) = common::upload(ctx, &w_data, &[n], dtype);
    let (b, b_held) = common::upload(ctx, &b_data, &[n], dtype);
    let (wt, bt): (Option<&Tensor>, Option<&Tensor>) = if affine {
        (Some(&w), Some(&b))
    } else {
        (None, None)
    };
    let plan = if options.streaming {
        let (op, bt) = if rms {
            (RowOp::RmsNorm, None)
        } else {
            (RowOp::LayerNorm, bt)
        };
        ctx.row_op_plan(op, &x, wt, bt, eps, options)
    } else if rms {
        ctx.rms_norm_plan(&x, wt, eps)
    } else {
        ctx.layer_norm_plan(&x, wt, bt, eps)
    }
    .unwrap();
    let what = format!("{} {shape:?} {dtype} affine {affine}", plan.label());
    let got = run_poisoned(ctx, &plan);
    let params = affine.then_some((&w_held[..], &b_held[..]));
    let (want, bound): (Vec<f64>, Vec<f64>) = held
        .chunks(n.max(1))
        .take(rows)
        .flat_map(|row| norm_ref(row, rms, params, eps, dtype, 0.0))
        .unzip();
    common::assert_close(&what, &got, &want, |i| bound[i]);
}

/// One LayerNorm (or RMSNorm) row against f64: each element's reference and
/// bound (the module's norm tolerance plus one rounding to `dtype`);
/// `params` are the held weight and bias (RMSNorm reads no bias); `sum_u`
/// u of extra error in the statistics (the column kernel's, module header).
fn norm_ref(
    row: &[f32],
    rms: bool,
    params: Option<(&[f32], &[f32])>,
    eps: f32,
    dtype: DType,
    sum_u: f64,
) -> Vec<(f64, f64)> {
    let n = row.len();
    let row: Vec<f64> = row.iter().map(|&v| f64::from(v)).collect();
    let max_abs = row.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    let mean = if rms {
        0.0
    } else {
        row.iter().sum::<f64>() / n as f64
    };
    let var = row.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n as f64;
    let std = (var + f64::from(eps)).sqrt();
    (0..n)
        .map(|j| {
            let xhat = (row[j] - mean) / std;
            let (gw, gb) = match params {
                Some((w, b)) => (f64::from(w[j]), if rms { 0.0 } else { f64::from(b[j]) }),
                None => (1.0, 0.0),
            };
            let y = xhat * gw + gb;
            let cancel = if rms {
                0.0
            } else {
                mean.abs() / std * log2(n) * gw.abs()
            };
            let b = (32.0 + 4.0 * log2(n)) * U * ((xhat * gw).abs() + gb.abs() + 1.0 + cancel);
            let running = if rms { 0.0 } else { max_abs / std * gw.abs() };
            let b = b + sum_u * U * ((xhat * gw).abs() + running);
            (y, b + out_rounding(dtype, y))
        })
        .collect()
}

/// One row divided by its L2 norm (at least `eps`) against f64, with each
/// element's bound: (16 + 4 log2 n + `sum_u`) u |y| plus one rounding to
/// `dtype` (`sum_u`: the column kernel's extra, module header).
fn l2_ref(row: &[f32], eps: f32, dtype: DType, sum_u: f64) -> Vec<(f64, f64)> {
    let n = row.len();
    let norm = row
        .iter()
        .map(|&v| f64::from(v).powi(2))
        .sum::<f64>()
        .sqrt()
        .max(f64::from(eps));
    row.iter()
        .map(|&v| {
            let y = f64::from(v) / norm;
            let b = (16.0 + 4.0 * log2(n) + sum_u) * U * (y.abs() + 1e-30) + out_rounding(dtype, y);
            (y, b)
        })
        .collect()
}

#[test]
fn layer_norm_and_rms_norm_f32() {
    let Some(ctx) = common::ctx() else { return };
    for (i, shape) in ROW_SHAPES.iter().enumerate() {
        let data = common::random(shape.iter().product(), 800 + i as u64);
        for (rms, affine) in [(false, false), (false, true), (true, false), (true, true)] {
            check_norm(
                &ctx,
                &data,
                shape,
                DType::F32,
                rms,
                affine,
                1e-5,
                900 + i as u64,
            );
        }
    }
}

#[test]
fn norms_with_a_large_mean_f16_and_without_subgroups() {
    let Some(ctx) = common::ctx() else { return };
    // A mean 10^4 standard deviations away from zero: E[x^2] - E[x]^2 would
    // lose every digit; the two-pass and Welford/Chan statistics do not.
    for shape in [&[3usize, 1024][..], &[2, 1031], &[2, 40000]] {
        let data: Vec<f32> = common::random(shape.iter().product(), 11)
            .iter()
            .map(|v| 100.0 + 0.01 * v)
            .collect();
        check_norm(&ctx, &data, shape, DType::F32, false, true, 0.0, 12);
    }
    if f16_ok(&ctx) {
        for (i, shape) in [&[7usize][..], &[4, 127], &[3, 1024], &[2, 33001]]
            .iter()
            .enumerate()
        {
            let data = common::random(shape.iter().product(), 1000 + i as u64);
            check_norm(&ctx, &data, shape, DType::F16, false, true, 1e-5, 1100);
            check_norm(&ctx, &data, shape, DType::F16, true, true, 1e-5, 1200);
        }
    }
    let plain = ctx_without(wgpu::Features::SUBGROUP);
    for (i, shape) in [&[4usize, 127][..], &[3, 1024], &[2, 9001], &[2, 40000]]
        .iter()
        .enumerate()
    {
        let data = common::random(shape.iter().product(), 1300 + i as u64);
        check_norm(&plain, &data, shape, DType::F32, false, true, 1e-5, 1400);
        check_norm(&plain, &data, shape, DType::F32, true, false, 1e-5, 1500);
    }
}

#[test]
fn norms_propagate_nan_to_their_row() {
    let Some(ctx) = common::ctx() else { return };
    for n in [5usize, 1024, 40000] {
        let mut data = common::random(3 * n, 3);
        data[n + 2] = f32::NAN;
        let x = ctx.tensor(&data, [3, n]).unwrap();
        for y in [
            ctx.layer_norm(&x, None, None, 1e-5).unwrap(),
            ctx.rms_norm(&x, None, 1e-5).unwrap(),
        ] {
            let y = y.to_vec_blocking::<f32>().unwrap();
            assert!(y[n..2 * n].iter().all(|v| v.is_nan()), "n {n}: NaN row");
            assert!(
                y[..n].iter().chain(&y[2 * n..]).all(|v| v.is_finite()),
                "n {n}"
            );
        }
    }
}

#[test]
fn streaming_kernels_on_short_rows() {
    // The two-read kernels (online softmax, Welford/Chan norms) on rows that
    // would fit in registers: rows shorter than the workgroup, partial chunks.
    let Some(ctx) = common::ctx() else { return };
    let streaming = RowOptions { streaming: true };
    let plain = ctx_without(wgpu::Features::SUBGROUP);
    for (i, shape) in [
        &[1usize][..],
        &[7],
        &[2, 3, 5],
        &[4, 127],
        &[3, 1024],
        &[300, 17],
    ]
    .iter()
    .enumerate()
    {
        let data = common::random(shape.iter().product(), 1600 + i as u64);
        let data: Vec<f32> = data.iter().map(|v| v * 4.0).collect();
        for c in [&ctx, &plain] {
            check_softmax_with(c, &data, shape, DType::F32, streaming);
            check_norm_with(
                c,
                &data,
                shape,
                DType::F32,
                (false, true),
                1e-5,
                7,
                streaming,
            );
            check_norm_with(
                c,
                &data,
                shape,
                DType::F32,
                (true, true),
                1e-5,
                8,
                streaming,
            );
        }
        if f16_ok(&ctx) {
            check_softmax_with(&ctx, &data, shape, DType::F16, streaming);
            check_norm_with(
                &ctx,
                &data,
                shape,
                DType::F16,
                (false, false),
                1e-5,
                9,
                streaming,
            );
        }
    }
    // Masked, NaN and huge rows through the online kernel.
    let n = 13;
    let mut data = common::random(4 * n, 5);
    data[..n].fill(f32::NEG_INFINITY);
    data[n + 3] = f32::NAN;
    data[2 * n + 1] = 3e38;
    data[2 * n + 2] = -3e38;
    data[3 * n + 4] = f32::NEG_INFINITY;
    check_softmax_with(&ctx, &data, &[4, n], DType::F32, streaming);
    // Options reach only the ops they belong to.
    let x = ctx.rand_uniform([2, 4], -1.0, 1.0, DType::F32, 1).unwrap();
    let w = ctx.rand_uniform([4], -1.0, 1.0, DType::F32, 2).unwrap();
    for (op, wt, bt) in [
        (RowOp::Softmax, Some(&w), None),
        (RowOp::LogSoftmax, None, Some(&w)),
        (RowOp::RmsNorm, Some(&w), Some(&w)),
    ] {
        assert!(matches!(
            ctx.row_op_plan(op, &x, wt, bt, 1e-5, RowOptions::default()),
            Err(Error::InvalidArgument(_))
        ));
    }
}

// ----------------------------------------------------------- edges, errors

#[test]
fn empty_row_ops_give_empty_results() {
    let Some(ctx) = common::ctx() else { return };
    for shape in [&[3usize, 0][..], &[0, 8], &[2, 0, 4]] {
        let x = ctx.zeros(shape, DType::F32).unwrap();
        let n = *shape.last().unwrap();
        let w = ctx.zeros([n], DType::F32).unwrap();
        for y in [
            ctx.softmax(&x).unwrap(),
            ctx.log_softmax(&x).unwrap(),
            ctx.layer_norm(&x, Some(&w), Some(&w), 1e-5).unwrap(),
            ctx.rms_norm(&x, Some(&w), 1e-5).unwrap(),
        ] {
            assert_eq!(y.shape(), shape);
            assert!(y.to_vec_blocking::<f32>().unwrap().is_empty());
        }
    }
    let scalar = ctx.tensor(&[1.0f32], []).unwrap();
    assert!(matches!(
        ctx.softmax(&scalar),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        ctx.layer_norm(&scalar, None, None, 1e-5),
        Err(Error::InvalidArgument(_))
    ));
}

#[test]
fn shape_and_dtype_errors_name_both_sides() {
    let Some(ctx) = common::ctx() else { return };
    let x = ctx.rand_uniform([4, 6], -1.0, 1.0, DType::F32, 1).unwrap();
    let short = ctx.rand_uniform([5], -1.0, 1.0, DType::F32, 2).unwrap();
    let matrix = ctx.rand_uniform([1, 6], -1.0, 1.0, DType::F32, 3).unwrap();
    let good = ctx.rand_uniform([6], -1.0, 1.0, DType::F32, 4).unwrap();
    for e in [
        ctx.layer_norm(&x, Some(&short), None, 1e-5).unwrap_err(),
        ctx.layer_norm(&x, Some(&good), Some(&short), 1e-5)
            .unwrap_err(),
        ctx.layer_norm(&x, Some(&matrix), None, 1e-5).unwrap_err(),
        ctx.rms_norm(&x, Some(&short), 1e-5).unwrap_err(),
    ] {
        let text = e.to_string();
        assert!(matches!(e, Error::ShapeMismatch { .. }), "{text}");
        assert!(text.contains("[4, 6]"), "{text}");
        assert!(text.contains("[5]") || text.contains("[1, 6]"), "{text}");
    }
    for eps in [-1.0, f32::NAN, f32::INFINITY] {
        assert!(matches!(
            ctx.layer_norm(&x, None, None, eps),
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            ctx.rms_norm(&x, None, eps),
            Err(Error::InvalidArgument(_))
        ));
    }
    if f16_ok(&ctx) {
        let w16 = ctx.rand_uniform([6], -1.0, 1.0, DType::F16, 5).unwrap();
        assert!(matches!(
            ctx.layer_norm(&x, Some(&w16), None, 1e-5),
            Err(Error::DTypeMismatch { .. })
        ));
        assert!(matches!(
            ctx.rms_norm(&x, Some(&w16), 1e-5),
            Err(Error::DTypeMismatch { .. })
        ));
        let x16 = ctx.rand_uniform([4, 6], -1.0, 1.0, DType::F16, 6).unwrap();
        assert!(matches!(
            ctx.layer_norm(&x16, None, Some(&good), 1e-5),
            Err(Error::DTypeMismatch { .. })
        ));
    }
    // f16 on an adapter without shader-f16.
    let no_f16 = ctx_without(wgpu::Features::SHADER_F16);
    let h: Vec<wgtile::f16> = (0..12).map(|i| wgtile::f16::from_f32(i as f32)).collect();
    let x16 = no_f16.tensor(&h, [2, 6]).unwrap();
    for e in [
        no_f16.softmax(&x16).unwrap_err(),
        no_f16.log_softmax(&x16).unwrap_err(),
        no_f16.layer_norm(&x16, None, None, 1e-5).unwrap_err(),
        no_f16.rms_norm(&x16, None, 1e-5).unwrap_err(),
        no_f16.sum(&x16, Axis::Last).unwrap_err(),
        no_f16.max(&x16, Axis::All).unwrap_err(),
        no_f16.copy_plan(&x16).unwrap_err(),
    ] {
        assert!(matches!(e, Error::UnsupportedFeature { .. }), "{e}");
    }
}

#[test]
fn copy_plan_copies_every_element() {
    let Some(ctx) = common::ctx() else { return };
    for shape in [&[5usize][..], &[3, 1031], &[64, 64], &[3, 1025, 7]] {
        let data = common::random(shape.iter().product(), 9);
        let x = ctx.tensor(&data, shape).unwrap();
        let plan = ctx.copy_plan(&x).unwrap();
        assert_eq!(plan.bytes(), 2 * x.size_bytes());
        assert_eq!(run_poisoned(&ctx, &plan), data);
    }
}

#[test]
fn plans_count_bytes_once() {
    let Some(ctx) = common::ctx() else { return };
    let x = ctx
        .rand_uniform([8, 256], -1.0, 1.0, DType::F32, 1)
        .unwrap();
    let w = ctx.rand_uniform([256], -1.0, 1.0, DType::F32, 2).unwrap();
    let bytes = 8 * 256 * 4;
    assert_eq!(ctx.softmax_plan(&x).unwrap().bytes(), 2 * bytes);
    assert_eq!(
        ctx.layer_norm_plan(&x, Some(&w), Some(&w), 1e-5)
            .unwrap()
            .bytes(),
        2 * bytes + 2 * 256 * 4
    );
    let p = ctx.reduce_plan(&x, Reduction::Sum, Axis::Last).unwrap();
    assert_eq!(p.bytes(), bytes + 8 * 4);
    assert_eq!(p.flops(), 8 * 256);
}

#[test]
fn kernel_choice_follows_the_shape_and_the_adapter() {
    // The other tests rely on these paths being the ones that run.
    let Some(ctx) = common::ctx() else { return };
    let label = |c: &Context, shape: &[usize], f: &dyn Fn(&Context, &Tensor) -> Plan| {
        let x = c.zeros(shape, DType::F32).unwrap();
        f(c, &x).label().to_string()
    };
    let softmax = |c: &Context, x: &Tensor| c.softmax_plan(x).unwrap();
    let norm = |c: &Context, x: &Tensor| c.layer_norm_plan(x, None, None, 1e-5).unwrap();
    let sum = |c: &Context, x: &Tensor| c.reduce_plan(x, Reduction::Sum, Axis::Last).unwrap();
    let sg = ctx.profile().subgroups;
    let l = label(&ctx, &[3, 1024], &softmax);
    assert!(l.contains("vec4") && l.contains("r=4"), "{l}");
    assert_eq!(l.contains("softmax.subgroup"), sg, "{l}");
    let l = label(&ctx, &[4, 127], &softmax);
    assert!(l.contains("vec1"), "{l}");
    assert!(label(&ctx, &[2, 9001], &softmax).contains("wg=1024"));
    assert!(label(&ctx, &[2, 33001], &softmax).contains("softmax.online"));
    assert!(label(&ctx, &[2, 40000], &norm).contains("norm.streaming"));
    assert!(label(&ctx, &[300, 17], &norm).contains("t=2"));
    assert!(!label(&ctx, &[2, 65536], &sum).contains("split=1 "));
    assert!(label(&ctx, &[300, 17], &sum).contains("split=1 "));
    let plain = ctx_without(wgpu::Features::SUBGROUP);
    for shape in [&[3usize, 1024][..], &[2, 40000]] {
        for f in [&softmax as &dyn Fn(&Context, &Tensor) -> Plan, &norm, &sum] {
            let l = label(&plain, shape, f);
            assert!(!l.contains("subgroup"), "{l}");
        }
    }
}

/// log_softmax at large logits keeps ln(sum) (computed as (x - max) - ln
/// sum, not x - (max + ln sum), where ln sum vanishes next to a large max):
/// all-equal rows give -ln n at every magnitude, and rows far from zero
/// match an f64 reference, in the register kernel and the streaming one.
#[test]
fn log_softmax_at_large_logits() {
    let Some(ctx) = common::ctx() else { return };
    for n in [5usize, 1000, 40_000] {
        for level in [1e4f32, 1e6, 1e8, -3e38, 3e38] {
            let data = vec![level; 2 * n];
            let x = ctx.tensor(&data, [2, n]).unwrap();
            let got = run_poisoned(&ctx, &ctx.log_softmax_plan(&x).unwrap());
            let want = -(n as f64).ln();
            for (i, &g) in got.iter().enumerate() {
                let err = (f64::from(g) - want).abs();
                assert!(
                    err <= 2e-6 * want.abs(),
                    "n {n} level {level} element {i}: {g} vs {want}"
                );
            }
        }
        // Random offsets around a large logit: exact differences, so the f64
        // reference of the f32 inputs is the answer to f32 rounding.
        let noise = common::random(n, 7);
        let data: Vec<f32> = noise.iter().map(|&r| 1e6 + 64.0 * r).collect();
        let x = ctx.tensor(&data, [1, n]).unwrap();
        let got = run_poisoned(&ctx, &ctx.log_softmax_plan(&x).unwrap());
        let mx = data.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
        let lse = data
            .iter()
            .map(|&v| (f64::from(v) - mx).exp())
            .sum::<f64>()
            .ln();
        for (i, (&g, &v)) in got.iter().zip(&data).enumerate() {
            let want = (f64::from(v) - mx) - lse;
            let err = (f64::from(g) - want).abs();
            assert!(
                err <= 1e-5 * (1.0 + want.abs()),
                "n {n} element {i}: {g} vs {want}"
            );
        }
    }
}

/// l2_normalize against f64 on every row shape (register and streaming
/// rows), f32 / f16 / bf16; a zero row stays zero (eps > 0); NaN stays in
/// its row; a bad eps is refused.
#[test]
fn l2_normalize_against_f64() {
    let Some(ctx) = common::ctx() else { return };
    let mut dtypes = vec![DType::F32, DType::BF16];
    if f16_ok(&ctx) {
        dtypes.push(DType::F16);
    }
    for (i, shape) in ROW_SHAPES.iter().enumerate() {
        let mut data = common::random(shape.iter().product(), 1700 + i as u64);
        let (rows, n) = rows_n(shape);
        if rows > 1 {
            // The second row all zeros.
            data[n..2 * n].fill(0.0);
        }
        for &dtype in &dtypes {
            for streaming in [false, true] {
                let (x, held) = common::upload(&ctx, &data, shape, dtype);
                let eps = 1e-12;
                let plan = if streaming {
                    ctx.row_op_plan(
                        RowOp::L2Normalize,
                        &x,
                        None,
                        None,
                        eps,
                        RowOptions { streaming: true },
                    )
                } else {
                    ctx.l2_normalize_plan(&x, eps)
                }
                .unwrap();
                let got = run_poisoned(&ctx, &plan);
                let (want, bound): (Vec<f64>, Vec<f64>) = held
                    .chunks(n.max(1))
                    .take(rows)
                    .flat_map(|row| l2_ref(row, eps, dtype, 0.0))
                    .unzip();
                common::assert_close(
                    &format!("{} {shape:?} {dtype}", plan.label()),
                    &got,
                    &want,
                    |i| bound[i],
                );
            }
        }
    }
    let mut row = common::random(33, 5);
    row[7] = f32::NAN;
    let x = ctx
        .tensor(&[row.clone(), common::random(33, 6)].concat(), [2, 33])
        .unwrap();
    let y = ctx
        .l2_normalize(&x, 1e-12)
        .unwrap()
        .to_vec_blocking::<f32>()
        .unwrap();
    assert!(y[..33].iter().all(|v| v.is_nan()) && y[33..].iter().all(|v| v.is_finite()));
    assert!(ctx.l2_normalize(&x, f32::NAN).is_err());
    assert!(ctx.l2_normalize(&x, -1.0).is_err());
}

/// Element indices of `shape` along axis `d` for each output position
/// (the other axes in order): the host side of any-axis ops.
fn lines_along(shape: &[usize], d: usize) -> Vec<Vec<usize>> {
    let strides: Vec<usize> = (0..shape.len())
        .map(|k| shape[k + 1..].iter().product())
        .collect();
    let others: Vec<usize> = (0..shape.len()).filter(|&k| k != d).collect();
    let count: usize = others.iter().map(|&k| shape[k]).product();
    (0..count)
        .map(|mut e| {
            let mut base = 0;
            for &k in others.iter().rev() {
                base += (e % shape[k]) * strides[k];
                e /= shape[k];
            }
            (0..shape[d]).map(|i| base + i * strides[d]).collect()
        })
        .collect()
}

/// sum, max and mean over every axis (keepdims too), softmax and
/// log-softmax over every axis, f32 and f16, against f64.
#[test]
fn reductions_and_softmax_over_any_axis() {
    let Some(ctx) = common::ctx() else { return };
    let mut dtypes = vec![DType::F32];
    if f16_ok(&ctx) {
        dtypes.push(DType::F16);
    }
    // [100, 3] and [2, 70, 5] over their long axis: few columns, so the
    // column kernel splits the axis and combines partials. Axis lengths
    // off a multiple of four ([3, 37, 8]) run the unrolled loop's tail.
    // [700, 33] over axis 0: 44 partials per column, two combine
    // workgroups (32 columns each), the second partial.
    for shape in [
        vec![700usize, 33],
        vec![3, 5, 7],
        vec![2, 1, 4, 6],
        vec![9],
        vec![100, 3],
        vec![2, 70, 5],
        vec![3, 37, 8],
        vec![64, 12],
        vec![5, 2, 4],
    ] {
        let data = common::random(shape.iter().product(), 41);
        for &dtype in &dtypes {
            let (x, held) = common::upload(&ctx, &data, &shape, dtype);
            for d in 0..shape.len() {
                let lines = lines_along(&shape, d);
                for op in [Reduction::Sum, Reduction::Max, Reduction::Mean] {
                    let got = ctx.reduce(&x, op, Axis::Dim(d)).unwrap();
                    let mut want_shape = shape.clone();
                    want_shape.remove(d);
                    assert_eq!(got.shape(), want_shape.as_slice());
                    let got = got.to_f32_vec_blocking().unwrap();
                    let want: Vec<f64> = lines
                        .iter()
                        .map(|l| {
                            let v: Vec<f64> = l.iter().map(|&i| f64::from(held[i])).collect();
                            match op {
                                Reduction::Sum => v.iter().sum(),
                                Reduction::Max => {
                                    v.iter().copied().fold(f64::NEG_INFINITY, f64::max)
                                }
                                _ => v.iter().sum::<f64>() / v.len() as f64,
                            }
                        })
                        .collect();
                    assert_rows(
                        &format!("{op:?} {shape:?} {dtype} axis {d}"),
                        &got,
                        &want,
                        |i| 8.0 * U * lines[i].len() as f64 + out_rounding(dtype, want[i]),
                    );
                    let mut kept = shape.clone();
                    kept[d] = 1;
                    assert_eq!(
                        ctx.reduce_keepdims(&x, op, Axis::Dim(d)).unwrap().shape(),
                        kept.as_slice()
                    );
                }
                for log in [false, true] {
                    let y = if log {
                        ctx.log_softmax_axis(&x, d)
                    } else {
                        ctx.softmax_axis(&x, d)
                    }
                    .unwrap();
                    assert_eq!(y.shape(), shape.as_slice());
                    let got = y.to_f32_vec_blocking().unwrap();
                    let mut want = vec![0.0; got.len()];
                    for l in &lines {
                        let row: Vec<f32> = l.iter().map(|&i| held[i]).collect();
                        for (&i, v) in l.iter().zip(softmax_ref(&row, log)) {
                            want[i] = v;
                        }
                    }
                    assert_rows(
                        &format!("softmax {shape:?} {dtype} axis {d} log {log}"),
                        &got,
                        &want,
                        |i| 32.0 * U * (want[i].abs() + 1.0) + out_rounding(dtype, want[i]),
                    );
                }
            }
        }
    }
    // NaN in one column of a split column reduction: that column's max and
    // sum are NaN, the others not.
    for cols in [3usize, 4] {
        let mut v = common::random(200 * cols, 42);
        v[150 * cols + 1] = f32::NAN;
        let t = ctx.tensor(&v, [200, cols]).unwrap();
        for op in [Reduction::Max, Reduction::Sum] {
            let r = ctx
                .reduce(&t, op, Axis::Dim(0))
                .unwrap()
                .to_vec_blocking::<f32>()
                .unwrap();
            assert!(
                r.iter().enumerate().all(|(c, v)| v.is_nan() == (c == 1)),
                "{op:?}: {r:?}"
            );
        }
    }
    let x = ctx.tensor(&common::random(12, 3), [3, 4]).unwrap();
    assert!(ctx.sum(&x, Axis::Dim(2)).is_err());
    assert!(ctx.softmax_axis(&x, 2).is_err());
    assert_eq!(
        ctx.reduce_keepdims(&x, Reduction::Sum, Axis::All)
            .unwrap()
            .shape(),
        [1, 1]
    );
    // An empty axis: sums are 0, a max is an error (as NumPy).
    let e = ctx.zeros([3, 0, 2], DType::F32).unwrap();
    assert_eq!(
        ctx.sum(&e, Axis::Dim(1))
            .unwrap()
            .to_vec_blocking::<f32>()
            .unwrap(),
        vec![0.0; 6]
    );
    assert!(ctx.max(&e, Axis::Dim(1)).is_err());
}

/// The column softmax's extra relative error in a line's sum, in units of u
/// (module header): one of four accumulators adds up to n / 4 terms in
/// order, and each time its running max grows the sum is rescaled by an
/// exp (8 u each): about ln n times down a line of shuffled data (its
/// records), bounded here by 2 log2 n.
fn column_sum_u(n: usize) -> f64 {
    n.div_ceil(4) as f64 + 16.0 * log2(n)
}

/// Softmax and log-softmax over each axis of `data` (`shape`, `dtype`) by
/// `row_op_axis_plan`, output poisoned, against the f64 reference per line.
fn check_softmax_axis(ctx: &Context, data: &[f32], shape: &[usize], dtype: DType, d: usize) {
    let (x, held) = common::upload(ctx, data, shape, dtype);
    let n = shape[d];
    let lines = lines_along(shape, d);
    let inner: usize = shape[d + 1..].iter().product();
    for log in [false, true] {
        let op = if log {
            RowOp::LogSoftmax
        } else {
            RowOp::Softmax
        };
        let plan = ctx.row_op_axis_plan(op, &x, d, None, None, 0.0).unwrap();
        let what = format!("{} {shape:?} {dtype} axis {d}", plan.label());
        // The column kernel runs wherever the line's elements are strided.
        assert_eq!(plan.label().contains("columns"), inner > 1, "{what}");
        assert_eq!(plan.output().shape(), shape, "{what}");
        assert_eq!(plan.output().dtype(), dtype, "{what}");
        let got = run_poisoned(ctx, &plan);
        let mut want = vec![f64::NAN; got.len()];
        let mut bound = vec![0.0; got.len()];
        for l in &lines {
            let line: Vec<f32> = l.iter().map(|&i| held[i]).collect();
            let m = line
                .iter()
                .map(|&v| f64::from(v))
                .fold(f64::NEG_INFINITY, f64::max);
            for ((&i, &v), w) in l.iter().zip(&line).zip(softmax_ref(&line, log)) {
                let w = f64::from(w as f32);
                want[i] = w;
                bound[i] = softmax_bound(v, m, w, log, n, dtype, column_sum_u(n));
            }
        }
        assert_rows(&what, &got, &want, |i| bound[i]);
    }
}

/// The shapes the column kernels are tested on, over every axis: splits
/// into segments of 16 rows ([3, 1031, 3], [2000, 3], [2, 5000, 2]), one
/// segment ([7, 13, 5]), a length-1 axis ([5, 1, 4]), later axes of length
/// 1 (the row kernel: [4, 6, 1]).
const COLUMN_SHAPES: [&[usize]; 8] = [
    &[7, 13, 5],
    &[3, 1031, 3],
    &[2, 5000, 2],
    &[2000, 3],
    &[2, 3, 4, 5],
    &[5, 1, 4],
    &[4, 6, 1],
    &[1, 37, 300],
];

/// f32, bf16 and (where the adapter has it) f16.
fn column_dtypes(ctx: &wgtile::Context) -> Vec<DType> {
    let mut dtypes = vec![DType::F32, DType::BF16];
    if f16_ok(ctx) {
        dtypes.push(DType::F16);
    }
    dtypes
}

/// Softmax and log-softmax over a middle axis by the column kernel: odd and
/// prime shapes, every axis, f32, f16 and bf16, against f64 with the
/// column tolerance (`column_sum_u`). Few columns split a long axis into
/// segments of 16 rows ([3, 1031, 3]: 65 segments, [2000, 3]: 125,
/// [2, 5000, 2]: 313, merged by the combine pass in eight lanes per
/// column); short axes are one segment ([7, 13, 5]); a length-1 axis
/// ([5, 1, 4]); later axes of length 1 make the lines contiguous: the row
/// kernel ([4, 6, 1] over axis 1). Outputs poisoned.
#[test]
fn softmax_over_a_middle_axis_by_columns() {
    let Some(ctx) = common::ctx() else { return };
    let dtypes = column_dtypes(&ctx);
    for (si, shape) in COLUMN_SHAPES.iter().enumerate() {
        // Scaled so exp sees a useful range.
        let data: Vec<f32> = common::random(shape.iter().product(), 800 + si as u64)
            .iter()
            .map(|v| v * 4.0)
            .collect();
        for &dtype in &dtypes {
            for d in 0..shape.len() {
                check_softmax_axis(&ctx, &data, shape, dtype, d);
            }
        }
    }
    // One dispatch where the columns fill the GPU, three with a split (the
    // pairs, their merge, the writes); bytes: x twice, the output, the 65
    // partial pairs per column written and read, the merged pair written
    // and read by each of the 65 segments.
    for (shape, dispatches, pair_bytes) in [
        ([1usize << 10, 4, 1 << 8], 1, 0),
        ([3, 1031, 3], 3, (3 * 65 + 1) * 9 * 8),
    ] {
        let x = ctx.zeros(shape, DType::F32).unwrap();
        let plan = ctx
            .row_op_axis_plan(RowOp::Softmax, &x, 1, None, None, 0.0)
            .unwrap();
        assert_eq!(plan.dispatch_count(), dispatches, "{}", plan.label());
        assert_eq!(
            plan.bytes(),
            3 * x.size_bytes() + pair_bytes,
            "{}",
            plan.label()
        );
    }
    // The convenience calls give their plans' results, bit for bit.
    let data = common::random(7 * 13 * 5, 3);
    let x = ctx.tensor(&data, [7, 13, 5]).unwrap();
    for (op, y) in [
        (RowOp::Softmax, ctx.softmax_axis(&x, 1).unwrap()),
        (RowOp::LogSoftmax, ctx.log_softmax_axis(&x, 1).unwrap()),
    ] {
        let plan = ctx.row_op_axis_plan(op, &x, 1, None, None, 0.0).unwrap();
        let bits = |v: Vec<f32>| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(
            bits(y.to_vec_blocking().unwrap()),
            bits(run_poisoned(&ctx, &plan)),
            "{op:?}"
        );
    }
    // Zero-sized dimensions (an empty axis among them): empty results of
    // the input's shape, as the row kernel gives, with no dispatch.
    for shape in [
        vec![3usize, 0, 2],
        vec![0, 5, 3],
        vec![3, 5, 0],
        vec![2, 0, 3, 1],
    ] {
        let x = ctx.zeros(&shape, DType::F32).unwrap();
        for d in 0..shape.len() {
            for op in [RowOp::Softmax, RowOp::LogSoftmax] {
                let plan = ctx.row_op_axis_plan(op, &x, d, None, None, 0.0).unwrap();
                assert_eq!(plan.output().shape(), shape.as_slice());
                assert_eq!(plan.dispatch_count(), 0, "{shape:?} axis {d}");
                plan.run().unwrap();
                assert!(plan.output().to_f32_vec_blocking().unwrap().is_empty());
            }
        }
    }
}

/// Columns of -inf, +inf, NaN and huge values through the column kernel
/// give the row kernel's answer on the same lines laid out as rows: the
/// same NaN, zeros and infinities, the finite values within both kernels'
/// tolerances; a split axis (1031 rows over 6 columns) too, and a
/// length-1 axis.
#[test]
fn softmax_columns_match_the_row_kernel_on_special_values() {
    let Some(ctx) = common::ctx() else { return };
    let lines = 6;
    for n in [1usize, 6, 40, 1031] {
        // Line-major: line k is rows[k * n .. (k + 1) * n].
        let rows = special_softmax_lines(n, 900 + n as u64);
        let row_x = ctx.tensor(&rows, [lines, n]).unwrap();
        // The same lines as columns of [2, n, 3] (axis 1) and [n, 6] (axis 0).
        for (shape, d) in [(vec![2usize, n, 3], 1usize), (vec![n, lines], 0)] {
            let cols: Vec<f32> = (0..lines * n)
                .map(|i| {
                    let (o, r, c) = if d == 1 {
                        (i / (3 * n), i / 3 % n, i % 3)
                    } else {
                        (0, i / lines, i % lines)
                    };
                    let k = if d == 1 { o * 3 + c } else { c };
                    rows[k * n + r]
                })
                .collect();
            let col_x = ctx.tensor(&cols, shape.as_slice()).unwrap();
            for log in [false, true] {
                let (by_rows, plan) = if log {
                    (
                        ctx.log_softmax(&row_x).unwrap(),
                        ctx.row_op_axis_plan(RowOp::LogSoftmax, &col_x, d, None, None, 0.0),
                    )
                } else {
                    (
                        ctx.softmax(&row_x).unwrap(),
                        ctx.row_op_axis_plan(RowOp::Softmax, &col_x, d, None, None, 0.0),
                    )
                };
                let plan = plan.unwrap();
                let what = format!("{} log {log}", plan.label());
                assert!(plan.label().contains("columns"), "{what}");
                let by_cols = run_poisoned(&ctx, &plan);
                let by_rows = by_rows.to_vec_blocking::<f32>().unwrap();
                for (i, &c) in by_cols.iter().enumerate() {
                    let (o, r, k) = if d == 1 {
                        (i / (3 * n), i / 3 % n, i % 3)
                    } else {
                        (0, i / lines, i % lines)
                    };
                    let line = if d == 1 { o * 3 + k } else { k };
                    let w = by_rows[line * n + r];
                    let same = if w.is_finite() && c.is_finite() {
                        // Both within their tolerances of f64 (sums in
                        // another order): relative for softmax, absolute
                        // at log-softmax's scale.
                        let tol = if log { 2e-5 } else { 1e-4 * w.abs() + 1e-38 };
                        (w - c).abs() <= tol.max(f32::EPSILON * w.abs() * 4.0)
                    } else {
                        (w.is_nan() && c.is_nan()) || w == c
                    };
                    assert!(same, "{what}: line {line} row {r}: columns {c}, rows {w}");
                }
            }
        }
    }
}

/// LayerNorm (every affine combination), RMSNorm (with and without a
/// weight) and L2 normalisation over axis `d` of `data` (`shape`, `dtype`)
/// by `row_op_axis_plan`, outputs poisoned, against f64 per line: the
/// column kernel wherever the line is strided, with the column tolerance
/// (`column_sum_u`), else the row kernel's. The convenience calls give
/// their plans' results, bit for bit.
fn check_norms_axis(
    ctx: &Context,
    data: &[f32],
    shape: &[usize],
    dtype: DType,
    d: usize,
    eps: f32,
    seed: u64,
) {
    let (x, held) = common::upload(ctx, data, shape, dtype);
    let n = shape[d];
    let inner: usize = shape[d + 1..].iter().product();
    let w_data: Vec<f32> = common::random(n, seed).iter().map(|v| 1.0 + v).collect();
    let (w, w_held) = common::upload(ctx, &w_data, &[n], dtype);
    let (b, b_held) = common::upload(ctx, &common::random(n, seed + 1), &[n], dtype);
    let zeros = vec![0.0; n];
    let ones = vec![1.0; n];
    let lines = lines_along(shape, d);
    let sum_u = if inner > 1 { column_sum_u(n) } else { 0.0 };
    let cases: [(RowOp, Option<&Tensor>, Option<&Tensor>); 7] = [
        (RowOp::LayerNorm, None, None),
        (RowOp::LayerNorm, Some(&w), Some(&b)),
        (RowOp::LayerNorm, Some(&w), None),
        (RowOp::LayerNorm, None, Some(&b)),
        (RowOp::RmsNorm, None, None),
        (RowOp::RmsNorm, Some(&w), None),
        (RowOp::L2Normalize, None, None),
    ];
    for (op, wt, bt) in cases {
        let plan = ctx.row_op_axis_plan(op, &x, d, wt, bt, eps).unwrap();
        let what = format!(
            "{} {shape:?} {dtype} eps {eps} weight {} bias {}",
            plan.label(),
            wt.is_some(),
            bt.is_some()
        );
        // The column kernel runs wherever the line's elements are strided.
        assert_eq!(plan.label().contains("columns"), inner > 1, "{what}");
        assert_eq!(plan.output().shape(), shape, "{what}");
        assert_eq!(plan.output().dtype(), dtype, "{what}");
        let got = run_poisoned(ctx, &plan);
        let mut want = vec![f64::NAN; got.len()];
        let mut bound = vec![0.0; got.len()];
        let params = (wt.is_some() || bt.is_some()).then(|| {
            (
                if wt.is_some() { &w_held[..] } else { &ones[..] },
                if bt.is_some() {
                    &b_held[..]
                } else {
                    &zeros[..]
                },
            )
        });
        for l in &lines {
            let line: Vec<f32> = l.iter().map(|&i| held[i]).collect();
            let reference = match op {
                RowOp::L2Normalize => l2_ref(&line, eps, dtype, sum_u),
                _ => norm_ref(&line, op == RowOp::RmsNorm, params, eps, dtype, sum_u),
            };
            for (&i, (y, e)) in l.iter().zip(reference) {
                (want[i], bound[i]) = (y, e);
            }
        }
        // A length-1 line with eps = 0 is 0 / 0: NaN in the reference too.
        assert_rows(&what, &got, &want, |i| bound[i]);
    }
    let bits = |v: Vec<f32>| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    for (op, wt, bt, y) in [
        (
            RowOp::LayerNorm,
            Some(&w),
            Some(&b),
            ctx.layer_norm_axis(&x, d, Some(&w), Some(&b), eps),
        ),
        (
            RowOp::RmsNorm,
            Some(&w),
            None,
            ctx.rms_norm_axis(&x, d, Some(&w), eps),
        ),
        (
            RowOp::L2Normalize,
            None,
            None,
            ctx.l2_normalize_axis(&x, d, eps),
        ),
    ] {
        let plan = ctx.row_op_axis_plan(op, &x, d, wt, bt, eps).unwrap();
        assert_eq!(
            bits(y.unwrap().to_f32_vec_blocking().unwrap()),
            bits(run_poisoned(ctx, &plan)),
            "{op:?} {shape:?} {dtype} axis {d}"
        );
    }
}

/// LayerNorm, RMSNorm and L2 normalisation over every axis of rank-3 and
/// rank-4 inputs with odd and prime sizes, f32 / f16 / bf16, against f64
/// per line (`check_norms_axis`). A NaN stays in its line; zero-sized
/// dimensions give empty results.
#[test]
fn norms_over_any_axis() {
    let Some(ctx) = common::ctx() else { return };
    let mut dtypes = vec![DType::F32, DType::BF16];
    if f16_ok(&ctx) {
        dtypes.push(DType::F16);
    }
    // [3, 1031, 2] over axis 1: lines longer than 1024 (the row kernel's
    // wide layout on the last axis, a split column kernel in the middle).
    for (si, shape) in [vec![3usize, 5, 7], vec![2, 3, 5, 7], vec![3, 1031, 2]]
        .into_iter()
        .enumerate()
    {
        let data = common::random(shape.iter().product(), 90 + si as u64);
        for &dtype in &dtypes {
            for axis in 0..shape.len() {
                let seed = 100 * si as u64 + axis as u64;
                check_norms_axis(&ctx, &data, &shape, dtype, axis, 1e-5, seed);
            }
        }
    }
    // A NaN reaches only the lines through it: axis 1 of [3, 5, 7].
    let mut data = common::random(105, 7);
    data[2 * 35 + 3 * 7 + 4] = f32::NAN;
    let x = ctx.tensor(&data, [3, 5, 7]).unwrap();
    for y in [
        ctx.layer_norm_axis(&x, 1, None, None, 1e-5).unwrap(),
        ctx.rms_norm_axis(&x, 1, None, 1e-5).unwrap(),
        ctx.l2_normalize_axis(&x, 1, 1e-12).unwrap(),
    ] {
        let y = y.to_vec_blocking::<f32>().unwrap();
        for (i, v) in y.iter().enumerate() {
            let in_line = i / 35 == 2 && i % 7 == 4;
            assert_eq!(v.is_nan(), in_line, "element {i}: {v}");
        }
    }
    // Zero-sized dimensions: empty results of the input's shape (NumPy).
    for shape in [vec![3usize, 0, 5], vec![2, 0, 3, 1]] {
        let x = ctx.zeros(&shape, DType::F32).unwrap();
        for axis in 0..shape.len() {
            let w = ctx.zeros([shape[axis]], DType::F32).unwrap();
            for y in [
                ctx.layer_norm_axis(&x, axis, Some(&w), Some(&w), 1e-5),
                ctx.rms_norm_axis(&x, axis, Some(&w), 1e-5),
                ctx.l2_normalize_axis(&x, axis, 1e-12),
            ] {
                let y = y.unwrap();
                assert_eq!(y.shape(), shape.as_slice());
                assert!(y.to_f32_vec_blocking().unwrap().is_empty());
            }
        }
    }
}

/// LayerNorm, RMSNorm and L2 normalisation over a middle axis by the
/// column kernel (`shaders/norm_cols.wgsl`): odd and prime shapes, every
/// axis, f32, f16 and bf16, with and without weight and bias, eps 1e-5 and
/// 0, against f64 with the column tolerance (`check_norms_axis`). Few
/// columns split a long axis into segments of 16 rows ([3, 1031, 3]: 65
/// segments, [2000, 3]: 125, [2, 5000, 2]: 313, merged by the combine pass
/// in eight lanes per column); short axes are one segment ([7, 13, 5]); a
/// length-1 axis ([5, 1, 4]); later axes of length 1 run the row kernel
/// ([4, 6, 1] over axis 1). Data off zero (x * 2 + 0.5) so the mean
/// matters; a mean 10^4 standard deviations off zero (Welford and Chan:
/// no cancellation). Outputs poisoned; dispatch counts, bytes, empty
/// shapes and a padded x (the permute path).
#[test]
fn norms_over_a_middle_axis_by_columns() {
    let Some(ctx) = common::ctx() else { return };
    let dtypes = column_dtypes(&ctx);
    for (si, shape) in COLUMN_SHAPES.iter().enumerate() {
        let data: Vec<f32> = common::random(shape.iter().product(), 700 + si as u64)
            .iter()
            .map(|v| v * 2.0 + 0.5)
            .collect();
        for &dtype in &dtypes {
            for d in 0..shape.len() {
                let seed = 10 * si as u64 + d as u64;
                check_norms_axis(&ctx, &data, shape, dtype, d, 1e-5, seed);
                if dtype == DType::F32 {
                    check_norms_axis(&ctx, &data, shape, dtype, d, 0.0, seed);
                }
            }
        }
    }
    for shape in [[7usize, 13, 5], [3, 1031, 3]] {
        let data: Vec<f32> = common::random(shape.iter().product(), 17)
            .iter()
            .map(|v| 100.0 + 0.01 * v)
            .collect();
        check_norms_axis(&ctx, &data, &shape, DType::F32, 1, 1e-12, 5);
    }
    // One dispatch where the columns fill the GPU, three with a split (the
    // statistics, their merge, the writes); bytes: x twice, the weight and
    // bias, the output, the 65 partial (mean, M2) pairs per column written
    // and read, the merged pair written and read by each of the 65
    // segments. bf16: x, weight and bias staged (three casts), the result
    // rounded (one).
    for (shape, dtype, dispatches, pair_bytes) in [
        ([1usize << 10, 4, 1 << 8], DType::F32, 1, 0),
        ([3, 1031, 3], DType::F32, 3, (3 * 65 + 1) * 9 * 8),
        ([3, 1031, 3], DType::BF16, 3, (3 * 65 + 1) * 9 * 8),
    ] {
        let x = ctx.zeros(shape, dtype).unwrap();
        let n = shape[1];
        let p = ctx.zeros([n], dtype).unwrap();
        let cases = [
            (RowOp::LayerNorm, Some(&p), Some(&p), 2),
            (RowOp::RmsNorm, Some(&p), None, 1),
            (RowOp::L2Normalize, None, None, 0),
        ];
        for (op, wt, bt, params) in cases {
            let plan = ctx.row_op_axis_plan(op, &x, 1, wt, bt, 1e-5).unwrap();
            // bf16: x and each parameter staged, the result rounded.
            let casts = if dtype == DType::BF16 { params + 2 } else { 0 };
            assert_eq!(
                plan.dispatch_count(),
                dispatches + casts,
                "{}",
                plan.label()
            );
            assert_eq!(
                plan.bytes(),
                3 * x.size_bytes() + params as u64 * p.size_bytes() + pair_bytes,
                "{}",
                plan.label()
            );
        }
    }
    // Zero-sized dimensions (an empty axis among them): empty results of
    // the input's shape, as the row kernel gives, with no dispatch.
    for shape in [
        vec![3usize, 0, 2],
        vec![0, 5, 3],
        vec![3, 5, 0],
        vec![2, 0, 3, 1],
    ] {
        let x = ctx.zeros(&shape, DType::F32).unwrap();
        for d in 0..shape.len() {
            let w = ctx.zeros([shape[d]], DType::F32).unwrap();
            for (op, wt, bt) in [
                (RowOp::LayerNorm, Some(&w), Some(&w)),
                (RowOp::RmsNorm, Some(&w), None),
                (RowOp::L2Normalize, None, None),
            ] {
                let plan = ctx.row_op_axis_plan(op, &x, d, wt, bt, 1e-5).unwrap();
                assert_eq!(plan.output().shape(), shape.as_slice());
                assert_eq!(plan.dispatch_count(), 0, "{op:?} {shape:?} axis {d}");
                plan.run().unwrap();
                assert!(plan.output().to_f32_vec_blocking().unwrap().is_empty());
            }
        }
    }
    // A padded x keeps the permute path, with the same results.
    let data = common::random(7 * 13 * 5, 23);
    let padded = ctx.tensor_padded(&data, [7, 13, 5], 4).unwrap();
    let x = ctx.tensor(&data, [7, 13, 5]).unwrap();
    for op in [RowOp::LayerNorm, RowOp::RmsNorm, RowOp::L2Normalize] {
        let plan = ctx
            .row_op_axis_plan(op, &padded, 1, None, None, 1e-5)
            .unwrap();
        assert!(plan.label().contains("moved last"), "{}", plan.label());
        let by_permute = run_poisoned(&ctx, &plan);
        let plan = ctx.row_op_axis_plan(op, &x, 1, None, None, 1e-5).unwrap();
        let by_cols = run_poisoned(&ctx, &plan);
        for (i, (a, b)) in by_permute.iter().zip(&by_cols).enumerate() {
            assert!(
                (a - b).abs() <= 1e-5 * (a.abs() + 1.0),
                "{op:?} {i}: {a} vs {b}"
            );
        }
    }
}

/// Lines of NaN, +-inf, constants, zeros, overflowing and large values
/// through the column norms give the row kernels' answer (`ctx.layer_norm`,
/// `ctx.rms_norm`, `ctx.l2_normalize`) on the same lines laid out as rows:
/// the same NaN and infinities, the finite values within both kernels'
/// tolerances; eps 1e-5 and 0; a split axis (1031 rows over 12 columns), a
/// length-1 axis. One difference, by design: a constant line whose f32 mean
/// the row kernel rounds off the constant (0.1 here) has a variance of
/// exactly 0 in the column kernel (its running mean stays the constant), so
/// with eps = 0 the column gives NaN (0 / 0) where the row kernel gives
/// whatever its rounded deviations make of it.
#[test]
fn norm_columns_match_the_row_kernel_on_special_values() {
    let Some(ctx) = common::ctx() else { return };
    let lines = 12;
    const INEXACT: usize = 5;
    for n in [1usize, 6, 40, 1031] {
        // Line-major: line k is rows[k * n .. (k + 1) * n].
        let mut rows = common::random(lines * n, 950 + n as u64);
        let at = |k: usize, j: usize| k * n + j.min(n - 1);
        // Line 0: one NaN; 1: one +inf; 2: one -inf (and a +inf when the
        // line has room: inf - inf).
        rows[at(0, n / 2)] = f32::NAN;
        rows[at(1, 1)] = f32::INFINITY;
        rows[at(2, 0)] = f32::NEG_INFINITY;
        if n > 2 {
            rows[at(2, 2)] = f32::INFINITY;
        }
        // Line 3: a constant with an exact f32 mean; 4: zeros; 5: a
        // constant whose mean rounds.
        rows[3 * n..4 * n].fill(2.0);
        rows[4 * n..5 * n].fill(0.0);
        rows[INEXACT * n..(INEXACT + 1) * n].fill(0.1);
        // Line 6: deviations of 1e20, whose squares overflow f32 (the
        // documented range: the line normalises to 0); 7: values of 1e17
        // (squares of 1e34: in range).
        for j in 0..n {
            rows[6 * n + j] = if j % 2 == 0 { 1e20 } else { -1e20 };
            rows[7 * n + j] *= 1e17;
        }
        // Line 8: one outlier of 1e6 among values of 1; 9: values near
        // 30 (a mean off zero); 10, 11: plain random neighbours.
        rows[at(8, 3)] = 1e6;
        for v in &mut rows[9 * n..10 * n] {
            *v += 30.0;
        }
        let row_x = ctx.tensor(&rows, [lines, n]).unwrap();
        let w_data: Vec<f32> = common::random(n, 3).iter().map(|v| 1.0 + v).collect();
        let w = ctx.tensor(&w_data, [n]).unwrap();
        let b = ctx.tensor(&common::random(n, 4), [n]).unwrap();
        // The same lines as columns of [2, n, 6] (axis 1) and [n, 12] (axis 0).
        for (shape, d) in [(vec![2usize, n, 6], 1usize), (vec![n, lines], 0)] {
            let inner = 6;
            let line_of = |i: usize| -> (usize, usize) {
                if d == 1 {
                    let (o, r, c) = (i / (inner * n), i / inner % n, i % inner);
                    (o * inner + c, r)
                } else {
                    (i % lines, i / lines)
                }
            };
            let cols: Vec<f32> = (0..lines * n)
                .map(|i| {
                    let (k, r) = line_of(i);
                    rows[k * n + r]
                })
                .collect();
            let col_x = ctx.tensor(&cols, shape.as_slice()).unwrap();
            for eps in [1e-5f32, 0.0] {
                let cases = [
                    (RowOp::LayerNorm, None, None),
                    (RowOp::LayerNorm, Some(&w), Some(&b)),
                    (RowOp::RmsNorm, None, None),
                    (RowOp::RmsNorm, Some(&w), None),
                    (RowOp::L2Normalize, None, None),
                ];
                for (op, wt, bt) in cases {
                    let by_rows = match op {
                        RowOp::LayerNorm => ctx.layer_norm(&row_x, wt, bt, eps),
                        RowOp::RmsNorm => ctx.rms_norm(&row_x, wt, eps),
                        _ => ctx.l2_normalize(&row_x, eps),
                    }
                    .unwrap()
                    .to_vec_blocking::<f32>()
                    .unwrap();
                    let plan = ctx.row_op_axis_plan(op, &col_x, d, wt, bt, eps).unwrap();
                    let what = format!("{} eps {eps} affine {}", plan.label(), wt.is_some());
                    assert!(plan.label().contains("columns"), "{what}");
                    let by_cols = run_poisoned(&ctx, &plan);
                    for (i, &c) in by_cols.iter().enumerate() {
                        let (line, r) = line_of(i);
                        let w = by_rows[line * n + r];
                        if op == RowOp::LayerNorm && line == INEXACT && eps == 0.0 {
                            assert!(c.is_nan(), "{what}: line {line} row {r}: {c} (rows {w})");
                            continue;
                        }
                        let same = if w.is_finite() && c.is_finite() {
                            // Both within their tolerances of f64 (sums in
                            // another order).
                            (w - c).abs() <= 2e-4 * (w.abs() + 1.0)
                        } else {
                            (w.is_nan() && c.is_nan()) || w == c
                        };
                        assert!(same, "{what}: line {line} row {r}: columns {c}, rows {w}");
                    }
                }
            }
        }
    }
}

/// The masked mean over tokens against f64, a batch with no kept token
/// (NaN), weights other than 0 and 1, and the argument errors.
#[test]
fn masked_mean_pools_kept_tokens() {
    let Some(ctx) = common::ctx() else { return };
    let (b, s, h) = (3, 11, 5);
    let xv = common::random(b * s * h, 51);
    let mut mv = vec![0.0f32; b * s];
    mv[..7].fill(1.0); // batch 0: the first 7 tokens
    for t in 0..s {
        mv[s + t] = 0.25 * (t % 3) as f32; // batch 1: weights
    }
    // batch 2: nothing kept.
    let x = ctx.tensor(&xv, [b, s, h]).unwrap();
    let mask = ctx.tensor(&mv, [b, s]).unwrap();
    let got = ctx.masked_mean(&x, &mask).unwrap();
    assert_eq!(got.shape(), [b, h]);
    let got = got.to_vec_blocking::<f32>().unwrap();
    for bi in 0..b {
        let count: f64 = (0..s).map(|t| f64::from(mv[bi * s + t])).sum();
        for j in 0..h {
            let num: f64 = (0..s)
                .map(|t| f64::from(mv[bi * s + t]) * f64::from(xv[(bi * s + t) * h + j]))
                .sum();
            let g = f64::from(got[bi * h + j]);
            if count == 0.0 {
                assert!(g.is_nan(), "batch {bi}: {g}");
            } else {
                let want = num / count;
                assert!(
                    (g - want).abs() <= 1e-5 * (1.0 + want.abs()),
                    "batch {bi} col {j}: {g} vs {want}"
                );
            }
        }
    }
    assert!(
        ctx.masked_mean(&x, &ctx.zeros([b, s + 1], DType::F32).unwrap())
            .is_err()
    );
    assert!(ctx.masked_mean(&mask, &mask).is_err());
    if f16_ok(&ctx) {
        let m16 = ctx.zeros([b, s], DType::F16).unwrap();
        assert!(matches!(
            ctx.masked_mean(&x, &m16),
            Err(wgtile::Error::DTypeMismatch { .. })
        ));
    }
}

/// layer_norm_with_stats: y is layer_norm's, the mean and rstd of each row
/// in f32 against f64 (f32 and f16 inputs, a long streaming row too).
#[test]
fn layer_norm_returns_its_statistics() {
    let Some(ctx) = common::ctx() else { return };
    let mut dtypes = vec![DType::F32];
    if f16_ok(&ctx) {
        dtypes.push(DType::F16);
    }
    for shape in [vec![4usize, 33], vec![2, 3, 7], vec![1, 33001]] {
        let data: Vec<f32> = common::random(shape.iter().product(), 61)
            .iter()
            .map(|v| 3.0 + 2.0 * v)
            .collect();
        for &dtype in &dtypes {
            let (x, held) = common::upload(&ctx, &data, &shape, dtype);
            let (y, mean, rstd) = ctx.layer_norm_with_stats(&x, None, None, 1e-5).unwrap();
            let plain = ctx.layer_norm(&x, None, None, 1e-5).unwrap();
            assert_eq!(
                y.to_f32_vec_blocking().unwrap(),
                plain.to_f32_vec_blocking().unwrap()
            );
            let rows_shape = &shape[..shape.len() - 1];
            assert_eq!(mean.shape(), rows_shape);
            assert_eq!((mean.dtype(), rstd.dtype()), (DType::F32, DType::F32));
            let (mean, rstd) = (
                mean.to_vec_blocking::<f32>().unwrap(),
                rstd.to_vec_blocking::<f32>().unwrap(),
            );
            let n = *shape.last().unwrap();
            for r in 0..mean.len() {
                let row: Vec<f64> = held[r * n..(r + 1) * n]
                    .iter()
                    .map(|&v| f64::from(v))
                    .collect();
                let m = row.iter().sum::<f64>() / n as f64;
                let var = row.iter().map(|v| (v - m).powi(2)).sum::<f64>() / n as f64;
                let want = 1.0 / (var + 1e-5).sqrt();
                let tol = (16.0 + 4.0 * log2(n)) * U;
                assert!(
                    (f64::from(mean[r]) - m).abs() <= tol * (m.abs() + 1.0),
                    "{shape:?} {dtype} mean {} vs {m}",
                    mean[r]
                );
                assert!(
                    (f64::from(rstd[r]) - want).abs() <= 4.0 * tol * want,
                    "{shape:?} {dtype} rstd {} vs {want}",
                    rstd[r]
                );
            }
        }
    }
}
