//! The matmul dispatcher: kernels and tile shapes, the adapter's limits as
//! filters, the heuristic pick by shape class and wave count, and every
//! specialisation it can produce.

use std::fmt;

use super::has_coop_f16;
use super::matmul_cost::*;
use crate::dtype::DType;
use crate::gpu::AdapterProfile;
use crate::kernels::codegen::matmul_coop as gen_coop;
use crate::kernels::{Kernel, Spec};

mod choose;
mod specs;
mod split;

pub use choose::*;
pub use specs::*;
pub use split::*;

/// Tile shape of the register-tiled matmul kernels (each invocation owns a
/// `reg` x `reg` register tile of C, so the workgroup is `bn / reg` x
/// `bm / reg`; `reg` is 8, or 16 on CPU adapters).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct TileConfig {
    /// Rows of C per workgroup (a multiple of `reg`).
    pub bm: u32,
    /// Columns of C per workgroup (a multiple of `reg`).
    pub bn: u32,
    /// K step staged through workgroup memory (a multiple of 4).
    pub bk: u32,
    /// Side of the square register tile of each invocation: 8
    /// (`matmul_tiled_core.wgsl`) or 16 (`matmul_tiled16_core.wgsl`, for CPU
    /// adapters).
    #[serde(default = "default_register_tile")]
    pub reg: u32,
}

/// Side of the square register tile each invocation of the GPU tiled kernels owns.
pub const REGISTER_TILE: u32 = 8;

fn default_register_tile() -> u32 {
    REGISTER_TILE
}

impl TileConfig {
    /// A tile shape with the GPU register tile (8 x 8 per invocation).
    pub const fn new(bm: u32, bn: u32, bk: u32) -> Self {
        Self {
            bm,
            bn,
            bk,
            reg: REGISTER_TILE,
        }
    }

    /// Invocations per workgroup.
    pub const fn threads(self) -> u32 {
        (self.bm / self.reg) * (self.bn / self.reg)
    }

    /// Workgroup memory in bytes (f32 tiles of A and B).
    pub const fn workgroup_bytes(self) -> u32 {
        (self.bm + self.bn) * self.bk * 4
    }

    /// Whether the adapter can run this tile shape.
    pub fn fits(self, p: &AdapterProfile) -> bool {
        self.threads() <= p.max_invocations
            && matches!(self.reg, 8 | 16)
            && self.bn / self.reg <= p.max_workgroup_size_x
            && self.bm / self.reg <= p.max_workgroup_size_y
            && self.workgroup_bytes() <= p.max_workgroup_storage
    }
}

impl fmt::Display for TileConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}x{}x{}", self.bm, self.bn, self.bk)
    }
}

/// Tile shapes the dispatcher may choose, largest first.
pub const TILE_CONFIGS: [TileConfig; 3] = [
    TileConfig::new(128, 128, 8),
    TileConfig::new(64, 128, 8),
    TileConfig::new(64, 64, 16),
];

/// Tile shapes for CPU adapters (llvmpipe): a 16 x 16 register tile per
/// invocation, 64 invocations per workgroup. At 512^3 on lavapipe (2 cores):
/// 91 ms against 159 for the best 8 x 8 tile and 1023 for the naive kernel
/// (docs/perf/log-2026-11.md): there, work per invocation pays, not occupancy. CPU
/// adapters with subgroups of exactly 8 lanes take [`MatmulKernel::Broadcast`]
/// instead (about 3x faster again); this is the fallback for the others.
pub const CPU_TILE_CONFIGS: [TileConfig; 1] = [TileConfig {
    bm: 128,
    bn: 128,
    bk: 16,
    reg: 16,
}];

/// Rows of C per workgroup of the subgroup-broadcast CPU kernel
/// ([`MatmulKernel::Broadcast`]; fixed by `tools/gen/matmul_broadcast_core.py`,
/// which unrolls the kernel for it).
pub const BROADCAST_ROWS: u32 = 32;

