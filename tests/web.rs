//! The browser suite: wgtile in WebGPU through headless Chromium
//! (wasm-bindgen-test; `cargo xtask test --browser` installs what it needs
//! and runs it). The async API is the whole API there: `Context::new`,
//! plans and `to_vec().await`. Matmul, epilogues, fusion, row ops,
//! attention forward, backward and decoding, quantised GEMVs, the
//! quantisation kernels, bf16, fused row ops, reductions down columns,
//! layout ops and timing against the native suite's f64 references and tolerances
//! (`tests/common`), on odd shapes, outputs poisoned first.

#![cfg(target_arch = "wasm32")]

mod common;

use wasm_bindgen_test::{wasm_bindgen_test, wasm_bindgen_test_configure};
use wgtile::{
    AttentionOptions, Axis, Context, ContextOptions, DType, DiagonalAlignment, Epilogue, Error,
    MatmulOptions, QuantAxis, QuantFormat, Reduction, Tensor, TimeSource, TimingOptions,
};

wasm_bindgen_test_configure!(run_in_browser);

async fn ctx() -> Context {
    Context::new(ContextOptions::default())
        .await
        .expect("no WebGPU adapter: Chromium needs --enable-unsafe-webgpu (webdriver.json)")
}

async fn host(t: &Tensor) -> Vec<f32> {
    t.to_vec::<f32>().await.expect("read back")
}

/// `plan`'s output poisoned with NaN, the plan run, the output read back.
async fn run(ctx: &Context, plan: &wgtile::Plan) -> Vec<f32> {
    ctx.fill(plan.output(), f32::NAN).unwrap();
    plan.run().unwrap();
    host(plan.output()).await
}

#[wasm_bindgen_test]
async fn the_adapter_and_its_profile() {
    let ctx = ctx().await;
    let p = ctx.profile();
    wasm_bindgen_test::console_log!("browser adapter:\n{p}");
    assert_eq!(p.backend, wgtile::wgpu::Backend::BrowserWebGpu);
    assert!(p.max_invocations >= 64, "{p}");
}

#[wasm_bindgen_test]
async fn matmul_on_odd_shapes_and_batches() {
    let ctx = ctx().await;
    for (batch, m, k, n) in [
        (1, 1, 1, 1),
        (1, 7, 13, 5),
        (1, 33, 65, 17),
        (3, 17, 31, 9),
        (1, 64, 64, 64),
        // A few rows against even N: the GEMV of several rows.
        (1, 5, 129, 258),
    ] {
        let a = common::random(batch * m * k, 1 + m as u64);
        let b = common::random(k * n, 2 + n as u64);
        let ta = ctx.tensor(&a, [batch, m, k]).unwrap();
        let tb = ctx.tensor(&b, [k, n]).unwrap();
        let plan = ctx
            .matmul_plan(&ta, &tb, None, &MatmulOptions::default())
            .unwrap();
        if (m, n) == (5, 258) {
            assert!(plan.label().contains("5 rows at once"), "{}", plan.label());
        }
        let got = run(&ctx, &plan).await;
        let offsets: Vec<(usize, usize)> = (0..batch).map(|z| (z * m * k, 0)).collect();
        let (want, mag) = common::matmul_ref(&a, &b, m, n, k, &offsets);
        common::assert_close(
            &format!("[{batch}, {m}, {k}] x [{k}, {n}] ({})", plan.label()),
            &got,
            &want,
            |i| common::matmul_tolerance(DType::F32, k, want[i], mag[i]),
        );
    }
}

#[wasm_bindgen_test]
async fn matmul_epilogue_bias_and_relu() {
    let ctx = ctx().await;
    let (m, k, n) = (19, 23, 29);
    let a = common::random(m * k, 3);
    let b = common::random(k * n, 4);
    let bias = common::random(n, 5);
    let (ta, tb) = (
        ctx.tensor(&a, [m, k]).unwrap(),
        ctx.tensor(&b, [k, n]).unwrap(),
    );
    let tbias = ctx.tensor(&bias, [n]).unwrap();
    let epilogue = Epilogue::new().bias(&tbias).relu();
    let plan = ctx
        .matmul_plan_with(&ta, &tb, None, &MatmulOptions::default(), &epilogue)
        .unwrap();
    let got = run(&ctx, &plan).await;
    let (c, mag) = common::matmul_ref(&a, &b, m, n, k, &[(0, 0)]);
    let want: Vec<f64> = c
        .iter()
        .enumerate()
        .map(|(i, v)| (v + f64::from(bias[i % n])).max(0.0))
        .collect();
    common::assert_close("bias + relu epilogue", &got, &want, |i| {
        common::matmul_tolerance(DType::F32, k, want[i], mag[i]) + 1e-7
    });
}

