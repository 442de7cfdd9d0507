//! The tour's sections on the library's main kernels: tiling, padding and
//! wave quantisation, the GEMV, fusion, row operations, attention and
//! fewer bits. The lessons with kernels of their own are in `lessons.rs`.

use wgtile::{
    AttentionKernel, AttentionOptions, Axis, Context, DType, DiagonalAlignment, KvCache,
    MatmulKernel, MatmulOptions, Padding, QuantAxis, QuantFormat, Reduction,
};

use crate::Args;
use crate::common::{max_error, random_matrix};
use crate::figures;
use crate::report::{Ceilings, Recorder, Section};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

pub fn tiling(ctx: &Context, args: &Args, c: &Ceilings) -> Result<Section> {
    let mut rec = Recorder::new("tiling", "Tiling: naive vs tiled matmul (f32)", c);
    let profile = ctx.profile();
    let sizes = if !args.sizes.is_empty() {
        args.sizes.clone()
    } else if args.quick {
        vec![128]
    } else if profile.is_cpu() {
        vec![128, 256]
    } else {
        vec![1024, 4096]
    };
    rec.intro(
        "The naive kernel reads a row of A and a column of B from global memory for\n\
         every output: each input element is read N times. The tiled kernels stage\n\
         tiles of A and B in workgroup memory and keep a register tile of C per\n\
         invocation, so each element is read N / tile times (lecture: tiling).",
    );
    for &n in &sizes {
        let (a, ha) = random_matrix(ctx, n, 1, DType::F32)?;
        let (b, hb) = random_matrix(ctx, n, 2, DType::F32)?;
        let choice = ctx.explain_matmul(DType::F32, n, n, n, 1)?;
        let naive_kernel = MatmulKernel::naive_for(profile);
        let mut runs = vec![
            (
                MatmulOptions::with_kernel(naive_kernel),
                "naive",
                "one invocation per output, no reuse".to_string(),
            ),
            (
                MatmulOptions::default(),
                "dispatcher",
                format!("the library's pick: {}", choice.choice.reason),
            ),
        ];
        if matches!(choice.kernel(), MatmulKernel::Coop { .. }) {
            let off = MatmulOptions {
                split_f32: Some(false),
                ..MatmulOptions::default()
            };
            runs.insert(
                1,
                (
                    off,
                    "tiled",
                    "workgroup and register tiles on the CUDA cores".into(),
                ),
            );
        }
        let mut times = Vec::new();
        for (options, name, why) in runs {
            let plan = ctx.matmul_plan(&a, &b, None, &options)?;
            ctx.fill(plan.output(), f32::NAN)?;
            let t = args.seconds(ctx, &plan, 1)?;
            let out: Vec<f32> = plan.output().to_vec_blocking()?;
            let err = max_error(&ha, &hb, &out, n);
            rec.plan_row(&format!("{name} n = {n}"), t, &plan, false, Some(err), &why);
            times.push(t);
        }
        rec.compare(
            &format!("naive / dispatcher at n = {n}"),
            "tiles cut global reads by the tile size; the lecture gives no time ratio",
            None,
            times[0] / times[times.len() - 1],
        );
    }
    Ok(rec.done())
}

