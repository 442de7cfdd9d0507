//! The decode kernel (few query rows over a long cache): edge shapes, the
//! swept tile variants, where it falls back or refuses, and the KV cache
//! from prefill through decode steps.

use crate::common;
use crate::helpers::{Case, HostMask, check_decode, mask_values, reference};

use wgtile::{AttentionKernel, AttentionOptions, DType, DiagonalAlignment, Error, KvCache};

#[test]
fn decode_kernel_edge_shapes() {
    let Some(ctx) = common::ctx() else { return };
    let br = DiagonalAlignment::BottomRight;
    let f16 = |mut c: Case| {
        c.dtype = DType::F16;
        c
    };
    // GQA 4:1, one key, causal bottom-right.
    check_decode(
        &ctx,
        &Case::new(1, 8, 2, 1, 1, 64, 64),
        &AttentionOptions::new().causal(br),
        None,
        200,
    );
    // MQA, Dv != D, a split shorter than a block.
    check_decode(
        &ctx,
        &Case::new(1, 4, 1, 1, 17, 80, 48),
        &AttentionOptions::new(),
        None,
        201,
    );
    // Several batches, key lengths incl. 0 and 1, bottom-right causal, a
    // prime cache length over many blocks and splits.
    check_decode(
        &ctx,
        &Case::new(3, 8, 2, 1, 1031, 128, 64),
        &AttentionOptions::new()
            .causal(br)
            .key_lengths(&[1031, 0, 1]),
        None,
        202,
    );
    // Sq = 3 with bottom-right causal (speculative decoding) and a window.
    check_decode(
        &ctx,
        &Case::new(1, 4, 1, 3, 129, 64, 64),
        &AttentionOptions::new().causal(br).window(Some(40), None),
        None,
        203,
    );
    // 32 packed rows (4 row chunks; Auto would take the flash path).
    check_decode(
        &ctx,
        &Case::new(1, 16, 1, 2, 200, 32, 32),
        &AttentionOptions::new().causal(br),
        None,
        204,
    );
    // Boolean mask per (batch, key), additive mask [Sq, Sk].
    let c = Case::new(2, 4, 2, 1, 300, 64, 64);
    check_decode(
        &ctx,
        &c,
        &AttentionOptions::new(),
        Some(HostMask {
            additive: false,
            dims: [2, 1, 1, 300],
            shape: vec![2, 1, 1, 300],
            data: mask_values(600, 205, false),
        }),
        206,
    );
    let c = Case::new(1, 6, 2, 3, 150, 64, 64);
    check_decode(
        &ctx,
        &c,
        &AttentionOptions::new().causal(br),
        Some(HostMask {
            additive: true,
            dims: [1, 1, 3, 150],
            shape: vec![3, 150],
            data: mask_values(450, 207, true),
        }),
        208,
    );
    if ctx.profile().shader_f16 {
        // f16: GQA, Sq = 3, soft-cap, prime cache, D = 128 and D = 80 / Dv = 256.
        check_decode(
            &ctx,
            &f16(Case::new(1, 8, 2, 3, 1031, 128, 128)),
            &AttentionOptions::new().causal(br).softcap(5.0),
            None,
            209,
        );
        check_decode(
            &ctx,
            &f16(Case::new(2, 5, 1, 1, 129, 80, 256)),
            &AttentionOptions::new().key_lengths(&[129, 0]),
            None,
            210,
        );
        check_decode(
            &ctx,
            &f16(Case::new(1, 4, 1, 1, 17, 64, 64)),
            &AttentionOptions::new().causal(br),
            None,
            211,
        );
    }
    // f32 at the largest head dims (D = Dv = 256).
    check_decode(
        &ctx,
        &Case::new(1, 2, 1, 1, 70, 256, 256),
        &AttentionOptions::new(),
        None,
        212,
    );
    // Logits climbing along the cache (an additive ramp of 0.4 per key,
    // about 10 per 16-key block in log2 units): the kernel's running max
    // moves at every block (its lazy-rescale path), then a sawtooth (a climb
    // and a drop every 40 keys) and a falling ramp (the max set by the
    // first block, later probabilities tiny), in f32 and f16.
    let ramps: [fn(usize) -> f32; 3] = [
        |j| 0.4 * j as f32,
        |j| 0.6 * (j % 40) as f32 - 20.0 * (j / 40) as f32,
        |j| -0.4 * j as f32,
    ];
    for (i, ramp) in ramps.into_iter().enumerate() {
        for dtype in [DType::F32, DType::F16] {
            if dtype == DType::F16 && !ctx.profile().shader_f16 {
                continue;
            }
            let mut c = Case::new(1, 8, 2, 1, 300, 64, 64);
            c.dtype = dtype;
            // f32 with the dispatcher's reduction (shuffles where the
            // adapter has subgroups), f16 through workgroup memory: the
            // rescale path of both.
            let mut opts = AttentionOptions::new();
            if dtype == DType::F16 {
                opts = opts.decode_shuffle(false);
            }
            check_decode(
                &ctx,
                &c,
                &opts,
                Some(key_bias((0..300).map(ramp).collect())),
                213 + i as u64,
            );
        }
    }
}

