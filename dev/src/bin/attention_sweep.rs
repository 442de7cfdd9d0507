//! Attention tile sweeps: every tile the dispatcher could pick (and the
//! sweep tables' extra shapes it never picks), timed side by side with the
//! dispatcher's own pick and each one's max difference to a reference
//! kernel, to check or retune the dispatcher's tables on a new GPU.
//!
//! ```text
//! cargo run -p wgtile-dev --release --bin attention_sweep -- --sweep-tiles
//! WGTILE_COOPERATIVE_MATRIX=1 cargo run -p wgtile-dev --release --bin attention_sweep -- --sweep-coop
//! WGTILE_COOPERATIVE_MATRIX=1 cargo run -p wgtile-dev --release --bin attention_sweep -- --sweep-backward --repeats 5
//! cargo run -p wgtile-dev --release --bin attention_sweep -- --decode-sweep
//! cargo run -p wgtile-dev --release --bin attention_sweep -- --decode-grid --decode-lens 32768,131072
//! ```
//! - `--sweep-tiles`: every scalar flash tile (`tune::attention::FLASH_CANDIDATES`,
//!   `TEST_TILES`, `SWEEP_TILES`) that fits, at the forward cases up to S = 4096.
//! - `--sweep-coop`: every tensor-core forward tile (`FLASH_COOP_CANDIDATES`,
//!   `FLASH_COOP_SWEEP`) and the tensor-core decode kernel as a forward
//!   kernel, against the scalar flash kernel, in each of `--coop-dtypes`.
//! - `--sweep-backward`: every pair of tensor-core backward tiles
//!   (`BACKWARD_COOP_CANDIDATES`, `BACKWARD_COOP_SWEEP`) for the dK/dV and dQ
//!   kernels on the f16 cases, against the scalar backward's dQ.
//! - `--decode-sweep`: the decode kernel's tile variants (`DECODE_SWEEP`)
//!   against the dispatcher's decode tile, f16 and f32; `--decode-grid`:
//!   workgroup shapes against workgroups per compute unit.
//!
//! FLOPs and times as in the `attention` example (FlashAttention's count,
//! GPU-timestamp medians); the experiment variables of `README.md` next to
//! this crate's manifest apply (`WGTILE_COOP_ATTN_PROBE`, `WGTILE_DECODE_CE`,
//! ...).

use clap::Parser;
use wgtile::tune::attention::{
    BACKWARD_COOP_CANDIDATES, BACKWARD_COOP_SWEEP, BackwardCoopTiles, DECODE_SWEEP, DecodeTiles,
    FLASH_CANDIDATES, FLASH_COOP_CANDIDATES, FLASH_COOP_SWEEP, SWEEP_TILES, TEST_TILES,
};
use wgtile::{AttentionKernel, AttentionOptions, Context, DType, DiagonalAlignment, KvCache};
use wgtile_dev::attention::{
    BoxError, Forward, copy_bandwidth, fa_flops, forward_cases, max_diff, max_diff_values,
    random_qkv, time,
};

#[derive(Parser, Debug)]
struct Args {
    /// Small sizes that run in seconds on a software adapter.
    #[arg(long)]
    quick: bool,
    /// Measured runs per case.
    #[arg(long, default_value_t = 10)]
    repeats: u32,
    /// Time every flash tile candidate the adapter can run (S <= 4096),
    /// against the dispatcher's choice (printed first on each line).
    #[arg(long)]
    sweep_tiles: bool,
    /// Time every tensor-core tile (candidates and sweep shapes) at B=4 H=16
    /// S=1024,4096 D=64,128 (or --sizes, --dims), causal and not (--quick:
    /// B=1 H=2 S=128,256 D=64), with the max difference to the scalar flash
    /// kernel.
    #[arg(long)]
    sweep_coop: bool,
    /// Input dtypes of --sweep-coop (f16, f32: the split kernel).
    #[arg(long, value_delimiter = ',', default_value = "f16")]
    coop_dtypes: Vec<String>,
    /// Time every tensor-core backward tile pair (candidates and sweep
    /// shapes) on the f16 backward cases, with the max difference of dQ to
    /// the scalar backward's.
    #[arg(long)]
    sweep_backward: bool,
    /// The decode tile sweep: the dispatcher's decode tile and every
    /// `DECODE_SWEEP` variant at 4096 and 32768 keys (or --decode-lens),
    /// f16 and f32, to pick the default on a new GPU in one run.
    #[arg(long)]
    decode_sweep: bool,
    /// The decode tile grid: workgroup shapes (invocations, LK, V prefetch)
    /// against workgroups per compute unit (2 to 8), at --decode-lens, f16
    /// and f32: where wave quantisation meets occupancy.
    #[arg(long)]
    decode_grid: bool,
    /// Cache lengths of the decode sweeps (default: 4096,32768; --quick
    /// 1024,4096).
    #[arg(long, value_delimiter = ',')]
    decode_lens: Vec<usize>,
    /// Sequence lengths of the forward cases (default: 1024,4096; --quick 128,256).
    #[arg(long, value_delimiter = ',')]
    sizes: Vec<usize>,
    /// Head dimensions of the forward cases (default: 128,64; --quick 64;
    /// --sweep-coop: 64,128).
    #[arg(long, value_delimiter = ',')]
    dims: Vec<usize>,
    /// Accepted for the scripts that pass it: this program only sweeps (the
    /// forward, backward and decode tables are the `attention` example's).
    #[arg(long)]
    sweep_only: bool,
}

