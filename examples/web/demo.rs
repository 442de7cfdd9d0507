//! The browser demo's tour: what the page (`examples/web/index.html`)
//! shows, each result checked against an f64 reference computed here, in
//! the page, with timings (`Context::time_async`: GPU timestamps where
//! the browser grants them, else the page's clock; median of a few runs). `cargo xtask web` builds it
//! for wasm32 and serves the page on 127.0.0.1.
//!
//! Sizes are small: a browser's software adapter (SwiftShader) runs a
//! naive 256^3 matmul at about 0.1 GFLOP/s.

#![cfg(target_arch = "wasm32")]

use std::fmt::Write as _;

use wasm_bindgen::prelude::*;
use wgtile::{
    AttentionKernel, AttentionOptions, Context, DiagonalAlignment, MatmulKernel, MatmulOptions,
    Plan, Tensor, TimeSource, TimingOptions,
};

fn js(e: impl std::fmt::Display) -> JsValue {
    JsValue::from_str(&e.to_string())
}

/// Median milliseconds of `plan` over `runs` runs (one warm-up first):
/// GPU timestamps where the browser grants them, else the page's clock
/// around each run and its completion.
async fn time(ctx: &Context, plan: &Plan, runs: u32) -> Result<(f64, TimeSource), JsValue> {
    let options = TimingOptions {
        warmup: 1,
        warmup_seconds: 0.0,
        repeats: runs,
    };
    let t = ctx.time_async(plan, &options).await.map_err(js)?;
    Ok((t.median() * 1e3, t.source))
}

async fn host(t: &Tensor) -> Result<Vec<f32>, JsValue> {
    t.to_f32_vec().await.map_err(js)
}

/// The largest |got - want|.
fn worst(got: &[f32], want: &[f64]) -> f64 {
    got.iter()
        .zip(want)
        .map(|(&g, &w)| {
            let e = (f64::from(g) - w).abs();
            if e.is_nan() { f64::INFINITY } else { e }
        })
        .fold(0.0, f64::max)
}

/// How a row states its rate: GFLOP/s of `flops`, or GB/s of the plan's bytes.
enum Rate {
    Flops(f64),
    Bytes,
}

/// `plan` timed and checked against `want` within `bound`, as one table row.
async fn measure(
    ctx: &Context,
    html: &mut String,
    what: &str,
    plan: &Plan,
    rate: Rate,
    want: &[f64],
    bound: f64,
) -> Result<(), JsValue> {
    let (ms, source) = time(ctx, plan, 3).await?;
    let err = worst(&host(plan.output()).await?, want);
    let rate = match rate {
        Rate::Flops(flops) => format!("{:.2} GFLOP/s", flops / ms / 1e6),
        Rate::Bytes => format!("{:.2} GB/s moved", plan.bytes() as f64 / ms / 1e6),
    };
    let ok = if err <= bound { "ok" } else { "WRONG" };
    let clock = match source {
        TimeSource::GpuTimestamps => "GPU",
        TimeSource::WallClock => "page clock",
    };
    let _ = write!(
        html,
        "<tr><td>{what}</td><td>{ms:.2} ms ({clock})</td><td>{rate}</td><td>{err:.1e} ({ok}, bound {bound:.0e})</td></tr>"
    );
    Ok(())
}

