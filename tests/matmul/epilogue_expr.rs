//! Matmul epilogues generated from elementwise expressions of the accumulator
//! (`Epilogue::expr`) against an f64 reference, on every matmul kernel.
//!
//! Tolerance: the matmul's own bound (2 k u sum|a b|, tests/common) times
//! the expression's largest slope in the accumulator, plus 16 f32 ulps of
//! the result (and 2e-7 relative for the erfc fit), plus one f16 rounding
//! for f16 outputs.

use crate::common;

use wgtile::{DType, Epilogue, Error, Expr, MatmulKernel, MatmulOptions, MatmulShape};

fn gelu_erf(v: f64) -> f64 {
    0.5 * v * common::erfc64(-v / std::f64::consts::SQRT_2)
}

/// The expressions under test: (name, builder, f64 reference(acc, bias,
/// residual), slope bound in acc).
type Reference = fn(f64, f64, f64) -> f64;

fn cases(
    bias: &wgtile::Tensor,
    residual: &wgtile::Tensor,
) -> Vec<(&'static str, Expr, Reference, f64)> {
    let acc = Expr::acc();
    vec![
        (
            "gelu_erf(0.5 acc + bias) + residual",
            (acc.clone() * 0.5 + bias.expr()).gelu_erf() + residual.expr(),
            |a, b, r| gelu_erf(0.5 * a + b) + r,
            0.5 * 1.13,
        ),
        (
            "2 tanh(leaky_relu(acc)) - bias",
            2.0 * Expr::where_(acc.clone().gt(0.0), &acc, acc.clone() * 0.1).tanh() - bias.expr(),
            |a, b, _| 2.0 * (if a > 0.0 { a } else { 0.1 * a }).tanh() - b,
            2.0,
        ),
        (
            "sigmoid(acc)",
            acc.clone().sigmoid(),
            |a, _, _| 1.0 / (1.0 + (-a).exp()),
            0.25,
        ),
    ]
}

fn check(
    ctx: &wgtile::Context,
    a_shape: &[usize],
    b_shape: &[usize],
    dtype: DType,
    kernel: Option<MatmulKernel>,
    seed: u64,
) {
    let shape = MatmulShape::new(a_shape, b_shape).unwrap();
    if kernel
        .is_some_and(|k| !k.accepts(dtype, shape.m, shape.n, shape.k) || !k.fits(ctx.profile()))
    {
        return;
    }
    let (m, n, k) = (shape.m, shape.n, shape.k);
    let a_len: usize = a_shape.iter().product();
    let b_len: usize = b_shape.iter().product();
    let out_len: usize = shape.out_shape.iter().product();
    let (a, ha) = common::upload(ctx, &common::random(a_len, seed), a_shape, dtype);
    let (b, hb) = common::upload(ctx, &common::random(b_len, seed + 1), b_shape, dtype);
    let (tb, hbias) = common::upload(ctx, &common::random(n, seed + 2), &[n], dtype);
    let (tr, hres) = common::upload(
        ctx,
        &common::random(out_len, seed + 3),
        &shape.out_shape,
        dtype,
    );
    let offsets = common::batch_offsets(&shape);
    let (prod, mag) = common::matmul_ref(&ha, &hb, m, n, k, &offsets);
    for (name, expr, reference, slope) in cases(&tb, &tr) {
        let epi = Epilogue::new().expr(&expr);
        let out = ctx.full(&shape.out_shape, f32::NAN, dtype).unwrap();
        let options = MatmulOptions {
            kernel,
            ..Default::default()
        };
        let plan = ctx
            .matmul_plan_with(&a, &b, Some(&out), &options, &epi)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        plan.run().unwrap();
        let got = out.to_f32_vec_blocking().unwrap();
        let want: Vec<f64> = prod
            .iter()
            .enumerate()
            .map(|(i, &p)| reference(p, f64::from(hbias[i % n]), f64::from(hres[i])))
            .collect();
        let what = format!(
            "{name}: {a_shape:?} x {b_shape:?} {dtype} [{}]",
            plan.label()
        );
        common::assert_close(&what, &got, &want, |i| {
            let product = common::matmul_tolerance(DType::F32, k, prod[i], mag[i]);
            let f32_ops = 16.0 * 2f64.powi(-24) * (want[i].abs() + 1.0) + 2e-7 * want[i].abs();
            let f16_out = if dtype == DType::F16 {
                2f64.powi(-11) * want[i].abs() + 6e-8
            } else {
                0.0
            };
            slope * 1.01 * product + f32_ops + f16_out
        });
    }
}

