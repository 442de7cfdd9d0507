//! Low precision, measured: a weight quantised to each block-scaled format
//! and multiplied by a vector (the decode step of a language model), next
//! to the f32, f16 and bf16 GEMVs of the same shape, with the quantisation
//! kernels' own speed and each format's error.
//!
//! ```text
//! cargo run --release --example quantization -- [--quick] [--shapes 4096x14336,...] [--rows 1,4,8]
//!     [--gemm 4096x4096x4096] [--stages]
//! ```
//! Per shape `KxN` (x[M, K] times a weight of N outputs, stored [N, K] and
//! blocked along K, as checkpoints store it): median time (GPU timestamps),
//! GB/s of the bytes the kernel must read (packed weight with its scales,
//! x, y), the fraction of a large copy's GB/s measured in the same run,
//! the speedup over wgtile's f16 GEMV, and the largest error against the
//! f32 product relative to its largest magnitude. Then quantise and
//! dequantise at the same size, in GB/s of input plus packed output.
//! `--gemm MxKxN`: the quantised GEMM (f16 x[M, K], a weight of N outputs
//! in each format and layout) next to the f16 matmul of the same shape, in
//! TFLOP/s; `--stages` times each dispatch of its plan (and of the
//! quantise and dequantise plans of more than one). Then f32 x: the
//! route `matmul_quantized` takes (on tensor cores or a CPU adapter the
//! weight is dequantised for the f32 engine) next to the tiled GEMM with
//! the weight decoded into its f32 tiles, and the f32 matmul on the
//! unquantised weight.
//! Compare with `python3 bench/torch_quant.py` (same shapes).

#[path = "common/mod.rs"]
mod common;

use clap::Parser;
use wgtile::{
    Context, ContextOptions, DType, Epilogue, MatmulKernel, MatmulOptions, Plan, QuantAxis,
    QuantFormat, TileConfig, TimingOptions,
};

#[derive(Parser, Debug)]
struct Args {
    /// Small shapes (seconds on a software adapter).
    #[arg(long)]
    quick: bool,
    /// Shapes as KxN.
    #[arg(long, value_delimiter = ',')]
    shapes: Vec<String>,
    /// Rows of x (M) for the quantised GEMV.
    #[arg(long, value_delimiter = ',', default_value = "1")]
    rows: Vec<usize>,
    /// Measured runs per case.
    #[arg(long, default_value_t = 50)]
    repeats: u32,
    /// Quantised GEMMs as MxKxN (f16 activations).
    #[arg(long, value_delimiter = ',')]
    gemm: Vec<String>,
    /// Time each dispatch of the quantised GEMM's plan.
    #[arg(long)]
    stages: bool,
}