/// Columns of C per workgroup of the subgroup-broadcast CPU kernel (two
/// 4-wide column groups per lane).
pub const BROADCAST_COLS: u32 = 64;

/// Lanes per subgroup the subgroup-broadcast kernel is written for: its
/// workgroup is one subgroup of exactly this many lanes (llvmpipe on AVX2).
pub const BROADCAST_SUBGROUP: u32 = 8;

/// Workgroup shapes of the naive kernel, largest first; the first that fits
/// the adapter's invocation limit is used.
pub const NAIVE_WORKGROUPS: [(u32, u32); 3] = [(16, 16), (8, 8), (4, 4)];

/// A matmul kernel and its parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum MatmulKernel {
    /// One invocation per output; workgroup `(x, y)`.
    Naive {
        /// Workgroup width (along N).
        wg_x: u32,
        /// Workgroup height (along M).
        wg_y: u32,
    },
    /// Workgroup-memory and register tiling.
    Tiled {
        /// Workgroup tile.
        tile: TileConfig,
        /// 16-byte global loads and stores (needs K and N multiples of 4).
        vec4: bool,
    },
    /// Tensor cores through cooperative matrices (f16 only; K and N multiples
    /// of 8). Each subgroup owns 64 x (16 `frags_n`) of C, the workgroup
    /// `warps_m x warps_n` subgroups.
    Coop {
        /// Subgroups along M (64 rows each).
        warps_m: u32,
        /// Subgroups along N (16 `frags_n` columns each).
        warps_n: u32,
        /// K step staged through workgroup memory (a multiple of 16).
        bk: u32,
        /// 16-wide accumulator tiles per subgroup along N (2 or 4): 4 doubles
        /// the work per fragment loaded from workgroup memory but needs twice
        /// the accumulator registers.
        #[serde(default = "two")]
        frags_n: u32,
        /// Subgroup size the workgroup is laid out for.
        subgroup: u32,
        /// f32 operands at f32's accuracy: each value (scaled by its
        /// operand's power of two) split into two f16 halves, three products
        /// per fragment pair (`SPLIT = 1`; a pass before the kernel finds
        /// the scales). Without it f32 operands are rounded to f16
        /// (`MatmulOptions::reduced_precision`). For bf16 operands: each
        /// scaled by its power of two before the narrowing to f16, one part
        /// (`BF16_SCALED = 1`).
        #[serde(default)]
        split: bool,
    },
    /// The tiled kernel over `splits` chunks of K, each in its own workgroup,
    /// writing f32 partial sums that a second pass adds (for M x N too small
    /// to fill the GPU with a long K).
    SplitK {
        /// Workgroup tile.
        tile: TileConfig,
        /// 16-byte global loads (needs K and N multiples of 4).
        vec4: bool,
        /// Chunks K is split into (>= 2).
        splits: u32,
    },
    /// Matrix-vector product (M = 1 or N = 1): memory-bound, judged in GB/s.
    /// For M = 1, K is split over workgroups into f32 partial sums.
    Gemv,
    /// CPU adapters (llvmpipe): a workgroup is one subgroup of
    /// `BROADCAST_SUBGROUP` lanes owning `BROADCAST_ROWS` x
    /// `BROADCAST_COLS` of C; the lanes load a tile of A together and
    /// share it with subgroupBroadcast, each lane loads its own columns of B.
    /// No workgroup memory and no barriers: on llvmpipe every non-constant
    /// load costs a loop over the lanes, and this layout needs the fewest.
    Broadcast {
        /// 16-byte loads and stores (row-major operands, pitches and N
        /// multiples of 4); otherwise strided scalar loads, any layout.
        vec4: bool,
    },
}

fn two() -> u32 {
    2
}

/// Invocations per workgroup of the matrix-vector kernels (64 x 4).
pub const GEMV_THREADS: u32 = 256;

