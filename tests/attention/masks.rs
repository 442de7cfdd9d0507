//! Which keys a query row sees: causal masks in both diagonal alignments,
//! sliding windows and soft-cap, boolean and additive masks of every
//! broadcast shape, key lengths (0 included), and rows that see no key.

use crate::common;
use crate::helpers::{Case, HostMask, check, mask_values, run_poisoned};

use wgtile::{AttentionKernel, AttentionOptions, DType, DiagonalAlignment};

#[test]
fn causal_both_alignments() {
    let Some(ctx) = common::ctx() else { return };
    for align in [DiagonalAlignment::TopLeft, DiagonalAlignment::BottomRight] {
        for (sq, sk) in [(100, 100), (17, 129), (129, 64), (1, 100)] {
            check(
                &ctx,
                &Case::new(1, 2, 1, sq, sk, 64, 64),
                &AttentionOptions::new().causal(align),
                None,
                7,
            );
        }
    }
}

/// The causal diagonal at any offset (a KV cache with a past, ONNX's
/// rule), negative ones leaving the first rows without keys, and a window
/// around an offset diagonal.
#[test]
fn causal_at_any_offset() {
    let Some(ctx) = common::ctx() else { return };
    for (sq, sk) in [(17, 129), (100, 100), (129, 64)] {
        for d in [-5i64, 0, 3, 40, 200] {
            let align = DiagonalAlignment::Offset(d);
            check(
                &ctx,
                &Case::new(1, 2, 1, sq, sk, 32, 32),
                &AttentionOptions::new().causal(align),
                None,
                13,
            );
        }
    }
    let opts = AttentionOptions::new()
        .window(Some(9), Some(2))
        .alignment(DiagonalAlignment::Offset(-7));
    check(&ctx, &Case::new(1, 2, 1, 50, 70, 32, 32), &opts, None, 17);
}

#[test]
fn sliding_windows_and_softcap() {
    let Some(ctx) = common::ctx() else { return };
    let c = Case::new(1, 2, 1, 100, 129, 32, 32);
    check(
        &ctx,
        &c,
        &AttentionOptions::new().window(Some(20), Some(5)),
        None,
        11,
    );
    check(
        &ctx,
        &c,
        &AttentionOptions::new()
            .window(Some(10), None)
            .causal(DiagonalAlignment::BottomRight),
        None,
        12,
    );
    check(
        &ctx,
        &c,
        &AttentionOptions::new()
            .window(None, Some(0))
            .alignment(DiagonalAlignment::BottomRight),
        None,
        13,
    );
    check(
        &ctx,
        &c,
        &AttentionOptions::new().softcap(0.5).scale(3.0),
        None,
        14,
    );
    check(
        &ctx,
        &c,
        &AttentionOptions::new()
            .softcap(30.0)
            .causal(DiagonalAlignment::TopLeft),
        None,
        15,
    );
}

#[test]
fn masks_of_every_broadcast_shape() {
    let Some(ctx) = common::ctx() else { return };
    let c = Case::new(2, 2, 1, 17, 100, 32, 32);
    let shapes: [(Vec<usize>, [usize; 4]); 5] = [
        (vec![17, 100], [1, 1, 17, 100]),
        (vec![2, 17, 100], [2, 1, 17, 100]),
        (vec![1, 2, 17, 100], [1, 2, 17, 100]),
        (vec![2, 2, 17, 100], [2, 2, 17, 100]),
        (vec![2, 1, 1, 100], [2, 1, 1, 100]),
    ];
    for (n, (shape, dims)) in shapes.into_iter().enumerate() {
        for additive in [false, true] {
            let data = mask_values(dims.iter().product(), 40 + n as u64, additive);
            let m = HostMask {
                additive,
                dims,
                shape: shape.clone(),
                data,
            };
            let opts = if n == 3 {
                AttentionOptions::new().causal(DiagonalAlignment::BottomRight)
            } else {
                AttentionOptions::new()
            };
            check(&ctx, &c, &opts, Some(m), 20 + n as u64);
        }
    }
}

