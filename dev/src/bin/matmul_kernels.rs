//! Every matmul kernel variant side by side: naive, tiled (scalar loads) and
//! tiled vec4 for each tile shape, on square sizes, with GFLOP/s and each
//! result's error against an f64 reference (sampled on large sizes).
//!
//! ```text
//! cargo run -p wgtile-dev --release --bin matmul_kernels -- [--sizes 512,1024] [--dtype f32|f16] [--repeats N]
//! ```
//! `WGTILE_CHECKED_SHADERS=1` compiles every kernel with wgpu's runtime bounds
//! checks, to see what the trusted (unchecked) modules buy.

use clap::Parser;
use wgtile::tune::{COOP_CONFIGS, CPU_TILE_CONFIGS, TILE_CONFIGS, TileConfig};
use wgtile::{Context, DType, MatmulKernel, MatmulOptions, TimingOptions};

use wgtile_dev::matrix;

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
    /// Sweeps over all kernels (the second one in reverse order), to see how
    /// much of a difference between kernels is run-to-run spread.
    #[arg(long, default_value_t = 1)]
    rounds: u32,
    /// Cooperative-matrix layouts to try (f16) as WARPS_MxWARPS_NxBK or
    /// WARPS_MxWARPS_NxBKxFRAGS_N (FRAGS_N 2 or 4, default 2; default list:
    /// the dispatcher's COOP_CONFIGS).
    #[arg(long, value_delimiter = ',')]
    coop: Vec<String>,
    /// f32 split layouts to try (same form; default: COOP_SPLIT_CONFIGS).
    #[arg(long, value_delimiter = ',')]
    coop_split: Vec<String>,
    /// Tile shapes to try as BMxBNxBK (default: the dispatcher's TILE_CONFIGS).
    #[arg(long, value_delimiter = ',')]
    tiles: Vec<String>,
    /// Instead of square matmuls: x[1, K] @ W[K, N] for each KxN given, in
    /// f32 and f16, with the dispatcher's kernel, in GB/s (the bytes of W,
    /// x and y over the time).
    #[arg(long, value_delimiter = ',')]
    gemv: Vec<String>,
    /// With --gemv: first time the dispatcher's plan for a square f32
    /// matmul of each size given (e.g. 4097, whose plan computes its last
    /// row with a GEMV), as the tour does before its GEMV section.
    #[arg(long, value_delimiter = ',')]
    before: Vec<usize>,
    /// Operands stored transposed and read with the transpose flags: `a`,
    /// `b` or `ab` (the logical product, and so the error check, is the same).
    #[arg(long, default_value = "none")]
    transpose: String,
    /// Instead of square matmuls: for each MxNxK given, A [M, K] and B [K, N]
    /// allocated with rows padded to a multiple of `--pad-multiple`
    /// (`tensor_padded`, as the padding layer's copies are), with the
    /// dispatcher's kernel reading them in place: the padded plans' kernel
    /// alone at logical shapes of one's choosing (which edge costs what).
    #[arg(long, value_delimiter = ',')]
    padded_shapes: Vec<String>,
    /// Row multiple for `--padded-shapes` (elements).
    #[arg(long, default_value_t = 32)]
    pad_multiple: usize,
    /// Which operands `--padded-shapes` pads: `a`, `b` or `ab` (the other
    /// one dense), to see which operand's row pitch costs what.
    #[arg(long, default_value = "ab")]
    pad_operands: String,
    /// Seconds of warm-up work before each measurement (GPU clocks ramp up).
    #[arg(long, default_value_t = 0.3)]
    warmup_seconds: f64,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    // After the logger: a variable that does not parse logs a warning.
    wgtile::dev::set_overrides(wgtile::dev::DevOverrides::from_env());
    let args = Args::parse();
    let dtype = match args.dtype.as_str() {
        "f32" => DType::F32,
        "f16" => DType::F16,
        other => return Err(format!("--dtype must be f32 or f16, not {other}").into()),
    };
    let ctx = Context::new_blocking(Default::default())?;
    let profile = ctx.profile();
    println!("{} ({:?})", profile.name, profile.backend);
    if !args.gemv.is_empty() {
        return gemv(&ctx, &args);
    }
    if !args.padded_shapes.is_empty() {
        return padded_shapes(&ctx, &args, dtype);
    }
    let sizes = if !args.sizes.is_empty() {
        args.sizes.clone()
    } else if profile.is_cpu() {
        vec![128, 256]
    } else {
        vec![1024, 2048, 4096]
    };
    let tiles: Vec<TileConfig> = if args.tiles.is_empty() {
        TILE_CONFIGS.into_iter().chain(CPU_TILE_CONFIGS).collect()
    } else {
        args.tiles
            .iter()
            .map(|t| parse_tile(t))
            .collect::<Result<_, _>>()?
    };
    let mut kernels = vec![MatmulKernel::naive_for(profile)];
    for tile in tiles.into_iter().filter(|t| t.fits(profile)) {
        for vec4 in [false, true] {
            kernels.push(MatmulKernel::Tiled { tile, vec4 });
        }
    }
    // The CPU-adapter kernel (subgroups of 8 only).
    for vec4 in [false, true] {
        let kernel = MatmulKernel::Broadcast { vec4 };
        if kernel.fits(profile) {
            kernels.push(kernel);
        }
    }
    // Tensor cores: f16, and f32 rounded to f16 on the way in (reduced
    // precision, allowed below for this comparison).
    {
        let coops: Vec<(u32, u32, u32, u32)> = if args.coop.is_empty() {
            COOP_CONFIGS.to_vec()
        } else {
            args.coop
                .iter()
                .map(|c| parse_coop(c))
                .collect::<Result<_, _>>()?
        };
        for c in coops {
            match MatmulKernel::coop_for(profile, c) {
                Some(kernel) => kernels.push(kernel),
                None => println!("coop layout {c:?} does not fit this adapter: skipped"),
            }
        }
        // f32: the split form (each value as two halves; f32's accuracy).
        if dtype == DType::F32 {
            let splits: Vec<(u32, u32, u32, u32)> = if args.coop_split.is_empty() {
                wgtile::tune::COOP_SPLIT_CONFIGS.to_vec()
            } else {
                args.coop_split
                    .iter()
                    .map(|c| parse_coop(c))
                    .collect::<Result<_, _>>()?
            };
            for c in splits {
                if let Some(kernel) = MatmulKernel::coop_split_for(profile, c) {
                    kernels.push(kernel);
                }
            }
        }
    }
    let opts = TimingOptions {
        warmup: 2,
        warmup_seconds: args.warmup_seconds,
        repeats: args.repeats.max(1),
    };
    println!(
        "{:>6}  {:<40} {:>11} {:>10} {:>10} {:>10}  round",
        "n", "kernel", "GFLOP/s", "ms", "spread", "max|err|"
    );
    let (ta, tb) = match args.transpose.as_str() {
        "none" => (false, false),
        "a" => (true, false),
        "b" => (false, true),
        "ab" => (true, true),
        other => return Err(format!("--transpose must be none, a, b or ab, not {other}").into()),
    };
    for &n in &sizes {
        let (mut a, ha) = matrix::random_matrix(&ctx, n, 1, dtype)?;
        let (mut b, hb) = matrix::random_matrix(&ctx, n, 2, dtype)?;
        if ta {
            a = matrix::stored_transposed(&ctx, &ha, n, dtype)?;
        }
        if tb {
            b = matrix::stored_transposed(&ctx, &hb, n, dtype)?;
        }
        for round in 0..args.rounds {
            let order: Vec<MatmulKernel> = if round % 2 == 0 {
                kernels.clone()
            } else {
                kernels.iter().rev().copied().collect()
            };
            for kernel in order {
                let options = MatmulOptions {
                    reduced_precision: true,
                    ..MatmulOptions::with_kernel(kernel)
                }
                .transposed(ta, tb);
                let plan = match ctx.matmul_plan(&a, &b, None, &options) {
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
                    "{n:>6}  {:<40} {:>11.1} {:>10.3} {:>9.0}% {:>10.2e}  {round}",
                    kernel.to_string(),
                    timing.gflops(plan.flops()),
                    timing.median() * 1e3,
                    100.0 * (timing.max() - timing.min()) / timing.median(),
                    matrix::max_error(&ha, &hb, &c, n)
                );
            }
        }
    }
    Ok(())
}

