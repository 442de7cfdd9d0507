//! The f32 split tensor-core kernel: its layouts, their measured speed, and
//! the layout with the least estimated time for a shape.

use super::*;

/// Cooperative-matrix layouts for f32 operands split into halves (the A and
/// B tiles twice, hi and lo, within 48 KiB; at most 256 invocations, so the
/// accumulators plus twice the fragments stay under the 255 registers a
/// thread may have), with [`COOP_SPLIT_TFLOPS`], their speed on a full
/// grid, for [`coop_split_time`]. Measured on the H200 (runs 78-85, each k
/// slice's products summed apart; f32 1024^3 / 2048^3 / 4096^3, TFLOP/s,
/// first passes included): 2x4x16x4 (128x256) 13.2 / 57.7 / 70.3, 2x4x32x2
/// (128x128) 24.3 / 57.7 / 69.4, 2x2x32x2 (128x64) 30.4 / 43.5 / 51.8; the
/// f32 tiled kernel 12.4 / 32.6 / 33.0, PyTorch FP32 26.2 / 44.1 / 49.8.
/// 4x2x16x4 (256x128, runs 86-92) was added for shapes whose 256-row
/// blocks save rounds with the last rows apart (as the f16 kernel's do at
/// 4097); at 4097 the model takes 128x128 blocks instead.
/// 2x2x32x4 (128x128 on 4 subgroups) was dropped (runs 86-92): 17.0 /
/// 41.8 / 50.8 TFLOP/s, behind 2x4x32x2's 128x128 blocks everywhere.
pub const COOP_SPLIT_CONFIGS: [(u32, u32, u32, u32); 5] = [
    (2, 4, 16, 4),
    (2, 4, 32, 2),
    (4, 2, 16, 4),
    (4, 2, 16, 2),
    (2, 2, 32, 2),
];

/// Estimated time of the f32 split kernel `kernel` on `batches` x `m` x `n`
/// outputs, in arbitrary units: whole rounds of one workgroup per compute
/// unit, each as long as a block takes at the layout's full-grid speed
/// ([`COOP_SPLIT_TFLOPS`]). `None` for other kernels and layouts not listed.
/// It picks 128x64 blocks at 1024^3 (1 round of 128, where 128x256 blocks
/// take as long for 32), 128x256 at 4096^3 and, with the last row apart,
/// 128x128 at 4097 (8 whole rounds instead of 5 of 128x256 blocks, the
/// fifth a quarter full).
pub fn coop_split_time(
    p: &AdapterProfile,
    kernel: MatmulKernel,
    m: usize,
    n: usize,
    batches: usize,
) -> Option<f64> {
    let MatmulKernel::Coop {
        warps_m,
        warps_n,
        bk,
        frags_n,
        split: true,
        ..
    } = kernel
    else {
        return None;
    };
    let i = COOP_SPLIT_CONFIGS
        .iter()
        .position(|&c| c == (warps_m, warps_n, bk, frags_n))?;
    let speed = COOP_SPLIT_TFLOPS[i];
    let rounds = workgroup_count(kernel, m, n, batches).div_ceil(u64::from(p.compute_units.max(1)));
    let (bm, bn) = kernel.block();
    Some(rounds as f64 * f64::from(bm * bn) / speed)
}

/// The f32 split layouts the adapter can run, in [`COOP_SPLIT_CONFIGS`] order.
pub(crate) fn coop_split_layouts(p: &AdapterProfile) -> Vec<MatmulKernel> {
    if let Some(kernel) = split_layout_override().and_then(|c| MatmulKernel::coop_split_for(p, c)) {
        return vec![kernel];
    }
    COOP_SPLIT_CONFIGS
        .into_iter()
        .filter_map(|c| MatmulKernel::coop_split_for(p, c))
        .collect()
}

/// The f32 split kernel for an f32 `m x n x k` problem (`batches` of them)
/// on an adapter with tensor cores: the layout of [`COOP_SPLIT_CONFIGS`]
/// with the least [`coop_split_time`] (the first of equals). Unless
/// `forced`, only for problems of at least [`COOP_SPLIT_MIN_MACS`] with K
/// at least [`COOP_SPLIT_MIN_K`].
pub fn coop_split_for_shape(
    p: &AdapterProfile,
    (m, n, k): (usize, usize, usize),
    batches: usize,
    forced: bool,
) -> Option<MatmulKernel> {
    let macs = (m as u64)
        .saturating_mul(n as u64)
        .saturating_mul(k as u64)
        .saturating_mul(batches as u64);
    if !forced && (macs < COOP_SPLIT_MIN_MACS || k < COOP_SPLIT_MIN_K) {
        return None;
    }
    fastest_split(coop_split_layouts(p), |c| {
        coop_split_time(p, c, m, n, batches)
    })
}

/// The kernel of `layouts` with the least `time` (the first of equals; the
/// first layout when none has a time).
pub(crate) fn fastest_split(
    layouts: Vec<MatmulKernel>,
    time: impl Fn(MatmulKernel) -> Option<f64>,
) -> Option<MatmulKernel> {
    let first = layouts.first().copied();
    layouts
        .into_iter()
        .filter_map(|c| Some((c, time(c)?)))
        .fold(
            None,
            |best: Option<(MatmulKernel, f64)>, (c, t)| match best {
                Some((_, bt)) if bt <= t => best,
                _ => Some((c, t)),
            },
        )
        .map(|(c, _)| c)
        .or(first)
}

/// One f32 split layout for every shape (a dev override, to compare layouts
/// through whole plans: padding, the last-row split); ignored when the
/// adapter cannot run it.
pub(crate) fn split_layout_override() -> Option<(u32, u32, u32, u32)> {
    crate::dev::overrides().split_layout
}
