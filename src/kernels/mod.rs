//! The shader registry: every `shaders/*.wgsl` embedded with `include_str!`,
//! specialised, compiled once per device and cached.
//!
//! Specialisation comes in two forms, each used where it can express the
//! parameter:
//! - **WGSL `override` constants** (workgroup sizes, loop bounds): passed as
//!   pipeline constants, no text changes.
//! - **Text specialisation**, only for what WGSL cannot parameterise at pipeline
//!   creation: the element type (`alias Elem = f32;` becomes `f16` with
//!   `enable f16;`) and `const` values that size function-scope arrays
//!   (register tiles: `const TM: u32 = 4u;`). Each shader is valid WGSL as
//!   written (its defaults), so tools can read the files directly.
//!
//! This module never decides which kernel runs; `tune` does.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

pub mod codegen;

use crate::dtype::DType;
use crate::error::{Error, Result};

/// Every kernel family wgtile ships, one WGSL file each (plus shared parts).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kernel {
    /// Fills a buffer with a 32-bit pattern (zeros, NaN poison, constants).
    Fill,
    /// Fills a buffer with hashed uniform values in [-1, 1) (f32 or f16 pairs).
    FillRandom,
    /// Matmul, one invocation per output element: the on-GPU reference.
    MatmulNaive,
    /// Register-tiled matmul (workgroup tiles + 8x8 per invocation), scalar
    /// global loads: any shape.
    MatmulTiled,
    /// The same compute core with 16-byte global loads and stores: K and N
    /// multiples of 4.
    MatmulTiledVec4,
    /// The scalar-load tiled kernel with a 16 x 16 register tile per
    /// invocation (CPU adapters).
    MatmulTiled16,
    /// The vec4 tiled kernel with a 16 x 16 register tile (CPU adapters).
    MatmulTiled16Vec4,
    /// f16 matmul on tensor cores (cooperative matrices), f32 accumulation.
    MatmulCoop,
    /// Copies a batch of matrices into another row/column count, zero-filling
    /// or cropping (the padding layer).
    PadCopy,
    /// The same as bit moves into rows of a multiple of 16 bytes, 16 bytes
    /// per invocation (the padding layer's A and B, f16 or f32).
    PadCopyHalves,
    /// M = 1 matmul (vector times matrix), K split over workgroups into f32 partials.
    GemvVecmat,
    /// The same reading B two adjacent columns at a time (N and B's row and
    /// batch strides even).
    GemvVecmatPairs,
    /// M = 1 in one dispatch: a workgroup owns a few 16-byte words of
    /// columns over all of K (N and B's strides multiples of 16 bytes).
    GemvVecmatWide,
    /// Sums the vecmat partials into the output.
    GemvReduce,
    /// N = 1 matmul (matrix times vector).
    GemvMatvec,
    /// Sums split-K partial sums and applies the epilogue.
    MatmulSplitKReduce,
    /// Partial maxima of |A| and |B| for the tensor-core matmul's f32 split
    /// form (its per-operand power-of-two scales).
    MatmulSplitScale,
    /// Row sum/max (`OP` const) over the last axis, workgroup-memory tree;
    /// with `split` > 1 writes f32 partials for [`Kernel::ReduceCombine`].
    Reduce,
    /// [`Kernel::Reduce`] with subgroup reductions (needs `subgroups`).
    ReduceSubgroup,
    /// Second pass of a split reduction: one workgroup per row sums (or
    /// maxes) its partials.
    ReduceCombine,
    /// Softmax / log-softmax of rows held in registers (one read).
    Softmax,
    /// [`Kernel::Softmax`] with subgroup reductions.
    SoftmaxSubgroup,
    /// Online softmax for rows longer than the registers hold (two reads).
    SoftmaxOnline,
    /// [`Kernel::SoftmaxOnline`] with subgroup reductions.
    SoftmaxOnlineSubgroup,
    /// LayerNorm / RMSNorm of rows held in registers (one read).
    Norm,
    /// [`Kernel::Norm`] with subgroup reductions.
    NormSubgroup,
    /// LayerNorm / RMSNorm of long rows: streamed Welford/Chan statistics,
    /// then a second read to write.
    NormStreaming,
    /// Copy through the row kernels' load/store hooks (the bandwidth reference).
    RowCopy,
    /// FlashAttention forward (online softmax, K/V blocks streamed through
    /// workgroup memory); with `SPLIT = 1` the split-KV (flash-decoding) pass.
    AttentionFlash,
    /// FlashAttention forward on tensor cores (cooperative matrices, f16
    /// inputs, Vulkan only).
    AttentionFlashCoop,
    /// The tensor-core flash kernel's algorithm with the matrix operations
    /// emulated per invocation (no cooperative matrices; slow): tests the
    /// algorithm on any adapter with f16 and subgroups.
    AttentionFlashCoopEmulated,
    /// The per-head power-of-two exponents of q, k and v that the tensor-core
    /// flash kernel's f32 (split) form scales its inputs by.
    AttentionSplitScale,
    /// Merges split-KV partial attention states into the output.
    AttentionMerge,
    /// Split-KV decode attention for few query rows (bandwidth-shaped;
    /// writes the merge kernel's partial states).
    AttentionDecode,
    /// [`Kernel::AttentionDecode`] adding each key's partial dots with
    /// subgroup shuffles (one barrier per block; `SHUFFLE = 1`).
    AttentionDecodeShuffle,
    /// Naive attention, pass 1: the full score matrix S = mask(scale Q K^T).
    AttentionScores,
    /// Naive attention, pass 2: row softmax of S in place, and logsumexp.
    AttentionSoftmax,
    /// Naive attention, pass 3: O = P V.
    AttentionPv,
    /// Attention backward: lse in log2 units and Delta = rowsum(dO * O).
    AttentionBwdPrepare,
    /// Attention backward: dK and dV per key block (recomputing P).
    AttentionBwdDkDv,
    /// Attention backward: dQ per query block (recomputing P).
    AttentionBwdDq,
    /// Attention backward on tensor cores: dK and dV per block of keys
    /// (cooperative matrices, f16, Vulkan only).
    AttentionBwdCoopDkDv,
    /// Attention backward on tensor cores: dQ per block of query rows.
    AttentionBwdCoopDq,
    /// The tensor-core dK/dV kernel's algorithm with emulated matrix
    /// operations (tests, on any adapter with f16 and subgroups).
    AttentionBwdCoopDkDvEmulated,
    /// The tensor-core dQ kernel's algorithm with emulated matrix operations.
    AttentionBwdCoopDqEmulated,
    /// Split-KV decode on tensor cores: a subgroup per (KV head, 16 packed
    /// rows, key split), K and V fragments loaded straight from memory.
    AttentionDecodeCoop,
    /// The tensor-core decode kernel's algorithm with emulated matrix
    /// operations (tests).
    AttentionDecodeCoopEmulated,
    /// Matmul for CPU adapters (llvmpipe): one subgroup of 8 lanes per
    /// workgroup shares its rows of A through subgroupBroadcast, no workgroup
    /// memory; strided scalar loads, any layout.
    MatmulBroadcast,
    /// The same with 16-byte loads and stores (row-major operands, pitches
    /// and N multiples of 4).
    MatmulBroadcastVec4,
}

