//! Does memory stay bounded under a long mixed workload? Runs `--ops` mixed
//! operations (matmul at a few shapes, fused elementwise with a new scalar
//! each time, softmax, layer norm, reductions, attention, a matmul epilogue
//! with a new scalar every `--epilogue-every` ops, read-backs) on one
//! context and prints the process's resident memory (VmRSS) and the
//! context's pipeline counts every `--every` ops.
//!
//! ```text
//! cargo run -p wgtile-dev --release --bin soak -- --ops 100000
//! ```

use std::time::Instant;

use clap::Parser;
use wgtile::{AttentionOptions, Axis, Context, DType, Epilogue, Expr};

#[derive(Parser)]
struct Args {
    /// Operations to run.
    #[arg(long, default_value_t = 100_000)]
    ops: usize,
    /// Print a sample every this many operations.
    #[arg(long, default_value_t = 5_000)]
    every: usize,
    /// A matmul epilogue with a new scalar (a new pipeline) every this many
    /// operations.
    #[arg(long, default_value_t = 100)]
    epilogue_every: usize,
}

/// Resident memory of this process in MiB (Linux), or NaN.
fn rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .map_or(f64::NAN, |kib| kib / 1024.0)
}

fn main() -> wgtile::Result<()> {
    env_logger::init();
    let args = Args::parse();
    let ctx = Context::new_blocking(Default::default())?;
    println!("{}", ctx.profile().name);
    let shapes = [
        (17usize, 33usize, 9usize),
        (64, 64, 64),
        (1, 128, 96),
        (100, 7, 51),
    ];
    let mats: Vec<_> = shapes
        .iter()
        .map(|&(m, k, n)| {
            let a = ctx.rand_uniform([m, k], -1.0, 1.0, DType::F32, 1)?;
            let b = ctx.rand_uniform([k, n], -1.0, 1.0, DType::F32, 2)?;
            Ok((a, b))
        })
        .collect::<wgtile::Result<_>>()?;
    let x = ctx.rand_uniform([64, 256], -4.0, 4.0, DType::F32, 3)?;
    let q = ctx.rand_uniform([1, 2, 16, 32], -1.0, 1.0, DType::F32, 4)?;
    let start = Instant::now();
    println!(
        "{:>8} {:>9} {:>10} {:>10} {:>8}",
        "ops", "RSS MiB", "pipelines", "fused", "s"
    );
    for i in 0..=args.ops {
        if i % args.every == 0 {
            ctx.sum(&x, Axis::All)?.to_vec_blocking::<f32>()?;
            println!(
                "{:>8} {:>9.1} {:>10} {:>10} {:>8.1}",
                i,
                rss_mib(),
                ctx.pipeline_count(),
                ctx.fused_kernel_count(),
                start.elapsed().as_secs_f64()
            );
        }
        if i == args.ops {
            break;
        }
        let s = 1.0 + (i % 997) as f32 * 1e-3;
        let (a, b) = &mats[i % mats.len()];
        match i % 8 {
            0 => drop(ctx.matmul(a, b)?),
            1 => drop(ctx.eval(&(x.expr() * s + 1.0).sin())?),
            2 => drop(ctx.softmax(&x)?),
            3 => drop(ctx.layer_norm(&x, None, None, 1e-5)?),
            4 => drop(ctx.sum(&x, Axis::Last)?),
            5 => drop(ctx.attention(&q, &q, &q, &AttentionOptions::new())?),
            6 => drop(ctx.softmax_of(&(x.expr() * s), None)?),
            _ => drop(ctx.mean(&x, Axis::All)?.to_vec_blocking::<f32>()?),
        }
        if i % args.epilogue_every == 0 {
            let e = Epilogue::new().expr(&(Expr::acc() * s));
            drop(ctx.matmul_with(a, b, &e)?);
        }
    }
    Ok(())
}
