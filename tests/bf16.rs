//! bf16 as a storage dtype: casts between f32, f16 and bf16 bit for bit
//! against the `half` crate (every 16-bit pattern, random f32 with exact
//! ties, subnormals, NaN, infinities, padded sources); elementwise
//! expressions reading and writing bf16 (vec4 and scalar paths, broadcast,
//! in place); and the ops that stage bf16 through their f32 or f16 kernels
//! (matmul on both of its paths, row ops, attention, quantisation) against
//! f64 references.

mod common;

use wgtile::{Context, DType, Tensor, bf16, f16};

/// The 16-bit patterns of `t`'s first `n` elements (f16 or bf16).
fn bits16(t: &Tensor) -> Vec<u16> {
    match t.dtype() {
        DType::F16 => t
            .to_vec_blocking::<f16>()
            .unwrap()
            .iter()
            .map(|v| v.to_bits())
            .collect(),
        DType::BF16 => t
            .to_vec_blocking::<bf16>()
            .unwrap()
            .iter()
            .map(|v| v.to_bits())
            .collect(),
        other => panic!("not a 16-bit tensor: {other}"),
    }
}

/// f32 values with the cases rounding must get right: random magnitudes
/// over every binade, exact ties of the f16 and bf16 grids (and one ulp
/// either side), subnormal f32 and f16-subnormal ranges, values at and past
/// each type's largest finite value, signed zeros, NaN and infinities.
fn edge_f32(n: usize, seed: u64) -> Vec<f32> {
    let r = common::random(2 * n, seed);
    (0..n)
        .map(|i| {
            let u = r[2 * i];
            let bits = (r[2 * i + 1].to_bits()).wrapping_mul(2_654_435_761);
            match i % 12 {
                0 => f32::from_bits(bits),
                // bf16 ties: the low 16 bits exactly 0x8000, and one ulp off.
                1 => f32::from_bits((bits & 0xffff_0000) | 0x8000),
                2 => f32::from_bits(((bits & 0xffff_0000) | 0x8000) + (i as u32 % 3) - 1),
                // f16 ties: 13 low bits 0x1000 in the normal f16 range.
                3 => f32::from_bits(0x3880_0000 + (bits % 0x0ef0_0000) / 0x2000 * 0x2000 + 0x1000),
                4 => f32::from_bits(0x3300_0000 + bits % 0x0580_0000),
                5 => f32::from_bits(bits % 0x0080_0000),
                6 => [65504.0, 65519.99, 65520.0, 3.389_531_4e38, f32::MAX][i % 5] * u.signum(),
                7 => [0.0, -0.0, f32::INFINITY, f32::NEG_INFINITY][i % 4],
                8 => f32::from_bits(0x7f80_0001 + bits % 0x007f_ffff),
                _ => u * 2f32.powi((r[2 * i + 1] * 40.0) as i32),
            }
        })
        .collect()
}

fn same_f32(got: f32, want: f32) -> bool {
    got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan())
}

#[test]
fn casts_match_the_half_crate_bit_for_bit() {
    let Some(ctx) = common::ctx() else { return };
    // Every bf16 and f16 pattern, as data of that dtype.
    let all: Vec<u16> = (0..=u16::MAX).collect();
    let as_bf16: Vec<bf16> = all.iter().map(|&b| bf16::from_bits(b)).collect();
    let as_f16: Vec<f16> = all.iter().map(|&b| f16::from_bits(b)).collect();
    let tb = ctx.tensor(&as_bf16, [256, 256]).unwrap();
    let th = ctx.tensor(&as_f16, [65536]).unwrap();
    // Widening is exact: bf16 is the top half of an f32, NaN payloads kept
    // as they are (the `half` crate sets the quiet bit; a shift does not).
    let wide_b = ctx
        .cast(&tb, DType::F32)
        .unwrap()
        .to_vec_blocking::<f32>()
        .unwrap();
    let wide_h = ctx
        .cast(&th, DType::F32)
        .unwrap()
        .to_vec_blocking::<f32>()
        .unwrap();
    for i in 0..65536 {
        assert_eq!(
            wide_b[i].to_bits(),
            (i as u32) << 16,
            "bf16 {i:#06x} -> f32"
        );
        assert!(
            same_f32(wide_b[i], as_bf16[i].to_f32()),
            "bf16 {i:#06x} -> f32"
        );
        let want = as_f16[i].to_f32();
        assert!(
            same_f32(wide_h[i], want),
            "f16 {i:#06x} -> f32: {} vs {want}",
            wide_h[i]
        );
        if !want.is_nan() {
            assert_eq!(wide_h[i].to_bits(), want.to_bits(), "f16 {i:#06x} -> f32");
        }
    }
    // 16-bit to 16-bit: through the exact f32 value, rounded once.
    let b_to_h = bits16(&ctx.cast(&tb, DType::F16).unwrap());
    let h_to_b = bits16(&ctx.cast(&th, DType::BF16).unwrap());
    for i in 0..65536 {
        let want_h = f16::from_f32(as_bf16[i].to_f32());
        let want_b = bf16::from_f32(as_f16[i].to_f32());
        assert!(
            b_to_h[i] == want_h.to_bits()
                || (want_h.is_nan() && f16::from_bits(b_to_h[i]).is_nan()),
            "bf16 {i:#06x} -> f16: {:#06x} vs {:#06x}",
            b_to_h[i],
            want_h.to_bits()
        );
        assert!(
            h_to_b[i] == want_b.to_bits()
                || (want_b.is_nan() && bf16::from_bits(h_to_b[i]).is_nan()),
            "f16 {i:#06x} -> bf16: {:#06x} vs {:#06x}",
            h_to_b[i],
            want_b.to_bits()
        );
    }
    // bf16 to f16 converts the two values of a word together where both
    // are zero or f16 normals: every pattern again, shuffled so that each
    // class meets every other in one word.
    let mut order = all.clone();
    let mut lcg = common::Lcg(11);
    for i in (1..order.len()).rev() {
        order.swap(i, lcg.below(i + 1));
    }
    let shuffled: Vec<bf16> = order.iter().map(|&b| bf16::from_bits(b)).collect();
    let got = bits16(
        &ctx.cast(&ctx.tensor(&shuffled, [65536]).unwrap(), DType::F16)
            .unwrap(),
    );
    for (i, &b) in order.iter().enumerate() {
        let want = f16::from_f32(bf16::from_bits(b).to_f32());
        assert!(
            got[i] == want.to_bits() || (want.is_nan() && f16::from_bits(got[i]).is_nan()),
            "bf16 {b:#06x} -> f16 (shuffled, at {i}): {:#06x} vs {:#06x}",
            got[i],
            want.to_bits()
        );
    }
    // Same-dtype copies keep every pattern.
    assert_eq!(
        bits16(
            &ctx.cast_plan(&tb, DType::BF16)
                .map(|p| {
                    p.run().unwrap();
                    p.into_output()
                })
                .unwrap()
        ),
        all
    );

    // f32 to 16 bits: random values, ties, subnormals, overflow, NaN; odd
    // lengths (the last word half full).
    // 2^21 + 7 elements: over a million words, past the cast's largest grid
    // (4096 workgroups of 256), so its loop takes several strides.
    for n in [1usize, 2, 7, 4099, 100_003, (1 << 21) + 7] {
        let v = edge_f32(n, n as u64);
        let t = ctx.tensor(&v, [n]).unwrap();
        let b = bits16(&ctx.cast(&t, DType::BF16).unwrap());
        let h = bits16(&ctx.cast(&t, DType::F16).unwrap());
        for i in 0..n {
            let (wb, wh) = (bf16::from_f32(v[i]), f16::from_f32(v[i]));
            if v[i].is_nan() {
                assert!(
                    bf16::from_bits(b[i]).is_nan() && f16::from_bits(h[i]).is_nan(),
                    "NaN {i}"
                );
                // Quiet bit set, top payload bits kept.
                assert_eq!(
                    b[i],
                    wb.to_bits(),
                    "NaN payload {:#x} -> bf16",
                    v[i].to_bits()
                );
                continue;
            }
            assert_eq!(
                b[i],
                wb.to_bits(),
                "{:e} ({:#010x}) -> bf16",
                v[i],
                v[i].to_bits()
            );
            assert_eq!(
                h[i],
                wh.to_bits(),
                "{:e} ({:#010x}) -> f16",
                v[i],
                v[i].to_bits()
            );
        }
    }
}

