//! Fused matmul epilogues against an f64 reference: scale, bias, activations
//! and residual on every kernel, odd and batched shapes, K = 0, bad input.

use crate::common;

use wgtile::{Activation, DType, Epilogue, Error, MatmulKernel, MatmulOptions, MatmulShape};

fn act(a: Activation, v: f64) -> f64 {
    match a {
        Activation::None => v,
        Activation::Relu => v.max(0.0),
        // The exact form: 0.5 v (1 + erf(v / sqrt 2)) = 0.5 v erfc(-v / sqrt 2).
        Activation::Gelu => 0.5 * v * common::erfc64(-v / std::f64::consts::SQRT_2),
        Activation::GeluTanh => {
            let u = (2.0 / std::f64::consts::PI).sqrt() * (v + 0.044715 * v * v * v);
            0.5 * v * (1.0 + u.tanh())
        }
        Activation::Silu => v / (1.0 + (-v).exp()),
        _ => unreachable!(),
    }
}

#[allow(clippy::too_many_arguments)]
fn check(
    ctx: &wgtile::Context,
    a_shape: &[usize],
    b_shape: &[usize],
    dtype: DType,
    kernel: Option<MatmulKernel>,
    alpha: f32,
    bias: bool,
    residual: bool,
    activation: Activation,
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
    let mut epi = Epilogue::new().scale(alpha).activation(activation);
    if bias {
        epi = epi.bias(&tb);
    }
    if residual {
        epi = epi.residual(&tr);
    }
    let out = ctx.full(&shape.out_shape, f32::NAN, dtype).unwrap();
    let options = MatmulOptions {
        kernel,
        ..Default::default()
    };
    let plan = ctx
        .matmul_plan_with(&a, &b, Some(&out), &options, &epi)
        .unwrap();
    plan.run().unwrap();
    let got = out.to_f32_vec_blocking().unwrap();

    let offsets = common::batch_offsets(&shape);
    let (prod, mag) = common::matmul_ref(&ha, &hb, m, n, k, &offsets);
    let want: Vec<f64> = prod
        .iter()
        .enumerate()
        .map(|(i, &p)| {
            let col = i % n;
            let mut v = f64::from(alpha) * p;
            if bias {
                v += f64::from(hbias[col]);
            }
            v = act(activation, v);
            if residual {
                v += f64::from(hres[i]);
            }
            v
        })
        .collect();
    let what = format!(
        "{a_shape:?} x {b_shape:?} {dtype} alpha {alpha} bias {bias} residual {residual} {activation:?} [{}]",
        plan.label()
    );
    common::assert_close(&what, &got, &want, |i| {
        // The product's bound scaled by alpha (activations have slope <= 1.13),
        // plus a few f32 ulps for the activation's own rounding.
        let product = common::matmul_tolerance(DType::F32, k, prod[i], mag[i]);
        let f32_ops = 8.0 * 2f64.powi(-24) * (want[i].abs() + 1.0);
        let f16_out = if dtype == DType::F16 {
            2f64.powi(-11) * want[i].abs() + 6e-8
        } else {
            0.0
        };
        1.2 * f64::from(alpha.abs()) * product + f32_ops + f16_out
    });
}

#[test]
fn every_term_on_every_kernel() {
    let Some(ctx) = common::ctx() else { return };
    let shapes: [(&[usize], &[usize]); 6] = [
        (&[37, 61], &[61, 53]),
        (&[65, 40], &[40, 136]),
        (&[2, 33, 24], &[24, 72]),
        (&[1, 300], &[300, 129]),
        (&[129, 70], &[70, 1]),
        (&[3, 1, 40], &[3, 40, 64]),
    ];
    let terms = [
        (0.5, false, false, Activation::None),
        (1.0, true, false, Activation::Relu),
        (1.0, true, true, Activation::Gelu),
        (-2.0, false, true, Activation::Silu),
        (1.0, false, false, Activation::GeluTanh),
    ];
    let dtypes: &[DType] = if ctx.profile().shader_f16 {
        &[DType::F32, DType::F16]
    } else {
        &[DType::F32]
    };
    // The epilogue function is one generated text for every kernel and
    // dtype (it works on the f32 accumulator); what differs per kernel and
    // dtype is how it is called and stored. So each kernel runs every term
    // once across the two dtypes (f32: scale only, bias + residual + gelu,
    // residual + silu with alpha -2; f16: bias + relu, gelu alone): each
    // (kernel, term, dtype) is a pipeline llvmpipe compiles for a second or
    // two, and all ten per kernel made this the slowest test file in CI.
    let in_dtype = |j: usize, dtype: DType| match dtype {
        DType::F32 => matches!(j, 0 | 2 | 3) || dtypes.len() == 1,
        DType::F16 => matches!(j, 1 | 4),
        // bf16 stages through the f32 or f16 kernels: tests/matmul/bf16.rs.
        DType::BF16 => false,
        _ => false,
    };
    for kernel in common::epilogue_kernels(&ctx) {
        for (i, (a, b)) in shapes.iter().enumerate() {
            for (j, &(alpha, bias, residual, activation)) in terms.iter().enumerate() {
                for &dtype in dtypes.iter().filter(|&&d| in_dtype(j, d)) {
                    let seed = (100 * i + 10 * j) as u64;
                    check(
                        &ctx, a, b, dtype, kernel, alpha, bias, residual, activation, seed,
                    );
                }
            }
        }
    }
}

#[test]
fn cpu_register_tile_runs_the_epilogue() {
    // The 16x16-per-invocation core is generated from the 8x8 one with the
    // same epilogue calls; one shape with every term, both load paths (its
    // pipelines take llvmpipe seconds each to compile: not the full sweep).
    let Some(ctx) = common::ctx() else { return };
    for vec4 in [false, true] {
        let kernel = MatmulKernel::Tiled {
            tile: wgtile::tune::CPU_TILE_CONFIGS[0],
            vec4,
        };
        check(
            &ctx,
            &[2, 131, 36],
            &[36, 136],
            DType::F32,
            Some(kernel),
            -0.5,
            true,
            true,
            Activation::Gelu,
            7,
        );
    }
}

#[test]
fn k_zero_runs_the_epilogue_on_zeros() {
    let Some(ctx) = common::ctx() else { return };
    check(
        &ctx,
        &[4, 0],
        &[0, 3],
        DType::F32,
        None,
        1.0,
        true,
        true,
        Activation::Relu,
        1,
    );
}

#[test]
fn epilogue_shapes_and_dtypes_are_checked() {
    let Some(ctx) = common::ctx() else { return };
    let a = ctx.zeros([3, 4], DType::F32).unwrap();
    let b = ctx.zeros([4, 5], DType::F32).unwrap();
    let wrong_bias = ctx.zeros([4], DType::F32).unwrap();
    assert!(matches!(
        ctx.matmul_with(&a, &b, &Epilogue::new().bias(&wrong_bias)),
        Err(Error::ShapeMismatch { .. })
    ));
    let wrong_residual = ctx.zeros([5, 3], DType::F32).unwrap();
    assert!(matches!(
        ctx.matmul_with(&a, &b, &Epilogue::new().residual(&wrong_residual)),
        Err(Error::ShapeMismatch { .. })
    ));
    let f16_bias = ctx.zeros([5], DType::F16).unwrap();
    assert!(matches!(
        ctx.matmul_with(&a, &b, &Epilogue::new().bias(&f16_bias)),
        Err(Error::DTypeMismatch { .. })
    ));
}
