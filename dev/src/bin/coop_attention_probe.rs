//! Diagnostics of the tensor-core attention forward on tiny shapes (B = H =
//! 1, the first tile of `tune::attention::FLASH_COOP_CANDIDATES`), printed
//! rather than asserted: per shape, the largest error against an f64
//! reference, the count of non-finite outputs, the rows with wrong outputs
//! and the first wrong elements.
//!
//! ```text
//! WGTILE_COOPERATIVE_MATRIX=1 cargo run -p wgtile-dev --release --bin coop_attention_probe
//! WGTILE_COOPERATIVE_MATRIX=1 WGTILE_COOP_ATTN_PROBE=1 cargo run -p wgtile-dev --release --bin coop_attention_probe
//! ```
//! `WGTILE_COOP_ATTN_PROBE` (the `PROBE` of
//! `shaders/attention_flash_coop.wgsl`) changes what the kernel computes,
//! and the reference follows: with `1` every probability is 1, so each
//! output row is the mean of V's rows; with `2` the kernel writes the raw
//! S = Q K^T of the first key block into O's first columns (the tile's Bc
//! of them, at most Sk), which are the only ones compared. Without it the reference
//! is softmax(Q K^T / sqrt(D)) V.

use wgtile::tune::attention::FLASH_COOP_CANDIDATES;
use wgtile::{AttentionKernel, AttentionOptions, Context, Tensor};

type BoxError = Box<dyn std::error::Error>;

/// An error above this (or NaN) marks an output as wrong.
const BAD: f64 = 2e-2;

fn main() -> Result<(), BoxError> {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    // After the logger: a variable that does not parse logs a warning.
    let overrides = wgtile::dev::DevOverrides::from_env();
    wgtile::dev::set_overrides(overrides);
    let probe = overrides.coop_attn_probe;
    let ctx = Context::new_blocking(Default::default())?;
    let profile = ctx.profile();
    println!("{} ({:?})", profile.name, profile.backend);
    if !wgtile::tune::has_coop_f16(profile) {
        println!(
            "skipped: the adapter has no 16x16 f16/f32 cooperative matrix \
             (run on a GPU with WGTILE_COOPERATIVE_MATRIX=1)"
        );
        return Ok(());
    }
    let tiles = FLASH_COOP_CANDIDATES[0];
    println!(
        "tile W={} rows={} Bc={}, probe {probe}",
        tiles.subgroups,
        16 * tiles.rf,
        tiles.bc
    );
    for (sq, sk, d, dv) in [
        (16, 16, 16, 16),
        (16, 64, 16, 64),
        (16, 64, 64, 64),
        (64, 64, 64, 64),
        (64, 128, 128, 128),
        (17, 100, 64, 64),
    ] {
        let (qt, q) = upload(&ctx, sq * d, 7, [1, 1, sq, d])?;
        let (kt, k) = upload(&ctx, sk * d, 8, [1, 1, sk, d])?;
        let (vt, v) = upload(&ctx, sk * dv, 9, [1, 1, sk, dv])?;
        let dot = |i: usize, j: usize| -> f64 {
            (0..d)
                .map(|e| f64::from(q[i * d + e]) * f64::from(k[j * d + e]))
                .sum()
        };
        let mut want = vec![0.0f64; sq * dv];
        let mut cols = dv;
        match probe {
            1 => {
                for i in 0..sq {
                    for x in 0..dv {
                        want[i * dv + x] =
                            (0..sk).map(|j| f64::from(v[j * dv + x])).sum::<f64>() / sk as f64;
                    }
                }
            }
            2 => {
                // The first key block: the tile's Bc keys (or all of them).
                cols = dv.min(tiles.bc as usize).min(sk);
                for i in 0..sq {
                    for x in 0..cols {
                        want[i * dv + x] = dot(i, x);
                    }
                }
            }
            _ => {
                let scale = f64::from(1.0 / (d as f32).sqrt());
                for i in 0..sq {
                    let s: Vec<f64> = (0..sk).map(|j| dot(i, j) * scale).collect();
                    let mx = s.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                    let p: Vec<f64> = s.iter().map(|&s| (s - mx).exp()).collect();
                    let l: f64 = p.iter().sum();
                    for x in 0..dv {
                        let acc: f64 = p
                            .iter()
                            .enumerate()
                            .map(|(j, pj)| pj * f64::from(v[j * dv + x]))
                            .sum();
                        want[i * dv + x] = acc / l;
                    }
                }
            }
        }
        let opts = AttentionOptions::new()
            .with_lse()
            .coop_tiles(tiles)
            .kernel(AttentionKernel::FlashCoop);
        let o = run_poisoned(&ctx, &qt, &kt, &vt, &opts)?;
        let err = |i: usize, x: usize| (f64::from(o[i * dv + x]) - want[i * dv + x]).abs();
        let mut worst = 0.0f64;
        let mut nonfinite = 0;
        let mut bad = Vec::new();
        for i in 0..sq {
            for x in 0..cols {
                let (g, w, e) = (o[i * dv + x], want[i * dv + x], err(i, x));
                if !g.is_finite() {
                    nonfinite += 1;
                }
                if (e.is_nan() || e > BAD) && bad.len() < 6 {
                    bad.push(format!("[{i},{x}] {g} vs {w:.4}"));
                }
                if e.is_finite() {
                    worst = worst.max(e);
                }
            }
        }
        let bad_rows: Vec<usize> = (0..sq)
            .filter(|&i| {
                (0..cols).any(|x| {
                    let e = err(i, x);
                    e.is_nan() || e > BAD
                })
            })
            .collect();
        println!(
            "probe {probe} sq {sq} sk {sk} d {d} dv {dv}: worst finite err {worst:.3e}, non-finite {nonfinite}/{}, bad rows {:?}, first bad {:?}",
            sq * cols,
            &bad_rows[..bad_rows.len().min(20)],
            bad
        );
    }
    Ok(())
}

/// `n` seeded values uniform in [-1, 1) uploaded as f16, and the values the
/// tensor holds, widened to f32.
fn upload(
    ctx: &Context,
    n: usize,
    seed: u64,
    shape: [usize; 4],
) -> Result<(Tensor, Vec<f32>), BoxError> {
    let h: Vec<wgtile::f16> = wgtile::uniform_values(n, -1.0, 1.0, seed)
        .into_iter()
        .map(wgtile::f16::from_f32)
        .collect();
    let tensor = ctx.tensor(&h, shape)?;
    Ok((tensor, h.iter().map(|v| v.to_f32()).collect()))
}

/// Runs the plan with its outputs poisoned with NaN; O on the host.
fn run_poisoned(
    ctx: &Context,
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    opts: &AttentionOptions,
) -> Result<Vec<f32>, BoxError> {
    let (plan, out) = ctx.attention_plan(q, k, v, opts)?;
    ctx.fill(&out.o, f32::NAN)?;
    if let Some(l) = &out.lse {
        ctx.fill(l, f32::NAN)?;
    }
    plan.run()?;
    Ok(out.o.to_f32_vec_blocking()?)
}
