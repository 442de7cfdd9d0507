//! FlashAttention against the naive three-kernel attention, and flash-decoding
//! against the copy bandwidth.
//!
//! ```text
//! cargo run --release --example attention            # H200-sized cases
//! cargo run --release --example attention -- --quick # seconds on lavapipe
//! ```
//! FLOPs follow FlashAttention's convention: 4 * B * H * Sq * Sk * D for the
//! forward pass (two matmuls), half of that when causal; the backward pass
//! counts 2.5x the forward. Times are GPU-timestamp medians (`ctx.time`).
//! `scripts/torch_attention.py` prints the same cases for PyTorch SDPA.
//! `--sweep-tiles` also times every flash tile candidate the adapter fits,
//! to check the dispatcher's pick on a new GPU; `--decode-sweep` times the
//! decode kernel's tile variants (`tune::attention::DECODE_SWEEP`).
//!
//! Tensor cores: with `WGTILE_COOPERATIVE_MATRIX=1` on an adapter with the
//! 16x16 f16/f32 cooperative matrix (the H200), the f16 rows also time the
//! tensor-core flash kernel (`coop` columns; `--kernels` picks which of
//! flash, naive, coop run), and `--sweep-coop` times every tensor-core tile
//! at B=4 H=16 S=1024/4096 D=64/128 f16, causal and not, with the max
//! difference to the scalar flash kernel's output:
//! ```text
//! WGTILE_COOPERATIVE_MATRIX=1 cargo run --release --example attention -- --sweep-coop --sweep-only
//! ```

use clap::Parser;
use wgtile::tune::attention::{
    DECODE_SWEEP, DecodeTiles, FLASH_CANDIDATES, FLASH_COOP_CANDIDATES, FLASH_COOP_SWEEP,
    SWEEP_TILES, TEST_TILES,
};
use wgtile::{
    AttentionKernel, AttentionOptions, Context, DType, DiagonalAlignment, KvCache, Plan,
    TimingOptions,
};

#[derive(Parser, Debug)]
struct Args {
    /// Small sizes that run in seconds on a software adapter.
    #[arg(long)]
    quick: bool,
    /// Measured runs per case.
    #[arg(long, default_value_t = 10)]
    repeats: u32,
    /// Skip the S = 65536 runs.
    #[arg(long)]
    no_long: bool,
    /// Also time every flash tile candidate the adapter can run (S <= 4096),
    /// to check the dispatcher's choice (printed first on each line).
    #[arg(long)]
    sweep_tiles: bool,
    /// Input dtypes of --sweep-coop (f16, f32: the split kernel).
    #[arg(long, value_delimiter = ',', default_value = "f16")]
    coop_dtypes: Vec<String>,
    /// Sequence lengths of the forward cases (default: 1024,4096; --quick 128,256).
    #[arg(long, value_delimiter = ',')]
    sizes: Vec<usize>,
    /// Head dimensions of the forward cases (default: 128,64; --quick 64).
    #[arg(long, value_delimiter = ',')]
    dims: Vec<usize>,
    /// Only the sweeps (--sweep-tiles, --sweep-coop): no forward table, backward or decode.
    #[arg(long)]
    sweep_only: bool,
    /// Only the decode table (split-KV decode kernel vs flash-decoding).
    #[arg(long)]
    decode_only: bool,
    /// Only the decode tile sweep: the dispatcher's decode tile and every
    /// `DECODE_SWEEP` variant at 4096 and 32768 keys (or --decode-lens),
    /// f16 and f32, to pick the default on a new GPU in one run.
    #[arg(long)]
    decode_sweep: bool,
    /// Only the decode tile grid: workgroup shapes (invocations, LK, V
    /// prefetch) against workgroups per compute unit (2 to 8), at
    /// --decode-lens, f16 and f32: where wave quantisation meets occupancy.
    #[arg(long)]
    decode_grid: bool,
    /// Cache lengths of the decode table (default: 4096,32768,131072;
    /// --quick 1024,4096).
    #[arg(long, value_delimiter = ',')]
    decode_lens: Vec<usize>,
    /// Also time the tensor-core decode kernel at these key-split counts
    /// (the dispatcher's count is always timed).
    #[arg(long, value_delimiter = ',')]
    decode_tc_splits: Vec<u32>,
    /// f32 FMA peak of the adapter in TFLOP/s, for the "% peak" column (the
    /// f16 path also computes in f32). Default: the H200 datasheet's 67.
    #[arg(long, default_value_t = 67.0)]
    peak_tflops: f64,
    /// Dense f16 tensor-core peak in TFLOP/s, for the coop "% tc" column.
    /// Default: the H200 datasheet's 989.
    #[arg(long, default_value_t = 989.0)]
    peak_tc_tflops: f64,
    /// Kernels of the forward table: any of flash, naive, coop (coop: f16
    /// rows, adapters with the 16x16 cooperative matrix only).
    #[arg(long, value_delimiter = ',', default_value = "flash,naive,coop")]
    kernels: Vec<String>,
    /// Time every tensor-core tile (candidates and sweep shapes) at B=4 H=16
    /// S=1024,4096 D=64,128 f16 (or --sizes, --dims), causal and not
    /// (--quick: B=1 H=2 S=128,256 D=64), with the max difference to the
    /// scalar flash kernel.
    #[arg(long)]
    sweep_coop: bool,
    /// Time every tensor-core backward tile (candidates and sweep shapes)
    /// on the f16 backward cases, with the max difference of dQ to the
    /// scalar backward's, and exit.
    #[arg(long)]
    sweep_backward: bool,
    /// Only the backward table (with each kernel's time): no forward, no
    /// decode; f16 only, and without the scalar kernels where the adapter
    /// has tensor cores.
    #[arg(long)]
    backward_only: bool,
    /// Only the forward table (no backward, no decode).
    #[arg(long)]
    forward_only: bool,
}