/// The largest |a - b| over the largest |b|.
fn rel_error(a: &[f32], b: &[f32]) -> f64 {
    let scale = b.iter().fold(0.0f64, |m, &v| m.max(f64::from(v).abs()));
    let worst = a.iter().zip(b).fold(0.0f64, |m, (&x, &y)| {
        m.max((f64::from(x) - f64::from(y)).abs())
    });
    worst / scale.max(f64::MIN_POSITIVE)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    env_logger::init();
    let args = Args::parse();
    let ctx = Context::new_blocking(ContextOptions::default())?;
    println!("adapter: {}", ctx.profile().name);
    let shapes = common::weight_shapes(&args.shapes, args.quick)?;
    let opts = TimingOptions {
        warmup: 3,
        warmup_seconds: if args.quick { 0.0 } else { 0.3 },
        repeats: args.repeats.max(1),
    };
    let time = |plan: &Plan| -> wgtile::Result<f64> { Ok(ctx.time(plan, &opts)?.median()) };
    // The copy ceiling: a large tensor read and written once.
    let copy_gbps = common::copy_ceiling(&ctx, args.quick, time)?;
    println!("copy ceiling: {copy_gbps:.1} GB/s\n");
    for g in &args.gemm {
        gemm_table(&ctx, g, &time, args.stages)?;
        gemm_f32_table(&ctx, g, &time)?;
    }
    if !args.gemm.is_empty() && args.shapes.is_empty() {
        return Ok(());
    }
    let mut rows = Vec::new();
    for &(k, n) in &shapes {
        let w = ctx.rand_uniform([n, k], -1.0, 1.0, DType::F32, 2)?;
        for &m in &args.rows {
            let x = ctx.rand_uniform([m, k], -1.0, 1.0, DType::F32, 3)?;
            // The f32 product for the errors (x @ W^T), untimed.
            let reference = ctx.matmul_plan(
                &x,
                &w,
                None,
                &MatmulOptions::default().transposed(false, true),
            )?;
            reference.run()?;
            let want = reference.output().to_vec_blocking::<f32>()?;
            drop(reference);
            // The f32, f16 and bf16 GEMVs of the same shape (weight [K, N]: the
            // GEMV kernels' layout).
            let wkn = ctx.rand_uniform([k, n], -1.0, 1.0, DType::F32, 4)?;
            let f32_plan = ctx.matmul_plan(&x, &wkn, None, &MatmulOptions::default())?;
            f32_plan.run()?;
            let want_kn = f32_plan.output().to_vec_blocking::<f32>()?;
            let t32 = time(&f32_plan)?;
            rows.push(Row::new(
                "f32",
                k,
                n,
                m,
                t32,
                f32_plan.bytes(),
                copy_gbps,
                None,
                f64::NAN,
            ));
            drop(f32_plan);
            let mut t16 = None;
            if ctx.profile().shader_f16 {
                let x16 = ctx.rand_uniform([m, k], -1.0, 1.0, DType::F16, 3)?;
                let w16 = ctx.rand_uniform([k, n], -1.0, 1.0, DType::F16, 2)?;
                let p = ctx.matmul_plan(&x16, &w16, None, &MatmulOptions::default())?;
                let t = time(&p)?;
                t16 = Some(t);
                rows.push(Row::new(
                    "f16",
                    k,
                    n,
                    m,
                    t,
                    p.bytes(),
                    copy_gbps,
                    t16,
                    f64::NAN,
                ));
            }
            // bf16, the other 16-bit storage (the GEMV reads its words).
            let xb = ctx.rand_uniform([m, k], -1.0, 1.0, DType::BF16, 3)?;
            let wb = ctx.rand_uniform([k, n], -1.0, 1.0, DType::BF16, 2)?;
            let p = ctx.matmul_plan(&xb, &wb, None, &MatmulOptions::default())?;
            rows.push(Row::new(
                "bf16",
                k,
                n,
                m,
                time(&p)?,
                p.bytes(),
                copy_gbps,
                t16,
                f64::NAN,
            ));
            drop(p);
            // Each format in both layouts: blocks down the columns of a
            // [K, N] weight (the fast GEMV), and along the rows of an [N, K]
            // one (a Linear layer's layout, as checkpoints store it).
            for (axis, weight, reference, tag) in [
                (QuantAxis::Columns, &wkn, &want_kn, "[K,N]"),
                (QuantAxis::Rows, &w, &want, "[N,K]"),
            ] {
                for format in QuantFormat::ALL {
                    let q = ctx.quantize(weight, format, axis)?;
                    let p = ctx.matmul_quantized_plan(&x, &q)?;
                    p.run()?;
                    let got = p.output().to_vec_blocking::<f32>()?;
                    let err = rel_error(&got, reference);
                    let t = time(&p)?;
                    let name = format!("{} {tag}", format.name());
                    rows.push(Row::new(&name, k, n, m, t, p.bytes(), copy_gbps, t16, err));
                }
            }
            drop(wkn);
        }
        println!(
            "{:<38} {:>11} {:>3} {:>10} {:>9} {:>6} {:>8} {:>9}",
            "weight", "KxN", "M", "time us", "GB/s", "copy%", "vs f16", "rel err"
        );
        for r in rows.drain(..) {
            println!("{r}");
        }
        // Quantise and dequantise the weight.
        println!(
            "\n{:<32} {:>11} {:>10} {:>9} {:>6}",
            "kernel", "KxN", "time us", "GB/s", "copy%"
        );
        let kernel_row = |name: String, plan: &Plan| -> wgtile::Result<()> {
            let t = time(plan)?;
            let gbps = plan.bytes() as f64 / t / 1e9;
            println!(
                "{:<32} {:>11} {:>10.1} {:>9.1} {:>5.0}%",
                name,
                format!("{k}x{n}"),
                t * 1e6,
                gbps,
                100.0 * gbps / copy_gbps
            );
            if args.stages && plan.stages().len() > 1 {
                for (i, stage) in plan.stages().iter().enumerate() {
                    println!("    stage {:>2}: {:>9.1} us", i + 1, time(stage)? * 1e6);
                }
            }
            Ok(())
        };
        for axis in [QuantAxis::Rows, QuantAxis::Columns] {
            let tag = if axis == QuantAxis::Rows {
                "rows"
            } else {
                "cols"
            };
            for format in QuantFormat::ALL {
                let (qp, q) = ctx.quantize_plan(&w, format, axis, format.default_block())?;
                kernel_row(format!("quantize {} {tag}", format.name()), &qp)?;
                qp.run()?;
                kernel_row(
                    format!("dequantize {} {tag}", format.name()),
                    &ctx.dequantize_plan(&q)?,
                )?;
            }
        }
        println!();
    }
    Ok(())
}

