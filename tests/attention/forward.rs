//! The flash forward (and the naive, split-KV and decode paths it is held
//! against): sizes and head dims, Dv != D, GQA and MQA, large logits, f16,
//! zero-sized dims, the packed layout, NaN rows, every sequence-length
//! pair, the op's errors, and the dispatcher's tiles per adapter.

use crate::common;
use crate::helpers::{Case, HostMask, check, mask_values, reference, run_poisoned};

use wgtile::{
    AdapterProfile, AttentionKernel, AttentionOptions, DType, DiagonalAlignment, Error, KvCache,
    Tensor,
};

#[test]
fn sizes_and_head_dims() {
    let Some(ctx) = common::ctx() else { return };
    let sizes = [(1, 17), (17, 1), (64, 64), (100, 129), (129, 100)];
    for (n, &(sq, sk)) in sizes.iter().enumerate() {
        for (m, d) in [32, 64, 80, 128].into_iter().enumerate() {
            if (n + m) % 2 == 1 && sq * sk > 1000 {
                continue; // keep lavapipe time down: a checkerboard of the big ones
            }
            check(
                &ctx,
                &Case::new(1, 2, 1, sq, sk, d, d),
                &AttentionOptions::new(),
                None,
                (n * 10 + m) as u64,
            );
        }
    }
}

#[test]
fn value_dim_differs() {
    let Some(ctx) = common::ctx() else { return };
    check(
        &ctx,
        &Case::new(1, 2, 2, 33, 70, 64, 40),
        &AttentionOptions::new(),
        None,
        1,
    );
    check(
        &ctx,
        &Case::new(1, 1, 1, 20, 65, 16, 256),
        &AttentionOptions::new(),
        None,
        2,
    );
    check(
        &ctx,
        &Case::new(2, 1, 1, 9, 31, 7, 3),
        &AttentionOptions::new(),
        None,
        3,
    );
}

#[test]
fn grouped_and_multi_query() {
    let Some(ctx) = common::ctx() else { return };
    check(
        &ctx,
        &Case::new(1, 4, 1, 64, 100, 64, 64),
        &AttentionOptions::new(),
        None,
        30,
    );
    check(
        &ctx,
        &Case::new(2, 8, 2, 17, 64, 32, 32),
        &AttentionOptions::new().causal(DiagonalAlignment::BottomRight),
        None,
        31,
    );
}

#[test]
fn large_logits_do_not_overflow() {
    let Some(ctx) = common::ctx() else { return };
    let err = check(
        &ctx,
        &Case::new(1, 2, 1, 64, 129, 64, 64),
        &AttentionOptions::new().scale(100.0),
        None,
        60,
    );
    assert!(err.is_finite());
}

#[test]
fn f16_inputs() {
    let Some(ctx) = common::ctx() else { return };
    if !ctx.profile().shader_f16 {
        return;
    }
    let mut c = Case::new(1, 2, 1, 100, 129, 64, 64);
    c.dtype = DType::F16;
    check(&ctx, &c, &AttentionOptions::new(), None, 70);
    check(
        &ctx,
        &c,
        &AttentionOptions::new()
            .causal(DiagonalAlignment::BottomRight)
            .softcap(5.0),
        None,
        71,
    );
    let mut c = Case::new(1, 4, 2, 17, 64, 128, 128);
    c.dtype = DType::F16;
    let data = mask_values(17 * 64, 72, true);
    check(
        &ctx,
        &c,
        &AttentionOptions::new(),
        Some(HostMask {
            additive: true,
            dims: [1, 1, 17, 64],
            shape: vec![17, 64],
            data,
        }),
        73,
    );
}

