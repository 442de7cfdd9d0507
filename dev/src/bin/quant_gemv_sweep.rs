//! The quantised GEMVs' workgroup sweep: the column-blocked (`[K, N]`)
//! kernel at every workgroup of `--wgs` and columns per workgroup of
//! `--columns` and K split over `--ksplits` workgroups (printed
//! WG/COLS/KSPLIT), and the row-blocked (`[N, K]`)
//! kernel, timed on the same weights next to the f16 GEMV of the shape and
//! a copy, with each column variant's max difference to the first (they
//! must agree to rounding). `--quantize-probes 0,1,2,3` times the
//! quantise kernels instead, rows and columns, at each value of their timing
//! probe (`DevOverrides::quant_probe`: 1 drops the rounding, 2 the exchange
//! of block statistics; results wrong while set), each with the kernels as
//! chosen and with the per-word ones meeting statistics in workgroup
//! memory (`DevOverrides::quant_slots`); the other switches as the
//! environment sets them (`WGTILE_E2M1_BITS=1`: MXFP4 rounded by bit
//! arithmetic).
//!
//! ```text
//! cargo run -p wgtile-dev --release --bin quant_gemv_sweep -- --quick
//! cargo run -p wgtile-dev --release --bin quant_gemv_sweep -- --shapes 4096x14336 --rows 1,4,8
//! cargo run -p wgtile-dev --release --bin quant_gemv_sweep -- --quick --quantize-probes 0,1,2,3
//! ```

use clap::Parser;
use wgtile::dev::{DevOverrides, set_overrides};
use wgtile::{
    Context, ContextOptions, DType, MatmulOptions, Plan, QuantAxis, QuantFormat, TimingOptions,
};

#[derive(Parser, Debug)]
struct Args {
    /// Small sizes for a software adapter.
    #[arg(long)]
    quick: bool,
    /// Weight shapes KxN (default 4096x4096,4096x14336; --quick 1024x1024).
    #[arg(long, value_delimiter = ',')]
    shapes: Vec<String>,
    /// Rows of x.
    #[arg(long, value_delimiter = ',', default_value = "1,4,8")]
    rows: Vec<usize>,
    /// Formats as `QuantFormat`'s variants (mxfp4, int4, mxfp8e4m3, ...;
    /// default MXFP4, int4 and both MXFP8).
    #[arg(long, value_delimiter = ',')]
    formats: Vec<String>,
    /// Workgroups of the column-blocked kernel.
    #[arg(long, value_delimiter = ',', default_value = "1024,512,256")]
    wgs: Vec<u32>,
    /// Adjacent columns per workgroup of the column-blocked kernel.
    #[arg(long, value_delimiter = ',', default_value = "32,64,128")]
    columns: Vec<u32>,
    /// Workgroups along K per group of columns of the column-blocked kernel.
    #[arg(long, value_delimiter = ',', default_value = "1")]
    ksplits: Vec<u32>,
    /// Measured runs per case.
    #[arg(long, default_value_t = 20)]
    repeats: u32,
    /// Time the quantise kernels at these probe values instead.
    #[arg(long, value_delimiter = ',')]
    quantize_probes: Vec<u32>,
}

type BoxError = Box<dyn std::error::Error>;