pub fn padding(ctx: &Context, args: &Args, c: &Ceilings) -> Result<Section> {
    let mut rec = Recorder::new("padding", "Alignment, padding and wave quantisation", c);
    let profile = ctx.profile();
    // Where this adapter's wave boundary lies: the dispatcher's tile at a
    // typical size, and the largest multiple of it whose grid still fits
    // that size's whole waves (the lecture's 1792 on an A100); one more
    // row and column of C needs another wave.
    let typical: usize = if args.quick || profile.is_cpu() {
        128
    } else {
        1792
    };
    let center = wave_boundary(ctx, typical)?;
    let half = args.size(ctx, 2, 8, 8);
    rec.intro(
        "A size one past a multiple of the tile needs a whole extra row and column\n\
         of workgroups (wave quantisation: the last wave runs on a mostly idle\n\
         adapter), and N off a multiple of 4 (8 for tensor cores) rules out 16-byte\n\
         loads. The padding layer copies such operands into aligned, zero-padded\n\
         buffers when its cost model says the faster kernel pays for the copies\n\
         (lecture: nanoGPT's 50257 -> 50304). f32, the dispatcher's kernels.",
    );
    // The wave boundary: the dispatcher's tile at `center`, and the size one
    // past it.
    let e0 = ctx.explain_matmul(DType::F32, center, center, center, 1)?;
    let e1 = ctx.explain_matmul(DType::F32, center + 1, center + 1, center + 1, 1)?;
    rec.note(&format!(
        "{} compute units. N = {center}: {} workgroups = {:.2} waves ({}); N = {}: {} workgroups = {:.2} waves ({}).",
        profile.compute_units,
        e0.choice.workgroups,
        e0.choice.waves,
        e0.choice.kernel,
        center + 1,
        e1.choice.workgroups,
        e1.choice.waves,
        e1.choice.kernel
    ));
    let mut sweep = Vec::new();
    let mut at = std::collections::HashMap::new();
    for n in center - half..=center + half {
        let (a, ha) = random_matrix(ctx, n, 5, DType::F32)?;
        let (b, hb) = random_matrix(ctx, n, 6, DType::F32)?;
        for (padded, padding) in [(false, Padding::Never), (true, Padding::Auto)] {
            let plan = ctx.matmul_plan(&a, &b, None, &MatmulOptions::with_padding(padding))?;
            ctx.fill(plan.output(), f32::NAN)?;
            let t = args.seconds(ctx, &plan, 1)?;
            let gflops = plan.flops() as f64 / t / 1e9;
            sweep.push(figures::SweepPoint { n, gflops, padded });
            if n == center || n == center + 1 {
                let out: Vec<f32> = plan.output().to_vec_blocking()?;
                let err = max_error(&ha, &hb, &out, n);
                let name = format!("N = {n}, {}", if padded { "padding layer" } else { "raw" });
                let why = if padded {
                    "aligned copies where they pay"
                } else {
                    "the raw shape"
                };
                rec.plan_row(&name, t, &plan, false, Some(err), why);
                at.insert((n, padded), t);
            }
        }
    }
    let waves = |w: f64| w.ceil().max(1.0);
    let flops_ratio = ((center + 1) as f64 / center as f64).powi(3);
    rec.compare(
        &format!("raw N = {} / N = {center}", center + 1),
        "time follows whole waves (1792 -> 1793 on an A100: one wave -> two); here the dispatcher's waves",
        Some(waves(e1.choice.waves) / waves(e0.choice.waves) * flops_ratio.max(1.0)),
        at[&(center + 1, false)] / at[&(center, false)],
    );
    rec.compare(
        &format!("padded N = {} / N = {center}", center + 1),
        "padding keeps the odd size near the aligned one's time",
        Some(flops_ratio),
        at[&(center + 1, true)] / at[&(center, false)],
    );
    let svg = figures::sweep(
        &format!(
            "f32 matmul GFLOP/s against N on {} (filled: raw, hollow: padding layer)",
            profile.name
        ),
        &sweep,
    )?;
    rec.figure(
        "padding-sweep",
        "The lecture's figure on this adapter: throughput around a tile boundary, coloured by the largest power of two dividing N.",
        svg,
    );
    Ok(rec.done())
}

/// The largest N within 2 `typical` that is a multiple of the dispatcher's
/// tile at `typical` and whose grid fits the whole waves `typical` takes.
fn wave_boundary(ctx: &Context, typical: usize) -> Result<usize> {
    let choice = ctx
        .explain_matmul(DType::F32, typical, typical, typical, 1)?
        .choice;
    let (bm, bn) = choice.kernel.block();
    let (bm, bn) = (bm as usize, bn as usize);
    let units = ctx.profile().compute_units.max(1) as usize;
    let full = choice.workgroups.div_ceil(units as u64) as usize * units;
    let step = bm.max(bn);
    let best = (1..=2 * typical / step)
        .map(|i| i * step)
        .filter(|&n| n.div_ceil(bm) * n.div_ceil(bn) <= full)
        .max();
    Ok(best.unwrap_or(typical))
}

