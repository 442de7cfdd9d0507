//! The tour: every technique wgtile implements, run and measured on the current
//! adapter. `cargo xtask tour` runs it in release mode after checking for a
//! Vulkan driver.
//!
//! ```text
//! cargo run --release --example tour -- [--sizes 256,512] [--repeats N] [--quick]
//! ```
//!
//! Sections so far (each result checked against an f64 CPU reference):
//! 1. the adapter profile;
//! 2. tiling: the naive matmul (one invocation per output, no reuse) against
//!    what the library runs by itself (dispatcher, autotuner, padding layer);
//! 3. low precision: f32 vs f16 inputs with f32 accumulation, on CUDA-core
//!    style kernels and on tensor cores (cooperative matrices) where present;
//! 4. alignment, padding and wave quantisation: N = 1792 against 1793 and
//!    4096 against 4097 (128 vs 129 on a CPU adapter), raw and through the
//!    padding layer;
//! 5. the memory-bound corner: GEMV in GB/s;
//! 6. fusion: the lecture's `sin(x)^2 + cos(x)^2` as one kernel against five,
//!    bytes moved and time, next to the copy bandwidth;
//! 7. row operations (softmax, layer norm, sum) as a fraction of the copy;
//! 8. attention: the naive three kernels (scores materialised) against
//!    FlashAttention at growing sequence lengths, time and memory, the longest
//!    sequence each can run, and decoding with a growing KV cache;
//! 9. fewer bits: a weight with outliers in f32, f16, bf16 and every
//!    block-scaled format, bytes per weight, GEMV time and error, and why a
//!    block-scaled matrix needs a second copy for its transpose.
//!
//! It opts in to wgpu's experimental cooperative matrices, and autotunes large
//! shapes on GPUs (`WGTILE_AUTOTUNE=off` shows the heuristic's picks).

use std::time::Instant;

use clap::Parser;

#[path = "common/mod.rs"]
mod common;
use common::{max_error, random_matrix};
use wgtile::{
    AttentionKernel, AttentionOptions, Axis, Context, ContextOptions, DType, DiagonalAlignment,
    KvCache, MatmulKernel, MatmulOptions, Padding, Plan, QuantAxis, QuantFormat, TimingOptions,
};

#[derive(Parser, Debug)]
#[command(about = "Run and measure every wgtile technique on this adapter")]
struct Args {
    /// Square matmul sizes (default: suited to the adapter).
    #[arg(long, value_delimiter = ',')]
    sizes: Vec<usize>,
    /// Measured runs per kernel and size.
    #[arg(long, default_value_t = 5)]
    repeats: u32,
    /// Smallest sizes only (a smoke run).
    #[arg(long)]
    quick: bool,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let args = Args::parse();
    let start = Instant::now();
    // The tour shows every technique, tensor cores included: it opts in to
    // wgpu's experimental cooperative matrices where the adapter has them.
    let ctx = Context::new_blocking(ContextOptions {
        cooperative_matrix: Some(true),
        ..Default::default()
    })?;

    section("1. The adapter");
    println!("{}", ctx.profile());

    section("2. Matmul: naive vs tiled (f32)");
    matmul_section(&ctx, &args)?;

    section("3. Low precision: f16 inputs, f32 accumulation");
    low_precision_section(&ctx, &args)?;

    section("4. Alignment, padding and wave quantisation");
    padding_section(&ctx, &args)?;

    section("5. Matrix-vector products: memory-bound (GEMV)");
    gemv_section(&ctx, &args)?;

    section("6. Fusion: one kernel instead of five");
    fusion_section(&ctx, &args)?;

    section("7. Row operations against the copy bandwidth");
    rowops_section(&ctx, &args)?;

    section("8. Attention: naive vs FlashAttention, and decoding");
    attention_section(&ctx, &args)?;

    section("9. Fewer bits: bf16, FP8, microscaling and blocked integers");
    fewer_bits_section(&ctx, &args)?;

    println!("\ntour finished in {:.1} s", start.elapsed().as_secs_f64());
    Ok(())
}

fn section(title: &str) {
    println!(
        "\n== {title} {}",
        "=".repeat(70usize.saturating_sub(title.len()))
    );
}

struct Row {
    n: usize,
    kernel: String,
    gflops: f64,
    ms: f64,
    max_err: f64,
}

