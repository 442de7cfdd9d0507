//! Which kernel multiplies by a quantised weight: the fused GEMV for its
//! block axis, the tensor-core GEMM, or dequantise + matmul (a pure
//! function of the problem).

use crate::quant::{QuantAxis, QuantFormat, QuantLayout};

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
    /// Dequantise to f32, then the matmul engine; the reason is logged.
    Dequantize(&'static str),
}

/// The route for `m` rows of x against a weight of `format` laid out as
/// `lay`; `tensor_cores`: x is f16 and the f16 dispatcher runs this shape
/// on the tensor-core kernel.
pub fn quant_route(
    format: QuantFormat,
    lay: &QuantLayout,
    (m, k): (usize, usize),
    tensor_cores: bool,
) -> QuantRoute {
    if m > QUANT_GEMV_MAX_ROWS {
        // A run of 8 k staged by the GEMM stays inside one block.
        if tensor_cores && lay.block.is_multiple_of(8) {
            return QuantRoute::TensorCores;
        }
        return QuantRoute::Dequantize("more than 8 rows of x, and no f16 tensor-core route");
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

/// Invocations per workgroup of the column-blocked GEMV: 1024 (32 slices
/// of K) where the adapter allows, else its largest power of two.
pub fn quant_cols_workgroup(max_invocations: u32) -> u32 {
    let wg = max_invocations.clamp(32, 1024);
    1 << (31 - wg.leading_zeros())
}
