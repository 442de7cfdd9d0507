//! Which kernel multiplies by a quantised weight: the fused GEMV for its
//! block axis, the tensor-core GEMM, the tiled GEMM, or dequantise +
//! matmul (a pure function of the problem and the adapter's kinds of
//! kernel), and the tiled GEMM's tile.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::dtype::DType;
use crate::gpu::AdapterProfile;
use crate::problem::MatmulShape;
use crate::quant::{QuantAxis, QuantFormat, QuantLayout};
use crate::tune::autotune::Candidate;
use crate::tune::route::{MatmulOptions, f32_on_tensor_cores};
use crate::tune::{
    Layout, MatmulKernel, TILE_CONFIGS, TileConfig, WAVE_FILL, choose_matmul_layout,
    workgroup_count,
};

/// Rows of x the fused GEMVs take (more go through dequantise + matmul).
pub const QUANT_GEMV_MAX_ROWS: usize = 8;

/// The route of `x[M, K] @ W` for a quantised `W`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QuantRoute {
    /// `shaders/quant_gemv_cols.wgsl` (blocks down the columns of `[K, N]`).
    GemvColumns,
    /// `shaders/quant_gemv.wgsl` (blocks along the rows of `[N, K]`).
    GemvRows,
    /// `shaders/matmul_coop.wgsl` with the weight decoded into its f16
    /// tiles (`shaders/matmul_coop_quant.wgsl`).
    TensorCores,
    /// The register-tiled matmul with the weight decoded into its f32
    /// tiles (`shaders/quant_matmul_tiled.wgsl`).
    Tiled,
    /// Dequantise to f32, then the matmul engine; the reason is logged.
    Dequantize(&'static str),
}

/// The kinds of GEMM kernel an adapter offers a quantised weight.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QuantEngines {
    /// x is f16 and the f16 dispatcher runs this shape on the tensor-core
    /// kernel.
    pub tensor_cores: bool,
    /// The matmul dispatcher runs this shape on its register-tiled kernel
    /// (GPUs without tensor cores), of which the tiled quantised GEMM is a
    /// variant. Where it picks another engine (the f32 split on tensor
    /// cores, a CPU adapter's kernel without workgroup tiles) the weight is
    /// dequantised for that engine: docs/perf/quant.md.
    pub tiled: bool,
}

/// The route for `m` rows of x against a weight of `format` laid out as
/// `lay`, on an adapter offering `engines`.
pub fn quant_route(
    format: QuantFormat,
    lay: &QuantLayout,
    (m, k): (usize, usize),
    engines: QuantEngines,
) -> QuantRoute {
    if m > QUANT_GEMV_MAX_ROWS {
        // A run of 8 k staged by the GEMMs stays inside one block.
        if !lay.block.is_multiple_of(8) {
            return QuantRoute::Dequantize("more than 8 rows of x, and blocks not a multiple of 8");
        }
        if engines.tensor_cores {
            return QuantRoute::TensorCores;
        }
        if engines.tiled {
            return QuantRoute::Tiled;
        }
        return QuantRoute::Dequantize("more than 8 rows of x, and the matmul engine is not the tiled kernel");
    }
    match lay.axis {
        QuantAxis::Columns => {
            if !k.is_multiple_of(lay.block) || !lay.words_per_block().is_multiple_of(2) {
                QuantRoute::Dequantize("K not a multiple of the block, or an odd number of words per block")
            } else {
                QuantRoute::GemvColumns
            }
        }
        QuantAxis::Rows => {
            if !k.is_multiple_of(32 / format.element_bits() as usize) {
                QuantRoute::Dequantize("K not a multiple of a word's elements")
            } else {
                QuantRoute::GemvRows
            }
        }
    }
}

