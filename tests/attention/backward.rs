//! The backward: gradients against the analytic f64 ones and against finite
//! differences, and the packed layout against the heads-first one.

use crate::common;
use crate::helpers::{Case, HostMask, check_backward, forward_f64, mask_values};

use wgtile::tune::attention::BackwardCoopTiles;
use wgtile::{AttentionKernel, AttentionOptions, Context, DType, DiagonalAlignment};

#[test]
fn backward_matches_analytic_gradients() {
    let Some(ctx) = common::ctx() else { return };
    check_backward(
        &ctx,
        &Case::new(1, 2, 2, 33, 47, 32, 24),
        &AttentionOptions::new(),
        None,
        200,
    );
    check_backward(
        &ctx,
        &Case::new(2, 4, 2, 17, 40, 16, 16),
        &AttentionOptions::new().causal(DiagonalAlignment::BottomRight),
        None,
        201,
    );
    check_backward(
        &ctx,
        &Case::new(1, 2, 1, 40, 40, 64, 64),
        &AttentionOptions::new()
            .window(Some(7), Some(3))
            .softcap(2.0)
            .scale(1.5),
        None,
        202,
    );
    let c = Case::new(3, 1, 1, 20, 30, 8, 8);
    let data = mask_values(3 * 20 * 30, 203, true);
    let m = HostMask {
        additive: true,
        dims: [3, 1, 20, 30],
        shape: vec![3, 1, 20, 30],
        data,
    };
    check_backward(
        &ctx,
        &c,
        &AttentionOptions::new().key_lengths(&[30, 0, 11]),
        Some(m),
        204,
    );
    let data = mask_values(20 * 30, 205, false);
    let m = HostMask {
        additive: false,
        dims: [1, 1, 20, 30],
        shape: vec![20, 30],
        data,
    };
    check_backward(
        &ctx,
        &c,
        &AttentionOptions::new().causal(DiagonalAlignment::TopLeft),
        Some(m),
        206,
    );
    check_backward(
        &ctx,
        &Case::new(1, 1, 1, 9, 129, 128, 80),
        &AttentionOptions::new(),
        None,
        207,
    );
    // Bottom-right alignment to each batch's key length, with a window.
    check_backward(
        &ctx,
        &c,
        &AttentionOptions::new()
            .key_lengths(&[30, 13, 0])
            .causal(DiagonalAlignment::BottomRight)
            .window(Some(4), None),
        None,
        208,
    );
    // The small-adapter tile shape (64 invocations), forced.
    let mut small = AttentionOptions::new()
        .causal(DiagonalAlignment::TopLeft)
        .softcap(3.0);
    small.backward_tiles = Some(wgtile::tune::attention::BACKWARD_CANDIDATES[1]);
    check_backward(&ctx, &Case::new(1, 4, 2, 37, 29, 40, 24), &small, None, 209);
    if ctx.profile().shader_f16 {
        let mut c = Case::new(1, 2, 1, 33, 20, 32, 32);
        c.dtype = DType::F16;
        check_backward(
            &ctx,
            &c,
            &AttentionOptions::new().causal(DiagonalAlignment::BottomRight),
            None,
            208,
        );
    }
}

