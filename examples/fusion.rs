//! Operator fusion, measured: each elementwise expression run as ONE fused
//! kernel (`ctx.eval`) and the naive way, one kernel per operation with
//! intermediates in memory (`ctx.eval_unfused`).
//!
//! ```text
//! cargo run --release --example fusion -- [--quick] [--elements N] [--repeats N]
//! ```
//! Default: 64M f32 elements (256 MiB per tensor), sized for a big GPU;
//! `--quick` uses 1M. Columns: median time (GPU timestamps), effective GB/s
//! (the fused memory floor, every input read once + the output written once,
//! divided by the time: the same numerator for both paths, so the GB/s ratio
//! is the speedup), the fraction of the measured copy bandwidth (the identity
//! expression `y = x`, read + write, timed in the same run), and for the
//! unfused path its kernel count and the bytes it really moves.
//! Then the row cases: an expression feeding a row op in one kernel
//! (`sum_of(x*x)` over rows of 4096, `softmax_of(x*0.125 + mask)` on
//! attention scores [1, H, Sq, 4096] with a [Sq, 4096] additive mask,
//! `rms_norm_of(x + residual)`; 16384 rows by default, 256 with `--quick`)
//! against `eval` then the row op (two kernels, the expression's result
//! written and read back), with the same columns.
//! `bench/torch_fusion.py` prints the same cases for PyTorch.

use clap::Parser;
use wgtile::{Context, DType, Expr, Plan, Tensor, TimingOptions};

#[derive(Parser, Debug)]
struct Args {
    /// Small sizes (about 1M elements): seconds on a software adapter.
    #[arg(long)]
    quick: bool,
    /// Elements per tensor (default 64M, or 1M with --quick); the broadcast
    /// case uses the nearest square matrix.
    #[arg(long)]
    elements: Option<usize>,
    /// Measured runs per case.
    #[arg(long, default_value_t = 20)]
    repeats: u32,
    /// Element type of the tensors (f16 halves the bytes; math is f32).
    #[arg(long, default_value = "f32")]
    dtype: String,
}

struct Case {
    name: &'static str,
    expr: Expr,
    /// f64 reference of output element `i`.
    reference: Box<dyn Fn(usize) -> f64>,
    /// Whether to run the unfused path too.
    unfused: bool,
}

fn time(ctx: &Context, plan: &Plan, repeats: u32) -> wgtile::Result<f64> {
    let options = TimingOptions {
        repeats,
        ..TimingOptions::default()
    };
    Ok(ctx.time(plan, &options)?.median())
}