pub fn gemv(ctx: &Context, args: &Args, c: &Ceilings) -> Result<Section> {
    let mut rec = Recorder::new("gemv", "Matrix-vector products: memory-bound (GEMV)", c);
    let profile = ctx.profile();
    let shapes: Vec<(usize, usize)> = args.size(
        ctx,
        vec![(512, 512)],
        vec![(1024, 1024)],
        vec![(4096, 4096), (4096, 14336)],
    );
    rec.intro(
        "x[1, K] @ W[K, N] reads every weight once for one multiply-add: 2 FLOPs per\n\
         4 bytes in f32, far left of the ridge, so the floor is the bytes of W over\n\
         the copy bandwidth.",
    );
    for dtype in [DType::F32, DType::F16] {
        if dtype == DType::F16 && !profile.shader_f16 {
            rec.note("f16: skipped (no shader-f16 on this adapter)");
            continue;
        }
        for &(k, n) in &shapes {
            let x = ctx.rand_uniform([1, k], -1.0, 1.0, dtype, 7)?;
            let w = ctx.rand_uniform([k, n], -1.0, 1.0, dtype, 8)?;
            let hx = x.to_f32_vec_blocking()?;
            let hw = w.to_f32_vec_blocking()?;
            let plan = ctx.matmul_plan(&x, &w, None, &MatmulOptions::default())?;
            ctx.fill(plan.output(), f32::NAN)?;
            let t = args.seconds(ctx, &plan, 4)?;
            let y = plan.output().to_f32_vec_blocking()?;
            let mut worst = 0.0f64;
            for (j, &got) in y.iter().enumerate() {
                let want: f64 = (0..k)
                    .map(|p| f64::from(hx[p]) * f64::from(hw[p * n + j]))
                    .sum();
                let e = (f64::from(got) - want).abs();
                worst = if e.is_nan() {
                    f64::INFINITY
                } else {
                    worst.max(e)
                };
            }
            rec.plan_row(
                &format!("{dtype} [1, {k}] x [{k}, {n}]"),
                t,
                &plan,
                dtype == DType::F16,
                Some(worst),
                "split-K GEMV: every weight read once",
            );
        }
    }
    Ok(rec.done())
}

pub fn fusion(ctx: &Context, args: &Args, c: &Ceilings) -> Result<Section> {
    let mut rec = Recorder::new("fusion", "Fusion: one kernel instead of five", c);
    let n: usize = args.fit(ctx, args.size(ctx, 1 << 18, 1 << 20, 1 << 26));
    let host = wgtile::uniform_values(n, -4.0, 4.0, 11);
    let x = ctx.tensor(&host, [n])?;
    let expr = x.expr().sin().square() + x.expr().cos().square();
    let fused = ctx.eval_plan(&expr)?;
    let unfused = ctx.eval_unfused_plan(&expr)?;
    rec.intro(&format!(
        "y = sin(x)^2 + cos(x)^2 over {n} f32 elements ({} MiB). Op by op it is {} kernels,\n\
         each reading and writing its operands in global memory ({} MiB moved); fused it\n\
         is one kernel that reads x once and writes y once ({} MiB).",
        (n * 4) >> 20,
        unfused.dispatch_count(),
        unfused.bytes() >> 20,
        fused.bytes() >> 20
    ));
    let mut times = Vec::new();
    for (name, plan, why) in [
        (
            "unfused",
            &unfused,
            "one kernel per operation, every intermediate in memory",
        ),
        ("fused", &fused, "one kernel: one read, one write"),
    ] {
        ctx.fill(plan.output(), f32::NAN)?;
        let t = args.seconds(ctx, plan, 2)?;
        let y = plan.output().to_vec_blocking::<f32>()?;
        let worst = y
            .iter()
            .zip(&host)
            .map(|(&got, &v)| {
                let v = f64::from(v);
                let e = (f64::from(got) - (v.sin().powi(2) + v.cos().powi(2))).abs();
                if e.is_nan() { f64::INFINITY } else { e }
            })
            .fold(0.0f64, f64::max);
        let flops = 4 * n as u64;
        rec.row(
            name,
            t,
            flops,
            plan.bytes(),
            false,
            Some(worst),
            why,
            plan.label(),
        );
        times.push(t);
    }
    rec.compare(
        "unfused / fused",
        "five round trips to memory against one: the bytes moved",
        Some(unfused.bytes() as f64 / fused.bytes() as f64),
        times[0] / times[1],
    );
    Ok(rec.done())
}