#[test]
fn key_padding_lengths_including_zero() {
    let Some(ctx) = common::ctx() else { return };
    let c = Case::new(3, 2, 1, 65, 100, 32, 32);
    check(
        &ctx,
        &c,
        &AttentionOptions::new().key_lengths(&[100, 0, 37]),
        None,
        50,
    );
    check(
        &ctx,
        &c,
        &AttentionOptions::new()
            .key_lengths(&[64, 1, 0])
            .causal(DiagonalAlignment::TopLeft),
        None,
        51,
    );
    // Bottom-right with key lengths: each batch aligned to its own last key
    // (variable-length decoding), with and without a window.
    check(
        &ctx,
        &c,
        &AttentionOptions::new()
            .key_lengths(&[64, 37, 0])
            .causal(DiagonalAlignment::BottomRight),
        None,
        52,
    );
    check(
        &ctx,
        &c,
        &AttentionOptions::new()
            .key_lengths(&[50, 100, 7])
            .causal(DiagonalAlignment::BottomRight)
            .window(Some(9), Some(0)),
        None,
        53,
    );
}

#[test]
fn all_masked_rows_give_zeros_and_minus_infinity() {
    let Some(ctx) = common::ctx() else { return };
    // Top-left causal with a window entirely to the right: rows see nothing
    // when the window [i + 3, i + 5] starts past the last key.
    let c = Case::new(1, 1, 1, 40, 20, 16, 16);
    let opts = AttentionOptions::new().window(Some(0), Some(5)).with_lse();
    let q = ctx
        .rand_uniform([1, 1, 40, 16], -1.0, 1.0, DType::F32, 1)
        .unwrap();
    let k = ctx
        .rand_uniform([1, 1, 20, 16], -1.0, 1.0, DType::F32, 2)
        .unwrap();
    let v = ctx
        .rand_uniform([1, 1, 20, 16], -1.0, 1.0, DType::F32, 3)
        .unwrap();
    // Rows i >= 20 see no key (window [i, i + 5] past Sk = 20).
    let opts = opts.clone();
    for kernel in [
        AttentionKernel::Flash,
        AttentionKernel::Naive,
        AttentionKernel::Auto,
    ] {
        let (o, lse) = run_poisoned(&ctx, &q, &k, &v, &opts.clone().kernel(kernel).kv_splits(2));
        for i in 20..40 {
            assert!(
                o[i * 16..(i + 1) * 16].iter().all(|&x| x == 0.0),
                "{kernel:?} row {i}: {:?}",
                &o[i * 16..(i + 1) * 16]
            );
            assert_eq!(lse[i], f32::NEG_INFINITY, "{kernel:?} row {i}");
        }
        assert!(o[..20 * 16].iter().all(|x| x.is_finite()));
    }
    check(&ctx, &c, &opts, None, 80);
    // Sk = 0: zeros and -inf, as a sum over nothing.
    let k0 = ctx.zeros([1, 1, 0, 16], DType::F32).unwrap();
    for kernel in [AttentionKernel::Flash, AttentionKernel::Naive] {
        let (o, lse) = run_poisoned(
            &ctx,
            &q,
            &k0,
            &k0,
            &AttentionOptions::new().with_lse().kernel(kernel),
        );
        assert!(o.iter().all(|&x| x == 0.0));
        assert!(lse.iter().all(|&x| x == f32::NEG_INFINITY));
    }
}