/// `--padded-shapes`: the dispatcher's plan on operands stored with padded
/// rows, per logical shape, in GFLOP/s of the logical work.
fn padded_shapes(
    ctx: &Context,
    args: &Args,
    dtype: DType,
) -> Result<(), Box<dyn std::error::Error>> {
    let opts = TimingOptions {
        warmup: 2,
        warmup_seconds: args.warmup_seconds,
        repeats: args.repeats.max(1),
    };
    println!(
        "{:>16} {:>11} {:>10}  plan (rows padded to a multiple of {})",
        "MxNxK", "GFLOP/s", "us", args.pad_multiple
    );
    for text in &args.padded_shapes {
        let dims: Vec<usize> = text
            .split('x')
            .map(str::parse)
            .collect::<Result<_, _>>()
            .map_err(|_| format!("--padded-shapes takes MxNxK, not {text}"))?;
        let [m, n, k] = dims[..] else {
            return Err(format!("--padded-shapes takes MxNxK, not {text}").into());
        };
        let operand = |rows: usize, cols: usize, seed: u64, which: char| {
            let host = wgtile::uniform_values(rows * cols, -1.0, 1.0, seed);
            let multiple = if args.pad_operands.contains(which) {
                args.pad_multiple
            } else {
                1
            };
            match dtype {
                DType::F32 => ctx.tensor_padded(&host, [rows, cols], multiple),
                DType::F16 => {
                    let h: Vec<wgtile::f16> =
                        host.iter().map(|&v| wgtile::f16::from_f32(v)).collect();
                    ctx.tensor_padded(&h, [rows, cols], multiple)
                }
                DType::BF16 => {
                    let h: Vec<wgtile::bf16> =
                        host.iter().map(|&v| wgtile::bf16::from_f32(v)).collect();
                    ctx.tensor_padded(&h, [rows, cols], multiple)
                }
                other => Err(wgtile::Error::NotFloat {
                    op: "matmul_kernels".into(),
                    got: other,
                }),
            }
        };
        let (a, b) = (operand(m, k, 1, 'a')?, operand(k, n, 2, 'b')?);
        let plan = ctx.matmul_plan(&a, &b, None, &MatmulOptions::default())?;
        let timing = ctx.time(&plan, &opts)?;
        println!(
            "{text:>16} {:>11.1} {:>10.1}  {}",
            timing.gflops(plan.flops()),
            timing.median() * 1e6,
            plan.label()
        );
    }
    Ok(())
}