/// An additive mask of one value per key ([1, Sk], broadcast over batches,
/// heads and query rows).
fn key_bias(data: Vec<f32>) -> HostMask {
    let sk = data.len();
    HostMask {
        additive: true,
        dims: [1, 1, 1, sk],
        shape: vec![1, sk],
        data,
    }
}

#[test]
fn decode_tile_variants() {
    let Some(ctx) = common::ctx() else { return };
    use wgtile::tune::attention::{DECODE_SWEEP, DecodeTiles, decode_shuffle_fits};
    let br = DiagonalAlignment::BottomRight;
    // The variants the benchmark sweeps that together take every value of
    // each parameter (workgroups of 256, 128, 64 and 32; 2, 4 and 8 lanes
    // per key; V prefetched or not; each variant is one more kernel to
    // compile, slow on a cold lavapipe cache), on 12 packed rows (two row
    // quads of a 6-row chunk, the last two lanes absent), key lengths and
    // bottom-right causal over a prime cache crossing blocks and splits.
    let mut c = Case::new(2, 8, 2, 3, 263, 64, 64);
    if ctx.profile().shader_f16 {
        c.dtype = DType::F16;
    }
    for (i, t) in DECODE_SWEEP.iter().enumerate() {
        if !matches!(i, 2 | 3 | 4 | 6 | 7) || t.threads > ctx.profile().max_invocations {
            continue;
        }
        // Both partial-dot reductions: subgroup shuffles (where the adapter
        // allows them) on every other variant, workgroup memory on the rest.
        let shuffle = i % 2 == 0 && decode_shuffle_fits(ctx.profile(), *t);
        let opts = AttentionOptions::new()
            .causal(br)
            .key_lengths(&[263, 70])
            .decode_tiles(*t)
            .decode_shuffle(shuffle);
        check_decode(&ctx, &c, &opts, None, 300 + i as u64);
    }
    // f32 with an additive mask on two of them, through workgroup memory.
    let c = Case::new(1, 4, 1, 1, 97, 32, 32);
    for (i, t) in DECODE_SWEEP.iter().take(3).enumerate().skip(1) {
        let opts = AttentionOptions::new()
            .decode_tiles(*t)
            .decode_shuffle(false);
        check_decode(
            &ctx,
            &c,
            &opts,
            Some(key_bias(mask_values(97, 320 + i as u64, true))),
            330 + i as u64,
        );
    }
    // A shape the kernel does not support is an error, not a guess.
    let q = ctx.zeros([1, 2, 1, 64], DType::F32).unwrap();
    let k = ctx.zeros([1, 1, 30, 64], DType::F32).unwrap();
    let bad = DecodeTiles {
        threads: 96,
        lk: 4,
        prefetch_v: true,
        per_unit: 4,
    };
    let err = ctx
        .attention_plan(&q, &k, &k, &AttentionOptions::new().decode_tiles(bad))
        .unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
}