#[test]
fn casts_read_padded_rows_and_empty_tensors() {
    let Some(ctx) = common::ctx() else { return };
    let (rows, cols) = (13usize, 37usize);
    let v = edge_f32(rows * cols, 5);
    let hb: Vec<bf16> = v.iter().map(|&x| bf16::from_f32(x)).collect();
    for multiple in [8usize, 41] {
        let t = ctx.tensor_padded(&hb, [rows, cols], multiple).unwrap();
        assert!(!t.is_contiguous());
        let wide = ctx
            .cast(&t, DType::F32)
            .unwrap()
            .to_vec_blocking::<f32>()
            .unwrap();
        let dense = ctx.contiguous(&t).unwrap();
        assert!(dense.is_contiguous() && dense.dtype() == DType::BF16);
        let dense_bits = bits16(&dense);
        for i in 0..rows * cols {
            assert_eq!(
                wide[i].to_bits(),
                hb[i].to_f32().to_bits(),
                "padded {multiple}: {i}"
            );
            assert_eq!(dense_bits[i], hb[i].to_bits(), "contiguous {multiple}: {i}");
        }
    }
    for shape in [vec![0usize], vec![3, 0, 5]] {
        let t = ctx.zeros(&shape, DType::BF16).unwrap();
        for d in DType::ALL {
            let c = ctx.cast_plan(&t, d).unwrap();
            c.run().unwrap();
            assert_eq!(c.output().shape(), shape.as_slice());
            assert_eq!(c.output().to_f32_vec_blocking().unwrap().len(), 0);
        }
    }
    // Fills and random tensors of bf16 hold what they say.
    let f = ctx.full([5], 1.0 / 3.0, DType::BF16).unwrap();
    assert_eq!(bits16(&f), vec![bf16::from_f32(1.0 / 3.0).to_bits(); 5]);
    let r = ctx.rand_uniform([9], -2.0, 2.0, DType::BF16, 3).unwrap();
    let want: Vec<f32> = wgtile::uniform_values(9, -2.0, 2.0, 3)
        .iter()
        .map(|&x| DType::BF16.round(x))
        .collect();
    assert_eq!(r.to_f32_vec_blocking().unwrap(), want);
    let t = ctx.zeros([1000], DType::BF16).unwrap();
    ctx.fill_random(&t, 7).unwrap();
    let vals = t.to_f32_vec_blocking().unwrap();
    assert!(vals.iter().all(|v| (-1.0..1.0).contains(v)) && vals.iter().any(|&v| v != vals[0]));
}

/// `f` of the widened values, rounded as the kernel's output dtype.
fn host_map(vals: &[Vec<f32>], out: DType, f: impl Fn(&[f64]) -> f64) -> Vec<f64> {
    (0..vals[0].len())
        .map(|i| {
            let args: Vec<f64> = vals.iter().map(|v| f64::from(v[i])).collect();
            f64::from(out.round(f(&args) as f32))
        })
        .collect()
}

#[test]
fn elementwise_reads_and_writes_bf16() {
    let Some(ctx) = common::ctx() else { return };
    // 4096 takes the vec4 path, 4099 (prime) and 1 the scalar one.
    for n in [4096usize, 4099, 1] {
        let (a, av) = common::upload(&ctx, &common::random(n, 1), &[n], DType::BF16);
        let (b, bv) = common::upload(&ctx, &common::random(n, 2), &[n], DType::BF16);
        let e = (a.expr() * b.expr() + 0.5).tanh();
        let plan = ctx.eval_plan(&e).unwrap();
        assert_eq!(plan.output().dtype(), DType::BF16);
        ctx.fill(plan.output(), f32::NAN).unwrap();
        plan.run().unwrap();
        let got = plan.output().to_f32_vec_blocking().unwrap();
        let want = host_map(&[av.clone(), bv.clone()], DType::F32, |x| {
            (x[0] * x[1] + 0.5).tanh()
        });
        // One bf16 rounding of a result within a few f32 ulps of the reference:
        // the rounding may go either way near a bf16 midpoint.
        common::assert_close(&format!("tanh(a b + 0.5), n = {n}"), &got, &want, |i| {
            2f64.powi(-8) * want[i].abs() + 1e-6
        });
        // Exactly representable results round-trip bit for bit.
        let sum = ctx.eval(&(a.expr() + a.expr())).unwrap();
        let twice: Vec<f32> = av.iter().map(|v| v * 2.0).collect();
        assert_eq!(sum.to_f32_vec_blocking().unwrap(), twice, "a + a, n = {n}");
        // Mixed with f32: f32 out (PyTorch's promotion); with f16: f32 out.
        let (c, cv) = common::upload(&ctx, &common::random(n, 3), &[n], DType::F32);
        let mixed = ctx.eval(&(a.expr() - c.expr())).unwrap();
        assert_eq!(mixed.dtype(), DType::F32);
        let want: Vec<f32> = av.iter().zip(&cv).map(|(x, y)| x - y).collect();
        assert_eq!(mixed.to_vec_blocking::<f32>().unwrap(), want);
        // In place: a = a * 3 (bf16 output aliasing its input).
        ctx.eval_into(&(a.expr() * 3.0), &a).unwrap();
        let tripled: Vec<f32> = av.iter().map(|v| DType::BF16.round(v * 3.0)).collect();
        assert_eq!(
            a.to_f32_vec_blocking().unwrap(),
            tripled,
            "in place, n = {n}"
        );
    }
    // Broadcast bf16 rows and a single value against an odd matrix.
    let (rows, cols) = (7usize, 33usize);
    let (m, mv) = common::upload(
        &ctx,
        &common::random(rows * cols, 4),
        &[rows, cols],
        DType::BF16,
    );
    let (r, rv) = common::upload(&ctx, &common::random(cols, 5), &[cols], DType::BF16);
    let (s, sv) = common::upload(&ctx, &[0.75], &[1], DType::BF16);
    let out = ctx.eval(&(m.expr() * r.expr() + s.expr())).unwrap();
    let want: Vec<f32> = (0..rows * cols)
        .map(|i| DType::BF16.round(mv[i] * rv[i % cols] + sv[0]))
        .collect();
    let got = out.to_f32_vec_blocking().unwrap();
    for i in 0..rows * cols {
        // f32 math may contract into an fma: one f32 rounding apart at most
        // before the bf16 rounding, so compare within a bf16 ulp.
        let tol = 2f32.powi(-7) * want[i].abs();
        assert!(
            (got[i] - want[i]).abs() <= tol,
            "broadcast {i}: {} vs {}",
            got[i],
            want[i]
        );
    }
    // Vec4 broadcast (rows a multiple of 4) with two outputs.
    let (m4, m4v) = common::upload(&ctx, &common::random(8 * 64, 6), &[8, 64], DType::BF16);
    let (r4, r4v) = common::upload(&ctx, &common::random(64, 7), &[64], DType::BF16);
    let outs = ctx
        .eval_many(&[m4.expr() + r4.expr(), (m4.expr() * 0.5).exp()])
        .unwrap();
    let got0 = outs[0].to_f32_vec_blocking().unwrap();
    let got1 = outs[1].to_f32_vec_blocking().unwrap();
    for i in 0..8 * 64 {
        assert_eq!(
            got0[i],
            DType::BF16.round(m4v[i] + r4v[i % 64]),
            "vec4 broadcast {i}"
        );
        let w = f64::from(m4v[i] * 0.5).exp();
        assert!(
            (f64::from(got1[i]) - w).abs() <= 2f64.powi(-8) * w + 1e-6,
            "exp {i}"
        );
    }
    let _ = Context::clone(&ctx);
}