fn main() -> Result<(), BoxError> {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    // After the logger: a variable that does not parse logs a warning.
    wgtile::dev::set_overrides(wgtile::dev::DevOverrides::from_env());
    let args = Args::parse();
    if !(args.sweep_tiles
        || args.sweep_coop
        || args.sweep_backward
        || args.decode_sweep
        || args.decode_grid)
    {
        return Err(
            "nothing to sweep: pass --sweep-tiles, --sweep-coop, --sweep-backward, \
                    --decode-sweep or --decode-grid (see --help)"
                .into(),
        );
    }
    let ctx = Context::new_blocking(Default::default())?;
    let profile = ctx.profile();
    println!("{} ({:?})", profile.name, profile.backend);
    let f16 = profile.shader_f16;
    if args.decode_sweep || args.decode_grid {
        return decode(&ctx, &args, f16);
    }
    // FLOP/s unit: TFLOP/s on GPUs, GFLOP/s for --quick (software adapters).
    let unit = if args.quick {
        (1e9, "GFLOP/s")
    } else {
        (1e12, "TFLOP/s")
    };
    let cases = forward_cases(args.quick, &args.sizes, &args.dims, f16);
    if args.sweep_coop {
        sweep_coop(&ctx, &args, unit)?;
    }
    if args.sweep_tiles {
        sweep_tiles(&ctx, &args, &cases, unit)?;
    }
    if args.sweep_backward {
        sweep_backward(&ctx, &args, &cases, unit)?;
    }
    Ok(())
}