pub fn rows(ctx: &Context, args: &Args, c: &Ceilings) -> Result<Section> {
    let mut rec = Recorder::new("rows", "Row operations against the copy bandwidth", c);
    let (rows, cols) = args.size(ctx, (64, 4096), (256, 4096), (16384, 4096));
    let rows = args.fit(ctx, rows * cols) / cols;
    rec.intro(&format!(
        "Rows of {cols} (x {rows}): each row is read once into registers, reduced in\n\
         workgroup memory (subgroup operations where the adapter has them) and\n\
         written once, so the floor is the copy of the same bytes."
    ));
    let host = wgtile::uniform_values(rows * cols, -3.0, 3.0, 12);
    let x = ctx.tensor(&host, [rows, cols])?;
    let plans = [
        ("softmax", ctx.softmax_plan(&x)?, 5),
        ("layer_norm", ctx.layer_norm_plan(&x, None, None, 1e-5)?, 8),
        (
            "sum (last axis)",
            ctx.reduce_plan(&x, Reduction::Sum, Axis::Last)?,
            1,
        ),
    ];
    for (name, plan, flops_per) in &plans {
        ctx.fill(plan.output(), f32::NAN)?;
        let t = args.seconds(ctx, plan, 2)?;
        let y = plan.output().to_vec_blocking::<f32>()?;
        let mut worst = 0.0f64;
        for r in [0, rows / 2, rows - 1] {
            let row: Vec<f64> = host[r * cols..(r + 1) * cols]
                .iter()
                .map(|&v| f64::from(v))
                .collect();
            let want: Vec<f64> = match *name {
                "softmax" => {
                    let m = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                    let s: f64 = row.iter().map(|v| (v - m).exp()).sum();
                    row.iter().map(|v| (v - m).exp() / s).collect()
                }
                "layer_norm" => {
                    let mean = row.iter().sum::<f64>() / cols as f64;
                    let var = row.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / cols as f64;
                    row.iter()
                        .map(|v| (v - mean) / (var + 1e-5).sqrt())
                        .collect()
                }
                _ => vec![row.iter().sum()],
            };
            let got = if want.len() == 1 {
                &y[r..r + 1]
            } else {
                &y[r * cols..(r + 1) * cols]
            };
            for (g, w) in got.iter().zip(&want) {
                let e = (f64::from(*g) - w).abs();
                worst = if e.is_nan() {
                    f64::INFINITY
                } else {
                    worst.max(e)
                };
            }
        }
        let flops = flops_per * (rows * cols) as u64;
        rec.row(
            name,
            t,
            flops,
            plan.bytes(),
            false,
            Some(worst),
            "one read of each row",
            plan.label(),
        );
    }
    Ok(rec.done())
}