/// Cooperative-matrix workgroup shapes (warps_m, warps_n, bk, frags_n), in
/// the dispatcher's order of preference: it takes the first whose grid fills
/// a wave. Measured on the H200 (f16, 4096 / 2048, GFLOP/s, docs/perf/log-2026-11.md
/// run 14): 4x4x32x2 (256x128, subgroups of 64x32) 229696 / 206887,
/// 2x2x32x4 (128x128, subgroups of 64x64) 215400 / 187914; run 12 also had
/// 2x4x32x4 (128x256) and 4x2x32x4 (256x128) 3-8% behind. 128-invocation
/// workgroups share an SM, so the small 2x2 layout is the next choice when
/// the big one leaves too few workgroups.
pub const COOP_CONFIGS: [(u32, u32, u32, u32); 6] = [
    (4, 4, 32, 2),
    (2, 2, 32, 4),
    (2, 4, 32, 4),
    (4, 2, 32, 4),
    (2, 2, 32, 2),
    (1, 2, 32, 2),
];

impl TileConfig {
    /// Why this tile cannot be a kernel's, naming the field: a register
    /// tile of 8 or 16, whole register tiles in `bm` and `bn`, a K step
    /// that is a positive multiple of 4.
    pub fn invalid_reason(self) -> Option<String> {
        if !matches!(self.reg, 8 | 16) {
            return Some(format!("tile reg = {} (must be 8 or 16)", self.reg));
        }
        for (name, v) in [("bm", self.bm), ("bn", self.bn)] {
            if v == 0 || !v.is_multiple_of(self.reg) {
                return Some(format!(
                    "tile {name} = {v} (must be a positive multiple of reg = {})",
                    self.reg
                ));
            }
        }
        if self.bk == 0 || !self.bk.is_multiple_of(4) {
            return Some(format!("tile bk = {} (must be a positive multiple of 4)", self.bk));
        }
        None
    }
}

impl MatmulKernel {
    /// Why a forced kernel's parameters cannot run, naming the field
    /// (`None`: well formed; whether the adapter runs it is `fits`).
    pub fn invalid_reason(self) -> Option<String> {
        match self {
            MatmulKernel::Naive { wg_x, wg_y } => (wg_x == 0 || wg_y == 0)
                .then(|| format!("naive workgroup {wg_x} x {wg_y} (both must be at least 1)")),
            MatmulKernel::Tiled { tile, .. } => tile.invalid_reason(),
            MatmulKernel::SplitK { tile, splits, .. } => tile.invalid_reason().or_else(|| {
                (splits < 2).then(|| format!("split-K splits = {splits} (must be at least 2)"))
            }),
            MatmulKernel::Coop {
                warps_m,
                warps_n,
                bk,
                frags_n,
                subgroup,
                ..
            } => {
                if warps_m == 0 || warps_n == 0 {
                    Some(format!(
                        "coop warps {warps_m} x {warps_n} (both must be at least 1)"
                    ))
                } else if bk == 0 || !bk.is_multiple_of(16) {
                    Some(format!("coop bk = {bk} (must be a positive multiple of 16)"))
                } else if !matches!(frags_n, 2 | 4) {
                    Some(format!("coop frags_n = {frags_n} (must be 2 or 4)"))
                } else if subgroup == 0 || !subgroup.is_multiple_of(16) {
                    Some(format!(
                        "coop subgroup = {subgroup} (must be a positive multiple of 16)"
                    ))
                } else {
                    None
                }
            }
            MatmulKernel::Gemv | MatmulKernel::Broadcast { .. } => None,
        }
    }
}

impl MatmulKernel {
    /// The cooperative-matrix kernel `(warps_m, warps_n, bk, frags_n)` laid out for the
    /// adapter's subgroup size, when the adapter can run it at all.
    pub fn coop_for(p: &AdapterProfile, layout: (u32, u32, u32, u32)) -> Option<Self> {
        Self::coop_with(p, layout, false)
    }