#[test]
fn decode_kernel_falls_back_or_refuses() {
    let Some(ctx) = common::ctx() else { return };
    // D = 7 is not a multiple of 4 f32 elements: Auto takes the flash path
    // (and stays correct: check() covers it in value_dim_differs), Decode
    // refuses with an error.
    let q = ctx.zeros([1, 2, 1, 7], DType::F32).unwrap();
    let k = ctx.zeros([1, 1, 9, 7], DType::F32).unwrap();
    let (plan, _) = ctx
        .attention_plan(&q, &k, &k, &AttentionOptions::new())
        .unwrap();
    assert!(
        plan.label().starts_with("attention flash"),
        "{}",
        plan.label()
    );
    let err = ctx
        .attention_plan(
            &q,
            &k,
            &k,
            &AttentionOptions::new().kernel(AttentionKernel::Decode),
        )
        .unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
    // FlashSplit keeps the flash-decoding path.
    let q = ctx.zeros([1, 2, 1, 64], DType::F32).unwrap();
    let k = ctx.zeros([1, 1, 300, 64], DType::F32).unwrap();
    let (plan, _) = ctx
        .attention_plan(
            &q,
            &k,
            &k,
            &AttentionOptions::new()
                .kernel(AttentionKernel::FlashSplit)
                .kv_splits(2),
        )
        .unwrap();
    assert!(
        plan.label().starts_with("attention flash-decoding"),
        "{}",
        plan.label()
    );
}

#[test]
fn kv_cache_prefill_then_decode_equals_full_attention() {
    let Some(ctx) = common::ctx() else { return };
    let (b, hq, hkv, d) = (1, 4, 2, 32);
    let total = 70;
    let kh = common::random(b * hkv * total * d, 110);
    let vh = common::random(b * hkv * total * d, 111);
    let slice = |x: &[f32], from: usize, n: usize| {
        let mut out = Vec::new();
        for z in 0..b * hkv {
            out.extend_from_slice(&x[(z * total + from) * d..(z * total + from + n) * d]);
        }
        ctx.tensor(&out, [b, hkv, n, d]).unwrap()
    };
    let mut cache = KvCache::new(&ctx, b, hkv, d, d, 8, DType::F32).unwrap();
    let opts = AttentionOptions::new()
        .causal(DiagonalAlignment::BottomRight)
        .with_lse();
    // Prefill 60 positions (grows 8 -> 60), then 10 decode steps of one.
    let mut pos = 0;
    for step in std::iter::once(60).chain(std::iter::repeat_n(1, 10)) {
        cache
            .append(&slice(&kh, pos, step), &slice(&vh, pos, step))
            .unwrap();
        pos += step;
        let qh = common::random(b * hq * step * d, 120 + pos as u64);
        let q = ctx.tensor(&qh, [b, hq, step, d]).unwrap();
        let (plan, got) = ctx.attention_cached_plan(&q, &cache, &opts).unwrap();
        // Decode steps (2 rows per KV head) run the decode kernel, the
        // 60-position prefill (120 rows) the flash kernel.
        let want_kernel = if step == 1 {
            "attention decode"
        } else {
            "attention flash"
        };
        assert!(plan.label().starts_with(want_kernel), "{}", plan.label());
        ctx.fill(&got.o, f32::NAN).unwrap();
        ctx.fill(got.lse.as_ref().unwrap(), f32::NAN).unwrap();
        plan.run().unwrap();
        let c = Case::new(b, hq, hkv, step, pos, d, d);
        let kc: Vec<f32> = (0..b * hkv)
            .flat_map(|z| kh[z * total * d..(z * total + pos) * d].to_vec())
            .collect();
        let vc: Vec<f32> = (0..b * hkv)
            .flat_map(|z| vh[z * total * d..(z * total + pos) * d].to_vec())
            .collect();
        let (want, want_lse) = reference(&c, &qh, &kc, &vc, &opts, None);
        common::assert_close(
            "kv cache O",
            &got.o.to_vec_blocking::<f32>().unwrap(),
            &want,
            |_| 2e-5,
        );
        common::assert_close(
            "kv cache lse",
            &got.lse.unwrap().to_vec_blocking::<f32>().unwrap(),
            &want_lse,
            |_| 2e-5,
        );
    }
    assert_eq!(cache.len(), 70);
    assert!(cache.capacity() >= 70);
}