fn matmul_section(ctx: &Context, args: &Args) -> Result<(), Box<dyn std::error::Error>> {
    let profile = ctx.profile();
    let sizes = if !args.sizes.is_empty() {
        args.sizes.clone()
    } else if args.quick {
        vec![128]
    } else if profile.is_cpu() {
        vec![128, 256, 512]
    } else {
        vec![1024, 2048, 4096]
    };
    println!(
        "The naive kernel reads a row of A and a column of B from global memory for\n\
         every output: each input element is read N times. The tiled kernel stages\n\
         tiles of A and B in workgroup memory and keeps a register tile of C per\n\
         invocation, so each element is read N / tile times (lecture: tiling)."
    );
    let opts = TimingOptions {
        repeats: args.repeats.max(1),
        ..TimingOptions::default()
    };
    let mut rows = Vec::new();
    for &n in &sizes {
        let (a, ha) = random_matrix(ctx, n, 1, wgtile::DType::F32)?;
        let (b, hb) = random_matrix(ctx, n, 2, wgtile::DType::F32)?;
        let choice = ctx.explain_matmul(wgtile::DType::F32, n, n, n, 1)?;
        println!("\nn = {n}: dispatcher -> {choice}");
        let naive = MatmulOptions::with_kernel(MatmulKernel::naive_for(profile));
        // The last run is whatever the library does by itself: the
        // dispatcher's kernel, padded where the padding layer decides to.
        // Where that is the tensor cores (f32 split into f16 halves), the
        // tiled CUDA-core kernel runs before it.
        let mut runs = vec![
            (naive, MatmulKernel::naive_for(profile)),
            (MatmulOptions::default(), choice.kernel()),
        ];
        if matches!(choice.kernel(), MatmulKernel::Coop { .. }) {
            let tiled = wgtile::tune::choose_matmul(profile, wgtile::DType::F32, n, n, n, 1).kernel;
            let off = MatmulOptions {
                split_f32: Some(false),
                ..MatmulOptions::default()
            };
            runs.insert(1, (off, tiled));
        }
        for (options, kernel) in runs {
            let plan = ctx.matmul_plan(&a, &b, None, &options)?;
            ctx.fill(plan.output(), f32::NAN)?;
            let timing = ctx.time(&plan, &opts)?;
            let c: Vec<f32> = plan.output().to_vec_blocking()?;
            let max_err = max_error(&ha, &hb, &c, n);
            println!(
                "  {:<44} {:>9.2} GFLOP/s  {:>9.3} ms  max |err| {:.2e}",
                kernel.to_string(),
                timing.gflops(plan.flops()),
                timing.median() * 1e3,
                max_err
            );
            rows.push(Row {
                n,
                kernel: plan.label().to_string(),
                gflops: timing.gflops(plan.flops()),
                ms: timing.median() * 1e3,
                max_err,
            });
        }
    }
    println!(
        "\nSummary (f32, square n x n x n; timing by {}):",
        timing_source(ctx)
    );
    println!(
        "{:>6}  {:>12}  {:>12}  {:>8}  {:>10}",
        "n", "naive GF/s", "kernel GF/s", "speedup", "max |err|"
    );
    // (max |err|: the kernel's own; the naive kernel's is in the lines above.)
    // Per size: the naive run first, then each other kernel against it.
    for group in rows.chunk_by(|a, b| a.n == b.n) {
        let [naive, others @ ..] = group else {
            continue;
        };
        for tiled in others {
            println!(
                "{:>6}  {:>12.2}  {:>12.2}  {:>7.1}x  {:>10.2e}   ({}; {:.3} ms vs {:.3} ms)",
                naive.n,
                naive.gflops,
                tiled.gflops,
                naive.ms / tiled.ms,
                tiled.max_err,
                tiled.kernel,
                naive.ms,
                tiled.ms
            );
        }
    }
    Ok(())
}