    /// The same tensor-core layout with `split` set (for bf16 operands the
    /// scaled form, for f32 the split); other kernels unchanged.
    pub fn with_split(self, split: bool) -> Self {
        match self {
            MatmulKernel::Coop { warps_m, warps_n, bk, frags_n, subgroup, .. } => {
                MatmulKernel::Coop { warps_m, warps_n, bk, frags_n, subgroup, split }
            }
            other => other,
        }
    }

    /// The f32 split form of the cooperative-matrix kernel (see
    /// [`MatmulKernel::Coop`]'s `split`), when the adapter can run it.
    pub fn coop_split_for(p: &AdapterProfile, layout: (u32, u32, u32, u32)) -> Option<Self> {
        Self::coop_with(p, layout, true)
    }

    fn coop_with(
        p: &AdapterProfile,
        (warps_m, warps_n, bk, frags_n): (u32, u32, u32, u32),
        split: bool,
    ) -> Option<Self> {
        let kernel = MatmulKernel::Coop {
            warps_m,
            warps_n,
            bk,
            frags_n,
            subgroup: p.subgroup_max_size,
            split,
        };
        kernel.fits(p).then_some(kernel)
    }
}

/// The tiled kernels guarded for the f32 split plan's fallback
/// ([`Spec::guarded`]): the maxima pass's flag is word 2 of its output,
/// bound at 9.
pub(crate) fn tiled_guarded(spec: Spec) -> Spec {
    spec.guarded(9, "2u")
}

/// The tensor-core kernel writing a bf16 result from its f32 epilogue, two
/// columns per word (`OUT_BF16`; N must be even).
pub(crate) fn coop_out_bf16(spec: Spec) -> Spec {
    spec.dtype(DType::F32)
        .constant("OUT_BF16", 1)
        .alias("OutStore", "u32")
}

impl MatmulKernel {
    /// The naive kernel with the largest workgroup the adapter allows.
    pub fn naive_for(p: &AdapterProfile) -> Self {
        let (wg_x, wg_y) = NAIVE_WORKGROUPS
            .into_iter()
            .find(|&(x, y)| x * y <= p.max_invocations)
            .unwrap_or((1, 1));
        MatmulKernel::Naive { wg_x, wg_y }
    }

    /// The kernel specialisation for `dtype`.
    pub fn spec(self, dtype: DType) -> Spec {
        match self {
            MatmulKernel::Naive { wg_x, wg_y } => Spec::new(Kernel::MatmulNaive)
                .dtype(dtype)
                .override_("WG_X", wg_x)
                .override_("WG_Y", wg_y),
            MatmulKernel::Tiled { tile, vec4 } => Spec::new(match (vec4, tile.reg) {
                (true, 16) => Kernel::MatmulTiled16Vec4,
                (false, 16) => Kernel::MatmulTiled16,
                (true, _) => Kernel::MatmulTiledVec4,
                (false, _) => Kernel::MatmulTiled,
            })
            .dtype(dtype)
            .constant("BM", tile.bm)
            .constant("BN", tile.bn)
            .constant("BK", tile.bk),
            MatmulKernel::Coop {
                warps_m,
                warps_n,
                bk,
                frags_n,
                subgroup,
                split,
            } => {
                let spec = Spec::new(Kernel::MatmulCoop)
                    .dtype(dtype)
                    // f32 operands are rounded to f16 when staged (reduced
                    // precision, which only an explicit option selects), or
                    // split into two halves each.
                    .constant("INPUT_F32", u32::from(dtype == DType::F32))
                    .constant("WARPS_M", warps_m)
                    .constant("WARPS_N", warps_n)
                    .constant("BK", bk)
                    .constant("FN", frags_n)
                    .constant("SG", subgroup);
                // bf16 operands: the f16 layout, widened and narrowed when staged.
                let spec = if dtype == DType::BF16 {
                    spec.constant("INPUT_BF16", 1)
                } else {
                    spec
                };
                match (split, dtype) {
                    (true, DType::F32) => spec
                        .constant("SPLIT", 1)
                        .block("split_decl", gen_coop::COOP_SPLIT_DECL)
                        .block("split_exps", gen_coop::COOP_SPLIT_EXPS)
                        .block("split_products", gen_coop::coop_split_products(frags_n)),
                    // bf16 scaled by each operand's power of two before the
                    // narrowing (the split's scale, one f16 part).
                    (true, DType::BF16) => spec
                        .constant("BF16_SCALED", 1)
                        .block("split_decl", gen_coop::COOP_SPLIT_DECL)
                        .block("split_exps", gen_coop::COOP_SPLIT_EXPS),
                    _ => spec,
                }
            }
            MatmulKernel::Gemv => Spec::new(Kernel::GemvVecmat).dtype(dtype),
            MatmulKernel::Broadcast { vec4 } => Spec::new(if vec4 {
                Kernel::MatmulBroadcastVec4
            } else {
                Kernel::MatmulBroadcast
            })
            .dtype(dtype),
            MatmulKernel::SplitK { tile, vec4, .. } => MatmulKernel::Tiled { tile, vec4 }
                .spec(dtype)
                .constant("SPLIT_K", 1),
        }
    }