const MATMUL_TILED_CORE: &str = include_str!("../../shaders/matmul_tiled_core.wgsl");
const MATMUL_TILED16_CORE: &str = include_str!("../../shaders/matmul_tiled16_core.wgsl");
const MATMUL_BROADCAST_CORE: &str = include_str!("../../shaders/matmul_broadcast_core.wgsl");
const MATMUL_EPILOGUE: &str = include_str!("../../shaders/matmul_epilogue.wgsl");
const MATMUL_PARAMS: &str = include_str!("../../shaders/matmul_params.wgsl");
const MATMUL_GEMV: &str = include_str!("../../shaders/matmul_gemv.wgsl");
const ROWOPS_COMMON: &str = include_str!("../../shaders/rowops_common.wgsl");
const ROWOPS_PLAIN: &str = include_str!("../../shaders/rowops_plain.wgsl");
const ROWOPS_SUBGROUP: &str = include_str!("../../shaders/rowops_subgroup.wgsl");
const ROWOPS_LOAD: &str = include_str!("../../shaders/rowops_load.wgsl");
const ROWOPS_STORE: &str = include_str!("../../shaders/rowops_store.wgsl");
const ROWOPS_WRITE: &str = include_str!("../../shaders/rowops_write.wgsl");
const REDUCE: &str = include_str!("../../shaders/reduce.wgsl");
const SOFTMAX: &str = include_str!("../../shaders/softmax.wgsl");
const NORM: &str = include_str!("../../shaders/norm.wgsl");
const ATTENTION_COMMON: &str = include_str!("../../shaders/attention_common.wgsl");
const ATTENTION_FLASH_COOP: &str = include_str!("../../shaders/attention_flash_coop.wgsl");
/// The f32 split arithmetic of the tensor-core kernels (SPLIT = 1).
const SPLIT_F32: &str = include_str!("../../shaders/split_f32.wgsl");
const ATTENTION_DECODE_COOP: &str = include_str!("../../shaders/attention_decode_coop.wgsl");
const ATTENTION_COOP_ROWS: &str = include_str!("../../shaders/attention_coop_rows.wgsl");
const ATTENTION_COOP_MMA: &str = include_str!("../../shaders/attention_coop_mma.wgsl");
const ATTENTION_COOP_EMULATED: &str = include_str!("../../shaders/attention_coop_emulated.wgsl");
const ATTENTION_BACKWARD_COMMON: &str =
    include_str!("../../shaders/attention_backward_common.wgsl");
const ATTENTION_BWD_COOP_COMMON: &str =
    include_str!("../../shaders/attention_bwd_coop_common.wgsl");
const ATTENTION_NAIVE: &str = include_str!("../../shaders/attention_naive.wgsl");

impl Kernel {
    /// All kernels, for validation sweeps.
    pub const ALL: [Kernel; 49] = [
        Kernel::Fill,
        Kernel::FillRandom,
        Kernel::MatmulNaive,
        Kernel::MatmulTiled,
        Kernel::MatmulTiledVec4,
        Kernel::MatmulTiled16,
        Kernel::MatmulTiled16Vec4,
        Kernel::MatmulCoop,
        Kernel::PadCopy,
        Kernel::PadCopyHalves,
        Kernel::GemvVecmat,
        Kernel::GemvVecmatPairs,
        Kernel::GemvVecmatWide,
        Kernel::GemvReduce,
        Kernel::GemvMatvec,
        Kernel::MatmulSplitKReduce,
        Kernel::MatmulSplitScale,
        Kernel::Reduce,
        Kernel::ReduceSubgroup,
        Kernel::ReduceCombine,
        Kernel::Softmax,
        Kernel::SoftmaxSubgroup,
        Kernel::SoftmaxOnline,
        Kernel::SoftmaxOnlineSubgroup,
        Kernel::Norm,
        Kernel::NormSubgroup,
        Kernel::NormStreaming,
        Kernel::RowCopy,
        Kernel::AttentionFlash,
        Kernel::AttentionFlashCoop,
        Kernel::AttentionFlashCoopEmulated,
        Kernel::AttentionSplitScale,
        Kernel::AttentionMerge,
        Kernel::AttentionScores,
        Kernel::AttentionSoftmax,
        Kernel::AttentionPv,
        Kernel::AttentionBwdPrepare,
        Kernel::AttentionBwdDkDv,
        Kernel::AttentionBwdDq,
        Kernel::AttentionBwdCoopDkDv,
        Kernel::AttentionBwdCoopDq,
        Kernel::AttentionBwdCoopDkDvEmulated,
        Kernel::AttentionBwdCoopDqEmulated,
        Kernel::AttentionDecodeCoop,
        Kernel::AttentionDecodeCoopEmulated,
        Kernel::AttentionDecode,
        Kernel::AttentionDecodeShuffle,
        Kernel::MatmulBroadcast,
        Kernel::MatmulBroadcastVec4,
    ];