fn low_precision_section(ctx: &Context, args: &Args) -> Result<(), Box<dyn std::error::Error>> {
    let profile = ctx.profile();
    if !profile.shader_f16 {
        println!("this adapter has no shader-f16: skipped");
        return Ok(());
    }
    let n = args
        .sizes
        .last()
        .copied()
        .unwrap_or(if profile.is_cpu() { 256 } else { 4096 });
    let n = if args.quick { 128 } else { n };
    println!(
        "f16 halves the bytes per element; the products still accumulate in f32.\n\
         On adapters with cooperative matrices (tensor cores) f16 also runs on the\n\
         matrix units: {}.",
        if wgtile::tune::has_coop_f16(profile) {
            "available here"
        } else {
            "not available here"
        }
    );
    let opts = TimingOptions {
        repeats: args.repeats.max(1),
        ..TimingOptions::default()
    };
    println!(
        "\n{:<52} {:>12} {:>10} {:>10}",
        format!("n = {n}"),
        "GFLOP/s",
        "ms",
        "max |err|"
    );
    for dtype in [DType::F32, DType::F16] {
        let (a, ha) = random_matrix(ctx, n, 1, dtype)?;
        let (b, hb) = random_matrix(ctx, n, 2, dtype)?;
        let choice = ctx.explain_matmul(dtype, n, n, n, 1)?;
        let mut runs = vec![(MatmulOptions::default(), choice.kernel().to_string())];
        if dtype == DType::F32 && wgtile::tune::has_coop_f16(profile) {
            // f32 operands on the tensor cores, rounded to f16 on the way in:
            // only when asked (MatmulOptions::reduced_precision).
            let options = MatmulOptions {
                reduced_precision: true,
                ..MatmulOptions::default()
            };
            runs.push((options, "on tensor cores (reduced precision)".to_string()));
            // Or split into two f16 halves each, three products per pair:
            // f32's accuracy (MatmulOptions::split_f32; the dispatcher's
            // default from 1024^3 on, then shown against the CUDA cores).
            let split = MatmulOptions {
                split_f32: Some(true),
                ..MatmulOptions::default()
            };
            if ctx
                .matmul_plan(&a, &b, None, &split)?
                .label()
                .contains("f16 pairs")
            {
                if choice.kernel().to_string().contains("f16 pairs") {
                    let off = MatmulOptions {
                        split_f32: Some(false),
                        ..MatmulOptions::default()
                    };
                    let cuda_cores =
                        wgtile::tune::choose_matmul(profile, DType::F32, n, n, n, 1).kernel;
                    runs.insert(0, (off, format!("{cuda_cores} (split_f32 off)")));
                } else {
                    runs.push((split, "on tensor cores, split into f16 halves".to_string()));
                }
            }
        }
        if dtype == DType::F16 && matches!(choice.kernel(), MatmulKernel::Coop { .. }) {
            // Show the same f16 problem on the CUDA-core kernel too.
            let cuda_cores = wgtile::tune::choose_matmul(profile, DType::F32, n, n, n, 1).kernel;
            if cuda_cores.accepts(dtype, n, n, n) {
                runs.insert(
                    0,
                    (
                        MatmulOptions::with_kernel(cuda_cores),
                        cuda_cores.to_string(),
                    ),
                );
            }
        }
        for (options, kernel) in runs {
            let plan = ctx.matmul_plan(&a, &b, None, &options)?;
            ctx.fill(plan.output(), f32::NAN)?;
            let timing = ctx.time(&plan, &opts)?;
            let c = plan.output().to_f32_vec_blocking()?;
            println!(
                "{:<52} {:>12.1} {:>10.3} {:>10.2e}",
                format!("{dtype} {kernel}"),
                timing.gflops(plan.flops()),
                timing.median() * 1e3,
                max_error(&ha, &hb, &c, n)
            );
        }
    }
    println!("(f16 errors include rounding the result to f16: half an ulp of |C|.)");
    Ok(())
}

/// One timed run of `a @ b` with `options`: (GFLOP/s, ms, max error, label).
fn measure(
    ctx: &Context,
    (a, ha): (&wgtile::Tensor, &[f32]),
    (b, hb): (&wgtile::Tensor, &[f32]),
    n: usize,
    options: &MatmulOptions,
    repeats: u32,
) -> Result<(f64, f64, f64, String), Box<dyn std::error::Error>> {
    let plan = ctx.matmul_plan(a, b, None, options)?;
    ctx.fill(plan.output(), f32::NAN)?;
    let timing = ctx.time(
        &plan,
        &TimingOptions {
            repeats,
            ..TimingOptions::default()
        },
    )?;
    let c = plan.output().to_f32_vec_blocking()?;
    let mut label = plan.label().to_string();
    // Where a multi-kernel plan's time goes (the padding copies, then the
    // matmul), each kernel timed alone.
    if plan.dispatch_count() > 1 {
        let mut parts = Vec::new();
        for stage in plan.stages() {
            let t = ctx.time(
                &stage,
                &TimingOptions {
                    repeats,
                    ..TimingOptions::default()
                },
            )?;
            parts.push(format!("{:.3}", t.median() * 1e3));
        }
        label.push_str(&format!("; kernels {} ms", parts.join(" + ")));
    }
    Ok((
        timing.gflops(plan.flops()),
        timing.median() * 1e3,
        max_error(ha, hb, &c, n),
        label,
    ))
}

