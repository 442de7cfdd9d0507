//! What the attention programs share (the `attention` example and
//! wgtile-dev's `attention_sweep`): the forward cases, FLOP counts, timing,
//! comparisons and the copy bandwidth they are measured against.

#![allow(dead_code)]

use wgtile::{AttentionOptions, Context, DType, DiagonalAlignment, Plan, Tensor, TimingOptions};

/// One forward case: `[B, H, S, D]` (Sq = Sk = S), causal or full, a dtype.
pub struct Forward {
    pub b: usize,
    pub h: usize,
    pub s: usize,
    pub d: usize,
    pub causal: bool,
    pub dtype: DType,
}

impl Forward {
    /// "B,H,S,D causal|full dtype", the case's name in every table.
    pub fn label(&self) -> String {
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

    /// The case's options: causal from the top left, or none.
    pub fn options(&self) -> AttentionOptions {
        let opts = AttentionOptions::new();
        if self.causal {
            opts.causal(DiagonalAlignment::TopLeft)
        } else {
            opts
        }
    }
}

/// The forward cases: every head dim of `dims` and sequence length of
/// `sizes` (defaults: B4 H16, S 1024 and 4096, D 128 and 64; `quick`: B1
/// H2, S 128 and 256, D 64), causal and not, f32 and (where `f16`) f16.
pub fn forward_cases(quick: bool, sizes: &[usize], dims: &[usize], f16: bool) -> Vec<Forward> {
    let (b, h, default_sizes, default_dims): (usize, usize, &[usize], &[usize]) = if quick {
        (1, 2, &[128, 256], &[64])
    } else {
        (4, 16, &[1024, 4096], &[128, 64])
    };
    let sizes = if sizes.is_empty() {
        default_sizes
    } else {
        sizes
    };
    let dims = if dims.is_empty() { default_dims } else { dims };
    let mut cases = Vec::new();
    for &d in dims {
        for &s in sizes {
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
    cases
}

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