/// `a @ b` of bf16 operands (values `scale` times uniform in [-1, 1)) and
/// the f64 product of the values they hold, checked to f32 accumulation
/// plus the output's rounding.
fn check_matmul(
    ctx: &Context,
    (m, n, k): (usize, usize, usize),
    scale: f32,
    out: DType,
    seed: u64,
) {
    let av: Vec<f32> = common::random(m * k, seed)
        .iter()
        .map(|v| v * scale)
        .collect();
    let bv: Vec<f32> = common::random(k * n, seed + 1)
        .iter()
        .map(|v| v * scale)
        .collect();
    check_matmul_of(ctx, (m, n, k), (&av, &bv), out, &format!("x{scale}"));
}

/// `a @ b` of bf16 operands of values `av`, `bv` against the f64 product
/// of the values they hold: f32 accumulation and the output's rounding,
/// plus where the f16 kernels run (tensor cores, and the range test keeps
/// them) f16's subnormal step 2^-24 for each value f16 cannot hold, times
/// what it meets. Returns the plan's label.
fn check_matmul_of(
    ctx: &Context,
    (m, n, k): (usize, usize, usize),
    (av, bv): (&[f32], &[f32]),
    out: DType,
    what: &str,
) -> String {
    let (a, ah) = common::upload(ctx, av, &[m, k], DType::BF16);
    let (b, bh) = common::upload(ctx, bv, &[k, n], DType::BF16);
    let options = wgtile::MatmulOptions {
        out_dtype: Some(out),
        ..Default::default()
    };
    let plan = ctx.matmul_plan(&a, &b, None, &options).unwrap();
    assert_eq!(plan.output().dtype(), out);
    ctx.fill(plan.output(), f32::NAN).unwrap();
    plan.run().unwrap();
    let got = plan.output().to_f32_vec_blocking().unwrap();
    let (want, mag) = common::matmul_ref(&ah, &bh, m, n, k, &[(0, 0)]);
    let bits = |v: &[f32]| -> Vec<u16> { v.iter().map(|&x| bf16::from_f32(x).to_bits()).collect() };
    let f16_kept = !arms(&[bits(&ah), bits(&bh)]);
    let moved = |x: f32| {
        if !f16_kept || fits_f16(bf16::from_f32(x).to_bits()) {
            0.0
        } else {
            2f64.powi(-24)
        }
    };
    let mut range = vec![0.0f64; m * n];
    for i in 0..m {
        for p in 0..k {
            let (x, dx) = (f64::from(ah[i * k + p].abs()), moved(ah[i * k + p]));
            for j in 0..n {
                let y = bh[p * n + j];
                range[i * n + j] += dx * f64::from(y.abs()) + x * moved(y);
            }
        }
    }
    common::assert_close(
        &format!("bf16 {m}x{n}x{k} {what} -> {out}: {}", plan.label()),
        &got,
        &want,
        |i| common::matmul_tolerance(out, k, want[i], mag[i]) + range[i],
    );
    plan.label().to_string()
}

/// Normal activations (N(0, 1)) and a weight of N(0, 0.02) for an `m x k`
/// by `k x n` product, from seeds `sa`, `sb`, each with a value below
/// 2^-17 planted (small shapes have them too): values f16 cannot hold,
/// which the range test lets through.
fn planted_normal((m, n, k): (usize, usize, usize), (sa, sb): (u64, u64)) -> (Vec<f32>, Vec<f32>) {
    let mut av = normal_bf16_values(m * k, 1.0, sa);
    let mut bv = normal_bf16_values(k * n, 0.02, sb);
    av[m * k / 3] = 1.01e-7;
    bv[k * n / 2] = -2.9e-7;
    (av, bv)
}

#[test]
fn matmul_of_bf16_on_both_staging_paths() {
    let Some(ctx) = common::ctx() else { return };
    for (i, &mnk) in [
        (37, 41, 53),
        (64, 64, 64),
        (1, 97, 31),
        (29, 1, 67),
        (128, 96, 160),
        // The tensor cores take these on adapters that have them (bf16 read
        // in place, the check pass arming the fallback).
        (256, 384, 320),
        (300, 260, 136),
    ]
    .iter()
    .enumerate()
    {
        for out in [DType::BF16, DType::F32] {
            // In f16's range: the f16 kernels; 1e6 (past 65504) and 1e-6
            // (products below f16's normal range) arm the f32 fallback.
            for scale in [1.0, 1e6, 1e-6] {
                check_matmul(&ctx, mnk, scale, out, 10 * i as u64);
            }
            // Normal activations times a weight of N(0, 0.02), with values
            // below 2^-17 (planted, so that small shapes have them too):
            // the range test keeps the f16 kernels.
            let (av, bv) = planted_normal(mnk, (60 + i as u64, 70 + i as u64));
            check_matmul_of(&ctx, mnk, (&av, &bv), out, "normal");
        }
    }
    // Products the tensor cores take with M N >= 2048 (M + N) stage both
    // operands to f16 by the checked cast (tune::bf16_staged): in f16's
    // range, past it (the fallback) and normal data with values below
    // 2^-17, with a bf16 result. Only where there are tensor cores (on
    // other adapters these are f32 products, too slow to check here).
    if ctx.profile().cooperative_matrix {
        let (m, n, k) = (4096, 4100, 48);
        for scale in [1.0, 1e6] {
            check_matmul(&ctx, (m, n, k), scale, DType::BF16, 90);
        }
        let (av, bv) = planted_normal((m, n, k), (91, 92));
        let label = check_matmul_of(&ctx, (m, n, k), (&av, &bv), DType::BF16, "normal, staged");
        assert!(label.contains("staged to f16"), "{label}");
    }
    // One huge value in an otherwise small operand still arms the fallback.
    let (m, n, k) = (33, 35, 37);
    let mut av = common::random(m * k, 3);
    av[m * k / 2] = 3e5;
    let (a, ah) = common::upload(&ctx, &av, &[m, k], DType::BF16);
    let (b, bh) = common::upload(&ctx, &common::random(k * n, 4), &[k, n], DType::BF16);
    let got = ctx.matmul(&a, &b).unwrap();
    assert_eq!(got.dtype(), DType::BF16);
    let (want, mag) = common::matmul_ref(&ah, &bh, m, n, k, &[(0, 0)]);
    common::assert_close(
        "one outlier",
        &got.to_f32_vec_blocking().unwrap(),
        &want,
        |i| common::matmul_tolerance(DType::BF16, k, want[i], mag[i]),
    );
}