#[wasm_bindgen_test]
async fn fused_elementwise_is_one_kernel() {
    let ctx = ctx().await;
    let n = 10007;
    // Inside [-pi, pi], where WGSL bounds sin and cos (2^-11 absolute).
    let xs: Vec<f32> = common::random(n, 6).iter().map(|v| 3.1 * v).collect();
    let x = ctx.tensor(&xs, [n]).unwrap();
    let plan = ctx
        .eval_plan(&(x.expr().sin().square() + x.expr().cos().square()))
        .unwrap();
    assert_eq!(plan.dispatch_count(), 1);
    let got = run(&ctx, &plan).await;
    let want: Vec<f64> = xs
        .iter()
        .map(|&v| f64::from(v).sin().powi(2) + f64::from(v).cos().powi(2))
        .collect();
    // WGSL's accuracy for sin and cos is 2^-11 absolute (SwiftShader is
    // near it: 3.8e-4 seen); the squares and the sum: 4 x 2^-11.
    common::assert_close("sin^2 + cos^2", &got, &want, |_| 4.0 * 2f64.powi(-11));
}

#[wasm_bindgen_test]
async fn softmax_and_layer_norm_rows() {
    let ctx = ctx().await;
    let (rows, cols) = (37, 131);
    let xs: Vec<f32> = common::random(rows * cols, 7)
        .iter()
        .map(|v| 3.0 * v)
        .collect();
    let x = ctx.tensor(&xs, [rows, cols]).unwrap();
    let soft = run(&ctx, &ctx.softmax_plan(&x).unwrap()).await;
    let norm = run(&ctx, &ctx.layer_norm_plan(&x, None, None, 1e-5).unwrap()).await;
    let ws = common::softmax_rows(&xs.iter().map(|&v| f64::from(v)).collect::<Vec<_>>(), cols);
    let mut wn = Vec::new();
    for r in 0..rows {
        let row: Vec<f64> = xs[r * cols..(r + 1) * cols]
            .iter()
            .map(|&v| f64::from(v))
            .collect();
        let mean = row.iter().sum::<f64>() / cols as f64;
        let var = row.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / cols as f64;
        wn.extend(row.iter().map(|v| (v - mean) / (var + 1e-5).sqrt()));
    }
    // exp within a few ulp; the sums over 131 values in f32.
    common::assert_close("softmax", &soft, &ws, |i| {
        1e-6 * (1.0 + ws[i] * cols as f64)
    });
    common::assert_close("layer norm", &norm, &wn, |i| 2e-6 * (1.0 + wn[i].abs()));
}

/// f64 attention of `[1, h, s, d]` q, k, v, causal (top-left) or with a
/// boolean mask hiding key `j` of query `i` where `hidden(i, j)`.
fn attention_ref(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    (h, s, d): (usize, usize, usize),
    hidden: impl Fn(usize, usize) -> bool,
) -> Vec<f64> {
    let scale = 1.0 / (d as f64).sqrt();
    let mut out = vec![0.0; h * s * d];
    for head in 0..h {
        let at = |t: &[f32], i: usize, c: usize| f64::from(t[(head * s + i) * d + c]);
        for i in 0..s {
            let scores: Vec<f64> = (0..s)
                .map(|j| {
                    if hidden(i, j) {
                        f64::NEG_INFINITY
                    } else {
                        (0..d).map(|c| at(q, i, c) * at(k, j, c)).sum::<f64>() * scale
                    }
                })
                .collect();
            let max = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let w: Vec<f64> = scores.iter().map(|x| (x - max).exp()).collect();
            let sum: f64 = w.iter().sum();
            for c in 0..d {
                out[(head * s + i) * d + c] = (0..s).map(|j| w[j] * at(v, j, c)).sum::<f64>() / sum;
            }
        }
    }
    out
}