/// A cloned KV cache owns its buffers: appends to the clone and to the
/// original each land only in their own cache, and the positions copied at
/// clone time are equal.
#[test]
fn kv_cache_clones_do_not_alias() {
    let Some(ctx) = common::ctx() else { return };
    let (b, h, d) = (1, 2, 8);
    let rows = |n: usize, seed: u64| {
        let data = common::random(b * h * n * d, seed);
        let t = ctx.tensor(&data, [b, h, n, d]).unwrap();
        (t, data)
    };
    let mut original = KvCache::new(&ctx, b, h, d, d, 4, DType::F32).unwrap();
    let (k0, k0_host) = rows(3, 1);
    let (v0, _) = rows(3, 2);
    original.append(&k0, &v0).unwrap();
    let mut clone = original.try_clone().unwrap();
    let (k1, k1_host) = rows(1, 3);
    let (v1, _) = rows(1, 4);
    let (k2, k2_host) = rows(2, 5);
    let (v2, _) = rows(2, 6);
    clone.append(&k1, &v1).unwrap();
    original.append(&k2, &v2).unwrap();
    assert_eq!((original.len(), clone.len()), (5, 4));
    let keys = |c: &KvCache| {
        let cap = c.capacity();
        let all: Vec<f32> = c.keys().to_vec_blocking().unwrap();
        // Position p of head hh: all[(hh * cap + p) * d..][..d].
        move |hh: usize, p: usize| all[(hh * cap + p) * d..(hh * cap + p + 1) * d].to_vec()
    };
    let (ko, kc) = (keys(&original), keys(&clone));
    let host = |data: &[f32], n: usize, hh: usize, p: usize| {
        data[(hh * n + p) * d..(hh * n + p + 1) * d].to_vec()
    };
    for hh in 0..h {
        for p in 0..3 {
            assert_eq!(
                ko(hh, p),
                host(&k0_host, 3, hh, p),
                "original head {hh} position {p}"
            );
            assert_eq!(
                kc(hh, p),
                host(&k0_host, 3, hh, p),
                "clone head {hh} position {p}"
            );
        }
        assert_eq!(
            kc(hh, 3),
            host(&k1_host, 1, hh, 0),
            "clone head {hh}: its own append"
        );
        assert_eq!(
            ko(hh, 3),
            host(&k2_host, 2, hh, 0),
            "original head {hh}: its own append"
        );
        assert_eq!(
            ko(hh, 4),
            host(&k2_host, 2, hh, 1),
            "original head {hh}: its own append"
        );
    }
}

/// A cache filled sequence-major ([B, n, Hkv, D] steps) holds what one
/// filled heads-first does: the same attention, bit for bit.
#[test]
fn kv_cache_takes_sequence_major_steps() {
    let Some(ctx) = common::ctx() else { return };
    let (b, hkv, d) = (2, 3, 8);
    let mut heads_first = KvCache::new(&ctx, b, hkv, d, d, 4, DType::F32).unwrap();
    let mut seq_major = KvCache::new(&ctx, b, hkv, d, d, 4, DType::F32).unwrap();
    for (step, n) in [5usize, 1, 3].into_iter().enumerate() {
        let kh = common::random(b * n * hkv * d, 200 + step as u64);
        let vh = common::random(b * n * hkv * d, 300 + step as u64);
        let (ks, vs) = (
            ctx.tensor(&kh, [b, n, hkv, d]).unwrap(),
            ctx.tensor(&vh, [b, n, hkv, d]).unwrap(),
        );
        seq_major.append_seq_major(&ctx, &ks, &vs).unwrap();
        // The same values heads-first, transposed on the host.
        let heads = |x: &[f32]| {
            let mut out = vec![0.0; x.len()];
            for z in 0..b {
                for t in 0..n {
                    for h in 0..hkv {
                        for c in 0..d {
                            out[((z * hkv + h) * n + t) * d + c] =
                                x[((z * n + t) * hkv + h) * d + c];
                        }
                    }
                }
            }
            ctx.tensor(&out, [b, hkv, n, d]).unwrap()
        };
        heads_first.append(&heads(&kh), &heads(&vh)).unwrap();
    }
    let q = ctx
        .tensor(&common::random(b * hkv * 2 * d, 9), [b, hkv, 2, d])
        .unwrap();
    let opts = AttentionOptions::new().causal(DiagonalAlignment::BottomRight);
    let a = ctx
        .attention_cached(&q, &heads_first, &opts)
        .unwrap()
        .o
        .to_vec_blocking::<f32>()
        .unwrap();
    let s = ctx
        .attention_cached(&q, &seq_major, &opts)
        .unwrap()
        .o
        .to_vec_blocking::<f32>()
        .unwrap();
    assert_eq!(a, s);
    let bad = ctx.zeros([b, 1, d], DType::F32).unwrap();
    assert!(seq_major.append_seq_major(&ctx, &bad, &bad).is_err());
}