/// A bf16 product with every epilogue term, B stored transposed `[N, K]`
/// and shared by the batches: operands of `common::random` values from
/// `seed` times `scale`, bias and residual unscaled, written into `into`
/// where given (else the plan's own output). The result, the f64 reference
/// of the values the tensors hold, each element's magnitude bound, the
/// operands and the plan's label.
fn bf16_epilogue_product(
    ctx: &Context,
    (batch, m, n, k): (usize, usize, usize, usize),
    (seed, scale): (u64, f32),
    into: Option<&Tensor>,
) -> (Vec<f32>, Vec<f64>, Vec<f64>, [Tensor; 2], String) {
    let scaled = |v: Vec<f32>| -> Vec<f32> { v.iter().map(|x| x * scale).collect() };
    let (a, ah) = common::upload(
        ctx,
        &scaled(common::random(batch * m * k, seed)),
        &[batch, m, k],
        DType::BF16,
    );
    let (bt, bth) = common::upload(
        ctx,
        &scaled(common::random(n * k, seed + 1)),
        &[n, k],
        DType::BF16,
    );
    let (bias, biash) = common::upload(ctx, &common::random(n, seed + 2), &[n], DType::BF16);
    let (res, resh) = common::upload(
        ctx,
        &common::random(batch * m * n, seed + 3),
        &[batch, m, n],
        DType::BF16,
    );
    let options = wgtile::MatmulOptions {
        transpose_b: true,
        ..Default::default()
    };
    let epilogue = wgtile::Epilogue::new()
        .scale(0.5)
        .bias(&bias)
        .relu()
        .residual(&res);
    let plan = ctx
        .matmul_plan_with(&a, &bt, into, &options, &epilogue)
        .unwrap();
    plan.run().unwrap();
    assert_eq!(plan.output().shape(), [batch, m, n]);
    let got = into.unwrap_or(plan.output()).to_f32_vec_blocking().unwrap();
    let b: Vec<f32> = (0..k * n).map(|i| bth[(i % n) * k + i / n]).collect();
    let offsets: Vec<(usize, usize)> = (0..batch).map(|z| (z * m * k, 0)).collect();
    let (prod, mag) = common::matmul_ref(&ah, &b, m, n, k, &offsets);
    let want: Vec<f64> = (0..batch * m * n)
        .map(|i| (0.5 * prod[i] + f64::from(biash[i % n])).max(0.0) + f64::from(resh[i]))
        .collect();
    let bound: Vec<f64> = mag.iter().map(|g| 0.5 * g + 2.0).collect();
    (got, want, bound, [a, bt], plan.label().to_string())
}

#[test]
fn matmul_of_bf16_with_epilogue_transposes_and_batches() {
    let Some(ctx) = common::ctx() else { return };
    let (batch, m, n, k) = (3usize, 19usize, 23usize, 29usize);
    let (got, want, bound, [a, bt], _) =
        bf16_epilogue_product(&ctx, (batch, m, n, k), (1, 1.0), None);
    common::assert_close("bf16 epilogue", &got, &want, |i| {
        common::matmul_tolerance(DType::BF16, k, want[i], bound[i])
    });
    let options = wgtile::MatmulOptions {
        transpose_b: true,
        ..Default::default()
    };
    // Mismatched dtypes are named errors.
    let f = ctx.zeros([n], DType::F32).unwrap();
    let bad = ctx.matmul_plan_with(&a, &bt, None, &options, &wgtile::Epilogue::new().bias(&f));
    assert!(
        matches!(bad, Err(wgtile::Error::DTypeMismatch { .. })),
        "{bad:?}"
    );
    let f16_out = wgtile::MatmulOptions {
        out_dtype: Some(DType::F16),
        ..options
    };
    let bad = ctx.matmul_plan(&a, &bt, None, &f16_out);
    assert!(
        matches!(bad, Err(wgtile::Error::DTypeMismatch { .. })),
        "{bad:?}"
    );
    let (a32, _) = common::upload(&ctx, &common::random(m * k, 1), &[m, k], DType::F32);
    let bad = ctx.matmul(&a32, &bt);
    assert!(
        matches!(bad, Err(wgtile::Error::DTypeMismatch { .. })),
        "{bad:?}"
    );
}

/// The bf16 result of products the tensor cores take (where the adapter
/// has them): written by the kernel itself for an even N, rounded from an
/// f32 one for an odd N, and by the armed f32 fallback's rounding, with an
/// epilogue, a transposed B, batches and an output tensor given. Elsewhere
/// the same products run on f32 copies, checked alike.
#[test]
fn matmul_of_bf16_writes_a_bf16_result_from_every_route() {
    let Some(ctx) = common::ctx() else { return };
    let (batch, m, k) = (2usize, 256usize, 320usize);
    for (i, n) in [386usize, 385].into_iter().enumerate() {
        // 1: the f16 kernels; 1e6 (past 65504) arms the f32 fallback.
        for scale in [1.0f32, 1e6] {
            let o = ctx.zeros([batch, m, n], DType::BF16).unwrap();
            ctx.fill(&o, f32::NAN).unwrap();
            let seed = 100 + 10 * i as u64;
            let (got, want, bound, _, label) =
                bf16_epilogue_product(&ctx, (batch, m, n, k), (seed, scale), Some(&o));
            // f32 accumulation and bf16's rounding, plus f16's subnormal
            // step for the few values below 2^-17 the f16 kernels move.
            let moved = k as f64 * 2f64.powi(-23) * f64::from(scale * scale);
            common::assert_close(&format!("{n} x{scale} ({label})"), &got, &want, |j| {
                common::matmul_tolerance(DType::BF16, k, want[j], bound[j]) + moved
            });
        }
    }
}