#[wasm_bindgen_test]
async fn attention_causal_and_masked() {
    let ctx = ctx().await;
    let (h, s, d) = (2, 37, 24);
    let q = common::random(h * s * d, 8);
    let k = common::random(h * s * d, 9);
    let v = common::random(h * s * d, 10);
    let shape = [1, h, s, d];
    let (tq, tk, tv) = (
        ctx.tensor(&q, shape).unwrap(),
        ctx.tensor(&k, shape).unwrap(),
        ctx.tensor(&v, shape).unwrap(),
    );
    let causal = AttentionOptions::new().causal(DiagonalAlignment::TopLeft);
    let (plan, out) = ctx.attention_plan(&tq, &tk, &tv, &causal).unwrap();
    let got = run(&ctx, &plan).await;
    assert_eq!(host(&out.o).await, got);
    let want = attention_ref(&q, &k, &v, (h, s, d), |i, j| j > i);
    common::assert_close(&format!("causal ({})", plan.label()), &got, &want, |_| 2e-6);

    // A boolean mask [s, s] (1 = attend) hiding every third key but the diagonal.
    let hidden = |i: usize, j: usize| j % 3 == 1 && j != i;
    let mask: Vec<f32> = (0..s * s)
        .map(|e| if hidden(e / s, e % s) { 0.0 } else { 1.0 })
        .collect();
    let tmask = ctx.tensor(&mask, [s, s]).unwrap();
    let masked = AttentionOptions::new().bool_mask(&tmask);
    let (plan, _) = ctx.attention_plan(&tq, &tk, &tv, &masked).unwrap();
    let got = run(&ctx, &plan).await;
    let want = attention_ref(&q, &k, &v, (h, s, d), hidden);
    common::assert_close(&format!("masked ({})", plan.label()), &got, &want, |_| 2e-6);
}

#[wasm_bindgen_test]
async fn decoding_with_a_kv_cache() {
    let ctx = ctx().await;
    // GQA: 4 query heads over 2 KV heads, 29 cached positions in two appends.
    let (hq, hkv, d, len) = (4, 2, 16, 29);
    let keys = common::random(hkv * len * d, 11);
    let values = common::random(hkv * len * d, 12);
    let q = common::random(hq * d, 13);
    let mut cache = wgtile::KvCache::new(&ctx, 1, hkv, d, d, 8, DType::F32).unwrap();
    for (from, to) in [(0, 20), (20, len)] {
        let part = |t: &[f32]| -> Vec<f32> {
            (0..hkv)
                .flat_map(|h| t[(h * len + from) * d..(h * len + to) * d].to_vec())
                .collect()
        };
        let k = ctx.tensor(&part(&keys), [1, hkv, to - from, d]).unwrap();
        let v = ctx.tensor(&part(&values), [1, hkv, to - from, d]).unwrap();
        cache.append(&k, &v).unwrap();
    }
    let tq = ctx.tensor(&q, [1, hq, 1, d]).unwrap();
    let opts = AttentionOptions::new().causal(DiagonalAlignment::BottomRight);
    let (plan, _) = ctx.attention_cached_plan(&tq, &cache, &opts).unwrap();
    let got = run(&ctx, &plan).await;
    let scale = 1.0 / (d as f64).sqrt();
    let mut want = vec![0.0f64; hq * d];
    for h in 0..hq {
        let kv = h / (hq / hkv);
        let score = |j: usize| {
            (0..d)
                .map(|c| f64::from(q[h * d + c]) * f64::from(keys[(kv * len + j) * d + c]))
                .sum::<f64>()
                * scale
        };
        let max = (0..len).map(score).fold(f64::NEG_INFINITY, f64::max);
        let w: Vec<f64> = (0..len).map(|j| (score(j) - max).exp()).collect();
        let sum: f64 = w.iter().sum();
        for c in 0..d {
            want[h * d + c] = (0..len)
                .map(|j| w[j] * f64::from(values[(kv * len + j) * d + c]))
                .sum::<f64>()
                / sum;
        }
    }
    common::assert_close(&format!("decode ({})", plan.label()), &got, &want, |_| 2e-6);
}