/// Runs the small tour and returns its results as HTML tables.
#[wasm_bindgen]
pub async fn run_tour() -> Result<String, JsValue> {
    let ctx = Context::new(Default::default()).await.map_err(js)?;
    let mut html = String::new();
    let p = ctx.profile();
    let _ = write!(html, "<h2>Adapter</h2><pre>{p}</pre>");
    html.push_str("<h2>Results</h2><table><tr><th>what</th><th>time</th><th>rate</th><th>max error vs f64</th></tr>");

    // Tiling: naive against the dispatcher's kernel.
    let n = 256;
    let a = wgtile::uniform_values(n * n, -1.0, 1.0, 1);
    let b = wgtile::uniform_values(n * n, -1.0, 1.0, 2);
    let (ta, tb) = (
        ctx.tensor(&a, [n, n]).map_err(js)?,
        ctx.tensor(&b, [n, n]).map_err(js)?,
    );
    let mut want = vec![0.0f64; n * n];
    for i in 0..n {
        for p in 0..n {
            let x = f64::from(a[i * n + p]);
            for j in 0..n {
                want[i * n + j] += x * f64::from(b[p * n + j]);
            }
        }
    }
    for (name, options) in [
        (
            "matmul 256^3, naive",
            MatmulOptions::with_kernel(MatmulKernel::naive_for(p)),
        ),
        (
            "matmul 256^3, the dispatcher's kernel",
            MatmulOptions::default(),
        ),
    ] {
        let plan = ctx.matmul_plan(&ta, &tb, None, &options).map_err(js)?;
        let what = format!("{name} ({})", plan.label());
        let rate = Rate::Flops(plan.flops() as f64);
        measure(&ctx, &mut html, &what, &plan, rate, &want, 1e-4).await?;
    }

    // Fusion: sin^2 + cos^2 as one kernel and as five.
    let len = 1 << 18;
    let xs = wgtile::uniform_values(len, -3.1, 3.1, 3);
    let x = ctx.tensor(&xs, [len]).map_err(js)?;
    let expr = x.expr().sin().square() + x.expr().cos().square();
    let want: Vec<f64> = xs
        .iter()
        .map(|&v| f64::from(v).sin().powi(2) + f64::from(v).cos().powi(2))
        .collect();
    for (name, plan) in [
        (
            "sin^2 + cos^2, five kernels",
            ctx.eval_unfused_plan(&expr).map_err(js)?,
        ),
        (
            "sin^2 + cos^2, fused: one kernel",
            ctx.eval_plan(&expr).map_err(js)?,
        ),
    ] {
        // WGSL bounds sin and cos to 2^-11 absolute in [-pi, pi].
        let bound = 4.0 * 2f64.powi(-11);
        measure(&ctx, &mut html, name, &plan, Rate::Bytes, &want, bound).await?;
    }

    // Attention: the naive three kernels against flash, causal.
    let (h, s, d) = (4, 128, 64);
    let q = wgtile::uniform_values(h * s * d, -1.0, 1.0, 4);
    let k = wgtile::uniform_values(h * s * d, -1.0, 1.0, 5);
    let v = wgtile::uniform_values(h * s * d, -1.0, 1.0, 6);
    let shape = [1, h, s, d];
    let (tq, tk, tv) = (
        ctx.tensor(&q, shape).map_err(js)?,
        ctx.tensor(&k, shape).map_err(js)?,
        ctx.tensor(&v, shape).map_err(js)?,
    );
    let scale = 1.0 / (d as f64).sqrt();
    let mut want = vec![0.0f64; h * s * d];
    for head in 0..h {
        let at = |t: &[f32], i: usize, c: usize| f64::from(t[(head * s + i) * d + c]);
        for i in 0..s {
            let sc: Vec<f64> = (0..=i)
                .map(|j| (0..d).map(|c| at(&q, i, c) * at(&k, j, c)).sum::<f64>() * scale)
                .collect();
            let m = sc.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let w: Vec<f64> = sc.iter().map(|x| (x - m).exp()).collect();
            let sum: f64 = w.iter().sum();
            for c in 0..d {
                want[(head * s + i) * d + c] =
                    (0..=i).map(|j| w[j] * at(&v, j, c)).sum::<f64>() / sum;
            }
        }
    }
    let causal = AttentionOptions::new().causal(DiagonalAlignment::TopLeft);
    for (name, kernel) in [
        (
            "attention S 128, naive (scores in memory)",
            AttentionKernel::Naive,
        ),
        ("attention S 128, FlashAttention", AttentionKernel::Flash),
    ] {
        let (plan, _) = ctx
            .attention_plan(&tq, &tk, &tv, &causal.clone().kernel(kernel))
            .map_err(js)?;
        let what = format!("{name} ({})", plan.label());
        let rate = Rate::Flops(2.0 * (h * s * s * d) as f64);
        measure(&ctx, &mut html, &what, &plan, rate, &want, 1e-5).await?;
    }
    html.push_str("</table>");
    Ok(html)
}