fn main() -> Result<(), BoxError> {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let args = Args::parse();
    let ctx = Context::new_blocking(ContextOptions::default())?;
    println!("{} ({:?})", ctx.profile().name, ctx.profile().backend);
    let shapes = wgtile_dev::matrix::weight_shapes(&args.shapes, args.quick)?;
    let formats: Vec<QuantFormat> = if args.formats.is_empty() {
        vec![
            QuantFormat::Mxfp4,
            QuantFormat::Int4,
            QuantFormat::Mxfp8E4m3,
            QuantFormat::Mxfp8E5m2,
        ]
    } else {
        args.formats
            .iter()
            .map(|n| {
                QuantFormat::ALL
                    .into_iter()
                    .find(|f| format!("{f:?}").eq_ignore_ascii_case(n))
                    .ok_or_else(|| format!("unknown format {n}"))
            })
            .collect::<Result<_, _>>()?
    };
    let opts = TimingOptions {
        warmup: 3,
        warmup_seconds: if args.quick { 0.0 } else { 0.3 },
        repeats: args.repeats.max(1),
    };
    let time = |plan: &Plan| -> wgtile::Result<f64> { Ok(ctx.time(plan, &opts)?.median()) };
    let copy_gbps = wgtile_dev::matrix::copy_ceiling(&ctx, args.quick, time)?;
    println!("copy: {copy_gbps:.1} GB/s");
    if !args.quantize_probes.is_empty() {
        return quantize_probes(
            &ctx,
            &shapes,
            &formats,
            &args.quantize_probes,
            copy_gbps,
            time,
        );
    }
    let mut table = Vec::new();
    for &(k, n) in &shapes {
        let w = ctx.rand_uniform([k, n], -1.0, 1.0, DType::F32, 2)?;
        let wt = ctx.rand_uniform([n, k], -1.0, 1.0, DType::F32, 2)?;
        for &m in &args.rows {
            let x = ctx.rand_uniform([m, k], -1.0, 1.0, DType::F32, 3)?;
            let t16 = if ctx.profile().shader_f16 {
                let x16 = ctx.rand_uniform([m, k], -1.0, 1.0, DType::F16, 3)?;
                let w16 = ctx.rand_uniform([k, n], -1.0, 1.0, DType::F16, 2)?;
                let p = ctx.matmul_plan(&x16, &w16, None, &MatmulOptions::default())?;
                time(&p)?
            } else {
                f64::NAN
            };
            for &format in &formats {
                let q = &ctx.quantize(&w, format, QuantAxis::Columns)?;
                let qt = &ctx.quantize(&wt, format, QuantAxis::Rows)?;
                let mut cols = Vec::new();
                for &wg in &args.wgs {
                    for &c in args.columns.iter().filter(|&&c| c <= wg) {
                        for &z in &args.ksplits {
                            let o = DevOverrides {
                                quant_cols_wg: Some(wg),
                                quant_cols_columns: Some(c),
                                quant_cols_ksplit: Some(z),
                                ..DevOverrides::DEFAULT
                            };
                            cols.push((q, format!("{wg}/{c}/{z}"), o, 0));
                        }
                    }
                }
                let rows = [(qt, "rows".to_string(), DevOverrides::DEFAULT, 1)];
                // The first result of each layout, for the differences.
                let mut firsts: [Option<Vec<f32>>; 2] = [None, None];
                for (q, variant, o, layout) in cols.into_iter().chain(rows) {
                    set_overrides(o);
                    let p = ctx.matmul_quantized_plan(&x, q)?;
                    p.run()?;
                    let got = p.output().to_vec_blocking::<f32>()?;
                    let first = &mut firsts[layout];
                    let diff = match &*first {
                        None => 0.0,
                        Some(f) => f
                            .iter()
                            .zip(&got)
                            .map(|(a, b)| (a - b).abs())
                            .fold(0.0f32, f32::max),
                    };
                    first.get_or_insert(got);
                    let t = time(&p)?;
                    let gbps = p.bytes() as f64 / t / 1e9;
                    table.push(format!(
                        "{:<12} {:>10} {:>2} {:>8} {:>9.1} {:>8.1} {:>6.1} {:>7.2} {:>9.2e}",
                        format!("{format:?}"),
                        format!("{k}x{n}"),
                        m,
                        variant,
                        t * 1e6,
                        gbps,
                        100.0 * gbps / copy_gbps,
                        t16 / t,
                        diff
                    ));
                }
                set_overrides(DevOverrides::DEFAULT);
            }
        }
    }
    println!(
        "{:<12} {:>10} {:>2} {:>8} {:>9} {:>8} {:>6} {:>7} {:>9}",
        "format", "KxN", "M", "variant", "time us", "GB/s", "copy%", "vs f16", "max diff"
    );
    for line in table {
        println!("{line}");
    }
    Ok(())
}

/// The quantise kernels' time at each probe value, per shape, format and
/// axis.
fn quantize_probes(
    ctx: &Context,
    shapes: &[(usize, usize)],
    formats: &[QuantFormat],
    probes: &[u32],
    copy_gbps: f64,
    time: impl Fn(&Plan) -> wgtile::Result<f64>,
) -> Result<(), BoxError> {
    println!(
        "{:<12} {:>10} {:>7} {:>5} {:>7} {:>9} {:>8} {:>6}",
        "format", "KxN", "axis", "probe", "slots", "time us", "GB/s", "copy%"
    );
    // The other switches as the environment sets them (WGTILE_E2M1_BITS).
    let base = DevOverrides::from_env();
    for &(k, n) in shapes {
        let w = ctx.rand_uniform([k, n], -1.0, 1.0, DType::F32, 2)?;
        for &format in formats {
            for axis in [QuantAxis::Rows, QuantAxis::Columns] {
                for (&probe, slots) in probes.iter().flat_map(|p| [(p, false), (p, true)]) {
                    set_overrides(DevOverrides {
                        quant_probe: probe,
                        quant_slots: slots,
                        ..base
                    });
                    let (p, _) = ctx.quantize_plan(&w, format, axis, format.default_block())?;
                    let t = time(&p)?;
                    let gbps = p.bytes() as f64 / t / 1e9;
                    println!(
                        "{:<12} {:>10} {:>7} {:>5} {:>7} {:>9.1} {:>8.1} {:>6.1}",
                        format!("{format:?}"),
                        format!("{k}x{n}"),
                        format!("{axis:?}"),
                        probe,
                        slots,
                        t * 1e6,
                        gbps,
                        100.0 * gbps / copy_gbps
                    );
                }
            }
        }
    }
    set_overrides(DevOverrides::DEFAULT);
    Ok(())
}
