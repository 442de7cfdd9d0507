//! Attention against a CPU f64 reference.
//!
//! Error rule (flash-attention's own tests): the flash kernel's largest error
//! against f64 must be at most 2x the naive GPU path's (same inputs, same
//! precision) plus a small absolute slack: 2e-6 for f32, 1e-3 for f16 (one
//! f16 rounding step of outputs near 1 is 4.9e-4). Both must also be within
//! an absolute bound (1e-4 f32, 1e-2 f16, times max(1, max lse) since logit
//! rounding grows with the logits) so a broken naive path cannot hide
//! a broken flash one. Outputs are poisoned with NaN before the kernels run.

mod common;

use wgtile::tune::attention::{BackwardCoopTiles, decode_fits};
use wgtile::{
    AttentionKernel, AttentionOptions, Context, DType, DiagonalAlignment, Error, KvCache, Tensor,
};

#[derive(Clone, Debug)]
struct Case {
    b: usize,
    hq: usize,
    hkv: usize,
    sq: usize,
    sk: usize,
    d: usize,
    dv: usize,
    dtype: DType,
}

impl Case {
    fn new(b: usize, hq: usize, hkv: usize, sq: usize, sk: usize, d: usize, dv: usize) -> Self {
        Self {
            b,
            hq,
            hkv,
            sq,
            sk,
            d,
            dv,
            dtype: DType::F32,
        }
    }
}

/// A mask on the host: dims [B|1, H|1, Sq|1, Sk|1] and its values.
#[derive(Clone)]
struct HostMask {
    additive: bool,
    dims: [usize; 4],
    shape: Vec<usize>,
    data: Vec<f32>,
}

/// f64 reference: returns (O [B, Hq, Sq, Dv], lse [B, Hq, Sq]).
#[allow(clippy::too_many_arguments)]
/// Where row i's diagonal sits (key i + offset): 0 top-left; bottom-right
/// aligns to the last key, the batch's own when key lengths are given.
fn diagonal_offset(c: &Case, opts: &AttentionOptions, keys: usize) -> i64 {
    match opts.alignment {
        DiagonalAlignment::TopLeft => 0,
        DiagonalAlignment::BottomRight if opts.key_lengths.is_some() => keys as i64 - c.sq as i64,
        DiagonalAlignment::BottomRight => c.sk as i64 - c.sq as i64,
    }
}

fn reference(
    c: &Case,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    opts: &AttentionOptions,
    mask: Option<&HostMask>,
) -> (Vec<f64>, Vec<f64>) {
    let scale = f64::from(opts.scale.unwrap_or(1.0 / (c.d as f32).sqrt()));
    let group = c.hq / c.hkv;
    let mut o = vec![0.0; c.b * c.hq * c.sq * c.dv];
    let mut lse = vec![f64::NEG_INFINITY; c.b * c.hq * c.sq];
    for b in 0..c.b {
        let keys = opts.key_lengths.as_ref().map_or(c.sk, |l| l[b] as usize);
        let offset = diagonal_offset(c, opts, keys);
        for h in 0..c.hq {
            let hk = h / group;
            for i in 0..c.sq {
                let mut logits = vec![f64::NEG_INFINITY; c.sk];
                for (j, logit) in logits.iter_mut().enumerate() {
                    let (ii, jj) = (i as i64, j as i64);
                    if j >= keys
                        || (opts.causal && jj > ii + offset)
                        || opts
                            .window_left
                            .is_some_and(|w| jj < ii + offset - w as i64)
                        || opts
                            .window_right
                            .is_some_and(|w| jj > ii + offset + w as i64)
                    {
                        continue;
                    }
                    let mut s = 0.0;
                    for x in 0..c.d {
                        s += f64::from(q[((b * c.hq + h) * c.sq + i) * c.d + x])
                            * f64::from(k[((b * c.hkv + hk) * c.sk + j) * c.d + x]);
                    }
                    s *= scale;
                    if let Some(cap) = opts.softcap {
                        let cap = f64::from(cap);
                        s = cap * (s / cap).tanh();
                    }
                    if let Some(m) = mask {
                        let idx = [b, h, i, j];
                        let mut off = 0;
                        for (&dim, &at) in m.dims.iter().zip(&idx) {
                            off = off * dim + if dim == 1 { 0 } else { at };
                        }
                        let mv = f64::from(m.data[off]);
                        if m.additive {
                            s += mv;
                        } else if mv == 0.0 {
                            continue;
                        }
                    }
                    *logit = s;
                }
                let mx = logits.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                if mx == f64::NEG_INFINITY {
                    continue;
                }
                let p: Vec<f64> = logits.iter().map(|&s| (s - mx).exp()).collect();
                let l: f64 = p.iter().sum();
                lse[(b * c.hq + h) * c.sq + i] = mx + l.ln();
                for x in 0..c.dv {
                    let mut acc = 0.0;
                    for (j, pj) in p.iter().enumerate() {
                        if *pj != 0.0 {
                            acc += pj * f64::from(v[((b * c.hkv + hk) * c.sk + j) * c.dv + x]);
                        }
                    }
                    o[((b * c.hq + h) * c.sq + i) * c.dv + x] = acc / l;
                }
            }
        }
    }
    (o, lse)
}

fn max_err(got: &[f32], want: &[f64]) -> f64 {
    assert_eq!(got.len(), want.len());
    got.iter()
        .zip(want)
        .map(|(&g, &w)| {
            if w == f64::NEG_INFINITY {
                if g == f32::NEG_INFINITY {
                    0.0
                } else {
                    f64::INFINITY
                }
            } else {
                let e = (f64::from(g) - w).abs();
                if e.is_nan() { f64::INFINITY } else { e }
            }
        })
        .fold(0.0, f64::max)
}

/// Runs the plan with its outputs poisoned, returns (o, lse) on the host.
fn run_poisoned(
    ctx: &Context,
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    opts: &AttentionOptions,
) -> (Vec<f32>, Vec<f32>) {
    let (plan, out) = ctx.attention_plan(q, k, v, opts).unwrap();
    ctx.fill(&out.o, f32::NAN).unwrap();
    if let Some(l) = &out.lse {
        ctx.fill(l, f32::NAN).unwrap();
    }
    plan.run().unwrap();
    let o = out.o.to_f32_vec_blocking().unwrap();
    let lse = out
        .lse
        .map_or(Vec::new(), |l| l.to_vec_blocking::<f32>().unwrap());
    (o, lse)
}

/// Checks flash (and split-KV, when `splits` is given) against f64 with the
/// 2x-naive rule. Returns the flash error.
fn check(
    ctx: &Context,
    c: &Case,
    opts: &AttentionOptions,
    mask: Option<HostMask>,
    seed: u64,
) -> f64 {
    let (qt, q) = common::upload(
        ctx,
        &common::random(c.b * c.hq * c.sq * c.d, seed),
        &[c.b, c.hq, c.sq, c.d],
        c.dtype,
    );
    let (kt, k) = common::upload(
        ctx,
        &common::random(c.b * c.hkv * c.sk * c.d, seed + 1),
        &[c.b, c.hkv, c.sk, c.d],
        c.dtype,
    );
    let (vt, v) = common::upload(
        ctx,
        &common::random(c.b * c.hkv * c.sk * c.dv, seed + 2),
        &[c.b, c.hkv, c.sk, c.dv],
        c.dtype,
    );
    let mut opts = opts.clone().with_lse();
    let mut host_mask = None;
    if let Some(m) = mask {
        let (t, vals) = common::upload(ctx, &m.data, &m.shape, c.dtype);
        opts.mask = Some(if m.additive {
            wgtile::AttentionMask::Additive(t)
        } else {
            wgtile::AttentionMask::Boolean(t)
        });
        host_mask = Some(HostMask { data: vals, ..m });
    }
    let (want_o, want_lse) = reference(c, &q, &k, &v, &opts, host_mask.as_ref());
    let (naive_o, naive_lse) = run_poisoned(
        ctx,
        &qt,
        &kt,
        &vt,
        &opts.clone().kernel(AttentionKernel::Naive),
    );
    let (flash_o, flash_lse) = run_poisoned(
        ctx,
        &qt,
        &kt,
        &vt,
        &opts.clone().kernel(AttentionKernel::Flash),
    );
    let (slack, bound) = match c.dtype {
        DType::F32 => (2e-6, 1e-4),
        DType::F16 => (1e-3, 1e-2),
    };
    // Logit rounding grows with the logits' size (scale 100 gives lse ~ 1e3).
    let magnitude = want_lse
        .iter()
        .filter(|x| x.is_finite())
        .fold(1.0f64, |m, x| m.max(x.abs()));
    let bound = bound * magnitude;
    let en = max_err(&naive_o, &want_o);
    let ef = max_err(&flash_o, &want_o);
    let enl = max_err(&naive_lse, &want_lse);
    let efl = max_err(&flash_lse, &want_lse);
    let what = format!("{c:?} {opts:?}");
    assert!(en <= bound, "{what}: naive O error {en:e} over {bound:e}");
    assert!(
        ef <= 2.0 * en + slack,
        "{what}: flash O error {ef:e} vs naive {en:e}"
    );
    assert!(enl <= bound, "{what}: naive lse error {enl:e}");
    assert!(
        efl <= 2.0 * enl + slack,
        "{what}: flash lse error {efl:e} vs naive {enl:e}"
    );
    // Forced tile shapes: the 8-rows-per-invocation register tile (the
    // H200's shape, smaller) and the benchmark's sweep shapes that fit.
    for tiles in wgtile::tune::attention::TEST_TILES
        .into_iter()
        .chain(wgtile::tune::attention::SWEEP_TILES)
    {
        if !tiles.for_value_dim(c.dv).fits(ctx.profile(), c.dv) {
            continue;
        }
        let (o8, lse8) = run_poisoned(
            ctx,
            &qt,
            &kt,
            &vt,
            &opts.clone().kernel(AttentionKernel::Flash).tiles(tiles),
        );
        let e8 = max_err(&o8, &want_o);
        let e8l = max_err(&lse8, &want_lse);
        assert!(
            e8 <= 2.0 * en + slack,
            "{what}: tiles {tiles:?} O error {e8:e} vs naive {en:e}"
        );
        assert!(
            e8l <= 2.0 * enl + slack,
            "{what}: tiles {tiles:?} lse error {e8l:e} vs naive {enl:e}"
        );
    }
    // Split-KV (flash-decoding) path: same bound.
    let (split_o, split_lse) = run_poisoned(
        ctx,
        &qt,
        &kt,
        &vt,
        &opts
            .clone()
            .kernel(AttentionKernel::FlashSplit)
            .kv_splits(3),
    );
    let es = max_err(&split_o, &want_o);
    let esl = max_err(&split_lse, &want_lse);
    assert!(
        es <= 2.0 * en + slack,
        "{what}: split-KV O error {es:e} vs naive {en:e}"
    );
    assert!(
        esl <= 2.0 * enl + slack,
        "{what}: split-KV lse error {esl:e} vs naive {enl:e}"
    );
    // The decode kernel wherever it applies (few packed rows keep lavapipe
    // time down; it serves more rows in chunks of 8), with its own split
    // choice and with 3 forced splits: same bound.
    if decode_fits(c.dtype, c.d, c.dv) && c.hq / c.hkv * c.sq <= 40 {
        for splits in [None, Some(3)] {
            let mut o = opts.clone().kernel(AttentionKernel::Decode);
            o.kv_splits = splits;
            let (plan, _) = ctx.attention_plan(&qt, &kt, &vt, &o).unwrap();
            assert!(
                plan.label().starts_with("attention decode"),
                "{}",
                plan.label()
            );
            let (dec_o, dec_lse) = run_poisoned(ctx, &qt, &kt, &vt, &o);
            let ed = max_err(&dec_o, &want_o);
            let edl = max_err(&dec_lse, &want_lse);
            assert!(
                ed <= 2.0 * en + slack,
                "{what}: decode ({splits:?} splits) O error {ed:e} vs naive {en:e}"
            );
            assert!(
                edl <= 2.0 * enl + slack,
                "{what}: decode ({splits:?} splits) lse error {edl:e} vs naive {enl:e}"
            );
        }
    }
    ef
}