#[test]
fn row_ops_and_reductions_of_bf16() {
    let Some(ctx) = common::ctx() else { return };
    for (rows, n) in [(7usize, 129usize), (3, 1), (2, 1024)] {
        let (x, xh) = common::upload(
            &ctx,
            &common::random(rows * n, 1)
                .iter()
                .map(|v| v * 4.0)
                .collect::<Vec<_>>(),
            &[rows, n],
            DType::BF16,
        );
        let (w, wh) = common::upload(&ctx, &common::random(n, 2), &[n], DType::BF16);
        let (b, bh) = common::upload(&ctx, &common::random(n, 3), &[n], DType::BF16);
        let sm = ctx.softmax(&x).unwrap();
        let ln = ctx.layer_norm(&x, Some(&w), Some(&b), 1e-5).unwrap();
        let sum = ctx.sum(&x, wgtile::Axis::Last).unwrap();
        for t in [&sm, &ln, &sum] {
            assert_eq!(t.dtype(), DType::BF16);
        }
        let (mut want_sm, mut want_ln, mut want_sum) = (Vec::new(), Vec::new(), Vec::new());
        for row in xh.chunks(n) {
            let r: Vec<f64> = row.iter().map(|&v| f64::from(v)).collect();
            let max = r.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let z: f64 = r.iter().map(|v| (v - max).exp()).sum();
            want_sm.extend(r.iter().map(|v| (v - max).exp() / z));
            let mean = r.iter().sum::<f64>() / n as f64;
            let var = r.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n as f64;
            let inv = 1.0 / (var + 1e-5).sqrt();
            want_ln.extend(
                r.iter()
                    .enumerate()
                    .map(|(j, v)| (v - mean) * inv * f64::from(wh[j]) + f64::from(bh[j])),
            );
            want_sum.push(r.iter().sum::<f64>());
        }
        // f32 kernels (errors a few hundred f32 ulps at most here) and one
        // bf16 rounding of the result.
        fn bf(want: &[f64], scale: f64) -> impl Fn(usize) -> f64 + '_ {
            move |i| 2f64.powi(-8) * want[i].abs() + scale
        }
        common::assert_close(
            "softmax bf16",
            &sm.to_f32_vec_blocking().unwrap(),
            &want_sm,
            bf(&want_sm, 1e-6),
        );
        common::assert_close(
            "layer_norm bf16",
            &ln.to_f32_vec_blocking().unwrap(),
            &want_ln,
            bf(&want_ln, 1e-4),
        );
        common::assert_close(
            "sum bf16",
            &sum.to_f32_vec_blocking().unwrap(),
            &want_sum,
            bf(&want_sum, 4.0 * n as f64 * 2f64.powi(-22)),
        );
        // The same kernels on f32 copies, rounded once: the bf16 results bit
        // for bit (rows of a multiple of 4 are packed by the row kernel,
        // others rounded by a cast behind it).
        let wide = |t: &Tensor| ctx.cast(t, DType::F32).unwrap();
        let sm32 = ctx.softmax(&wide(&x)).unwrap();
        let ln32 = ctx
            .layer_norm(&wide(&x), Some(&wide(&w)), Some(&wide(&b)), 1e-5)
            .unwrap();
        for (what, got, f32_result) in [("softmax", &sm, &sm32), ("layer_norm", &ln, &ln32)] {
            let want: Vec<u16> = f32_result
                .to_vec_blocking::<f32>()
                .unwrap()
                .iter()
                .map(|&v| bf16::from_f32(v).to_bits())
                .collect();
            assert_eq!(
                bits16(got),
                want,
                "{what} bf16 {rows}x{n} against f32 rounded"
            );
        }
        // Parameters of another dtype are named errors.
        let w32 = ctx.zeros([n], DType::F32).unwrap();
        let bad = ctx.layer_norm(&x, Some(&w32), None, 1e-5);
        assert!(
            matches!(bad, Err(wgtile::Error::DTypeMismatch { .. })),
            "{bad:?}"
        );
    }
    // Fused row ops read bf16 words in registers: a bf16 expression gives
    // a bf16 result (computed in f32, rounded once), bf16 with f32 an f32
    // one; x * 2 and x + y of bf16 values are exact in f32. Rows of 37 (the
    // scalar path) and 40 (vector chunks).
    for n in [37usize, 40] {
        let (x, xh) = common::upload(&ctx, &common::random(5 * n, 4), &[5, n], DType::BF16);
        let (y, yh) = common::upload(&ctx, &common::random(n, 5), &[n], DType::F32);
        let plan = ctx
            .reduce_of_plan(
                &(x.expr() * 2.0),
                wgtile::Reduction::Sum,
                wgtile::Axis::Last,
            )
            .unwrap();
        ctx.fill(plan.output(), f32::NAN).unwrap();
        plan.run().unwrap();
        assert_eq!(plan.output().dtype(), DType::BF16);
        let want: Vec<f64> = xh
            .chunks(n)
            .map(|r| r.iter().map(|&v| 2.0 * f64::from(v)).sum())
            .collect();
        // f32 accumulation of n terms (|x| < 1), then one bf16 rounding.
        let acc = 2.0 * n as f64 * 2f64.powi(-24) * 2.0 * n as f64;
        common::assert_close(
            "sum_of bf16",
            &plan.output().to_f32_vec_blocking().unwrap(),
            &want,
            |i| 2f64.powi(-8) * want[i].abs() + acc,
        );
        let sm = ctx.softmax_of(&(x.expr() + &y), None).unwrap();
        assert_eq!(sm.dtype(), DType::F32);
        let mut want_sm = Vec::new();
        for row in xh.chunks(n) {
            let z: Vec<f64> = row
                .iter()
                .zip(&yh)
                .map(|(&a, &b)| f64::from(a + b))
                .collect();
            let max = z.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let s: f64 = z.iter().map(|v| (v - max).exp()).sum();
            want_sm.extend(z.iter().map(|v| (v - max).exp() / s));
        }
        common::assert_close(
            "softmax_of bf16 + f32",
            &sm.to_f32_vec_blocking().unwrap(),
            &want_sm,
            |i| 64.0 * 2f64.powi(-24) * want_sm[i] + 1e-9,
        );
    }
}

#[test]
fn attention_and_quantisation_of_bf16() {
    let Some(ctx) = common::ctx() else { return };
    let (b, h, s, d) = (1usize, 2usize, 17usize, 16usize);
    let n = b * h * s * d;
    let reference = |qh: &[f32], kh: &[f32], vh: &[f32]| {
        let scale = 1.0 / (d as f64).sqrt();
        let (mut o, mut lse) = (vec![0.0f64; n], vec![0.0f64; b * h * s]);
        for hh in 0..h {
            let base = hh * s * d;
            for i in 0..s {
                let logits: Vec<f64> = (0..s)
                    .map(|j| {
                        (0..d)
                            .map(|c| {
                                f64::from(qh[base + i * d + c]) * f64::from(kh[base + j * d + c])
                            })
                            .sum::<f64>()
                            * scale
                    })
                    .collect();
                let max = logits.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let z: f64 = logits.iter().map(|l| (l - max).exp()).sum();
                lse[hh * s + i] = max + z.ln();
                for c in 0..d {
                    o[base + i * d + c] = (0..s)
                        .map(|j| (logits[j] - max).exp() / z * f64::from(vh[base + j * d + c]))
                        .sum();
                }
            }
        }
        (o, lse)
    };
    // q and k with a few values f16 cannot hold (below 2^-17, as normal
    // data has), among values of 2^-10 or more: the range test keeps the
    // f16 kernels for them.
    let mut qv = common::random(n, 1);
    let mut kv = common::random(n, 2);
    qv[3] = 1.01e-7;
    qv[n - 2] = -3.3e-6;
    kv[5] = 2.9e-7;
    for x in [qv[3], qv[n - 2], kv[5]] {
        let b = bf16::from_f32(x);
        assert_ne!(
            f16::from_f32(b.to_f32()).to_f32(),
            b.to_f32(),
            "{x} is not an f16 value"
        );
    }
    let (q, qh) = common::upload(&ctx, &qv, &[b, h, s, d], DType::BF16);
    let (k, kh) = common::upload(&ctx, &kv, &[b, h, s, d], DType::BF16);
    // The route (f16 kernels with an armed f32 plan on tensor cores, f32
    // staging elsewhere) and the f16 staging forced on any adapter: values
    // in f16's range take the f16 kernels; 1e6 (past 65504) arms the f32
    // plan, which then writes o and the logsumexp, and so does 1e-6 (v
    // below 2^-10 everywhere; o's error bound scales with it, which f16's
    // subnormal steps of 2^-24 would break).
    // The tensor-core algorithm emulated (where there are subgroups)
    // writes o as bf16 itself, as the tensor-core kernel does.
    let emulated = wgtile::AttentionOptions {
        kernel: wgtile::AttentionKernel::FlashCoopEmulated,
        ..wgtile::AttentionOptions::new().with_lse()
    };
    for (v_scale, forced, coop) in [
        (1.0f32, false, false),
        (1e6, false, false),
        (1e-6, false, false),
        (1.0, true, false),
        (1e6, true, false),
        (1e-6, true, false),
        (1.0, true, true),
        (1e6, true, true),
    ] {
        if forced && !ctx.profile().shader_f16 || coop && !ctx.profile().subgroups {
            continue;
        }
        let vv: Vec<f32> = common::random(n, 3).iter().map(|x| x * v_scale).collect();
        let (v, vh) = common::upload(&ctx, &vv, &[b, h, s, d], DType::BF16);
        let opts = if coop {
            emulated.clone()
        } else {
            wgtile::AttentionOptions::new().with_lse()
        };
        let (plan, out) = if forced {
            ctx.attention_plan_bf16_via_f16(&q, &k, &v, &opts).unwrap()
        } else {
            ctx.attention_plan(&q, &k, &v, &opts).unwrap()
        };
        ctx.fill(&out.o, f32::NAN).unwrap();
        plan.run().unwrap();
        assert_eq!(out.o.dtype(), DType::BF16);
        let got = out.o.to_f32_vec_blocking().unwrap();
        let (want, want_lse) = reference(&qh, &kh, &vh);
        // f16 kernels: P rounded to f16 (2^-11 relative) before the PV
        // product, then o rounded to bf16.
        let f16_error = 4.0 * 2f64.powi(-11) * f64::from(v_scale);
        common::assert_close(
            &format!("attention bf16, v x {v_scale}: {}", plan.label()),
            &got,
            &want,
            |i| 2f64.powi(-8) * want[i].abs() + f16_error,
        );
        let lse = out.lse.as_ref().unwrap().to_vec_blocking::<f32>().unwrap();
        common::assert_close("attention bf16 lse", &lse, &want_lse, |i| {
            1e-3 * want_lse[i].abs() + 1e-3
        });
    }
    // A bf16 KV cache moves whole words: odd head dims are a named error
    // (tests/attention/decode.rs runs bf16 caches).
    let bad = wgtile::KvCache::new(&ctx, 1, 2, 15, 16, 8, DType::BF16);
    assert!(matches!(bad, Err(wgtile::Error::InvalidArgument(_))));

    // Quantising a bf16 tensor gives the codes of its values as f32, and
    // bf16 activations the product of their f32 values, bit for bit.
    let (rows, cols) = (64usize, 96usize);
    let (w, wh) = common::upload(
        &ctx,
        &common::random(rows * cols, 5),
        &[rows, cols],
        DType::BF16,
    );
    let (x, xh) = common::upload(&ctx, &common::random(3 * cols, 6), &[3, cols], DType::BF16);
    let w32 = ctx.tensor(&wh, [rows, cols]).unwrap();
    let x32 = ctx.tensor(&xh, [3, cols]).unwrap();
    for format in [wgtile::QuantFormat::Mxfp4, wgtile::QuantFormat::Int8] {
        for axis in [wgtile::QuantAxis::Rows, wgtile::QuantAxis::Columns] {
            let got = ctx.quantize(&w, format, axis).unwrap();
            let want =
                wgtile::quant::quantize(&wh, &[rows, cols], format, axis, format.default_block())
                    .unwrap();
            assert_eq!(got.to_host_blocking().unwrap(), want, "{format:?} {axis:?}");
        }
        let qt = ctx.quantize(&w32, format, wgtile::QuantAxis::Rows).unwrap();
        let from_bf16 = ctx
            .matmul_quantized(&x, &qt)
            .unwrap()
            .to_vec_blocking::<f32>()
            .unwrap();
        let from_f32 = ctx
            .matmul_quantized(&x32, &qt)
            .unwrap()
            .to_vec_blocking::<f32>()
            .unwrap();
        assert_eq!(from_bf16, from_f32, "{format:?} bf16 activations");
    }
}