#[test]
fn zero_sized_dims() {
    let Some(ctx) = common::ctx() else { return };
    let t = |s: &[usize]| ctx.zeros(s, DType::F32).unwrap();
    let out = ctx
        .attention(
            &t(&[0, 2, 5, 8]),
            &t(&[0, 1, 5, 8]),
            &t(&[0, 1, 5, 8]),
            &AttentionOptions::new().with_lse(),
        )
        .unwrap();
    assert_eq!(out.o.shape(), &[0, 2, 5, 8]);
    assert_eq!(out.lse.unwrap().shape(), &[0, 2, 5]);
    let out = ctx
        .attention(
            &t(&[1, 2, 0, 8]),
            &t(&[1, 1, 5, 8]),
            &t(&[1, 1, 5, 3]),
            &AttentionOptions::new(),
        )
        .unwrap();
    assert_eq!(out.o.shape(), &[1, 2, 0, 3]);
    // Dv = 0: an empty output, but the logsumexp is still that of the scores
    // (D = 0 makes every logit 0: lse = ln(Sk)).
    for kernel in [AttentionKernel::Flash, AttentionKernel::Naive] {
        let out = ctx
            .attention(
                &t(&[1, 2, 3, 0]),
                &t(&[1, 1, 5, 0]),
                &t(&[1, 1, 5, 0]),
                &AttentionOptions::new().with_lse().kernel(kernel),
            )
            .unwrap();
        assert_eq!(out.o.shape(), &[1, 2, 3, 0]);
        let lse = out.lse.unwrap().to_vec_blocking::<f32>().unwrap();
        assert!(
            lse.iter().all(|&x| (x - 5f32.ln()).abs() < 1e-6),
            "{kernel:?}: {lse:?}"
        );
    }
    // D = 0: every logit is 0, the softmax is uniform: O = mean of V.
    let v = ctx.tensor(&[1.0f32, 2.0, 3.0, 5.0], [1, 1, 2, 2]).unwrap();
    let o = ctx
        .attention(
            &t(&[1, 1, 3, 0]),
            &t(&[1, 1, 2, 0]),
            &v,
            &AttentionOptions::new(),
        )
        .unwrap();
    assert_eq!(
        o.o.to_vec_blocking::<f32>().unwrap(),
        vec![2.0, 3.5, 2.0, 3.5, 2.0, 3.5]
    );
}

#[test]
fn packed_layout_reads_in_place() {
    let Some(ctx) = common::ctx() else { return };
    let (b, hq, hkv, sq, sk, d) = (2, 4, 2, 17, 40, 32);
    let qh = common::random(b * sq * hq * d, 90);
    let kh = common::random(b * sk * hkv * d, 91);
    let vh = common::random(b * sk * hkv * d, 92);
    let q = ctx.tensor(&qh, [b, sq, hq * d]).unwrap();
    let k = ctx.tensor(&kh, [b, sk, hkv * d]).unwrap();
    let v = ctx.tensor(&vh, [b, sk, hkv * d]).unwrap();
    let opts = AttentionOptions::new()
        .packed(hq, hkv)
        .causal(DiagonalAlignment::BottomRight);
    let (o, _) = run_poisoned(&ctx, &q, &k, &v, &opts);
    // Heads-first copies on the host, through the same op.
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
    let c = Case::new(b, hq, hkv, sq, sk, d, d);
    let (want, _) = reference(
        &c,
        &to_heads(&qh, sq, hq),
        &to_heads(&kh, sk, hkv),
        &to_heads(&vh, sk, hkv),
        &opts,
        None,
    );
    let packed_want: Vec<f64> = (0..o.len())
        .map(|idx| {
            let (bi, rest) = (idx / (sq * hq * d), idx % (sq * hq * d));
            let (si, hi, di) = (rest / (hq * d), (rest / d) % hq, rest % d);
            want[((bi * hq + hi) * sq + si) * d + di]
        })
        .collect();
    common::assert_close("packed attention", &o, &packed_want, |_| 1e-5);
    // The decode kernel reads the packed layout in place too.
    let (plan, _) = ctx
        .attention_plan(&q, &k, &v, &opts.clone().kernel(AttentionKernel::Decode))
        .unwrap();
    assert!(
        plan.label().starts_with("attention decode"),
        "{}",
        plan.label()
    );
    let (o, _) = run_poisoned(
        &ctx,
        &q,
        &k,
        &v,
        &opts.clone().kernel(AttentionKernel::Decode),
    );
    common::assert_close("packed attention (decode)", &o, &packed_want, |_| 1e-5);
}