fn mask_values(n: usize, seed: u64, additive: bool) -> Vec<f32> {
    common::random(n, seed)
        .into_iter()
        .map(|x| {
            if additive {
                if x < -0.7 { f32::NEG_INFINITY } else { 2.0 * x }
            } else if x < -0.4 {
                0.0
            } else {
                1.0
            }
        })
        .collect()
}

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

/// The decode kernel alone (no flash runs, to stay fast on lavapipe) against
/// f64 with the 2x-naive rule: `Auto` must pick it (few packed rows), and
/// forced splits of one and of 3 give the same answer.
fn check_decode(
    ctx: &Context,
    c: &Case,
    opts: &AttentionOptions,
    mask: Option<HostMask>,
    seed: u64,
) {
    let (qt, q) = common::upload(
        ctx,
        &common::random(c.b * c.hq * c.sq * c.d, seed),
        &[c.b, c.hq, c.sq, c.d],
        c.dtype,
    );
    let (kt, k) = common::upload(
        ctx,
        &common::random(c.b * c.hkv * c.sk * c.d, seed + 1),
        &[c.b, c.hkv, c.sk, c.d],
        c.dtype,
    );
    let (vt, v) = common::upload(
        ctx,
        &common::random(c.b * c.hkv * c.sk * c.dv, seed + 2),
        &[c.b, c.hkv, c.sk, c.dv],
        c.dtype,
    );
    let mut opts = opts.clone().with_lse();
    let mut host_mask = None;
    if let Some(m) = mask {
        let (t, vals) = common::upload(ctx, &m.data, &m.shape, c.dtype);
        opts.mask = Some(if m.additive {
            wgtile::AttentionMask::Additive(t)
        } else {
            wgtile::AttentionMask::Boolean(t)
        });
        host_mask = Some(HostMask { data: vals, ..m });
    }
    let (want_o, want_lse) = reference(c, &q, &k, &v, &opts, host_mask.as_ref());
    let (naive_o, naive_lse) = run_poisoned(
        ctx,
        &qt,
        &kt,
        &vt,
        &opts.clone().kernel(AttentionKernel::Naive),
    );
    let (slack, bound) = match c.dtype {
        DType::F32 => (2e-6, 1e-4),
        DType::F16 => (1e-3, 1e-2),
    };
    let what = format!("{c:?} {opts:?}");
    let en = max_err(&naive_o, &want_o);
    let enl = max_err(&naive_lse, &want_lse);
    assert!(
        en <= bound && enl <= bound,
        "{what}: naive error {en:e} {enl:e}"
    );
    let auto = c.hq / c.hkv * c.sq <= wgtile::tune::attention::DECODE_KERNEL_MAX_ROWS;
    for splits in [None, Some(1), Some(3)] {
        let mut o = opts.clone();
        if !auto && o.kernel == AttentionKernel::Auto {
            o.kernel = AttentionKernel::Decode;
        }
        o.kv_splits = splits;
        let (plan, _) = ctx.attention_plan(&qt, &kt, &vt, &o).unwrap();
        assert!(
            plan.label().starts_with("attention decode"),
            "{what}: {}",
            plan.label()
        );
        let coop = matches!(
            o.kernel,
            AttentionKernel::DecodeCoop | AttentionKernel::DecodeCoopEmulated
        );
        assert_eq!(
            coop,
            plan.label().contains("tensor cores"),
            "{what}: {}",
            plan.label()
        );
        let (got_o, got_lse) = run_poisoned(ctx, &qt, &kt, &vt, &o);
        let ed = max_err(&got_o, &want_o);
        let edl = max_err(&got_lse, &want_lse);
        assert!(
            ed <= 2.0 * en + slack && edl <= 2.0 * enl + slack,
            "{what}: decode ({splits:?} splits, {}) error O {ed:e} lse {edl:e} vs naive {en:e} {enl:e}",
            plan.label()
        );
    }
}

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

/// The same NaN rule for the tensor-core kernels (f16): the emulated ones on
/// every adapter with f16 and subgroups, the real ones where present. One
/// NaN in a query row makes that row (and only it) NaN, in the forward and
/// in the decode kernel.
#[test]
fn coop_nan_propagates_only_to_rows_it_touches() {
    let Some(ctx) = emulation_ctx("coop_nan_propagates_only_to_rows_it_touches") else {
        return;
    };
    let mut kernels = vec![
        AttentionKernel::FlashCoopEmulated,
        AttentionKernel::DecodeCoopEmulated,
    ];
    if wgtile::tune::has_coop_f16(ctx.profile()) {
        kernels.extend([AttentionKernel::FlashCoop, AttentionKernel::DecodeCoop]);
    }
    let (hq, sq, sk, d) = (2, 40, 70, 32);
    let mut qh = common::random(hq * sq * d, 120);
    // Head 1, row 7.
    qh[(sq + 7) * d + 3] = f32::NAN;
    let (q, _) = common::upload(&ctx, &qh, &[1, hq, sq, d], DType::F16);
    let k = ctx
        .rand_uniform([1, 1, sk, d], -1.0, 1.0, DType::F16, 121)
        .unwrap();
    let v = ctx
        .rand_uniform([1, 1, sk, d], -1.0, 1.0, DType::F16, 122)
        .unwrap();
    for kernel in kernels {
        let (o, lse) = run_poisoned(
            &ctx,
            &q,
            &k,
            &v,
            &AttentionOptions::new().kernel(kernel).with_lse(),
        );
        for row in 0..hq * sq {
            let vals = &o[row * d..(row + 1) * d];
            if row == sq + 7 {
                assert!(
                    vals.iter().all(|x| x.is_nan()) && lse[row].is_nan(),
                    "{kernel:?}: the NaN row should be NaN: {vals:?}, lse {}",
                    lse[row]
                );
            } else {
                assert!(
                    vals.iter().all(|x| x.is_finite()) && lse[row].is_finite(),
                    "{kernel:?}: row {row} touched by NaN"
                );
            }
        }
    }
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

/// f64 forward of one case from host data: P rows, O, and the reference
/// gradients for upstream gradient `d_o`: returns (dq, dk, dv).
#[allow(clippy::too_many_arguments)]
fn reference_backward(
    c: &Case,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    d_o: &[f32],
    opts: &AttentionOptions,
    mask: Option<&HostMask>,
) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let qf: Vec<f64> = q.iter().map(|&x| f64::from(x)).collect();
    let kf: Vec<f64> = k.iter().map(|&x| f64::from(x)).collect();
    let vf: Vec<f64> = v.iter().map(|&x| f64::from(x)).collect();
    let dof: Vec<f64> = d_o.iter().map(|&x| f64::from(x)).collect();
    backward_f64(c, &qf, &kf, &vf, &dof, opts, mask)
}

/// Visible-logit matrix of one (b, h, i) row in f64: (logit or None, d logit / d(q.k)).
#[allow(clippy::too_many_arguments)]
fn row_logits(
    c: &Case,
    q: &[f64],
    k: &[f64],
    opts: &AttentionOptions,
    mask: Option<&HostMask>,
    b: usize,
    h: usize,
    i: usize,
) -> Vec<Option<(f64, f64)>> {
    let scale = f64::from(opts.scale.unwrap_or(1.0 / (c.d as f32).sqrt()));
    let hk = h / (c.hq / c.hkv);
    let keys = opts.key_lengths.as_ref().map_or(c.sk, |l| l[b] as usize);
    let offset = diagonal_offset(c, opts, keys);
    (0..c.sk)
        .map(|j| {
            let (ii, jj) = (i as i64, j as i64);
            if j >= keys
                || (opts.causal && jj > ii + offset)
                || opts
                    .window_left
                    .is_some_and(|w| jj < ii + offset - w as i64)
                || opts
                    .window_right
                    .is_some_and(|w| jj > ii + offset + w as i64)
            {
                return None;
            }
            let dot: f64 = (0..c.d)
                .map(|x| {
                    q[((b * c.hq + h) * c.sq + i) * c.d + x]
                        * k[((b * c.hkv + hk) * c.sk + j) * c.d + x]
                })
                .sum();
            let (mut s, g) = match opts.softcap {
                Some(cap) => {
                    let cap = f64::from(cap);
                    let th = (dot * scale / cap).tanh();
                    (cap * th, scale * (1.0 - th * th))
                }
                None => (dot * scale, scale),
            };
            if let Some(m) = mask {
                let idx = [b, h, i, j];
                let mut off = 0;
                for (&dim, &at) in m.dims.iter().zip(&idx) {
                    off = off * dim + if dim == 1 { 0 } else { at };
                }
                let mv = f64::from(m.data[off]);
                if m.additive {
                    s += mv;
                } else if mv == 0.0 {
                    return None;
                }
            }
            if s == f64::NEG_INFINITY {
                None
            } else {
                Some((s, g))
            }
        })
        .collect()
}