fn padding_section(ctx: &Context, args: &Args) -> Result<(), Box<dyn std::error::Error>> {
    let profile = ctx.profile();
    // Around a tile boundary: 128 on a CPU adapter; on a GPU the lecture's
    // 1792 and 4096 (where the last row and column go apart).
    let sizes: &[usize] = if args.quick || profile.is_cpu() {
        &[128, 129]
    } else {
        &[1792, 1793, 4096, 4097]
    };
    println!(
        "A size one past a multiple of the tile needs a whole extra row and column\n\
         of workgroups (wave quantisation), and K or N off a multiple of 4 (8 for\n\
         tensor cores) rules out 16-byte loads. The padding layer copies such\n\
         operands into aligned, zero-padded buffers when its cost model says the\n\
         faster kernel pays for the copies (lecture: nanoGPT's 50257 -> 50304)."
    );
    let dtypes: Vec<DType> = if wgtile::tune::has_coop_f16(profile) {
        vec![DType::F32, DType::F16]
    } else {
        vec![DType::F32]
    };
    for dtype in dtypes {
        println!("\n{dtype}:");
        for &n in sizes {
            let (a, ha) = random_matrix(ctx, n, 5, dtype)?;
            let (b, hb) = random_matrix(ctx, n, 6, dtype)?;
            println!("  n = {n}: {}", ctx.explain_matmul(dtype, n, n, n, 1)?);
            for (name, padding) in [
                ("unpadded", Padding::Never),
                ("padding layer", Padding::Auto),
            ] {
                let options = MatmulOptions::with_padding(padding);
                let (gflops, ms, err, label) =
                    measure(ctx, (&a, &ha), (&b, &hb), n, &options, args.repeats.max(1))?;
                println!(
                    "    {name:<14} {gflops:>10.1} GFLOP/s {ms:>9.3} ms  max |err| {err:.2e}  ({label})"
                );
            }
        }
    }
    Ok(())
}

fn gemv_section(ctx: &Context, args: &Args) -> Result<(), Box<dyn std::error::Error>> {
    let profile = ctx.profile();
    let shapes: Vec<(usize, usize)> = if args.quick || profile.is_cpu() {
        vec![(1024, 1024)]
    } else {
        vec![(4096, 4096), (4096, 14336)]
    };
    println!(
        "x[1, K] @ W[K, N] reads every weight once for one multiply-add: the floor is\n\
         the bytes of W over the memory bandwidth. Judged in GB/s (bytes of W, x, y)."
    );
    let opts = TimingOptions {
        repeats: args.repeats.max(1) * 4,
        ..TimingOptions::default()
    };
    for dtype in [DType::F32, DType::F16] {
        if dtype == DType::F16 && !profile.shader_f16 {
            continue;
        }
        for &(k, n) in &shapes {
            let x = ctx.rand_uniform([1, k], -1.0, 1.0, dtype, 7)?;
            let w = ctx.rand_uniform([k, n], -1.0, 1.0, dtype, 8)?;
            let hx = x.to_f32_vec_blocking()?;
            let hw = w.to_f32_vec_blocking()?;
            let plan = ctx.matmul_plan(&x, &w, None, &MatmulOptions::default())?;
            ctx.fill(plan.output(), f32::NAN)?;
            let timing = ctx.time(&plan, &opts)?;
            let y = plan.output().to_f32_vec_blocking()?;
            let mut worst = 0.0f64;
            for (j, &got) in y.iter().enumerate() {
                let want: f64 = (0..k)
                    .map(|p| f64::from(hx[p]) * f64::from(hw[p * n + j]))
                    .sum();
                let err = (f64::from(got) - want).abs();
                worst = if err.is_nan() {
                    f64::INFINITY
                } else {
                    worst.max(err)
                };
            }
            // Min and max next to the median: the tours of runs 54-55
            // (docs/perf/log-2026-11.md) measured the f32 4096^2 case at a
            // third of its standalone speed.
            println!(
                "  {dtype} [1, {k}] x [{k}, {n}]  {:>8.1} GB/s {:>9.3} ms (min {:.3}, max {:.3})  max |err| {worst:.2e}  ({})",
                timing.gbps(plan.bytes()),
                timing.median() * 1e3,
                timing.min() * 1e3,
                timing.max() * 1e3,
                plan.label()
            );
        }
    }
    Ok(())
}

/// Median seconds of `plan` (GPU timestamps where the adapter has them).
fn seconds(ctx: &Context, plan: &Plan, args: &Args) -> wgtile::Result<f64> {
    let opts = TimingOptions {
        repeats: args.repeats.max(1) * 2,
        ..TimingOptions::default()
    };
    Ok(ctx.time(plan, &opts)?.median())
}

