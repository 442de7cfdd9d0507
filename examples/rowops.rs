//! Row-op benchmark: softmax, log-softmax, LayerNorm, RMSNorm and sum over
//! the last axis, f32 and f16, at three row lengths, against a copy of the
//! same tensor measured in the same run (the bandwidth these memory-bound
//! kernels can reach).
//!
//! ```text
//! cargo run --release --example rowops -- [--quick] [--dtype f32|f16|both] [--shapes 16384x4096,...]
//! ```
//! Per case: the kernel that ran, median time (GPU timestamps), GB/s of the
//! memory floor (input read once + output written once), the fraction of the
//! copy's GB/s, the same op forced onto the two-read streaming kernels
//! (online softmax, Welford/Chan norms: what reading the row once buys), and
//! (on adapters with subgroups) the same op with the workgroup-memory tree
//! reductions instead of subgroup ones. Every output is
//! sanity-checked on the GPU (softmax rows sum to 1, normalised rows have mean
//! 0 and variance 1) and the check's worst error is printed.
//! Compare with `python3 bench/torch_rowops.py` (same shapes).

use clap::Parser;
use wgtile::{
    Axis, Context, ContextOptions, DType, Plan, RowOp, RowOptions, Tensor, TimingOptions, wgpu,
};

#[derive(Parser, Debug)]
struct Args {
    /// Small shapes (seconds on a software adapter).
    #[arg(long)]
    quick: bool,
    /// f32, f16 or both.
    #[arg(long, default_value = "both")]
    dtype: String,
    /// Shapes as ROWSxN (default: 256 MiB of f32 per tensor at rows of 1024,
    /// 4096 and 32768).
    #[arg(long, value_delimiter = ',')]
    shapes: Vec<String>,
    /// Skip the workgroup-memory (no subgroup) comparison.
    #[arg(long)]
    no_tree: bool,
    /// Measured runs per case.
    #[arg(long, default_value_t = 20)]
    repeats: u32,
}

fn parse_shape(s: &str) -> Result<(usize, usize), String> {
    let (r, n) = s
        .split_once('x')
        .ok_or_else(|| format!("shape {s:?} is not ROWSxN"))?;
    Ok((
        r.parse().map_err(|e| format!("{s}: {e}"))?,
        n.parse().map_err(|e| format!("{s}: {e}"))?,
    ))
}

const OPS: [&str; 5] = ["softmax", "log_softmax", "layer_norm", "rms_norm", "sum"];

/// The public entry point for `op` (what users call).
fn plan_for(ctx: &Context, op: &str, x: &Tensor, w: &Tensor, b: &Tensor) -> wgtile::Result<Plan> {
    match op {
        "softmax" => ctx.softmax_plan(x),
        "log_softmax" => ctx.log_softmax_plan(x),
        "layer_norm" => ctx.layer_norm_plan(x, Some(w), Some(b), 1e-5),
        "rms_norm" => ctx.rms_norm_plan(x, Some(w), 1e-5),
        "sum" => ctx.reduce_plan(x, wgtile::Reduction::Sum, Axis::Last),
        _ => unreachable!(),
    }
}

/// A row op (not sum) with options.
fn plan_with(
    ctx: &Context,
    op: &str,
    x: &Tensor,
    w: &Tensor,
    b: &Tensor,
    options: RowOptions,
) -> wgtile::Result<Plan> {
    let (op, w, b) = match op {
        "softmax" => (RowOp::Softmax, None, None),
        "log_softmax" => (RowOp::LogSoftmax, None, None),
        "layer_norm" => (RowOp::LayerNorm, Some(w), Some(b)),
        "rms_norm" => (RowOp::RmsNorm, Some(w), None),
        _ => unreachable!(),
    };
    ctx.row_op_plan(op, x, w, b, 1e-5, options)
}

