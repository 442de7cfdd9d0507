//! The dispatcher: which kernel and which tiles for a given adapter and shape.
//!
//! Heuristics first: candidates are filtered by the adapter's limits, tiny
//! problems go to the naive kernel, matrix-vector shapes to the GEMV kernel, and among tile shapes the largest one
//! whose tile count fills at least one whole wave of the adapter's compute units
//! wins (wave quantisation: a grid smaller than one wave leaves units idle).
//! This module decides; it never encodes or submits.

use std::fmt;

use crate::dtype::DType;
use crate::gpu::AdapterProfile;
use crate::kernels::codegen::matmul_coop as gen_coop;
use crate::kernels::{Kernel, Spec};

pub mod attention;
pub mod autotune;
pub mod cache;
pub mod gemv;
pub mod pad;
pub mod route;

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

/// Least multiply-adds (M * N * K * batch) for the subgroup-broadcast
/// kernel: its fully unrolled shader takes llvmpipe 7-13 s to compile per
/// specialisation on a cold shader cache, which only a large problem (it
/// saves about 65 ms per call at 512^3) pays back; smaller ones take the
/// 16x16 register tile, which compiles in well under a second.
pub const BROADCAST_MIN_MACS: u64 = 128 * 128 * 128;

/// Lanes per subgroup the subgroup-broadcast kernel is written for: its
/// workgroup is one subgroup of exactly this many lanes (llvmpipe on AVX2).
pub const BROADCAST_SUBGROUP: u32 = 8;

/// Workgroup shapes of the naive kernel, largest first; the first that fits
/// the adapter's invocation limit is used.
pub const NAIVE_WORKGROUPS: [(u32, u32); 3] = [(16, 16), (8, 8), (4, 4)];

/// Problems with at most this many multiply-adds (M * N * K * batch) use the
/// naive kernel: its lack of reuse costs less than the tiled kernel's tile
/// staging and barriers.
pub const TINY_MACS: u64 = 32 * 32 * 32;

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
        /// (`MatmulOptions::reduced_precision`).
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
    /// [`BROADCAST_SUBGROUP`] lanes owning [`BROADCAST_ROWS`] x
    /// [`BROADCAST_COLS`] of C; the lanes load a tile of A together and
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

/// Shortest K chunk split-K gives a workgroup (shorter chunks spend more on
/// partial sums than they gain in parallelism).
pub const SPLIT_K_MIN_CHUNK: usize = 512;

/// Most chunks split-K uses.
pub const SPLIT_K_MAX: usize = 16;

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

/// A grid "fills a wave" from this fraction of the compute units on: a
/// larger tile that leaves some units idle still beats a smaller tile on a
/// full grid (H200, f16 1792: 98 blocks of 256x128 on 132 SMs ran at 108.6
/// TFLOP/s, 196 blocks of 128x128 at 71.7).
pub const WAVE_FILL: f64 = 0.7;