/// Whether f16 holds bf16 pattern `b` exactly (NaN for NaN).
fn fits_f16(b: u16) -> bool {
    let v = bf16::from_bits(b).to_f32();
    let h = f16::from_f32(v).to_f32();
    h.to_bits() == v.to_bits() || (v.is_nan() && h.is_nan())
}

/// A finite bf16 pattern beyond f16's range (rounds to infinity).
fn beyond_f16(b: u16) -> bool {
    let v = bf16::from_bits(b).to_f32();
    v.is_finite() && v.abs() > 65504.0
}

/// At least 2^-10 in magnitude (infinities and NaN included).
fn large(b: u16) -> bool {
    b & 0x7fff >= 0x3a80
}

/// The range test's verdict on operands of bf16 patterns, as documented:
/// the f32 fallback where a finite value is beyond f16's range, or where an
/// operand holds a value f16 cannot hold and nothing of 2^-10 or more.
fn arms(operands: &[Vec<u16>]) -> bool {
    operands.iter().flatten().any(|&b| beyond_f16(b))
        || operands
            .iter()
            .any(|o| o.iter().any(|&b| !fits_f16(b)) && !o.iter().any(|&b| large(b)))
}

/// The patterns the range test sorts: f16 values below 2^-10 and above,
/// values f16 cannot hold (all below 2^-17 or bf16 subnormals), and finite
/// values beyond f16's range; each class near its boundaries and spread.
struct Classes {
    small_exact: Vec<u16>,
    large_exact: Vec<u16>,
    inexact: Vec<u16>,
    beyond: Vec<u16>,
}

fn classes() -> Classes {
    let all: Vec<u16> = (0..=u16::MAX)
        .filter(|&b| !bf16::from_bits(b).is_nan())
        .collect();
    let pick =
        |f: &dyn Fn(u16) -> bool| -> Vec<u16> { all.iter().copied().filter(|&b| f(b)).collect() };
    let c = Classes {
        small_exact: pick(&|b| fits_f16(b) && !large(b)),
        large_exact: pick(&|b| fits_f16(b) && large(b)),
        inexact: pick(&|b| !fits_f16(b) && !beyond_f16(b)),
        beyond: pick(&beyond_f16),
    };
    // Every class is there: f16 subnormals and normals, tiny values with
    // bits below 2^-24 and bf16 subnormals, and the huge ones.
    assert!(c.small_exact.len() > 2_000 && c.large_exact.len() > 5_000);
    assert!(c.inexact.len() > 20_000 && c.beyond.len() > 20_000);
    assert!(
        c.inexact.iter().all(|&b| b & 0x7fff < 0x3880),
        "inexact values are below f16's normals"
    );
    c
}

