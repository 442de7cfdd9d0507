//! Layout and index ops against a copy: permute ([B, S, H, D] to
//! [B, H, S, D], and the last two axes swapped), narrow, concat and an
//! embedding lookup (gather), in GB/s of the bytes each must move and as a
//! fraction of a plain copy measured in the same run. Then reductions and
//! softmax over the first axis (the column kernels) next to the last axis,
//! in GB/s of the input read, and the masked mean.
//!
//! ```text
//! cargo run --release --example layout -- [--quick] [--batch 32]
//! ```

use clap::Parser;
use wgtile::{Context, ContextOptions, DType, Plan, TimingOptions};

#[derive(Parser, Debug)]
struct Args {
    /// Small shapes (seconds on a software adapter).
    #[arg(long)]
    quick: bool,
    #[arg(long, default_value_t = 30)]
    repeats: u32,
    /// Batch B of x [B, 512, 16, 64] (the any-axis rows view it as [B * 512,
    /// 1024]); 8 makes a 16 MiB f32 tensor that stays in a large L2.
    #[arg(long, default_value_t = 32)]
    batch: usize,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    env_logger::init();
    let args = Args::parse();
    let ctx = Context::new_blocking(ContextOptions::default())?;
    println!("adapter: {}", ctx.profile().name);
    let opts = TimingOptions {
        warmup: 3,
        warmup_seconds: if args.quick { 0.0 } else { 0.3 },
        repeats: args.repeats.max(1),
    };
    let (b, s, h, d) = if args.quick {
        (2, 128, 8, 64)
    } else {
        (args.batch.max(1), 512, 16, 64)
    };
    let x = ctx.rand_uniform([b, s, h, d], -1.0, 1.0, DType::F32, 1)?;
    let copy = ctx.copy_plan(&x)?;
    let gbps = |p: &Plan| -> wgtile::Result<f64> {
        Ok(p.bytes() as f64 / ctx.time(p, &opts)?.median() / 1e9)
    };
    let ceiling = gbps(&copy)?;
    println!("copy of {:?} f32: {ceiling:.1} GB/s\n", x.shape());
    println!("{:<44} {:>10} {:>7}", "op", "GB/s", "copy%");
    let row = |name: String, p: Plan| -> wgtile::Result<()> {
        let g = gbps(&p)?;
        println!("{name:<44} {g:>10.1} {:>6.0}%", 100.0 * g / ceiling);
        Ok(())
    };
    for dtype in [DType::F32, DType::F16] {
        if dtype == DType::F16 && !ctx.profile().shader_f16 {
            continue;
        }
        let x = ctx.cast(&x, dtype)?;
        row(
            format!("permute [B,S,H,D] -> [B,H,S,D] {dtype}"),
            ctx.permute_plan(&x, &[0, 2, 1, 3])?,
        )?;
        let m = x.reshape([b * s, h * d])?;
        row(
            format!("transpose [{}, {}] {dtype}", b * s, h * d),
            ctx.permute_plan(&m, &[1, 0])?,
        )?;
        row(
            format!("narrow a third of the last axis {dtype}"),
            ctx.narrow_plan(&m, 1, h * d / 3, h * d / 3)?,
        )?;
        let halves = [
            ctx.narrow(&m, 1, 0, h * d / 2)?,
            ctx.narrow(&m, 1, h * d / 2, h * d / 2)?,
        ];
        row(
            format!("concat two halves of the last axis {dtype}"),
            ctx.concat_plan(&[&halves[0], &halves[1]], 1)?,
        )?;
        let vocab = if args.quick { 1000 } else { 30522 };
        let table = ctx.rand_uniform([vocab, h * d], -1.0, 1.0, dtype, 2)?;
        let ids: Vec<i32> = (0..(b * s) as i32)
            .map(|i| i.wrapping_mul(7919) % vocab as i32)
            .collect();
        let ids = ctx.tensor(&ids, [b, s])?;
        row(
            format!("gather [{vocab}, {}] by [{b}, {s}] ids {dtype}", h * d),
            ctx.gather_plan(&table, &ids, 0)?,
        )?;
    }
    // Any axis: input bytes over time, against the same copy.
    println!(
        "\n{:<44} {:>10} {:>7}",
        "reduction (input GB/s)", "GB/s", "copy%"
    );
    let m = x.reshape([b * s, h * d])?;
    let input = m.size_bytes() as f64;
    for (name, axis) in [
        ("sum over the last axis", wgtile::Axis::Last),
        ("sum over axis 0", wgtile::Axis::Dim(0)),
    ] {
        let p = ctx.reduce_plan(&m, wgtile::Reduction::Sum, axis)?;
        let g = input / ctx.time(&p, &opts)?.median() / 1e9;
        println!("{name:<44} {g:>10.1} {:>6.0}%", 100.0 * g / ceiling);
    }
    // Softmax and layer norm over an axis as plans (the column kernels over
    // axis 0), GPU-timed as the sums.
    for (name, op, axis) in [
        ("softmax over the last axis", wgtile::RowOp::Softmax, 1usize),
        ("softmax over axis 0", wgtile::RowOp::Softmax, 0),
        ("layer norm over the last axis", wgtile::RowOp::LayerNorm, 1),
        ("layer norm over axis 0", wgtile::RowOp::LayerNorm, 0),
    ] {
        let p = ctx.row_op_axis_plan(op, &m, axis, None, None, 1e-5)?;
        let g = input / ctx.time(&p, &opts)?.median() / 1e9;
        println!("{name:<44} {g:>10.1} {:>6.0}%", 100.0 * g / ceiling);
    }
    // Ops without a plan: host-timed over 10 runs after a warm-up.
    let time_of = |f: &dyn Fn() -> wgtile::Result<wgtile::Tensor>| -> wgtile::Result<f64> {
        for _ in 0..3 {
            f()?;
        }
        ctx.synchronize()?;
        let t0 = std::time::Instant::now();
        for _ in 0..10 {
            f()?;
        }
        ctx.synchronize()?;
        Ok(t0.elapsed().as_secs_f64() / 10.0)
    };
    let mask = ctx.full([b, s], 1.0, DType::F32)?;
    let x3 = x.reshape([b, s, h * d])?;
    let g = input / time_of(&|| ctx.masked_mean(&x3, &mask))? / 1e9;
    println!(
        "{:<44} {g:>10.1} {:>6.0}%",
        "masked_mean [B, S, H] (host-timed)",
        100.0 * g / ceiling
    );
    Ok(())
}