#[test]
fn nan_propagates_only_to_rows_it_touches() {
    let Some(ctx) = common::ctx() else { return };
    let mut qh = common::random(40 * 16, 100);
    qh[7 * 16 + 3] = f32::NAN;
    let q = ctx.tensor(&qh, [1, 1, 40, 16]).unwrap();
    let k = ctx
        .rand_uniform([1, 1, 70, 16], -1.0, 1.0, DType::F32, 2)
        .unwrap();
    let v = ctx
        .rand_uniform([1, 1, 70, 16], -1.0, 1.0, DType::F32, 3)
        .unwrap();
    for opts in [
        AttentionOptions::new(),
        AttentionOptions::new().kv_splits(2),
        AttentionOptions::new().kernel(AttentionKernel::Naive),
    ] {
        let (o, _) = run_poisoned(&ctx, &q, &k, &v, &opts);
        for i in 0..40 {
            let row = &o[i * 16..(i + 1) * 16];
            if i == 7 {
                assert!(
                    row.iter().all(|x| x.is_nan()),
                    "row 7 should be NaN: {row:?}"
                );
            } else {
                assert!(row.iter().all(|x| x.is_finite()), "row {i} touched by NaN");
            }
        }
    }
}

#[test]
fn every_error_variant() {
    let Some(ctx) = common::ctx() else { return };
    let t = |s: &[usize]| ctx.zeros(s, DType::F32).unwrap();
    let q = t(&[2, 4, 8, 16]);
    let k = t(&[2, 2, 9, 16]);
    let v = t(&[2, 2, 9, 12]);
    let o = AttentionOptions::new();
    let shape =
        |r: wgtile::Result<wgtile::AttentionOutput>| matches!(r, Err(Error::ShapeMismatch { .. }));
    assert!(
        shape(ctx.attention(&q, &t(&[2, 2, 9, 8]), &v, &o)),
        "head dims"
    );
    assert!(
        shape(ctx.attention(&q, &t(&[2, 3, 9, 16]), &t(&[2, 3, 9, 12]), &o)),
        "Hq % Hkv"
    );
    assert!(
        shape(ctx.attention(&q, &t(&[1, 2, 9, 16]), &t(&[1, 2, 9, 12]), &o)),
        "batch"
    );
    assert!(
        shape(ctx.attention(&q, &k, &t(&[2, 2, 8, 12]), &o)),
        "k/v length"
    );
    assert!(
        shape(ctx.attention(&q, &k, &v, &o.clone().bool_mask(&t(&[8, 5])))),
        "mask cols"
    );
    assert!(
        shape(ctx.attention(&q, &k, &v, &o.clone().additive_mask(&t(&[3, 8, 9])))),
        "mask batch"
    );
    assert!(
        shape(ctx.attention(&q, &k, &v, &o.clone().additive_mask(&t(&[2, 3, 8, 9])))),
        "mask heads"
    );
    assert!(
        shape(ctx.attention(&q, &k, &v, &o.clone().key_lengths(&[1]))),
        "lengths count"
    );
    assert!(matches!(
        ctx.attention(&q, &k, &v, &o.clone().key_lengths(&[1, 10])),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        ctx.attention(&q, &k, &v, &o.clone().softcap(-1.0)),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        ctx.attention(&q, &k, &v, &o.clone().scale(f32::NAN)),
        Err(Error::InvalidArgument(_))
    ));
    assert!(
        matches!(
            ctx.attention(&t(&[2, 8, 64]), &k, &v, &o),
            Err(Error::InvalidArgument(_))
        ),
        "rank"
    );
    assert!(
        shape(ctx.attention(
            &t(&[2, 8, 60]),
            &t(&[2, 9, 32]),
            &t(&[2, 9, 32]),
            &o.clone().packed(4, 2)
        )),
        "packed heads"
    );
    if ctx.profile().shader_f16 {
        let h = ctx.zeros([2, 2, 9, 16], DType::F16).unwrap();
        assert!(matches!(
            ctx.attention(&q, &h, &v, &o),
            Err(Error::DTypeMismatch { .. })
        ));
        let hm = ctx.zeros([8, 9], DType::F16).unwrap();
        assert!(matches!(
            ctx.attention(&q, &k, &v, &o.clone().bool_mask(&hm)),
            Err(Error::DTypeMismatch { .. })
        ));
    }
    // f16 without SHADER_F16 is reported by require_f16 on such adapters;
    // the naive path refuses a score matrix over the binding limit.
    let (max, _) = ctx.profile().max_tensor_bytes();
    let side = ((max / 4) as f64).sqrt() as usize + 64;
    let big_q = ctx.zeros([1, 1, side, 1], DType::F32).unwrap();
    let big_k = ctx.zeros([1, 1, side, 1], DType::F32).unwrap();
    assert!(matches!(
        ctx.attention_plan(
            &big_q,
            &big_k,
            &big_k,
            &o.clone().kernel(AttentionKernel::Naive)
        ),
        Err(Error::LimitExceeded { .. })
    ));
    let out = ctx.attention(&q, &k, &v, &o.clone().with_lse()).unwrap();
    let lse = out.lse.unwrap();
    let bwd = |o_: &Tensor, d_o: &Tensor, lse: &Tensor| {
        ctx.attention_backward(&q, &k, &v, o_, d_o, lse, &o)
    };
    assert!(
        matches!(
            bwd(&out.o, &t(&[2, 4, 8, 11]), &lse),
            Err(Error::ShapeMismatch { .. })
        ),
        "d_o shape"
    );
    assert!(
        matches!(
            bwd(&out.o, &out.o, &t(&[2, 4, 7])),
            Err(Error::ShapeMismatch { .. })
        ),
        "lse shape"
    );
    assert!(matches!(
        ctx.attention_backward(&q, &t(&[2, 2, 9, 8]), &v, &out.o, &out.o, &lse, &o),
        Err(Error::ShapeMismatch { .. })
    ));
    let mut cache = KvCache::new(&ctx, 2, 2, 16, 12, 4, DType::F32).unwrap();
    assert!(matches!(
        cache.append(&t(&[2, 2, 3, 8]), &t(&[2, 2, 3, 12])),
        Err(Error::ShapeMismatch { .. })
    ));
}