pub fn attention(ctx: &Context, args: &Args, c: &Ceilings) -> Result<Section> {
    let mut rec = Recorder::new(
        "attention",
        "Attention: naive vs FlashAttention, and decoding",
        c,
    );
    let (b, h, d) = (1usize, 8usize, 64usize);
    let dtype = DType::F32;
    let lengths: Vec<usize> = args.size(
        ctx,
        vec![64, 128],
        vec![64, 128, 256],
        vec![1024, 4096, 16384],
    );
    let (max_bytes, limit) = ctx.profile().max_tensor_bytes();
    let elem = dtype.size() as u64;
    let naive_max = ((max_bytes / (b * h) as u64 / elem) as f64).sqrt() as u64;
    let flash_max = max_bytes / (b * h * d) as u64 / elem;
    rec.intro(&format!(
        "softmax(Q K^T / sqrt(D)) V, B = {b}, H = {h}, D = {d}, {dtype}, causal. The naive path\n\
         writes the S x S scores to memory and reads them back; flash streams K/V\n\
         blocks through workgroup memory with an online softmax and never stores them\n\
         (lecture: tiling + recomputation)."
    ));
    rec.note(&format!(
        "Longest S one tensor allows ({limit} = {} MiB): naive {naive_max} (its S x S scores per head), flash {flash_max} (Q, K, V, O only).",
        max_bytes >> 20
    ));
    let opts = AttentionOptions::new().causal(DiagonalAlignment::TopLeft);
    let (mut naive_pts, mut flash_pts, mut mem_naive, mut mem_flash) =
        (vec![], vec![], vec![], vec![]);
    for &s_len in &lengths {
        let shape = [b, h, s_len, d];
        let (q, k, v) = (
            ctx.zeros(shape, dtype)?,
            ctx.zeros(shape, dtype)?,
            ctx.zeros(shape, dtype)?,
        );
        for (i, t) in [&q, &k, &v].into_iter().enumerate() {
            ctx.fill_random(t, 20 + i as u32)?;
        }
        // Causal: half of 4 B H S^2 D.
        let flops = 2 * (b * h * s_len * s_len * d) as u64;
        let io_bytes = 4 * (b * h * s_len * d) as u64 * elem;
        let (flash, flash_out) =
            ctx.attention_plan(&q, &k, &v, &opts.clone().kernel(AttentionKernel::Flash))?;
        let t_flash = args.seconds(ctx, &flash, 2)?;
        let scores = (b * h * s_len * s_len) as u64 * elem;
        flash_pts.push((s_len as f64, t_flash * 1e3));
        mem_flash.push((s_len as f64, io_bytes as f64 / (1 << 20) as f64));
        match ctx.attention_plan(&q, &k, &v, &opts.clone().kernel(AttentionKernel::Naive)) {
            Ok((plan, out)) => {
                let t_naive = args.seconds(ctx, &plan, 2)?;
                let diff = max_abs_diff(
                    &flash_out.o.to_vec_blocking::<f32>()?,
                    &out.o.to_vec_blocking::<f32>()?,
                );
                rec.row(
                    &format!("naive S = {s_len}"),
                    t_naive,
                    flops,
                    io_bytes + 3 * scores,
                    false,
                    None,
                    "scores written, read for the softmax, read again for P V",
                    plan.label(),
                );
                rec.row(
                    &format!("flash S = {s_len}"),
                    t_flash,
                    flops,
                    io_bytes,
                    false,
                    Some(diff),
                    "K/V tiles in workgroup memory, online softmax (error: against naive)",
                    flash.label(),
                );
                naive_pts.push((s_len as f64, t_naive * 1e3));
                mem_naive.push((s_len as f64, (io_bytes + scores) as f64 / (1 << 20) as f64));
                rec.compare(
                    &format!("naive / flash at S = {s_len}"),
                    "sub-quadratic memory traffic: the scores' bytes over Q, K, V, O's",
                    None,
                    t_naive / t_flash,
                );
            }
            Err(e) => {
                rec.row(
                    &format!("flash S = {s_len}"),
                    t_flash,
                    flops,
                    io_bytes,
                    false,
                    None,
                    "naive does not fit",
                    flash.label(),
                );
                rec.note(&format!("S = {s_len}: naive does not run: {e}"));
            }
        }
    }
    let mut series = vec![("flash (ms)".to_string(), flash_pts)];
    if !naive_pts.is_empty() {
        series.insert(0, ("naive (ms)".to_string(), naive_pts));
    }
    series.push(("naive peak memory (MiB)".to_string(), mem_naive));
    series.push(("flash peak memory (MiB)".to_string(), mem_flash));
    let svg = figures::lines(
        "Attention time and memory against S",
        "S (sequence length)",
        "ms, MiB",
        &series,
    )?;
    rec.figure(
        "attention-figure",
        "Naive against flash attention as S grows: time (ms) and the memory each holds (MiB: Q, K, V, O, plus the naive path's S x S scores).",
        svg,
    );

    // The backward: flash recomputes P tile by tile from Q, K and the
    // logsumexp; a stored-P backward reads P and writes dP (S x S each).
    let s_len = *lengths.last().unwrap_or(&256);
    let bhsd = (b * h * s_len * d) as u64 * elem;
    let stored = 9 * bhsd + 2 * (b * h * s_len * s_len) as u64 * elem;
    let recomputed = 9 * bhsd + (b * h * s_len) as u64 * 4;
    rec.note(&format!(
        "Backward at S = {s_len}: a stored-P backward moves {} MiB (Q, K, V, O, dO read, dQ, dK, dV written, P read and dP written); \
         FlashAttention's recomputes P from Q, K and the row logsumexp and moves {} MiB ({:.1}x fewer bytes).",
        stored >> 20,
        recomputed >> 20,
        stored as f64 / recomputed as f64
    ));

    // Decoding: one query row per token against a growing cache.
    let ddt = if ctx.profile().shader_f16 {
        DType::F16
    } else {
        DType::F32
    };
    let (hq, hkv, d) = (32usize, 8usize, 128usize);
    let steps: Vec<usize> = args.size(
        ctx,
        vec![256],
        vec![256, 1024],
        vec![1024, 4096, 16384, 32768],
    );
    let mut cache = KvCache::new(ctx, 1, hkv, d, d, 256, ddt)?;
    let q = ctx.zeros([1, hq, 1, d], ddt)?;
    ctx.fill_random(&q, 30)?;
    let opts = AttentionOptions::new().causal(DiagonalAlignment::BottomRight);
    for &len in &steps {
        let add = len - cache.len();
        let kv = ctx.zeros([1, hkv, add, d], ddt)?;
        ctx.fill_random(&kv, len as u32)?;
        cache.append(&kv, &kv)?;
        let (plan, _) = ctx.attention_cached_plan(&q, &cache, &opts)?;
        let t = args.seconds(ctx, &plan, 2)?;
        let cache_bytes = (2 * hkv * len * d * ddt.size()) as u64;
        rec.row(
            &format!("decode, {ddt} cache of {len}"),
            t,
            (4 * hq * len * d) as u64,
            cache_bytes,
            ddt == DType::F16,
            None,
            "one token (Hq 32, Hkv 8, D 128): the cache read once",
            plan.label(),
        );
    }
    Ok(rec.done())
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(x, y)| f64::from((x - y).abs()))
        .fold(
            0.0,
            |m, e| if e.is_nan() { f64::INFINITY } else { m.max(e) },
        )
}

