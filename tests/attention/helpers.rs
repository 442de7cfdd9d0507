//! The shared case builders and f64 references of the attention tests: the
//! problem description ([`Case`], [`HostMask`]), the forward and backward
//! references in f64, and the checks that run a case on the GPU with
//! poisoned outputs and hold it to the error rule of the binary's docs
//! (flash, split-KV and decode forwards in [`check`], the decode kernel
//! alone in [`check_decode`], the backward in [`check_backward`]).

use crate::common;

use wgtile::tune::attention::{BackwardCoopTiles, decode_fits};
use wgtile::{AttentionKernel, AttentionOptions, Context, DType, DiagonalAlignment, Tensor};

#[derive(Clone, Debug)]
pub(crate) struct Case {
    pub(crate) b: usize,
    pub(crate) hq: usize,
    pub(crate) hkv: usize,
    pub(crate) sq: usize,
    pub(crate) sk: usize,
    pub(crate) d: usize,
    pub(crate) dv: usize,
    pub(crate) dtype: DType,
}

impl Case {
    pub(crate) fn new(
        b: usize,
        hq: usize,
        hkv: usize,
        sq: usize,
        sk: usize,
        d: usize,
        dv: usize,
    ) -> Self {
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
pub(crate) struct HostMask {
    pub(crate) additive: bool,
    pub(crate) dims: [usize; 4],
    pub(crate) shape: Vec<usize>,
    pub(crate) data: Vec<f32>,
}

/// Where row i's diagonal sits (key i + offset): 0 top-left; bottom-right
/// aligns to the last key, the batch's own when key lengths are given.
fn diagonal_offset(c: &Case, opts: &AttentionOptions, keys: usize) -> i64 {
    match opts.alignment {
        DiagonalAlignment::TopLeft => 0,
        DiagonalAlignment::BottomRight if opts.key_lengths.is_some() => keys as i64 - c.sq as i64,
        DiagonalAlignment::BottomRight => c.sk as i64 - c.sq as i64,
        DiagonalAlignment::Offset(d) => d,
    }
}

/// f64 reference: returns (O [B, Hq, Sq, Dv], lse [B, Hq, Sq]).
#[allow(clippy::too_many_arguments)]
pub(crate) fn reference(
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

pub(crate) fn max_err(got: &[f32], want: &[f64]) -> f64 {
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
pub(crate) fn run_poisoned(
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
pub(crate) fn check(
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
        // f16's bounds plus the output's bf16 rounding (2^-9 relative).
        DType::BF16 => (3e-3, 1.2e-2),
        other => panic!("attention refuses {other}"),
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

pub(crate) fn mask_values(n: usize, seed: u64, additive: bool) -> Vec<f32> {
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

/// The decode kernel alone (no flash runs, to stay fast on lavapipe) against
/// f64 with the 2x-naive rule: `Auto` must pick it (few packed rows), and
/// forced splits of one and of 3 give the same answer.
pub(crate) fn check_decode(
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
        // f16's bounds plus the output's bf16 rounding (2^-9 relative).
        DType::BF16 => (3e-3, 1.2e-2),
        other => panic!("attention refuses {other}"),
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
pub(crate) fn forward_f64(
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
/// relative to the largest gradient (a floor of 1 would let small-gradient
/// f16 cases pass with Delta dropped).
pub(crate) fn check_backward(
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
pub(crate) fn check_backward_kernel(
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
        // The f32 backward on exact inputs; o rounded to bf16 before Delta
        // and each gradient's own rounding, 2^-9 relative each.
        DType::BF16 => 1e-2,
        other => panic!("attention refuses {other}"),
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