/// The quantised GEMM at `spec` (MxKxN) per format and layout, next to the
/// f16 matmul of the same shape (weight [K, N] and [N, K]).
fn gemm_table(
    ctx: &Context,
    spec: &str,
    time: &dyn Fn(&Plan) -> wgtile::Result<f64>,
    stages: bool,
) -> Result<(), Box<dyn std::error::Error>> {
    let [m, k, n] = gemm_dims(spec)?;
    if !ctx.profile().shader_f16 {
        println!("--gemm: the adapter has no shader-f16");
        return Ok(());
    }
    let tflops = |t: f64| 2.0 * (m * n * k) as f64 / t / 1e12;
    let x = ctx.rand_uniform([m, k], -1.0, 1.0, DType::F16, 3)?;
    println!(
        "{:<44} {:>16} {:>10} {:>9} {:>8} {:>9}",
        "GEMM weight", "MxKxN", "time us", "TFLOP/s", "vs f16", "rel err"
    );
    let mut t16 = f64::NAN;
    for (axis, wshape, tag) in [
        (QuantAxis::Columns, [k, n], "[K,N]"),
        (QuantAxis::Rows, [n, k], "[N,K]"),
    ] {
        let w = ctx.rand_uniform(wshape, -1.0, 1.0, DType::F32, 2)?;
        let transposed = axis == QuantAxis::Rows;
        let opts = MatmulOptions::default().transposed(false, transposed);
        let w16 = ctx.cast(&w, DType::F16)?;
        let p16 = ctx.matmul_plan(&x, &w16, None, &opts)?;
        let t = time(&p16)?;
        if axis == QuantAxis::Columns {
            t16 = t;
        }
        let line = |name: &str, t: f64, err: f64| {
            println!(
                "{:<44} {:>16} {:>10.1} {:>9.1} {:>7.2}x {:>9.2e}",
                name,
                format!("{m}x{k}x{n}"),
                t * 1e6,
                tflops(t),
                t16 / t,
                err
            );
        };
        line(&format!("f16 {tag}"), t, f64::NAN);
        drop(p16);
        // The f32 product for the errors, untimed.
        let xf = ctx.cast(&x, DType::F32)?;
        let want = ctx.matmul_plan(&xf, &w, None, &opts)?;
        want.run()?;
        let want = want.output().to_vec_blocking::<f32>()?;
        for format in QuantFormat::ALL {
            let q = ctx.quantize(&w, format, axis)?;
            let p = ctx.matmul_quantized_plan(&x, &q)?;
            p.run()?;
            let err = rel_error(&p.output().to_vec_blocking::<f32>()?, &want);
            line(&format!("{} {tag}", format.name()), time(&p)?, err);
            if stages {
                for (i, stage) in p.stages().iter().enumerate() {
                    println!("    stage {:>2}: {:>9.1} us", i + 1, time(stage)? * 1e6);
                }
            }
        }
        // bf16 activations as models hold them (normal values, a few below
        // 2^-17): staged to f16 after the range test on tensor cores.
        let xb = ctx.rand_normal([m, k], 0.0, 1.0, DType::BF16, 5)?;
        let want = ctx.matmul_plan(&ctx.cast(&xb, DType::F32)?, &w, None, &opts)?;
        want.run()?;
        let want = want.output().to_vec_blocking::<f32>()?;
        for format in [QuantFormat::Mxfp4, QuantFormat::Fp8E4m3] {
            let q = ctx.quantize(&w, format, axis)?;
            let p = ctx.matmul_quantized_plan(&xb, &q)?;
            p.run()?;
            let err = rel_error(&p.output().to_vec_blocking::<f32>()?, &want);
            line(&format!("{} {tag}, bf16 x", format.name()), time(&p)?, err);
        }
    }
    println!();
    Ok(())
}

/// `MxKxN` as three numbers.
fn gemm_dims(spec: &str) -> Result<[usize; 3], Box<dyn std::error::Error>> {
    let dims: Vec<usize> = spec
        .split('x')
        .map(|d| d.parse())
        .collect::<Result<_, _>>()
        .map_err(|e| format!("--gemm {spec}: {e}"))?;
    let [m, k, n] = dims[..] else {
        return Err(format!("--gemm {spec}: expected MxKxN").into());
    };
    Ok([m, k, n])
}

