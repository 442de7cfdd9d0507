//! A tiny BERT encoder with random weights, run end to end on the GPU in
//! one batch (gather, layer norm, a fused QKV projection split three ways,
//! packed attention with key lengths, the exact GELU, residuals, masked
//! mean pooling, L2 normalisation) against an f64 host reference: every
//! new model op working together, with no host round trip in between.

use crate::common;

use wgtile::{AttentionOptions, Context, Epilogue, Tensor};

const VOCAB: usize = 50;
const HIDDEN: usize = 32;
const HEADS: usize = 4;
const HEAD_DIM: usize = HIDDEN / HEADS;
const FFN: usize = 64;
const LAYERS: usize = 2;
const MAX_POS: usize = 16;
const EPS: f64 = 1e-12;

struct Layer {
    wqkv: Vec<f32>,
    bqkv: Vec<f32>,
    wo: Vec<f32>,
    bo: Vec<f32>,
    g1: Vec<f32>,
    b1: Vec<f32>,
    wi: Vec<f32>,
    bi: Vec<f32>,
    wf: Vec<f32>,
    bf: Vec<f32>,
    g2: Vec<f32>,
    b2: Vec<f32>,
}

struct Weights {
    word: Vec<f32>,
    pos: Vec<f32>,
    kind: Vec<f32>,
    ge: Vec<f32>,
    be: Vec<f32>,
    layers: Vec<Layer>,
}

fn weights() -> Weights {
    let mut seed = 1000;
    let mut r = |n: usize, scale: f32, shift: f32| {
        seed += 1;
        common::random(n, seed)
            .iter()
            .map(|v| shift + scale * v)
            .collect::<Vec<f32>>()
    };
    let word = r(VOCAB * HIDDEN, 0.5, 0.0);
    let pos = r(MAX_POS * HIDDEN, 0.5, 0.0);
    let kind = r(2 * HIDDEN, 0.5, 0.0);
    let (ge, be) = (r(HIDDEN, 0.1, 1.0), r(HIDDEN, 0.1, 0.0));
    let layers = (0..LAYERS)
        .map(|_| Layer {
            wqkv: r(HIDDEN * 3 * HIDDEN, 0.3, 0.0),
            bqkv: r(3 * HIDDEN, 0.1, 0.0),
            wo: r(HIDDEN * HIDDEN, 0.3, 0.0),
            bo: r(HIDDEN, 0.1, 0.0),
            g1: r(HIDDEN, 0.1, 1.0),
            b1: r(HIDDEN, 0.1, 0.0),
            wi: r(HIDDEN * FFN, 0.3, 0.0),
            bi: r(FFN, 0.1, 0.0),
            wf: r(FFN * HIDDEN, 0.3, 0.0),
            bf: r(HIDDEN, 0.1, 0.0),
            g2: r(HIDDEN, 0.1, 1.0),
            b2: r(HIDDEN, 0.1, 0.0),
        })
        .collect();
    Weights {
        word,
        pos,
        kind,
        ge,
        be,
        layers,
    }
}

// ------------------------------------------------------------- f64 host side

fn matmul64(x: &[f64], w: &[f32], b: &[f32], rows: usize, k: usize, n: usize) -> Vec<f64> {
    let mut y = vec![0.0; rows * n];
    for i in 0..rows {
        for j in 0..n {
            y[i * n + j] = f64::from(b[j])
                + (0..k)
                    .map(|p| x[i * k + p] * f64::from(w[p * n + j]))
                    .sum::<f64>();
        }
    }
    y
}

fn layer_norm64(x: &[f64], g: &[f32], b: &[f32]) -> Vec<f64> {
    x.chunks(HIDDEN)
        .flat_map(|row| {
            let m = row.iter().sum::<f64>() / HIDDEN as f64;
            let var = row.iter().map(|v| (v - m).powi(2)).sum::<f64>() / HIDDEN as f64;
            let inv = 1.0 / (var + EPS).sqrt();
            row.iter()
                .enumerate()
                .map(move |(j, v)| (v - m) * inv * f64::from(g[j]) + f64::from(b[j]))
                .collect::<Vec<_>>()
        })
        .collect()
}

fn gelu64(v: f64) -> f64 {
    0.5 * v * common::erfc64(-v / std::f64::consts::SQRT_2)
}