#[wasm_bindgen_test]
async fn attention_backward_against_f64() {
    let ctx = ctx().await;
    let (h, s, d) = (2, 19, 16);
    let [q, k, v, d_o] = [14, 15, 16, 17].map(|seed| common::random(h * s * d, seed));
    let shape = [1, h, s, d];
    let t = |x: &[f32]| ctx.tensor(x, shape).unwrap();
    let opts = AttentionOptions::new().with_lse();
    let fwd = ctx.attention(&t(&q), &t(&k), &t(&v), &opts).unwrap();
    let o = host(&fwd.o).await;
    let grads = ctx
        .attention_backward(
            &t(&q),
            &t(&k),
            &t(&v),
            &fwd.o,
            &t(&d_o),
            fwd.lse.as_ref().unwrap(),
            &opts,
        )
        .unwrap();
    // f64: P = softmax(scale q k^T), dV = P^T dO, dS = P (dO V^T - rowsum(dO o)),
    // dQ = scale dS K, dK = scale dS^T Q.
    let scale = 1.0 / (d as f64).sqrt();
    let (mut dq, mut dk, mut dv) = (
        vec![0.0f64; h * s * d],
        vec![0.0f64; h * s * d],
        vec![0.0f64; h * s * d],
    );
    for head in 0..h {
        let at = |x: &[f32], i: usize, c: usize| f64::from(x[(head * s + i) * d + c]);
        for i in 0..s {
            let sc: Vec<f64> = (0..s)
                .map(|j| (0..d).map(|c| at(&q, i, c) * at(&k, j, c)).sum::<f64>() * scale)
                .collect();
            let m = sc.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let w: Vec<f64> = sc.iter().map(|x| (x - m).exp()).collect();
            let sum: f64 = w.iter().sum();
            let p: Vec<f64> = w.iter().map(|x| x / sum).collect();
            let delta: f64 = (0..d).map(|c| at(&d_o, i, c) * at(&o, i, c)).sum();
            for j in 0..s {
                let dp: f64 = (0..d).map(|c| at(&d_o, i, c) * at(&v, j, c)).sum();
                let ds = p[j] * (dp - delta);
                for c in 0..d {
                    dv[(head * s + j) * d + c] += p[j] * at(&d_o, i, c);
                    dq[(head * s + i) * d + c] += scale * ds * at(&k, j, c);
                    dk[(head * s + j) * d + c] += scale * ds * at(&q, i, c);
                }
            }
        }
    }
    for (name, got, want) in [
        ("dq", &grads.dq, &dq),
        ("dk", &grads.dk, &dk),
        ("dv", &grads.dv, &dv),
    ] {
        let got = host(got).await;
        let top = want.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        // f32 sums over S keys and D features: 1e-5 of the largest gradient.
        common::assert_close(name, &got, want, |_| 1e-5 * top);
    }
}

#[wasm_bindgen_test]
async fn quantized_gemv_and_layout_ops() {
    let ctx = ctx().await;
    // MXFP4 and int8 weights blocked down the columns of [K, N]: the GEMV
    // decodes them in registers.
    let (k, n) = (96, 37);
    let w = common::random(k * n, 18);
    let x = common::random(k, 19);
    let tx = ctx.tensor(&x, [1, k]).unwrap();
    for format in [wgtile::QuantFormat::Mxfp4, wgtile::QuantFormat::Int8] {
        let hq = wgtile::quant::quantize(
            &w,
            &[k, n],
            format,
            wgtile::QuantAxis::Columns,
            format.default_block(),
        )
        .unwrap();
        let wd = hq.dequantize().unwrap();
        let q = ctx.upload_quantized(&hq).unwrap();
        let plan = ctx.matmul_quantized_plan(&tx, &q).unwrap();
        let got = run(&ctx, &plan).await;
        let (want, mag) = common::matmul_ref(&x, &wd, 1, n, k, &[(0, 0)]);
        common::assert_close(&format!("{format} ({})", plan.label()), &got, &want, |i| {
            common::matmul_tolerance(DType::F32, k, want[i], mag[i])
        });
    }
    // A permute and a gather are exact copies.
    let a = common::random(2 * 3 * 5, 20);
    let ta = ctx.tensor(&a, [2, 3, 5]).unwrap();
    let got = host(&ctx.permute(&ta, &[2, 0, 1]).unwrap()).await;
    for (e, &g) in got.iter().enumerate() {
        let (c, i, j) = (e / 6, (e / 3) % 2, e % 3);
        assert_eq!(g, a[(i * 3 + j) * 5 + c], "permute [{e}]");
    }
    let table = common::random(7 * 4, 21);
    let ids = ctx.tensor(&[6i32, 0, 3, 3], [4]).unwrap();
    let rows = host(
        &ctx.gather(&ctx.tensor(&table, [7, 4]).unwrap(), &ids, 0)
            .unwrap(),
    )
    .await;
    for (r, id) in [6usize, 0, 3, 3].into_iter().enumerate() {
        assert_eq!(
            &rows[r * 4..r * 4 + 4],
            &table[id * 4..id * 4 + 4],
            "gather row {r}"
        );
    }
}