/// `with_probabilities`: P = softmax(mask(scale q k^T)) against f64, GQA
/// (two query heads per KV head), a causal band whose first rows see no
/// key (zeros), and o = P V as the kernels give it.
#[test]
fn attention_returns_its_probabilities() {
    let Some(ctx) = common::ctx() else { return };
    let (b, hq, hkv, sq, sk, d) = (1, 4, 2, 6, 9, 8);
    let qh = common::random(b * hq * sq * d, 71);
    let kh = common::random(b * hkv * sk * d, 72);
    let vh = common::random(b * hkv * sk * d, 73);
    let q = ctx.tensor(&qh, [b, hq, sq, d]).unwrap();
    let k = ctx.tensor(&kh, [b, hkv, sk, d]).unwrap();
    let v = ctx.tensor(&vh, [b, hkv, sk, d]).unwrap();
    let offset = -2i64;
    let opts = AttentionOptions::new().causal(DiagonalAlignment::Offset(offset));
    let out = ctx
        .attention(&q, &k, &v, &opts.clone().with_probabilities())
        .unwrap();
    let probs = out
        .probs
        .expect("asked for")
        .to_vec_blocking::<f32>()
        .unwrap();
    assert_eq!(probs.len(), b * hq * sq * sk);
    let scale = 1.0 / (d as f64).sqrt();
    for h in 0..hq {
        let kv = h / (hq / hkv);
        for i in 0..sq {
            let visible: Vec<usize> = (0..sk).filter(|&j| j as i64 <= i as i64 + offset).collect();
            let logits: Vec<f64> = visible
                .iter()
                .map(|&j| {
                    (0..d)
                        .map(|c| {
                            f64::from(qh[(h * sq + i) * d + c])
                                * f64::from(kh[(kv * sk + j) * d + c])
                        })
                        .sum::<f64>()
                        * scale
                })
                .collect();
            let m = logits.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let z: f64 = logits.iter().map(|l| (l - m).exp()).sum();
            let row = &probs[(h * sq + i) * sk..(h * sq + i + 1) * sk];
            for (j, &got) in row.iter().enumerate() {
                let want = visible
                    .iter()
                    .position(|&x| x == j)
                    .map_or(0.0, |p| (logits[p] - m).exp() / z);
                assert!(
                    (f64::from(got) - want).abs() <= 1e-6,
                    "h {h} row {i} key {j}: {got} vs {want}"
                );
            }
        }
    }
    // The output is the one the default path gives.
    let plain = ctx
        .attention(&q, &k, &v, &opts)
        .unwrap()
        .o
        .to_vec_blocking::<f32>()
        .unwrap();
    let with = out.o.to_vec_blocking::<f32>().unwrap();
    for (a, w) in plain.iter().zip(&with) {
        assert!((a - w).abs() <= 1e-5, "{a} vs {w}");
    }
    let forced = opts
        .clone()
        .with_probabilities()
        .kernel(AttentionKernel::Flash);
    assert!(ctx.attention(&q, &k, &v, &forced).is_err());
}

/// `with_scores`: the logits the softmax reads, against f64: `scale q k^T`
/// soft-capped, an additive mask added, `-inf` where key lengths, the
/// causal band or a boolean 0 hide a key; with the probabilities in the
/// same call, which must be their softmax.
#[test]
fn attention_returns_its_scores() {
    let Some(ctx) = common::ctx() else { return };
    let (b, h, sq, sk, d) = (2, 3, 5, 7, 4);
    let qh = common::random(b * h * sq * d, 81);
    let kh = common::random(b * h * sk * d, 82);
    let vh = common::random(b * h * sk * d, 83);
    let addh: Vec<f32> = common::random(sq * sk, 84)
        .iter()
        .map(|v| v * 2.0)
        .collect();
    let q = ctx.tensor(&qh, [b, h, sq, d]).unwrap();
    let k = ctx.tensor(&kh, [b, h, sk, d]).unwrap();
    let v = ctx.tensor(&vh, [b, h, sk, d]).unwrap();
    let add = ctx.tensor(&addh, [sq, sk]).unwrap();
    let (cap, lens, offset) = (3.0f64, [7u32, 4], 1i64);
    let opts = AttentionOptions::new()
        .softcap(cap as f32)
        .additive_mask(&add)
        .key_lengths(&lens)
        .causal(DiagonalAlignment::Offset(offset))
        .with_scores()
        .with_probabilities();
    let out = ctx.attention(&q, &k, &v, &opts).unwrap();
    let host = |t: Option<wgtile::Tensor>| t.expect("asked for").to_vec_blocking::<f32>().unwrap();
    let (scores, probs) = (host(out.scores), host(out.probs));
    let scale = 1.0 / (d as f64).sqrt();
    for (bi, &len) in lens.iter().enumerate() {
        for hd in 0..h {
            for i in 0..sq {
                let row = ((bi * h + hd) * sq + i) * sk;
                let want: Vec<f64> = (0..sk)
                    .map(|j| {
                        if j >= len as usize || j as i64 > i as i64 + offset {
                            return f64::NEG_INFINITY;
                        }
                        let dot: f64 = (0..d)
                            .map(|c| {
                                f64::from(qh[((bi * h + hd) * sq + i) * d + c])
                                    * f64::from(kh[((bi * h + hd) * sk + j) * d + c])
                            })
                            .sum();
                        cap * (dot * scale / cap).tanh() + f64::from(addh[i * sk + j])
                    })
                    .collect();
                let m = want.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let z: f64 = want.iter().map(|w| (w - m).exp()).sum();
                for j in 0..sk {
                    let got = f64::from(scores[row + j]);
                    if want[j] == f64::NEG_INFINITY {
                        assert_eq!(got, f64::NEG_INFINITY, "b {bi} h {hd} row {i} key {j}");
                    } else {
                        assert!(
                            (got - want[j]).abs() <= 1e-5 * (1.0 + want[j].abs()),
                            "b {bi} h {hd} row {i} key {j}: {got} vs {}",
                            want[j]
                        );
                    }
                    let p = (want[j] - m).exp() / z;
                    assert!(
                        (f64::from(probs[row + j]) - p).abs() <= 1e-6,
                        "probability {j}"
                    );
                }
            }
        }
    }
    let forced = opts.kernel(AttentionKernel::Flash);
    assert!(ctx.attention(&q, &k, &v, &forced).is_err());
}

