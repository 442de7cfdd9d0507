//! Every matmul kernel variant side by side: naive, tiled (scalar loads) and
//! tiled vec4 for each tile shape, on square sizes, with GFLOP/s and each
//! result's error against an f64 reference (sampled on large sizes).
//!
//! ```text
//! cargo run --release --example matmul_kernels -- [--sizes 512,1024] [--dtype f32|f16] [--repeats N]
//! ```
//! `WGTILE_CHECKED_SHADERS=1` compiles every kernel with wgpu's runtime bounds
//! checks, to see what the trusted (unchecked) modules buy.

use clap::Parser;
use wgtile::tune::TILE_CONFIGS;
use wgtile::{Context, DType, MatmulKernel, TimingOptions};

#[path = "common/mod.rs"]
mod common;

#[derive(Parser, Debug)]
struct Args {
    /// Square sizes (default: suited to the adapter).
    #[arg(long, value_delimiter = ',')]
    sizes: Vec<usize>,
    /// Element type of A, B and C (accumulation is f32 either way).
    #[arg(long, default_value = "f32")]
    dtype: String,
    /// Measured runs per kernel and size.
    #[arg(long, default_value_t = 10)]
    repeats: u32,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let args = Args::parse();
    let dtype = match args.dtype.as_str() {
        "f32" => DType::F32,
        "f16" => DType::F16,
        other => return Err(format!("--dtype must be f32 or f16, not {other}").into()),
    };
    let ctx = Context::new_blocking(Default::default())?;
    let profile = ctx.profile();
    println!("{} ({:?})", profile.name, profile.backend);
    let sizes = if !args.sizes.is_empty() {
        args.sizes.clone()
    } else if profile.is_cpu() {
        vec![128, 256]
    } else {
        vec![1024, 2048, 4096]
    };
    let mut kernels = vec![MatmulKernel::naive_for(profile)];
    for tile in TILE_CONFIGS.into_iter().filter(|t| t.fits(profile)) {
        for vec4 in [false, true] {
            kernels.push(MatmulKernel::Tiled { tile, vec4 });
        }
    }
    let opts = TimingOptions {
        warmup: 2,
        repeats: args.repeats.max(1),
    };
    println!(
        "{:>6}  {:<40} {:>11} {:>10} {:>10}",
        "n", "kernel", "GFLOP/s", "ms", "max|err|"
    );
    for &n in &sizes {
        let (a, ha) = common::random_matrix(&ctx, n, 1, dtype)?;
        let (b, hb) = common::random_matrix(&ctx, n, 2, dtype)?;
        for &kernel in &kernels {
            let plan = match ctx.matmul_plan(&a, &b, None, Some(kernel)) {
                Ok(plan) => plan,
                Err(e) => {
                    println!("{n:>6}  {:<40} skipped: {e}", kernel.to_string());
                    continue;
                }
            };
            ctx.fill(plan.output(), f32::NAN)?;
            let timing = ctx.time(&plan, &opts)?;
            let c = plan.output().to_f32_vec_blocking()?;
            println!(
                "{n:>6}  {:<40} {:>11.1} {:>10.3} {:>10.2e}",
                kernel.to_string(),
                timing.gflops(plan.flops()),
                timing.median() * 1e3,
                common::max_error(&ha, &hb, &c, n)
            );
        }
    }
    Ok(())
}