#[test]
fn expression_epilogues_on_every_kernel() {
    let Some(ctx) = common::ctx() else { return };
    let shapes: [(&[usize], &[usize]); 4] = [
        (&[37, 61], &[61, 53]),
        (&[2, 33, 24], &[24, 72]),
        (&[1, 300], &[300, 129]),
        (&[129, 70], &[70, 1]),
    ];
    let dtypes: &[DType] = if ctx.profile().shader_f16 {
        &[DType::F32, DType::F16]
    } else {
        &[DType::F32]
    };
    // Each kernel and dtype on one shape, rotating, so every shape meets
    // several kernels while the test stays fast on a software adapter.
    for (ki, kernel) in common::epilogue_kernels(&ctx).into_iter().enumerate() {
        for (di, &dtype) in dtypes.iter().enumerate() {
            let i = (ki + 2 * di) % shapes.len();
            let (a, b) = shapes[i];
            check(&ctx, a, b, dtype, kernel, 10 * i as u64);
        }
    }
}

#[test]
fn expression_epilogue_errors() {
    let Some(ctx) = common::ctx() else { return };
    let a = ctx.zeros([3, 4], DType::F32).unwrap();
    let b = ctx.zeros([4, 5], DType::F32).unwrap();
    let wrong_bias = ctx.zeros([4], DType::F32).unwrap();
    assert!(matches!(
        ctx.matmul_with(
            &a,
            &b,
            &Epilogue::new().expr(&(Expr::acc() + wrong_bias.expr()))
        ),
        Err(Error::ShapeMismatch { .. })
    ));
    let bias = ctx.zeros([5], DType::F32).unwrap();
    let other = ctx.zeros([5], DType::F32).unwrap();
    assert!(matches!(
        ctx.matmul_with(
            &a,
            &b,
            &Epilogue::new().expr(&(Expr::acc() + bias.expr() * other.expr()))
        ),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        ctx.matmul_with(&a, &b, &Epilogue::new().expr(&(Expr::acc() + f32::NAN))),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        ctx.eval(&(Expr::acc() + bias.expr())),
        Err(Error::InvalidArgument(_))
    ));
}

/// Epilogues that differ only in their scalars share one pipeline (the
/// scalars are data) and each gives its own result; past the data slots
/// the scalars are baked into the text and still exact.
#[test]
fn epilogue_scalars_are_data() {
    let Some(ctx) = common::ctx() else { return };
    let (m, k, n) = (7, 9, 5);
    let a_host = common::random(m * k, 11);
    let b_host = common::random(k * n, 12);
    let a = ctx.tensor(&a_host, [m, k]).unwrap();
    let b = ctx.tensor(&b_host, [k, n]).unwrap();
    let kernel = MatmulOptions::with_kernel(MatmulKernel::Naive { wg_x: 8, wg_y: 8 });
    let product: Vec<f64> = (0..m * n)
        .map(|i| {
            let (r, c) = (i / n, i % n);
            (0..k)
                .map(|j| f64::from(a_host[r * k + j]) * f64::from(b_host[j * n + c]))
                .sum()
        })
        .collect();
    let run = |e: &Expr| {
        let plan = ctx
            .matmul_plan_with(&a, &b, None, &kernel, &Epilogue::new().expr(e))
            .unwrap();
        plan.run().unwrap();
        plan.output().to_vec_blocking::<f32>().unwrap()
    };
    let before = ctx.pipeline_count();
    for (i, s) in [2.0f32, 3.5, -0.25, 1e-3].into_iter().enumerate() {
        let got = run(&(Expr::acc() * s + (s - 1.0)));
        for (j, (&g, &p)) in got.iter().zip(&product).enumerate() {
            let want = p * f64::from(s) + f64::from(s - 1.0);
            assert!(
                (f64::from(g) - want).abs() <= 1e-5 * (1.0 + want.abs()),
                "scalar {s} element {j}: {g} vs {want}"
            );
        }
        assert_eq!(
            ctx.pipeline_count(),
            before + 1,
            "scalar {s} (call {i}) compiled a new pipeline"
        );
    }
    // Ten scalars: eight are data, two baked in.
    let mut e = Expr::acc();
    for s in 1..=10 {
        e = e + s as f32 * 0.5;
    }
    let got = run(&e);
    for (j, (&g, &p)) in got.iter().zip(&product).enumerate() {
        let want = p + 27.5;
        assert!(
            (f64::from(g) - want).abs() <= 1e-5 * (1.0 + want.abs()),
            "element {j}: {g} vs {want}"
        );
    }
}