/// sqrt(mean((a - b)^2)) over sqrt(mean(b^2)).
fn rms_error(a: &[f32], b: &[f32]) -> f64 {
    let (mut num, mut den) = (0.0f64, 0.0f64);
    for (&x, &y) in a.iter().zip(b) {
        num += (f64::from(x) - f64::from(y)).powi(2);
        den += f64::from(y).powi(2);
    }
    (num / den.max(f64::MIN_POSITIVE)).sqrt()
}

/// A weight uniform in [-1, 1) with one value in 997 scaled by 30 (the
/// outliers that make block scales matter).
fn weight_with_outliers(n: usize, seed: u64) -> Vec<f32> {
    let mut w = wgtile::uniform_values(n, -1.0, 1.0, seed);
    for v in w.iter_mut().step_by(997) {
        *v *= 30.0;
    }
    w
}

pub fn fewer_bits(ctx: &Context, args: &Args, c: &Ceilings) -> Result<Section> {
    let mut rec = Recorder::new(
        "fewer-bits",
        "Fewer bits: bf16, FP8, microscaling and blocked integers",
        c,
    );
    let profile = ctx.profile();
    let (k, n) = args.size(ctx, (512, 512), (1024, 1024), (4096, 14336));
    rec.intro(
        "y = x[1, K] @ W[K, N] once more, W with outliers (one value in 997 is 30x),\n\
         stored in fewer bits. A GEMV reads each weight once, so its time follows the\n\
         bytes per weight; block scales (one per 32 or 16 weights down K) keep the\n\
         outliers from flattening their neighbours. Error: RMS of y - y_f32 over RMS of y_f32.",
    );
    let wv = weight_with_outliers(k * n, 21);
    let w = ctx.tensor(&wv, [k, n])?;
    let x = ctx.rand_uniform([1, k], -1.0, 1.0, DType::F32, 22)?;
    let reference = ctx.matmul(&x, &w)?.to_vec_blocking::<f32>()?;
    let mut bytes_per = Vec::new();
    let mut times = std::collections::HashMap::new();
    let mut measure =
        |rec: &mut Recorder, name: &str, per: f64, plan: &wgtile::Plan, f16: bool| -> Result<()> {
            let t = args.seconds(ctx, plan, 4)?;
            plan.run()?;
            let y = plan.output().to_f32_vec_blocking()?;
            let why = format!("{per:.3} bytes per weight");
            rec.plan_row(name, t, plan, f16, Some(rms_error(&y, &reference)), &why);
            bytes_per.push((name.to_string(), per));
            times.insert(name.to_string(), t);
            Ok(())
        };
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        if dtype == DType::F16 && !profile.shader_f16 {
            rec.note("f16: skipped (no shader-f16 on this adapter)");
            continue;
        }
        let (xd, wd) = (ctx.cast(&x, dtype)?, ctx.cast(&w, dtype)?);
        let plan = ctx.matmul_plan(&xd, &wd, None, &MatmulOptions::default())?;
        measure(
            &mut rec,
            &dtype.to_string(),
            dtype.size() as f64,
            &plan,
            dtype != DType::F32,
        )?;
    }
    for format in QuantFormat::ALL {
        let q = ctx.quantize(&w, format, QuantAxis::Columns)?;
        let plan = ctx.matmul_quantized_plan(&x, &q)?;
        measure(
            &mut rec,
            &format.to_string(),
            q.packed_bytes() as f64 / (k * n) as f64,
            &plan,
            false,
        )?;
    }
    if let (Some(t16), Some(t4)) = (times.get("f16"), times.get(&QuantFormat::Mxfp4.to_string())) {
        let per4 = QuantFormat::Mxfp4.bytes_per_element(32);
        rec.compare(
            "f16 GEMV / MXFP4 GEMV",
            "time follows the bytes per weight",
            Some(2.0 / per4),
            t16 / t4,
        );
    }
    rec.compare(
        "f32 GEMV / f16 GEMV",
        "half the bytes per weight",
        Some(2.0),
        times["f32"] / times.get("f16").copied().unwrap_or(f64::NAN),
    );
    let svg = figures::bars(
        "Bytes per weight, scales included",
        "bytes per weight",
        &bytes_per,
    )?;
    rec.figure(
        "bytes-per-weight",
        "Bytes per weight of each storage format (the GEMV's bytes).",
        svg,
    );

    // The transposed copy.
    let side = args.size(ctx, 256, 512, 2048);
    let mv = weight_with_outliers(side * side, 23);
    let m = ctx.tensor(&mv, [side, side])?;
    rec.note(
        "Training needs W blocked both ways (x @ W contracts it down its columns, G @ W^T along \
         its rows): quantize_both makes the two copies. The row-blocked copy cannot be transposed \
         into the other (its blocks run the wrong way); re-quantising its values down the columns \
         rounds a second time.",
    );
    for format in [
        QuantFormat::Mxfp8E4m3,
        QuantFormat::Mxfp4,
        QuantFormat::Nvfp4,
    ] {
        let (rows, cols) = ctx.quantize_both(&m, format)?;
        let direct = ctx.dequantize(&cols)?.to_vec_blocking::<f32>()?;
        let from_rows = ctx.dequantize(&rows)?;
        let twice = ctx.quantize(&from_rows, format, QuantAxis::Columns)?;
        let twice = ctx.dequantize(&twice)?.to_vec_blocking::<f32>()?;
        rec.note(&format!(
            "{format} [{side}, {side}]: RMS error of the column-blocked copy {:.3e}, of the row-blocked copy re-quantised down the columns {:.3e} ({:.2}x).",
            rms_error(&direct, &mv),
            rms_error(&twice, &mv),
            rms_error(&twice, &mv) / rms_error(&direct, &mv)
        ));
    }
    Ok(rec.done())
}
