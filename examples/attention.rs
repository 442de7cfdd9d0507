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
//! `bench/torch_attention.py` prints the same cases for PyTorch SDPA.
//!
//! Tensor cores: with `WGTILE_COOPERATIVE_MATRIX=1` on an adapter with the
//! 16x16 f16/f32 cooperative matrix (the H200), the f16 rows also time the
//! tensor-core flash kernel (`coop` columns; `--kernels` picks which of
//! flash, naive, coop run), the backward table the tensor-core backward and
//! the decode table the tensor-core decode kernel:
//! ```text
//! WGTILE_COOPERATIVE_MATRIX=1 cargo run --release --example attention
//! ```
//! The tile sweeps that check the dispatcher's picks on a new GPU are the
//! `attention_sweep` program of the `wgtile-dev` crate
//! (`cargo run -p wgtile-dev --release --bin attention_sweep -- --help`).

use clap::Parser;

#[path = "common/attention.rs"]
mod bench;
use bench::{Forward, copy_bandwidth, fa_flops, forward_cases, max_diff, time};
use wgtile::{AttentionKernel, AttentionOptions, Context, DType, DiagonalAlignment, KvCache};

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
    /// Sequence lengths of the forward cases (default: 1024,4096; --quick 128,256).
    #[arg(long, value_delimiter = ',')]
    sizes: Vec<usize>,
    /// Head dimensions of the forward cases (default: 128,64; --quick 64).
    #[arg(long, value_delimiter = ',')]
    dims: Vec<usize>,
    /// Only the decode table (split-KV decode kernel vs flash-decoding).
    #[arg(long)]
    decode_only: bool,
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
    /// Only the backward table (with each kernel's time): no forward, no
    /// decode; f16 only, and without the scalar kernels where the adapter
    /// has tensor cores.
    #[arg(long)]
    backward_only: bool,
    /// Only the forward table (no backward, no decode).
    #[arg(long)]
    forward_only: bool,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let args = Args::parse();
    let ctx = Context::new_blocking(Default::default())?;
    let profile = ctx.profile();
    println!("{} ({:?})", profile.name, profile.backend);
    let f16 = profile.shader_f16;
    if args.decode_only {
        return decode(&ctx, &args, f16);
    }
    // FLOP/s unit: TFLOP/s on GPUs, GFLOP/s for --quick (software adapters).
    let (unit, unit_name) = if args.quick {
        (1e9, "GFLOP/s")
    } else {
        (1e12, "TFLOP/s")
    };

    // Forward: flash vs naive.
    let mut cases = forward_cases(args.quick, &args.sizes, &args.dims, f16);
    if !args.quick && !args.no_long && !args.backward_only {
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
    for c in cases.iter().filter(|_| !args.backward_only) {
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

    if args.backward_only {
        return backward(&ctx, &args, &cases, has_coop, (unit, unit_name));
    }
    if args.forward_only {
        return Ok(());
    }
    backward(&ctx, &args, &cases, has_coop, (unit, unit_name))?;
    decode(&ctx, &args, f16)
}

/// Backward (recomputation, 2.5x the forward FLOPs) at the forward cases up
/// to S = 1024 (4096 for f16 on tensor cores; 256 with --quick): the scalar
/// kernels and, for f16 where the adapter has them, the tensor-core ones
/// (what `Auto` picks), with the largest dQ difference between the two.
fn backward(
    ctx: &Context,
    args: &Args,
    cases: &[Forward],
    has_coop: bool,
    (unit, unit_name): (f64, &str),
) -> Result<(), Box<dyn std::error::Error>> {
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
        if args.backward_only && (c.dtype != DType::F16 || !has_coop) {
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
            // The dispatcher's tensor-core kernels, each stage timed alone.
            let (tc, dq_c, parts) = run(&opts, true)?;
            line.push_str(&format!(
                " | {:>10.3} {:>9.2} {:>9.2} {:>9.2e}{parts}",
                tc * 1e3,
                flops / tc / unit,
                ts / tc,
                diff(&dq_s, &dq_c)
            ));
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
    if !args.decode_lens.is_empty() {
        lens = args.decode_lens.clone();
    }
    // The decode kernel (what `Auto` picks) and flash-decoding.
    let mut variants: Vec<(&str, AttentionKernel)> = vec![
        ("decode", AttentionKernel::Auto),
        ("flash-split", AttentionKernel::FlashSplit),
    ];
    // The tensor-core decode kernel (f16 rows; forced, not in Auto).
    if wgtile::tune::has_coop_f16(ctx.profile()) {
        variants.insert(1, ("decode-tc", AttentionKernel::DecodeCoop));
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
            let runs = variants.iter().flat_map(|(name, kernel)| {
                let splits: &[Option<u32>] = if *kernel == AttentionKernel::DecodeCoop {
                    &tc_splits
                } else {
                    &[None]
                };
                splits.iter().map(move |s| (name, kernel, *s))
            });
            for (name, kernel, splits) in runs {
                let mut o = opts.clone().kernel(*kernel);
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
                for stage in plan.stages() {
                    let t = time(ctx, &stage, args.repeats.max(20))?;
                    stages.push(format!("{:.1}", t * 1e6));
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