    /// The WGSL text as written in `shaders/`: the kernel's own file, then any
    /// shared part it is built from (concatenated in this order).
    pub const fn parts(self) -> &'static [&'static str] {
        match self {
            Kernel::Fill | Kernel::FillRandom => &[include_str!("../../shaders/fill.wgsl")],
            Kernel::MatmulNaive => &[
                include_str!("../../shaders/matmul_naive.wgsl"),
                MATMUL_PARAMS,
                MATMUL_EPILOGUE,
            ],
            Kernel::MatmulTiled => &[
                include_str!("../../shaders/matmul_tiled.wgsl"),
                MATMUL_TILED_CORE,
                MATMUL_PARAMS,
                MATMUL_EPILOGUE,
            ],
            Kernel::MatmulTiledVec4 => &[
                include_str!("../../shaders/matmul_tiled_vec4.wgsl"),
                MATMUL_TILED_CORE,
                MATMUL_PARAMS,
                MATMUL_EPILOGUE,
            ],
            Kernel::MatmulTiled16 => &[
                include_str!("../../shaders/matmul_tiled.wgsl"),
                MATMUL_TILED16_CORE,
                MATMUL_PARAMS,
                MATMUL_EPILOGUE,
            ],
            Kernel::MatmulTiled16Vec4 => &[
                include_str!("../../shaders/matmul_tiled_vec4.wgsl"),
                MATMUL_TILED16_CORE,
                MATMUL_PARAMS,
                MATMUL_EPILOGUE,
            ],
            Kernel::MatmulBroadcast => &[
                include_str!("../../shaders/matmul_broadcast.wgsl"),
                MATMUL_BROADCAST_CORE,
                MATMUL_PARAMS,
                MATMUL_EPILOGUE,
            ],
            Kernel::MatmulBroadcastVec4 => &[
                include_str!("../../shaders/matmul_broadcast_vec4.wgsl"),
                MATMUL_BROADCAST_CORE,
                MATMUL_PARAMS,
                MATMUL_EPILOGUE,
            ],
            Kernel::MatmulCoop => &[
                include_str!("../../shaders/matmul_coop.wgsl"),
                SPLIT_F32,
                MATMUL_PARAMS,
                MATMUL_EPILOGUE,
            ],
            Kernel::PadCopy | Kernel::PadCopyHalves => {
                &[include_str!("../../shaders/pad_copy.wgsl")]
            }
            Kernel::GemvVecmat
            | Kernel::GemvVecmatPairs
            | Kernel::GemvVecmatWide
            | Kernel::GemvReduce
            | Kernel::GemvMatvec => &[MATMUL_GEMV, MATMUL_PARAMS, MATMUL_EPILOGUE],
            Kernel::MatmulSplitScale => &[include_str!("../../shaders/matmul_split_scale.wgsl")],
            Kernel::MatmulSplitKReduce => &[
                include_str!("../../shaders/matmul_splitk.wgsl"),
                MATMUL_PARAMS,
                MATMUL_EPILOGUE,
            ],
            // Row kernels (shaders/README.md: the fusion hooks are the load and store parts).
            Kernel::Reduce | Kernel::ReduceCombine => {
                &[REDUCE, ROWOPS_COMMON, ROWOPS_PLAIN, ROWOPS_LOAD]
            }
            Kernel::ReduceSubgroup => &[ROWOPS_SUBGROUP, REDUCE, ROWOPS_COMMON, ROWOPS_LOAD],
            Kernel::Softmax | Kernel::SoftmaxOnline => &[
                SOFTMAX,
                ROWOPS_COMMON,
                ROWOPS_PLAIN,
                ROWOPS_LOAD,
                ROWOPS_STORE,
                ROWOPS_WRITE,
            ],
            Kernel::SoftmaxSubgroup | Kernel::SoftmaxOnlineSubgroup => &[
                ROWOPS_SUBGROUP,
                SOFTMAX,
                ROWOPS_COMMON,
                ROWOPS_LOAD,
                ROWOPS_STORE,
                ROWOPS_WRITE,
            ],
            Kernel::Norm | Kernel::NormStreaming => &[
                NORM,
                ROWOPS_COMMON,
                ROWOPS_PLAIN,
                ROWOPS_LOAD,
                ROWOPS_STORE,
                ROWOPS_WRITE,
            ],
            Kernel::NormSubgroup => &[
                ROWOPS_SUBGROUP,
                NORM,
                ROWOPS_COMMON,
                ROWOPS_LOAD,
                ROWOPS_STORE,
                ROWOPS_WRITE,
            ],
            Kernel::RowCopy => &[
                include_str!("../../shaders/rowops_copy.wgsl"),
                ROWOPS_COMMON,
                ROWOPS_PLAIN,
                ROWOPS_LOAD,
                ROWOPS_STORE,
                ROWOPS_WRITE,
            ],
            Kernel::AttentionFlash => &[
                include_str!("../../shaders/attention_flash.wgsl"),
                ATTENTION_COMMON,
            ],
            Kernel::AttentionFlashCoop => &[
                ATTENTION_COOP_MMA,
                ATTENTION_FLASH_COOP,
                ATTENTION_COOP_ROWS,
                SPLIT_F32,
                ATTENTION_COMMON,
            ],
            Kernel::AttentionFlashCoopEmulated => &[
                ATTENTION_COOP_EMULATED,
                ATTENTION_FLASH_COOP,
                ATTENTION_COOP_ROWS,
                SPLIT_F32,
                ATTENTION_COMMON,
            ],
            Kernel::AttentionSplitScale => &[
                include_str!("../../shaders/attention_split_scale.wgsl"),
                ATTENTION_COMMON,
            ],
            Kernel::AttentionMerge => &[
                include_str!("../../shaders/attention_merge.wgsl"),
                ATTENTION_COMMON,
            ],
            Kernel::AttentionDecode => &[
                include_str!("../../shaders/attention_decode.wgsl"),
                include_str!("../../shaders/attention_decode_plain.wgsl"),
                ATTENTION_COMMON,
            ],
            Kernel::AttentionDecodeShuffle => &[
                include_str!("../../shaders/attention_decode.wgsl"),
                include_str!("../../shaders/attention_decode_shuffle.wgsl"),
                ATTENTION_COMMON,
            ],
            Kernel::AttentionScores | Kernel::AttentionSoftmax | Kernel::AttentionPv => {
                &[ATTENTION_NAIVE, ATTENTION_COMMON]
            }
            Kernel::AttentionBwdPrepare | Kernel::AttentionBwdDkDv | Kernel::AttentionBwdDq => &[
                include_str!("../../shaders/attention_backward.wgsl"),
                ATTENTION_BACKWARD_COMMON,
                ATTENTION_COMMON,
            ],
            Kernel::AttentionDecodeCoop => &[
                ATTENTION_COOP_MMA,
                include_str!("../../shaders/attention_decode_coop_mma.wgsl"),
                ATTENTION_DECODE_COOP,
                ATTENTION_COOP_ROWS,
                ATTENTION_COMMON,
            ],
            Kernel::AttentionDecodeCoopEmulated => &[
                ATTENTION_COOP_EMULATED,
                include_str!("../../shaders/attention_decode_coop_emulated.wgsl"),
                ATTENTION_DECODE_COOP,
                ATTENTION_COOP_ROWS,
                ATTENTION_COMMON,
            ],
            Kernel::AttentionBwdCoopDkDv => &[
                ATTENTION_COOP_MMA,
                include_str!("../../shaders/attention_bwd_coop_dkdv.wgsl"),
                ATTENTION_BWD_COOP_COMMON,
                ATTENTION_BACKWARD_COMMON,
                ATTENTION_COMMON,
            ],
            Kernel::AttentionBwdCoopDq => &[
                ATTENTION_COOP_MMA,
                include_str!("../../shaders/attention_bwd_coop_dq.wgsl"),
                ATTENTION_BWD_COOP_COMMON,
                ATTENTION_BACKWARD_COMMON,
                ATTENTION_COMMON,
            ],
            Kernel::AttentionBwdCoopDkDvEmulated => &[
                ATTENTION_COOP_EMULATED,
                include_str!("../../shaders/attention_bwd_coop_dkdv.wgsl"),
                ATTENTION_BWD_COOP_COMMON,
                ATTENTION_BACKWARD_COMMON,
                ATTENTION_COMMON,
            ],
            Kernel::AttentionBwdCoopDqEmulated => &[
                ATTENTION_COOP_EMULATED,
                include_str!("../../shaders/attention_bwd_coop_dq.wgsl"),
                ATTENTION_BWD_COOP_COMMON,
                ATTENTION_BACKWARD_COMMON,
                ATTENTION_COMMON,
            ],
        }
    }

    /// File name under `shaders/`, also the pipeline label.
    pub const fn name(self) -> &'static str {
        match self {
            Kernel::Fill => "fill",
            Kernel::FillRandom => "fill.random",
            Kernel::MatmulNaive => "matmul_naive",
            Kernel::MatmulTiled => "matmul_tiled",
            Kernel::MatmulTiledVec4 => "matmul_tiled_vec4",
            Kernel::MatmulTiled16 => "matmul_tiled16",
            Kernel::MatmulTiled16Vec4 => "matmul_tiled16_vec4",
            Kernel::MatmulCoop => "matmul_coop",
            Kernel::PadCopy => "pad_copy",
            Kernel::PadCopyHalves => "pad_copy.halves",
            Kernel::GemvVecmat => "matmul_gemv.vecmat",
            Kernel::GemvVecmatPairs => "matmul_gemv.vecmat_pairs",
            Kernel::GemvVecmatWide => "matmul_gemv.vecmat_wide",
            Kernel::GemvReduce => "matmul_gemv.reduce",
            Kernel::GemvMatvec => "matmul_gemv.matvec",
            Kernel::MatmulSplitKReduce => "matmul_splitk",
            Kernel::MatmulSplitScale => "matmul_split_scale",
            Kernel::Reduce => "reduce",
            Kernel::ReduceSubgroup => "reduce.subgroup",
            Kernel::ReduceCombine => "reduce.combine",
            Kernel::Softmax => "softmax",
            Kernel::SoftmaxSubgroup => "softmax.subgroup",
            Kernel::SoftmaxOnline => "softmax.online",
            Kernel::SoftmaxOnlineSubgroup => "softmax.online.subgroup",
            Kernel::Norm => "norm",
            Kernel::NormSubgroup => "norm.subgroup",
            Kernel::NormStreaming => "norm.streaming",
            Kernel::RowCopy => "rowops_copy",
            Kernel::AttentionFlash => "attention_flash",
            Kernel::AttentionFlashCoop => "attention_flash_coop",
            Kernel::AttentionFlashCoopEmulated => "attention_flash_coop_emulated",
            Kernel::AttentionSplitScale => "attention_split_scale",
            Kernel::AttentionMerge => "attention_merge",
            Kernel::AttentionDecode => "attention_decode",
            Kernel::AttentionDecodeShuffle => "attention_decode_shuffle",
            Kernel::AttentionScores => "attention_naive.scores",
            Kernel::AttentionSoftmax => "attention_naive.softmax",
            Kernel::AttentionPv => "attention_naive.pv",
            Kernel::AttentionBwdPrepare => "attention_backward.prepare",
            Kernel::AttentionBwdDkDv => "attention_backward.dkdv",
            Kernel::AttentionBwdDq => "attention_backward.dq",
            Kernel::AttentionBwdCoopDkDv => "attention_bwd_coop_dkdv",
            Kernel::AttentionBwdCoopDq => "attention_bwd_coop_dq",
            Kernel::AttentionBwdCoopDkDvEmulated => "attention_bwd_coop_dkdv_emulated",
            Kernel::AttentionBwdCoopDqEmulated => "attention_bwd_coop_dq_emulated",
            Kernel::AttentionDecodeCoop => "attention_decode_coop",
            Kernel::AttentionDecodeCoopEmulated => "attention_decode_coop_emulated",
            Kernel::MatmulBroadcast => "matmul_broadcast",
            Kernel::MatmulBroadcastVec4 => "matmul_broadcast_vec4",
        }
    }

    /// Entry point name.
    pub const fn entry_point(self) -> &'static str {
        match self {
            Kernel::FillRandom => "random",
            Kernel::PadCopyHalves => "halves",
            Kernel::GemvVecmat => "vecmat",
            Kernel::GemvVecmatPairs => "vecmat_pairs",
            Kernel::GemvVecmatWide => "vecmat_wide",
            Kernel::GemvReduce => "reduce",
            Kernel::GemvMatvec => "matvec",
            Kernel::ReduceCombine => "combine",
            Kernel::SoftmaxOnline | Kernel::SoftmaxOnlineSubgroup => "online",
            Kernel::NormStreaming => "streaming",
            Kernel::AttentionMerge => "merge",
            Kernel::AttentionScores => "scores",
            Kernel::AttentionSoftmax => "softmax",
            Kernel::AttentionPv => "pv",
            Kernel::AttentionBwdPrepare => "prepare",
            Kernel::AttentionBwdDkDv => "dkdv",
            Kernel::AttentionBwdDq => "dq",
            _ => "main",
        }
    }

    /// Whether the source declares `alias Elem = f32;` and so accepts a dtype.
    pub fn is_dtype_generic(self) -> bool {
        self.parts()
            .iter()
            .any(|p| p.lines().any(|l| l.trim() == ELEM_ALIAS))
    }

    /// The one dtype a kernel that is not dtype-generic works in (the fill
    /// kernel is dtype-agnostic and listed as f32; the coop kernel's dtype is
    /// its output's, its inputs are set by `INPUT_F32`), and the default
    /// dtype of [`Spec::new`] (f16 for the tensor-core decode kernel, which
    /// is f16 only).
    pub const fn fixed_dtype(self) -> DType {
        match self {
            // Cooperative f16 loads straight from the f16 views of K and V.
            Kernel::AttentionDecodeCoop | Kernel::AttentionDecodeCoopEmulated => DType::F16,
            _ => DType::F32,
        }
    }

    /// Whether the kernel ends with the fused matmul epilogue (bindings 5
    /// and 6, `EPI_*` consts; `GemvVecmat` writes partial sums and has none).
    pub const fn has_epilogue(self) -> bool {
        matches!(
            self,
            Kernel::MatmulNaive
                | Kernel::MatmulTiled
                | Kernel::MatmulTiledVec4
                | Kernel::MatmulTiled16
                | Kernel::MatmulTiled16Vec4
                | Kernel::MatmulBroadcast
                | Kernel::MatmulBroadcastVec4
                | Kernel::MatmulCoop
                | Kernel::GemvVecmatWide
                | Kernel::GemvReduce
                | Kernel::GemvMatvec
                | Kernel::MatmulSplitKReduce
        )
    }

    /// Whether the kernel uses cooperative matrices (needs the experimental
    /// feature; naga translates it to SPIR-V only).
    pub const fn uses_cooperative_matrix(self) -> bool {
        matches!(
            self,
            Kernel::MatmulCoop
                | Kernel::AttentionFlashCoop
                | Kernel::AttentionBwdCoopDkDv
                | Kernel::AttentionBwdCoopDq
                | Kernel::AttentionDecodeCoop
        )
    }

    /// Whether the kernel uses subgroup operations (needs the `subgroups`
    /// feature; the dispatcher picks these only when the adapter has it).
    pub const fn uses_subgroups(self) -> bool {
        matches!(
            self,
            Kernel::ReduceSubgroup
                | Kernel::SoftmaxSubgroup
                | Kernel::SoftmaxOnlineSubgroup
                | Kernel::NormSubgroup
                | Kernel::AttentionFlashCoop
                | Kernel::AttentionFlashCoopEmulated
                | Kernel::AttentionBwdCoopDkDv
                | Kernel::AttentionBwdCoopDq
                | Kernel::AttentionBwdCoopDkDvEmulated
                | Kernel::AttentionBwdCoopDqEmulated
                | Kernel::AttentionDecodeCoop
                | Kernel::AttentionDecodeCoopEmulated
                | Kernel::AttentionDecodeShuffle
                | Kernel::MatmulBroadcast
                | Kernel::MatmulBroadcastVec4
        )
    }

    /// Kernels whose every storage access is guarded by an explicit bounds
    /// check in the WGSL (or is in bounds by construction, like workgroup tile
    /// indices) and whose loops have constant or uniform trip counts, all
    /// covered by the edge-shape tests. These are compiled without wgpu's
    /// runtime checks (index clamping and forced loop bounding), which cost
    /// the tiled kernels 1.4-1.8x on the H200. Never for kernels that index
    /// with user-controlled values. The attention kernels index with strides
    /// and key lengths the host derives from (and checks against) the
    /// tensors' shapes; every global index is guarded by the logical bounds
    /// (rows < Sq, keys < min(key length, Sk), columns < D or Dv).
    pub const fn trusted(self) -> bool {
        matches!(
            self,
            Kernel::MatmulTiled
                | Kernel::MatmulTiledVec4
                | Kernel::MatmulTiled16
                | Kernel::MatmulTiled16Vec4
                | Kernel::MatmulBroadcast
                | Kernel::MatmulBroadcastVec4
                | Kernel::MatmulCoop
                | Kernel::GemvVecmat
                | Kernel::GemvVecmatPairs
                | Kernel::GemvVecmatWide
                | Kernel::GemvReduce
                | Kernel::GemvMatvec
                | Kernel::MatmulSplitKReduce
                // Row kernels: every input/output access happens for a live
                // row (< rows) and a chunk below the row's chunk count, with
                // scalar lanes checked against n; workgroup indices are below
                // WG by construction; register arrays are indexed by loop
                // counters below their const size.
                // Covered by tests/rowops.rs (n = 1, primes, partial chunks).
                | Kernel::Reduce
                | Kernel::ReduceSubgroup
                | Kernel::ReduceCombine
                | Kernel::Softmax
                | Kernel::SoftmaxSubgroup
                | Kernel::SoftmaxOnline
                | Kernel::SoftmaxOnlineSubgroup
                | Kernel::Norm
                | Kernel::NormSubgroup
                | Kernel::NormStreaming
                | Kernel::RowCopy
                | Kernel::AttentionFlash
                // Tensor-core flash: workgroup and register indices are in
                // bounds by construction (tile constants), global accesses
                // guarded as in AttentionFlash; its edge-shape tests
                // (tests/attention.rs coop_*) run on adapters with
                // cooperative matrices only.
                | Kernel::AttentionFlashCoop
                | Kernel::AttentionMerge
                | Kernel::AttentionBwdPrepare
                | Kernel::AttentionBwdDkDv
                | Kernel::AttentionBwdDq
                // Tensor-core backward: as AttentionFlashCoop (tile-constant
                // workgroup and register indices, global accesses guarded
                // by the logical bounds); tests/attention.rs coop_backward_*
                // run them on adapters with cooperative matrices.
                | Kernel::AttentionBwdCoopDkDv
                | Kernel::AttentionBwdCoopDq
                // Every K/V word, q element and scratch store is guarded by
                // the logical bounds and arrayLength (tests/attention.rs:
                // decode_kernel_edge_shapes).
                | Kernel::AttentionDecode
                | Kernel::AttentionDecodeShuffle
        )
    }
}