/// `--sweep-tiles`: every scalar flash tile that fits, at the cases up to
/// S = 4096, with the max difference to the dispatcher's pick.
fn sweep_tiles(
    ctx: &Context,
    args: &Args,
    cases: &[Forward],
    (unit, unit_name): (f64, &str),
) -> Result<(), BoxError> {
    let profile = ctx.profile();
    println!("\nflash tile candidates ({unit_name}; the dispatcher's pick first)");
    for c in cases.iter().filter(|c| c.s <= 4096) {
        let [q, k, v] = random_qkv(ctx, [c.b, c.h, c.s, c.d], c.dtype, 1)?;
        let opts = c.options().kernel(AttentionKernel::Flash);
        let flops = fa_flops(c.b, c.h, c.s, c.s, c.d, c.causal);
        let (auto, auto_out) = ctx.attention_plan(&q, &k, &v, &opts)?;
        let mut line = format!(
            "{}: auto {:.2}",
            c.label(),
            flops / time(ctx, &auto, args.repeats)? / unit
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
            let speed = flops / time(ctx, &plan, args.repeats)? / unit;
            // Sanity: the same result as the dispatcher's pick.
            let diff = max_diff(&auto_out.o, &out.o)?;
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
    Ok(())
}

/// `--sweep-coop`: every tensor-core tile that fits, against the scalar
/// flash kernel, in each of `--coop-dtypes`.
fn sweep_coop(ctx: &Context, args: &Args, (unit, unit_name): (f64, &str)) -> Result<(), BoxError> {
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
                    let [q, k, v] = random_qkv(ctx, [b, h, s, d], dtype, 1)?;
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

/// `--sweep-backward`: on the f16 cases up to S = 4096 (256 with --quick),
/// the scalar backward (recomputation, 2.5x the forward FLOPs), then every
/// pair of tensor-core tiles for the two kernels (dK/dV, dQ) and the sweep
/// tiles for both, each with the max dQ difference to the scalar kernels'.
fn sweep_backward(
    ctx: &Context,
    args: &Args,
    cases: &[Forward],
    (unit, unit_name): (f64, &str),
) -> Result<(), BoxError> {
    if !wgtile::tune::has_coop_f16(ctx.profile()) {
        println!(
            "\n--sweep-backward: skipped, no 16x16 f16/f32 cooperative matrix (set WGTILE_COOPERATIVE_MATRIX=1 on a GPU that has one)"
        );
        return Ok(());
    }
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
    let limit = if args.quick { 256 } else { 4096 };
    let repeats = args.repeats.min(5);
    for c in cases
        .iter()
        .filter(|c| c.s <= limit && c.dtype == DType::F16)
    {
        let shape = [c.b, c.h, c.s, c.d];
        let [q, k, v] = random_qkv(ctx, shape, c.dtype, 11)?;
        let d_o = ctx.zeros(shape, c.dtype)?;
        ctx.fill_random(&d_o, 14)?;
        let opts = c.options().with_lse();
        let fwd = ctx.attention(&q, &k, &v, &opts)?;
        let lse = fwd.lse.clone().ok_or("no lse")?;
        let flops = 2.5 * fa_flops(c.b, c.h, c.s, c.s, c.d, c.causal);
        // The whole plan's time and dQ.
        let run = |o: &AttentionOptions| -> Result<(f64, Vec<f32>), BoxError> {
            let (plan, grads) = ctx.attention_backward_plan(&q, &k, &v, &fwd.o, &d_o, &lse, o)?;
            let t = time(ctx, &plan, repeats)?;
            Ok((t, grads.dq.to_f32_vec_blocking()?))
        };
        let (ts, dq_s) = run(&opts.clone().kernel(AttentionKernel::Flash))?;
        let mut line = format!(
            "{:<34} {:>10.3} {:>9.2}",
            c.label(),
            ts * 1e3,
            flops / ts / unit
        );
        let fits = |t: &&BackwardCoopTiles| t.fits(ctx.profile(), c.d, c.d);
        let cands: Vec<_> = BACKWARD_COOP_CANDIDATES.iter().filter(fits).collect();
        // dQ also on the sweep's 32-key blocks: its workgroup memory differs
        // from the dK/dV kernel's.
        let q_tiles: Vec<_> = cands
            .iter()
            .copied()
            .chain(BACKWARD_COOP_SWEEP.iter().filter(fits))
            .collect();
        let mut pairs: Vec<(BackwardCoopTiles, BackwardCoopTiles)> = cands
            .iter()
            .flat_map(|kv| q_tiles.iter().map(move |q| (**kv, **q)))
            .collect();
        pairs.extend(BACKWARD_COOP_SWEEP.iter().filter(fits).map(|t| (*t, *t)));
        for (kv, dq) in pairs {
            let mut o = opts.clone().backward_coop_tiles(kv);
            o.backward_coop_dq_tiles = Some(dq);
            let (tc, dq_c) = run(&o)?;
            line.push_str(&format!(
                " | {:>10.3} {:>9.2} {:>9.2} {:>9.2e} [dKdV W{} B{}, dQ W{} B{}]",
                tc * 1e3,
                flops / tc / unit,
                ts / tc,
                max_diff_values(&dq_s, &dq_c),
                kv.subgroups,
                kv.block,
                dq.subgroups,
                dq.block
            ));
        }
        println!("{line}");
    }
    Ok(())
}

/// `--decode-sweep`, `--decode-grid`: one query row per head (B = 1, Hq =
/// 32, Hkv = 8, D = 128) against KV caches of several lengths, f16 and f32,
/// in GB/s of the K/V cache read against a device copy measured in the same
/// run: the dispatcher's decode tile first, then each variant.
fn decode(ctx: &Context, args: &Args, f16: bool) -> Result<(), BoxError> {
    let (hq, hkv, d, mut lens) = if args.quick {
        (8, 2, 64, vec![1024, 4096])
    } else {
        (32, 8, 128, vec![4096, 32768])
    };
    if !args.decode_lens.is_empty() {
        lens = args.decode_lens.clone();
    }
    // (name, kernel, decode tile): the first line of each case is the
    // dispatcher's own pick.
    let mut variants: Vec<(String, AttentionKernel, Option<DecodeTiles>)> =
        vec![("decode".into(), AttentionKernel::Auto, None)];
    if args.decode_grid {
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
    } else {
        for (i, t) in DECODE_SWEEP.iter().enumerate() {
            variants.push((format!("sweep {i}"), AttentionKernel::Decode, Some(*t)));
        }
    }
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
    let repeats = args.repeats.max(20);
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
            for (name, kernel, tiles) in &variants {
                let mut o = opts.clone().kernel(*kernel);
                o.decode_tiles = *tiles;
                let (plan, _) = match ctx.attention_cached_plan(&q, &cache, &o) {
                    Ok(x) => x,
                    Err(e) => {
                        println!("{shape:<22} {name:<13} skipped: {e}");
                        continue;
                    }
                };
                let t = time(ctx, &plan, repeats)?;
                let gbps = cache_bytes / t / 1e9;
                // Where the time goes (not in the grid): each kernel of the
                // plan timed alone (split pass, then merge).
                let mut stages = Vec::new();
                if !args.decode_grid {
                    for stage in plan.stages() {
                        let t = time(ctx, &stage, repeats)?;
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