struct Forward {
    b: usize,
    h: usize,
    s: usize,
    d: usize,
    causal: bool,
    dtype: DType,
}

impl Forward {
    /// "B,H,S,D causal|full dtype", the case's name in every table.
    fn label(&self) -> String {
        format!(
            "{},{},{},{} {} {}",
            self.b,
            self.h,
            self.s,
            self.d,
            if self.causal { "causal" } else { "full" },
            self.dtype
        )
    }
}

fn fa_flops(b: usize, h: usize, sq: usize, sk: usize, d: usize, causal: bool) -> f64 {
    let f = 4.0 * (b * h) as f64 * sq as f64 * sk as f64 * d as f64;
    if causal { f / 2.0 } else { f }
}

fn time(ctx: &Context, plan: &Plan, repeats: u32) -> wgtile::Result<f64> {
    let t = ctx.time(
        plan,
        &TimingOptions {
            repeats,
            ..Default::default()
        },
    )?;
    Ok(t.median())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let args = Args::parse();
    let ctx = Context::new_blocking(Default::default())?;
    let profile = ctx.profile();
    println!("{} ({:?})", profile.name, profile.backend);
    let f16 = profile.shader_f16;
    if args.decode_only || args.decode_sweep || args.decode_grid {
        return decode(&ctx, &args, f16);
    }
    // FLOP/s unit: TFLOP/s on GPUs, GFLOP/s for --quick (software adapters).
    let (unit, unit_name) = if args.quick {
        (1e9, "GFLOP/s")
    } else {
        (1e12, "TFLOP/s")
    };

    // Forward: flash vs naive.
    let (b, h, mut sizes, mut dims): (usize, usize, Vec<usize>, Vec<usize>) = if args.quick {
        (1, 2, vec![128, 256], vec![64])
    } else {
        (4, 16, vec![1024, 4096], vec![128, 64])
    };
    if !args.sizes.is_empty() {
        sizes = args.sizes.clone();
    }
    if !args.dims.is_empty() {
        dims = args.dims.clone();
    }
    let mut cases = Vec::new();
    for &d in &dims {
        for &s in &sizes {
            for causal in [false, true] {
                for dtype in [DType::F32, DType::F16] {
                    if dtype == DType::F16 && !f16 {
                        continue;
                    }
                    cases.push(Forward {
                        b,
                        h,
                        s,
                        d,
                        causal,
                        dtype,
                    });
                }
            }
        }
    }
    if !args.quick
        && !args.no_long
        && !args.sweep_only
        && !args.sweep_backward
        && !args.backward_only
    {
        for causal in [false, true] {
            for dtype in [DType::F32, DType::F16] {
                if dtype == DType::F16 && !f16 {
                    continue;
                }
                cases.push(Forward {
                    b: 1,
                    h: 8,
                    s: 65536,
                    d: 128,
                    causal,
                    dtype,
                });
            }
        }
    }
    let want = |k: &str| args.kernels.iter().any(|x| x == k);
    for k in &args.kernels {
        if !matches!(k.as_str(), "flash" | "naive" | "coop") {
            return Err(format!("--kernels: unknown kernel {k} (flash, naive, coop)").into());
        }
    }
    let has_coop = wgtile::tune::has_coop_f16(profile);
    if want("coop") && !has_coop {
        println!(
            "(coop columns empty: no 16x16 f16/f32 cooperative matrix; set WGTILE_COOPERATIVE_MATRIX=1 on a GPU that has one)"
        );
    }
    println!(
        "{:<34} {:>10} {:>9} {:>7} {:>10} {:>9} {:>7} | {:>9} {:>9} {:>6} {:>8} {:>8}",
        "forward B,H,S,D causal dtype",
        "flash ms",
        unit_name,
        "% peak",
        "naive ms",
        unit_name,
        "ratio",
        "coop ms",
        unit_name,
        "% tc",
        "x flash",
        "diff"
    );
    // Fraction of a peak (meaningless on software adapters: "-").
    let pct = |flops: f64, t: f64, peak_tflops: f64| {
        if args.quick {
            "-".to_string()
        } else {
            format!("{:.0}%", 100.0 * flops / t / (peak_tflops * 1e12))
        }
    };
    let dash = || "-".to_string();
    for c in cases
        .iter()
        .filter(|_| !args.sweep_only && !args.sweep_backward && !args.backward_only)
    {
        let q = ctx.zeros([c.b, c.h, c.s, c.d], c.dtype)?;
        let k = ctx.zeros([c.b, c.h, c.s, c.d], c.dtype)?;
        let v = ctx.zeros([c.b, c.h, c.s, c.d], c.dtype)?;
        for (n, t) in [&q, &k, &v].into_iter().enumerate() {
            ctx.fill_random(t, n as u32 + 1)?;
        }
        let mut opts = AttentionOptions::new().with_lse();
        if c.causal {
            opts = opts.causal(DiagonalAlignment::TopLeft);
        }
        let flops = fa_flops(c.b, c.h, c.s, c.s, c.d, c.causal);
        let repeats = if c.s > 16384 { 3 } else { args.repeats };
        let mut flash_out = None;
        let tf = if want("flash") {
            let (flash, out) =
                ctx.attention_plan(&q, &k, &v, &opts.clone().kernel(AttentionKernel::Flash))?;
            let t = time(&ctx, &flash, repeats)?;
            flash_out = Some(out.o);
            Some(t)
        } else {
            None
        };
        let naive = if want("naive") && c.s <= 8192 {
            match ctx.attention_plan(&q, &k, &v, &opts.clone().kernel(AttentionKernel::Naive)) {
                Ok((plan, _)) => Some(time(&ctx, &plan, repeats)?),
                Err(_) => None,
            }
        } else {
            None
        };
        // f32 runs the split kernel (each value as two halves).
        let coop = if want("coop") && has_coop {
            let (plan, out) =
                ctx.attention_plan(&q, &k, &v, &opts.clone().kernel(AttentionKernel::FlashCoop))?;
            let t = time(&ctx, &plan, repeats)?;
            let diff = match &flash_out {
                Some(f) => format!("{:.0e}", max_diff(f, &out.o)?),
                None => dash(),
            };
            Some((t, diff))
        } else {
            None
        };
        let label = c.label();
        let ms = |t: Option<f64>| t.map_or_else(dash, |t| format!("{:.3}", t * 1e3));
        let speed = |t: Option<f64>| t.map_or_else(dash, |t| format!("{:.2}", flops / t / unit));
        let tc = coop.as_ref().map(|(t, _)| *t);
        println!(
            "{label:<34} {:>10} {:>9} {:>7} {:>10} {:>9} {:>7} | {:>9} {:>9} {:>6} {:>8} {:>8}",
            ms(tf),
            speed(tf),
            tf.map_or_else(dash, |t| pct(flops, t, args.peak_tflops)),
            if want("naive") && naive.is_none() {
                "no fit".to_string()
            } else {
                ms(naive)
            },
            speed(naive),
            match (tf, naive) {
                (Some(f), Some(n)) => format!("{:.1}x", n / f),
                _ => dash(),
            },
            ms(tc),
            speed(tc),
            tc.map_or_else(dash, |t| pct(flops, t, args.peak_tc_tflops)),
            match (tf, tc) {
                (Some(f), Some(t)) => format!("{:.1}x", f / t),
                _ => dash(),
            },
            coop.map_or_else(dash, |(_, d)| d),
        );
    }

    if args.sweep_coop {
        sweep_coop(&ctx, &args, unit, unit_name)?;
    }

    if args.sweep_tiles {
        println!("\nflash tile candidates ({unit_name}; the dispatcher's pick first)");
        for c in cases.iter().filter(|c| c.s <= 4096) {
            let shape = [c.b, c.h, c.s, c.d];
            let q = ctx.zeros(shape, c.dtype)?;
            let k = ctx.zeros(shape, c.dtype)?;
            let v = ctx.zeros(shape, c.dtype)?;
            for (n, t) in [&q, &k, &v].into_iter().enumerate() {
                ctx.fill_random(t, n as u32 + 1)?;
            }
            let mut opts = AttentionOptions::new().kernel(AttentionKernel::Flash);
            if c.causal {
                opts = opts.causal(DiagonalAlignment::TopLeft);
            }
            let flops = fa_flops(c.b, c.h, c.s, c.s, c.d, c.causal);
            let (auto, auto_out) = ctx.attention_plan(&q, &k, &v, &opts)?;
            let mut line = format!(
                "{}: auto {:.2}",
                c.label(),
                flops / time(&ctx, &auto, args.repeats)? / unit
            );
            for tiles in FLASH_CANDIDATES
                .iter()
                .chain(&TEST_TILES)
                .chain(&SWEEP_TILES)
            {
                let t = tiles.for_value_dim(c.d);
                if !t.fits(profile, c.d) {
                    continue;
                }
                let (plan, out) = ctx.attention_plan(&q, &k, &v, &opts.clone().tiles(t))?;
                let speed = flops / time(&ctx, &plan, args.repeats)? / unit;
                // Sanity: the same result as the dispatcher's pick.
                let want = auto_out.o.to_f32_vec_blocking()?;
                let got = out.o.to_f32_vec_blocking()?;
                let diff =
                    want.iter()
                        .zip(&got)
                        .map(|(a, b)| (a - b).abs())
                        .fold(
                            0.0f32,
                            |m, d| if d.is_nan() { f32::INFINITY } else { m.max(d) },
                        );
                line.push_str(&format!(
                    " | Br={} Tr={} Bc={} ({} inv) {:.2} (max diff {:.0e})",
                    t.br,
                    t.tr,
                    t.bc(),
                    t.threads(),
                    speed,
                    diff
                ));
            }
            println!("{line}");
        }
    }

    if args.sweep_backward || args.backward_only {
        return backward(&ctx, &args, &cases, has_coop, (unit, unit_name));
    }
    if args.sweep_only || args.forward_only {
        return Ok(());
    }
    backward(&ctx, &args, &cases, has_coop, (unit, unit_name))?;
    decode(&ctx, &args, f16)
}