    /// Rows and columns of C one workgroup covers.
    pub fn block(self) -> (u32, u32) {
        match self {
            MatmulKernel::Naive { wg_x, wg_y } => (wg_y, wg_x),
            MatmulKernel::Tiled { tile, .. } => (tile.bm, tile.bn),
            MatmulKernel::Coop {
                warps_m,
                warps_n,
                frags_n,
                ..
            } => (64 * warps_m, 16 * frags_n * warps_n),
            MatmulKernel::Gemv => (4, 64),
            MatmulKernel::SplitK { tile, .. } => (tile.bm, tile.bn),
            MatmulKernel::Broadcast { .. } => (BROADCAST_ROWS, BROADCAST_COLS),
        }
    }

    /// Invocations per workgroup.
    pub fn threads(self) -> u32 {
        match self {
            MatmulKernel::Naive { wg_x, wg_y } => wg_x * wg_y,
            MatmulKernel::Tiled { tile, .. } => tile.threads(),
            MatmulKernel::Coop {
                warps_m,
                warps_n,
                subgroup,
                ..
            } => warps_m * warps_n * subgroup,
            MatmulKernel::Gemv => GEMV_THREADS,
            MatmulKernel::SplitK { tile, .. } => tile.threads(),
            MatmulKernel::Broadcast { .. } => BROADCAST_SUBGROUP,
        }
    }

    /// Workgroup memory in bytes.
    pub fn workgroup_bytes(self) -> u32 {
        match self {
            MatmulKernel::Naive { .. } | MatmulKernel::Broadcast { .. } => 0,
            // sums (512 f32) and sums2 (512 vec2<f32>), declared in one module.
            MatmulKernel::Gemv => 4 * 512 + 8 * 512,
            MatmulKernel::SplitK { tile, .. } => tile.workgroup_bytes(),
            MatmulKernel::Tiled { tile, .. } => tile.workgroup_bytes(),
            MatmulKernel::Coop {
                warps_m,
                warps_n,
                bk,
                split,
                ..
            } => {
                // The A and B tiles row-major or staged as stored
                // (transposed, TRANS_COLMAJOR), whichever is larger; twice
                // (hi and lo) when split.
                let (bm, bn) = self.block();
                let a = (bm * (bk + 8)).max(bk * (bm + 8));
                let b = (bk * (bn + 8)).max(bn * (bk + 8));
                let tiles = if split { 2 } else { 1 };
                2 * tiles * (a + b) + 4 * 256 * warps_m * warps_n
            }
        }
    }