/// The encoder in f64: the last hidden states [B, S, HIDDEN] and the
/// pooled, normalised embeddings [B, HIDDEN].
fn forward64(w: &Weights, ids: &[i32], lens: &[u32], s: usize) -> (Vec<f64>, Vec<f64>) {
    let b = lens.len();
    let rows = b * s;
    let mut h: Vec<f64> = (0..rows * HIDDEN)
        .map(|e| {
            let (t, j) = (e / HIDDEN, e % HIDDEN);
            let id = ids[t] as usize;
            f64::from(w.word[id * HIDDEN + j])
                + f64::from(w.pos[(t % s) * HIDDEN + j])
                + f64::from(w.kind[j])
        })
        .collect();
    h = layer_norm64(&h, &w.ge, &w.be);
    let scale = 1.0 / (HEAD_DIM as f64).sqrt();
    for l in &w.layers {
        let qkv = matmul64(&h, &l.wqkv, &l.bqkv, rows, HIDDEN, 3 * HIDDEN);
        let mut attn = vec![0.0; rows * HIDDEN];
        for bi in 0..b {
            for hd in 0..HEADS {
                for i in 0..s {
                    let at = |t: usize, part: usize, c: usize| {
                        qkv[(bi * s + t) * 3 * HIDDEN + part * HIDDEN + hd * HEAD_DIM + c]
                    };
                    let keys = lens[bi] as usize;
                    let logits: Vec<f64> = (0..keys)
                        .map(|j| {
                            (0..HEAD_DIM)
                                .map(|c| at(i, 0, c) * at(j, 1, c))
                                .sum::<f64>()
                                * scale
                        })
                        .collect();
                    let m = logits.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                    let z: f64 = logits.iter().map(|v| (v - m).exp()).sum();
                    for c in 0..HEAD_DIM {
                        attn[(bi * s + i) * HIDDEN + hd * HEAD_DIM + c] = (0..keys)
                            .map(|j| (logits[j] - m).exp() / z * at(j, 2, c))
                            .sum();
                    }
                }
            }
        }
        let o = matmul64(&attn, &l.wo, &l.bo, rows, HIDDEN, HIDDEN);
        let h1: Vec<f64> = o.iter().zip(&h).map(|(a, b)| a + b).collect();
        let h1 = layer_norm64(&h1, &l.g1, &l.b1);
        let inner: Vec<f64> = matmul64(&h1, &l.wi, &l.bi, rows, HIDDEN, FFN)
            .into_iter()
            .map(gelu64)
            .collect();
        let f = matmul64(&inner, &l.wf, &l.bf, rows, FFN, HIDDEN);
        let h2: Vec<f64> = f.iter().zip(&h1).map(|(a, b)| a + b).collect();
        h = layer_norm64(&h2, &l.g2, &l.b2);
    }
    let mut pooled = vec![0.0; b * HIDDEN];
    for bi in 0..b {
        let n = lens[bi] as usize;
        for j in 0..HIDDEN {
            pooled[bi * HIDDEN + j] =
                (0..n).map(|t| h[(bi * s + t) * HIDDEN + j]).sum::<f64>() / n as f64;
        }
        let norm = pooled[bi * HIDDEN..(bi + 1) * HIDDEN]
            .iter()
            .map(|v| v * v)
            .sum::<f64>()
            .sqrt();
        for v in &mut pooled[bi * HIDDEN..(bi + 1) * HIDDEN] {
            *v /= norm.max(1e-12);
        }
    }
    (h, pooled)
}

// ----------------------------------------------------------------- GPU side

struct GpuLayer {
    t: Vec<Tensor>,
}

fn upload(ctx: &Context, w: &Weights) -> (Vec<Tensor>, Vec<GpuLayer>) {
    let t = |v: &[f32], shape: &[usize]| ctx.tensor(v, shape).unwrap();
    let emb = vec![
        t(&w.word, &[VOCAB, HIDDEN]),
        t(&w.pos, &[MAX_POS, HIDDEN]),
        t(&w.kind, &[2, HIDDEN]),
        t(&w.ge, &[HIDDEN]),
        t(&w.be, &[HIDDEN]),
    ];
    let layers = w
        .layers
        .iter()
        .map(|l| GpuLayer {
            t: vec![
                t(&l.wqkv, &[HIDDEN, 3 * HIDDEN]),
                t(&l.bqkv, &[3 * HIDDEN]),
                t(&l.wo, &[HIDDEN, HIDDEN]),
                t(&l.bo, &[HIDDEN]),
                t(&l.g1, &[HIDDEN]),
                t(&l.b1, &[HIDDEN]),
                t(&l.wi, &[HIDDEN, FFN]),
                t(&l.bi, &[FFN]),
                t(&l.wf, &[FFN, HIDDEN]),
                t(&l.bf, &[HIDDEN]),
                t(&l.g2, &[HIDDEN]),
                t(&l.b2, &[HIDDEN]),
            ],
        })
        .collect();
    (emb, layers)
}