/// Worst deviation of a per-row statistic of `y` from what `op` guarantees
/// (softmax: sum 1; log-softmax: sum of exp 1 is not checked, its max <= 0;
/// norms without affine terms: mean 0, mean square 1), computed on the GPU
/// with our own reductions; NaN anywhere counts as infinite.
fn sanity(ctx: &Context, op: &str, x: &Tensor, y: &Tensor) -> wgtile::Result<f64> {
    let worst = |t: Tensor, want: f64| -> wgtile::Result<f64> {
        let v = t.to_f32_vec_blocking()?;
        Ok(v.iter().fold(0.0f64, |m, &s| {
            let e = (f64::from(s) - want).abs();
            if e.is_nan() { f64::INFINITY } else { m.max(e) }
        }))
    };
    match op {
        "softmax" => worst(ctx.sum(y, Axis::Last)?, 1.0),
        "log_softmax" => {
            let m = ctx.max(y, Axis::Last)?.to_f32_vec_blocking()?;
            Ok(if m.iter().all(|&v| v <= 0.0) {
                0.0
            } else {
                f64::INFINITY
            })
        }
        "layer_norm" => {
            let z = ctx.layer_norm(x, None, None, 0.0)?;
            worst(ctx.mean(&z, Axis::Last)?, 0.0)
        }
        "rms_norm" => {
            let z = ctx.rms_norm(x, None, 0.0)?;
            let v = z.to_f32_vec_blocking()?;
            let n = *x.shape().last().unwrap_or(&1);
            let mut w = 0.0f64;
            for row in v.chunks(n).take(64) {
                let ms: f64 = row.iter().map(|&a| f64::from(a).powi(2)).sum::<f64>() / n as f64;
                w = w.max((ms - 1.0).abs());
            }
            Ok(w)
        }
        _ => Ok(0.0),
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let args = Args::parse();
    let ctx = Context::new_blocking(Default::default())?;
    let profile = ctx.profile().clone();
    println!(
        "{} ({:?}), subgroups {}",
        profile.name,
        profile.backend,
        if profile.subgroups {
            format!(
                "{}..{}",
                profile.subgroup_min_size, profile.subgroup_max_size
            )
        } else {
            "no".into()
        }
    );
    let tree = if profile.subgroups && !args.no_tree {
        Some(Context::new_blocking(ContextOptions {
            disabled_features: wgpu::Features::SUBGROUP,
            ..Default::default()
        })?)
    } else {
        None
    };
    let shapes: Vec<(usize, usize)> = if !args.shapes.is_empty() {
        args.shapes
            .iter()
            .map(|s| parse_shape(s))
            .collect::<Result<_, _>>()?
    } else if args.quick {
        vec![(256, 1024), (64, 4096), (8, 32768)]
    } else {
        vec![(65536, 1024), (16384, 4096), (2048, 32768)]
    };
    let mut dtypes = match args.dtype.as_str() {
        "f32" => vec![DType::F32],
        "f16" => vec![DType::F16],
        "both" => vec![DType::F32, DType::F16],
        other => return Err(format!("--dtype must be f32, f16 or both, not {other}").into()),
    };
    if !profile.shader_f16 {
        dtypes.retain(|&d| d == DType::F32);
    }
    let timing = TimingOptions {
        warmup: 2,
        warmup_seconds: if args.quick { 0.05 } else { 0.3 },
        repeats: args.repeats,
    };
    println!(
        "{:<12} {:<4} {:>13} {:>10} {:>9} {:>7} {:>10} {:>7} {:>10} {:>7} {:>9}  kernel",
        "op",
        "type",
        "shape",
        "ms",
        "GB/s",
        "copy%",
        "2-read ms",
        "2r/ours",
        "tree ms",
        "tr/ours",
        "check"
    );
    for &dtype in &dtypes {
        for &(rows, n) in &shapes {
            let make = |c: &Context| -> wgtile::Result<(Tensor, Tensor, Tensor)> {
                let x = c.zeros([rows, n], dtype)?;
                c.fill_random(&x, 1)?;
                let w = c.zeros([n], dtype)?;
                c.fill_random(&w, 2)?;
                let b = c.zeros([n], dtype)?;
                c.fill_random(&b, 3)?;
                Ok((x, w, b))
            };
            let (x, w, b) = make(&ctx)?;
            let copy = ctx.copy_plan(&x)?;
            let t = ctx.time(&copy, &timing)?;
            let copy_gbps = t.gbps(copy.bytes());
            println!(
                "{:<12} {:<4} {:>13} {:>10.4} {:>9.1} {:>7} {:>10} {:>7} {:>10} {:>7} {:>9}  {}",
                "copy",
                dtype.to_string(),
                format!("{rows}x{n}"),
                t.median() * 1e3,
                copy_gbps,
                "100%",
                "",
                "",
                "",
                "",
                "",
                copy.label()
            );
            drop(copy);
            let tree_inputs = match &tree {
                Some(c) => Some(make(c)?),
                None => None,
            };
            for op in OPS {
                let plan = plan_for(&ctx, op, &x, &w, &b)?;
                let t = ctx.time(&plan, &timing)?;
                let gbps = t.gbps(plan.bytes());
                let (tree_ms, ratio) = match (&tree, &tree_inputs) {
                    (Some(c), Some((tx, tw, tb))) => {
                        let p = plan_for(c, op, tx, tw, tb)?;
                        let tt = c.time(&p, &timing)?;
                        (
                            format!("{:.4}", tt.median() * 1e3),
                            format!("{:.2}x", tt.median() / t.median()),
                        )
                    }
                    _ => (String::new(), String::new()),
                };
                // The two-read kernels, where ours reads once.
                let (two_ms, two_ratio) = if op != "sum" {
                    let p = plan_with(&ctx, op, &x, &w, &b, RowOptions { streaming: true })?;
                    if p.label() != plan.label() {
                        let tt = ctx.time(&p, &timing)?;
                        (
                            format!("{:.4}", tt.median() * 1e3),
                            format!("{:.2}x", tt.median() / t.median()),
                        )
                    } else {
                        ("(same)".to_string(), String::new())
                    }
                } else {
                    (String::new(), String::new())
                };
                plan.run()?;
                let check = sanity(&ctx, op, &x, plan.output())?;
                println!(
                    "{:<12} {:<4} {:>13} {:>10.4} {:>9.1} {:>6.0}% {:>10} {:>7} {:>10} {:>7} {:>9.1e}  {}",
                    op,
                    dtype.to_string(),
                    format!("{rows}x{n}"),
                    t.median() * 1e3,
                    gbps,
                    100.0 * gbps / copy_gbps,
                    two_ms,
                    two_ratio,
                    tree_ms,
                    ratio,
                    check,
                    plan.label()
                );
            }
        }
    }
    Ok(())
}