fn parse_coop(text: &str) -> Result<(u32, u32, u32, u32), String> {
    let dims: Vec<u32> = text
        .split('x')
        .map(|d| d.trim().parse::<u32>())
        .collect::<Result<_, _>>()
        .map_err(|e| format!("bad coop layout {text:?}: {e}"))?;
    match dims[..] {
        [wm, wn, bk] => Ok((wm, wn, bk, 2)),
        [wm, wn, bk, frags_n] => Ok((wm, wn, bk, frags_n)),
        _ => Err(format!("coop layout {text:?} is not WMxWNxBK[xFN]")),
    }
}

fn parse_dims(text: &str) -> Result<[u32; 3], String> {
    let dims: Vec<u32> = text
        .split('x')
        .map(|d| d.trim().parse::<u32>())
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{text:?}: {e}"))?;
    dims.try_into()
        .map_err(|_| format!("{text:?} must have three dimensions, AxBxC"))
}

fn parse_tile(text: &str) -> Result<TileConfig, String> {
    match parse_dims(text)? {
        [bm, bn, bk] if bm % 8 == 0 && bn % 8 == 0 && bk % 4 == 0 && bm > 0 && bn > 0 && bk > 0 => {
            Ok(TileConfig::new(bm, bn, bk))
        }
        _ => Err(format!(
            "tile {text:?} must be BMxBNxBK with BM, BN multiples of 8 and BK of 4"
        )),
    }
}

/// GB/s of x[1, K] @ W[K, N] for every `--gemv` shape, f32 and f16.
fn gemv(ctx: &Context, args: &Args) -> Result<(), Box<dyn std::error::Error>> {
    let opts = TimingOptions {
        warmup: 2,
        warmup_seconds: args.warmup_seconds,
        repeats: args.repeats.max(1) * 4,
    };
    for &n in &args.before {
        let a = ctx.rand_uniform([n, n], -1.0, 1.0, DType::F32, 1)?;
        let b = ctx.rand_uniform([n, n], -1.0, 1.0, DType::F32, 2)?;
        let plan = ctx.matmul_plan(&a, &b, None, &MatmulOptions::default())?;
        let timing = ctx.time(&plan, &opts)?;
        println!(
            "before: f32 {n}^3 {:>9.1} GFLOP/s  ({})",
            timing.gflops(plan.flops()),
            plan.label()
        );
    }
    for shape in &args.gemv {
        let (k, n) = shape
            .split_once('x')
            .and_then(|(k, n)| {
                Some((
                    k.trim().parse::<usize>().ok()?,
                    n.trim().parse::<usize>().ok()?,
                ))
            })
            .ok_or_else(|| format!("bad --gemv shape {shape:?}: want KxN"))?;
        for dtype in [DType::F32, DType::F16] {
            if dtype == DType::F16 && !ctx.profile().shader_f16 {
                continue;
            }
            let x = ctx.rand_uniform([1, k], -1.0, 1.0, dtype, 7)?;
            let w = ctx.rand_uniform([k, n], -1.0, 1.0, dtype, 8)?;
            let plan = ctx.matmul_plan(&x, &w, None, &MatmulOptions::default())?;
            let timing = ctx.time(&plan, &opts)?;
            // The same bytes copied (W read and written): the bandwidth a
            // pass over W can reach at this size, next to the large-copy one.
            let copy = ctx.copy_plan(&w)?;
            let copy_gbps = ctx.time(&copy, &opts)?.gbps(copy.bytes());
            let gbps = timing.gbps(plan.bytes());
            println!(
                "gemv {dtype} {k}x{n} {gbps:>9.1} GB/s {:>9.4} ms  ({}); copy of W {copy_gbps:.1} GB/s, gemv at {:.0}% of it",
                timing.median() * 1e3,
                plan.label(),
                100.0 * gbps / copy_gbps
            );
        }
    }
    Ok(())
}