/// The range test of the bf16 matmul's check pass and of the checked cast
/// that stages attention's operands, as the arm pass decides it: planted
/// patterns at each class boundary (the largest inexact values, the
/// smallest beyond f16's range, 2^-10 and the pattern below it), alone in
/// an operand or beside another operand's large values; then random mixes
/// of the classes against the documented rule. Lengths of 257 (single
/// words) and 256 (16-byte units) take both cast entries.
#[test]
fn the_range_test_arms_the_f32_fallback_as_documented() {
    let Some(ctx) = common::ctx() else { return };
    let c = classes();
    let tensor = |bits: &[u16]| {
        let v: Vec<bf16> = bits.iter().map(|&b| bf16::from_bits(b)).collect();
        ctx.tensor(&v, [bits.len()]).unwrap()
    };
    // The checked cast (one to four operands) and, of two, the check pass:
    // both decide alike.
    let check = |ops: &[Vec<u16>]| -> bool {
        let t: Vec<Tensor> = ops.iter().map(|o| tensor(o)).collect();
        let cast = ctx.bf16_cast_check(&t.iter().collect::<Vec<_>>()).unwrap();
        if ops.len() == 2 {
            assert_eq!(
                ctx.bf16_check_pass(&t[0], &t[1]).unwrap(),
                cast,
                "check pass and checked cast"
            );
        }
        cast
    };
    let mut picks = common::Lcg(7);
    let mut fill =
        |from: &[u16], n: usize| -> Vec<u16> { (0..n).map(|_| picks.of(from)).collect() };
    let normal: Vec<u16> = normal_bf16_values(257, 1.0, 3)
        .iter()
        .map(|x| bf16::from_f32(*x).to_bits())
        .collect();
    let small = fill(&c.small_exact, 257);
    // Every class boundary: the largest inexact values (below 2^-17,
    // either sign), the smallest and largest beyond f16's range, bf16's
    // smallest and largest subnormals.
    let top = *c.inexact.iter().filter(|&&b| b < 0x8000).max().unwrap();
    assert!(
        f64::from(bf16::from_bits(top).to_f32()) < 2f64.powi(-17),
        "{top:#06x}"
    );
    let inexact_edges = [
        top,
        top | 0x8000,
        0x0001,
        0x8001,
        0x007f,
        c.inexact[c.inexact.len() / 2],
    ];
    assert_eq!(
        c.beyond.iter().copied().filter(|&b| b < 0x8000).min(),
        Some(0x4780)
    );
    let beyond_edges = [0x4780, 0xc780, 0x7f7f, 0xff7f];
    for len in [257usize, 256] {
        for at in [0usize, 1, 100, len - 1] {
            let with = |base: &[u16], b: u16| {
                let mut v = base[..len].to_vec();
                v[at] = b;
                v
            };
            for &b in &inexact_edges {
                // In an operand of normal values: the f16 kernels.
                assert!(
                    !check(&[with(&normal, b), normal[..len].to_vec()]),
                    "{b:#06x} among normal values"
                );
                assert!(
                    !check(&[with(&normal, b)]),
                    "{b:#06x} among normal values (cast)"
                );
                // Among values below 2^-10: the f32 plan, whatever the other
                // operand holds; 2^-10 (or an infinity) anywhere in it keeps
                // the f16 kernels, the pattern below 2^-10 does not.
                let alone = with(&small, b);
                assert!(
                    check(&[alone.clone(), normal[..len].to_vec()]),
                    "{b:#06x} among small values"
                );
                assert!(
                    check(&[
                        normal[..len].to_vec(),
                        alone.clone(),
                        normal[..len].to_vec()
                    ]),
                    "{b:#06x}, slot 1 of 3"
                );
                for (edge, keeps) in [
                    (0x3a80u16, true),
                    (0xba80, true),
                    (0x7f80, true),
                    (0x3a7f, false),
                ] {
                    let mut v = alone.clone();
                    v[(at + len / 2) % len] = edge;
                    assert_eq!(
                        !check(&[v.clone(), small[..len].to_vec()]),
                        keeps,
                        "{b:#06x} with {edge:#06x}"
                    );
                    assert_eq!(
                        !check(&[small[..len].to_vec(), v]),
                        keeps,
                        "{b:#06x} with {edge:#06x}, slot 1"
                    );
                }
            }
            for &b in &beyond_edges {
                assert!(
                    check(&[normal[..len].to_vec(), with(&normal, b)]),
                    "{b:#06x}"
                );
                assert!(
                    check(&[
                        normal[..len].to_vec(),
                        normal[..len].to_vec(),
                        normal[..len].to_vec(),
                        with(&normal, b)
                    ]),
                    "{b:#06x}, slot 3 of 4"
                );
            }
        }
    }
    // Every f16 value together: nothing arms.
    let every_exact: Vec<u16> = c
        .small_exact
        .iter()
        .chain(&c.large_exact)
        .copied()
        .collect();
    assert!(!check(&[every_exact.clone(), normal.clone()]));
    assert!(!check(&[every_exact]));
    // Random mixes: 1 to 4 operands, each drawn from a random subset of
    // the classes (mostly one class, so that the small-only operands occur).
    let all = [&c.small_exact, &c.large_exact, &c.inexact, &c.beyond];
    let (mut armed, mut kept) = (0, 0);
    for case in 0..160 {
        let count = if case % 2 == 0 { 2 } else { 1 + picks.below(4) };
        let len = [257, 256, 9, 31][picks.below(4)];
        let ops: Vec<Vec<u16>> = (0..count)
            .map(|_| {
                let main = all[[0, 0, 1, 2][picks.below(4)]];
                (0..len)
                    .map(|_| {
                        let r = picks.below(1000);
                        let from = if r < 990 {
                            main
                        } else {
                            all[picks.below(if r < 999 { 3 } else { 4 })]
                        };
                        picks.of(from)
                    })
                    .collect()
            })
            .collect();
        let want = arms(&ops);
        assert_eq!(check(&ops), want, "case {case}: {count} operands of {len}");
        if want { armed += 1 } else { kept += 1 }
    }
    assert!(armed > 30 && kept > 30, "{armed} armed, {kept} kept");
}