/// Whether the per-word row quantisers (`quantize_words`, `quantize_vec`)
/// meet a block's statistics by subgroup shuffles
/// (`shaders/quant_lanes_subgroup.wgsl`) rather than through workgroup
/// memory and a barrier: where the adapter has subgroups, a block's
/// `words` (words per block) are a power of two no larger than its
/// smallest subgroup, and its largest divides the workgroup `wg`. The
/// `dev` feature's switch (`quant_slots`) turns it off to measure. Down
/// columns the same kernel (adjacent blocks in adjacent columns) lost to
/// `quantize_cols` (H100, run 177: MXFP4 157.0 against 139.3 us at 4096
/// x 14336, MXFP8 177.3 / 175.1): each subgroup load spans a block's row
/// groups, 4-8 cache lines where `quantize_cols` reads one.
pub fn quantize_shuffles(p: &AdapterProfile, words: u32, wg: u32) -> bool {
    let fits = p.subgroups
        && words.is_power_of_two()
        && words <= p.subgroup_min_size
        && p.subgroup_max_size > 0
        && wg.is_multiple_of(p.subgroup_max_size);
    fits && !crate::dev::overrides().quant_slots
}

/// Whether quantising `format` down columns takes one invocation per block
/// (`quantize_col_blocks`) rather than one per word with the block's
/// statistics met in workgroup memory (`quantize_cols`, which needs 4
/// `words` per block to fit the workgroup `wg`). Per block where the block
/// scale costs a division (NVFP4, the integers): the per-word kernel
/// derives it once per word. Run 170 (H200, 4096 x 14336 f32): per block
/// NVFP4 272.9 us against 306.8, int8 185.8 / 226.1, int4 with zero points
/// 181.7 / 239.8; per word MXFP4 132.5 against 148.3, FP8 with f32 scales
/// 321.5 / 409.4 (blocks of 128 rows read twice), MXFP8 even. The `dev`
/// feature's switch `quant_slots` keeps the per-word kernel (to measure).
pub fn quantize_col_blocks(format: QuantFormat, words: u32, wg: u32) -> bool {
    if 4 * words > wg {
        return true;
    }
    let divides = matches!(
        format,
        QuantFormat::Nvfp4 | QuantFormat::Int8 | QuantFormat::Int4 | QuantFormat::Int4Zp
    );
    divides && !crate::dev::overrides().quant_slots
}

/// Adjacent columns per workgroup of the column-blocked GEMV (`COLS` in
/// `shaders/quant_gemv_cols.wgsl`): 32, one subgroup's run.
pub fn quant_cols_columns() -> u32 {
    crate::dev::overrides().quant_cols_columns.unwrap_or(32)
}

/// The column-blocked GEMV's launch (`shaders/quant_gemv_cols.wgsl`):
/// invocations per workgroup, and workgroups along K per group of columns
/// (`KSPLIT`; with more than one, each adds a share of K's blocks into
/// partial sums that a second dispatch adds).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct QuantGemvLaunch {
    /// Invocations per workgroup: a power of two from 32 to 1024.
    pub wg: u32,
    /// Workgroups along K: 1, 2 or 4.
    pub ksplit: u32,
}

impl fmt::Display for QuantGemvLaunch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "quantized GEMV {} invocations, K over {}", self.wg, self.ksplit)
    }
}

impl Candidate for QuantGemvLaunch {}

/// Workgroup sizes the column-blocked GEMV is built for.
pub const QUANT_GEMV_WORKGROUPS: [u32; 3] = [256, 512, 1024];

/// K splits the column-blocked GEMV is built for.
pub const QUANT_GEMV_KSPLITS: [u32; 3] = [1, 2, 4];

/// The heuristic's launch for a weight of `blocks` blocks along K: 1024
/// invocations (32 slices of K; the adapter's largest power of two where
/// it allows fewer) and K unsplit, the best of run 167's sweep at 4096 x
/// 14336 (docs/perf/quant.md). The `dev` feature's switches replace either.
pub fn quant_gemv_launch(max_invocations: u32, blocks: usize) -> QuantGemvLaunch {
    let o = crate::dev::overrides();
    let wg = o.quant_cols_wg.unwrap_or(1024).min(max_invocations).clamp(32, 1024);
    QuantGemvLaunch {
        wg: 1 << (31 - wg.leading_zeros()),
        ksplit: o.quant_cols_ksplit.unwrap_or(1).min(blocks.max(1) as u32),
    }
}

