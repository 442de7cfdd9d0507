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
//! 4. alignment, padding and wave quantisation: N = 1792 against 1793 (128 vs
//!    129 on a CPU adapter), raw and through the padding layer;
//! 5. the memory-bound corner: GEMV in GB/s.
//!
//! It opts in to wgpu's experimental cooperative matrices, and autotunes large
//! shapes on GPUs (`WGTILE_AUTOTUNE=off` shows the heuristic's picks).

use std::time::Instant;

use clap::Parser;

#[path = "common/mod.rs"]
mod common;
use common::{max_error, random_matrix};
use wgtile::{Context, ContextOptions, DType, MatmulKernel, MatmulOptions, Padding, TimingOptions};

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
        let choice = ctx.explain_matmul(wgtile::DType::F32, n, n, n, 1);
        println!("\nn = {n}: dispatcher -> {choice}");
        let naive = MatmulOptions::with_kernel(MatmulKernel::naive_for(profile));
        // The second run is whatever the library does by itself: the
        // dispatcher's kernel, padded where the padding layer decides to.
        for (options, kernel) in [
            (naive, MatmulKernel::naive_for(profile)),
            (MatmulOptions::default(), choice.kernel()),
        ] {
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
        "n", "naive GF/s", "tiled GF/s", "speedup", "max |err|"
    );
    for pair in rows.chunks(2) {
        if let [naive, tiled] = pair {
            println!(
                "{:>6}  {:>12.2}  {:>12.2}  {:>7.1}x  {:>10.2e}   ({}; {:.3} ms vs {:.3} ms)",
                naive.n,
                naive.gflops,
                tiled.gflops,
                naive.ms / tiled.ms,
                naive.max_err.max(tiled.max_err),
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
        let choice = ctx.explain_matmul(dtype, n, n, n, 1);
        let mut runs = vec![(MatmulOptions::default(), choice.kernel())];
        if dtype == DType::F16 && matches!(choice.kernel(), MatmulKernel::Coop { .. }) {
            // Show the same f16 problem on the CUDA-core kernel too.
            let cuda_cores = wgtile::tune::choose_matmul(profile, DType::F32, n, n, n, 1).kernel;
            if cuda_cores.accepts(dtype, n, n, n) {
                runs.insert(0, (MatmulOptions::with_kernel(cuda_cores), cuda_cores));
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
    Ok((
        timing.gflops(plan.flops()),
        timing.median() * 1e3,
        max_error(ha, hb, &c, n),
        plan.label().to_string(),
    ))
}

fn padding_section(ctx: &Context, args: &Args) -> Result<(), Box<dyn std::error::Error>> {
    let profile = ctx.profile();
    let base = if args.quick || profile.is_cpu() {
        128
    } else {
        1792
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
        for n in [base, base + 1] {
            let (a, ha) = random_matrix(ctx, n, 5, dtype)?;
            let (b, hb) = random_matrix(ctx, n, 6, dtype)?;
            println!("  n = {n}: {}", ctx.explain_matmul(dtype, n, n, n, 1));
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
            println!(
                "  {dtype} [1, {k}] x [{k}, {n}]  {:>8.1} GB/s {:>9.3} ms  max |err| {worst:.2e}  ({})",
                timing.gbps(plan.bytes()),
                timing.median() * 1e3,
                plan.label()
            );
        }
    }
    Ok(())
}

fn timing_source(ctx: &Context) -> &'static str {
    if ctx.profile().timestamps {
        "GPU timestamps, median"
    } else {
        "wall clock, median"
    }
}