#[test]
fn dispatcher_picks_tiles_per_adapter() {
    use wgtile::tune::attention::{
        DECODE_TILES, FLASH_CANDIDATES, backward_tiles, flash_tiles, flash_tiles_for, kv_splits,
    };
    // H200-like: 48 KiB, 1024 invocations, 132 units.
    let h200 = AdapterProfile::fake_gpu().named("synthetic");
    // 128 rows, 4 per invocation (8 per invocation spilled on the H200).
    let t = flash_tiles(&h200, 128).unwrap();
    assert_eq!((t.br, t.tr, t.bc(), t.threads()), (128, 4, 64, 512));
    assert!(t.workgroup_bytes() <= 48 * 1024);
    assert_eq!(flash_tiles(&h200, 256).unwrap().tr, 4);
    // 32 KiB (lavapipe-sized): the 64-row tile.
    let small = AdapterProfile::fake_gpu()
        .named("synthetic")
        .with_units(8)
        .with_workgroup_storage(32 * 1024);
    assert_eq!(flash_tiles(&small, 128).unwrap().br, 64);
    // 128 invocations at most: the 64-invocation shape.
    let narrow = AdapterProfile::fake_gpu()
        .named("synthetic")
        .with_units(8)
        .with_invocations(128)
        .with_workgroup_storage(32 * 1024);
    assert_eq!(flash_tiles(&narrow, 64).unwrap().threads(), 64);
    assert!(flash_tiles(&h200, 257).is_none());
    // Decode: the 4-row tile, split over the keys until the GPU is full.
    let d = flash_tiles_for(&h200, 1, 128).unwrap();
    assert_eq!((d.br, d.nc, d.td, d.threads()), (4, 32, 4, 32));
    assert_eq!(d, wgtile::tune::attention::decode_tiles(128));
    assert_eq!(
        wgtile::tune::attention::decode_tiles(256),
        DECODE_TILES.for_value_dim(256)
    );
    let splits = kv_splits(&h200, 8, 32768, d);
    assert!(
        splits >= 16,
        "{splits} splits for one row per KV head on 132 units"
    );
    // A full prefill needs no split.
    assert_eq!(kv_splits(&h200, 4096, 4096, FLASH_CANDIDATES[0]), 1);
    // The decode kernel: 8 KV heads x 66 splits at 32k (4 workgroups per
    // unit, one wave); 4k keys: splits of 64 keys; short caches, or a grid
    // already full, no split.
    use wgtile::tune::attention::decode_splits;
    let dt = wgtile::tune::attention::decode_kernel_tiles(wgtile::DType::F16, 128);
    assert_eq!(decode_splits(&h200, 8, 32768, dt), 66);
    assert_eq!(decode_splits(&h200, 8, 4096, dt), 64);
    assert_eq!(decode_splits(&h200, 8, 64, dt), 1);
    assert_eq!(decode_splits(&h200, 2048, 32768, dt), 1);
    let b = backward_tiles(&h200, 128, 128).unwrap();
    assert!(b.workgroup_bytes() <= 32 * 1024 && b.threads() == 128);
    assert_eq!(backward_tiles(&narrow, 64, 64).unwrap().threads(), 128);
    // Tensor-core backward: 8 subgroups above D = 64 (fastest on the H200),
    // 4 at D = 64, a smaller tile where 48 KiB is not available, none
    // without the cooperative matrix.
    use wgtile::tune::attention::backward_coop_tiles;
    let tc = h200.clone().with_tensor_cores();
    assert_eq!(backward_coop_tiles(&tc, 128, 128).unwrap().subgroups, 8);
    assert_eq!(backward_coop_tiles(&tc, 64, 64).unwrap().subgroups, 4);
    let tc_small = small.clone().with_tensor_cores();
    let t = backward_coop_tiles(&tc_small, 128, 128).unwrap();
    assert!(
        t.workgroup_bytes(wgtile::tune::attention::BackwardCoopPass::DkDv, 128, 128) <= 32 * 1024
    );
    assert!(backward_coop_tiles(&h200, 64, 64).is_none());
    assert!(backward_coop_tiles(&tc, 64, 40).is_none());
}

