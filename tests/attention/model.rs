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
    weights_rounded(|v| v)
}

/// Random weights, each value passed through `round` (to store them
/// exactly in a bf16 checkpoint).
fn weights_rounded(round: impl Fn(f32) -> f32) -> Weights {
    let mut seed = 1000;
    let mut r = |n: usize, scale: f32, shift: f32| {
        seed += 1;
        common::random(n, seed)
            .iter()
            .map(|v| round(shift + scale * v))
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

/// The encoder in f64: every layer's hidden states [B, S, HIDDEN] and the
/// pooled, normalised embeddings [B, HIDDEN].
fn forward64(w: &Weights, ids: &[i32], lens: &[u32], s: usize) -> (Vec<Vec<f64>>, Vec<f64>) {
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
    let mut states = Vec::new();
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
        states.push(h.clone());
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
    (states, pooled)
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
    // Op by op, then batched: chunks of BATCH_CHUNK steps, far fewer
    // submissions.
    let s0 = ctx.submissions();
    drop(forward(&ctx, &emb, &layers, &ids_t, &mask_t, &lens).unwrap());
    let op_by_op = ctx.submissions() - s0;
    let s0 = ctx.submissions();
    let (h, pooled) = ctx
        .batch(|| forward(&ctx, &emb, &layers, &ids_t, &mask_t, &lens))
        .unwrap();
    let batched = ctx.submissions() - s0;
    assert!(
        batched >= 1 && batched * 3 <= op_by_op,
        "the batched forward took {batched} submissions, op by op {op_by_op}"
    );
    let (states, pooled_want) = forward64(&w, &ids, &lens, s);
    let h_want = &states[LAYERS - 1];
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

// ------------------------------------- the example's loader and forward pass

#[path = "../../examples/bert_embed/model.rs"]
mod bert;

/// `w` as a Hugging Face BERT checkpoint's tensors: names, shapes, values,
/// linear weights `[out, in]` (PyTorch's layout).
fn hf_tensors(w: &Weights) -> Vec<(String, Vec<usize>, Vec<f32>)> {
    // Columns `from..from + cols` of an `[inp, n]` matrix, as `[cols, inp]`.
    let linear = |m: &[f32], inp: usize, n: usize, from: usize, cols: usize| -> Vec<f32> {
        (0..cols)
            .flat_map(|o| (0..inp).map(move |i| m[i * n + from + o]))
            .collect()
    };
    let mut out = vec![
        (
            "embeddings.word_embeddings.weight".to_string(),
            vec![VOCAB, HIDDEN],
            w.word.clone(),
        ),
        (
            "embeddings.position_embeddings.weight".into(),
            vec![MAX_POS, HIDDEN],
            w.pos.clone(),
        ),
        // The example reads token type 0 only; type 1 is there as in a real file.
        (
            "embeddings.token_type_embeddings.weight".into(),
            vec![2, HIDDEN],
            w.kind.clone(),
        ),
        (
            "embeddings.LayerNorm.weight".into(),
            vec![HIDDEN],
            w.ge.clone(),
        ),
        (
            "embeddings.LayerNorm.bias".into(),
            vec![HIDDEN],
            w.be.clone(),
        ),
    ];
    for (i, l) in w.layers.iter().enumerate() {
        let at = |name: &str| format!("encoder.layer.{i}.{name}");
        for (j, part) in ["query", "key", "value"].iter().enumerate() {
            out.push((
                at(&format!("attention.self.{part}.weight")),
                vec![HIDDEN, HIDDEN],
                linear(&l.wqkv, HIDDEN, 3 * HIDDEN, j * HIDDEN, HIDDEN),
            ));
            out.push((
                at(&format!("attention.self.{part}.bias")),
                vec![HIDDEN],
                l.bqkv[j * HIDDEN..(j + 1) * HIDDEN].to_vec(),
            ));
        }
        let rest = [
            (
                "attention.output.dense.weight",
                vec![HIDDEN, HIDDEN],
                linear(&l.wo, HIDDEN, HIDDEN, 0, HIDDEN),
            ),
            ("attention.output.dense.bias", vec![HIDDEN], l.bo.clone()),
            (
                "attention.output.LayerNorm.weight",
                vec![HIDDEN],
                l.g1.clone(),
            ),
            (
                "attention.output.LayerNorm.bias",
                vec![HIDDEN],
                l.b1.clone(),
            ),
            (
                "intermediate.dense.weight",
                vec![FFN, HIDDEN],
                linear(&l.wi, HIDDEN, FFN, 0, FFN),
            ),
            ("intermediate.dense.bias", vec![FFN], l.bi.clone()),
            (
                "output.dense.weight",
                vec![HIDDEN, FFN],
                linear(&l.wf, FFN, HIDDEN, 0, HIDDEN),
            ),
            ("output.dense.bias", vec![HIDDEN], l.bf.clone()),
            ("output.LayerNorm.weight", vec![HIDDEN], l.g2.clone()),
            ("output.LayerNorm.bias", vec![HIDDEN], l.b2.clone()),
        ];
        out.extend(rest.into_iter().map(|(n, shape, v)| (at(n), shape, v)));
    }
    out
}

/// Writes `w` as `config.json` and `model.safetensors` (values stored as
/// `dtype`: F32 or BF16) into a new temporary directory.
fn write_checkpoint(w: &Weights, dtype: safetensors::Dtype, tag: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("wgtile-bert-{}-{tag}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = serde_json::json!({
        "architectures": ["BertModel"],
        "hidden_act": "gelu",
        "hidden_size": HIDDEN,
        "intermediate_size": FFN,
        "layer_norm_eps": EPS,
        "max_position_embeddings": MAX_POS,
        "model_type": "bert",
        "num_attention_heads": HEADS,
        "num_hidden_layers": LAYERS,
        "position_embedding_type": "absolute",
        "type_vocab_size": 2,
        "vocab_size": VOCAB,
    });
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    let tensors = hf_tensors(w);
    let bytes: Vec<Vec<u8>> = tensors
        .iter()
        .map(|(_, _, v)| match dtype {
            safetensors::Dtype::BF16 => v
                .iter()
                .flat_map(|&x| wgtile::bf16::from_f32(x).to_le_bytes())
                .collect(),
            _ => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        })
        .collect();
    let views: Vec<(String, safetensors::tensor::TensorView)> = tensors
        .iter()
        .zip(&bytes)
        .map(|((name, shape, _), b)| {
            (
                name.clone(),
                safetensors::tensor::TensorView::new(dtype, shape.clone(), b).unwrap(),
            )
        })
        .collect();
    safetensors::serialize_to_file(views, None, &dir.join("model.safetensors")).unwrap();
    dir
}

fn close_rows(got: &[f32], want: &[f64], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let g = f64::from(*g);
        assert!(
            (g - w).abs() <= tol * (1.0 + w.abs()),
            "{what}: element {i} (token {}, unit {}): {g} vs {w}",
            i / HIDDEN,
            i % HIDDEN
        );
    }
}

fn cosines(got: &[f32], want: &[f64]) -> Vec<f64> {
    got.chunks(HIDDEN)
        .zip(want.chunks(HIDDEN))
        .map(|(g, w)| {
            let dot: f64 = g.iter().zip(w).map(|(a, b)| f64::from(*a) * b).sum();
            let ng = g.iter().map(|a| f64::from(*a).powi(2)).sum::<f64>().sqrt();
            let nw = w.iter().map(|b| b * b).sum::<f64>().sqrt();
            dot / (ng * nw)
        })
        .collect()
}

/// Token ids (0 past each sentence's length, as a tokenizer pads) and the
/// 0/1 attention mask for sentences of `lens` tokens padded to `s`.
fn batch_of(lens: &[u32], s: usize, salt: i32) -> (Vec<i32>, Vec<f32>) {
    let b = lens.len();
    let ids = (0..b * s)
        .map(|t| {
            if (t % s) < lens[t / s] as usize {
                1 + (t as i32 * 7919 + salt) % (VOCAB as i32 - 1)
            } else {
                0
            }
        })
        .collect();
    let mask = (0..b * s)
        .map(|t| f32::from(u8::from((t % s) < lens[t / s] as usize)))
        .collect();
    (ids, mask)
}

/// The example's checkpoint loader and forward pass against the f64
/// encoder: a tiny BERT written as a Hugging Face safetensors file (f32 and
/// bf16 values), every layer's hidden states of every token (padding
/// tokens included: their queries see the kept keys, as in BERT), the
/// embeddings, in one submission; then the plan built once and replayed on
/// other sentences.
#[test]
fn bert_checkpoint_matches_f64_every_layer() {
    let Some(ctx) = common::ctx() else { return };
    let ctx = common::context_without(&ctx, wgtile::wgpu::Features::empty());
    let (b, s) = (3, 11);
    let lens = [11u32, 5, 1];
    for (file_dtype, tag) in [
        (safetensors::Dtype::F32, "f32"),
        (safetensors::Dtype::BF16, "bf16"),
    ] {
        let w = match file_dtype {
            safetensors::Dtype::BF16 => weights_rounded(|v| wgtile::bf16::from_f32(v).to_f32()),
            _ => weights(),
        };
        let dir = write_checkpoint(&w, file_dtype, tag);
        let encoder = bert::Encoder::load(&ctx, &dir, wgtile::DType::F32).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(encoder.cfg.layers, LAYERS);
        let (ids, mask) = batch_of(&lens, s, 0);
        let ids_t = ctx.tensor(&ids, [b, s]).unwrap();
        let mask_t = ctx.tensor(&mask, [b, s]).unwrap();
        let s0 = ctx.submissions();
        drop(encoder.forward(&ctx, &ids_t, &mask_t, true).unwrap());
        let op_by_op = ctx.submissions() - s0;
        let s0 = ctx.submissions();
        let out = ctx
            .batch(|| encoder.forward(&ctx, &ids_t, &mask_t, true))
            .unwrap();
        let batched = ctx.submissions() - s0;
        assert!(
            batched >= 1 && batched * 3 <= op_by_op,
            "{tag}: the batched forward took {batched} submissions, op by op {op_by_op}"
        );
        let (states, pooled) = forward64(&w, &ids, &lens, s);
        assert_eq!(out.hidden.len(), LAYERS);
        for (l, (got, want)) in out.hidden.iter().zip(&states).enumerate() {
            let got = got.to_vec_blocking::<f32>().unwrap();
            close_rows(&got, want, 2e-4, &format!("{tag} checkpoint, layer {l}"));
        }
        let emb = out.embeddings.to_vec_blocking::<f32>().unwrap();
        close_rows(
            &emb,
            &pooled,
            1e-4,
            &format!("{tag} checkpoint, embeddings"),
        );
        for (i, c) in cosines(&emb, &pooled).iter().enumerate() {
            assert!(*c > 1.0 - 1e-9, "{tag}: sentence {i}: cosine {c}");
        }
        // The plan, built once: first these sentences, then others of other
        // lengths, each replay in one submission (after the first, which
        // may also submit the clears of the reused buffers it writes).
        let plan = encoder.plan(&ctx, b, s).unwrap();
        let (ids0, mask0) = batch_of(&[1, 1, 1], s, 3);
        plan.run(&ctx, &ids0, &mask0).unwrap();
        for (salt, lens) in [(0, lens), (17, [3u32, 11, 7])] {
            let (ids, mask) = batch_of(&lens, s, salt);
            let s0 = ctx.submissions();
            plan.run(&ctx, &ids, &mask).unwrap();
            assert_eq!(
                ctx.submissions() - s0,
                1,
                "{tag}: a replay is one submission"
            );
            let (_, pooled) = forward64(&w, &ids, &lens, s);
            let emb = plan.output.embeddings.to_vec_blocking::<f32>().unwrap();
            close_rows(
                &emb,
                &pooled,
                1e-4,
                &format!("{tag} plan, sentences {lens:?}"),
            );
        }
    }
}

/// The example in f16 (weights rounded to f16, f16 activations, f32
/// accumulation): the embeddings within f16's precision of the f64
/// encoder of the f32 weights.
#[test]
fn bert_checkpoint_in_f16() {
    let Some(ctx) = common::ctx() else { return };
    if !ctx.profile().shader_f16 {
        eprintln!("skipped: no shader-f16");
        return;
    }
    let ctx = common::context_without(&ctx, wgtile::wgpu::Features::empty());
    let w = weights();
    let dir = write_checkpoint(&w, safetensors::Dtype::F32, "f16");
    let encoder = bert::Encoder::load(&ctx, &dir, wgtile::DType::F16).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    let (b, s) = (2, 9);
    let lens = [9u32, 4];
    let (ids, mask) = batch_of(&lens, s, 5);
    let ids_t = ctx.tensor(&ids, [b, s]).unwrap();
    let mask_t = ctx
        .tensor_from_f32(&mask, [b, s], wgtile::DType::F16)
        .unwrap();
    let out = ctx
        .batch(|| encoder.forward(&ctx, &ids_t, &mask_t, false))
        .unwrap();
    let (states, pooled) = forward64(&w, &ids, &lens, s);
    let last = out.last.to_f32_vec_blocking().unwrap();
    close_rows(&last, &states[LAYERS - 1], 3e-2, "f16 last layer");
    let emb = out.embeddings.to_f32_vec_blocking().unwrap();
    for (i, c) in cosines(&emb, &pooled).iter().enumerate() {
        assert!(*c > 1.0 - 1e-4, "f16: sentence {i}: cosine {c}");
    }
}
