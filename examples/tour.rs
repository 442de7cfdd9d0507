//! The tour: every technique wgtile implements, run and measured on the current
//! adapter. `cargo xtask tour` runs it in release mode after checking for a
//! Vulkan driver.
//!
//! ```text
//! cargo run --release --example tour -- [--sizes 256,512] [--repeats N] [--quick]
//! ```
//!
//! Sections so far:
//! 1. the adapter profile;
//! 2. matmul: the naive kernel (one invocation per output, no reuse) against the
//!    tiled kernel the dispatcher picks (workgroup tiles + register tiles), with
//!    each result's error against an f64 CPU reference and the achieved GFLOP/s.

use std::time::Instant;

use clap::Parser;
use wgtile::{Context, MatmulKernel, Tensor, TimingOptions};

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

/// Outputs compared with the f64 reference per size: all of them up to this
/// many, else this many spread over the matrix (the reference costs 2K flops each).
const CHECKED_OUTPUTS: usize = 1 << 16;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let args = Args::parse();
    let start = Instant::now();
    let ctx = Context::new_blocking(Default::default())?;

    section("1. The adapter");
    println!("{}", ctx.profile());

    section("2. Matmul: naive vs tiled (f32)");
    matmul_section(&ctx, &args)?;

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
        warmup: 1,
        repeats: args.repeats.max(1),
    };
    let mut rows = Vec::new();
    for &n in &sizes {
        let (a, ha) = random_matrix(ctx, n, 1)?;
        let (b, hb) = random_matrix(ctx, n, 2)?;
        let choice = ctx.explain_matmul(n, n, n, 1);
        println!("\nn = {n}: dispatcher -> {choice}");
        for kernel in [MatmulKernel::naive_for(profile), choice.kernel] {
            let plan = ctx.matmul_plan(&a, &b, None, Some(kernel))?;
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
                kernel: kernel.to_string(),
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

fn timing_source(ctx: &Context) -> &'static str {
    if ctx.profile().timestamps {
        "GPU timestamps, median"
    } else {
        "wall clock, median"
    }
}

fn random_matrix(ctx: &Context, n: usize, seed: u64) -> wgtile::Result<(Tensor, Vec<f32>)> {
    let host = wgtile::uniform_values(n * n, -1.0, 1.0, seed);
    Ok((ctx.tensor(&host, [n, n])?, host))
}

/// Largest |C - A B| over all outputs (small n) or an even spread of outputs,
/// against f64 dot products.
fn max_error(a: &[f32], b: &[f32], c: &[f32], n: usize) -> f64 {
    let total = n * n;
    let step = total.div_ceil(CHECKED_OUTPUTS).max(1);
    // An odd stride visits every column over the rows instead of one column.
    let step = if step > 1 && step.is_multiple_of(2) {
        step + 1
    } else {
        step
    };
    let mut worst = 0.0f64;
    for idx in (0..total).step_by(step) {
        let (i, j) = (idx / n, idx % n);
        let reference: f64 = (0..n)
            .map(|p| f64::from(a[i * n + p]) * f64::from(b[p * n + j]))
            .sum();
        let err = (f64::from(c[idx]) - reference).abs();
        worst = if err.is_nan() {
            f64::INFINITY
        } else {
            worst.max(err)
        };
    }
    worst
}