/// f64 forward loss helper: O for f64 inputs.
fn forward_f64(
    c: &Case,
    q: &[f64],
    k: &[f64],
    v: &[f64],
    opts: &AttentionOptions,
    mask: Option<&HostMask>,
) -> Vec<f64> {
    let mut o = vec![0.0; c.b * c.hq * c.sq * c.dv];
    for b in 0..c.b {
        for h in 0..c.hq {
            let hk = h / (c.hq / c.hkv);
            for i in 0..c.sq {
                let row = row_logits(c, q, k, opts, mask, b, h, i);
                let mx = row
                    .iter()
                    .flatten()
                    .map(|x| x.0)
                    .fold(f64::NEG_INFINITY, f64::max);
                if mx == f64::NEG_INFINITY {
                    continue;
                }
                let l: f64 = row.iter().flatten().map(|x| (x.0 - mx).exp()).sum();
                for (j, e) in row.iter().enumerate() {
                    if let Some((s, _)) = e {
                        let p = (s - mx).exp() / l;
                        for x in 0..c.dv {
                            o[((b * c.hq + h) * c.sq + i) * c.dv + x] +=
                                p * v[((b * c.hkv + hk) * c.sk + j) * c.dv + x];
                        }
                    }
                }
            }
        }
    }
    o
}

#[allow(clippy::too_many_arguments)]
fn backward_f64(
    c: &Case,
    q: &[f64],
    k: &[f64],
    v: &[f64],
    d_o: &[f64],
    opts: &AttentionOptions,
    mask: Option<&HostMask>,
) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let mut dq = vec![0.0; q.len()];
    let mut dk = vec![0.0; k.len()];
    let mut dv = vec![0.0; v.len()];
    for b in 0..c.b {
        for h in 0..c.hq {
            let hk = h / (c.hq / c.hkv);
            for i in 0..c.sq {
                let row = row_logits(c, q, k, opts, mask, b, h, i);
                let mx = row
                    .iter()
                    .flatten()
                    .map(|x| x.0)
                    .fold(f64::NEG_INFINITY, f64::max);
                if mx == f64::NEG_INFINITY {
                    continue;
                }
                let l: f64 = row.iter().flatten().map(|x| (x.0 - mx).exp()).sum();
                let orow = (b * c.hq + h) * c.sq + i;
                let p: Vec<f64> = row
                    .iter()
                    .map(|e| e.map_or(0.0, |(s, _)| (s - mx).exp() / l))
                    .collect();
                let dp: Vec<f64> = (0..c.sk)
                    .map(|j| {
                        (0..c.dv)
                            .map(|x| {
                                d_o[orow * c.dv + x] * v[((b * c.hkv + hk) * c.sk + j) * c.dv + x]
                            })
                            .sum()
                    })
                    .collect();
                let delta: f64 = (0..c.sk).map(|j| p[j] * dp[j]).sum();
                for j in 0..c.sk {
                    let Some((_, g)) = row[j] else { continue };
                    let kv_row = (b * c.hkv + hk) * c.sk + j;
                    for x in 0..c.dv {
                        dv[kv_row * c.dv + x] += p[j] * d_o[orow * c.dv + x];
                    }
                    let ds = p[j] * (dp[j] - delta) * g;
                    for x in 0..c.d {
                        dq[orow * c.d + x] += ds * k[kv_row * c.d + x];
                        dk[kv_row * c.d + x] += ds * q[orow * c.d + x];
                    }
                }
            }
        }
    }
    (dq, dk, dv)
}

/// Runs forward (flash, with lse) then backward on the GPU and compares the
/// gradients with the f64 reference: error <= tol * max(1e-3, max |grad|),
/// relative to the largest gradient (until session 10 the floor was 1,
/// which let small-gradient f16 cases pass with Delta dropped).
fn check_backward(
    ctx: &Context,
    c: &Case,
    opts: &AttentionOptions,
    mask: Option<HostMask>,
    seed: u64,
) {
    check_backward_kernel(ctx, c, opts, None, mask, seed);
}