/// Largest |got - reference| over a spread of elements.
fn max_error(out: &Tensor, reference: &dyn Fn(usize) -> f64) -> wgtile::Result<f64> {
    let got = out.to_f32_vec_blocking()?;
    let step = (got.len() / 4099).max(1);
    let mut worst = 0.0f64;
    for i in (0..got.len())
        .step_by(step)
        .chain(got.len().saturating_sub(7)..got.len())
    {
        let err = (f64::from(got[i]) - reference(i)).abs();
        worst = if err.is_nan() {
            f64::INFINITY
        } else {
            worst.max(err)
        };
    }
    Ok(worst)
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
    let n = args
        .elements
        .unwrap_or(if args.quick { 1 << 20 } else { 1 << 26 });
    let side = ((n as f64).sqrt() as usize).max(1);

    let host = |len: usize, seed: u64, low: f32, high: f32| {
        let v = wgtile::uniform_values(len, low, high, seed);
        v.iter().map(|&x| dtype.round(x)).collect::<Vec<f32>>()
    };
    let upload = |values: &[f32], shape: &[usize]| -> wgtile::Result<Tensor> {
        ctx.tensor_from_f32(values, shape, dtype)
    };
    let xs = std::sync::Arc::new(host(n, 1, -4.0, 4.0));
    let x = upload(&xs, &[n])?;
    let ms = std::sync::Arc::new(host(side * side, 2, -4.0, 4.0));
    let m = upload(&ms, &[side, side])?;
    let ws = std::sync::Arc::new(host(side, 3, -1.0, 1.0));
    let w = upload(&ws, &[side])?;
    let bs = std::sync::Arc::new(host(side, 4, -1.0, 1.0));
    let b = upload(&bs, &[side, 1])?;

    let gelu_tanh = |v: f64| {
        0.5 * v * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (v + 0.044715 * v * v * v)).tanh())
    };
    let xe = x.expr();
    let cases = vec![
        Case {
            name: "x*2+1",
            expr: &xe * 2.0 + 1.0,
            reference: Box::new({
                let xs = xs.clone();
                move |i| f64::from(xs[i]) * 2.0 + 1.0
            }),
            unfused: true,
        },
        Case {
            name: "sin(x)^2+cos(x)^2",
            expr: xe.clone().sin().square() + xe.clone().cos().square(),
            reference: Box::new(|_| 1.0),
            unfused: true,
        },
        Case {
            name: "gelu(x) (one op)",
            expr: xe.clone().gelu(),
            reference: Box::new({
                let xs = xs.clone();
                move |i| gelu_tanh(f64::from(xs[i]))
            }),
            unfused: false,
        },
        Case {
            name: "gelu(x) written out",
            expr: 0.5 * &xe * (1.0 + (0.797_884_6 * (&xe + 0.044715 * &xe * &xe * &xe)).tanh()),
            reference: Box::new({
                let xs = xs.clone();
                move |i| gelu_tanh(f64::from(xs[i]))
            }),
            unfused: true,
        },
        Case {
            name: "relu(m*w[col]+b[row])",
            expr: (m.expr() * w.expr() + b.expr()).relu(),
            reference: Box::new({
                let (ms, ws, bs) = (ms.clone(), ws.clone(), bs.clone());
                move |i| {
                    (f64::from(ms[i]) * f64::from(ws[i % side]) + f64::from(bs[i / side])).max(0.0)
                }
            }),
            unfused: true,
        },
    ];

    // The copy ceiling: y = x through the same kernel machinery.
    let copy = ctx.eval_plan(&x.expr())?;
    let t_copy = time(&ctx, &copy, args.repeats)?;
    let copy_gbps = copy.bytes() as f64 / t_copy / 1e9;
    println!(
        "copy (y = x, {} elements {dtype}): {:.1} us, {:.1} GB/s read+write",
        n,
        t_copy * 1e6,
        copy_gbps
    );
    drop(copy);
    println!(
        "\n{:<24} {:>12} {:>10} {:>9} {:>6} | {:>10} {:>9} {:>7} {:>9} | {:>7} {:>9}",
        "case",
        "shape",
        "fused us",
        "GB/s",
        "copy%",
        "unfused us",
        "GB/s",
        "kernels",
        "MiB moved",
        "speedup",
        "max err"
    );
    for case in &cases {
        let fused = ctx.eval_plan(&case.expr)?;
        let t_fused = time(&ctx, &fused, args.repeats)?;
        let gbps = fused.bytes() as f64 / t_fused / 1e9;
        let mut err = max_error(fused.output(), &*case.reference)?;
        let shape = format!("{:?}", fused.output().shape());
        let floor = fused.bytes();
        drop(fused);
        let unfused_cols = if case.unfused {
            let unfused = ctx.eval_unfused_plan(&case.expr)?;
            let t = time(&ctx, &unfused, args.repeats)?;
            err = err.max(max_error(unfused.output(), &*case.reference)?);
            let cols = format!(
                "{:>10.1} {:>9.1} {:>7} {:>9.0} | {:>6.2}x",
                t * 1e6,
                floor as f64 / t / 1e9,
                unfused.dispatch_count(),
                unfused.bytes() as f64 / (1 << 20) as f64,
                t / t_fused
            );
            drop(unfused);
            cols
        } else {
            format!("{:>10} {:>9} {:>7} {:>9} | {:>7}", "-", "-", 1, "-", "-")
        };
        println!(
            "{:<24} {:>12} {:>10.1} {:>9.1} {:>5.0}% | {} {:>9.1e}",
            case.name,
            shape,
            t_fused * 1e6,
            gbps,
            100.0 * gbps / copy_gbps,
            unfused_cols,
            err
        );
    }
    // Several outputs from one pass: sin(x) and cos(x) read x once.
    let (many, _outputs) = ctx.eval_many_plan(&[xe.clone().sin(), xe.clone().cos()])?;
    let t_many = time(&ctx, &many, args.repeats)?;
    let floor = many.bytes();
    drop(many);
    let mut t_two = 0.0;
    for e in [xe.clone().sin(), xe.clone().cos()] {
        let plan = ctx.eval_plan(&e)?;
        t_two += time(&ctx, &plan, args.repeats)?;
    }
    println!(
        "{:<24} {:>12} {:>10.1} {:>9.1} {:>5.0}% | {:>10.1} {:>9.1} {:>7} {:>9.0} | {:>6.2}x",
        "sin(x), cos(x) (2 outs)",
        format!("[{n}]"),
        t_many * 1e6,
        floor as f64 / t_many / 1e9,
        100.0 * floor as f64 / t_many / 1e9 / copy_gbps,
        t_two * 1e6,
        floor as f64 / t_two / 1e9,
        2,
        (4 * n * dtype.size()) as f64 / (1 << 20) as f64,
        t_two / t_many
    );
    row_cases(&ctx, &args, n, copy_gbps, &upload, &host)?;
    println!(
        "\nGB/s = the fused memory floor (inputs read once + output written once) / time, for both paths;\n\
         copy% = fused GB/s / copy GB/s; speedup = unfused time / fused time; max err vs f64 on a sample\n\
         (fused and unfused; f16 outputs round to 2^-11 relative).\n\
         The last row is eval_many (one kernel, two outputs) against two separate fused kernels.\n\
         Row rows: an expression feeding a row op in ONE kernel (ctx.sum_of, softmax_of, rms_norm_of)\n\
         against eval (kernel 1, the expression into memory) then the row op (kernel 2); max err is\n\
         max |fused - unfused| over the output (f16: the unfused path rounds the expression to f16\n\
         before the row op, so they may differ by about one f16 ulp of the result)."
    );
    Ok(())
}