const ELEM_ALIAS: &str = "alias Elem = f32;";
const OUT_ALIAS: &str = "alias Out = Elem;";

/// One specialisation of a kernel: what the pipeline cache is keyed by.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Spec {
    /// The kernel family.
    pub kernel: Kernel,
    /// Element type substituted for `Elem` (F32 for kernels that are not dtype-generic).
    pub dtype: DType,
    /// `const NAME: u32` values rewritten in the text (register-tile sizes).
    pub consts: Vec<(&'static str, u32)>,
    /// WGSL `override` values passed as pipeline constants.
    pub overrides: Vec<(&'static str, u32)>,
    /// Generated WGSL replacing the matmul epilogue (kernels with
    /// [`Kernel::has_epilogue`] only): it defines `fn epilogue(acc: f32, z:
    /// u32, row: u32, col: u32) -> f32`, and the built-in one is renamed
    /// `epilogue_builtin`. Made by [`crate::fusion::generate_epilogue`].
    pub epilogue: Option<String>,
    /// The output's element type where it differs from `dtype`: substituted
    /// for `Out` in the kernels that declare `alias Out = Elem;` (the matmul
    /// kernels: f16 operands with an f32 result, or the reverse).
    pub out_dtype: Option<DType>,
    /// Generated WGSL replacing marker lines `// @gen NAME` (trimmed), as
    /// (NAME, text) pairs: code the host unrolls, such as the tensor-core
    /// attention kernel's named fragments. Every pair must find its marker.
    pub blocks: Vec<(&'static str, String)>,
}

impl Spec {
    /// The kernel at its defaults (f32, or its fixed dtype).
    pub fn new(kernel: Kernel) -> Self {
        // The tensor-core attention kernel's unrolled blocks, for the tile
        // and head dims its text defaults to (FlashCoopTiles::spec replaces
        // them).
        let blocks = match kernel {
            Kernel::AttentionFlashCoop => {
                codegen::flash_coop::FLASH_COOP_TEXT_DEFAULT.blocks(128, 128, false)
            }
            Kernel::AttentionFlashCoopEmulated => {
                codegen::flash_coop::FLASH_COOP_TEXT_DEFAULT.blocks_looped(128, 128, false)
            }
            Kernel::AttentionDecodeCoop => {
                codegen::coop_decode::decode_coop_blocks(1, 128, 128, false)
            }
            Kernel::AttentionDecodeCoopEmulated => {
                codegen::coop_decode::decode_coop_blocks(1, 128, 128, true)
            }
            Kernel::MatmulTiled | Kernel::MatmulTiledVec4 | Kernel::AttentionFlash => {
                vec![("guard_decl", String::new()), ("guard", String::new())]
            }
            Kernel::MatmulCoop => codegen::matmul_coop::COOP_PLAIN_BLOCKS
                .iter()
                .map(|&(name, text)| (name, text.to_string()))
                .collect(),
            _ => codegen::coop_backward::default_blocks(kernel).unwrap_or_default(),
        };
        Self {
            kernel,
            dtype: kernel.fixed_dtype(),
            consts: Vec::new(),
            overrides: Vec::new(),
            epilogue: None,
            out_dtype: None,
            blocks,
        }
    }

    /// Sets the output's element type (see [`Spec::out_dtype`]).
    pub fn output(mut self, dtype: DType) -> Self {
        self.out_dtype = Some(dtype);
        self
    }

    /// Replaces the matmul epilogue with generated WGSL (see [`Spec::epilogue`]).
    pub fn epilogue_text(mut self, wgsl: impl Into<String>) -> Self {
        self.epilogue = Some(wgsl.into());
        self
    }

    /// Sets the element type.
    pub fn dtype(mut self, dtype: DType) -> Self {
        self.dtype = dtype;
        self
    }

    /// Rewrites `const name: u32 = ...;` to `value` (a second call for the
    /// same name replaces the first value).
    pub fn constant(mut self, name: &'static str, value: u32) -> Self {
        match self.consts.iter_mut().find(|(n, _)| *n == name) {
            Some(c) => c.1 = value,
            None => self.consts.push((name, value)),
        }
        self
    }

    /// Replaces the marker line `// @gen name` with `text` (see
    /// [`Spec::blocks`]).
    pub fn block(mut self, name: &'static str, text: impl Into<String>) -> Self {
        let text = text.into();
        match self.blocks.iter_mut().find(|(n, _)| *n == name) {
            Some(slot) => slot.1 = text,
            None => self.blocks.push((name, text)),
        }
        self
    }

    /// Fills the `guard_decl` and `guard` blocks (the split plans'
    /// fallbacks: `shaders/matmul_tiled_core.wgsl`,
    /// `shaders/attention_flash.wgsl`): the storage buffer at `binding` is
    /// read as `array<u32>`, invocation `tid` 0 loads word `flag` (a WGSL
    /// expression) and `workgroupUniformLoad` shares it; while it is 0,
    /// every workgroup returns at once.
    pub fn guarded(self, binding: u32, flag: &str) -> Self {
        self.block(
            "guard_decl",
            format!(
                "@group(0) @binding({binding}) var<storage, read> split_flag: array<u32>;\n\
                 var<workgroup> guard_sh: u32;\n"
            ),
        )
        .block(
            "guard",
            format!(
                "    if tid == 0u {{\n        guard_sh = split_flag[{flag}];\n    }}\n    \
                 if workgroupUniformLoad(&guard_sh) == 0u {{\n        return;\n    }}\n"
            ),
        )
    }

    /// Sets the `override name: u32` to `value`.
    pub fn override_(mut self, name: &'static str, value: u32) -> Self {
        self.overrides.push((name, value));
        self
    }

    /// The specialised WGSL text (dtype and consts applied; overrides are not
    /// textual and stay for pipeline creation).
    pub fn wgsl(&self) -> Result<String> {
        let src = self.kernel.parts().concat();
        let fail = |message: String| Error::Shader {
            kernel: self.kernel.name().to_string(),
            message,
        };
        let mut out = String::with_capacity(src.len() + 64);
        let generic = self.kernel.is_dtype_generic();
        if !generic && self.dtype != self.kernel.fixed_dtype() {
            return Err(fail(format!(
                "kernel has no `alias Elem` and works in {} only, not {}",
                self.kernel.fixed_dtype(),
                self.dtype
            )));
        }
        if generic && (self.dtype == DType::F16 || self.out_dtype == Some(DType::F16)) {
            out.push_str("enable f16;\n");
        }
        if self.out_dtype.is_some() && !src.lines().any(|l| l.trim() == OUT_ALIAS) {
            return Err(fail(
                "kernel has no `alias Out = Elem;` to specialise".into(),
            ));
        }
        if self.epilogue.is_some() && !self.kernel.has_epilogue() {
            return Err(fail("kernel has no epilogue to replace".into()));
        }
        let mut applied = vec![false; self.consts.len()];
        let mut blocks_applied = vec![false; self.blocks.len()];
        for line in src.lines() {
            let trimmed = line.trim();
            if let Some(name) = trimmed.strip_prefix("// @gen ") {
                let Some(i) = self.blocks.iter().position(|(n, _)| *n == name.trim()) else {
                    return Err(fail(format!("no generated block for `// @gen {name}`")));
                };
                blocks_applied[i] = true;
                out.push_str(&self.blocks[i].1);
                if !self.blocks[i].1.ends_with('\n') {
                    out.push('\n');
                }
                continue;
            }
            if self.epilogue.is_some() && trimmed.starts_with("fn epilogue(") {
                out.push_str(&line.replacen("fn epilogue(", "fn epilogue_builtin(", 1));
                out.push('\n');
                continue;
            }
            if trimmed == ELEM_ALIAS {
                out.push_str(&format!("alias Elem = {};\n", self.dtype.wgsl()));
                continue;
            }
            if let (Some(o), OUT_ALIAS) = (self.out_dtype, trimmed) {
                out.push_str(&format!("alias Out = {};\n", o.wgsl()));
                continue;
            }
            let replaced = self.consts.iter().enumerate().find(|(_, (name, _))| {
                trimmed
                    .strip_prefix("const ")
                    .and_then(|rest| rest.strip_prefix(name))
                    .is_some_and(|rest| rest.trim_start().starts_with(": u32 ="))
            });
            match replaced {
                Some((i, (name, value))) => {
                    applied[i] = true;
                    out.push_str(&format!("const {name}: u32 = {value}u;\n"));
                }
                None => {
                    out.push_str(line);
                    out.push('\n');
                }
            }
        }
        if let Some(text) = &self.epilogue {
            out.push_str(text);
        }
        if let Some(i) = blocks_applied.iter().position(|a| !a) {
            return Err(fail(format!(
                "no `// @gen {}` line for the generated block",
                self.blocks[i].0
            )));
        }
        if let Some(i) = applied.iter().position(|a| !a) {
            return Err(fail(format!(
                "no `const {}: u32 = ...;` line to specialise",
                self.consts[i].0
            )));
        }
        Ok(out)
    }

    /// Override constants in the form wgpu takes.
    pub fn pipeline_constants(&self) -> Vec<(&'static str, f64)> {
        self.overrides
            .iter()
            .map(|&(k, v)| (k, f64::from(v)))
            .collect()
    }

    fn label(&self) -> String {
        let mut s = format!("{}<{}>", self.kernel.name(), self.dtype);
        if let Some(o) = self.out_dtype {
            s.push_str(&format!("->{o}"));
        }
        for (k, v) in self.consts.iter().chain(&self.overrides) {
            s.push_str(&format!(" {k}={v}"));
        }
        if let Some(text) = &self.epilogue {
            s.push_str(&format!(" epilogue={}B", text.len()));
        }
        if !self.blocks.is_empty() {
            let bytes: usize = self.blocks.iter().map(|(_, t)| t.len()).sum();
            s.push_str(&format!(" generated={bytes}B"));
        }
        s
    }
}

/// Compiled pipelines of one device, keyed by specialisation.
#[derive(Default)]
pub(crate) struct PipelineCache {
    map: Mutex<HashMap<Spec, Arc<wgpu::ComputePipeline>>>,
}

impl PipelineCache {
    /// The pipeline for `spec`, compiled on first use.
    pub(crate) fn get(
        &self,
        device: &wgpu::Device,
        spec: &Spec,
    ) -> Result<Arc<wgpu::ComputePipeline>> {
        let lock = || self.map.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(p) = lock().get(spec) {
            return Ok(p.clone());
        }
        // Compiled without the lock held, so threads compile different
        // kernels at once (the autotuner builds its candidates in parallel);
        // two threads after the same spec both compile it and the first
        // insert wins.
        let elapsed = stopwatch();
        let source = spec.wgsl()?;
        let pipeline = Arc::new(compile(
            device,
            &spec.label(),
            &source,
            spec.kernel.entry_point(),
            &spec.pipeline_constants(),
            spec.kernel.trusted(),
        )?);
        log::debug!(
            "compiled pipeline {} in {:.1} ms",
            spec.label(),
            elapsed() * 1e3
        );
        Ok(lock().entry(spec.clone()).or_insert(pipeline).clone())
    }
}

/// Most generated pipelines (fused elementwise kernels, fused row kernels)
/// kept per device; the least recently used goes first.
pub const GENERATED_CACHE_CAPACITY: usize = 64;

/// Pipelines by key, each with the clock tick of its last use.
type LruMap = HashMap<String, (u64, Arc<wgpu::ComputePipeline>)>;

/// Pipelines of host-generated kernels, keyed by their generated text's key:
/// bounded, least recently used evicted first.
#[derive(Default)]
pub(crate) struct GeneratedCache {
    map: Mutex<(u64, LruMap)>,
}

impl GeneratedCache {
    /// The pipeline cached under `key`, compiled by `compile` on a miss.
    pub(crate) fn get_or_compile(
        &self,
        key: &str,
        compile: impl FnOnce() -> Result<wgpu::ComputePipeline>,
    ) -> Result<Arc<wgpu::ComputePipeline>> {
        {
            let mut guard = self.map.lock().unwrap_or_else(|p| p.into_inner());
            let (clock, map) = &mut *guard;
            *clock += 1;
            if let Some((used, p)) = map.get_mut(key) {
                *used = *clock;
                return Ok(p.clone());
            }
        }
        // Compile outside the lock (slow on some drivers).
        let pipeline = Arc::new(compile()?);
        log::debug!("compiled fused kernel {key}");
        let mut guard = self.map.lock().unwrap_or_else(|p| p.into_inner());
        let (clock, map) = &mut *guard;
        if map.len() >= GENERATED_CACHE_CAPACITY {
            let oldest = map
                .iter()
                .min_by_key(|(_, (used, _))| *used)
                .map(|(k, _)| k.clone());
            if let Some(oldest) = oldest {
                map.remove(&oldest);
            }
        }
        map.insert(key.to_string(), (*clock, pipeline.clone()));
        Ok(pipeline)
    }

    /// Number of pipelines held.
    pub(crate) fn len(&self) -> usize {
        self.map.lock().unwrap_or_else(|p| p.into_inner()).1.len()
    }
}

/// Seconds since the call, for log lines: NaN on wasm32, where
/// `std::time::Instant` is not available.
pub(crate) fn stopwatch() -> impl Fn() -> f64 {
    #[cfg(not(target_arch = "wasm32"))]
    {
        let start = std::time::Instant::now();
        move || start.elapsed().as_secs_f64()
    }
    #[cfg(target_arch = "wasm32")]
    {
        || f64::NAN
    }
}

/// Creates a shader module and compute pipeline inside an error scope, so a
/// failure comes back as [`Error::Shader`].
pub(crate) fn compile(
    device: &wgpu::Device,
    label: &str,
    source: &str,
    entry_point: &str,
    constants: &[(&str, f64)],
    trusted: bool,
) -> Result<wgpu::ComputePipeline> {
    let scope = device.push_error_scope(wgpu::ErrorFilter::Validation);
    let desc = wgpu::ShaderModuleDescriptor {
        label: Some(label),
        source: wgpu::ShaderSource::Wgsl(source.into()),
    };
    let module = if trusted && !checked_shaders_forced() {
        // SAFETY: only kernels listed by `Kernel::trusted`, whose accesses are
        // explicitly bounds-checked or in bounds by construction (see there).
        unsafe { device.create_shader_module_trusted(desc, wgpu::ShaderRuntimeChecks::unchecked()) }
    } else {
        device.create_shader_module(desc)
    };
    let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: Some(label),
        layout: None,
        module: &module,
        entry_point: Some(entry_point),
        compilation_options: wgpu::PipelineCompilationOptions {
            constants,
            // Every kernel writes its workgroup tiles before reading them.
            zero_initialize_workgroup_memory: false,
        },
        cache: None,
    });
    match pollster::block_on(scope.pop()) {
        Some(e) => Err(Error::Shader {
            kernel: label.to_string(),
            message: e.to_string(),
        }),
        None => Ok(pipeline),
    }
}

