//! The bf16 matmul's tensor-core forms side by side: the route with an
//! f32 and a bf16 result (bf16 read in place and narrowed to f16 after a
//! check pass, or for large products staged to f16 by the checked cast;
//! the f32 plan armed where the range test fails), each of the two forced
//! (`bf16_staged`, bf16 result), and the scaled form (each operand
//! times its power of two before the narrowing; no check, no fallback),
//! each on uniform data (`rand_uniform`: every value an f16 value) and on
//! normal data (activations of N(0, 1) times a weight of N(0, 0.02), with
//! values below 2^-17 that f16 cannot hold exactly, which the range test
//! lets through), next to the f16 matmul of the
//! same size; the largest error against the f32 matmul of the widened
//! operands relative to its largest magnitude.
//!
//! ```text
//! cargo run -p wgtile-dev --release --bin bf16_matmul -- --sizes 2048,4096
//! ```

use clap::Parser;
use wgtile::{Context, ContextOptions, DType, MatmulOptions, Plan, TimingOptions};

#[derive(Parser, Debug)]
struct Args {
    /// Square sizes.
    #[arg(long, value_delimiter = ',', default_value = "2048,4096")]
    sizes: Vec<usize>,
    #[arg(long, default_value_t = 20)]
    repeats: u32,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let args = Args::parse();
    let ctx = Context::new_blocking(ContextOptions {
        cooperative_matrix: Some(true),
        ..Default::default()
    })?;
    println!("{} ({:?})", ctx.profile().name, ctx.profile().backend);
    let opts = TimingOptions {
        warmup: 3,
        warmup_seconds: 0.3,
        repeats: args.repeats.max(1),
    };
    let time = |plan: &Plan| -> wgtile::Result<f64> { Ok(ctx.time(plan, &opts)?.median()) };
    let f32_out = MatmulOptions {
        out_dtype: Some(DType::F32),
        ..Default::default()
    };
    println!(
        "{:>5} {:>8} {:>8} {:>11} {:>9} {:>7} {:>10}",
        "n", "data", "form", "time us", "TFLOP/s", "vs f16", "rel err"
    );
    for &n in &args.sizes {
        let a16 = ctx.rand_uniform([n, n], -1.0, 1.0, DType::F16, 1)?;
        let b16 = ctx.rand_uniform([n, n], -1.0, 1.0, DType::F16, 2)?;
        let t16 = time(&ctx.matmul_plan(&a16, &b16, None, &MatmulOptions::default())?)?;
        let flops = 2.0 * (n as f64).powi(3);
        println!(
            "{n:>5} {:>8} {:>8} {:>11.1} {:>9.1} {:>7} {:>10}",
            "uniform",
            "f16",
            t16 * 1e6,
            flops / t16 / 1e12,
            "1.00x",
            "-"
        );
        let data = [
            (
                "uniform",
                ctx.rand_uniform([n, n], -1.0, 1.0, DType::BF16, 3)?,
                ctx.rand_uniform([n, n], -1.0, 1.0, DType::BF16, 4)?,
            ),
            (
                "normal",
                ctx.rand_normal([n, n], 0.0, 1.0, DType::BF16, 5)?,
                ctx.rand_normal([n, n], 0.0, 0.02, DType::BF16, 6)?,
            ),
        ];
        for (what, a, b) in &data {
            let reference = ctx.matmul(&ctx.cast(a, DType::F32)?, &ctx.cast(b, DType::F32)?)?;
            let want = reference.to_vec_blocking::<f32>()?;
            let scale = want
                .iter()
                .fold(0f64, |m, &v| m.max(f64::from(v).abs()))
                .max(f64::MIN_POSITIVE);
            let defaults = wgtile::dev::DevOverrides::default();
            let bf16_out = MatmulOptions::default();
            let forced = |staged: bool| {
                wgtile::dev::set_overrides(wgtile::dev::DevOverrides {
                    bf16_staged: Some(staged),
                    ..defaults
                });
                let plan = ctx.matmul_plan(a, b, None, &bf16_out);
                wgtile::dev::set_overrides(defaults);
                plan
            };
            let forms: [(&str, wgtile::Result<Plan>); 5] = [
                ("route", ctx.matmul_plan(a, b, None, &f32_out)),
                ("->bf16", ctx.matmul_plan(a, b, None, &bf16_out)),
                ("in-place", forced(false)),
                ("staged", forced(true)),
                ("scaled", ctx.matmul_bf16_scaled_plan(a, b)),
            ];
            for (form, plan) in forms {
                let plan = match plan {
                    Ok(p) => p,
                    Err(e) => {
                        println!("{n:>5} {what:>8} {form:>8} {e}");
                        continue;
                    }
                };
                plan.run()?;
                let got = plan.output().to_f32_vec_blocking()?;
                let err = got.iter().zip(&want).fold(0f64, |m, (&g, &w)| {
                    m.max((f64::from(g) - f64::from(w)).abs())
                });
                let t = time(&plan)?;
                println!(
                    "{n:>5} {what:>8} {form:>8} {:>11.1} {:>9.1} {:>6.2}x {:>10.2e}",
                    t * 1e6,
                    flops / t / 1e12,
                    t16 / t,
                    err / scale
                );
            }
        }
    }
    Ok(())
}