#[wasm_bindgen_test]
async fn quantise_on_the_gpu_matches_the_host_bit_for_bit() {
    let ctx = ctx().await;
    // Odd row counts, a partial last block along rows, both axes; the
    // values spread over several binades so every format rounds.
    for (shape, axis) in [
        ([7usize, 96usize], QuantAxis::Rows),
        ([5, 200], QuantAxis::Rows),
        ([96, 13], QuantAxis::Columns),
    ] {
        let n = shape[0] * shape[1];
        let values: Vec<f32> = common::random(n, 22)
            .iter()
            .enumerate()
            .map(|(i, v)| v * [0.01f32, 1.0, 37.0][i % 3])
            .collect();
        let t = ctx.tensor(&values, shape).unwrap();
        for format in QuantFormat::ALL {
            let what = format!("{format} {shape:?} {axis:?}");
            let q = ctx.quantize(&t, format, axis).unwrap();
            let got = q.to_host().await.unwrap();
            let want =
                wgtile::quant::quantize(&values, &shape, format, axis, format.default_block())
                    .unwrap();
            assert_eq!(got.data, want.data, "{what}: codes");
            assert_eq!(got.scales, want.scales, "{what}: scales");
            assert_eq!(got.zeros, want.zeros, "{what}: zero points");
            assert_eq!(
                got.global_scale.to_bits(),
                want.global_scale.to_bits(),
                "{what}"
            );
            // Dequantised on the GPU: exactly the host's decoding.
            let back = host(&ctx.dequantize(&q).unwrap()).await;
            let host_back = want.dequantize().unwrap();
            for (i, (g, w)) in back.iter().zip(&host_back).enumerate() {
                assert_eq!(g.to_bits(), w.to_bits(), "{what}: dequantised [{i}]");
            }
        }
    }
}

#[wasm_bindgen_test]
async fn bf16_matmul_and_softmax() {
    // bf16 is read as u32 words: no shader-f16 needed.
    let ctx = ctx().await;
    let (m, k, n) = (21, 37, 19);
    let (a, ah) = common::upload(&ctx, &common::random(m * k, 23), &[m, k], DType::BF16);
    let (b, bh) = common::upload(&ctx, &common::random(k * n, 24), &[k, n], DType::BF16);
    let c = ctx.matmul(&a, &b).unwrap();
    assert_eq!(c.dtype(), DType::BF16);
    let (want, mag) = common::matmul_ref(&ah, &bh, m, n, k, &[(0, 0)]);
    common::assert_close("bf16 matmul", &c.to_f32_vec().await.unwrap(), &want, |i| {
        common::matmul_tolerance(DType::BF16, k, want[i], mag[i])
    });
    // A few rows against an even N: the GEMV reads the bf16 weight as words.
    let (xs, xh) = common::upload(&ctx, &common::random(3 * k, 28), &[3, k], DType::BF16);
    let (ws, wh) = common::upload(&ctx, &common::random(k * 20, 29), &[k, 20], DType::BF16);
    let plan = ctx
        .matmul_plan(&xs, &ws, None, &MatmulOptions::default())
        .unwrap();
    assert!(
        plan.label().contains("bf16 weight read in place"),
        "{}",
        plan.label()
    );
    ctx.fill(plan.output(), f32::NAN).unwrap();
    plan.run().unwrap();
    let (want, mag) = common::matmul_ref(&xh, &wh, 3, 20, k, &[(0, 0)]);
    common::assert_close(
        "bf16 GEMV of 3 rows",
        &plan.output().to_f32_vec().await.unwrap(),
        &want,
        |i| common::matmul_tolerance(DType::BF16, k, want[i], mag[i]),
    );
    let s = ctx.softmax(&a).unwrap();
    assert_eq!(s.dtype(), DType::BF16);
    let ws = common::softmax_rows(&ah.iter().map(|&v| f64::from(v)).collect::<Vec<_>>(), k);
    // The result rounded to bf16: half an ulp of 8 significand bits.
    common::assert_close("bf16 softmax", &s.to_f32_vec().await.unwrap(), &ws, |i| {
        ws[i] * 2f64.powi(-8) + 1e-6
    });
}

