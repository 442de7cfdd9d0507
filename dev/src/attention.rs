//! Timing and comparison helpers of the attention programs.

use wgtile::{Context, DType, Plan, Tensor, TimingOptions};

/// The error type of the programs' fallible steps.
pub type BoxError = Box<dyn std::error::Error>;

/// FlashAttention's FLOP count of a forward pass: 4 * B * H * Sq * Sk * D
/// (two matmuls), half of that when causal.
pub fn fa_flops(b: usize, h: usize, sq: usize, sk: usize, d: usize, causal: bool) -> f64 {
    let f = 4.0 * (b * h) as f64 * sq as f64 * sk as f64 * d as f64;
    if causal { f / 2.0 } else { f }
}

/// Median GPU time of `repeats` runs of `plan`, in seconds.
pub fn time(ctx: &Context, plan: &Plan, repeats: u32) -> wgtile::Result<f64> {
    let t = ctx.time(
        plan,
        &TimingOptions {
            repeats,
            ..Default::default()
        },
    )?;
    Ok(t.median())
}

/// Largest |a - b| over two same-length slices (NaN counts as infinite).
pub fn max_diff_values(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(
            0.0f32,
            |m, d| {
                if d.is_nan() { f32::INFINITY } else { m.max(d) }
            },
        )
}

/// Largest |a - b| over two same-shaped outputs (NaN counts as infinite).
pub fn max_diff(a: &Tensor, b: &Tensor) -> Result<f32, BoxError> {
    let (a, b) = (a.to_f32_vec_blocking()?, b.to_f32_vec_blocking()?);
    Ok(max_diff_values(&a, &b))
}

/// Device copy bandwidth (bytes read + written per second): the row kernels'
/// copy of a `bytes`-sized f32 tensor, timed with GPU timestamps like every
/// other number of the programs.
pub fn copy_bandwidth(ctx: &Context, bytes: u64) -> Result<f64, BoxError> {
    let x = ctx.zeros([(bytes / 4) as usize], DType::F32)?;
    let plan = ctx.copy_plan(&x)?;
    let t = time(ctx, &plan, 20)?;
    Ok(plan.bytes() as f64 / t)
}

/// Seeded random Q, K, V (seeds `seed`, `seed + 1`, `seed + 2`) of one shape.
pub fn random_qkv(
    ctx: &Context,
    shape: [usize; 4],
    dtype: DType,
    seed: u32,
) -> wgtile::Result<[Tensor; 3]> {
    let q = ctx.zeros(shape, dtype)?;
    let k = ctx.zeros(shape, dtype)?;
    let v = ctx.zeros(shape, dtype)?;
    for (n, t) in [&q, &k, &v].into_iter().enumerate() {
        ctx.fill_random(t, seed + n as u32)?;
    }
    Ok([q, k, v])
}