fn forward(
    ctx: &Context,
    emb: &[Tensor],
    layers: &[GpuLayer],
    ids: &Tensor,
    mask: &Tensor,
    lens: &[u32],
) -> wgtile::Result<(Tensor, Tensor)> {
    let (b, s) = (ids.shape()[0], ids.shape()[1]);
    let words = ctx.gather(&emb[0], ids, 0)?;
    let pos = ctx.narrow(&emb[1], 0, 0, s)?;
    let kind = ctx.narrow(&emb[2], 0, 0, 1)?;
    let summed = ctx.eval(&(words.expr() + pos.expr() + kind.expr()))?;
    let mut h = ctx.layer_norm(&summed, Some(&emb[3]), Some(&emb[4]), EPS as f32)?;
    let attention = AttentionOptions::new()
        .packed_dims(HEADS, HEADS, HEAD_DIM, HEAD_DIM)
        .key_lengths(lens);
    for l in layers {
        let t = &l.t;
        let qkv = ctx.matmul_with(&h, &t[0], &Epilogue::new().bias(&t[1]))?;
        let parts = ctx.split(&qkv, 2, &[HIDDEN, HIDDEN, HIDDEN])?;
        let attn = ctx
            .attention(&parts[0], &parts[1], &parts[2], &attention)?
            .o;
        let o = ctx.matmul_with(&attn, &t[2], &Epilogue::new().bias(&t[3]).residual(&h))?;
        let h1 = ctx.layer_norm(&o, Some(&t[4]), Some(&t[5]), EPS as f32)?;
        let inner = ctx.matmul_with(&h1, &t[6], &Epilogue::new().bias(&t[7]).gelu())?;
        let f = ctx.matmul_with(&inner, &t[8], &Epilogue::new().bias(&t[9]).residual(&h1))?;
        h = ctx.layer_norm(&f, Some(&t[10]), Some(&t[11]), EPS as f32)?;
    }
    let pooled = ctx.l2_normalize(&ctx.masked_mean(&h, mask)?, 1e-12)?;
    debug_assert_eq!(pooled.shape(), [b, HIDDEN]);
    Ok((h, pooled))
}

#[test]
fn tiny_bert_matches_f64_end_to_end() {
    let Some(ctx) = common::ctx() else { return };
    let ctx = common::context_without(&ctx, wgtile::wgpu::Features::empty());
    let w = weights();
    let (b, s) = (2, 7);
    let lens = [7u32, 4];
    // Padding positions hold id 0, as a tokenizer pads.
    let ids: Vec<i32> = (0..b * s)
        .map(|t| {
            if (t % s) < lens[t / s] as usize {
                1 + (t as i32 * 7919) % (VOCAB as i32 - 1)
            } else {
                0
            }
        })
        .collect();
    let mask: Vec<f32> = (0..b * s)
        .map(|t| f32::from(u8::from((t % s) < lens[t / s] as usize)))
        .collect();
    let (emb, layers) = upload(&ctx, &w);
    let ids_t = ctx.tensor(&ids, [b, s]).unwrap();
    let mask_t = ctx.tensor(&mask, [b, s]).unwrap();
    let s0 = ctx.submissions();
    let (h, pooled) = ctx
        .batch(|| forward(&ctx, &emb, &layers, &ids_t, &mask_t, &lens))
        .unwrap();
    assert_eq!(ctx.submissions() - s0, 1, "the forward is one submission");
    let (h_want, pooled_want) = forward64(&w, &ids, &lens, s);
    let h_got = h.to_vec_blocking::<f32>().unwrap();
    // Every kept token's hidden state (padding rows are not compared: their
    // queries see the kept keys, as in BERT, and pooling drops them).
    for t in 0..b * s {
        if (t % s) >= lens[t / s] as usize {
            continue;
        }
        for j in 0..HIDDEN {
            let (g, want) = (f64::from(h_got[t * HIDDEN + j]), h_want[t * HIDDEN + j]);
            assert!(
                (g - want).abs() <= 2e-4 * (1.0 + want.abs()),
                "token {t} unit {j}: {g} vs {want}"
            );
        }
    }
    let got = pooled.to_vec_blocking::<f32>().unwrap();
    for bi in 0..b {
        let (g, want) = (
            &got[bi * HIDDEN..(bi + 1) * HIDDEN],
            &pooled_want[bi * HIDDEN..(bi + 1) * HIDDEN],
        );
        let cos: f64 = g
            .iter()
            .zip(want)
            .map(|(a, b)| f64::from(*a) * b)
            .sum::<f64>()
            / g.iter().map(|a| f64::from(*a).powi(2)).sum::<f64>().sqrt();
        assert!(cos > 1.0 - 1e-9, "sentence {bi}: cosine {cos}");
    }
}