/// Backward (recomputation, 2.5x the forward FLOPs) at the forward cases up
/// to S = 1024 (4096 for f16 on tensor cores; 256 with --quick): the scalar
/// kernels and, for f16 where the adapter has them, the tensor-core ones
/// (what `Auto` picks), with the largest dQ difference between the two.
/// With --sweep-backward every tensor-core tile instead.
fn backward(
    ctx: &Context,
    args: &Args,
    cases: &[Forward],
    has_coop: bool,
    (unit, unit_name): (f64, &str),
) -> Result<(), Box<dyn std::error::Error>> {
    use wgtile::tune::attention::{BACKWARD_COOP_CANDIDATES, BACKWARD_COOP_SWEEP};
    println!(
        "\n{:<34} {:>10} {:>9} | {:>10} {:>9} {:>9} {:>9}",
        "backward B,H,S,D causal dtype",
        "scalar ms",
        unit_name,
        "coop ms",
        unit_name,
        "x scalar",
        "max |ddQ|"
    );
    let limit = |c: &Forward| match (args.quick, c.dtype == DType::F16 && has_coop) {
        (true, _) => 256,
        (false, true) => 4096,
        (false, false) => 1024,
    };
    for c in cases.iter().filter(|c| c.s <= limit(c)) {
        if (args.sweep_backward || args.backward_only) && (c.dtype != DType::F16 || !has_coop) {
            continue;
        }
        let shape = [c.b, c.h, c.s, c.d];
        let q = ctx.zeros(shape, c.dtype)?;
        let k = ctx.zeros(shape, c.dtype)?;
        let v = ctx.zeros(shape, c.dtype)?;
        let d_o = ctx.zeros(shape, c.dtype)?;
        for (n, t) in [&q, &k, &v, &d_o].into_iter().enumerate() {
            ctx.fill_random(t, n as u32 + 11)?;
        }
        let mut opts = AttentionOptions::new().with_lse();
        if c.causal {
            opts = opts.causal(DiagonalAlignment::TopLeft);
        }
        let fwd = ctx.attention(&q, &k, &v, &opts)?;
        let lse = fwd.lse.clone().ok_or("no lse")?;
        let flops = 2.5 * fa_flops(c.b, c.h, c.s, c.s, c.d, c.causal);
        let name = c.label();
        // The whole plan's time, dQ, and (with `stages`) each kernel of the
        // plan timed alone (prepare, dK/dV, dQ).
        let run = |o: &AttentionOptions,
                   stages: bool|
         -> Result<(f64, Vec<f32>, String), Box<dyn std::error::Error>> {
            let (plan, grads) = ctx.attention_backward_plan(&q, &k, &v, &fwd.o, &d_o, &lse, o)?;
            let t = time(ctx, &plan, args.repeats.min(5))?;
            let mut parts = Vec::new();
            if stages {
                for stage in plan.stages() {
                    parts.push(format!(
                        "{:.1}",
                        time(ctx, &stage, args.repeats.min(5))? * 1e6
                    ));
                }
            }
            let parts = if parts.is_empty() {
                String::new()
            } else {
                format!(" stages {} us", parts.join(" + "))
            };
            Ok((t, grads.dq.to_f32_vec_blocking()?, parts))
        };
        let diff = |a: &[f32], b: &[f32]| {
            a.iter().zip(b).fold(0.0f32, |m, (x, y)| {
                if (x - y).abs() > m || (x - y).is_nan() {
                    (x - y).abs()
                } else {
                    m
                }
            })
        };
        let mut scalar = opts.clone();
        scalar.kernel = AttentionKernel::Flash;
        let (ts, dq_s, _) = run(&scalar, false)?;
        let mut line = format!("{:<34} {:>10.3} {:>9.2}", name, ts * 1e3, flops / ts / unit);
        if c.dtype == DType::F16 && has_coop {
            // The sweep: every pair of candidates for the two kernels (dK/dV,
            // dQ), then the sweep tiles for both.
            let fits =
                |t: &&wgtile::tune::attention::BackwardCoopTiles| t.fits(ctx.profile(), c.d, c.d);
            let tiles: Vec<_> = if args.sweep_backward {
                let cands: Vec<_> = BACKWARD_COOP_CANDIDATES.iter().filter(fits).collect();
                // dQ also on the sweep's 32-key blocks: its workgroup memory
                // differs from the dK/dV kernel's.
                let q_tiles: Vec<_> = cands
                    .iter()
                    .copied()
                    .chain(BACKWARD_COOP_SWEEP.iter().filter(fits))
                    .collect();
                let mut v: Vec<_> = cands
                    .iter()
                    .flat_map(|kv| q_tiles.iter().map(move |q| Some((**kv, **q))))
                    .collect();
                v.extend(
                    BACKWARD_COOP_SWEEP
                        .iter()
                        .filter(fits)
                        .map(|t| Some((*t, *t))),
                );
                v
            } else {
                vec![None]
            };
            for t in tiles {
                let mut o = opts.clone();
                if let Some((kv, q)) = t {
                    o = o.backward_coop_tiles(kv);
                    o.backward_coop_dq_tiles = Some(q);
                }
                let (tc, dq_c, parts) = run(&o, t.is_none())?;
                line.push_str(&format!(
                    " | {:>10.3} {:>9.2} {:>9.2} {:>9.2e}{parts}",
                    tc * 1e3,
                    flops / tc / unit,
                    ts / tc,
                    diff(&dq_s, &dq_c)
                ));
                if let Some((kv, q)) = t {
                    line.push_str(&format!(
                        " [dKdV W{} B{}, dQ W{} B{}]",
                        kv.subgroups, kv.block, q.subgroups, q.block
                    ));
                }
            }
        }
        println!("{line}");
    }
    Ok(())
}

