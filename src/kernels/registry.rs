//! The kernel table: one row per kernel (its file and shared parts in
//! `shaders/`, entry point, fixed dtype, flags). Adding a kernel is adding a
//! row here.

use crate::dtype::DType;

/// A file of `shaders/`, embedded.
macro_rules! shader {
    ($file:literal) => {
        include_str!(concat!("../../shaders/", $file))
    };
}

const MATMUL_TILED_CORE: &str = shader!("matmul_tiled_core.wgsl");
/// The tiled kernels' B side with scalar loads.
const MATMUL_TILED_B: &str = shader!("matmul_tiled_b.wgsl");
const MATMUL_TILED16_CORE: &str = shader!("matmul_tiled16_core.wgsl");
const MATMUL_BROADCAST_CORE: &str = shader!("matmul_broadcast_core.wgsl");
const MATMUL_EPILOGUE: &str = shader!("matmul_epilogue.wgsl");
const MATMUL_PARAMS: &str = shader!("matmul_params.wgsl");
const MATMUL_GEMV: &str = shader!("matmul_gemv.wgsl");
const ROWOPS_COMMON: &str = shader!("rowops_common.wgsl");
const ROWOPS_PLAIN: &str = shader!("rowops_plain.wgsl");
const ROWOPS_SUBGROUP: &str = shader!("rowops_subgroup.wgsl");
const ROWOPS_LOAD: &str = shader!("rowops_load.wgsl");
const ROWOPS_STORE: &str = shader!("rowops_store.wgsl");
const ROWOPS_WRITE: &str = shader!("rowops_write.wgsl");
const REDUCE: &str = shader!("reduce.wgsl");
const SOFTMAX: &str = shader!("softmax.wgsl");
const NORM: &str = shader!("norm.wgsl");
const ATTENTION_COMMON: &str = shader!("attention_common.wgsl");
const ATTENTION_FLASH_COOP: &str = shader!("attention_flash_coop.wgsl");
/// The f32 split arithmetic of the tensor-core kernels (SPLIT = 1).
const SPLIT_F32: &str = shader!("split_f32.wgsl");
const ATTENTION_DECODE_COOP: &str = shader!("attention_decode_coop.wgsl");
const ATTENTION_COOP_ROWS: &str = shader!("attention_coop_rows.wgsl");
const ATTENTION_COOP_MMA: &str = shader!("attention_coop_mma.wgsl");
const ATTENTION_COOP_EMULATED: &str = shader!("attention_coop_emulated.wgsl");
const ATTENTION_BACKWARD_COMMON: &str = shader!("attention_backward_common.wgsl");
const ATTENTION_BWD_COOP_COMMON: &str = shader!("attention_bwd_coop_common.wgsl");
const ATTENTION_NAIVE: &str = shader!("attention_naive.wgsl");
const QUANT: &str = shader!("quant.wgsl");
const QUANT_COMMON: &str = shader!("quant_common.wgsl");
const QUANT_VEC: &str = shader!("quant_vec.wgsl");
const QUANT_LANES: &str = shader!("quant_lanes.wgsl");
const QUANT_LANES_SUBGROUP: &str = shader!("quant_lanes_subgroup.wgsl");
pub(crate) const QUANT_CODEC: &str = shader!("quant_codec.wgsl");
const QUANT_GEMV_COMMON: &str = shader!("quant_gemv_common.wgsl");
const QUANT_PRODUCT_PARAMS: &str = shader!("quant_product_params.wgsl");
const COLS_DRIVER: &str = shader!("cols_driver.wgsl");
const COLS_FINISH: &str = shader!("cols_finish.wgsl");
/// The packed-word and block-scale decoding of the quantised formats.
pub(crate) const QUANT_DECODE: &str = shader!("quant_decode.wgsl");
/// A matmul's B operand as a quantised weight, in runs of 8 k.
pub(crate) const QUANT_B_OPERAND: &str = shader!("quant_b_operand.wgsl");
/// The tensor-core matmul's quantised-B parts (its `quant_*` blocks).
pub(crate) const MATMUL_COOP_QUANT: &str = shader!("matmul_coop_quant.wgsl");
/// 16-bit float patterns to and from f32 bits in integer arithmetic.
pub(crate) const HALF_BITS: &str = shader!("half_bits.wgsl");

/// Ends with the fused matmul epilogue (bindings 5 and 6, `EPI_*` consts).
const EPILOGUE: u8 = 1;
/// Uses cooperative matrices (the experimental feature; naga translates it
/// to SPIR-V only).
const COOP_MATRIX: u8 = 2;
/// Uses subgroup operations (the `subgroups` feature).
const SUBGROUPS: u8 = 4;
/// Compiled without wgpu's runtime checks (index clamping, forced loop
/// bounds), which cost the tiled kernels 1.4-1.8x on the H200: every
/// storage access is guarded by an explicit bounds check in the WGSL or in
/// bounds by construction (workgroup tile indices, register arrays indexed
/// below their const size), loops have constant or uniform trip counts, and
/// the edge-shape tests cover them (tests/rows/rowops.rs for the row kernels:
/// n = 1, primes, partial chunks; tests/attention/ for the attention
/// kernels, whose strides and key lengths the host derives from and checks
/// against the tensors' shapes, every global index guarded by the logical
/// bounds; the tensor-core kernels' edge tests run on adapters with
/// cooperative matrices; tests/quant.rs for the quantisation kernels, whose
/// indices come from host-checked shapes, never from the packed codes;
/// tests/lessons.rs for the lesson kernels, one guarded element each).
/// Never for kernels that index with
/// user-controlled values.
const TRUSTED: u8 = 8;