/// Max |a - b| over two outputs of the same shape.
fn max_diff(a: &Tensor, b: &Tensor) -> wgtile::Result<f64> {
    let (a, b) = (a.to_f32_vec_blocking()?, b.to_f32_vec_blocking()?);
    Ok(a.iter().zip(&b).fold(0.0f64, |m, (x, y)| {
        let d = (f64::from(*x) - f64::from(*y)).abs();
        if d.is_nan() && !(x.is_nan() && y.is_nan()) {
            f64::INFINITY
        } else if d.is_nan() {
            m
        } else {
            m.max(d)
        }
    }))
}

/// Uploads host values as the benchmark's dtype.
type Upload<'a> = dyn Fn(&[f32], &[usize]) -> wgtile::Result<Tensor> + 'a;

/// Row ops fed by expressions: fused (one kernel) vs eval then the row op.
/// Rows of 4096 (16384 of them by default: 64M elements; `--quick` 256).
fn row_cases(
    ctx: &Context,
    args: &Args,
    n: usize,
    copy_gbps: f64,
    upload: &Upload,
    host: &dyn Fn(usize, u64, f32, f32) -> Vec<f32>,
) -> Result<(), Box<dyn std::error::Error>> {
    let cols = 4096;
    let rows = (n / cols).max(1);
    // Attention scores [1, H, Sq, Sk] with a causal-style additive mask [Sq, Sk].
    let sq = rows.min(1024);
    let heads = (rows / sq).max(1);
    let rows = heads * sq;
    let x = upload(&host(rows * cols, 11, -4.0, 4.0), &[1, heads, sq, cols])?;
    let mask_host: Vec<f32> = (0..sq * cols)
        .map(|k| {
            if k % cols > (k / cols) * cols / sq {
                f32::NEG_INFINITY
            } else {
                0.0
            }
        })
        .collect();
    let mask = upload(&mask_host, &[sq, cols])?;
    let residual = upload(&host(rows * cols, 12, -1.0, 1.0), &[1, heads, sq, cols])?;
    let weight = upload(&host(cols, 13, 0.5, 1.5), &[cols])?;
    let xe = x.expr();
    type Unfused<'a> = Box<dyn Fn(&Tensor) -> wgtile::Result<Plan> + 'a>;
    type RowCase<'a> = (&'static str, Expr, Plan, Unfused<'a>);
    let cases: Vec<RowCase> = vec![
        (
            "sum(x*x) rows",
            &xe * &xe,
            ctx.reduce_of_plan(&(&xe * &xe), wgtile::Reduction::Sum, wgtile::Axis::Last)?,
            Box::new(|t: &Tensor| ctx.reduce_plan(t, wgtile::Reduction::Sum, wgtile::Axis::Last)),
        ),
        (
            "softmax(x*s+mask)",
            &xe * 0.125 + &mask,
            ctx.softmax_of_plan(&(&xe * 0.125 + &mask), None)?,
            Box::new(|t: &Tensor| ctx.softmax_plan(t)),
        ),
        (
            "rms_norm(x+res)*w",
            &xe + &residual,
            ctx.rms_norm_of_plan(&(&xe + &residual), Some(&weight), 1e-6, None)?,
            Box::new(|t: &Tensor| ctx.rms_norm_plan(t, Some(&weight), 1e-6)),
        ),
    ];
    println!();
    for (name, expr, fused, second) in cases {
        let t_fused = time(ctx, &fused, args.repeats)?;
        let floor = fused.bytes();
        let gbps = floor as f64 / t_fused / 1e9;
        let first = ctx.eval_plan(&expr)?;
        let second = second(first.output())?;
        first.run()?;
        let t_unfused = time(ctx, &first, args.repeats)? + time(ctx, &second, args.repeats)?;
        second.run()?;
        let err = max_diff(fused.output(), second.output())?;
        println!(
            "{:<24} {:>12} {:>10.1} {:>9.1} {:>5.0}% | {:>10.1} {:>9.1} {:>7} {:>9.0} | {:>6.2}x {:>9.1e}",
            name,
            format!("{rows}x{cols}"),
            t_fused * 1e6,
            gbps,
            100.0 * gbps / copy_gbps,
            t_unfused * 1e6,
            floor as f64 / t_unfused / 1e9,
            first.dispatch_count() + second.dispatch_count(),
            (first.bytes() + second.bytes()) as f64 / (1 << 20) as f64,
            t_unfused / t_fused,
            err
        );
    }
    Ok(())
}