#[test]
fn backward_of_bf16() {
    let Some(ctx) = common::ctx() else { return };
    let bf = |c: Case| Case {
        dtype: DType::BF16,
        ..c
    };
    // GQA, odd and prime sizes, D != Dv.
    check_backward(
        &ctx,
        &bf(Case::new(2, 4, 2, 37, 41, 40, 24)),
        &AttentionOptions::new().causal(DiagonalAlignment::BottomRight),
        None,
        210,
    );
    // A bf16 additive mask (staged with the operands), key lengths, soft-cap.
    let c = bf(Case::new(2, 3, 1, 19, 37, 24, 40));
    let m = HostMask {
        additive: true,
        dims: [2, 1, 19, 37],
        shape: vec![2, 1, 19, 37],
        data: mask_values(2 * 19 * 37, 211, true),
    };
    check_backward(
        &ctx,
        &c,
        &AttentionOptions::new().key_lengths(&[37, 23]).softcap(2.5),
        Some(m),
        212,
    );
    // Mixed dtypes are named errors, never a silent cast.
    let up = |shape: &[usize], dtype: DType, seed: u64| {
        let n = shape.iter().product();
        common::upload(&ctx, &common::random(n, seed), shape, dtype).0
    };
    let q = up(&[1, 2, 5, 8], DType::BF16, 1);
    let k = up(&[1, 2, 7, 8], DType::BF16, 2);
    let v = up(&[1, 2, 7, 8], DType::BF16, 3);
    let opts = AttentionOptions::new().with_lse();
    let fwd = ctx.attention(&q, &k, &v, &opts).unwrap();
    let lse = fwd.lse.unwrap();
    let mut others = vec![DType::F32];
    if ctx.profile().shader_f16 {
        others.push(DType::F16);
    }
    for dtype in others {
        let k2 = up(&[1, 2, 7, 8], dtype, 2);
        let o2 = up(&[1, 2, 5, 8], dtype, 4);
        for (what, bad) in [
            (
                "k",
                ctx.attention_backward(&q, &k2, &v, &fwd.o, &fwd.o, &lse, &opts),
            ),
            (
                "o",
                ctx.attention_backward(&q, &k, &v, &o2, &fwd.o, &lse, &opts),
            ),
            (
                "d_o",
                ctx.attention_backward(&q, &k, &v, &fwd.o, &o2, &lse, &opts),
            ),
        ] {
            assert!(
                matches!(bad, Err(wgtile::Error::DTypeMismatch { .. })),
                "bf16 q with {dtype} {what}: {:?}",
                bad.map(|_| ())
            );
        }
    }
    let lse16 = up(&[1, 2, 5], DType::BF16, 5);
    let bad = ctx.attention_backward(&q, &k, &v, &fwd.o, &fwd.o, &lse16, &opts);
    assert!(
        matches!(bad, Err(wgtile::Error::DTypeMismatch { .. })),
        "bf16 lse: {:?}",
        bad.map(|_| ())
    );
    // The plans' last kernels finish while the test's thread lives: with a
    // cold shader cache, lavapipe (LLVM 15) crashed or hung compiling them
    // lazily during the process's exit otherwise (3 runs in 4, 2026-12-04).
    ctx.synchronize().unwrap();
}

#[test]
fn backward_matches_finite_differences() {
    let Some(ctx) = common::ctx() else { return };
    let c = Case::new(1, 2, 1, 3, 5, 3, 2);
    let opts = AttentionOptions::new()
        .softcap(1.5)
        .causal(DiagonalAlignment::BottomRight)
        .with_lse();
    let q = common::random(c.hq * c.sq * c.d, 300);
    let k = common::random(c.hkv * c.sk * c.d, 301);
    let v = common::random(c.hkv * c.sk * c.dv, 302);
    let d_o = common::random(c.hq * c.sq * c.dv, 303);
    let qt = ctx.tensor(&q, [1, c.hq, c.sq, c.d]).unwrap();
    let kt = ctx.tensor(&k, [1, c.hkv, c.sk, c.d]).unwrap();
    let vt = ctx.tensor(&v, [1, c.hkv, c.sk, c.dv]).unwrap();
    let dot = ctx.tensor(&d_o, [1, c.hq, c.sq, c.dv]).unwrap();
    let fwd = ctx.attention(&qt, &kt, &vt, &opts).unwrap();
    let g = ctx
        .attention_backward(&qt, &kt, &vt, &fwd.o, &dot, &fwd.lse.unwrap(), &opts)
        .unwrap();
    let f = |x: &[f32]| x.iter().map(|&y| f64::from(y)).collect::<Vec<f64>>();
    let (q64, k64, v64, do64) = (f(&q), f(&k), f(&v), f(&d_o));
    let loss = |q: &[f64], k: &[f64], v: &[f64]| -> f64 {
        forward_f64(&c, q, k, v, &opts, None)
            .iter()
            .zip(&do64)
            .map(|(a, b)| a * b)
            .sum()
    };
    let eps = 1e-5;
    for (which, got) in [(0, &g.dq), (1, &g.dk), (2, &g.dv)] {
        let got = got.to_vec_blocking::<f32>().unwrap();
        let base = [&q64, &k64, &v64][which];
        for idx in 0..base.len() {
            let mut plus = [q64.clone(), k64.clone(), v64.clone()];
            let mut minus = plus.clone();
            plus[which][idx] += eps;
            minus[which][idx] -= eps;
            let fd = (loss(&plus[0], &plus[1], &plus[2]) - loss(&minus[0], &minus[1], &minus[2]))
                / (2.0 * eps);
            let err = (f64::from(got[idx]) - fd).abs();
            assert!(
                err < 1e-4,
                "gradient {which} element {idx}: GPU {} vs finite difference {fd}",
                got[idx]
            );
        }
    }
}