/// `WGTILE_CHECKED_SHADERS=1` compiles every kernel with wgpu's runtime checks,
/// to debug a suspected out-of-bounds access or to measure what trust buys.
fn checked_shaders_forced() -> bool {
    crate::config::get().checked_shaders
}

/// One compute dispatch, ready to encode.
#[derive(Clone, Debug)]
pub(crate) struct Dispatch {
    pub(crate) pipeline: Arc<wgpu::ComputePipeline>,
    pub(crate) bind_group: wgpu::BindGroup,
    pub(crate) workgroups: [u32; 3],
}

impl Dispatch {
    /// Binds `buffers` in order at group 0, bindings 0.. (auto layout).
    pub(crate) fn new(
        device: &wgpu::Device,
        pipeline: Arc<wgpu::ComputePipeline>,
        buffers: &[&wgpu::Buffer],
        workgroups: [u32; 3],
    ) -> Self {
        let numbered: Vec<(u32, &wgpu::Buffer)> = (0u32..).zip(buffers.iter().copied()).collect();
        Self::with_bindings(device, pipeline, &numbered, workgroups)
    }

    /// Binds each buffer at its own binding index of group 0 (for entry
    /// points that use only some of a module's bindings: wgpu derives each
    /// entry point's layout from the bindings it uses).
    pub(crate) fn with_bindings(
        device: &wgpu::Device,
        pipeline: Arc<wgpu::ComputePipeline>,
        buffers: &[(u32, &wgpu::Buffer)],
        workgroups: [u32; 3],
    ) -> Self {
        let layout = pipeline.get_bind_group_layout(0);
        let entries: Vec<wgpu::BindGroupEntry> = buffers
            .iter()
            .map(|&(binding, b)| wgpu::BindGroupEntry {
                binding,
                resource: b.as_entire_binding(),
            })
            .collect();
        let bind_group = device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: &layout,
            entries: &entries,
        });
        Self {
            pipeline,
            bind_group,
            workgroups,
        }
    }

    pub(crate) fn encode(&self, pass: &mut wgpu::ComputePass<'_>) {
        pass.set_pipeline(&self.pipeline);
        pass.set_bind_group(0, &self.bind_group, &[]);
        let [x, y, z] = self.workgroups;
        pass.dispatch_workgroups(x, y, z);
    }
}
