//! How many steps a `Context::batch` should record before it submits: a
//! small MLP stack (the `batch` example's: matmul + bias + GELU, matmul +
//! residual, layer norm per layer) run op by op, in batches submitting
//! every `--chunks` steps (0: once at the end), and as replayed plans,
//! median host-side wall time per forward, same results checked.
//!
//! ```text
//! cargo run -p wgtile-dev --release --bin batch_sweep -- --rows 1 --chunks 0,8,16,32,64
//! ```

use clap::Parser;
use wgtile::dev::{DevOverrides, set_overrides};
use wgtile::{Context, ContextOptions, DType, Plan, Result};
use wgtile_dev::mlp::{self, forward, forward_plans};

#[derive(Parser, Debug)]
struct Args {
    #[arg(long, default_value_t = 12)]
    layers: usize,
    #[arg(long, default_value_t = 384)]
    hidden: usize,
    /// Rows of x.
    #[arg(long, value_delimiter = ',', default_value = "1,128")]
    rows: Vec<usize>,
    /// Steps per submission inside a batch (0: one submission).
    #[arg(long, value_delimiter = ',', default_value = "0,8,16,32,64")]
    chunks: Vec<usize>,
    #[arg(long, default_value_t = 50)]
    repeats: usize,
}

fn main() -> std::result::Result<(), Box<dyn std::error::Error>> {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let args = Args::parse();
    let ctx = Context::new_blocking(ContextOptions::default())?;
    println!("{} ({:?})", ctx.profile().name, ctx.profile().backend);
    let d = args.hidden;
    let layers = mlp::layers(&ctx, args.layers, d)?;
    let rand = |shape: &[usize], seed: u64| ctx.rand_uniform(shape, -0.1, 0.1, DType::F32, seed);
    println!(
        "{:>5} {:>10} {:>11} {:>7} {:>8}",
        "rows", "mode", "us/forward", "submits", "vs ops"
    );
    for &rows in &args.rows {
        let x = rand(&[rows, d], 999)?;
        let want = forward(&ctx, &layers, &x)?.to_vec_blocking::<f32>()?;
        let replay = forward_plans(&ctx, &layers, &x)?;
        let refs: Vec<&Plan> = replay.iter().collect();
        // mode: None op by op, Some(c) a batch of chunk c, Some(MAX) replay.
        let measure = |mode: Option<usize>| -> Result<(f64, u64)> {
            if let Some(c) = mode.filter(|&c| c != usize::MAX) {
                set_overrides(DevOverrides {
                    batch_chunk: Some(c),
                    ..DevOverrides::DEFAULT
                });
            }
            let run = || -> Result<()> {
                match mode {
                    None => drop(forward(&ctx, &layers, &x)?),
                    Some(usize::MAX) => ctx.run_plans(&refs)?,
                    Some(_) => drop(ctx.batch(|| forward(&ctx, &layers, &x))?),
                }
                ctx.synchronize()
            };
            for _ in 0..5 {
                run()?;
            }
            let mut times = Vec::new();
            let mut submits = 0;
            for _ in 0..args.repeats.max(1) {
                let s0 = ctx.submissions();
                let t0 = std::time::Instant::now();
                run()?;
                times.push(t0.elapsed().as_secs_f64());
                submits = ctx.submissions() - s0;
            }
            if mode.is_some_and(|c| c != usize::MAX) {
                let got = ctx
                    .batch(|| forward(&ctx, &layers, &x))?
                    .to_vec_blocking::<f32>()?;
                assert_eq!(got, want, "a batch must compute what op by op does");
            }
            set_overrides(DevOverrides::DEFAULT);
            times.sort_by(f64::total_cmp);
            Ok((times[times.len() / 2], submits))
        };
        let (t_ops, n_ops) = measure(None)?;
        println!(
            "{rows:>5} {:>10} {:>11.1} {n_ops:>7} {:>8.2}",
            "op by op",
            t_ops * 1e6,
            1.0
        );
        for &c in &args.chunks {
            let (t, n) = measure(Some(c))?;
            println!(
                "{rows:>5} {:>10} {:>11.1} {n:>7} {:>8.2}",
                format!("batch {c}"),
                t * 1e6,
                t_ops / t
            );
        }
        let (t, n) = measure(Some(usize::MAX))?;
        println!(
            "{rows:>5} {:>10} {:>11.1} {n:>7} {:>8.2}",
            "replayed",
            t * 1e6,
            t_ops / t
        );
    }
    Ok(())
}