#[test]
fn every_sequence_length_pair() {
    let Some(ctx) = common::ctx() else { return };
    let lens = [1, 17, 64, 100, 129];
    for (n, &sq) in lens.iter().enumerate() {
        for (m, &sk) in lens.iter().enumerate() {
            let opts = if (n + m) % 2 == 0 {
                AttentionOptions::new().causal(DiagonalAlignment::BottomRight)
            } else {
                AttentionOptions::new()
            };
            check(
                &ctx,
                &Case::new(1, 1, 1, sq, sk, 32, 24),
                &opts,
                None,
                (500 + 10 * n + m) as u64,
            );
        }
    }
}

/// `packed_dims` checks the head dims: the right widths run (the same as
/// `packed`), a fused QKV tensor passed whole as q is refused by name.
#[test]
fn packed_dims_refuse_a_wider_tensor() {
    let Some(ctx) = common::ctx() else { return };
    let (b, h, s, d) = (1, 2, 9, 16);
    let q = ctx
        .tensor(&common::random(b * s * h * d, 1), [b, s, h * d])
        .unwrap();
    let k = ctx
        .tensor(&common::random(b * s * h * d, 2), [b, s, h * d])
        .unwrap();
    let v = ctx
        .tensor(&common::random(b * s * h * d, 3), [b, s, h * d])
        .unwrap();
    let plain = ctx
        .attention(&q, &k, &v, &AttentionOptions::new().packed(h, h))
        .unwrap();
    let checked = ctx
        .attention(&q, &k, &v, &AttentionOptions::new().packed_dims(h, h, d, d))
        .unwrap();
    assert_eq!(
        plain.o.to_vec_blocking::<f32>().unwrap(),
        checked.o.to_vec_blocking::<f32>().unwrap()
    );
    let qkv = ctx
        .tensor(&common::random(b * s * 3 * h * d, 4), [b, s, 3 * h * d])
        .unwrap();
    let refused = ctx.attention(
        &qkv,
        &qkv,
        &qkv,
        &AttentionOptions::new().packed_dims(h, h, d, d),
    );
    assert!(
        matches!(refused, Err(wgtile::Error::InvalidArgument(ref m)) if m.contains("head dims")),
        "{refused:?}"
    );
    // Split first, then it runs.
    let parts = ctx.split(&qkv, 2, &[h * d, h * d, h * d]).unwrap();
    ctx.attention(
        &parts[0],
        &parts[1],
        &parts[2],
        &AttentionOptions::new().packed_dims(h, h, d, d),
    )
    .unwrap();
}