/// `with_raw_scores` (ONNX `qk_matmul_output_mode` 0): `scale q k^T` for
/// every row and key against f64, with GQA (three query heads per KV head),
/// heads-first and packed operands, f32 / f16 / bf16 inputs, and a soft-cap,
/// an additive mask, key lengths and a causal band all set: mode 0 ignores
/// them (finite everywhere), while the logits of `with_scores` (mode 1),
/// asked for in the same call, are the capped and masked values (`-inf`
/// where a rule hides a key). Outputs are poisoned first.
///
/// Tolerance: the f32 dot product over D fused multiply-adds, times the
/// scale: `2 D u scale sum|q_c k_c| + u |raw|` (`common::matmul_tolerance`
/// plus the scale's rounding), u = 2^-24, on the inputs as held.
#[test]
fn attention_returns_its_raw_scores() {
    let Some(ctx) = common::ctx() else { return };
    let (b, hq, hkv, sq, sk, d) = (2, 6, 2, 5, 7, 13);
    let group = hq / hkv;
    let qh = common::random(b * hq * sq * d, 91);
    let kh = common::random(b * hkv * sk * d, 92);
    let vh = common::random(b * hkv * sk * d, 93);
    let addh: Vec<f32> = common::random(sq * sk, 94)
        .iter()
        .map(|v| v * 2.0)
        .collect();
    let (cap, lens, offset, scale) = (0.5f64, [7u32, 4], 1i64, 0.4f32);
    let mut dtypes = vec![DType::F32, DType::BF16];
    if ctx.profile().shader_f16 {
        dtypes.push(DType::F16);
    }
    for dtype in dtypes {
        for packed in [false, true] {
            let what = format!("{dtype} packed {packed}");
            // Heads-first data; packed operands are its [B, S, H * D] transpose.
            let pack = |x: &[f32], h: usize, s: usize| -> Vec<f32> {
                let mut out = vec![0.0; x.len()];
                for (bi, hi, si, c) in (0..b)
                    .flat_map(|bi| (0..h).map(move |hi| (bi, hi)))
                    .flat_map(|(bi, hi)| {
                        (0..s).flat_map(move |si| (0..d).map(move |c| (bi, hi, si, c)))
                    })
                {
                    out[((bi * s + si) * h + hi) * d + c] = x[((bi * h + hi) * s + si) * d + c];
                }
                out
            };
            let (qs, ks): (Vec<usize>, Vec<usize>) = if packed {
                (vec![b, sq, hq * d], vec![b, sk, hkv * d])
            } else {
                (vec![b, hq, sq, d], vec![b, hkv, sk, d])
            };
            let layout =
                |x: &[f32], h: usize, s: usize| if packed { pack(x, h, s) } else { x.to_vec() };
            let (q, q_held) = common::upload(&ctx, &layout(&qh, hq, sq), &qs, dtype);
            let (k, k_held) = common::upload(&ctx, &layout(&kh, hkv, sk), &ks, dtype);
            let (v, _) = common::upload(&ctx, &layout(&vh, hkv, sk), &ks, dtype);
            let (add, add_held) = common::upload(&ctx, &addh, &[sq, sk], dtype);
            let mut opts = AttentionOptions::new()
                .scale(scale)
                .softcap(cap as f32)
                .additive_mask(&add)
                .key_lengths(&lens)
                .causal(DiagonalAlignment::Offset(offset))
                .with_raw_scores()
                .with_scores();
            if packed {
                opts = opts.packed(hq, hkv);
            }
            let (plan, out) = ctx.attention_plan(&q, &k, &v, &opts).unwrap();
            let (raw, scores) = (
                out.raw_scores.expect("asked for"),
                out.scores.expect("asked for"),
            );
            assert_eq!(raw.shape(), [b, hq, sq, sk], "{what}");
            assert_eq!(raw.dtype(), DType::F32, "{what}");
            for t in [&raw, &scores] {
                ctx.fill(t, f32::NAN).unwrap();
            }
            plan.run().unwrap();
            let (raw, scores) = (
                raw.to_vec_blocking::<f32>().unwrap(),
                scores.to_vec_blocking::<f32>().unwrap(),
            );
            // Element c of query row i of head h, and of key j of KV head hk, as held.
            let qa = |bi: usize, h: usize, i: usize, c: usize| {
                let at = if packed {
                    ((bi * sq + i) * hq + h) * d + c
                } else {
                    ((bi * hq + h) * sq + i) * d + c
                };
                f64::from(q_held[at])
            };
            let ka = |bi: usize, h: usize, j: usize, c: usize| {
                let at = if packed {
                    ((bi * sk + j) * hkv + h) * d + c
                } else {
                    ((bi * hkv + h) * sk + j) * d + c
                };
                f64::from(k_held[at])
            };
            let scale = f64::from(scale);
            let (mut want, mut bound, mut logits) = (Vec::new(), Vec::new(), Vec::new());
            for (bi, &len) in lens.iter().enumerate() {
                for h in 0..hq {
                    for i in 0..sq {
                        for j in 0..sk {
                            let dot: f64 = (0..d)
                                .map(|c| qa(bi, h, i, c) * ka(bi, h / group, j, c))
                                .sum();
                            let mag: f64 = (0..d)
                                .map(|c| (qa(bi, h, i, c) * ka(bi, h / group, j, c)).abs())
                                .sum();
                            let r = scale * dot;
                            want.push(r);
                            bound.push(
                                common::matmul_tolerance(DType::F32, d, r, scale * mag)
                                    + r.abs() * 2f64.powi(-24),
                            );
                            let hidden = j >= len as usize || j as i64 > i as i64 + offset;
                            logits.push(if hidden {
                                f64::NEG_INFINITY
                            } else {
                                cap * (r / cap).tanh() + f64::from(add_held[i * sk + j])
                            });
                        }
                    }
                }
            }
            common::assert_close(&format!("raw scores {what}"), &raw, &want, |i| bound[i]);
            // Mode 1 differs from mode 0 exactly where it should: hidden keys
            // are -inf there (finite raw scores), visible ones capped and shifted.
            let mut differ = 0;
            for (e, (&l, (&g, &r))) in logits.iter().zip(scores.iter().zip(&raw)).enumerate() {
                assert!(r.is_finite(), "{what}: raw score {e} is {r}");
                if l == f64::NEG_INFINITY {
                    assert_eq!(g, f32::NEG_INFINITY, "{what}: logit {e}");
                } else {
                    assert!(
                        (f64::from(g) - l).abs() <= 1e-5 * (1.0 + l.abs()),
                        "{what}: logit {e}: {g} vs {l}"
                    );
                    differ += usize::from((f64::from(g) - f64::from(r)).abs() > 1e-3);
                }
            }
            assert!(
                differ > want.len() / 4,
                "{what}: mode 1 equals mode 0 at most keys"
            );
        }
    }
    // NaN in one query row reaches that row's raw scores only; raw scores
    // alone (without the logits) and forced non-naive kernels.
    let mut qn = qh.clone();
    qn[(hq + 1) * sq * d + 2 * d + 3] = f32::NAN; // batch 1, head 1, row 2
    let q = ctx.tensor(&qn, [b, hq, sq, d]).unwrap();
    let k = ctx.tensor(&kh, [b, hkv, sk, d]).unwrap();
    let v = ctx.tensor(&vh, [b, hkv, sk, d]).unwrap();
    let raw = ctx
        .attention(&q, &k, &v, &AttentionOptions::new().with_raw_scores())
        .unwrap()
        .raw_scores
        .expect("asked for")
        .to_vec_blocking::<f32>()
        .unwrap();
    for (e, r) in raw.iter().enumerate() {
        assert_eq!(
            r.is_nan(),
            e / sk == (hq + 1) * sq + 2,
            "raw score {e}: {r}"
        );
    }
    for kernel in [AttentionKernel::Flash, AttentionKernel::Decode] {
        let forced = AttentionOptions::new().with_raw_scores().kernel(kernel);
        assert!(ctx.attention(&q, &k, &v, &forced).is_err(), "{kernel:?}");
    }
}