#[wasm_bindgen_test]
async fn fused_row_ops_and_reductions_down_columns() {
    let ctx = ctx().await;
    let (rows, cols) = (29, 67);
    let xs = common::random(rows * cols, 25);
    let ys = common::random(cols, 26);
    let x = ctx.tensor(&xs, [rows, cols]).unwrap();
    let y = ctx.tensor(&ys, [cols]).unwrap();
    // softmax(2x + y) with the elementwise part read inside the row kernel.
    let plan = ctx
        .softmax_of_plan(&(x.expr() * 2.0 + y.expr()), None)
        .unwrap();
    assert_eq!(plan.dispatch_count(), 1, "{}", plan.label());
    let got = run(&ctx, &plan).await;
    let z: Vec<f64> = (0..rows * cols)
        .map(|i| 2.0 * f64::from(xs[i]) + f64::from(ys[i % cols]))
        .collect();
    let want = common::softmax_rows(&z, cols);
    common::assert_close("softmax(2x + y)", &got, &want, |i| {
        1e-6 * (1.0 + want[i] * cols as f64)
    });
    // A sum down the columns (axis 0) and a max along the rows.
    let sums = host(&ctx.sum(&x, Axis::Dim(0)).unwrap()).await;
    let maxes = host(&ctx.reduce(&x, Reduction::Max, Axis::Last).unwrap()).await;
    let want_sums: Vec<f64> = (0..cols)
        .map(|c| (0..rows).map(|r| f64::from(xs[r * cols + c])).sum())
        .collect();
    common::assert_close("sum over axis 0", &sums, &want_sums, |_| 1e-6 * rows as f64);
    for r in 0..rows {
        let want = xs[r * cols..(r + 1) * cols]
            .iter()
            .cloned()
            .fold(f32::NEG_INFINITY, f32::max);
        assert_eq!(maxes[r], want, "max of row {r}");
    }
}

#[wasm_bindgen_test]
async fn timing_awaits_in_the_browser() {
    let ctx = ctx().await;
    let x = ctx.tensor(&common::random(1 << 16, 27), [1 << 16]).unwrap();
    let plan = ctx.copy_plan(&x).unwrap();
    let options = TimingOptions {
        repeats: 4,
        warmup: 1,
        warmup_seconds: 0.0,
    };
    let t = ctx.time_async(&plan, &options).await.unwrap();
    wasm_bindgen_test::console_log!("copy of 256 KiB: {t}");
    assert_eq!(t.samples.len(), 4);
    assert!(t.samples.iter().all(|s| s.is_finite() && *s >= 0.0), "{t}");
    let expected = if ctx.profile().timestamps {
        TimeSource::GpuTimestamps
    } else {
        TimeSource::WallClock
    };
    assert_eq!(t.source, expected);
    assert!(matches!(
        ctx.time_async(
            &plan,
            &TimingOptions {
                repeats: 0,
                ..options
            }
        )
        .await,
        Err(Error::InvalidArgument(_))
    ));
}

#[wasm_bindgen_test]
async fn tensor_cores_forced_without_them_name_the_feature() {
    let ctx = ctx().await;
    if ctx.profile().cooperative_matrix {
        return;
    }
    let a = ctx.zeros([64, 64], DType::F32).unwrap();
    let kernel = common::coop_kernel();
    match ctx.matmul_plan(&a, &a, None, &MatmulOptions::with_kernel(kernel)) {
        Err(Error::UnsupportedFeature { feature, .. }) => {
            assert!(
                feature.contains("COOPERATIVE_MATRIX") || feature.contains("f16"),
                "{feature}"
            )
        }
        other => panic!("{other:?}"),
    }
}

#[wasm_bindgen_test]
async fn bad_input_is_an_error_not_a_hang() {
    let ctx = ctx().await;
    let a = ctx.zeros([3, 4], DType::F32).unwrap();
    let b = ctx.zeros([5, 6], DType::F32).unwrap();
    assert!(matches!(
        ctx.matmul_plan(&a, &b, None, &MatmulOptions::default()),
        Err(Error::ShapeMismatch { .. })
    ));
    if !ctx.profile().shader_f16 {
        assert!(matches!(
            ctx.zeros([4], DType::F16).and_then(|h| ctx.matmul(&h, &h)),
            Err(Error::UnsupportedFeature { .. })
        ));
    }
    // Blocking timing has no meaning without blocking waits.
    let plan = ctx.copy_plan(&a).unwrap();
    assert!(matches!(
        ctx.time(&plan, &Default::default()),
        Err(Error::UnsupportedFeature { .. })
    ));
}