/// Decode: one query row per head (B = 1, Hq = 32, Hkv = 8, D = 128) against
/// KV caches of several lengths, f16 and f32, judged in GB/s of the K/V
/// cache read against a device copy measured in the same run: the decode
/// kernel (what `Auto` picks), the tensor-core decode kernel (f16, where
/// the adapter has cooperative matrices) and the flash-decoding path the
/// decode kernel replaced (`AttentionKernel::FlashSplit`).
fn decode(ctx: &Context, args: &Args, f16: bool) -> Result<(), Box<dyn std::error::Error>> {
    let (hq, hkv, d, mut lens) = if args.quick {
        (8, 2, 64, vec![1024, 4096])
    } else {
        (32, 8, 128, vec![4096, 32768, 131072])
    };
    if args.decode_sweep || args.decode_grid {
        lens.truncate(2);
    }
    if !args.decode_lens.is_empty() {
        lens = args.decode_lens.clone();
    }
    // (name, kernel, decode tile): the table compares the decode kernel with
    // flash-decoding; the sweep compares decode tiles (the first line of
    // each case is the dispatcher's own pick).
    let mut variants: Vec<(String, AttentionKernel, Option<DecodeTiles>)> = vec![
        ("decode".into(), AttentionKernel::Auto, None),
        ("flash-split".into(), AttentionKernel::FlashSplit, None),
    ];
    if args.decode_sweep {
        variants.truncate(1);
        for (i, t) in DECODE_SWEEP.iter().enumerate() {
            variants.push((format!("sweep {i}"), AttentionKernel::Decode, Some(*t)));
        }
    }
    if args.decode_grid {
        variants.truncate(1);
        for (threads, lk, prefetch_v) in [
            (128, 4, false),
            (128, 4, true),
            (128, 8, false),
            (128, 8, true),
            (256, 4, false),
            (256, 8, true),
            (64, 4, true),
            (64, 2, false),
        ] {
            for per_unit in [2, 3, 4, 5, 6, 8] {
                let t = DecodeTiles {
                    threads,
                    lk,
                    prefetch_v,
                    per_unit,
                };
                variants.push(("grid".into(), AttentionKernel::Decode, Some(t)));
            }
        }
    }
    // The tensor-core decode kernel (f16 rows; forced, not in Auto).
    if wgtile::tune::has_coop_f16(ctx.profile()) && !args.decode_sweep && !args.decode_grid {
        variants.insert(1, ("decode-tc".into(), AttentionKernel::DecodeCoop, None));
    }
    let tc_splits: Vec<Option<u32>> = std::iter::once(None)
        .chain(args.decode_tc_splits.iter().map(|&s| Some(s)))
        .collect();
    let copy = copy_bandwidth(ctx, if args.quick { 16 << 20 } else { 1 << 30 })?;
    println!(
        "\ndecode Sq=1 B=1 Hq={hq} Hkv={hkv} D=Dv={d}, causal bottom-right; device copy {:.0} GB/s (read+write)",
        copy / 1e9
    );
    println!(
        "{:<22} {:<13} {:>10} {:>9} {:>7}   plan",
        "cache dtype", "path", "us", "GB/s", "% copy"
    );
    let mut dtypes = vec![DType::F16, DType::F32];
    if !f16 {
        dtypes.remove(0);
    }
    for dtype in dtypes {
        for &len in &lens {
            let shape = format!("{len} {dtype}");
            let setup = || -> wgtile::Result<(KvCache, wgtile::Tensor)> {
                let mut cache = KvCache::new(ctx, 1, hkv, d, d, len, dtype)?;
                let kn = ctx.zeros([1, hkv, len, d], dtype)?;
                ctx.fill_random(&kn, 7)?;
                let vn = ctx.zeros([1, hkv, len, d], dtype)?;
                ctx.fill_random(&vn, 9)?;
                cache.append(&kn, &vn)?;
                let q = ctx.zeros([1, hq, 1, d], dtype)?;
                ctx.fill_random(&q, 8)?;
                Ok((cache, q))
            };
            let (cache, q) = match setup() {
                Ok(x) => x,
                Err(e) => {
                    println!("{shape:<22} skipped: {e}");
                    continue;
                }
            };
            let opts = AttentionOptions::new().causal(DiagonalAlignment::BottomRight);
            let cache_bytes = (2 * hkv * len * d * dtype.size()) as f64;
            let runs = variants.iter().flat_map(|(name, kernel, tiles)| {
                let splits: &[Option<u32>] = if *kernel == AttentionKernel::DecodeCoop {
                    &tc_splits
                } else {
                    &[None]
                };
                splits.iter().map(move |s| (name, kernel, tiles, *s))
            });
            for (name, kernel, tiles, splits) in runs {
                let mut o = opts.clone().kernel(*kernel);
                o.decode_tiles = *tiles;
                o.kv_splits = splits;
                let (plan, _) = match ctx.attention_cached_plan(&q, &cache, &o) {
                    Ok(x) => x,
                    Err(e) => {
                        println!("{shape:<22} {name:<13} skipped: {e}");
                        continue;
                    }
                };
                let t = time(ctx, &plan, args.repeats.max(20))?;
                let gbps = cache_bytes / t / 1e9;
                // Where the time goes: each kernel of the plan timed alone
                // (split pass, then merge).
                let mut stages = Vec::new();
                if !args.decode_grid {
                    for stage in plan.stages() {
                        let t = time(ctx, &stage, args.repeats.max(20))?;
                        stages.push(format!("{:.1}", t * 1e6));
                    }
                }
                let stages = if stages.is_empty() {
                    String::new()
                } else {
                    format!(" stages {} us", stages.join(" + "))
                };
                println!(
                    "{shape:<22} {name:<13} {:>10.1} {:>9.1} {:>6.1}%   [{}]{stages}",
                    t * 1e6,
                    gbps,
                    100.0 * gbps * 1e9 / copy,
                    plan.label(),
                );
            }
        }
    }
    Ok(())
}