/// A bf16 KV cache from prefill through decode steps (heads-first and
/// sequence-major appends, GQA, prime lengths) against the f64 reference on
/// the values it holds: decode steps read the cache's bf16 words in the
/// decode kernel (D and Dv multiples of 8) or stage it to f32 (other dims,
/// a forced flash kernel, the prefill). o is bf16: the bound is one bf16
/// rounding (2^-8 relative) plus the f32 kernels' 2e-5; the logsumexp is
/// f32 (2e-5).
#[test]
fn kv_cache_in_bf16() {
    let Some(ctx) = common::ctx() else { return };
    for (d, dv, words) in [(40usize, 24usize, true), (12, 20, false)] {
        bf16_cache_steps(&ctx, d, dv, words);
    }
    // Mixed dtypes and odd head dims are named errors.
    let mut cache = KvCache::new(&ctx, 1, 2, 8, 8, 4, DType::BF16).unwrap();
    let k = ctx.zeros([1, 2, 3, 8], DType::BF16).unwrap();
    cache.append(&k, &k).unwrap();
    let mut others = vec![DType::F32];
    if ctx.profile().shader_f16 {
        others.push(DType::F16);
    }
    for dtype in others {
        let q = ctx.zeros([1, 2, 1, 8], dtype).unwrap();
        let bad = ctx.attention_cached(&q, &cache, &AttentionOptions::new());
        assert!(
            matches!(bad, Err(Error::DTypeMismatch { .. })),
            "{dtype} query, bf16 cache: {:?}",
            bad.map(|_| ())
        );
        let wrong = ctx.zeros([1, 2, 1, 8], dtype).unwrap();
        let bad = cache.append(&wrong, &wrong);
        assert!(matches!(bad, Err(Error::DTypeMismatch { .. })), "{bad:?}");
        let q = ctx.zeros([1, 2, 1, 8], DType::BF16).unwrap();
        let mask = ctx.zeros([1, 1, 1, 3], dtype).unwrap();
        let opts = AttentionOptions::new().additive_mask(&mask);
        let bad = ctx.attention_cached(&q, &cache, &opts);
        assert!(
            matches!(bad, Err(Error::DTypeMismatch { .. })),
            "{dtype} mask, bf16 cache: {:?}",
            bad.map(|_| ())
        );
    }
    let bad = KvCache::new(&ctx, 1, 2, 15, 16, 4, DType::BF16);
    assert!(matches!(bad, Err(Error::InvalidArgument(_))), "{bad:?}");
}