#[test]
fn backward_in_packed_layout_matches_heads_first() {
    let Some(ctx) = common::ctx() else { return };
    packed_backward_matches_heads_first(&ctx, DType::F32, AttentionKernel::Auto, None);
    // The tensor-core backward's algorithm (emulated), with different tiles
    // for its two kernels: the same strides arithmetic as on tensor cores.
    let p = ctx.profile();
    if p.shader_f16 && p.subgroups {
        use wgtile::tune::attention::BACKWARD_COOP_CANDIDATES as C;
        packed_backward_matches_heads_first(
            &ctx,
            DType::F16,
            AttentionKernel::FlashCoopEmulated,
            Some((C[0], C[2])),
        );
    }
}

/// Backward in the packed [B, S, H*D] layout against the heads-first one on
/// the same values, with the backward's kernel (and tensor-core tiles for
/// its dK/dV and dQ kernels) forced; the forward is `Auto`.
fn packed_backward_matches_heads_first(
    ctx: &Context,
    dtype: DType,
    kernel: AttentionKernel,
    coop_tiles: Option<(BackwardCoopTiles, BackwardCoopTiles)>,
) {
    let (b, hq, hkv, sq, sk, d) = (2, 4, 2, 19, 33, 16);
    let qh = common::random(b * sq * hq * d, 400);
    let kh = common::random(b * sk * hkv * d, 401);
    let vh = common::random(b * sk * hkv * d, 402);
    let doh = common::random(b * sq * hq * d, 403);
    // [B, S, H*D] -> [B, H, S, D]
    let to_heads = |x: &[f32], s: usize, h: usize| {
        let mut out = vec![0.0; x.len()];
        for bi in 0..b {
            for si in 0..s {
                for hi in 0..h {
                    for di in 0..d {
                        out[((bi * h + hi) * s + si) * d + di] =
                            x[((bi * s + si) * h + hi) * d + di];
                    }
                }
            }
        }
        out
    };
    let backward_opts = |o: AttentionOptions| {
        let mut o = o;
        o.kernel = kernel;
        if let Some((kv, q)) = coop_tiles {
            o.backward_coop_tiles = Some(kv);
            o.backward_coop_dq_tiles = Some(q);
        }
        o
    };
    let packed = AttentionOptions::new()
        .packed(hq, hkv)
        .causal(DiagonalAlignment::BottomRight)
        .with_lse();
    let t = |x: &[f32], s: &[usize]| common::upload(ctx, x, s, dtype).0;
    let (q, k, v, d_o) = (
        t(&qh, &[b, sq, hq * d]),
        t(&kh, &[b, sk, hkv * d]),
        t(&vh, &[b, sk, hkv * d]),
        t(&doh, &[b, sq, hq * d]),
    );
    let fwd = ctx.attention(&q, &k, &v, &packed).unwrap();
    let bwd = backward_opts(packed);
    let (plan, g) = ctx
        .attention_backward_plan(&q, &k, &v, &fwd.o, &d_o, &fwd.lse.unwrap(), &bwd)
        .unwrap();
    if kernel == AttentionKernel::FlashCoopEmulated {
        assert!(plan.label().contains("emulated"), "{}", plan.label());
    }
    plan.run().unwrap();
    let heads = AttentionOptions::new()
        .causal(DiagonalAlignment::BottomRight)
        .with_lse();
    let (q2, k2, v2, do2) = (
        t(&to_heads(&qh, sq, hq), &[b, hq, sq, d]),
        t(&to_heads(&kh, sk, hkv), &[b, hkv, sk, d]),
        t(&to_heads(&vh, sk, hkv), &[b, hkv, sk, d]),
        t(&to_heads(&doh, sq, hq), &[b, hq, sq, d]),
    );
    let fwd2 = ctx.attention(&q2, &k2, &v2, &heads).unwrap();
    let g2 = ctx
        .attention_backward(
            &q2,
            &k2,
            &v2,
            &fwd2.o,
            &do2,
            &fwd2.lse.unwrap(),
            &backward_opts(heads),
        )
        .unwrap();
    for (name, p, h, s, nh) in [
        ("dq", &g.dq, &g2.dq, sq, hq),
        ("dk", &g.dk, &g2.dk, sk, hkv),
        ("dv", &g.dv, &g2.dv, sk, hkv),
    ] {
        let got = to_heads(&p.to_f32_vec_blocking().unwrap(), s, nh);
        let want: Vec<f64> = h
            .to_f32_vec_blocking()
            .unwrap()
            .iter()
            .map(|&x| f64::from(x))
            .collect();
        common::assert_close(&format!("{name} {dtype}"), &got, &want, |_| 1e-6);
    }
}
