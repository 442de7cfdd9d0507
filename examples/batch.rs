//! Few submissions per forward pass against one per op: a small
//! transformer-style MLP stack (per layer: `gelu(x W1 + b1)`, `h W2 + x`,
//! a layer norm), run three ways: op by op, inside `Context::batch` (a
//! submission per `BATCH_CHUNK` dispatches; each op still builds its plan),
//! and as plans built once and replayed with `Context::run_plans` (one
//! submission, nothing built).
//!
//! ```text
//! cargo run --release --example batch -- [--layers 12] [--hidden 384] [--rows 1] [--repeats 50]
//! ```
//! Prints the median host time of a forward pass (from the first op to
//! the result being ready) each way, the submissions it took, and the
//! speedup over op by op.

use clap::Parser;
use wgtile::{Context, ContextOptions, DType, Plan, Result};

#[derive(Parser, Debug)]
struct Args {
    #[arg(long, default_value_t = 12)]
    layers: usize,
    #[arg(long, default_value_t = 384)]
    hidden: usize,
    /// Rows of x (tokens times sentences).
    #[arg(long, default_value_t = 1)]
    rows: usize,
    #[arg(long, default_value_t = 50)]
    repeats: usize,
}

#[path = "common/mlp.rs"]
mod mlp;
use mlp::{forward, forward_plans};

fn main() -> std::result::Result<(), Box<dyn std::error::Error>> {
    env_logger::init();
    let args = Args::parse();
    let ctx = Context::new_blocking(ContextOptions::default())?;
    println!("adapter: {}", ctx.profile().name);
    let d = args.hidden;
    let layers = mlp::layers(&ctx, args.layers, d)?;
    let x = ctx.rand_uniform([args.rows, d], -0.1, 0.1, DType::F32, 999)?;
    // Warm-up: pipelines compiled, the clock up.
    for _ in 0..5 {
        forward(&ctx, &layers, &x)?;
        ctx.batch(|| forward(&ctx, &layers, &x))?;
    }
    ctx.synchronize()?;
    let plans = forward_plans(&ctx, &layers, &x)?;
    let refs: Vec<&Plan> = plans.iter().collect();
    let measure = |mode: u8| -> Result<(f64, u64)> {
        let mut times = Vec::with_capacity(args.repeats);
        let mut submits = 0;
        for _ in 0..args.repeats.max(1) {
            let s0 = ctx.submissions();
            let t0 = std::time::Instant::now();
            match mode {
                0 => drop(forward(&ctx, &layers, &x)?),
                1 => drop(ctx.batch(|| forward(&ctx, &layers, &x))?),
                _ => ctx.run_plans(&refs)?,
            }
            ctx.synchronize()?;
            times.push(t0.elapsed().as_secs_f64());
            submits = ctx.submissions() - s0;
        }
        times.sort_by(f64::total_cmp);
        Ok((times[times.len() / 2], submits))
    };
    // The same results either way (the same kernels in the same order).
    let a = forward(&ctx, &layers, &x)?.to_vec_blocking::<f32>()?;
    let b = ctx
        .batch(|| forward(&ctx, &layers, &x))?
        .to_vec_blocking::<f32>()?;
    assert_eq!(a, b, "a batch must compute what op by op does");
    ctx.run_plans(&refs)?;
    if let Some(last) = refs.last() {
        let c = last.output().to_vec_blocking::<f32>()?;
        assert_eq!(c, a, "replayed plans must compute what op by op does");
    }
    let (t_ops, n_ops) = measure(0)?;
    let (t_batch, n_batch) = measure(1)?;
    let (t_plans, n_plans) = measure(2)?;
    println!(
        "{} layers, hidden {d}, {} rows: {} ops per forward",
        args.layers,
        args.rows,
        3 * args.layers
    );
    println!("op by op: {:>9.1} us ({n_ops} submissions)", t_ops * 1e6);
    println!(
        "batch:    {:>9.1} us ({n_batch} submissions)  {:.2}x",
        t_batch * 1e6,
        t_ops / t_batch
    );
    println!(
        "replayed: {:>9.1} us ({n_plans} submission)   {:.2}x",
        t_plans * 1e6,
        t_ops / t_plans
    );
    Ok(())
}
