//! Which kernel multiplies by a quantised weight: the fused GEMV for its
//! block axis, the tensor-core GEMM, the tiled GEMM, or dequantise +
//! matmul (a pure function of the problem and the adapter's kinds of
//! kernel), and the tiled GEMM's tile.

use crate::dtype::DType;
use crate::gpu::AdapterProfile;
use crate::problem::MatmulShape;
use crate::quant::{QuantAxis, QuantFormat, QuantLayout};
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

/// Adjacent columns per workgroup of the column-blocked GEMV (`COLS` in
/// `shaders/quant_gemv_cols.wgsl`): 32, one subgroup's run.
pub fn quant_cols_columns() -> u32 {
    crate::dev::overrides().quant_cols_columns.unwrap_or(32)
}

/// Workgroups along K per group of columns of the column-blocked GEMV
/// (`KSPLIT`): 1 (each workgroup walks all of K).
pub fn quant_cols_ksplit() -> u32 {
    crate::dev::overrides().quant_cols_ksplit.unwrap_or(1)
}

/// Invocations per workgroup of the column-blocked GEMV: 1024 (32 slices
/// of K) where the adapter allows, else its largest power of two.
pub fn quant_cols_workgroup(max_invocations: u32) -> u32 {
    let wg = crate::dev::overrides()
        .quant_cols_wg
        .unwrap_or(1024)
        .min(max_invocations)
        .clamp(32, 1024);
    1 << (31 - wg.leading_zeros())
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