/// f32 x[M, K] times a `[K, N]` weight in each format: the route's plan
/// and the tiled GEMM (weights decoded into f32 tiles), next to the f32
/// matmul of the unquantised weight.
fn gemm_f32_table(
    ctx: &Context,
    spec: &str,
    time: &dyn Fn(&Plan) -> wgtile::Result<f64>,
) -> Result<(), Box<dyn std::error::Error>> {
    let [m, k, n] = gemm_dims(spec)?;
    let tflops = |t: f64| 2.0 * (m * n * k) as f64 / t / 1e12;
    let x = ctx.rand_uniform([m, k], -1.0, 1.0, DType::F32, 3)?;
    let w = ctx.rand_uniform([k, n], -1.0, 1.0, DType::F32, 2)?;
    let p32 = ctx.matmul_plan(&x, &w, None, &MatmulOptions::default())?;
    let t32 = time(&p32)?;
    println!(
        "{:<34} {:>16} {:>10} {:>9} {:>8}",
        "f32 x, weight [K,N]", "MxKxN", "time us", "TFLOP/s", "vs f32"
    );
    let line = |name: &str, t: f64| {
        println!(
            "{:<34} {:>16} {:>10.1} {:>9.2} {:>7.2}x",
            name,
            format!("{m}x{k}x{n}"),
            t * 1e6,
            tflops(t),
            t32 / t
        );
    };
    line(&format!("f32 matmul ({})", p32.label()), t32);
    drop(p32);
    // One tile for the fused kernel and the f32 tiled engine it is a
    // variant of, whatever the dispatcher would pick.
    let tile = [TileConfig::new(128, 128, 8), TileConfig::new(64, 64, 16)]
        .into_iter()
        .find(|t| t.fits(ctx.profile()));
    let mut tiled32 = None;
    if let Some(tile) = tile {
        let opts = MatmulOptions::with_kernel(MatmulKernel::Tiled { tile, vec4: false });
        let p = ctx.matmul_plan(&x, &w, None, &opts)?;
        let t = time(&p)?;
        line(&format!("f32 tiled ({})", p.label()), t);
        tiled32 = Some(t);
    }
    for format in QuantFormat::ALL {
        let q = ctx.quantize(&w, format, QuantAxis::Columns)?;
        let routed = ctx.matmul_quantized_plan(&x, &q)?;
        line(&format!("{} routed", format.name()), time(&routed)?);
        drop(routed);
        let Some(t_tiled32) = tiled32 else { continue };
        // The weight dequantised, then the f32 tiled engine, against the
        // tiled GEMM decoding it in its tiles (the same tile).
        let deq = ctx.dequantize_plan(&q)?;
        line(
            &format!("{} dequantise + f32 tiled", format.name()),
            time(&deq)? + t_tiled32,
        );
        drop(deq);
        let tiled = ctx.quant_gemm_tiled(&x, &q, tile, &Epilogue::new())?;
        line(
            &format!("{} tiled, decoded in tiles", format.name()),
            time(&tiled)?,
        );
    }
    println!();
    Ok(())
}

struct Row {
    name: String,
    shape: String,
    m: usize,
    time: f64,
    gbps: f64,
    copy_pct: f64,
    vs_f16: Option<f64>,
    err: f64,
}

impl Row {
    #[allow(clippy::too_many_arguments)]
    fn new(
        name: &str,
        k: usize,
        n: usize,
        m: usize,
        time: f64,
        bytes: u64,
        copy_gbps: f64,
        f16_time: Option<f64>,
        err: f64,
    ) -> Self {
        let gbps = bytes as f64 / time / 1e9;
        Row {
            name: name.to_string(),
            shape: format!("{k}x{n}"),
            m,
            time,
            gbps,
            copy_pct: 100.0 * gbps / copy_gbps,
            vs_f16: f16_time.map(|t| t / time),
            err,
        }
    }
}

impl std::fmt::Display for Row {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:<38} {:>11} {:>3} {:>10.1} {:>9.1} {:>5.0}% {:>8} {:>9}",
            self.name,
            self.shape,
            self.m,
            self.time * 1e6,
            self.gbps,
            self.copy_pct,
            self.vs_f16.map_or("-".to_string(), |s| format!("{s:.2}x")),
            // The dense rows have no quantisation error to show.
            if self.err.is_nan() {
                "-".to_string()
            } else {
                format!("{:.2e}", self.err)
            }
        )
    }
}