fn fusion_section(ctx: &Context, args: &Args) -> Result<(), Box<dyn std::error::Error>> {
    let n: usize = if args.quick || ctx.profile().is_cpu() {
        1 << 20
    } else {
        1 << 26
    };
    let host = wgtile::uniform_values(n, -4.0, 4.0, 11);
    let x = ctx.tensor(&host, [n])?;
    let expr = x.expr().sin().square() + x.expr().cos().square();
    let copy = ctx.eval_plan(&x.expr())?;
    let fused = ctx.eval_plan(&expr)?;
    let unfused = ctx.eval_unfused_plan(&expr)?;
    println!(
        "y = sin(x)^2 + cos(x)^2 over {n} f32 elements ({} MiB). Run op by op it is\n\
         {} kernels, each reading and writing its operands in global memory;\n\
         fused it is one kernel that reads x once and writes y once.",
        (n * 4) >> 20,
        unfused.dispatch_count()
    );
    let t_copy = seconds(ctx, &copy, args)?;
    let copy_gbps = copy.bytes() as f64 / t_copy / 1e9;
    println!("  copy y = x (the bandwidth ceiling): {copy_gbps:>8.1} GB/s");
    let mut times = Vec::new();
    for (name, plan) in [("unfused", &unfused), ("fused", &fused)] {
        ctx.fill(plan.output(), f32::NAN)?;
        let t = seconds(ctx, plan, args)?;
        let y = plan.output().to_vec_blocking::<f32>()?;
        let worst = y
            .iter()
            .zip(&host)
            .map(|(&got, &v)| {
                let v = f64::from(v);
                let want = v.sin().powi(2) + v.cos().powi(2);
                let e = (f64::from(got) - want).abs();
                if e.is_nan() { f64::INFINITY } else { e }
            })
            .fold(0.0f64, f64::max);
        println!(
            "  {name:<8} {:>2} kernel(s) {:>7.1} MiB moved {:>9.3} ms {:>8.1} GB/s of the fused floor \
             ({:>3.0}% of copy)  max |err| {worst:.1e}",
            plan.dispatch_count(),
            plan.bytes() as f64 / (1u64 << 20) as f64,
            t * 1e3,
            fused.bytes() as f64 / t / 1e9,
            100.0 * fused.bytes() as f64 / t / 1e9 / copy_gbps,
        );
        times.push(t);
    }
    println!("  fusion buys {:.1}x", times[0] / times[1]);
    Ok(())
}

fn rowops_section(ctx: &Context, args: &Args) -> Result<(), Box<dyn std::error::Error>> {
    let (rows, cols) = if args.quick || ctx.profile().is_cpu() {
        (256, 4096)
    } else {
        (16384, 4096)
    };
    println!(
        "Rows of {cols} (x {rows}): each row is read once into registers, reduced in\n\
         workgroup memory (subgroup operations where the adapter has them) and\n\
         written once, so the floor is the copy of the same bytes."
    );
    let host = wgtile::uniform_values(rows * cols, -3.0, 3.0, 12);
    let x = ctx.tensor(&host, [rows, cols])?;
    let copy = ctx.copy_plan(&x)?;
    let t_copy = seconds(ctx, &copy, args)?;
    let copy_gbps = copy.bytes() as f64 / t_copy / 1e9;
    println!("  copy                {copy_gbps:>8.1} GB/s");
    let plans = [
        ("softmax", ctx.softmax_plan(&x)?),
        ("layer_norm", ctx.layer_norm_plan(&x, None, None, 1e-5)?),
        (
            "sum (last axis)",
            ctx.reduce_plan(&x, wgtile::Reduction::Sum, Axis::Last)?,
        ),
    ];
    for (name, plan) in &plans {
        ctx.fill(plan.output(), f32::NAN)?;
        let t = seconds(ctx, plan, args)?;
        let y = plan.output().to_vec_blocking::<f32>()?;
        // Check a few rows against f64.
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
        let gbps = plan.bytes() as f64 / t / 1e9;
        println!(
            "  {name:<18}  {gbps:>8.1} GB/s {:>4.0}% of copy {:>9.3} ms  max |err| {worst:.1e}",
            100.0 * gbps / copy_gbps,
            t * 1e3
        );
    }
    Ok(())
}