/// One fused projection `[B, S, Hq * D + Hkv * D + Hkv * Dv]` read in place
/// by every forward kernel (flash, naive, decode) in f32 and f16, and
/// through copies in bf16, against the f64 reference of the three parts;
/// widths that do not add up and unpacked options are refused.
#[test]
fn fused_qkv_reads_in_place() {
    let Some(ctx) = common::ctx() else { return };
    let (hq, hkv, d, dv) = (4, 2, 16, 8);
    let width = hq * d + hkv * d + hkv * dv;
    for (b, s, kernel) in [
        (2, 23, AttentionKernel::Auto),
        (1, 13, AttentionKernel::Naive),
        (3, 3, AttentionKernel::Decode),
    ] {
        let opts = AttentionOptions::new()
            .packed_dims(hq, hkv, d, dv)
            .causal(DiagonalAlignment::BottomRight)
            .kernel(kernel);
        let data = common::random(b * s * width, 300 + s as u64);
        for (dtype, tol) in [(DType::F32, 1e-5), (DType::F16, 2e-3), (DType::BF16, 1e-2)] {
            if dtype == DType::F16 && !ctx.profile().shader_f16 {
                continue;
            }
            let (qkv, host) = common::upload(&ctx, &data, &[b, s, width], dtype);
            // The three parts heads-first for the reference.
            let part = |start: usize, heads: usize, dim: usize| {
                let mut out = vec![0.0; b * heads * s * dim];
                for bi in 0..b {
                    for si in 0..s {
                        for hi in 0..heads {
                            for di in 0..dim {
                                out[((bi * heads + hi) * s + si) * dim + di] =
                                    host[(bi * s + si) * width + start + hi * dim + di];
                            }
                        }
                    }
                }
                out
            };
            let (qh, kh, vh) = (
                part(0, hq, d),
                part(hq * d, hkv, d),
                part(hq * d + hkv * d, hkv, dv),
            );
            let (want, _) = reference(
                &Case::new(b, hq, hkv, s, s, d, dv),
                &qh,
                &kh,
                &vh,
                &opts,
                None,
            );
            // The reference is heads-first, the result [B, S, Hq * Dv].
            let want: Vec<f64> = (0..b * s * hq * dv)
                .map(|idx| {
                    let (bi, si) = (idx / (s * hq * dv), (idx / (hq * dv)) % s);
                    let (hi, di) = ((idx / dv) % hq, idx % dv);
                    want[((bi * hq + hi) * s + si) * dv + di]
                })
                .collect();
            let (plan, out) = ctx.attention_qkv_plan(&qkv, &opts).unwrap();
            assert_eq!(out.o.shape(), [b, s, hq * dv]);
            if dtype != DType::BF16 {
                assert!(!plan.label().contains("copied"), "{}", plan.label());
            }
            if kernel == AttentionKernel::Decode && dtype != DType::BF16 {
                assert!(
                    plan.label().starts_with("attention decode"),
                    "{}",
                    plan.label()
                );
            }
            ctx.fill(&out.o, f32::NAN).unwrap();
            plan.run().unwrap();
            let got = out.o.to_f32_vec_blocking().unwrap();
            common::assert_close(
                &format!("fused qkv {kernel:?} {dtype:?} S = {s}"),
                &got,
                &want,
                |_| tol,
            );
        }
    }
    // D = Dv = width / (Hq + 2 Hkv) without packed_dims.
    let qkv = ctx
        .tensor(&common::random(2 * 5 * 48, 7), [2, 5, 48])
        .unwrap();
    let out = ctx
        .attention_qkv(&qkv, &AttentionOptions::new().packed(2, 1))
        .unwrap();
    assert_eq!(out.o.shape(), [2, 5, 24]);
    // A width that is not Hq * D + Hkv * D + Hkv * Dv, unpacked options.
    assert!(matches!(
        ctx.attention_qkv(&qkv, &AttentionOptions::new().packed_dims(2, 1, 12, 8)),
        Err(Error::ShapeMismatch { .. })
    ));
    assert!(matches!(
        ctx.attention_qkv(&qkv, &AttentionOptions::new().packed(3, 2)),
        Err(Error::ShapeMismatch { .. })
    ));
    assert!(matches!(
        ctx.attention_qkv(&qkv, &AttentionOptions::new()),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        ctx.attention_qkv(
            &qkv.reshape([10, 48]).unwrap(),
            &AttentionOptions::new().packed(2, 1)
        ),
        Err(Error::InvalidArgument(_))
    ));
}