impl MatmulKernel {
    /// The cooperative-matrix kernel `(warps_m, warps_n, bk, frags_n)` laid out for the
    /// adapter's subgroup size, when the adapter can run it at all.
    pub fn coop_for(p: &AdapterProfile, layout: (u32, u32, u32, u32)) -> Option<Self> {
        Self::coop_with(p, layout, false)
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

/// TFLOP/s of each of [`COOP_SPLIT_CONFIGS`] at 4096^3 (grids of 4-16
/// waves), H200 runs 86-92 (runs 86-87, the kernel alone with its first
/// passes, the lower of two runs): 70.1, 68.9, 65.0, 49.7, 51.7.
pub const COOP_SPLIT_TFLOPS: [f64; 5] = [70.1, 68.9, 65.0, 49.7, 51.7];

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

/// Smallest problem (multiply-adds, batches included) the dispatcher sends
/// to the f32 split kernel by default; below it the f32 tiled kernels run.
/// H200 (runs 78-85): at 1024^3 the split ran at 30.4 TFLOP/s (2x2x32x2)
/// against 12.4 for the tiled kernel; smaller sizes were not measured.
pub const COOP_SPLIT_MIN_MACS: u64 = 1 << 30;

/// Shortest contraction the dispatcher sends to the f32 split kernel by
/// default: each product is within ~2^-20 of exact, the f32 kernels' k
/// terms within k ulps; from 64 terms on the split's error is the smaller
/// share.
pub const COOP_SPLIT_MIN_K: usize = 64;

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
fn split_layout_override() -> Option<(u32, u32, u32, u32)> {
    crate::dev::overrides().split_layout
}

/// The tiled kernels guarded for the f32 split plan's fallback
/// ([`Spec::guarded`]): the maxima pass's flag is word 2 of its output,
/// bound at 9.
pub(crate) fn tiled_guarded(spec: Spec) -> Spec {
    spec.guarded(9, "2u")
}

/// Whether the adapter offers the 16x16x16 f16 -> f32 cooperative matrix the
/// coop kernel uses, with one fixed subgroup size (the kernel's layout of
/// subgroups over the tile depends on it).
pub fn has_coop_f16(p: &AdapterProfile) -> bool {
    p.cooperative_matrix
        && p.subgroups
        && p.shader_f16
        && p.subgroup_min_size == p.subgroup_max_size
        && p.subgroup_max_size > 0
        && p.coop_configs
            .iter()
            .any(|c| (c.m, c.n, c.k) == (16, 16, 16) && c.ab_type == "f16" && c.cr_type == "f32")
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
                if split && dtype == DType::F32 {
                    spec.constant("SPLIT", 1)
                        .block("split_decl", gen_coop::COOP_SPLIT_DECL)
                        .block("split_exps", gen_coop::COOP_SPLIT_EXPS)
                        .block("split_products", gen_coop::coop_split_products(frags_n))
                } else {
                    spec
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
                // matvec reads the vector B through its row pitch.
                (m == 1 || n == 1) && !layout.transposed()
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

/// The dispatcher's decision for one matmul, with its reasoning.
#[derive(Clone, Debug)]
pub struct MatmulChoice {
    /// The kernel to run.
    pub kernel: MatmulKernel,
    /// Workgroups the grid has (over all batches).
    pub workgroups: u64,
    /// Workgroups over compute units: how many waves the grid takes.
    pub waves: f64,
    /// Why this kernel.
    pub reason: String,
}

impl MatmulChoice {
    /// `kernel` for an `m x n` result (`batch` of them) on this adapter, with
    /// its grid's workgroups and waves, and `reason`.
    pub fn new(
        p: &AdapterProfile,
        kernel: MatmulKernel,
        (m, n): (usize, usize),
        batch: usize,
        reason: String,
    ) -> Self {
        let workgroups = workgroup_count(kernel, m, n, batch);
        MatmulChoice {
            kernel,
            workgroups,
            waves: workgroups as f64 / f64::from(p.compute_units.max(1)),
            reason,
        }
    }
}

impl fmt::Display for MatmulChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {} workgroups = {:.2} waves; {}",
            self.kernel, self.workgroups, self.waves, self.reason
        )
    }
}

/// Workgroups a kernel's grid has for an `m x n` output over `batch` matrices.
pub fn workgroup_count(kernel: MatmulKernel, m: usize, n: usize, batch: usize) -> u64 {
    let (bm, bn) = kernel.block();
    let splits = match kernel {
        MatmulKernel::SplitK { splits, .. } => splits as usize,
        _ => 1,
    };
    (m.div_ceil(bm as usize) * n.div_ceil(bn as usize) * batch * splits) as u64
}

/// Picks the matmul kernel for `[batch] x [m, k] x [k, n]` in `dtype` on this adapter.
pub fn choose_matmul(
    p: &AdapterProfile,
    dtype: DType,
    m: usize,
    n: usize,
    k: usize,
    batch: usize,
) -> MatmulChoice {
    choose(
        p,
        dtype,
        m,
        n,
        k,
        batch,
        Layout::dense(m, n, k, false, false),
    )
}

/// [`choose_matmul`] for operands stored as `layout` says (transposed or in
/// padded rows).
pub fn choose_matmul_layout(
    p: &AdapterProfile,
    dtype: DType,
    (m, n, k): (usize, usize, usize),
    batch: usize,
    layout: Layout,
) -> MatmulChoice {
    let mut choice = choose(p, dtype, m, n, k, batch, layout);
    if layout.transposed() {
        choice.reason = format!("transposed operands, read in place: {}", choice.reason);
    }
    choice
}

/// The dispatcher's rules; `transposes` (when some operand is stored
/// transposed) keeps to the kernels that read such operands in place.
fn choose(
    p: &AdapterProfile,
    dtype: DType,
    m: usize,
    n: usize,
    k: usize,
    batch: usize,
    layout: Layout,
) -> MatmulChoice {
    let strided = layout.transposed();
    let units = p.compute_units.max(1) as f64;
    let describe =
        |kernel: MatmulKernel, reason: String| MatmulChoice::new(p, kernel, (m, n), batch, reason);
    let macs = (m as u64)
        .saturating_mul(n as u64)
        .saturating_mul(k as u64)
        .saturating_mul(batch as u64);
    let fitting: Vec<TileConfig> = TILE_CONFIGS.into_iter().filter(|t| t.fits(p)).collect();
    if macs <= TINY_MACS || fitting.is_empty() {
        let why = if fitting.is_empty() {
            "no tile shape fits this adapter's workgroup limits".to_string()
        } else {
            format!(
                "tiny problem ({macs} multiply-adds <= {TINY_MACS}): tiling cannot pay for its barriers"
            )
        };
        return describe(MatmulKernel::naive_for(p), why);
    }
    let tiled = |tile: TileConfig| MatmulKernel::Tiled {
        tile,
        vec4: layout.vec4(n),
    };
    if !strided && (m == 1 || n == 1) && MatmulKernel::Gemv.fits(p) {
        return describe(
            MatmulKernel::Gemv,
            "matrix-vector: every matrix element is used once, so the kernel is \
             memory-bound; no tiling helps, coalescing and loads in flight do"
                .into(),
        );
    }
    // Transposed f16 operands too: the coop kernel reads them in place
    // (staged as stored, loaded column-major) at 240-248 TFLOP/s at 4096
    // on the H200, as fast as row-major (docs/perf/matmul.md).
    if dtype == DType::F16 {
        let coops: Vec<MatmulKernel> = COOP_CONFIGS
            .into_iter()
            .filter_map(|c| MatmulKernel::coop_for(p, c))
            .collect();
        if !coops.is_empty() {
            let filling = coops
                .iter()
                .copied()
                .find(|&c| workgroup_count(c, m, n, batch) as f64 >= WAVE_FILL * units);
            let kernel = filling.unwrap_or(*coops.last().expect("non-empty"));
            return describe(
                kernel,
                if filling.is_some() {
                    format!(
                        "f16 on tensor cores: largest subgroup layout whose grid fills a wave of {} compute units",
                        p.compute_units
                    )
                } else {
                    "f16 on tensor cores: no layout fills a wave; the smallest gives the most workgroups".into()
                },
            );
        }
    }
    if p.is_cpu() {
        let broadcast = MatmulKernel::Broadcast {
            vec4: layout.vec4(n) && !strided,
        };
        if broadcast.fits(p) && macs >= BROADCAST_MIN_MACS {
            return describe(
                broadcast,
                "CPU adapter with subgroups of 8: the subgroup-broadcast kernel (llvmpipe \
                 runs every non-constant load as a loop over the lanes; sharing A by \
                 subgroupBroadcast needs the fewest)"
                    .into(),
            );
        }
        for t in CPU_TILE_CONFIGS.into_iter().filter(|t| t.fits(p)) {
            let kernel = tiled(t);
            if workgroup_count(kernel, m, n, batch) as f64 >= WAVE_FILL * units {
                return describe(
                    kernel,
                    "CPU adapter: the 16x16 register tile (each invocation is a lane of \
                     a narrow batch and every barrier switches batches: work per \
                     invocation pays)"
                        .into(),
                );
            }
        }
    }
    for t in &fitting {
        let kernel = tiled(*t);
        if workgroup_count(kernel, m, n, batch) as f64 >= WAVE_FILL * units {
            return describe(
                kernel,
                format!(
                    "largest tile whose grid fills at least one wave of {} compute units",
                    p.compute_units
                ),
            );
        }
    }
    let smallest = *fitting.last().expect("non-empty");
    // Too few tiles for the GPU but a long K: split K across workgroups
    // (each chunk at least SPLIT_K_MIN_CHUNK long) and add the partials.
    let tiles = workgroup_count(tiled(smallest), m, n, batch);
    let max_splits = (k / SPLIT_K_MIN_CHUNK).min(SPLIT_K_MAX) as u64;
    if (tiles as f64) < units / 2.0 && max_splits >= 2 {
        let splits = (units as u64).div_ceil(tiles).clamp(2, max_splits) as u32;
        let MatmulKernel::Tiled { tile, vec4 } = tiled(smallest) else {
            unreachable!("tiled() builds Tiled")
        };
        return describe(
            MatmulKernel::SplitK { tile, vec4, splits },
            format!(
                "only {tiles} tiles for {} compute units with K = {k}: K split in {splits}",
                p.compute_units
            ),
        );
    }
    describe(
        tiled(smallest),
        format!(
            "no tile shape fills a wave of {} compute units; the smallest gives the most workgroups",
            p.compute_units
        ),
    )
}

/// Every kernel that fits the adapter and accepts `[batch] x [m, k] x [k, n]`
/// in `dtype`, best-first by the heuristic's preference: its own pick
/// ([`choose_matmul`]), then the cooperative-matrix layouts (f16, in
/// [`COOP_CONFIGS`] order), the vec4 tiled kernels, the scalar tiled kernels
/// (both in [`TILE_CONFIGS`] order) and the naive kernel last. The
/// autotuner's fast mode times the first few.
pub fn matmul_candidates(
    p: &AdapterProfile,
    dtype: DType,
    m: usize,
    n: usize,
    k: usize,
    batch: usize,
) -> Vec<MatmulKernel> {
    matmul_candidates_layout(
        p,
        dtype,
        (m, n, k),
        batch,
        Layout::dense(m, n, k, false, false),
    )
}

/// [`matmul_candidates`] for operands stored as `layout` says: the kernels
/// that read that layout, the heuristic's pick first.
pub fn matmul_candidates_layout(
    p: &AdapterProfile,
    dtype: DType,
    (m, n, k): (usize, usize, usize),
    batch: usize,
    layout: Layout,
) -> Vec<MatmulKernel> {
    let coops = COOP_CONFIGS
        .into_iter()
        .filter_map(|c| MatmulKernel::coop_for(p, c));
    let tiled = [true, false].into_iter().flat_map(|vec4| {
        TILE_CONFIGS
            .into_iter()
            .map(move |tile| MatmulKernel::Tiled { tile, vec4 })
    });
    // The CPU kernel only where it was made for (the dispatcher's rule).
    let broadcast = [true, false]
        .into_iter()
        .filter(|_| p.is_cpu())
        .map(|vec4| MatmulKernel::Broadcast { vec4 });
    let mut out: Vec<MatmulKernel> = Vec::new();
    for kernel in std::iter::once(choose_matmul_layout(p, dtype, (m, n, k), batch, layout).kernel)
        .chain(coops)
        .chain(tiled)
        .chain(broadcast)
        .chain(std::iter::once(MatmulKernel::naive_for(p)))
    {
        if kernel.fits(p) && kernel.accepts_with(dtype, m, n, k, layout) && !out.contains(&kernel) {
            out.push(kernel);
        }
    }
    out
}

/// The kernel for operands stored transposed: the same rules restricted to
/// the kernels that read through strides ([`MatmulKernel::reads_strided`]):
/// the scalar-load tiled kernel by the wave rule, or naive for tiny problems.
pub fn choose_matmul_strided(
    p: &AdapterProfile,
    m: usize,
    n: usize,
    k: usize,
    batch: usize,
    (transpose_a, transpose_b): (bool, bool),
) -> MatmulChoice {
    choose_matmul_layout(
        p,
        DType::F32,
        (m, n, k),
        batch,
        Layout::dense(m, n, k, transpose_a, transpose_b),
    )
}

/// Every matmul specialisation the dispatcher can produce, for validation.
pub fn matmul_specs() -> Vec<Spec> {
    let mut specs = Vec::new();
    for dtype in DType::ALL {
        for (wg_x, wg_y) in NAIVE_WORKGROUPS {
            specs.push(MatmulKernel::Naive { wg_x, wg_y }.spec(dtype));
        }
        for tile in TILE_CONFIGS.into_iter().chain(CPU_TILE_CONFIGS) {
            for vec4 in [false, true] {
                specs.push(MatmulKernel::Tiled { tile, vec4 }.spec(dtype));
            }
        }
        for vec4 in [false, true] {
            specs.push(MatmulKernel::Broadcast { vec4 }.spec(dtype));
        }
    }
    for dtype in DType::ALL {
        for vec4 in [false, true] {
            let tile = TILE_CONFIGS[TILE_CONFIGS.len() - 1];
            specs.push(
                MatmulKernel::SplitK {
                    tile,
                    vec4,
                    splits: 2,
                }
                .spec(dtype),
            );
        }
        specs.push(Spec::new(Kernel::MatmulSplitKReduce).dtype(dtype));
        for kernel in [
            Kernel::GemvVecmat,
            Kernel::GemvVecmatPairs,
            Kernel::GemvReduce,
            Kernel::GemvMatvec,
        ] {
            specs.push(Spec::new(kernel).dtype(dtype));
        }
        specs.push(gemv_wide_spec(dtype));
        // WGTILE_GEMV_WIDE_SHAPE's other workgroups.
        for (lanes, slices) in [(2, 64), (2, 128), (1, 256)] {
            specs.push(
                gemv_wide_spec(dtype)
                    .constant("WIDE_LANES", lanes)
                    .constant("WIDE_SLICES", slices),
            );
        }
    }
    // The tensor-core layouts (f16 and f32 rounded; the f32 split form and
    // its first pass), every load variant.
    specs.push(Spec::new(Kernel::MatmulSplitScale));
    let layouts = COOP_CONFIGS
        .map(|c| (c, false))
        .into_iter()
        .chain(COOP_SPLIT_CONFIGS.map(|c| (c, true)));
    for ((warps_m, warps_n, bk, frags_n), split) in layouts {
        for subgroup in [32, 64] {
            let kernel = MatmulKernel::Coop {
                warps_m,
                warps_n,
                bk,
                frags_n,
                subgroup,
                split,
            };
            let dtypes: &[DType] = if split { &[DType::F32] } else { &DType::ALL };
            for &dtype in dtypes {
                specs.push(kernel.spec(dtype));
                specs.push(kernel.spec(dtype).constant("ALIGNED", 0));
                for (ta, tb) in [(1, 0), (0, 1), (1, 1)] {
                    for cm in [0, 1] {
                        let t = kernel
                            .spec(dtype)
                            .constant("TRANS_A", ta)
                            .constant("TRANS_B", tb)
                            .constant("TRANS_COLMAJOR", cm);
                        specs.push(t.clone());
                        specs.push(t.constant("ALIGNED", 0));
                    }
                }
            }
        }
    }
    // The tiled kernels guarded for the f32 split plan's fallback.
    for vec4 in [false, true] {
        specs.push(tiled_guarded(
            MatmulKernel::Tiled {
                tile: TILE_CONFIGS[0],
                vec4,
            }
            .spec(DType::F32),
        ));
    }
    // WGTILE_COOP_PROBE's timing bits, on the default f16 layout.
    let (warps_m, warps_n, bk, frags_n) = COOP_CONFIGS[0];
    let kernel = MatmulKernel::Coop {
        warps_m,
        warps_n,
        bk,
        frags_n,
        subgroup: 32,
        split: false,
    };
    for probe in [1, 2, 4, 8, 16, 24, 31] {
        specs.push(kernel.spec(DType::F16).constant("PROBE", probe));
    }
    // Whole-block dimensions without edge checks (the split kernel's
    // specialisation; f16 checked too).
    for (dtype, split) in [(DType::F16, false), (DType::F32, true)] {
        let k = MatmulKernel::Coop {
            warps_m,
            warps_n,
            bk,
            frags_n,
            subgroup: 32,
            split,
        };
        let mut spec = k.spec(dtype).dtype(dtype);
        for name in ["EDGE_M", "EDGE_N", "EDGE_K"] {
            spec = spec.constant(name, 0);
            specs.push(spec.clone());
        }
    }
    // Results in the other dtype (MatmulOptions::out_dtype): every kernel
    // with a separate `Out` type.
    let mixed: Vec<Spec> = specs
        .iter()
        .filter(|s| s.kernel.has_epilogue() && s.kernel != Kernel::MatmulCoop)
        .map(|s| {
            let other = if s.dtype == DType::F32 {
                DType::F16
            } else {
                DType::F32
            };
            s.clone().output(other)
        })
        .collect();
    specs.extend(mixed);
    specs
}

pub use crate::gpu::estimate_compute_units;

/// The one-dispatch vector-matrix kernel for `dtype` operands (16-byte words
/// of 8 halves or 4 floats).
pub fn gemv_wide_spec(dtype: DType) -> Spec {
    Spec::new(Kernel::GemvVecmatWide)
        .dtype(dtype)
        .constant("WIDE_HALF", u32::from(dtype == DType::F16))
}