fn attention_section(ctx: &Context, args: &Args) -> Result<(), Box<dyn std::error::Error>> {
    let cpu = args.quick || ctx.profile().is_cpu();
    let (b, h, d) = (1usize, 8usize, 64usize);
    let dtype = DType::F32;
    let lengths: Vec<usize> = if cpu {
        vec![64, 128, 256]
    } else {
        vec![1024, 4096, 16384, 65536]
    };
    let (max_bytes, limit) = ctx.profile().max_tensor_bytes();
    let elem = dtype.size() as u64;
    // The naive path holds the B x H x S x S scores; flash only Q, K, V, O.
    let naive_max = ((max_bytes / (b * h) as u64 / elem) as f64).sqrt() as u64;
    let flash_max = max_bytes / (b * h * d) as u64 / elem;
    println!(
        "softmax(Q K^T / sqrt(D)) V, B = {b}, H = {h}, D = {d}, {dtype}, causal. The naive path\n\
         writes the S x S scores to memory and reads them twice; flash streams K/V\n\
         blocks through workgroup memory with an online softmax and never stores them.\n\
         Longest S one tensor allows ({limit} = {} MiB): naive {naive_max}, flash {flash_max}.",
        max_bytes >> 20
    );
    println!(
        "  {:>6} {:>12} {:>10} {:>12} {:>10} {:>8}  max |flash - naive|",
        "S", "naive ms", "scores MiB", "flash ms", "GFLOP/s", "speedup"
    );
    let opts = AttentionOptions::new().causal(DiagonalAlignment::TopLeft);
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
        let flops = 2.0 * (b * h * s_len * s_len * d) as f64; // causal: half of 4 B H S^2 D
        let (flash, flash_out) =
            ctx.attention_plan(&q, &k, &v, &opts.clone().kernel(AttentionKernel::Flash))?;
        let t_flash = seconds(ctx, &flash, args)?;
        let scores_mib = ((b * h * s_len * s_len) as u64 * elem) >> 20;
        let naive = ctx.attention_plan(&q, &k, &v, &opts.clone().kernel(AttentionKernel::Naive));
        match naive {
            Ok((plan, out)) => {
                let t_naive = seconds(ctx, &plan, args)?;
                let a = flash_out.o.to_vec_blocking::<f32>()?;
                let n = out.o.to_vec_blocking::<f32>()?;
                let diff = a
                    .iter()
                    .zip(&n)
                    .map(|(x, y)| f64::from((x - y).abs()))
                    .fold(
                        0.0,
                        |m, e| if e.is_nan() { f64::INFINITY } else { m.max(e) },
                    );
                println!(
                    "  {s_len:>6} {:>12.3} {scores_mib:>10} {:>12.3} {:>10.1} {:>7.1}x  {diff:.1e}",
                    t_naive * 1e3,
                    t_flash * 1e3,
                    flops / t_flash / 1e9,
                    t_naive / t_flash
                );
            }
            Err(e) => println!(
                "  {s_len:>6} {:>12} {scores_mib:>10} {:>12.3} {:>10.1} {:>8}  (naive: {e})",
                "no fit",
                t_flash * 1e3,
                flops / t_flash / 1e9,
                "-"
            ),
        }
    }

    // On tensor cores: the same flash algorithm with Q K^T and P V on
    // cooperative matrices (what `Auto` picks where they exist); f32 splits
    // each value into two f16 halves (three products per pair).
    if wgtile::tune::has_coop_f16(ctx.profile()) {
        let (b, h, d) = (4usize, 16usize, 128usize);
        println!(
            "\nOn tensor cores (B = {b}, H = {h}, D = {d}, not causal; TFLOP/s): the scalar\n\
             flash kernel against the cooperative-matrix one `Auto` picks; for f32 it\n\
             splits each value into two f16 halves and takes three products per pair."
        );
        println!(
            "  {:>6} {:>5} {:>12} {:>12} {:>8}  max |coop - scalar|  kernel",
            "S", "dtype", "scalar", "tensor", "speedup"
        );
        for (s_len, dtype) in [
            (1024usize, DType::F16),
            (4096, DType::F16),
            (4096, DType::F32),
        ] {
            let shape = [b, h, s_len, d];
            let (q, k, v) = (
                ctx.zeros(shape, dtype)?,
                ctx.zeros(shape, dtype)?,
                ctx.zeros(shape, dtype)?,
            );
            for (i, t) in [&q, &k, &v].into_iter().enumerate() {
                ctx.fill_random(t, 40 + i as u32)?;
            }
            let flops = 4.0 * (b * h * s_len * s_len * d) as f64;
            let plain = AttentionOptions::new();
            let (scalar, scalar_out) =
                ctx.attention_plan(&q, &k, &v, &plain.clone().kernel(AttentionKernel::Flash))?;
            let (coop, coop_out) = ctx.attention_plan(&q, &k, &v, &plain)?;
            let (ts, tc) = (seconds(ctx, &scalar, args)?, seconds(ctx, &coop, args)?);
            let diff = max_abs_diff(
                &scalar_out.o.to_f32_vec_blocking()?,
                &coop_out.o.to_f32_vec_blocking()?,
            );
            println!(
                "  {s_len:>6} {dtype:>5} {:>12.1} {:>12.1} {:>7.1}x  {diff:.1e}  {}",
                flops / ts / 1e12,
                flops / tc / 1e12,
                ts / tc,
                coop.label()
            );
        }
    }

    // The backward with recomputation on tensor cores: never stores the
    // S x S matrix, recomputes P per tile on cooperative matrices.
    if wgtile::tune::has_coop_f16(ctx.profile()) {
        let (b, h, d, s_len) = (4usize, 16usize, 128usize, 1024usize);
        println!(
            "\nbackward, f16 (B = {b}, H = {h}, S = {s_len}, D = {d}, not causal; TFLOP/s at 2.5x\n\
             the forward's FLOPs): recomputing P per tile, scalar kernels against the\n\
             cooperative-matrix ones `Auto` picks."
        );
        let shape = [b, h, s_len, d];
        let ts: Vec<_> = (0..4)
            .map(|_| ctx.zeros(shape, DType::F16))
            .collect::<Result<_, _>>()?;
        for (i, t) in ts.iter().enumerate() {
            ctx.fill_random(t, 50 + i as u32)?;
        }
        let (q, k, v, d_o) = (&ts[0], &ts[1], &ts[2], &ts[3]);
        let opts = AttentionOptions::new().with_lse();
        let fwd = ctx.attention(q, k, v, &opts)?;
        let lse = fwd.lse.clone().ok_or("the forward returned no logsumexp")?;
        let flops = 2.5 * 4.0 * (b * h * s_len * s_len * d) as f64;
        let scalar_opts = opts.clone().kernel(AttentionKernel::Flash);
        let (scalar, sg) = ctx.attention_backward_plan(q, k, v, &fwd.o, d_o, &lse, &scalar_opts)?;
        let (coop, cg) = ctx.attention_backward_plan(q, k, v, &fwd.o, d_o, &lse, &opts)?;
        let (ts_, tc) = (seconds(ctx, &scalar, args)?, seconds(ctx, &coop, args)?);
        let diff = max_abs_diff(&sg.dq.to_f32_vec_blocking()?, &cg.dq.to_f32_vec_blocking()?);
        println!(
            "  scalar {:>7.1}  tensor {:>7.1}  {:>5.1}x  max |dQ coop - scalar| {diff:.1e}  {}",
            flops / ts_ / 1e12,
            flops / tc / 1e12,
            ts_ / tc,
            coop.label()
        );
    }

    // Decoding: one new query row per token against a growing f16 cache,
    // split over workgroups along the keys (flash-decoding).
    let dtype = if ctx.profile().shader_f16 {
        DType::F16
    } else {
        DType::F32
    };
    let (hq, hkv, d) = (32usize, 8usize, 128usize);
    let steps: Vec<usize> = if cpu {
        vec![256, 1024]
    } else {
        vec![1024, 4096, 16384, 32768]
    };
    println!(
        "\ndecoding (B = 1, Hq = {hq}, Hkv = {hkv}, D = {d}, {dtype}): attention time per token of\n\
         one layer as the KV cache grows; the floor is reading the cache once."
    );
    let mut cache = KvCache::new(ctx, 1, hkv, d, d, 256, dtype)?;
    let q = ctx.zeros([1, hq, 1, d], dtype)?;
    ctx.fill_random(&q, 30)?;
    let opts = AttentionOptions::new().causal(DiagonalAlignment::BottomRight);
    let mut label = String::new();
    for &len in &steps {
        let add = len - cache.len();
        let kv = ctx.zeros([1, hkv, add, d], dtype)?;
        ctx.fill_random(&kv, len as u32)?;
        cache.append(&kv, &kv)?;
        let (plan, _) = ctx.attention_cached_plan(&q, &cache, &opts)?;
        let t = seconds(ctx, &plan, args)?;
        let cache_bytes = (2 * hkv * len * d * dtype.size()) as f64;
        println!(
            "  cache {len:>6}: {:>9.1} us/token = {:>8.0} tokens/s, {:>7.1} GB/s of cache read",
            t * 1e6,
            1.0 / t,
            cache_bytes / t / 1e9
        );
        label = plan.label().to_string();
    }
    // The dispatcher's kernel at the longest cache (split-KV: the key
    // splits, and whether each key's partial dots meet by subgroup shuffles).
    println!("  kernel: {label}");
    Ok(())
}