/// Whether the `dev` feature's switches fix the launch (no tuning then).
pub fn quant_gemv_launch_fixed() -> bool {
    let o = crate::dev::overrides();
    o.quant_cols_wg.is_some() || o.quant_cols_ksplit.is_some()
}

/// The autotuner's candidates for the column-blocked GEMV with `m` rows of
/// x, the heuristic's first; the fast mode times the first three. One row:
/// K split over 2 workgroups (shorter chains of dependent loads per
/// workgroup and more workgroups in flight, the lead of run 167: a 4096 x
/// 4096 weight fills one workgroup per SM), the same with half the
/// invocations (two workgroups per SM where registers allow only one of
/// the full size), K over 4, half the invocations unsplit. Four rows and
/// more hold 4-8 sums per invocation and their x values: half and a
/// quarter of the invocations first (more registers per invocation), then
/// the splits. Each fits the adapter and gives every share of K at least
/// one block.
pub fn quant_gemv_candidates(max_invocations: u32, blocks: usize, m: usize) -> Vec<QuantGemvLaunch> {
    let first = quant_gemv_launch(max_invocations, blocks);
    let wide = first.wg;
    let more = if m >= 4 {
        [(wide / 2, 1), (wide / 4, 1), (wide, 2), (wide / 2, 2)]
    } else {
        [(wide, 2), (wide / 2, 2), (wide, 4), (wide / 2, 1)]
    };
    let mut out = vec![first];
    for (wg, ksplit) in more {
        let launch = QuantGemvLaunch { wg, ksplit };
        let built = QUANT_GEMV_WORKGROUPS.contains(&wg) && QUANT_GEMV_KSPLITS.contains(&ksplit);
        if built && ksplit as usize <= blocks && !out.contains(&launch) {
            out.push(launch);
        }
    }
    out
}

/// The tiled quantised GEMM's tile for `x[m, ..] @ W[.., n]`: as the f32
/// dispatcher picks its tiled kernel, the largest GPU tile shape that fits
/// the adapter and whose grid fills a wave, else the smallest that fits
/// (every shape has a K step that is a multiple of 8, one run per column).
pub fn quant_tiled_tile(p: &AdapterProfile, m: usize, n: usize) -> Option<TileConfig> {
    let units = p.compute_units.max(1) as f64;
    let fitting: Vec<TileConfig> = TILE_CONFIGS.into_iter().filter(|t| t.fits(p)).collect();
    let fills = |tile: &&TileConfig| {
        let kernel = MatmulKernel::Tiled { tile: **tile, vec4: false };
        workgroup_count(kernel, m, n, 1) as f64 >= WAVE_FILL * units
    };
    fitting.iter().find(fills).or(fitting.last()).copied()
}

/// Whether the matmul dispatcher runs `x[m, k] @ W[k, n]` of `dtype` on
/// its register-tiled kernel, of which the tiled quantised GEMM is a
/// variant ([`QuantEngines::tiled`]). Elsewhere the dequantised weight
/// goes to the engine it picks: f32 on tensor cores (split into f16
/// halves) from the size where the f32 dispatcher takes them (the H200 at
/// 4096^3: the f32 split 1.83 ms plus a 30 us dequantise, against 4.3-4.8
/// ms in the tiled GEMM; docs/perf/quant.md), a CPU adapter's own kernel.
pub fn runs_tiled(p: &AdapterProfile, dtype: DType, (m, k, n): (usize, usize, usize)) -> bool {
    if m <= QUANT_GEMV_MAX_ROWS || n == 0 {
        return false;
    }
    let Ok(shape) = MatmulShape::with_transposes(&[m, k], &[k, n], false, false) else {
        return false;
    };
    let layout = Layout::of(&shape);
    if dtype == DType::F32
        && f32_on_tensor_cores(p, &MatmulOptions::default(), (m, n, k), 1, layout, false).is_some()
    {
        return false;
    }
    match choose_matmul_layout(p, dtype, (m, n, k), 1, layout).kernel {
        MatmulKernel::Tiled { tile, .. } | MatmulKernel::SplitK { tile, .. } => tile.reg == 8,
        _ => false,
    }
}