    /// Whether the adapter can run it.
    pub fn fits(self, p: &AdapterProfile) -> bool {
        match self {
            MatmulKernel::Naive { wg_x, wg_y } => {
                wg_x * wg_y <= p.max_invocations
                    && wg_x <= p.max_workgroup_size_x
                    && wg_y <= p.max_workgroup_size_y
            }
            MatmulKernel::Tiled { tile, .. } | MatmulKernel::SplitK { tile, .. } => tile.fits(p),
            MatmulKernel::Broadcast { .. } => {
                // The kernel broadcasts from constant lanes 0..8 and takes its
                // workgroup for one whole subgroup.
                p.subgroups
                    && p.subgroup_min_size == BROADCAST_SUBGROUP
                    && p.subgroup_max_size == BROADCAST_SUBGROUP
                    && BROADCAST_SUBGROUP <= p.max_invocations
                    && BROADCAST_SUBGROUP <= p.max_workgroup_size_x
            }
            MatmulKernel::Gemv => {
                GEMV_THREADS <= p.max_invocations
                    && p.max_workgroup_size_x >= 64
                    && p.max_workgroup_size_y >= 4
                    && self.workgroup_bytes() <= p.max_workgroup_storage
            }
            MatmulKernel::Coop {
                subgroup,
                frags_n,
                bk,
                split,
                ..
            } => {
                has_coop_f16(p)
                    // A and B bound twice, C, bias and residual (and the
                    // split's partial maxima).
                    && p.max_storage_buffers_per_stage >= if split { 8 } else { 7 }
                    && matches!(frags_n, 2 | 4)
                    && bk.is_multiple_of(16)
                    && subgroup == p.subgroup_max_size
                    && self.threads() <= p.max_invocations
                    && self.threads() <= p.max_workgroup_size_x
                    && self.workgroup_bytes() <= p.max_workgroup_storage
            }
        }
    }

    /// Whether the kernel runs `[m, k] x [k, n]` in `dtype` with A and/or B
    /// stored transposed (dense rows): the strided kernels always; the vec4
    /// tiled kernels when each operand's contiguous dimension and N are
    /// multiples of 4.
    #[allow(clippy::too_many_arguments)]
    pub fn accepts_layout(
        self,
        dtype: DType,
        m: usize,
        n: usize,
        k: usize,
        transpose_a: bool,
        transpose_b: bool,
    ) -> bool {
        self.accepts_with(
            dtype,
            m,
            n,
            k,
            Layout::dense(m, n, k, transpose_a, transpose_b),
        )
    }

    /// Whether the kernel can run `[m, k] x [k, n]` in `dtype` with operands
    /// stored as `layout` says (alignment, type, shape).
    pub fn accepts_with(self, dtype: DType, m: usize, n: usize, k: usize, layout: Layout) -> bool {
        // K needs no alignment: the kernels zero what a load reads past it.
        let _ = k;
        match self {
            MatmulKernel::Naive { .. } | MatmulKernel::Tiled { vec4: false, .. } => true,
            MatmulKernel::Tiled { vec4: true, .. } => layout.vec4(n),
            // Row-major or transposed operands, any M, N, K.
            MatmulKernel::Coop { split, .. } => {
                if split {
                    dtype == DType::F32
                } else {
                    dtype == DType::F16
                }
            }
            MatmulKernel::Gemv => {
                // matvec reads the vector B through its row pitch; a few
                // rows of x take B in column pairs (vecmat_rows).
                ((m == 1 || n == 1) && !layout.transposed())
                    || crate::tune::gemv::gemv_rows_fit(m, n, layout.b_pitch, layout.transposed())
            }
            MatmulKernel::SplitK { vec4, splits, .. } => splits >= 2 && (!vec4 || layout.vec4(n)),
            // The vec4 variant reads row-major operands only.
            MatmulKernel::Broadcast { vec4 } => !vec4 || (!layout.transposed() && layout.vec4(n)),
        }
    }

    /// Whether the kernel reads operands through row and column strides, and
    /// so can take transposed operands in place.
    pub fn reads_strided(self) -> bool {
        matches!(
            self,
            MatmulKernel::Naive { .. }
                | MatmulKernel::Tiled { vec4: false, .. }
                | MatmulKernel::SplitK { vec4: false, .. }
                | MatmulKernel::Broadcast { vec4: false }
        )
    }