/// One row of the table.
struct Row {
    name: &'static str,
    entry: &'static str,
    dtype: DType,
    flags: u8,
    parts: &'static [&'static str],
}

macro_rules! registry {
    ($(
        $(#[$doc:meta])*
        $kernel:ident = $name:literal, entry $entry:literal, dtype $dtype:ident,
        flags [$($flag:ident),*], parts [$($part:expr),+ $(,)?];
    )*) => {
        /// Every kernel family wgtile ships, one WGSL file each (plus shared parts).
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Kernel {
            $($(#[$doc])* $kernel,)*
        }

        impl Kernel {
            /// All kernels, for validation sweeps.
            pub const ALL: [Kernel; 0 $(+ { let _ = stringify!($kernel); 1 })*] =
                [$(Kernel::$kernel),*];

            const fn row(self) -> &'static Row {
                match self {
                    $(Kernel::$kernel => &Row {
                        name: $name,
                        entry: $entry,
                        dtype: DType::$dtype,
                        flags: 0 $(| $flag)*,
                        parts: &[$($part),+],
                    },)*
                }
            }
        }
    };
}

registry! {
    /// Fills a buffer with a 32-bit pattern (zeros, NaN poison, constants).
    Fill = "fill", entry "main", dtype F32, flags [],
        parts [shader!("fill.wgsl")];
    /// Fills a buffer with hashed uniform values in [-1, 1) (f32 or f16 pairs).
    FillRandom = "fill.random", entry "random", dtype F32, flags [],
        parts [shader!("fill.wgsl")];
    /// Converts between f32, f16 and bf16 bit-exactly (one output word per
    /// invocation; padded source rows read in place).
    Cast = "cast", entry "main", dtype F32, flags [TRUSTED],
        parts [shader!("cast.wgsl"), HALF_BITS];
    /// The cast of a contiguous tensor of a multiple of 8 elements, 8
    /// elements per step in 16-byte loads and stores.
    CastVec = "cast.main8", entry "main8", dtype F32, flags [TRUSTED],
        parts [shader!("cast.wgsl"), HALF_BITS];
    /// Writes the grids of conditional dispatches from a flag (indirect
    /// dispatch arguments).
    Arm = "arm", entry "main", dtype F32, flags [],
        parts [shader!("arm.wgsl")];
    /// Sets a flag where a bf16 tensor holds a value f16 cannot (the bf16
    /// matmul's first pass).
    CastCheck = "cast.check", entry "check", dtype F32, flags [TRUSTED],
        parts [shader!("cast.wgsl"), HALF_BITS];
    /// Rows of a table picked by integer ids (embedding lookup,
    /// index_select), whole words per row.
    Gather = "gather", entry "gather", dtype F32, flags [TRUSTED],
        parts [shader!("gather.wgsl")];
    /// The same in 16-byte units (rows of a multiple of 16 bytes).
    GatherUnits = "gather.units", entry "units", dtype F32, flags [TRUSTED],
        parts [shader!("gather.wgsl")];
    /// The same for 2-byte elements with odd rows, one output word (two
    /// lookups) at a time.
    GatherWords = "gather.words", entry "gather_words", dtype F32, flags [TRUSTED],
        parts [shader!("gather.wgsl")];
    /// 0, 1, 2, ... as i32, u32 or f32 (`arange`).
    Iota = "gather.iota", entry "iota", dtype F32, flags [],
        parts [shader!("gather.wgsl")];
    /// The divergence lesson: a data-dependent branch between two loops, or
    /// the same choice made with `select` (`FORM`).
    LessonDivergence = "lessons.divergence", entry "main", dtype F32, flags [TRUSTED],
        parts [shader!("lessons_divergence.wgsl")];
    /// The recomputation lesson: three sigmoids forward, storing the two
    /// activations.
    LessonForwardStore = "lessons.forward_store", entry "forward_store", dtype F32, flags [TRUSTED],
        parts [shader!("lessons_recompute.wgsl")];
    /// Its backward from the stored activations.
    LessonBackwardStored = "lessons.backward_stored", entry "backward_stored", dtype F32, flags [TRUSTED],
        parts [shader!("lessons_recompute.wgsl")];
    /// Three sigmoids forward, storing nothing but the result.
    LessonForward = "lessons.forward", entry "forward", dtype F32, flags [TRUSTED],
        parts [shader!("lessons_recompute.wgsl")];
    /// The backward recomputing the activations from x.
    LessonBackwardRecompute = "lessons.backward_recompute", entry "backward_recompute", dtype F32,
        flags [TRUSTED], parts [shader!("lessons_recompute.wgsl")];
    /// The coalescing lesson: a copy along rows (consecutive addresses).
    LessonCopyRows = "lessons.copy_rows", entry "copy_rows", dtype F32, flags [TRUSTED],
        parts [shader!("lessons_coalescing.wgsl")];
    /// The same copy down columns (strided addresses).
    LessonCopyColumns = "lessons.copy_columns", entry "copy_columns", dtype F32, flags [TRUSTED],
        parts [shader!("lessons_coalescing.wgsl")];
    /// A transpose with coalesced reads and strided writes.
    LessonTransposeNaive = "lessons.transpose_naive", entry "transpose_naive", dtype F32,
        flags [TRUSTED], parts [shader!("lessons_coalescing.wgsl")];
    /// ReLU over packed FP8 (E4M3) codes.
    LessonReluFp8 = "lessons.relu_fp8", entry "main", dtype F32, flags [TRUSTED],
        parts [shader!("lessons_relu8.wgsl")];
    /// A strided block copy (permute, transpose, narrow, split, concat).
    Copy = "copy", entry "main", dtype F32, flags [TRUSTED],
        parts [shader!("copy.wgsl")];
    /// The same in 16-byte units (contiguous runs that divide).
    CopyVec4 = "copy.units", entry "units", dtype F32, flags [TRUSTED],
        parts [shader!("copy.wgsl")];
    /// The same for 2-byte elements in any layout (atomic half-word writes).
    CopyHalves = "copy.halves", entry "halves", dtype F32, flags [TRUSTED],
        parts [shader!("copy.wgsl")];
    /// The block copy as a tiled transpose through workgroup memory (the
    /// source's contiguous axis is not the destination's).
    CopyTiled = "copy.tiled", entry "tiled", dtype F32, flags [TRUSTED],
        parts [shader!("copy.wgsl")];
    /// Sum, max or mean over a middle axis, one invocation per output
    /// column (coalesced reads), split along the axis when columns are few.
    ReduceCols = "reduce_cols", entry "main", dtype F32, flags [TRUSTED],
        parts [shader!("reduce_cols.wgsl"), COLS_DRIVER];
    /// Adds (or maxes) reduce_cols' f32 partials.
    ReduceColsCombine = "reduce_cols.combine", entry "combine", dtype F32, flags [TRUSTED],
        parts [shader!("reduce_cols.wgsl"), COLS_DRIVER];
    /// Softmax or log-softmax over a middle axis, one invocation per column
    /// (coalesced reads), online (max, sum) pairs down it; with one split it
    /// also writes the column, with more it writes the pairs as partials.
    SoftmaxCols = "softmax_cols", entry "main", dtype F32, flags [TRUSTED],
        parts [shader!("softmax_cols.wgsl"), COLS_DRIVER, COLS_FINISH];
    /// Merges softmax_cols' partial (max, sum) pairs per column.
    SoftmaxColsCombine = "softmax_cols.combine", entry "combine", dtype F32, flags [TRUSTED],
        parts [shader!("softmax_cols.wgsl"), COLS_DRIVER, COLS_FINISH];
    /// Writes softmax_cols' segments from the merged pairs (with a split).
    SoftmaxColsFinish = "softmax_cols.finish", entry "finish", dtype F32, flags [TRUSTED],
        parts [shader!("softmax_cols.wgsl"), COLS_DRIVER, COLS_FINISH];
    /// LayerNorm, RMSNorm or L2 normalisation over a middle axis, one
    /// invocation per column (coalesced reads), Welford (count, mean, M2)
    /// statistics down it merged by Chan's formula; with one split it also
    /// writes the column, with more it writes (mean, M2) partials.
    NormCols = "norm_cols", entry "main", dtype F32, flags [TRUSTED],
        parts [shader!("norm_cols.wgsl"), COLS_DRIVER, COLS_FINISH];
    /// Merges norm_cols' partial (mean, M2) pairs per column.
    NormColsCombine = "norm_cols.combine", entry "combine", dtype F32, flags [TRUSTED],
        parts [shader!("norm_cols.wgsl"), COLS_DRIVER, COLS_FINISH];
    /// Writes norm_cols' segments from the merged statistics (with a split).
    NormColsFinish = "norm_cols.finish", entry "finish", dtype F32, flags [TRUSTED],
        parts [shader!("norm_cols.wgsl"), COLS_DRIVER, COLS_FINISH];
    /// Matmul, one invocation per output element: the on-GPU reference.
    MatmulNaive = "matmul_naive", entry "main", dtype F32, flags [EPILOGUE],
        parts [shader!("matmul_naive.wgsl"), MATMUL_PARAMS, MATMUL_EPILOGUE];
    /// Register-tiled matmul (workgroup tiles + 8x8 per invocation), scalar
    /// global loads: any shape.
    MatmulTiled = "matmul_tiled", entry "main", dtype F32, flags [EPILOGUE, TRUSTED],
        parts [shader!("matmul_tiled.wgsl"), MATMUL_TILED_B, MATMUL_TILED_CORE, MATMUL_PARAMS, MATMUL_EPILOGUE];
    /// The same compute core with 16-byte global loads and stores: K and N
    /// multiples of 4.
    MatmulTiledVec4 = "matmul_tiled_vec4", entry "main", dtype F32, flags [EPILOGUE, TRUSTED],
        parts [shader!("matmul_tiled_vec4.wgsl"), MATMUL_TILED_CORE, MATMUL_PARAMS, MATMUL_EPILOGUE];
    /// The scalar-load tiled kernel with a 16 x 16 register tile per
    /// invocation (CPU adapters).
    MatmulTiled16 = "matmul_tiled16", entry "main", dtype F32, flags [EPILOGUE, TRUSTED],
        parts [shader!("matmul_tiled.wgsl"), MATMUL_TILED_B, MATMUL_TILED16_CORE, MATMUL_PARAMS, MATMUL_EPILOGUE];
    /// The vec4 tiled kernel with a 16 x 16 register tile (CPU adapters).
    MatmulTiled16Vec4 = "matmul_tiled16_vec4", entry "main", dtype F32, flags [EPILOGUE, TRUSTED],
        parts [shader!("matmul_tiled_vec4.wgsl"), MATMUL_TILED16_CORE, MATMUL_PARAMS, MATMUL_EPILOGUE];
    /// The register-tiled matmul with B a quantised weight decoded into its
    /// f32 tiles as it is staged (GPUs without cooperative matrices).
    QuantMatmulTiled = "quant.matmul_tiled", entry "main", dtype F32, flags [EPILOGUE, TRUSTED],
        parts [shader!("matmul_tiled.wgsl"), shader!("quant_matmul_tiled.wgsl"), QUANT_B_OPERAND,
            QUANT_DECODE, QUANT_CODEC, MATMUL_TILED_CORE, MATMUL_PARAMS, MATMUL_EPILOGUE];
    /// f16 matmul on tensor cores (cooperative matrices), f32 accumulation.
    MatmulCoop = "matmul_coop", entry "main", dtype F32, flags [EPILOGUE, COOP_MATRIX, TRUSTED],
        parts [shader!("matmul_coop.wgsl"), SPLIT_F32, MATMUL_PARAMS, MATMUL_EPILOGUE, HALF_BITS];
    /// Copies a batch of matrices into another row/column count, zero-filling
    /// or cropping (the padding layer).
    PadCopy = "pad_copy", entry "main", dtype F32, flags [],
        parts [shader!("pad_copy.wgsl")];
    /// The same as bit moves into rows of a multiple of 16 bytes, 16 bytes
    /// per invocation (the padding layer's A and B, f16 or f32).
    PadCopyHalves = "pad_copy.halves", entry "halves", dtype F32, flags [],
        parts [shader!("pad_copy.wgsl")];
    /// M = 1 matmul (vector times matrix), K split over workgroups into f32 partials.
    GemvVecmat = "matmul_gemv.vecmat", entry "vecmat", dtype F32, flags [TRUSTED],
        parts [MATMUL_GEMV, MATMUL_PARAMS, MATMUL_EPILOGUE];
    /// The same reading B two adjacent columns at a time (N and B's row and
    /// batch strides even).
    GemvVecmatPairs = "matmul_gemv.vecmat_pairs", entry "vecmat_pairs", dtype F32, flags [TRUSTED],
        parts [MATMUL_GEMV, MATMUL_PARAMS, MATMUL_EPILOGUE];
    /// 2 <= M <= 8: `MR` (= M) rows of x per workgroup, the weight read once
    /// in column pairs, K split into f32 partials per row.
    GemvVecmatRows = "matmul_gemv.vecmat_rows", entry "vecmat_rows", dtype F32, flags [TRUSTED],
        parts [MATMUL_GEMV, MATMUL_PARAMS, MATMUL_EPILOGUE];
    /// M = 1 in one dispatch: a workgroup owns a few 16-byte words of
    /// columns over all of K (N and B's strides multiples of 16 bytes).
    GemvVecmatWide = "matmul_gemv.vecmat_wide", entry "vecmat_wide", dtype F32, flags [EPILOGUE, TRUSTED],
        parts [MATMUL_GEMV, MATMUL_PARAMS, MATMUL_EPILOGUE];
    /// Sums the vecmat partials into the output.
    GemvReduce = "matmul_gemv.reduce", entry "reduce", dtype F32, flags [EPILOGUE, TRUSTED],
        parts [MATMUL_GEMV, MATMUL_PARAMS, MATMUL_EPILOGUE];
    /// N = 1 matmul (matrix times vector).
    GemvMatvec = "matmul_gemv.matvec", entry "matvec", dtype F32, flags [EPILOGUE, TRUSTED],
        parts [MATMUL_GEMV, MATMUL_PARAMS, MATMUL_EPILOGUE];
    /// Sums split-K partial sums and applies the epilogue.
    MatmulSplitKReduce = "matmul_splitk", entry "main", dtype F32, flags [EPILOGUE, TRUSTED],
        parts [shader!("matmul_splitk.wgsl"), MATMUL_PARAMS, MATMUL_EPILOGUE];
    /// Partial maxima of |A| and |B| for the tensor-core matmul's f32 split
    /// form (its per-operand power-of-two scales).
    MatmulSplitScale = "matmul_split_scale", entry "main", dtype F32, flags [],
        parts [shader!("matmul_split_scale.wgsl")];
    /// Row sum/max (`OP` const) over the last axis, workgroup-memory tree;
    /// with `split` > 1 writes f32 partials for [`Kernel::ReduceCombine`].
    Reduce = "reduce", entry "main", dtype F32, flags [TRUSTED],
        parts [REDUCE, ROWOPS_COMMON, ROWOPS_PLAIN, ROWOPS_LOAD];
    /// [`Kernel::Reduce`] with subgroup reductions (needs `subgroups`).
    ReduceSubgroup = "reduce.subgroup", entry "main", dtype F32, flags [SUBGROUPS, TRUSTED],
        parts [ROWOPS_SUBGROUP, REDUCE, ROWOPS_COMMON, ROWOPS_LOAD];
    /// Second pass of a split reduction: one workgroup per row sums (or
    /// maxes) its partials.
    ReduceCombine = "reduce.combine", entry "combine", dtype F32, flags [TRUSTED],
        parts [REDUCE, ROWOPS_COMMON, ROWOPS_PLAIN, ROWOPS_LOAD];
    /// Softmax / log-softmax of rows held in registers (one read).
    Softmax = "softmax", entry "main", dtype F32, flags [TRUSTED],
        parts [SOFTMAX, ROWOPS_COMMON, ROWOPS_PLAIN, ROWOPS_LOAD, ROWOPS_STORE, ROWOPS_WRITE];
    /// [`Kernel::Softmax`] with subgroup reductions.
    SoftmaxSubgroup = "softmax.subgroup", entry "main", dtype F32, flags [SUBGROUPS, TRUSTED],
        parts [ROWOPS_SUBGROUP, SOFTMAX, ROWOPS_COMMON, ROWOPS_LOAD, ROWOPS_STORE, ROWOPS_WRITE];
    /// Online softmax for rows longer than the registers hold (two reads).
    SoftmaxOnline = "softmax.online", entry "online", dtype F32, flags [TRUSTED],
        parts [SOFTMAX, ROWOPS_COMMON, ROWOPS_PLAIN, ROWOPS_LOAD, ROWOPS_STORE, ROWOPS_WRITE];
    /// [`Kernel::SoftmaxOnline`] with subgroup reductions.
    SoftmaxOnlineSubgroup = "softmax.online.subgroup", entry "online", dtype F32, flags [SUBGROUPS, TRUSTED],
        parts [ROWOPS_SUBGROUP, SOFTMAX, ROWOPS_COMMON, ROWOPS_LOAD, ROWOPS_STORE, ROWOPS_WRITE];
    /// LayerNorm / RMSNorm of rows held in registers (one read).
    Norm = "norm", entry "main", dtype F32, flags [TRUSTED],
        parts [NORM, ROWOPS_COMMON, ROWOPS_PLAIN, ROWOPS_LOAD, ROWOPS_STORE, ROWOPS_WRITE];
    /// [`Kernel::Norm`] with subgroup reductions.
    NormSubgroup = "norm.subgroup", entry "main", dtype F32, flags [SUBGROUPS, TRUSTED],
        parts [ROWOPS_SUBGROUP, NORM, ROWOPS_COMMON, ROWOPS_LOAD, ROWOPS_STORE, ROWOPS_WRITE];
    /// LayerNorm / RMSNorm of long rows: streamed Welford/Chan statistics,
    /// then a second read to write.
    NormStreaming = "norm.streaming", entry "streaming", dtype F32, flags [TRUSTED],
        parts [NORM, ROWOPS_COMMON, ROWOPS_PLAIN, ROWOPS_LOAD, ROWOPS_STORE, ROWOPS_WRITE];
    /// Copy through the row kernels' load/store hooks (the bandwidth reference).
    RowCopy = "rowops_copy", entry "main", dtype F32, flags [TRUSTED],
        parts [shader!("rowops_copy.wgsl"), ROWOPS_COMMON, ROWOPS_PLAIN, ROWOPS_LOAD, ROWOPS_STORE, ROWOPS_WRITE];
    /// FlashAttention forward (online softmax, K/V blocks streamed through
    /// workgroup memory); with `SPLIT = 1` the split-KV (flash-decoding) pass.
    AttentionFlash = "attention_flash", entry "main", dtype F32, flags [TRUSTED],
        parts [shader!("attention_flash.wgsl"), ATTENTION_COMMON];
    /// FlashAttention forward on tensor cores (cooperative matrices, f16
    /// inputs, Vulkan only).
    AttentionFlashCoop = "attention_flash_coop", entry "main", dtype F32, flags [COOP_MATRIX, SUBGROUPS, TRUSTED],
        parts [ATTENTION_COOP_MMA, ATTENTION_FLASH_COOP, ATTENTION_COOP_ROWS, SPLIT_F32, ATTENTION_COMMON, HALF_BITS];
    /// The tensor-core flash kernel's algorithm with the matrix operations
    /// emulated per invocation (no cooperative matrices; slow): tests the
    /// algorithm on any adapter with f16 and subgroups.
    AttentionFlashCoopEmulated = "attention_flash_coop_emulated", entry "main", dtype F32, flags [SUBGROUPS],
        parts [ATTENTION_COOP_EMULATED, ATTENTION_FLASH_COOP, ATTENTION_COOP_ROWS, SPLIT_F32, ATTENTION_COMMON, HALF_BITS];
    /// The per-head power-of-two exponents of q, k and v that the tensor-core
    /// flash kernel's f32 (split) form scales its inputs by.
    AttentionSplitScale = "attention_split_scale", entry "main", dtype F32, flags [],
        parts [shader!("attention_split_scale.wgsl"), ATTENTION_COMMON];
    /// Merges split-KV partial attention states into the output.
    AttentionMerge = "attention_merge", entry "merge", dtype F32, flags [TRUSTED],
        parts [shader!("attention_merge.wgsl"), ATTENTION_COMMON];
    /// Naive attention, pass 1: the full score matrix S = mask(scale Q K^T).
    AttentionScores = "attention_naive.scores", entry "scores", dtype F32, flags [],
        parts [ATTENTION_NAIVE, ATTENTION_COMMON];
    /// Naive attention, pass 2: row softmax of S in place, and logsumexp.
    AttentionSoftmax = "attention_naive.softmax", entry "softmax", dtype F32, flags [],
        parts [ATTENTION_NAIVE, ATTENTION_COMMON];
    /// Naive attention, pass 3: O = P V.
    AttentionPv = "attention_naive.pv", entry "pv", dtype F32, flags [],
        parts [ATTENTION_NAIVE, ATTENTION_COMMON];
    /// Attention backward: lse in log2 units and Delta = rowsum(dO * O).
    AttentionBwdPrepare = "attention_backward.prepare", entry "prepare", dtype F32, flags [TRUSTED],
        parts [shader!("attention_backward.wgsl"), ATTENTION_BACKWARD_COMMON, ATTENTION_COMMON];
    /// Attention backward: dK and dV per key block (recomputing P).
    AttentionBwdDkDv = "attention_backward.dkdv", entry "dkdv", dtype F32, flags [TRUSTED],
        parts [shader!("attention_backward.wgsl"), ATTENTION_BACKWARD_COMMON, ATTENTION_COMMON];
    /// Attention backward: dQ per query block (recomputing P).
    AttentionBwdDq = "attention_backward.dq", entry "dq", dtype F32, flags [TRUSTED],
        parts [shader!("attention_backward.wgsl"), ATTENTION_BACKWARD_COMMON, ATTENTION_COMMON];
    /// Attention backward on tensor cores: dK and dV per block of keys
    /// (cooperative matrices, f16, Vulkan only).
    AttentionBwdCoopDkDv = "attention_bwd_coop_dkdv", entry "main", dtype F32, flags [COOP_MATRIX, SUBGROUPS, TRUSTED],
        parts [ATTENTION_COOP_MMA, shader!("attention_bwd_coop_dkdv.wgsl"), ATTENTION_BWD_COOP_COMMON, ATTENTION_BACKWARD_COMMON, ATTENTION_COMMON];
    /// Attention backward on tensor cores: dQ per block of query rows.
    AttentionBwdCoopDq = "attention_bwd_coop_dq", entry "main", dtype F32, flags [COOP_MATRIX, SUBGROUPS, TRUSTED],
        parts [ATTENTION_COOP_MMA, shader!("attention_bwd_coop_dq.wgsl"), ATTENTION_BWD_COOP_COMMON, ATTENTION_BACKWARD_COMMON, ATTENTION_COMMON];
    /// The tensor-core dK/dV kernel's algorithm with emulated matrix
    /// operations (tests, on any adapter with f16 and subgroups).
    AttentionBwdCoopDkDvEmulated = "attention_bwd_coop_dkdv_emulated", entry "main", dtype F32, flags [SUBGROUPS],
        parts [ATTENTION_COOP_EMULATED, shader!("attention_bwd_coop_dkdv.wgsl"), ATTENTION_BWD_COOP_COMMON, ATTENTION_BACKWARD_COMMON, ATTENTION_COMMON];
    /// The tensor-core dQ kernel's algorithm with emulated matrix operations.
    AttentionBwdCoopDqEmulated = "attention_bwd_coop_dq_emulated", entry "main", dtype F32, flags [SUBGROUPS],
        parts [ATTENTION_COOP_EMULATED, shader!("attention_bwd_coop_dq.wgsl"), ATTENTION_BWD_COOP_COMMON, ATTENTION_BACKWARD_COMMON, ATTENTION_COMMON];
    /// Split-KV decode on tensor cores: a subgroup per (KV head, 16 packed
    /// rows, key split), K and V fragments loaded straight from memory.
    AttentionDecodeCoop = "attention_decode_coop", entry "main", dtype F16, flags [COOP_MATRIX, SUBGROUPS],
        parts [ATTENTION_COOP_MMA, shader!("attention_decode_coop_mma.wgsl"), ATTENTION_DECODE_COOP, ATTENTION_COOP_ROWS, ATTENTION_COMMON];
    /// The tensor-core decode kernel's algorithm with emulated matrix
    /// operations (tests).
    AttentionDecodeCoopEmulated = "attention_decode_coop_emulated", entry "main", dtype F16, flags [SUBGROUPS],
        parts [ATTENTION_COOP_EMULATED, shader!("attention_decode_coop_emulated.wgsl"), ATTENTION_DECODE_COOP, ATTENTION_COOP_ROWS, ATTENTION_COMMON];
    /// Split-KV decode attention for few query rows (bandwidth-shaped;
    /// writes the merge kernel's partial states).
    AttentionDecode = "attention_decode", entry "main", dtype F32, flags [TRUSTED],
        parts [shader!("attention_decode.wgsl"), shader!("attention_decode_plain.wgsl"), ATTENTION_COMMON];
    /// [`Kernel::AttentionDecode`] adding each key's partial dots with
    /// subgroup shuffles (one barrier per block; `SHUFFLE = 1`).
    AttentionDecodeShuffle = "attention_decode_shuffle", entry "main", dtype F32, flags [SUBGROUPS, TRUSTED],
        parts [shader!("attention_decode.wgsl"), shader!("attention_decode_shuffle.wgsl"), ATTENTION_COMMON];
    /// The largest finite |x| of a tensor (NVFP4's per-tensor scale).
    QuantAmax = "quant.amax", entry "amax", dtype F32, flags [TRUSTED],
        parts [QUANT_CODEC, QUANT_COMMON, QUANT_LANES, QUANT];
    /// Flags a quantised weight holding a block whose decoded values leave
    /// f16's range (the tensor-core quantised GEMM's first pass).
    QuantScaleCheck = "quant.scale_check", entry "scale_check", dtype F32, flags [TRUSTED],
        parts [shader!("quant_scale_check.wgsl"), QUANT_DECODE, QUANT_CODEC];
    /// A quantised weight times x in f32, one invocation per output (the
    /// tensor-core quantised GEMM's fallback).
    QuantMatmulNaive = "quant.matmul_naive", entry "main", dtype F32, flags [EPILOGUE, TRUSTED],
        parts [shader!("quant_matmul_naive.wgsl"), QUANT_PRODUCT_PARAMS, QUANT_DECODE, QUANT_CODEC, MATMUL_EPILOGUE];
    /// Block-scaled quantisation: one invocation per 4 blocks (`FORMAT`).
    Quantize = "quant.quantize", entry "quantize", dtype F32, flags [TRUSTED],
        parts [QUANT_CODEC, QUANT_COMMON, QUANT_LANES, QUANT];
    /// Block-scaled quantisation along rows, one invocation per packed word
    /// (coalesced; 4 words per block at most WG / 4).
    QuantizeWords = "quant.quantize_words", entry "quantize_words", dtype F32, flags [TRUSTED],
        parts [QUANT_CODEC, QUANT_COMMON, QUANT_LANES, QUANT];
    /// Dequantisation to f32, one invocation per element.
    Dequantize = "quant.dequantize", entry "dequantize", dtype F32, flags [TRUSTED],
        parts [QUANT_CODEC, QUANT_COMMON, QUANT_LANES, QUANT];
    /// Block-scaled quantisation down columns (cols % 4 == 0), one
    /// invocation per packed word, adjacent columns adjacent (coalesced).
    QuantizeCols = "quant.quantize_cols", entry "quantize_cols", dtype F32, flags [TRUSTED],
        parts [QUANT_CODEC, QUANT_COMMON, QUANT_LANES, QUANT];
    /// Block-scaled quantisation down columns (cols % 4 == 0), one
    /// invocation per block, adjacent columns adjacent (coalesced).
    QuantizeColBlocks = "quant.quantize_col_blocks", entry "quantize_col_blocks", dtype F32, flags [TRUSTED],
        parts [QUANT_CODEC, QUANT_COMMON, QUANT_LANES, QUANT];
    /// Dequantisation of blocks down columns, one invocation per 4 rows of
    /// a column.
    DequantizeCols = "quant.dequantize_cols", entry "dequantize_cols", dtype F32, flags [TRUSTED],
        parts [QUANT_CODEC, QUANT_COMMON, QUANT_LANES, QUANT];
    /// [`Kernel::QuantizeWords`] with 16-byte loads (cols % 8 == 0).
    QuantizeVec = "quant.quantize_vec", entry "quantize_vec", dtype F32, flags [TRUSTED],
        parts [QUANT_CODEC, QUANT_COMMON, QUANT_LANES, QUANT_VEC];
    /// [`Kernel::QuantizeWords`] with each block's statistics met by
    /// subgroup shuffles (needs `subgroups` holding a block's words).
    QuantizeWordsShuffle = "quant.quantize_words.shuffle", entry "quantize_words", dtype F32, flags [SUBGROUPS, TRUSTED],
        parts [QUANT_CODEC, QUANT_COMMON, QUANT_LANES_SUBGROUP, QUANT];
    /// [`Kernel::QuantizeVec`] with subgroup shuffles, as
    /// [`Kernel::QuantizeWordsShuffle`].
    QuantizeVecShuffle = "quant.quantize_vec.shuffle", entry "quantize_vec", dtype F32, flags [SUBGROUPS, TRUSTED],
        parts [QUANT_CODEC, QUANT_COMMON, QUANT_LANES_SUBGROUP, QUANT_VEC];
    /// Dequantisation along rows, 4 elements and one 16-byte store per
    /// invocation (cols % 4 == 0).
    DequantizeVec = "quant.dequantize_vec", entry "dequantize_vec", dtype F32, flags [TRUSTED],
        parts [QUANT_CODEC, QUANT_COMMON, QUANT_LANES, QUANT_VEC];
    /// `x @ W^T` with a row-blocked quantised W, decoded in registers (M <= 8).
    QuantGemv = "quant_gemv", entry "main", dtype F32, flags [EPILOGUE, TRUSTED],
        parts [shader!("quant_gemv.wgsl"), QUANT_GEMV_COMMON, QUANT_PRODUCT_PARAMS, QUANT_DECODE, QUANT_CODEC, MATMUL_EPILOGUE];
    /// `x @ W` with a column-blocked quantised W [K, N]: adjacent columns on
    /// adjacent invocations, x broadcast (M <= 8).
    QuantGemvCols = "quant_gemv_cols", entry "main", dtype F32, flags [EPILOGUE, TRUSTED],
        parts [shader!("quant_gemv_cols.wgsl"), QUANT_GEMV_COMMON, QUANT_PRODUCT_PARAMS, QUANT_DECODE, QUANT_CODEC, MATMUL_EPILOGUE];
    /// Adds quant_gemv_cols' partial sums when K is split over workgroups.
    QuantGemvColsReduce = "quant_gemv_cols.reduce_k", entry "reduce_k", dtype F32, flags [EPILOGUE, TRUSTED],
        parts [shader!("quant_gemv_cols.wgsl"), QUANT_GEMV_COMMON, QUANT_PRODUCT_PARAMS, QUANT_DECODE, QUANT_CODEC, MATMUL_EPILOGUE];
    /// Matmul for CPU adapters (llvmpipe): one subgroup of 8 lanes per
    /// workgroup shares its rows of A through subgroupBroadcast, no workgroup
    /// memory; strided scalar loads, any layout.
    MatmulBroadcast = "matmul_broadcast", entry "main", dtype F32, flags [EPILOGUE, SUBGROUPS, TRUSTED],
        parts [shader!("matmul_broadcast.wgsl"), MATMUL_BROADCAST_CORE, MATMUL_PARAMS, MATMUL_EPILOGUE];
    /// The same with 16-byte loads and stores (row-major operands, pitches
    /// and N multiples of 4).
    MatmulBroadcastVec4 = "matmul_broadcast_vec4", entry "main", dtype F32, flags [EPILOGUE, SUBGROUPS, TRUSTED],
        parts [shader!("matmul_broadcast_vec4.wgsl"), MATMUL_BROADCAST_CORE, MATMUL_PARAMS, MATMUL_EPILOGUE];
}

impl Kernel {
    /// The WGSL text as written in `shaders/`: the kernel's own file, then any
    /// shared part it is built from (concatenated in this order).
    pub const fn parts(self) -> &'static [&'static str] {
        self.row().parts
    }

    /// File name under `shaders/`, also the pipeline label.
    pub const fn name(self) -> &'static str {
        self.row().name
    }

    /// Entry point name.
    pub const fn entry_point(self) -> &'static str {
        self.row().entry
    }

    /// The one dtype a kernel that is not dtype-generic works in (the fill
    /// kernel is dtype-agnostic and listed as f32; the coop kernel's dtype is
    /// its output's, its inputs are set by `INPUT_F32`), and the default
    /// dtype of [`Spec::new`](super::Spec::new) (f16 for the tensor-core
    /// decode kernel, which is f16 only).
    pub const fn fixed_dtype(self) -> DType {
        self.row().dtype
    }

    /// Whether the kernel ends with the fused matmul epilogue (bindings 5
    /// and 6, `EPI_*` consts; `GemvVecmat` writes partial sums and has none).
    pub const fn has_epilogue(self) -> bool {
        self.row().flags & EPILOGUE != 0
    }

    /// Whether the kernel uses cooperative matrices (needs the experimental
    /// feature; naga translates it to SPIR-V only).
    pub const fn uses_cooperative_matrix(self) -> bool {
        self.row().flags & COOP_MATRIX != 0
    }

    /// Whether the kernel uses subgroup operations (needs the `subgroups`
    /// feature; the dispatcher picks these only when the adapter has it).
    pub const fn uses_subgroups(self) -> bool {
        self.row().flags & SUBGROUPS != 0
    }

    /// Whether the kernel is compiled without wgpu's runtime checks (see
    /// `TRUSTED` in `src/kernels/registry.rs` for what that demands).
    pub const fn trusted(self) -> bool {
        self.row().flags & TRUSTED != 0
    }

    /// Whether the source declares `alias Elem = f32;` and so accepts a dtype.
    pub fn is_dtype_generic(self) -> bool {
        self.parts()
            .iter()
            .any(|p| p.lines().any(|l| l.trim() == super::ELEM_ALIAS))
    }
}