/// [`check_backward`] with the backward's kernel and tensor-core tiles
/// forced (`Some`), the forward left to `Auto`.
fn check_backward_kernel(
    ctx: &Context,
    c: &Case,
    opts: &AttentionOptions,
    backward: Option<(AttentionKernel, Option<BackwardCoopTiles>)>,
    mask: Option<HostMask>,
    seed: u64,
) {
    let (qt, q) = common::upload(
        ctx,
        &common::random(c.b * c.hq * c.sq * c.d, seed),
        &[c.b, c.hq, c.sq, c.d],
        c.dtype,
    );
    let (kt, k) = common::upload(
        ctx,
        &common::random(c.b * c.hkv * c.sk * c.d, seed + 1),
        &[c.b, c.hkv, c.sk, c.d],
        c.dtype,
    );
    let (vt, v) = common::upload(
        ctx,
        &common::random(c.b * c.hkv * c.sk * c.dv, seed + 2),
        &[c.b, c.hkv, c.sk, c.dv],
        c.dtype,
    );
    let (dot, d_o) = common::upload(
        ctx,
        &common::random(c.b * c.hq * c.sq * c.dv, seed + 3),
        &[c.b, c.hq, c.sq, c.dv],
        c.dtype,
    );
    let mut opts = opts.clone().with_lse();
    let mut host_mask = None;
    if let Some(m) = mask {
        let (t, vals) = common::upload(ctx, &m.data, &m.shape, c.dtype);
        opts.mask = Some(if m.additive {
            wgtile::AttentionMask::Additive(t)
        } else {
            wgtile::AttentionMask::Boolean(t)
        });
        host_mask = Some(HostMask { data: vals, ..m });
    }
    let fwd = ctx.attention(&qt, &kt, &vt, &opts).unwrap();
    let lse = fwd.lse.unwrap();
    let mut bwd = opts.clone();
    if let Some((kernel, tiles)) = backward {
        bwd.kernel = kernel;
        bwd.backward_coop_tiles = tiles;
    }
    let (plan, grads) = ctx
        .attention_backward_plan(&qt, &kt, &vt, &fwd.o, &dot, &lse, &bwd)
        .unwrap();
    if backward.is_some() {
        assert!(
            plan.label().contains("tensor-core") || plan.label().contains("tensor cores"),
            "{}",
            plan.label()
        );
    }
    for t in [&grads.dq, &grads.dk, &grads.dv] {
        ctx.fill(t, f32::NAN).unwrap();
    }
    plan.run().unwrap();
    let (dq, dk, dv) = reference_backward(c, &q, &k, &v, &d_o, &opts, host_mask.as_ref());
    // Relative to the largest gradient (see check_backward).
    let tol = match c.dtype {
        DType::F32 => 2e-5,
        DType::F16 => 2e-2,
    };
    for (name, got, want) in [
        ("dq", &grads.dq, dq),
        ("dk", &grads.dk, dk),
        ("dv", &grads.dv, dv),
    ] {
        let got = got.to_f32_vec_blocking().unwrap();
        let scale = want.iter().fold(1e-3f64, |m, x| m.max(x.abs()));
        common::assert_close(&format!("{name} {c:?} {opts:?}"), &got, &want, |_| {
            tol * scale
        });
    }
}

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
fn dispatcher_picks_tiles_per_adapter() {
    use wgtile::tune::attention::{
        DECODE_TILES, FLASH_CANDIDATES, backward_tiles, flash_tiles, flash_tiles_for, kv_splits,
    };
    // H200-like: 48 KiB, 1024 invocations, 132 units.
    let h200 = common::synthetic_profile(132, 1024, 48 * 1024);
    // 128 rows, 4 per invocation (8 per invocation spilled on the H200).
    let t = flash_tiles(&h200, 128).unwrap();
    assert_eq!((t.br, t.tr, t.bc(), t.threads()), (128, 4, 64, 512));
    assert!(t.workgroup_bytes() <= 48 * 1024);
    assert_eq!(flash_tiles(&h200, 256).unwrap().tr, 4);
    // 32 KiB (lavapipe-sized): the 64-row tile.
    let small = common::synthetic_profile(8, 1024, 32 * 1024);
    assert_eq!(flash_tiles(&small, 128).unwrap().br, 64);
    // 128 invocations at most: the 64-invocation shape.
    let narrow = common::synthetic_profile(8, 128, 32 * 1024);
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
    let tc = common::with_tensor_cores(h200.clone());
    assert_eq!(backward_coop_tiles(&tc, 128, 128).unwrap().subgroups, 8);
    assert_eq!(backward_coop_tiles(&tc, 64, 64).unwrap().subgroups, 4);
    let tc_small = common::with_tensor_cores(small.clone());
    let t = backward_coop_tiles(&tc_small, 128, 128).unwrap();
    assert!(
        t.workgroup_bytes(wgtile::tune::attention::BackwardCoopPass::DkDv, 128, 128) <= 32 * 1024
    );
    assert!(backward_coop_tiles(&h200, 64, 64).is_none());
    assert!(backward_coop_tiles(&tc, 64, 40).is_none());
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

// ---------------------------------------------------------------------------
// Tensor-core flash kernel (AttentionKernel::FlashCoop). Runs only where the
// adapter has the 16x16 f16/f32 cooperative matrix (the H200 with
// WGTILE_COOPERATIVE_MATRIX=1); elsewhere the GPU cases skip with a note.
// Same error rule as `check`: within 2x the naive f16 path's error (plus
// the f16 slack) against f64, outputs poisoned with NaN.

/// How `check_coop_with` runs the kernel: on tensor cores, or emulated
/// (`AttentionKernel::FlashCoopEmulated`) on the tiles lavapipe runs
/// correctly at the shape, or emulated on every tile.
#[derive(Clone, Copy, PartialEq, Eq)]
enum CoopRun {
    TensorCores,
    Emulated,
    EmulatedAllTiles,
}

/// Whether this adapter runs the tensor-core kernel (a note when it does not).
fn coop_ctx(test: &str) -> Option<Context> {
    let ctx = common::ctx()?;
    if !wgtile::tune::has_coop_f16(ctx.profile()) {
        eprintln!(
            "{test}: skipped, the adapter has no 16x16 f16/f32 cooperative matrix \
             (run on a GPU with WGTILE_COOPERATIVE_MATRIX=1)"
        );
        return None;
    }
    Some(ctx)
}

/// A context for the emulated tensor-core kernels (any adapter with f16 and
/// subgroups), or `None` (after saying why) for `test` to skip.
fn emulation_ctx(test: &str) -> Option<Context> {
    let ctx = common::ctx()?;
    let p = ctx.profile();
    if !(p.shader_f16 && p.subgroups) {
        eprintln!("{test}: skipped, needs f16 and subgroups");
        return None;
    }
    Some(ctx)
}

/// Checks the tensor-core kernel (default tiles, every other candidate,
/// sweep and test tile that fits, and `Auto`, which must pick it) against
/// f64 on the given inputs (`data`: q, k, v values; random when `None`).
/// `emulated`: the same algorithm with emulated matrix operations
/// (`AttentionKernel::FlashCoopEmulated`, any adapter with f16 and
/// subgroups) instead. Returns the first tile's O error.
#[allow(clippy::too_many_arguments)]
fn check_coop_with(
    ctx: &Context,
    c: &Case,
    opts: &AttentionOptions,
    mask: Option<HostMask>,
    seed: u64,
    data: Option<[Vec<f32>; 3]>,
    mode: CoopRun,
) -> f64 {
    let emulated = mode != CoopRun::TensorCores;
    // f32: the split kernel (each value as two halves, three products).
    assert!(matches!(c.dtype, DType::F16 | DType::F32));
    let [qd, kd, vd] = data.unwrap_or_else(|| {
        [
            common::random(c.b * c.hq * c.sq * c.d, seed),
            common::random(c.b * c.hkv * c.sk * c.d, seed + 1),
            common::random(c.b * c.hkv * c.sk * c.dv, seed + 2),
        ]
    });
    let (qt, q) = common::upload(ctx, &qd, &[c.b, c.hq, c.sq, c.d], c.dtype);
    let (kt, k) = common::upload(ctx, &kd, &[c.b, c.hkv, c.sk, c.d], c.dtype);
    let (vt, v) = common::upload(ctx, &vd, &[c.b, c.hkv, c.sk, c.dv], c.dtype);
    let mut opts = opts.clone().with_lse();
    let mut host_mask = None;
    if let Some(m) = mask {
        let (t, vals) = common::upload(ctx, &m.data, &m.shape, c.dtype);
        opts.mask = Some(if m.additive {
            wgtile::AttentionMask::Additive(t)
        } else {
            wgtile::AttentionMask::Boolean(t)
        });
        host_mask = Some(HostMask { data: vals, ..m });
    }
    let (want_o, want_lse) = reference(c, &q, &k, &v, &opts, host_mask.as_ref());
    let naive = opts.clone().kernel(AttentionKernel::Naive);
    let (naive_o, naive_lse) = run_poisoned(ctx, &qt, &kt, &vt, &naive);
    // f32 is held to f32's accuracy: the split products must not cost more
    // than a few ulps over the naive kernel's error.
    let (slack, bound) = if c.dtype == DType::F32 {
        (2e-6, 1e-4)
    } else {
        (1e-3, 1e-2)
    };
    let largest = |xs: &[f64]| {
        xs.iter()
            .filter(|x| x.is_finite())
            .fold(1.0f64, |m, x| m.max(x.abs()))
    };
    // Errors count relative to the scale of what they are in (1 for the
    // unit-sized random data; v's scale for `scaled_qkv`).
    let (mag_o, mag_lse) = (largest(&want_o), largest(&want_lse));
    let en = max_err(&naive_o, &want_o);
    let enl = max_err(&naive_lse, &want_lse);
    let what = format!("{c:?} {opts:?}");
    let bound_o = bound * mag_o.max(mag_lse);
    assert!(
        en <= bound_o,
        "{what}: naive O error {en:e} over {bound_o:e}"
    );
    assert!(enl <= bound * mag_lse, "{what}: naive lse error {enl:e}");
    let (slack_o, slack_lse) = (slack * mag_o, slack * mag_lse);

    let auto_label = ctx
        .attention_plan(&qt, &kt, &vt, &opts)
        .unwrap()
        .0
        .label()
        .to_string();
    // Auto takes the tensor cores wherever they run this problem (beyond
    // decode shapes, which have their own kernel).
    if !emulated && c.sq > wgtile::tune::attention::DECODE_MAX_ROWS {
        assert!(
            auto_label.contains("tensor cores"),
            "{what}: Auto picked {auto_label}"
        );
    }
    let mut first = None;
    for tiles in wgtile::tune::attention::FLASH_COOP_CANDIDATES
        .into_iter()
        .chain(wgtile::tune::attention::FLASH_COOP_SWEEP)
        .chain(wgtile::tune::attention::FLASH_COOP_TEST_TILES)
    {
        // The emulated kernel is slow on lavapipe: the default tile (one
        // 16-key block per fragment column) and the two-fragment 32-key
        // test tile cover its code paths (all tiles with `EmulatedAllTiles`).
        if mode == CoopRun::Emulated
            && tiles != wgtile::tune::attention::FLASH_COOP_CANDIDATES[0]
            && !wgtile::tune::attention::FLASH_COOP_TEST_TILES.contains(&tiles)
        {
            continue;
        }
        let fits = if emulated {
            tiles.fits_emulated(ctx.profile(), c.d, c.dv, c.dtype)
        } else {
            tiles.fits(ctx.profile(), c.d, c.dv, c.dtype)
        };
        if !fits {
            continue;
        }
        let mut forced = opts.clone().coop_tiles(tiles);
        if emulated {
            forced.kernel = AttentionKernel::FlashCoopEmulated;
        }
        let (o, lse) = run_poisoned(ctx, &qt, &kt, &vt, &forced);
        let e = max_err(&o, &want_o);
        let el = max_err(&lse, &want_lse);
        assert!(
            e <= 2.0 * en + slack_o,
            "{what}: coop {tiles} O error {e:e} vs naive {en:e}"
        );
        assert!(
            el <= 2.0 * enl + slack_lse,
            "{what}: coop {tiles} lse error {el:e} vs naive {enl:e}"
        );
        first.get_or_insert(e);
    }
    first.expect("at least one coop tile fits")
}

fn check_coop(
    ctx: &Context,
    c: &Case,
    opts: &AttentionOptions,
    mask: Option<HostMask>,
    seed: u64,
) -> f64 {
    check_coop_with(ctx, c, opts, mask, seed, None, CoopRun::TensorCores)
}

fn f16_case(b: usize, hq: usize, hkv: usize, sq: usize, sk: usize, d: usize, dv: usize) -> Case {
    let mut c = Case::new(b, hq, hkv, sq, sk, d, dv);
    c.dtype = DType::F16;
    c
}

#[test]
fn coop_sizes_and_head_dims() {
    let Some(ctx) = coop_ctx("coop_sizes_and_head_dims") else {
        return;
    };
    let sizes = [17usize, 100, 129, 300];
    let mut seed = 1000;
    for &sq in &sizes {
        for &sk in &sizes {
            for (d, dv) in [(64, 64), (128, 128), (64, 128), (128, 64)] {
                seed += 3;
                check_coop(
                    &ctx,
                    &f16_case(2, 2, 1, sq, sk, d, dv),
                    &AttentionOptions::new(),
                    None,
                    seed,
                );
            }
        }
    }
    // The smallest and largest head dims, and one not a power of two.
    for (d, dv) in [(16, 16), (256, 256), (80, 48), (256, 64)] {
        seed += 3;
        check_coop(
            &ctx,
            &f16_case(1, 2, 2, 129, 100, d, dv),
            &AttentionOptions::new(),
            None,
            seed,
        );
    }
}

#[test]
fn coop_causal_window_softcap() {
    let Some(ctx) = coop_ctx("coop_causal_window_softcap") else {
        return;
    };
    let mut seed = 2000;
    for (sq, sk) in [(100, 300), (300, 100), (129, 129), (17, 129)] {
        for align in [DiagonalAlignment::TopLeft, DiagonalAlignment::BottomRight] {
            for (d, dv) in [(64, 64), (128, 64)] {
                seed += 3;
                let c = f16_case(1, 2, 1, sq, sk, d, dv);
                check_coop(&ctx, &c, &AttentionOptions::new().causal(align), None, seed);
                check_coop(
                    &ctx,
                    &c,
                    &AttentionOptions::new()
                        .alignment(align)
                        .window(Some(37), Some(5)),
                    None,
                    seed + 1,
                );
                check_coop(
                    &ctx,
                    &c,
                    &AttentionOptions::new()
                        .causal(align)
                        .window(Some(70), Some(0))
                        .softcap(5.0)
                        .scale(3.0),
                    None,
                    seed + 2,
                );
            }
        }
    }
}

#[test]
fn coop_masks_key_lengths_gqa() {
    let Some(ctx) = coop_ctx("coop_masks_key_lengths_gqa") else {
        return;
    };
    // Boolean mask [B, 1, Sq, Sk] and additive [Sq, Sk] (with -inf entries).
    let c = f16_case(2, 4, 2, 100, 129, 64, 128);
    let data = mask_values(2 * 100 * 129, 3001, false);
    check_coop(
        &ctx,
        &c,
        &AttentionOptions::new(),
        Some(HostMask {
            additive: false,
            dims: [2, 1, 100, 129],
            shape: vec![2, 1, 100, 129],
            data,
        }),
        3002,
    );
    let data = mask_values(100 * 129, 3003, true);
    check_coop(
        &ctx,
        &c,
        &AttentionOptions::new().causal(DiagonalAlignment::BottomRight),
        Some(HostMask {
            additive: true,
            dims: [1, 1, 100, 129],
            shape: vec![100, 129],
            data,
        }),
        3004,
    );
    // Key lengths, including 0 (rows with no key: zeros, lse = -inf), with
    // both alignments.
    let c = f16_case(3, 2, 1, 129, 300, 128, 128);
    check_coop(
        &ctx,
        &c,
        &AttentionOptions::new().key_lengths(&[300, 0, 77]),
        None,
        3005,
    );
    check_coop(
        &ctx,
        &c,
        &AttentionOptions::new()
            .key_lengths(&[150, 17, 0])
            .causal(DiagonalAlignment::BottomRight),
        None,
        3006,
    );
    check_coop(
        &ctx,
        &c,
        &AttentionOptions::new()
            .key_lengths(&[64, 300, 1])
            .causal(DiagonalAlignment::TopLeft),
        None,
        3007,
    );
    // GQA and MQA.
    check_coop(
        &ctx,
        &f16_case(1, 6, 2, 300, 129, 64, 64),
        &AttentionOptions::new().causal(DiagonalAlignment::TopLeft),
        None,
        3008,
    );
    check_coop(
        &ctx,
        &f16_case(2, 3, 1, 17, 300, 128, 128),
        &AttentionOptions::new(),
        None,
        3009,
    );
}

/// Q, K, V whose logits grow along the key axis: q ~ 0.5, k rows ramp from
/// -1 to 1 along the keys, so at scale 1 logit(j) grows by ~ d / sk per key
/// (tens of log2 units per block): every block moves the softmax's
/// reference maximum.
fn ramp_qkv(c: &Case) -> [Vec<f32>; 3] {
    let (sk, d) = (c.sk, c.d);
    let noise_q = common::random(c.b * c.hq * c.sq * d, 4000);
    let noise_k = common::random(c.b * c.hkv * sk * d, 4001);
    let q: Vec<f32> = noise_q.iter().map(|x| 0.5 + 0.05 * x).collect();
    let k: Vec<f32> = noise_k
        .iter()
        .enumerate()
        .map(|(i, x)| {
            let j = (i / d) % sk;
            -1.0 + 2.0 * j as f32 / sk as f32 + 0.05 * x
        })
        .collect();
    let v = common::random(c.b * c.hkv * sk * c.dv, 4002);
    [q, k, v]
}

/// The conditional rescaling of the output: logits that grow along the key
/// axis (each block's maximum beats the reference by far more than 2^8), and
/// random logits at scale 100.
#[test]
fn coop_rescale_triggers() {
    let Some(ctx) = coop_ctx("coop_rescale_triggers") else {
        return;
    };
    for (sq, sk, d) in [(100, 300, 64), (129, 129, 128), (17, 300, 128)] {
        let c = f16_case(1, 2, 1, sq, sk, d, d);
        let [q, k, v] = ramp_qkv(&c);
        for opts in [
            AttentionOptions::new().scale(1.0),
            AttentionOptions::new()
                .scale(1.0)
                .causal(DiagonalAlignment::BottomRight),
        ] {
            check_coop_with(
                &ctx,
                &c,
                &opts,
                None,
                0,
                Some([q.clone(), k.clone(), v.clone()]),
                CoopRun::TensorCores,
            );
        }
        // Decreasing logits (no rescale after the first block) for contrast.
        let k_rev: Vec<f32> = k.iter().map(|x| -x).collect();
        check_coop_with(
            &ctx,
            &c,
            &AttentionOptions::new().scale(1.0),
            None,
            0,
            Some([q.clone(), k_rev, v.clone()]),
            CoopRun::TensorCores,
        );
        check_coop(&ctx, &c, &AttentionOptions::new().scale(100.0), None, 4003);
    }
}

/// Packed [B, S, H * D] layout through the tensor-core kernel equals the
/// heads-first result bit for bit (same kernel, same arithmetic).
#[test]
fn coop_packed_layout_matches_heads_first() {
    let Some(ctx) = coop_ctx("coop_packed_layout_matches_heads_first") else {
        return;
    };
    let (b, hq, hkv, sq, sk, d) = (2, 4, 2, 100, 129, 64);
    let qd = common::random(b * hq * sq * d, 5000);
    let kd = common::random(b * hkv * sk * d, 5001);
    let vd = common::random(b * hkv * sk * d, 5002);
    // Heads-first copies of the packed data.
    let to_heads = |x: &[f32], h: usize, s: usize| {
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
    let (qp, _) = common::upload(&ctx, &qd, &[b, sq, hq * d], DType::F16);
    let (kp, _) = common::upload(&ctx, &kd, &[b, sk, hkv * d], DType::F16);
    let (vp, _) = common::upload(&ctx, &vd, &[b, sk, hkv * d], DType::F16);
    let (qh, _) = common::upload(&ctx, &to_heads(&qd, hq, sq), &[b, hq, sq, d], DType::F16);
    let (kh, _) = common::upload(&ctx, &to_heads(&kd, hkv, sk), &[b, hkv, sk, d], DType::F16);
    let (vh, _) = common::upload(&ctx, &to_heads(&vd, hkv, sk), &[b, hkv, sk, d], DType::F16);
    let opts = AttentionOptions::new()
        .causal(DiagonalAlignment::BottomRight)
        .kernel(AttentionKernel::FlashCoop);
    let (packed, _) = run_poisoned(&ctx, &qp, &kp, &vp, &opts.clone().packed(hq, hkv));
    let (heads, _) = run_poisoned(&ctx, &qh, &kh, &vh, &opts);
    let packed_as_heads = to_heads(&packed, hq, sq);
    assert_eq!(packed_as_heads.len(), heads.len());
    for (i, (a, e)) in packed_as_heads.iter().zip(&heads).enumerate() {
        assert!(a == e, "element {i}: packed {a} vs heads-first {e}");
    }
}

/// Forcing the tensor-core kernel where it cannot run is an error (these run
/// on every adapter); the dispatcher's coop choice on synthetic profiles.
#[test]
fn coop_errors_and_dispatch() {
    use wgtile::tune::attention::{FLASH_COOP_CANDIDATES, flash_coop_tiles};
    let h200 = common::with_tensor_cores(common::synthetic_profile(132, 1024, 48 * 1024));
    let t = flash_coop_tiles(&h200, 128, 128, DType::F16).unwrap();
    assert_eq!(t, FLASH_COOP_CANDIDATES[0]);
    assert!(t.workgroup_bytes(128, 128, DType::F16) <= 48 * 1024);
    // Head dims up to 64: two subgroups first (measured faster there).
    for (d, dv) in [(64, 64), (32, 64), (16, 16)] {
        let t = flash_coop_tiles(&h200, d, dv, DType::F16).unwrap();
        assert_eq!(t, wgtile::tune::attention::FLASH_COOP_SMALL_DIMS);
    }
    assert_eq!(
        flash_coop_tiles(&h200, 80, 64, DType::F16).unwrap(),
        FLASH_COOP_CANDIDATES[0]
    );
    // D = 256: the default 16-key block fits; a 64-key one would not.
    let t = flash_coop_tiles(&h200, 256, 256, DType::F16).unwrap();
    assert_eq!(t, FLASH_COOP_CANDIDATES[0]);
    assert!(t.workgroup_bytes(256, 256, DType::F16) <= 48 * 1024);
    let wide = wgtile::tune::attention::FlashCoopTiles {
        bc: 64,
        ..FLASH_COOP_CANDIDATES[0]
    };
    assert!(wide.workgroup_bytes(256, 256, DType::F16) > 48 * 1024);
    // A 32 KiB adapter (lavapipe-like, with tensor cores) still gets a tile.
    let small = common::with_tensor_cores(common::synthetic_profile(8, 256, 32 * 1024));
    let t = flash_coop_tiles(&small, 128, 128, DType::F16).unwrap();
    assert!(t.workgroup_bytes(128, 128, DType::F16) <= 32 * 1024);
    assert!(flash_coop_tiles(&h200, 80, 72, DType::F16).is_none());
    assert!(flash_coop_tiles(&h200, 272, 64, DType::F16).is_none());
    // f32 (the split kernel): its own first tile (4 subgroups), at every head dim.
    for (d, dv) in [(128, 128), (64, 64)] {
        let t = flash_coop_tiles(&h200, d, dv, DType::F32).unwrap();
        assert_eq!(t, wgtile::tune::attention::FLASH_COOP_F32);
        assert!(t.workgroup_bytes(d as u32, dv as u32, DType::F32) <= 48 * 1024);
    }
    let no_tc = common::synthetic_profile(132, 1024, 48 * 1024);
    assert!(flash_coop_tiles(&no_tc, 128, 128, DType::F16).is_none());

    let Some(ctx) = common::ctx() else { return };
    if !ctx.profile().shader_f16 {
        return;
    }
    let q = ctx
        .rand_uniform([1, 2, 33, 64], -1.0, 1.0, DType::F16, 1)
        .unwrap();
    let k = ctx
        .rand_uniform([1, 2, 40, 64], -1.0, 1.0, DType::F16, 2)
        .unwrap();
    let forced = AttentionOptions::new().kernel(AttentionKernel::FlashCoop);
    let has = wgtile::tune::has_coop_f16(ctx.profile());
    let r = ctx.attention_plan(&q, &k, &k, &forced);
    if has {
        assert!(r.is_ok());
        // Head dims not multiples of 16.
        let q2 = ctx
            .rand_uniform([1, 2, 33, 72], -1.0, 1.0, DType::F16, 3)
            .unwrap();
        let k2 = ctx
            .rand_uniform([1, 2, 40, 72], -1.0, 1.0, DType::F16, 4)
            .unwrap();
        assert!(matches!(
            ctx.attention_plan(&q2, &k2, &k2, &forced),
            Err(Error::InvalidArgument(_))
        ));
    } else {
        assert!(
            matches!(r, Err(Error::UnsupportedFeature { .. })),
            "{:?}",
            r.map(|p| p.0.label().to_string())
        );
        // Auto falls back to the scalar flash kernel.
        let (plan, _) = ctx
            .attention_plan(&q, &k, &k, &AttentionOptions::new())
            .unwrap();
        assert!(!plan.label().contains("tensor cores"), "{}", plan.label());
    }
    // f32 inputs: the split kernel where tensor cores run (Auto too).
    let q32 = ctx
        .rand_uniform([1, 2, 33, 64], -1.0, 1.0, DType::F32, 5)
        .unwrap();
    let r = ctx.attention_plan(&q32, &q32, &q32, &forced);
    if has {
        let label = r.unwrap().0.label().to_string();
        assert!(label.contains("f32 as f16 pairs"), "{label}");
    } else {
        assert!(
            matches!(r, Err(Error::UnsupportedFeature { .. })),
            "{:?}",
            r.map(|p| p.0.label().to_string())
        );
    }
}

/// The tensor-core kernel's algorithm on any adapter (lavapipe included):
/// the same shader with the matrix operations emulated per invocation
/// (`AttentionKernel::FlashCoopEmulated`), on every tile that fits, against
/// f64 with the same rule. Covers odd sizes, Dv != D, causal both
/// alignments, window + softcap, an additive mask, key lengths with 0, GQA,
/// the rescale trigger (growing logits, scale 100), D = 16, 80 and 256 (Q
/// staged in passes, a partial last one at 80), and two fragments per
/// subgroup (the test tile, small shapes only: see `check_coop_with`).
///
/// Ignored for time only: it compiles every tile's emulated kernel and
/// takes about 4 minutes on lavapipe (2 cores); `coop_algorithm_emulated_small`
/// is the CI-sized part. History: while the emulation loaded each B
/// fragment into 256 private floats per invocation, lavapipe (Mesa 22.3)
/// returned wrong sums here once a problem had more than a few key blocks
/// (passing under LP_NUM_THREADS=1 with one workgroup): suspected its
/// per-invocation state across barriers. Since B fragments are references
/// read from workgroup memory by `mma` (session 5), the whole test passes
/// on lavapipe (248 s).
#[test]
#[ignore = "slow: every tile's emulated kernel, about 4 minutes on lavapipe"]
fn coop_algorithm_emulated() {
    let Some(ctx) = emulation_ctx("coop_algorithm_emulated") else {
        return;
    };
    let emu = |c: &Case, opts: &AttentionOptions, mask: Option<HostMask>, seed: u64| {
        check_coop_with(&ctx, c, opts, mask, seed, None, CoopRun::EmulatedAllTiles)
    };
    emu(
        &f16_case(2, 2, 1, 100, 129, 64, 64),
        &AttentionOptions::new(),
        None,
        6000,
    );
    emu(
        &f16_case(1, 2, 1, 129, 100, 128, 64),
        &AttentionOptions::new().causal(DiagonalAlignment::TopLeft),
        None,
        6001,
    );
    emu(
        &f16_case(1, 2, 1, 17, 129, 64, 128),
        &AttentionOptions::new().causal(DiagonalAlignment::BottomRight),
        None,
        6002,
    );
    emu(
        &f16_case(1, 2, 1, 100, 129, 64, 64),
        &AttentionOptions::new()
            .causal(DiagonalAlignment::BottomRight)
            .window(Some(37), Some(5))
            .softcap(5.0)
            .scale(3.0),
        None,
        6003,
    );
    let data = mask_values(100 * 129, 6004, true);
    emu(
        &f16_case(2, 4, 2, 100, 129, 64, 64),
        &AttentionOptions::new().key_lengths(&[0, 77]),
        Some(HostMask {
            additive: true,
            dims: [1, 1, 100, 129],
            shape: vec![100, 129],
            data,
        }),
        6005,
    );
    emu(
        &f16_case(1, 2, 1, 100, 129, 64, 64),
        &AttentionOptions::new().scale(100.0),
        None,
        6006,
    );
    emu(
        &f16_case(1, 1, 1, 17, 40, 16, 16),
        &AttentionOptions::new(),
        None,
        6007,
    );
    // Two fragments per subgroup (the test tile), and Q staged in passes
    // with a partial last one (D = 80 on the default tile: 32 + 32 + 16).
    emu(
        &f16_case(1, 2, 1, 40, 64, 32, 32),
        &AttentionOptions::new().causal(DiagonalAlignment::BottomRight),
        None,
        6012,
    );
    emu(
        &f16_case(1, 2, 1, 100, 129, 80, 48),
        &AttentionOptions::new(),
        None,
        6013,
    );
    emu(
        &f16_case(1, 1, 1, 17, 40, 256, 256),
        &AttentionOptions::new(),
        None,
        6008,
    );
    // Logits growing along the keys: the output is rescaled every block.
    let (sq, sk, d) = (64, 129, 64);
    let c = f16_case(1, 1, 1, sq, sk, d, d);
    let q: Vec<f32> = common::random(sq * d, 6009)
        .iter()
        .map(|x| 0.5 + 0.05 * x)
        .collect();
    let k: Vec<f32> = common::random(sk * d, 6010)
        .iter()
        .enumerate()
        .map(|(i, x)| -1.0 + 2.0 * (i / d) as f32 / sk as f32 + 0.05 * x)
        .collect();
    let v = common::random(sk * d, 6011);
    check_coop_with(
        &ctx,
        &c,
        &AttentionOptions::new().scale(1.0),
        None,
        0,
        Some([q, k, v]),
        CoopRun::EmulatedAllTiles,
    );
}

/// The emulated tensor-core algorithm, CI-sized (`coop_algorithm_emulated`
/// is the whole set): several query and key blocks, partial blocks, GQA,
/// causal in both alignments, a window with soft-cap, an additive mask with
/// key lengths (one 0), D = 80 (Q staged in passes), two fragments per
/// subgroup. Runs on every adapter with f16 and subgroups (about 30 s on
/// lavapipe with a cold shader cache; the real kernel's suite runs on the
/// H200).
#[test]
fn coop_algorithm_emulated_small() {
    let Some(ctx) = emulation_ctx("coop_algorithm_emulated_small") else {
        return;
    };
    let emu = |c: &Case, opts: &AttentionOptions, seed: u64| {
        check_coop_with(&ctx, c, opts, None, seed, None, CoopRun::Emulated)
    };
    // The conditional rescale of O (every block moves the reference max).
    let c = f16_case(1, 2, 1, 17, 100, 32, 32);
    check_coop_with(
        &ctx,
        &c,
        &AttentionOptions::new().scale(1.0),
        None,
        0,
        Some(ramp_qkv(&c)),
        CoopRun::Emulated,
    );
    emu(
        &f16_case(1, 2, 2, 65, 100, 64, 64),
        &AttentionOptions::new().causal(DiagonalAlignment::TopLeft),
        7001,
    );
    emu(
        &f16_case(1, 2, 1, 40, 64, 32, 32),
        &AttentionOptions::new().causal(DiagonalAlignment::BottomRight),
        7003,
    );
    emu(
        &f16_case(1, 1, 1, 70, 90, 80, 48),
        &AttentionOptions::new()
            .window(Some(20), Some(5))
            .softcap(2.5),
        7005,
    );
    let data = mask_values(3 * 33 * 50, 7006, true);
    let m = HostMask {
        additive: true,
        dims: [3, 1, 33, 50],
        shape: vec![3, 1, 33, 50],
        data,
    };
    check_coop_with(
        &ctx,
        &f16_case(3, 2, 2, 33, 50, 32, 32),
        &AttentionOptions::new().key_lengths(&[50, 0, 21]),
        Some(m),
        7006,
        None,
        CoopRun::Emulated,
    );
}

/// Random q, k, v for `c` at magnitudes f16 cannot hold on its own: q up
/// to 1e5 (past 65504), k down to 1e-5, v at 3e4; the split kernel's
/// per-head exponents must bring each into range (without them q's hi
/// halves overflow and k's lo halves fall into f16's subnormals).
fn scaled_qkv(c: &Case, seed: u64) -> [Vec<f32>; 3] {
    let scale = |n: usize, seed: u64, m: f32| -> Vec<f32> {
        common::random(n, seed).into_iter().map(|x| x * m).collect()
    };
    [
        scale(c.b * c.hq * c.sq * c.d, seed, 1e5),
        scale(c.b * c.hkv * c.sk * c.d, seed + 1, 1e-5),
        scale(c.b * c.hkv * c.sk * c.dv, seed + 2, 3e4),
    ]
}

/// The f32 form of the tensor-core kernel (each value split into two
/// halves, three products) with emulated matrix operations, on any adapter
/// with f16 and subgroups: held to f32's accuracy (at most twice the naive
/// f32 kernel's error plus 2e-6, relative to the output's scale) on odd
/// sizes, Dv != D, GQA, causal, a mask with key lengths, the rescale and
/// magnitudes outside f16's range.
#[test]
fn coop_f32_split_emulated() {
    let Some(ctx) = emulation_ctx("coop_f32_split_emulated") else {
        return;
    };
    let f32_case = |b, hq, hkv, sq, sk, d, dv| Case::new(b, hq, hkv, sq, sk, d, dv);
    let emu = |c: &Case, opts: &AttentionOptions, mask: Option<HostMask>, seed: u64, data| {
        check_coop_with(&ctx, c, opts, mask, seed, data, CoopRun::Emulated)
    };
    emu(
        &f32_case(2, 2, 1, 33, 70, 32, 48),
        &AttentionOptions::new(),
        None,
        8000,
        None,
    );
    emu(
        &f32_case(1, 2, 2, 65, 40, 32, 32),
        &AttentionOptions::new().causal(DiagonalAlignment::BottomRight),
        None,
        8001,
        None,
    );
    let data = mask_values(2 * 17 * 50, 8002, true);
    emu(
        &f32_case(2, 2, 1, 17, 50, 16, 16),
        &AttentionOptions::new().key_lengths(&[50, 23]),
        Some(HostMask {
            additive: true,
            dims: [2, 1, 17, 50],
            shape: vec![2, 1, 17, 50],
            data,
        }),
        8002,
        None,
    );
    let c = f32_case(1, 2, 1, 17, 100, 32, 32);
    emu(
        &c,
        &AttentionOptions::new().scale(1.0),
        None,
        0,
        Some(ramp_qkv(&c)),
    );
    let c = f32_case(1, 4, 2, 29, 37, 32, 16);
    emu(
        &c,
        &AttentionOptions::new(),
        None,
        0,
        Some(scaled_qkv(&c, 8004)),
    );
}

/// Infinities and NaN in f32 inputs of the tensor-core kernel (each value
/// split into halves, which cannot carry them: inf's low half is inf -
/// inf). The split-scale pass flags them and the guarded f32 flash kernel
/// recomputes O and lse, so every non-finite output (+inf, -inf, NaN) sits
/// where the f32 flash kernel puts it and the finite ones agree. Finite
/// inputs must keep the split kernel's result: the guarded kernel leaves
/// it alone, so it differs from the flash kernel's in its last bits
/// somewhere (a fallback that always ran would fail here). A value past a
/// batch's key length is never read and raises no flag. Emulated matrix
/// operations on any adapter with f16 and subgroups, tensor cores where
/// present.
#[test]
fn coop_f32_split_non_finite_inputs() {
    let Some(ctx) = emulation_ctx("coop_f32_split_non_finite_inputs") else {
        return;
    };
    let mut kernels = vec![AttentionKernel::FlashCoopEmulated];
    if wgtile::tune::has_coop_f16(ctx.profile()) {
        kernels.push(AttentionKernel::FlashCoop);
    }
    let (b, hq, hkv, sq, sk, d, dv) = (2, 2, 1, 33, 70, 32, 48);
    let q_at = |z: usize, h: usize, i: usize, e: usize| ((z * hq + h) * sq + i) * d + e;
    let k_at = |z: usize, j: usize, e: usize| (z * hkv * sk + j) * d + e;
    let v_at = |z: usize, j: usize, e: usize| (z * hkv * sk + j) * dv + e;
    let base = [
        common::random(b * hq * sq * d, 9300),
        common::random(b * hkv * sk * d, 9301),
        common::random(b * hkv * sk * dv, 9302),
    ];
    // (operand, index, value) edits; per case: name, edits, key lengths,
    // whether the flag is set.
    type Edit = (usize, usize, f32);
    type NonFiniteCase = (&'static str, Vec<Edit>, Option<[u32; 2]>, bool);
    let cases: Vec<NonFiniteCase> = vec![
        ("finite", vec![], None, false),
        (
            "+inf in V",
            vec![(2, v_at(0, 5, 3), f32::INFINITY)],
            None,
            true,
        ),
        (
            "+inf and -inf in V, one key",
            vec![
                (2, v_at(1, 9, 0), f32::INFINITY),
                (2, v_at(1, 9, 1), f32::NEG_INFINITY),
            ],
            None,
            true,
        ),
        (
            "-inf in K",
            vec![(1, k_at(0, 11, 4), f32::NEG_INFINITY)],
            None,
            true,
        ),
        (
            "+inf in Q",
            vec![(0, q_at(1, 1, 20, 7), f32::INFINITY)],
            None,
            true,
        ),
        ("NaN in V", vec![(2, v_at(1, 60, 2), f32::NAN)], None, true),
        (
            "inf in V past batch 1's key length",
            vec![(2, v_at(1, 50, 3), f32::INFINITY)],
            Some([70, 40]),
            false,
        ),
    ];
    for (name, edits, lengths, flagged) in cases {
        let mut data = base.clone();
        for &(operand, at, value) in &edits {
            data[operand][at] = value;
        }
        let q = ctx.tensor(&data[0], [b, hq, sq, d]).unwrap();
        let k = ctx.tensor(&data[1], [b, hkv, sk, d]).unwrap();
        let v = ctx.tensor(&data[2], [b, hkv, sk, dv]).unwrap();
        let mut opts = AttentionOptions::new().with_lse();
        if let Some(l) = lengths {
            opts = opts.key_lengths(&l);
        }
        let (want_o, want_lse) = run_poisoned(
            &ctx,
            &q,
            &k,
            &v,
            &opts.clone().kernel(AttentionKernel::Flash),
        );
        assert!(
            want_o.iter().any(|x| !x.is_finite()) == flagged,
            "{name}: the case should {}give non-finite outputs",
            if flagged { "" } else { "not " }
        );
        for &kernel in &kernels {
            let (o, lse) = run_poisoned(&ctx, &q, &k, &v, &opts.clone().kernel(kernel));
            for (what, got, want) in [("O", &o, &want_o), ("lse", &lse, &want_lse)] {
                for (i, (&g, &w)) in got.iter().zip(want.iter()).enumerate() {
                    let same = if w.is_finite() {
                        (g - w).abs() <= 1e-5 * (1.0 + w.abs())
                    } else {
                        g == w || (g.is_nan() && w.is_nan())
                    };
                    assert!(
                        same,
                        "{kernel:?}, {name}: {what}[{i}] = {g}, the f32 flash kernel gives {w}"
                    );
                }
            }
            let identical = o
                .iter()
                .zip(&want_o)
                .all(|(g, w)| g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()));
            assert_eq!(
                identical,
                flagged,
                "{kernel:?}, {name}: the output should {}be the f32 flash kernel's, bit for bit",
                if flagged { "" } else { "not " }
            );
        }
    }
}

/// The f32 split kernel on tensor cores: sizes, head dims, options and
/// magnitudes outside f16's range, at f32's accuracy (as
/// `coop_f32_split_emulated`).
#[test]
fn coop_f32_split() {
    let Some(ctx) = coop_ctx("coop_f32_split") else {
        return;
    };
    let mut seed = 9000;
    for (sq, sk) in [(17, 129), (129, 100), (300, 300)] {
        for (d, dv) in [(64, 64), (128, 128), (128, 64)] {
            seed += 3;
            check_coop(
                &ctx,
                &Case::new(2, 2, 1, sq, sk, d, dv),
                &AttentionOptions::new(),
                None,
                seed,
            );
        }
    }
    for align in [DiagonalAlignment::TopLeft, DiagonalAlignment::BottomRight] {
        seed += 3;
        check_coop(
            &ctx,
            &Case::new(1, 4, 1, 129, 300, 128, 128),
            &AttentionOptions::new()
                .causal(align)
                .window(Some(50), None)
                .softcap(20.0),
            None,
            seed,
        );
    }
    let c = Case::new(1, 2, 1, 100, 300, 128, 128);
    check_coop_with(
        &ctx,
        &c,
        &AttentionOptions::new().scale(1.0),
        None,
        0,
        Some(ramp_qkv(&c)),
        CoopRun::TensorCores,
    );
    for (d, dv) in [(128, 128), (16, 256)] {
        let c = Case::new(2, 4, 2, 100, 129, d, dv);
        check_coop_with(
            &ctx,
            &c,
            &AttentionOptions::new(),
            None,
            0,
            Some(scaled_qkv(&c, 9100)),
            CoopRun::TensorCores,
        );
    }
}

/// The tensor-core backward's algorithm with emulated matrix operations
/// (`AttentionKernel::FlashCoopEmulated` for the backward only; the forward
/// is `Auto`), on every adapter with f16 and subgroups: partial key and
/// query blocks, GQA 2:1 (dK and dV summed over the group), D != Dv, causal
/// bottom-right with key lengths (one 0), a window with soft-cap, and an
/// additive mask. Two head-dim pairs only: each pair compiles two emulated
/// kernels, slow on a cold lavapipe cache. The real kernels' tests run on
/// the H200 (`coop_backward_on_tensor_cores`).
#[test]
fn coop_backward_emulated() {
    let Some(ctx) = emulation_ctx("coop_backward_emulated") else {
        return;
    };
    let emu = Some((AttentionKernel::FlashCoopEmulated, None));
    // Whole interior blocks in both kernels (no mask: 64-row dQ blocks,
    // 64-key dK/dV blocks), where the row statistics come from registers
    // and workgroup memory instead of `p_ds`. Scale 1 makes the gradients
    // large against the f16 tolerance (a dropped Delta fails here).
    check_backward_kernel(
        &ctx,
        &f16_case(1, 1, 1, 131, 70, 32, 32),
        &AttentionOptions::new().scale(1.0),
        emu,
        None,
        8000,
    );
    check_backward_kernel(
        &ctx,
        &f16_case(1, 2, 1, 33, 71, 32, 48),
        &AttentionOptions::new(),
        emu,
        None,
        8001,
    );
    check_backward_kernel(
        &ctx,
        &f16_case(3, 2, 2, 20, 30, 32, 48),
        &AttentionOptions::new()
            .key_lengths(&[30, 0, 17])
            .causal(DiagonalAlignment::BottomRight),
        emu,
        None,
        8002,
    );
    check_backward_kernel(
        &ctx,
        &f16_case(1, 1, 1, 80, 70, 16, 16),
        &AttentionOptions::new()
            .window(Some(9), Some(2))
            .softcap(2.0),
        emu,
        None,
        8003,
    );
    let data = mask_values(2 * 17 * 29, 8004, true);
    let m = HostMask {
        additive: true,
        dims: [2, 1, 17, 29],
        shape: vec![2, 1, 17, 29],
        data,
    };
    check_backward_kernel(
        &ctx,
        &f16_case(2, 2, 1, 17, 29, 16, 16),
        &AttentionOptions::new().causal(DiagonalAlignment::TopLeft),
        emu,
        Some(m),
        8005,
    );
}

/// The tensor-core backward (both kernels on cooperative matrices) against
/// f64 on adapters that have them: every candidate and sweep tile, head
/// dims 64 and 128 and D != Dv, causal in both alignments, windows,
/// soft-cap, masks, GQA, key lengths, and `Auto`, which must pick it for
/// f16.
#[test]
fn coop_backward_on_tensor_cores() {
    let Some(ctx) = coop_ctx("coop_backward_on_tensor_cores") else {
        return;
    };
    use wgtile::tune::attention::{BACKWARD_COOP_CANDIDATES, BACKWARD_COOP_SWEEP};
    let tc = |t: Option<BackwardCoopTiles>| Some((AttentionKernel::FlashCoop, t));
    for (n, t) in BACKWARD_COOP_CANDIDATES
        .iter()
        .chain(&BACKWARD_COOP_SWEEP)
        .enumerate()
    {
        check_backward_kernel(
            &ctx,
            &f16_case(1, 4, 2, 100, 129, 64, 64),
            &AttentionOptions::new().causal(DiagonalAlignment::TopLeft),
            tc(Some(*t)),
            None,
            8100 + n as u64,
        );
    }
    check_backward_kernel(
        &ctx,
        &f16_case(2, 2, 2, 129, 64, 128, 128),
        &AttentionOptions::new(),
        tc(None),
        None,
        8110,
    );
    check_backward_kernel(
        &ctx,
        &f16_case(3, 4, 1, 37, 70, 128, 64),
        &AttentionOptions::new()
            .key_lengths(&[70, 0, 33])
            .causal(DiagonalAlignment::BottomRight)
            .window(Some(20), None),
        tc(None),
        None,
        8111,
    );
    check_backward_kernel(
        &ctx,
        &f16_case(1, 2, 1, 64, 100, 64, 32),
        &AttentionOptions::new().softcap(3.0).scale(0.3),
        tc(None),
        None,
        8112,
    );
    let data = mask_values(17 * 100, 8113, false);
    let m = HostMask {
        additive: false,
        dims: [1, 1, 17, 100],
        shape: vec![17, 100],
        data,
    };
    check_backward_kernel(
        &ctx,
        &f16_case(2, 2, 2, 17, 100, 80, 80),
        &AttentionOptions::new(),
        tc(None),
        Some(m),
        8113,
    );
    check_backward_kernel(
        &ctx,
        &f16_case(1, 2, 2, 33, 33, 256, 256),
        &AttentionOptions::new().causal(DiagonalAlignment::BottomRight),
        tc(None),
        None,
        8114,
    );
    // Auto takes the tensor cores for f16 up to D = 128.
    let (q, _) = common::upload(
        &ctx,
        &common::random(64 * 64, 8115),
        &[1, 1, 64, 64],
        DType::F16,
    );
    let opts = AttentionOptions::new().with_lse();
    let fwd = ctx.attention(&q, &q, &q, &opts).unwrap();
    let (plan, _) = ctx
        .attention_backward_plan(&q, &q, &q, &fwd.o, &fwd.o, &fwd.lse.unwrap(), &opts)
        .unwrap();
    assert!(plan.label().contains("tensor cores"), "{}", plan.label());
    check_backward(
        &ctx,
        &f16_case(1, 4, 4, 65, 65, 64, 64),
        &AttentionOptions::new().causal(DiagonalAlignment::TopLeft),
        None,
        8116,
    );
}

/// The tensor-core decode kernel's cases: GQA packing (one row, 12 rows,
/// a full 16-row chunk, two chunks), one and two row fragments per
/// workgroup, Dv != D, key lengths and causal
/// bottom-right over caches that end inside a block (the staged tail) and
/// cross splits, a window with soft-cap, an additive mask; against f64
/// with check_decode's rule, for `kernel` (the real or emulated one).
fn decode_coop_cases(ctx: &Context, kernel: AttentionKernel) {
    let br = DiagonalAlignment::BottomRight;
    let opts = || AttentionOptions::new().kernel(kernel);
    check_decode(
        ctx,
        &f16_case(1, 8, 2, 1, 263, 64, 64),
        &opts().causal(br),
        None,
        900,
    );
    check_decode(
        ctx,
        &f16_case(2, 8, 2, 3, 263, 64, 64),
        &opts().causal(br).key_lengths(&[263, 70]),
        None,
        901,
    );
    check_decode(ctx, &f16_case(1, 32, 2, 1, 100, 32, 48), &opts(), None, 902);
    // Large logits: blocks move the reference max (the conditional rescale).
    check_decode(
        ctx,
        &f16_case(1, 8, 2, 1, 263, 64, 64),
        &opts().scale(100.0),
        None,
        910,
    );
    check_decode(
        ctx,
        &f16_case(1, 8, 1, 3, 50, 16, 16),
        &opts().window(Some(20), Some(0)).softcap(3.0),
        None,
        903,
    );
    // Prefill shapes: chunks within one head and across two, causal in both
    // alignments (blocks skipped, interior blocks, the diagonal).
    check_decode(
        ctx,
        &f16_case(1, 2, 1, 40, 70, 32, 32),
        &opts().causal(DiagonalAlignment::TopLeft),
        None,
        906,
    );
    check_decode(
        ctx,
        &f16_case(2, 2, 2, 65, 50, 16, 32),
        &opts().causal(br),
        None,
        907,
    );
    // The row fragments forced the other way: one on a prefill shape, two
    // on a decode shape (12 rows in a 32-row workgroup).
    let mut one = opts().causal(DiagonalAlignment::TopLeft);
    one.decode_coop_rf = Some(1);
    check_decode(ctx, &f16_case(1, 2, 1, 40, 70, 32, 32), &one, None, 908);
    let mut two = opts().causal(br).key_lengths(&[263, 70]);
    two.decode_coop_rf = Some(2);
    check_decode(ctx, &f16_case(2, 8, 2, 3, 263, 64, 64), &two, None, 909);
    check_decode(
        ctx,
        &f16_case(1, 4, 1, 2, 97, 32, 32),
        &opts(),
        Some(HostMask {
            additive: true,
            dims: [1, 1, 2, 97],
            shape: vec![2, 97],
            data: mask_values(2 * 97, 904, true),
        }),
        905,
    );
}

/// The tensor-core decode algorithm with emulated matrix operations, on
/// every adapter with f16 and subgroups.
#[test]
fn decode_coop_emulated() {
    let Some(ctx) = emulation_ctx("decode_coop_emulated") else {
        return;
    };
    decode_coop_cases(&ctx, AttentionKernel::DecodeCoopEmulated);
}

/// The tensor-core decode kernel on adapters with cooperative matrices, and
/// its errors: f32 inputs, head dims not multiples of 16.
#[test]
fn decode_coop_on_tensor_cores() {
    let Some(ctx) = coop_ctx("decode_coop_on_tensor_cores") else {
        return;
    };
    decode_coop_cases(&ctx, AttentionKernel::DecodeCoop);
    let opts = AttentionOptions::new().kernel(AttentionKernel::DecodeCoop);
    let q = ctx.zeros([1, 4, 1, 64], DType::F32).unwrap();
    let k = ctx.zeros([1, 1, 30, 64], DType::F32).unwrap();
    assert!(matches!(
        ctx.attention(&q, &k, &k, &opts),
        Err(Error::InvalidArgument(_))
    ));
    let q = ctx.zeros([1, 4, 1, 40], DType::F16).unwrap();
    let k = ctx.zeros([1, 1, 30, 40], DType::F16).unwrap();
    assert!(matches!(
        ctx.attention(&q, &k, &k, &opts),
        Err(Error::InvalidArgument(_))
    ));
}

/// The tensor-core backward and decode kernels refuse what they cannot run
/// with named errors: f32 inputs, head dims that are not multiples of 16,
/// tiles that do not fit, and (where the adapter lacks them) cooperative
/// matrices.
#[test]
fn coop_backward_and_decode_errors() {
    let Some(ctx) = common::ctx() else { return };
    let has_tc = wgtile::tune::has_coop_f16(ctx.profile());
    let emu_ok = ctx.profile().shader_f16 && ctx.profile().subgroups;
    let zeros = |shape: [usize; 4], dtype| ctx.zeros(shape, dtype).unwrap();
    let lse = ctx.zeros([1, 2, 20], DType::F32).unwrap();
    let backward = |dtype: DType, d: usize, opts: &AttentionOptions| {
        let q = zeros([1, 2, 20, d], dtype);
        let k = zeros([1, 1, 30, d], dtype);
        ctx.attention_backward(&q, &k, &k, &q, &q, &lse, opts)
            .map(|_| ())
    };
    let decode = |dtype: DType, d: usize, kernel: AttentionKernel| {
        let q = zeros([1, 4, 1, d], dtype);
        let k = zeros([1, 1, 30, d], dtype);
        ctx.attention(&q, &k, &k, &AttentionOptions::new().kernel(kernel))
            .map(|_| ())
    };
    for kernel in [
        AttentionKernel::FlashCoop,
        AttentionKernel::FlashCoopEmulated,
    ] {
        let opts = AttentionOptions::new().kernel(kernel);
        let runs = if kernel == AttentionKernel::FlashCoop {
            has_tc
        } else {
            emu_ok
        };
        if !runs {
            assert!(matches!(
                backward(DType::F16, 32, &opts),
                Err(Error::UnsupportedFeature { .. })
            ));
            continue;
        }
        assert!(matches!(
            backward(DType::F32, 32, &opts),
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            backward(DType::F16, 40, &opts),
            Err(Error::InvalidArgument(_))
        ));
        // A tile far over the workgroup-memory limit.
        let mut huge = opts.clone();
        huge.backward_coop_tiles = Some(BackwardCoopTiles {
            subgroups: 64,
            block: 256,
        });
        assert!(matches!(
            backward(DType::F16, 32, &huge),
            Err(Error::InvalidArgument(_))
        ));
    }
    for kernel in [
        AttentionKernel::DecodeCoop,
        AttentionKernel::DecodeCoopEmulated,
    ] {
        let runs = if kernel == AttentionKernel::DecodeCoop {
            has_tc
        } else {
            emu_ok
        };
        if !runs {
            assert!(matches!(
                decode(DType::F16, 32, kernel),
                Err(Error::UnsupportedFeature { .. })
            ));
            continue;
        }
        assert!(matches!(
            decode(DType::F32, 32, kernel),
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            decode(DType::F16, 40, kernel),
            Err(Error::InvalidArgument(_))
        ));
    }
}