/// Largest |a - b| over two same-shaped outputs (NaN counts as infinite).
fn max_diff(a: &wgtile::Tensor, b: &wgtile::Tensor) -> Result<f32, Box<dyn std::error::Error>> {
    let (a, b) = (a.to_f32_vec_blocking()?, b.to_f32_vec_blocking()?);
    Ok(a.iter()
        .zip(&b)
        .map(|(x, y)| (x - y).abs())
        .fold(
            0.0f32,
            |m, d| {
                if d.is_nan() { f32::INFINITY } else { m.max(d) }
            },
        ))
}

/// `--sweep-coop`: every tensor-core tile that fits, against the scalar
/// flash kernel, in each of `--coop-dtypes`.
fn sweep_coop(
    ctx: &Context,
    args: &Args,
    unit: f64,
    unit_name: &str,
) -> Result<(), Box<dyn std::error::Error>> {
    let profile = ctx.profile();
    if !wgtile::tune::has_coop_f16(profile) {
        println!(
            "\n--sweep-coop: skipped, no 16x16 f16/f32 cooperative matrix (set WGTILE_COOPERATIVE_MATRIX=1 on a GPU that has one)"
        );
        return Ok(());
    }
    let (b, h, mut sizes, mut dims): (usize, usize, &[usize], &[usize]) = if args.quick {
        (1, 2, &[128, 256], &[64])
    } else {
        (4, 16, &[1024, 4096], &[64, 128])
    };
    if !args.sizes.is_empty() {
        sizes = &args.sizes;
    }
    if !args.dims.is_empty() {
        dims = &args.dims;
    }
    let mut dtypes = Vec::new();
    for name in &args.coop_dtypes {
        dtypes.push(match name.as_str() {
            "f16" => DType::F16,
            "f32" => DType::F32,
            other => return Err(format!("--coop-dtypes: f16 or f32, not {other}").into()),
        });
    }
    for dtype in dtypes {
        println!(
            "\ntensor-core flash tiles ({unit_name}, {dtype}; the dispatcher's pick first, max diff vs the scalar flash kernel)"
        );
        for &d in dims {
            for &s in sizes {
                for causal in [false, true] {
                    let shape = [b, h, s, d];
                    let q = ctx.zeros(shape, dtype)?;
                    let k = ctx.zeros(shape, dtype)?;
                    let v = ctx.zeros(shape, dtype)?;
                    for (n, t) in [&q, &k, &v].into_iter().enumerate() {
                        ctx.fill_random(t, n as u32 + 1)?;
                    }
                    let mut opts = AttentionOptions::new();
                    if causal {
                        opts = opts.causal(DiagonalAlignment::TopLeft);
                    }
                    let flops = fa_flops(b, h, s, s, d, causal);
                    let (flash, flash_out) = ctx.attention_plan(
                        &q,
                        &k,
                        &v,
                        &opts.clone().kernel(AttentionKernel::Flash),
                    )?;
                    let mut line = format!(
                        "{b},{h},{s},{d} {}: scalar flash {:.2}",
                        if causal { "causal" } else { "full" },
                        flops / time(ctx, &flash, args.repeats)? / unit
                    );
                    let (auto, _) = ctx.attention_plan(&q, &k, &v, &opts)?;
                    line.push_str(&format!(" | auto [{}]", auto.label()));
                    for t in FLASH_COOP_CANDIDATES.iter().chain(&FLASH_COOP_SWEEP) {
                        if !t.fits(profile, d, d, dtype) {
                            continue;
                        }
                        let (plan, out) =
                            ctx.attention_plan(&q, &k, &v, &opts.clone().coop_tiles(*t))?;
                        let speed = flops / time(ctx, &plan, args.repeats)? / unit;
                        line.push_str(&format!(
                            " | W={} rows={} Bc={} {:.2} (max diff {:.0e})",
                            t.subgroups,
                            16 * t.rf,
                            t.bc,
                            speed,
                            max_diff(&flash_out.o, &out.o)?
                        ));
                    }
                    // The tensor-core decode kernel as a forward kernel: one
                    // subgroup per workgroup and 16 or 32 rows, 16-key blocks.
                    for rf in [1, 2] {
                        let mut direct = opts.clone().kernel(AttentionKernel::DecodeCoop);
                        direct.decode_coop_rf = Some(rf);
                        if let Ok((plan, out)) = ctx.attention_plan(&q, &k, &v, &direct) {
                            let speed = flops / time(ctx, &plan, args.repeats)? / unit;
                            line.push_str(&format!(
                                " | decode-tc rows={} {:.2} (max diff {:.0e})",
                                16 * rf,
                                speed,
                                max_diff(&flash_out.o, &out.o)?
                            ));
                        }
                    }
                    println!("{line}");
                }
            }
        }
    }
    Ok(())
}

/// Device copy bandwidth (bytes read + written per second): the row kernels'
/// copy of a `bytes`-sized f32 tensor, timed with GPU timestamps like every
/// other number here.
fn copy_bandwidth(ctx: &Context, bytes: u64) -> Result<f64, Box<dyn std::error::Error>> {
    let x = ctx.zeros([(bytes / 4) as usize], DType::F32)?;
    let plan = ctx.copy_plan(&x)?;
    let t = time(ctx, &plan, 20)?;
    Ok(plan.bytes() as f64 / t)
}