/// One bf16 cache of head dims `d`, `dv`: a 37-position prefill, then
/// decode steps of one position (every other one appended sequence-major),
/// the last with a bf16 additive mask over the keys, again without subgroup
/// shuffles and again with the flash kernel forced. `words`: whether the decode kernel reads the bf16
/// words (D and Dv multiples of 8).
fn bf16_cache_steps(ctx: &wgtile::Context, d: usize, dv: usize, words: bool) {
    let (b, hq, hkv) = (2, 6, 2);
    let mut cache = KvCache::new(ctx, b, hkv, d, dv, 8, DType::BF16).unwrap();
    // The values the cache holds, [B, Hkv, pos, D] per position appended.
    let (mut kc, mut vc): (Vec<Vec<f32>>, Vec<Vec<f32>>) =
        (vec![Vec::new(); b * hkv], vec![Vec::new(); b * hkv]);
    let opts = AttentionOptions::new()
        .causal(DiagonalAlignment::BottomRight)
        .with_lse();
    let mut pos = 0;
    let steps = [37usize, 1, 1, 1, 1];
    for (s, &n) in steps.iter().enumerate() {
        let seed = 500 + 10 * s as u64;
        let seq_major = s % 2 == 0 && s > 0;
        // Host data [B, Hkv, n, D] (heads-first), uploaded either way.
        let (kh, vh) = (
            common::random(b * hkv * n * d, seed),
            common::random(b * hkv * n * dv, seed + 1),
        );
        let up = |x: &[f32], w: usize| {
            if seq_major {
                let mut t = vec![0.0; x.len()];
                for z in 0..b {
                    for h in 0..hkv {
                        for p in 0..n {
                            for c in 0..w {
                                t[((z * n + p) * hkv + h) * w + c] =
                                    x[((z * hkv + h) * n + p) * w + c];
                            }
                        }
                    }
                }
                common::upload(ctx, &t, &[b, n, hkv, w], DType::BF16).0
            } else {
                common::upload(ctx, x, &[b, hkv, n, w], DType::BF16).0
            }
        };
        let (kt, vt) = (up(&kh, d), up(&vh, dv));
        if seq_major {
            cache.append_seq_major(ctx, &kt, &vt).unwrap();
        } else {
            cache.append(&kt, &vt).unwrap();
        }
        for z in 0..b * hkv {
            let held = |x: &[f32], w: usize| -> Vec<f32> {
                x[z * n * w..(z + 1) * n * w]
                    .iter()
                    .map(|&v| DType::BF16.round(v))
                    .collect()
            };
            kc[z].extend(held(&kh, d));
            vc[z].extend(held(&vh, dv));
        }
        pos += n;
        let (qt, qh) = common::upload(
            ctx,
            &common::random(b * hq * n * d, seed + 2),
            &[b, hq, n, d],
            DType::BF16,
        );
        let last = s + 1 == steps.len();
        let mut runs = vec![(opts.clone(), None)];
        if last {
            let data = mask_values(b * pos, seed + 3, true);
            let (mt, held) = common::upload(ctx, &data, &[b, 1, 1, pos], DType::BF16);
            let masked = opts.clone().additive_mask(&mt);
            let host = HostMask {
                additive: true,
                dims: [b, 1, 1, pos],
                shape: vec![b, 1, 1, pos],
                data: held,
            };
            runs.push((masked.clone(), Some(host.clone())));
            // The decode kernel's plain variant (no subgroup shuffles).
            runs.push((masked.clone().decode_shuffle(false), Some(host.clone())));
            runs.push((masked.kernel(AttentionKernel::Flash), Some(host)));
        }
        let c = Case::new(b, hq, hkv, n, pos, d, dv);
        let (kf, vf): (Vec<f32>, Vec<f32>) = (kc.concat(), vc.concat());
        for (o, mask) in runs {
            let (plan, got) = ctx.attention_cached_plan(&qt, &cache, &o).unwrap();
            let what = format!("bf16 cache D {d} Dv {dv} step {s}: {}", plan.label());
            let direct = n == 1 && words && o.kernel == AttentionKernel::Auto;
            assert_eq!(
                plan.label().contains("read as words by the decode kernel"),
                direct,
                "{what}"
            );
            assert_eq!(plan.label().contains("staged to f32"), !direct, "{what}");
            assert_eq!(got.o.dtype(), DType::BF16, "{what}");
            ctx.fill(&got.o, f32::NAN).unwrap();
            ctx.fill(got.lse.as_ref().unwrap(), f32::NAN).unwrap();
            plan.run().unwrap();
            let (want, want_lse) = reference(&c, &qh, &kf, &vf, &o, mask.as_ref());
            common::assert_close(
                &format!("{what} o"),
                &got.o.to_f32_vec_blocking().unwrap(),
                &want,
                |i| 2f64.powi(-8) * want[i].abs() + 2e-5,
            );
            common::assert_close(
                &format!("{what} lse"),
                &got.lse.unwrap().to_vec_blocking::<f32>().unwrap(),
                &want_lse,
                |_| 2e-5,
            );
        }
    }
    assert_eq!(cache.len(), pos);
}