/// Lanes past a bf16 operand's values do not count in the check pass: a
/// wrapped buffer whose last 16 bytes hold 2^-10 past three small values
/// and an inexact one still arms the fallback.
#[test]
fn the_check_pass_reads_no_value_past_the_operand() {
    let Some(ctx) = common::ctx() else { return };
    let words: [u16; 8] = [
        0x0001, 0x0100, 0x0200, 0x0300, 0x3a80, 0x3f80, 0x3f80, 0x3f80,
    ];
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    let buffer = ctx.device().create_buffer(&wgpu::BufferDescriptor {
        label: Some("bf16 operand with a tail"),
        size: 16,
        usage: wgpu::BufferUsages::STORAGE
            | wgpu::BufferUsages::COPY_SRC
            | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    ctx.queue().write_buffer(&buffer, 0, &bytes);
    let a = ctx.tensor_from_buffer(&buffer, [4], DType::BF16).unwrap();
    let b = ctx.tensor(&[bf16::from_f32(1.0); 3], [3]).unwrap();
    assert!(
        ctx.bf16_check_pass(&a, &b).unwrap(),
        "the tail's 2^-10 counted"
    );
    let whole = ctx.tensor_from_buffer(&buffer, [5], DType::BF16).unwrap();
    assert!(
        !ctx.bf16_check_pass(&whole, &b).unwrap(),
        "2^-10 within the operand"
    );
}

#[test]
fn few_rows_read_a_bf16_weight_in_place() {
    let Some(ctx) = common::ctx() else { return };
    // 1 to 8 rows of x, even N: x staged to f32, the weight read as bf16
    // words by the GEMV of rows (one row of x against N a multiple of 8: the
    // one-dispatch GEMV), whatever the values' range (1e6 is past f16's).
    // Odd N keeps the staged route.
    for (i, &(m, n, k)) in [
        (1, 258, 129),
        (1, 264, 131),
        (4, 130, 4099),
        (8, 2, 61),
        (3, 514, 67),
        (2, 7, 33),
    ]
    .iter()
    .enumerate()
    {
        for out in [DType::BF16, DType::F32] {
            for scale in [1.0, 1e6] {
                check_matmul(&ctx, (m, n, k), scale, out, 40 + i as u64);
            }
        }
        let a = ctx.zeros([m, k], DType::BF16).unwrap();
        let b = ctx.zeros([k, n], DType::BF16).unwrap();
        let label = ctx
            .matmul_plan(&a, &b, None, &Default::default())
            .unwrap()
            .label()
            .to_string();
        assert_eq!(
            label.contains("bf16 weight read in place"),
            n % 2 == 0,
            "{label}"
        );
    }
    // Batches of x over one weight fold into rows; an epilogue's bias and
    // residual (bf16) per row.
    let (k, n) = (45, 66);
    let av = common::random(2 * 3 * k, 50);
    let bv = common::random(k * n, 51);
    let biasv = common::random(n, 52);
    let resv = common::random(2 * 3 * n, 53);
    let (a, ah) = common::upload(&ctx, &av, &[2, 3, k], DType::BF16);
    let (b, bh) = common::upload(&ctx, &bv, &[k, n], DType::BF16);
    let (bias, biash) = common::upload(&ctx, &biasv, &[n], DType::BF16);
    let (res, resh) = common::upload(&ctx, &resv, &[2, 3, n], DType::BF16);
    let epilogue = wgtile::Epilogue::new().bias(&bias).residual(&res);
    let options = wgtile::MatmulOptions {
        out_dtype: Some(DType::F32),
        ..Default::default()
    };
    let plan = ctx
        .matmul_plan_with(&a, &b, None, &options, &epilogue)
        .unwrap();
    assert!(plan.label().contains("6 rows at once"), "{}", plan.label());
    ctx.fill(plan.output(), f32::NAN).unwrap();
    plan.run().unwrap();
    let got = plan.output().to_f32_vec_blocking().unwrap();
    let (c, mag) = common::matmul_ref(&ah, &bh, 6, n, k, &[(0, 0)]);
    let want: Vec<f64> = c
        .iter()
        .enumerate()
        .map(|(i, v)| v + f64::from(biash[i % n]) + f64::from(resh[i]))
        .collect();
    common::assert_close("bf16 rows with bias and residual", &got, &want, |i| {
        common::matmul_tolerance(DType::F32, k, want[i], mag[i]) + 1e-7
    });
}

/// Normal samples of standard deviation `sigma`, rounded to bf16 and
/// widened back: bf16 as models hold it, with values below 2^-17 that f16
/// cannot hold.
fn normal_bf16_values(n: usize, sigma: f64, seed: u64) -> Vec<f32> {
    wgtile::normal_values(n, 0.0, sigma as f32, seed)
        .into_iter()
        .map(|x| bf16::from_f32(x).to_f32())
        .collect()
}

/// The scaled form's first pass: the largest finite |A| and |B| of bf16
/// operands over their logical elements (16-byte units of rows that start
/// on 16 bytes, single loads of the rest, transposed and batched operands),
/// infinities and NaN left out and flagged.
#[test]
fn bf16_scale_pass_finds_the_largest_finite_values() {
    let Some(ctx) = common::ctx() else { return };
    let upload = |v: &[f32], shape: &[usize]| common::upload(&ctx, v, shape, DType::BF16).0;
    let cases: [(&[usize], &[usize], bool); 4] = [
        (&[37, 45], &[45, 24], false),
        (&[64, 48], &[48, 40], false),
        (&[3, 16, 40], &[40, 32], false),
        (&[33, 24], &[40, 24], true),
    ];
    for (i, (ash, bsh, tb)) in cases.into_iter().enumerate() {
        let (na, nb) = (ash.iter().product::<usize>(), bsh.iter().product::<usize>());
        let mut av = normal_bf16_values(na, 1.0, i as u64);
        let mut bv = normal_bf16_values(nb, 0.02, 10 + i as u64);
        // The largest values in a last row's tail and a first row's head, in
        // the low or the high half of a word as the case goes.
        av[na - 1 - i % 2] = -300.0;
        bv[i % 2] = 6.5;
        let options = wgtile::MatmulOptions {
            transpose_b: tb,
            ..Default::default()
        };
        let (maxima, bad) = ctx
            .bf16_scale_maxima(&upload(&av, ash), &upload(&bv, bsh), &options)
            .unwrap();
        assert_eq!((maxima, bad), ([300.0, 6.5], false), "case {i}");
        // Infinities and NaN are flagged and do not count.
        av[5] = f32::INFINITY;
        bv[7] = f32::NAN;
        let (maxima, bad) = ctx
            .bf16_scale_maxima(&upload(&av, ash), &upload(&bv, bsh), &options)
            .unwrap();
        assert_eq!(
            (maxima, bad),
            ([300.0, 6.5], true),
            "case {i} with inf and NaN"
        );
    }
}

/// The scaled form on tensor cores (each operand times its power of two
/// before the narrowing to f16, no check and no fallback) against the f64
/// product: normal data (values f16 cannot hold), all-tiny and all-huge
/// operands, one outlier, odd shapes; infinities give IEEE's answer.
/// Refused by name where the f16 dispatcher keeps the product off the
/// tensor cores (every CPU adapter).
#[test]
fn matmul_of_bf16_scaled_on_tensor_cores() {
    let Some(ctx) = common::ctx() else { return };
    let (a, _) = common::upload(&ctx, &common::random(64 * 64, 1), &[64, 64], DType::BF16);
    if let Err(e) = ctx.matmul_bf16_scaled_plan(&a, &a) {
        assert!(
            matches!(e, wgtile::Error::UnsupportedFeature { .. }),
            "{e:?}"
        );
        return;
    }
    for (i, (m, n, k)) in [(256, 384, 320), (300, 260, 136), (129, 131, 257)]
        .into_iter()
        .enumerate()
    {
        for (what, sa, sb) in [
            ("normal", 1.0, 0.02),
            ("tiny", 1e-30, 1e-6),
            ("huge", 1e20, 1e10),
        ] {
            let av: Vec<f32> = normal_bf16_values(m * k, 1.0, i as u64)
                .iter()
                .map(|x| bf16::from_f64(f64::from(*x) * sa).to_f32())
                .collect();
            let bv: Vec<f32> = normal_bf16_values(k * n, 1.0, 5 + i as u64)
                .iter()
                .map(|x| bf16::from_f64(f64::from(*x) * sb).to_f32())
                .collect();
            let (a, ah) = common::upload(&ctx, &av, &[m, k], DType::BF16);
            let (b, bh) = common::upload(&ctx, &bv, &[k, n], DType::BF16);
            let plan = ctx.matmul_bf16_scaled_plan(&a, &b).unwrap();
            ctx.fill(plan.output(), f32::NAN).unwrap();
            plan.run().unwrap();
            let got = plan.output().to_vec_blocking::<f32>().unwrap();
            let (want, mag) = common::matmul_ref(&ah, &bh, m, n, k, &[(0, 0)]);
            let (amax, bmax) = (
                ah.iter().fold(0f64, |x, &y| x.max(f64::from(y.abs()))),
                bh.iter().fold(0f64, |x, &y| x.max(f64::from(y.abs()))),
            );
            // f32 accumulation, plus each value below 2^-29 of its operand's
            // largest kept to f16's subnormal steps (2^-40 of the largest).
            let bound = |j: usize| {
                common::matmul_tolerance(DType::F32, k, want[j], mag[j])
                    + k as f64 * amax * bmax * 2f64.powi(-38)
            };
            common::assert_close(
                &format!("{what} {m}x{n}x{k} ({})", plan.label()),
                &got,
                &want,
                bound,
            );
        }
    }
    // An infinity in A: the columns of B it meets give IEEE's inf or NaN
    // (the probe's shape, which the dispatcher sends to the tensor cores).
    let (m, n, k) = (64, 64, 64);
    let mut av = common::random(m * k, 3);
    av[5] = f32::INFINITY;
    let (a, _) = common::upload(&ctx, &av, &[m, k], DType::BF16);
    let (b, _) = common::upload(&ctx, &common::random(k * n, 4), &[k, n], DType::BF16);
    let plan = ctx.matmul_bf16_scaled_plan(&a, &b).unwrap();
    plan.run().unwrap();
    let got = plan.output().to_vec_blocking::<f32>().unwrap();
    assert!(
        got[..n].iter().all(|x| !x.is_finite()),
        "row 0 meets the infinity"
    );
    assert!(
        got[n..].iter().all(|x| x.is_finite()),
        "the other rows stay finite"
    );
}