    /// Whether the kernel runs `[m, k] x [k, n]` in `dtype` (alignment, type,
    /// shape) on dense row-major operands.
    pub fn accepts(self, dtype: DType, m: usize, n: usize, k: usize) -> bool {
        self.accepts_with(dtype, m, n, k, Layout::dense(m, n, k, false, false))
    }
}

/// How matmul operands are stored, for the kernels' alignment rules.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// A is stored transposed (`[K, M]`).
    pub transpose_a: bool,
    /// B is stored transposed (`[N, K]`).
    pub transpose_b: bool,
    /// Elements between consecutive stored rows of A.
    pub a_pitch: usize,
    /// Elements between consecutive stored rows of B.
    pub b_pitch: usize,
}

impl Layout {
    /// Dense rows: the pitch is each operand's stored last dimension.
    pub fn dense(m: usize, n: usize, k: usize, transpose_a: bool, transpose_b: bool) -> Self {
        Self {
            transpose_a,
            transpose_b,
            a_pitch: if transpose_a { m } else { k },
            b_pitch: if transpose_b { k } else { n },
        }
    }

    /// The layout of a checked matmul shape (transposes and pitches).
    pub fn of(shape: &crate::problem::MatmulShape) -> Self {
        Self {
            transpose_a: shape.transpose_a,
            transpose_b: shape.transpose_b,
            a_pitch: shape.a_pitch,
            b_pitch: shape.b_pitch,
        }
    }

    /// Some operand is stored transposed.
    pub fn transposed(&self) -> bool {
        self.transpose_a || self.transpose_b
    }

    /// The vec4 kernels: every stored row starts on 16 bytes (pitches
    /// multiples of 4) and C's rows take whole vec4 stores (N a multiple of 4).
    pub fn vec4(&self, n: usize) -> bool {
        n.is_multiple_of(4) && self.a_pitch.is_multiple_of(4) && self.b_pitch.is_multiple_of(4)
    }

    /// Rows that start on 16 bytes (pitches multiples of 8 halves or 4
    /// floats, for `dtype` operands): the cooperative-matrix kernel's 16-byte
    /// loads; other pitches take its word-load variant.
    pub fn coop_aligned(&self, dtype: DType) -> bool {
        let per_16_bytes = 16 / dtype.size();
        self.a_pitch.is_multiple_of(per_16_bytes) && self.b_pitch.is_multiple_of(per_16_bytes)
    }
}

impl fmt::Display for MatmulKernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MatmulKernel::Naive { wg_x, wg_y } => write!(f, "naive ({wg_x}x{wg_y} workgroup)"),
            MatmulKernel::Tiled { tile, vec4 } => write!(
                f,
                "tiled {tile}{} ({r}x{r} per invocation)",
                if *vec4 { " vec4" } else { "" },
                r = tile.reg
            ),
            MatmulKernel::Coop {
                warps_m,
                warps_n,
                bk,
                frags_n,
                subgroup,
                split,
            } => write!(
                f,
                "coop-matrix {}x{}x{bk} ({warps_m}x{warps_n} subgroups of {subgroup}, 64x{} each){}",
                64 * warps_m,
                16 * frags_n * warps_n,
                16 * frags_n,
                if *split { ", f32 as f16 pairs" } else { "" }
            ),
            MatmulKernel::Gemv => write!(f, "gemv (matrix-vector)"),
            MatmulKernel::Broadcast { vec4 } => write!(
                f,
                "broadcast {BROADCAST_ROWS}x{BROADCAST_COLS}{} (one subgroup of {BROADCAST_SUBGROUP}, CPU)",
                if *vec4 { " vec4" } else { "" }
            ),
            MatmulKernel::SplitK { tile, vec4, splits } => write!(
                f,
                "split-K x{splits} tiled {tile}{} ({r}x{r} per invocation)",
                if *vec4 { " vec4" } else { "" },
                r = tile.reg
            ),
        }
    }
}