/// The largest |a - b| over two results of the same computation (infinite
/// where either holds a NaN).
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

// Long on purpose: one table of formats and one demonstration of the
// transposed copy, each a few lines per row.
fn fewer_bits_section(ctx: &Context, args: &Args) -> Result<(), Box<dyn std::error::Error>> {
    let profile = ctx.profile();
    let (k, n) = if args.quick || profile.is_cpu() {
        (1024, 1024)
    } else {
        (4096, 14336)
    };
    println!(
        "y = x[1, K] @ W[K, N] once more, W with outliers (one value in 997 is 30x),\n\
         stored in fewer bits. A GEMV reads each weight once, so its time follows the\n\
         bytes per weight; block scales (one per 32 or 16 weights down K) keep the\n\
         outliers from flattening their neighbours. Error: RMS of y - y_f32 over RMS of y_f32."
    );
    let wv = weight_with_outliers(k * n, 21);
    let w = ctx.tensor(&wv, [k, n])?;
    let x = ctx.rand_uniform([1, k], -1.0, 1.0, DType::F32, 22)?;
    let opts = TimingOptions {
        repeats: args.repeats.max(1) * 4,
        ..TimingOptions::default()
    };
    let reference = ctx.matmul(&x, &w)?.to_vec_blocking::<f32>()?;
    let mut f16_time = None;
    println!(
        "  {:<30} {:>8} {:>10} {:>9} {:>10}  kernel",
        "W as", "bytes/wt", "time (us)", "GB/s", "rms error"
    );
    let line = |name: &str, bytes_per: f64, plan: &Plan| -> wgtile::Result<f64> {
        let t = ctx.time(plan, &opts)?.median();
        plan.run()?;
        let y = plan.output().to_f32_vec_blocking()?;
        println!(
            "  {name:<30} {bytes_per:>8.3} {:>10.1} {:>9.1} {:>10.2e}  {}",
            t * 1e6,
            plan.bytes() as f64 / t / 1e9,
            rms_error(&y, &reference),
            plan.label()
        );
        Ok(t)
    };
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        if dtype == DType::F16 && !profile.shader_f16 {
            continue;
        }
        let (xd, wd) = (ctx.cast(&x, dtype)?, ctx.cast(&w, dtype)?);
        let plan = ctx.matmul_plan(&xd, &wd, None, &MatmulOptions::default())?;
        let t = line(&dtype.to_string(), dtype.size() as f64, &plan)?;
        if dtype == DType::F16 {
            f16_time = Some(t);
        }
    }
    for format in QuantFormat::ALL {
        let q = ctx.quantize(&w, format, QuantAxis::Columns)?;
        let plan = ctx.matmul_quantized_plan(&x, &q)?;
        let t = line(
            &format.to_string(),
            q.packed_bytes() as f64 / (k * n) as f64,
            &plan,
        )?;
        if let (Some(f16), QuantFormat::Mxfp4) = (f16_time, format) {
            println!(
                "  {:<30} MXFP4 runs at {:.2}x the f16 GEMV's speed",
                "",
                f16 / t
            );
        }
    }
    println!(
        "  (bf16 is staged: its GEMV casts W to f16 on every run, so it moves more than\n\
         \x20  f16's bytes; the block-scaled GEMVs decode in registers and never write W.)"
    );

    // The transposed copy: the forward product x @ W contracts W down its
    // columns (blocks along K), the backward one G @ W^T along its rows.
    let side = if args.quick || profile.is_cpu() {
        512
    } else {
        2048
    };
    let mv = weight_with_outliers(side * side, 23);
    let m = ctx.tensor(&mv, [side, side])?;
    println!(
        "\nTraining needs W blocked both ways (x @ W contracts it down its columns,\n\
         G @ W^T along its rows): quantize_both makes the two copies. The row-blocked\n\
         copy cannot be transposed into the other (its blocks run the wrong way);\n\
         re-quantising its values down the columns rounds a second time. RMS error\n\
         against W [{side}, {side}]:"
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
        let row_values = from_rows.to_vec_blocking::<f32>()?;
        println!(
            "  {:<13} column-blocked {:.3e}, re-quantised from the row-blocked copy {:.3e} \
             ({:.2}x); the two copies differ by {:.3e}",
            format.to_string(),
            rms_error(&direct, &mv),
            rms_error(&twice, &mv),
            rms_error(&twice, &mv) / rms_error(&direct, &mv),
            rms_error(&row_values, &direct)
        );
    }
    Ok(())
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

fn timing_source(ctx: &Context) -> &'static str {
    if ctx.profile().timestamps {
        "GPU timestamps, median"
    } else {
        "wall clock, median"
    }
}
