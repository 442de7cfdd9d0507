//! The attention dispatcher: tile sizes of the flash kernel per adapter and
//! head dimension, and the number of key splits for decoding (flash-decoding).
//!
//! It decides only; `ops::attention` builds and encodes the dispatches.

use std::fmt;

use crate::dtype::DType;
use crate::gpu::AdapterProfile;
use crate::kernels::{Kernel, Spec};

pub(crate) use crate::kernels::codegen::flash_coop::CoopLaunch;
pub use crate::kernels::codegen::flash_coop::{
    FLASH_COOP_TEXT_DEFAULT, FlashCoopTiles, MAX_FLASH_COOP_DIM,
};

pub mod coop_backward;
pub mod coop_decode;
pub use coop_backward::{
    BACKWARD_COOP_CANDIDATES, BACKWARD_COOP_SWEEP, BackwardCoopPass, BackwardCoopTiles,
    backward_coop_tiles,
};
pub use coop_decode::{
    decode_coop_fits, decode_coop_rf, decode_coop_spec, decode_coop_splits,
    decode_coop_workgroup_bytes,
};

/// Tile shape of the flash forward kernel (`shaders/attention_flash.wgsl`).
///
/// A workgroup owns `br` query rows and streams `bc() = 4 * nc` keys per
/// block; its `(br / tr) * nc` invocations each own `tr` rows x 4 score
/// columns and `tr` rows x `td` output columns in registers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FlashTiles {
    /// Query rows per workgroup (a multiple of `tr`).
    pub br: u32,
    /// Query rows per invocation: 4 or 8.
    pub tr: u32,
    /// Column groups (invocations sharing the same rows); keys per block = 4 * nc.
    pub nc: u32,
    /// Output (Dv) columns per invocation: 4, 8 or 16, with `nc * td >= Dv`.
    pub td: u32,
    /// Head-dimension chunk staged through workgroup memory for Q K^T.
    pub dk: u32,
    /// Keys of V staged at a time for P V (a multiple of 4 dividing `bc()`).
    pub vk: u32,
}

/// Largest value head dimension (Dv) the flash kernel supports.
pub const MAX_FLASH_DV: usize = 256;

impl FlashTiles {
    /// Keys per block.
    pub const fn bc(self) -> u32 {
        4 * self.nc
    }

    /// Invocations per workgroup.
    pub const fn threads(self) -> u32 {
        (self.br / self.tr) * self.nc
    }

    /// vec4 words of the staging buffer: Q and K chunks, V rows, or the row
    /// reductions, whichever is largest.
    pub const fn stage_vec4(self) -> u32 {
        let qk = self.dk * (self.br / 4 + 1 + self.bc() / 4 + 1);
        let v = self.vk * self.nc * self.td / 4;
        let red = self.br * self.nc / 4;
        let m = if qk > v { qk } else { v };
        if m > red { m } else { red }
    }

    /// Workgroup memory in bytes (staging and the P tile).
    pub const fn workgroup_bytes(self) -> u32 {
        16 * (self.stage_vec4() + self.br * self.bc() / 4)
    }

    /// Whether the tile shape is well formed for value head dimension `dv`
    /// and the adapter can run it.
    pub fn fits(self, p: &AdapterProfile, dv: usize) -> bool {
        let bc = self.bc();
        matches!(self.tr, 4 | 8)
            && matches!(self.td, 4 | 8 | 16)
            && self.nc >= 1
            && self.br.is_multiple_of(self.tr)
            && self.br >= self.tr
            && self.dk >= 1
            && self.vk.is_multiple_of(4)
            && self.vk >= 4
            && bc.is_multiple_of(self.vk)
            && (self.nc * self.td) as usize >= dv
            && self.threads() <= p.max_invocations
            && self.threads() <= p.max_workgroup_size_x
            && self.workgroup_bytes() <= p.max_workgroup_storage
    }

    /// The kernel specialisation (`split`: the split-KV decoding pass).
    pub fn spec(self, dtype: DType, split: bool) -> Spec {
        Spec::new(Kernel::AttentionFlash)
            .dtype(dtype)
            .constant("BR", self.br)
            .constant("TR", self.tr)
            .constant("NC", self.nc)
            .constant("TD", self.td)
            .constant("DK", self.dk)
            .constant("VK", self.vk)
            .constant("STAGE4", self.stage_vec4())
            .constant("SPLIT", u32::from(split))
    }

    /// [`FlashTiles::spec`] (f32, one split) guarded for the f32
    /// tensor-core plan's fallback: every workgroup returns at once unless
    /// the split-scale pass flagged an infinity or NaN in q, k or v (word
    /// B (Hq + 2 Hkv) of its output, bound at 13).
    pub fn guarded_spec(self) -> Spec {
        self.spec(DType::F32, false)
            .guarded(13, "params.batch * (params.hq + 2u * params.hkv)")
    }

    /// `self` with `td` and `vk` set for value head dimension `dv` (`vk` the
    /// largest power of two whose V slab fits the Q/K staging space).
    pub fn for_value_dim(mut self, dv: usize) -> Self {
        self.td = (dv.max(1) as u32)
            .div_ceil(self.nc)
            .next_power_of_two()
            .max(4);
        let qk = self.dk * (self.br / 4 + 1 + self.bc() / 4 + 1);
        let mut vk = self.bc();
        while vk > 4 && vk * self.nc * self.td / 4 > qk {
            vk /= 2;
        }
        self.vk = vk;
        self
    }
}

impl fmt::Display for FlashTiles {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Br={} Bc={} {}x4 S + {}x{} O per invocation, {} invocations, {} B shared",
            self.br,
            self.bc(),
            self.tr,
            self.tr,
            self.td,
            self.threads(),
            self.workgroup_bytes()
        )
    }
}

/// Tile candidates, preferred first: 128 query rows with 4 rows per
/// invocation (512 invocations, for GPUs with 48 KiB of workgroup memory like
/// the H200), 64 rows with 4 per invocation (lavapipe's 32 KiB), then a
/// 64-invocation shape for small adapters. `td`/`vk` are set per value head
/// dimension. Measured on the H200 (`attention --sweep-tiles`, B=4 H=16
/// S=1024, TFLOP/s, D=128 full f32/f16, D=64 full f32): 128x4 23.7 / 22.2 /
/// 19.5; 64x4 18.2 / 14.6 / 15.0; the 8-rows-per-invocation tiles (8 x 4
/// scores and 8 x 8 outputs in registers) 2.1 / 2.1 / 2.2: they spill.
pub const FLASH_CANDIDATES: [FlashTiles; 3] = [
    FlashTiles {
        br: 128,
        tr: 4,
        nc: 16,
        td: 8,
        dk: 16,
        vk: 16,
    },
    FlashTiles {
        br: 64,
        tr: 4,
        nc: 16,
        td: 8,
        dk: 16,
        vk: 16,
    },
    FlashTiles {
        br: 32,
        tr: 4,
        nc: 8,
        td: 16,
        dk: 16,
        vk: 8,
    },
];

/// The decode tile: 4 query rows, 4 * nc keys per block, nc invocations
/// with 4 output columns each. For few query rows (KV-cache decoding) the
/// big tiles waste almost all their arithmetic on absent rows; this one
/// keeps the waste small and, with the key sequence split over many
/// workgroups, the work memory-bound. `nc` follows Dv ([`decode_tiles`]:
/// `nc * 4 >= Dv`, 8 to 64) so no output column is computed for nothing;
/// the constant is the Dv = 256 shape.
pub const DECODE_TILES: FlashTiles = FlashTiles {
    br: 4,
    tr: 4,
    nc: 64,
    td: 4,
    dk: 16,
    vk: 16,
};

/// Query rows per head up to which [`flash_tiles_for`] picks the decode tile.
pub const DECODE_MAX_ROWS: usize = 16;

/// [`DECODE_TILES`] sized for value head dimension `dv`.
pub fn decode_tiles(dv: usize) -> FlashTiles {
    let nc = (dv.max(1) as u32)
        .div_ceil(4)
        .next_power_of_two()
        .clamp(8, 64);
    FlashTiles { nc, ..DECODE_TILES }.for_value_dim(dv)
}

/// [`flash_tiles`] for a problem with `sq` query rows per head: the decode
/// tile for `sq <= DECODE_MAX_ROWS` when it fits, else the regular choice.
pub fn flash_tiles_for(p: &AdapterProfile, sq: usize, dv: usize) -> Option<FlashTiles> {
    if sq <= DECODE_MAX_ROWS && dv <= MAX_FLASH_DV {
        let t = decode_tiles(dv);
        if t.fits(p, dv) {
            return Some(t);
        }
    }
    flash_tiles(p, dv)
}

/// The flash kernel's tiles for this adapter and value head dimension, or
/// `None` when no candidate fits the adapter (or `dv > MAX_FLASH_DV`).
/// CPU adapters skip the largest shape (its register tile buys nothing there);
/// shapes with more than 64 output accumulators per invocation (the 8-row
/// tile at Dv > 128) are skipped to stay clear of register spills.
pub fn flash_tiles(p: &AdapterProfile, dv: usize) -> Option<FlashTiles> {
    if dv > MAX_FLASH_DV {
        return None;
    }
    FLASH_CANDIDATES
        .iter()
        .skip(usize::from(p.is_cpu()))
        .map(|t| t.for_value_dim(dv))
        // At most 64 output accumulators per invocation: more spill registers.
        .find(|t| t.fits(p, dv) && t.tr * t.td <= 64)
}

impl FlashCoopTiles {
    /// Whether the tile is well formed for head dims `d`, `dv` (multiples of
    /// 16 in 16..=256) and inputs of `dtype` (f16, or f32 split into halves),
    /// and the adapter runs it: the 16x16 f16/f32 cooperative matrix, one
    /// fixed subgroup size that is a multiple of 16, and the workgroup
    /// limits.
    pub fn fits(self, p: &AdapterProfile, d: usize, dv: usize, dtype: DType) -> bool {
        crate::tune::has_coop_f16(p) && self.fits_with(p, d, dv, p.subgroup_max_size, dtype)
    }

    /// Whether the emulated kernel ([`FlashCoopTiles::spec_emulated`], 16
    /// virtual lanes per subgroup) runs this tile: f16, subgroups and the
    /// workgroup limits; no cooperative matrices needed.
    pub fn fits_emulated(self, p: &AdapterProfile, d: usize, dv: usize, dtype: DType) -> bool {
        p.shader_f16 && p.subgroups && self.fits_with(p, d, dv, 16, dtype)
    }

    fn fits_with(self, p: &AdapterProfile, d: usize, dv: usize, sg: u32, dtype: DType) -> bool {
        let split = dtype == DType::F32;
        let launch = CoopLaunch {
            threads: self.threads(sg),
            bytes: self.workgroup_bytes(d as u32, dv as u32, dtype),
            // f32: the exponents (binding 13).
            buffers: if split { 8 } else { 7 },
        };
        matches!(self.rf, 1 | 2)
            && self.subgroups >= 1
            && self.bc >= 16
            && self.bc.is_multiple_of(16)
            // Each lane's softmax columns come in groups of 4: BC / LPR
            // (LPR = SG / 16 lanes per row) a multiple of 4.
            && self.bc.is_multiple_of(4 * (sg / 16).max(1))
            && launch.fits(p, d, dv, sg)
    }

    /// The specialisation for head dims `d`, `dv`, subgroup size `sg` and
    /// inputs of `dtype` (f16; f32 takes the split kernel, `SPLIT = 1`).
    pub fn spec(self, d: usize, dv: usize, sg: u32, dtype: DType) -> Spec {
        let split = dtype == DType::F32;
        let mut spec = Spec::new(Kernel::AttentionFlashCoop)
            .dtype(dtype)
            .constant("W", self.subgroups)
            .constant("RF", self.rf)
            .constant("BC", self.bc)
            .constant("SG", sg)
            .constant("D", d as u32)
            .constant("DV", dv as u32)
            .constant("QCH", self.qch(d as u32, dv as u32))
            .constant("SPLIT", u32::from(split));
        for (name, text) in self.blocks(d as u32, dv as u32, split) {
            spec = spec.block(name, text);
        }
        spec
    }

    /// The emulated kernel's specialisation (matrix operations per
    /// invocation, subgroups of 16 virtual lanes; tests only).
    pub fn spec_emulated(self, d: usize, dv: usize, dtype: DType) -> Spec {
        let mut spec = Spec {
            kernel: Kernel::AttentionFlashCoopEmulated,
            ..self.spec(d, dv, 16, dtype)
        };
        for (name, text) in self.blocks_looped(d as u32, dv as u32, dtype == DType::F32) {
            spec = spec.block(name, text);
        }
        spec
    }
}

/// Tensor-core flash tiles, preferred first; the dispatcher takes the first
/// that fits the adapter and head dims. Measured on the H200 (runs 22-27,
/// `attention --sweep-coop`, B4 H16 f16, TFLOP/s, K read column-major, vec4
/// staging): at D = 128, S = 4096, 4 subgroups of 16 rows with 16-key
/// blocks 138.3 (causal 123.0), with 32-key blocks 83.8, 8 x 16 rows with
/// 32-key blocks 75.7; at D = 64 84.3, 45.0 and 39.9. Smaller blocks mean
/// less workgroup memory and more workgroups per SM: occupancy, not the
/// tensor cores, limits this kernel. (With K staged transposed, before: 31.0
/// at D = 128 for 4 x 16 rows and 32 keys.)
pub const FLASH_COOP_CANDIDATES: [FlashCoopTiles; 3] = [
    FlashCoopTiles {
        subgroups: 4,
        rf: 1,
        bc: 16,
    },
    FlashCoopTiles {
        subgroups: 4,
        rf: 1,
        bc: 32,
    },
    FlashCoopTiles {
        subgroups: 8,
        rf: 1,
        bc: 32,
    },
];

/// More tensor-core tiles for the benchmark's `--sweep-coop` (never picked
/// by the dispatcher): two 16-row fragments per subgroup (each K and V
/// fragment loaded from workgroup memory serves both, for twice the
/// accumulators per subgroup; slower on the H200 at D = 128, 64.2 and 22.8
/// TFLOP/s at 32 and 64 keys), the 64-key block (72.9), and other
/// workgroup sizes with 16-key blocks (8 subgroups: 85.1).
pub const FLASH_COOP_SWEEP: [FlashCoopTiles; 7] = [
    FlashCoopTiles {
        subgroups: 4,
        rf: 1,
        bc: 64,
    },
    FlashCoopTiles {
        subgroups: 4,
        rf: 2,
        bc: 32,
    },
    FlashCoopTiles {
        subgroups: 2,
        rf: 2,
        bc: 64,
    },
    FlashCoopTiles {
        subgroups: 8,
        rf: 1,
        bc: 16,
    },
    FlashCoopTiles {
        subgroups: 2,
        rf: 1,
        bc: 16,
    },
    FlashCoopTiles {
        subgroups: 1,
        rf: 1,
        bc: 16,
    },
    FlashCoopTiles {
        subgroups: 4,
        rf: 2,
        bc: 16,
    },
];

/// A tile the tests force (never picked by the dispatcher): two fragments
/// per subgroup within 32 KiB, whose Q staging takes several passes with a
/// partial last one at D = 128 (the emulated kernel runs it on lavapipe).
pub const FLASH_COOP_TEST_TILES: [FlashCoopTiles; 1] = [FlashCoopTiles {
    subgroups: 2,
    rf: 2,
    bc: 32,
}];

/// The tensor-core flash tiles for this adapter and head dims, or `None`
/// when the adapter lacks the cooperative-matrix configuration or no
/// candidate fits (D and Dv must be multiples of 16 up to 256).
pub fn flash_coop_tiles(
    p: &AdapterProfile,
    d: usize,
    dv: usize,
    dtype: DType,
) -> Option<FlashCoopTiles> {
    let first = if dtype == DType::F32 {
        Some(FLASH_COOP_F32)
    } else {
        (d.max(dv) <= 64).then_some(FLASH_COOP_SMALL_DIMS)
    };
    first
        .into_iter()
        .chain(FLASH_COOP_CANDIDATES)
        .find(|t| t.fits(p, d, dv, dtype))
}

/// The first tensor-core flash tile for f32 inputs (the split kernel, each
/// value as two halves), at every head dim: 4 subgroups of 16 rows, 16-key
/// blocks. Measured on the H200 (runs 78-85, B4 H16, TFLOP/s, after the
/// split's scale became a multiply; 8 / 4 / 2 subgroups): S4096 D128 full
/// 63.7 / 69.4 / 51.5, causal 54.6 / 64.1 / 47.8; S1024 D128 47.1 / 56.3 /
/// 39.9; S4096 D64 43.1 / 53.8 / 49.0. (Runs 70-77, with a vector ldexp per
/// staged value, 8 subgroups led: 41.8 against 35.0. The ldexp, not the
/// registers, held the kernel back: 8 subgroups with D split between
/// pairs, 145 registers instead of 246, ran at 25.4.)
pub const FLASH_COOP_F32: FlashCoopTiles = FlashCoopTiles {
    subgroups: 4,
    rf: 1,
    bc: 16,
};

/// The first tensor-core flash tile for head dims up to 64: 2 subgroups of
/// 16 rows, 16-key blocks. Measured on the H200 (runs 65-69, after the
/// vectorised softmax; B4 H16 f16 D64, TFLOP/s, full / causal): S1024
/// 88.6-88.9 / 65.5-66.2 against 79.7-80.2 / 55.7-55.8 for 4 subgroups,
/// S4096 87.0-87.1 / 78.3-78.7 against 80.1 / 70.7-70.8. At D128 4
/// subgroups stay first (161.3-161.8 against 125.2-125.4 at S4096).
pub const FLASH_COOP_SMALL_DIMS: FlashCoopTiles = FlashCoopTiles {
    subgroups: 2,
    rf: 1,
    bc: 16,
};

/// Every tensor-core flash specialisation the dispatcher (and the sweep) can
/// produce on an H200-like profile (subgroup size 32, 48 KiB), plus the
/// default tile at subgroup sizes 16 and 64.
pub fn attention_coop_specs() -> Vec<Spec> {
    let mut p = permissive_profile();
    p.max_workgroup_storage = 48 * 1024;
    p.max_invocations = 1024;
    p.max_workgroup_size_x = 1024;
    // The H200's limit is far above; the backward kernels bind 9 (with 8,
    // as before run 56, none of their tensor-core specialisations was
    // produced here, so the shader tests never saw them).
    p.max_storage_buffers_per_stage = 16;
    p.cooperative_matrix = true;
    p.coop_configs = vec![crate::gpu::CoopMatrixConfig {
        m: 16,
        n: 16,
        k: 16,
        ab_type: "f16",
        cr_type: "f32",
    }];
    let mut specs = Vec::new();
    let dims: Vec<usize> = (1..=16).map(|i| i * 16).collect();
    for t in FLASH_COOP_CANDIDATES
        .iter()
        .chain(&FLASH_COOP_SWEEP)
        .chain(&FLASH_COOP_TEST_TILES)
    {
        for &d in &dims {
            for &dv in &dims {
                if t.fits(&p, d, dv, DType::F16) {
                    specs.push(t.spec(d, dv, 32, DType::F16));
                }
            }
        }
    }
    let t = FLASH_COOP_CANDIDATES[0];
    for sg in [16, 64] {
        specs.push(t.spec(64, 64, sg, DType::F16));
        specs.push(t.spec(128, 64, sg, DType::F16));
    }
    // The f32 (split) kernel: every tile at a few head-dim pairs, the
    // default tile at subgroup sizes 16 and 64.
    for t in FLASH_COOP_CANDIDATES
        .iter()
        .chain(&FLASH_COOP_SWEEP)
        .chain(&FLASH_COOP_TEST_TILES)
    {
        for (d, dv) in [
            (16, 16),
            (32, 48),
            (64, 64),
            (80, 80),
            (128, 128),
            (256, 256),
        ] {
            if t.fits(&p, d, dv, DType::F32) {
                specs.push(t.spec(d, dv, 32, DType::F32));
            }
        }
    }
    for sg in [16, 64] {
        specs.push(t.spec(128, 128, sg, DType::F32));
    }
    // The tensor-core backward: both passes, every tile, head dims and
    // subgroup size the dispatcher and the sweep use, and the emulated
    // kernels at the shapes the tests force.
    // Head-dim pairs: the smallest, unequal ones, the dispatcher's 64 and
    // 128, and the largest (every pair of 16..=256 would be 4000 kernels).
    let pairs = [
        (16, 16),
        (32, 48),
        (48, 32),
        (64, 64),
        (80, 80),
        (64, 128),
        (128, 64),
        (128, 128),
        (192, 256),
        (256, 256),
    ];
    for t in BACKWARD_COOP_CANDIDATES.iter().chain(&BACKWARD_COOP_SWEEP) {
        for (d, dv) in pairs {
            if t.fits(&p, d, dv) {
                for pass in [BackwardCoopPass::DkDv, BackwardCoopPass::Dq] {
                    for sub_barrier in [true, false] {
                        specs.push(t.spec(pass, d, dv, 32, false, sub_barrier));
                    }
                }
            }
        }
    }
    for (d, dv) in [(16, 16), (32, 48), (64, 64), (128, 128)] {
        for pass in [BackwardCoopPass::DkDv, BackwardCoopPass::Dq] {
            specs.push(BACKWARD_COOP_CANDIDATES[0].spec(pass, d, dv, 16, true, false));
        }
    }
    // The tensor-core decode kernel: every head-dim pair at subgroup size
    // 32, the default dims at 16 and 64, the emulated one at the tests'.
    for &d in &dims {
        for &dv in &dims {
            for rf in [1, 2] {
                specs.push(decode_coop_spec(rf, d, dv, 32, false));
            }
        }
    }
    for sg in [16, 64] {
        specs.push(decode_coop_spec(1, 128, 128, sg, false));
    }
    for (d, dv) in [(16, 16), (32, 32), (32, 48), (64, 64)] {
        for rf in [1, 2] {
            specs.push(decode_coop_spec(rf, d, dv, 16, true));
        }
    }
    // The emulated kernel at the shapes the tests force.
    for t in FLASH_COOP_CANDIDATES
        .iter()
        .chain(&FLASH_COOP_SWEEP)
        .chain(&FLASH_COOP_TEST_TILES)
    {
        for (d, dv) in [(16, 16), (64, 64), (64, 128), (128, 64), (256, 256)] {
            specs.push(t.spec_emulated(d, dv, DType::F16));
        }
        specs.push(t.spec_emulated(32, 48, DType::F32));
    }
    specs
}

/// Tile shape of the backward kernels (`shaders/attention_backward.wgsl`):
/// a workgroup owns `br` keys (dK/dV) or `br` query rows (dQ) and walks the
/// other side `4 * nc` at a time; each of its `br / 4 * nc` invocations owns
/// a 4 x 4 tile of S (and dP) and 4 rows x `td` columns of each gradient.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BackwardTiles {
    /// Keys (dK/dV) or query rows (dQ) per workgroup, a multiple of 4.
    pub br: u32,
    /// Column groups: the other side advances 4 * nc per step.
    pub nc: u32,
    /// Gradient columns per invocation (a power of two >= 4): `nc * td >= max(D, Dv)`.
    pub td: u32,
    /// Head-dimension chunk staged per step of the S and dP products.
    pub dk: u32,
    /// Rows of dO / Q / K staged at a time for the gradient products.
    pub vk: u32,
}

impl BackwardTiles {
    /// Invocations per workgroup.
    pub const fn threads(self) -> u32 {
        self.br / 4 * self.nc
    }

    /// vec4 words of the staging buffer.
    pub const fn stage_vec4(self) -> u32 {
        let qk = self.dk * (self.br / 4 + 1 + self.nc + 1);
        let v = self.vk * self.nc * self.td / 4;
        if qk > v { qk } else { v }
    }

    /// Workgroup memory in bytes (staging plus the P and dS tiles).
    pub const fn workgroup_bytes(self) -> u32 {
        16 * (self.stage_vec4() + 2 * self.br * self.nc)
    }

    /// The specialisation of one of the backward kernels.
    pub fn spec(self, kernel: Kernel, dtype: DType) -> Spec {
        Spec::new(kernel)
            .dtype(dtype)
            .constant("BR", self.br)
            .constant("NC", self.nc)
            .constant("TD", self.td)
            .constant("DK", self.dk)
            .constant("VK", self.vk)
            .constant("STAGE4", self.stage_vec4())
    }

    /// `self` with `td` and `vk` set for head dims `d` and `dv`.
    pub fn for_dims(mut self, d: usize, dv: usize) -> Self {
        self.td = (d.max(dv).max(1) as u32)
            .div_ceil(self.nc)
            .next_power_of_two()
            .max(4);
        let qk = self.dk * (self.br / 4 + 1 + self.nc + 1);
        let mut vk = 4 * self.nc;
        while vk > 4 && vk * self.nc * self.td / 4 > qk {
            vk /= 2;
        }
        self.vk = vk;
        self
    }

    /// Whether the adapter can run this tile shape.
    pub fn fits(self, p: &AdapterProfile) -> bool {
        self.threads() <= p.max_invocations
            && self.threads() <= p.max_workgroup_size_x
            && self.workgroup_bytes() <= p.max_workgroup_storage
    }
}

impl fmt::Display for BackwardTiles {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} rows x {} per step, 4x4 S + 4x{} gradient per invocation, {} invocations",
            self.br,
            4 * self.nc,
            self.td,
            self.threads()
        )
    }
}

/// Backward tile candidates, preferred first (`td`/`vk` set per head dims).
pub const BACKWARD_CANDIDATES: [BackwardTiles; 2] = [
    BackwardTiles {
        br: 32,
        nc: 16,
        td: 8,
        dk: 16,
        vk: 8,
    },
    BackwardTiles {
        br: 16,
        nc: 8,
        td: 16,
        dk: 16,
        vk: 8,
    },
];

/// The backward tiles for this adapter and head dims, or `None` when none fits.
pub fn backward_tiles(p: &AdapterProfile, d: usize, dv: usize) -> Option<BackwardTiles> {
    BACKWARD_CANDIDATES
        .iter()
        .map(|t| t.for_dims(d, dv))
        .find(|t| t.fits(p))
}

/// How many key splits a decode-shaped problem gets: enough workgroups to put
/// `512 / invocations` (2 to 8) on each compute unit, each split at least two
/// key blocks long, at most 256 splits; 1 (no split) when the query blocks
/// alone reach that.
/// `workgroups` is the grid without splitting (query blocks x heads x batch).
pub fn kv_splits(p: &AdapterProfile, workgroups: u64, sk: usize, tiles: FlashTiles) -> u32 {
    // Small workgroups: more of them per compute unit keep more loads in flight.
    let per_unit = u64::from((512 / tiles.threads().max(1)).clamp(2, 8));
    let target = per_unit * u64::from(p.compute_units.max(1));
    if workgroups >= target || sk == 0 {
        return 1;
    }
    let max_splits = (sk as u64).div_ceil(2 * u64::from(tiles.bc())).max(1);
    target.div_ceil(workgroups.max(1)).min(max_splits).min(256) as u32
}

/// Packed query rows (`group * Sq`) up to which the dispatcher uses the
/// decode kernel (`shaders/attention_decode.wgsl`): it serves at most
/// [`DECODE_CHUNK_ROWS`] rows per workgroup, so 16 rows read K and V twice
/// (the second time mostly from L2); beyond that the flash tile's
/// arithmetic reuse wins.
pub const DECODE_KERNEL_MAX_ROWS: usize = 16;

/// Most query rows one decode workgroup serves (its registers hold an
/// accumulator per row: 8 rows x 8 f16 columns = 64 floats).
pub const DECODE_CHUNK_ROWS: usize = 8;

/// Rows per decode workgroup for `rows` packed query rows: the fewest chunks
/// of at most [`DECODE_CHUNK_ROWS`], split evenly (12 rows: 2 x 6), so no
/// register or arithmetic is spent on absent rows beyond the rounding.
pub fn decode_chunk_rows(rows: usize) -> usize {
    let rows = rows.max(1);
    rows.div_ceil(rows.div_ceil(DECODE_CHUNK_ROWS))
}

/// The decode kernel's tile (`shaders/attention_decode.wgsl`): workgroup
/// size, invocations per key in the score step, V prefetch and how many
/// workgroups per compute unit the key splits aim for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DecodeTiles {
    /// Invocations per workgroup (`WG`): 32, 64, 128 or 256 (32: one warp
    /// on NVIDIA, whose barriers cost next to nothing).
    pub threads: u32,
    /// Invocations per key in the score step (`LK`): 2, 4 or 8; a block is
    /// `threads / lk` keys.
    pub lk: u32,
    /// Load the next block's V words with its K words (two blocks of V in
    /// registers); honoured only while the K and V registers of two blocks
    /// stay within 16 words per invocation.
    pub prefetch_v: bool,
    /// Workgroups per compute unit the key splits aim for.
    pub per_unit: u32,
}

impl fmt::Display for DecodeTiles {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "wg{} lk{} kb{} {} {}/cu",
            self.threads,
            self.lk,
            self.keys(),
            if self.prefetch_v { "vpre" } else { "v-now" },
            self.per_unit
        )
    }
}

impl DecodeTiles {
    /// Keys per block (`KB`); split lengths are multiples of it.
    pub fn keys(&self) -> usize {
        (self.threads / self.lk.max(1)) as usize
    }

    /// Whether the shape is one the kernel supports (power-of-two sizes,
    /// at least 8 keys per block).
    pub fn valid(&self) -> bool {
        [32, 64, 128, 256].contains(&self.threads)
            && [2, 4, 8].contains(&self.lk)
            && self.keys() >= 8
            && self.per_unit >= 1
    }
}

/// The dispatcher's decode tile for `dtype` and key head dim `d`: 128
/// invocations, LK chosen so each invocation loads at most 4 K words per
/// block (f16 D = 128: LK = 4, 32 keys per block; f32 D = 128: LK = 8, 16
/// keys), V loaded with its own block (not a block ahead), and key splits
/// for 4 workgroups per compute unit: one wave.
/// Measured on the H200 (runs 29-36, `attention --decode-grid`, Hq 32, Hkv
/// 8, D 128): the grid of shapes against 2 to 8 workgroups per unit showed
/// that the split count matters more than the shape. These tiles run 4
/// workgroups (16 warps) per SM at once, so 4 per unit is one full wave:
/// f16 at 32k keys 79.9 us against 96.0 at 8 per unit (1.94 waves, the
/// second one half empty) and 112.6 at 5; at 128k 233 us against 247.
/// f32 at 32k: 101.7 us against 109.0.
/// Why these shapes: about 128 registers per invocation (two blocks of K
/// words and a block of V words, 8 vec4 accumulators per row quad) with
/// 16 KiB of loads per block and workgroup; f16 with V prefetched too
/// (two blocks of V) ran slower at every split count. f32 prefetched V
/// until run 93, whose grids (two calls, after the epilogue change)
/// had it without at 84.4-85.0 us against 88.9-89.1 at 32k, 259.4-260.8
/// against 264.0-264.4 at 128k.
pub fn decode_kernel_tiles(dtype: DType, d: usize) -> DecodeTiles {
    let words = d.div_ceil(decode_epw(dtype)).max(1);
    let lk = words.div_ceil(4).next_power_of_two().clamp(2, 8) as u32;
    DecodeTiles {
        threads: 128,
        lk,
        prefetch_v: false,
        per_unit: 4,
    }
}

/// Variants the benchmark sweeps (`examples/attention.rs --decode-sweep`).
/// 0: the previous engineer's shape (256 invocations, 4 per unit); 1: the
/// default for f16 D = 128; 2: the default for f32 D = 128 (LK = 8); 3: V
/// loaded in its own block (fewer registers); 4: 64 invocations, 16 per
/// unit; 5-6: one 32-wide workgroup (a single NVIDIA warp: barriers nearly
/// free, the "each invocation group streams its own keys" structure without
/// subgroup operations), 32 per unit; 7: 128 keys per block (LK = 2).
pub const DECODE_SWEEP: [DecodeTiles; 8] = [
    DecodeTiles {
        threads: 256,
        lk: 4,
        prefetch_v: true,
        per_unit: 4,
    },
    DecodeTiles {
        threads: 128,
        lk: 4,
        prefetch_v: true,
        per_unit: 8,
    },
    DecodeTiles {
        threads: 128,
        lk: 8,
        prefetch_v: true,
        per_unit: 8,
    },
    DecodeTiles {
        threads: 128,
        lk: 4,
        prefetch_v: false,
        per_unit: 8,
    },
    DecodeTiles {
        threads: 64,
        lk: 4,
        prefetch_v: true,
        per_unit: 16,
    },
    DecodeTiles {
        threads: 32,
        lk: 4,
        prefetch_v: true,
        per_unit: 32,
    },
    DecodeTiles {
        threads: 32,
        lk: 2,
        prefetch_v: true,
        per_unit: 32,
    },
    DecodeTiles {
        threads: 256,
        lk: 2,
        prefetch_v: false,
        per_unit: 4,
    },
];

/// Longest minimum key run of a decode split (see [`decode_splits`]).
pub const DECODE_MIN_SPLIT: usize = 128;

/// Elements per 16-byte word of the decode kernel: 4 (f32) or 8 (f16).
pub fn decode_epw(dtype: DType) -> usize {
    16 / dtype.size()
}

/// Whether the decode kernel handles these head dims in `dtype`: D and Dv
/// multiples of the 16-byte word (rows start on a word), 1 to 256.
pub fn decode_fits(dtype: DType, d: usize, dv: usize) -> bool {
    let epw = decode_epw(dtype);
    (1..=256).contains(&d)
        && (1..=256).contains(&dv)
        && d.is_multiple_of(epw)
        && dv.is_multiple_of(epw)
}

/// Derived shape of the decode kernel: (rows per chunk, row quads, KWPL, WVP, VPRE).
fn decode_shape(
    dtype: DType,
    rows: usize,
    d: usize,
    dv: usize,
    t: DecodeTiles,
) -> (u32, u32, u32, u32, bool) {
    let epw = decode_epw(dtype);
    let chunk = decode_chunk_rows(rows) as u32;
    let lk = t.lk.max(1);
    let kwpl = (d / epw).div_ceil(lk as usize).max(1) as u32;
    // WVP >= LK so the G = WG / WVP key groups divide the KB keys of a block.
    let wvp = (dv / epw).max(lk as usize).next_power_of_two() as u32;
    let vpl = t.keys() as u32 / (t.threads / wvp).max(1);
    let vpre = t.prefetch_v && 2 * (kwpl + vpl) <= 16;
    (chunk, chunk.div_ceil(4), kwpl, wvp, vpre)
}

/// Whether tile `t` serves value head dim `dv` in `dtype`: every value word
/// needs an invocation (`WVP <= WG`).
pub fn decode_tiles_fit(dtype: DType, dv: usize, t: DecodeTiles) -> bool {
    let wvp = (dv / decode_epw(dtype))
        .max(t.lk as usize)
        .next_power_of_two();
    wvp <= t.threads as usize
}

/// The decode kernel's specialisation for `rows` packed query rows
/// (`group * Sq`), head dims `d`, `dv` (see [`decode_fits`]) and tile `t`.
///
/// `shuffle`: each key's partial dots added by subgroup shuffles
/// ([`decode_shuffle_fits`]).
pub fn decode_spec(
    dtype: DType,
    rows: usize,
    d: usize,
    dv: usize,
    t: DecodeTiles,
    shuffle: bool,
) -> Spec {
    let (chunk, rq, kwpl, wvp, vpre) = decode_shape(dtype, rows, d, dv, t);
    Spec::new(if shuffle {
        Kernel::AttentionDecodeShuffle
    } else {
        Kernel::AttentionDecode
    })
    .dtype(dtype)
    .constant("ROWS", chunk)
    .constant("RQ", rq)
    .constant("EPW", decode_epw(dtype) as u32)
    .constant("LK", t.lk)
    .constant("KWPL", kwpl)
    .constant("WVP", wvp)
    .constant("VPRE", u32::from(vpre))
    .constant("WG", t.threads)
    .constant("PROBE", decode_probe())
    .constant("CE", decode_epilogue_chunk(dtype, t))
    .constant("SHUFFLE", u32::from(shuffle))
}

/// Whether the decode kernel can add each key's partial dots by subgroup
/// shuffles with tile `t`: subgroups of at least `lk` lanes (the LK lanes of
/// a key must share one) whose size divides the workgroup.
pub fn decode_shuffle_fits(p: &AdapterProfile, t: DecodeTiles) -> bool {
    p.subgroups
        && p.subgroup_min_size >= t.lk
        && p.subgroup_max_size > 0
        && t.threads.is_multiple_of(p.subgroup_max_size)
}

/// Timing probe of the decode kernel (`WGTILE_DECODE_PROBE`, wrong results
/// while set): 0 off; bit 0 drops the score math, bit 1 the softmax and
/// P V math, bit 2 the epilogue, bit 3 the key loop (see
/// `shaders/attention_decode.wgsl`), to see what each part costs.
fn decode_probe() -> u32 {
    crate::dev::overrides().decode_probe
}

/// Value elements the decode kernel's epilogue sums per barrier pair (its
/// `CE`; at most 8 KiB of workgroup memory): 2 for f16, 4 for f32.
/// `WGTILE_DECODE_CE` (2 or 4) overrides it for measurements.
///
/// Measured on the H200 (runs 93-102, D 128, 32k keys): the f16 kernel
/// (LK 4) split pass took 61.9 us with 2, against 64.6 for the old
/// epilogue (one element per barrier pair, 20 barriers); with 4 or 1 the
/// driver gave it 168 registers instead of 128, 3 workgroups per SM
/// instead of 4, and 91-94 us. f32 (LK 8) stays at 128 registers with 4.
fn decode_epilogue_chunk(dtype: DType, t: DecodeTiles) -> u32 {
    let forced = crate::dev::overrides().decode_ce;
    let chunk = if dtype == DType::F16 { 2 } else { 4 };
    // 256 invocations: 2 (the tiles have at most 256).
    forced.unwrap_or(chunk).min(512 / t.threads.clamp(1, 256))
}

/// Workgroup memory of [`decode_spec`]'s kernel in bytes.
pub fn decode_workgroup_bytes(
    dtype: DType,
    rows: usize,
    d: usize,
    dv: usize,
    t: DecodeTiles,
) -> u32 {
    let (_, rq, kwpl, wvp, _) = decode_shape(dtype, rows, d, dv, t);
    let (rq, kb, wg) = (rq as usize, t.keys(), t.threads as usize);
    let dp = kwpl as usize * t.lk as usize * decode_epw(dtype);
    // q_t, part, lgs and prob, comb (CE per invocation), red; then the 2
    // * RQ flags.
    let comb = decode_epilogue_chunk(dtype, t) as usize * wg;
    let vec4s = rq * dp + rq * t.lk as usize * kb + 2 * rq * kb + comb + wg / wvp as usize;
    (vec4s * 16 + 8 * rq) as u32
}

/// Key splits of the decode kernel: enough workgroups for `t.per_unit` per
/// compute unit, each split at least two blocks, clamped to 64 to
/// [`DECODE_MIN_SPLIT`] keys (and at least one block), at most 256. `workgroups` is the grid without splitting (row
/// chunks x KV heads x batch).
pub fn decode_splits(p: &AdapterProfile, workgroups: u64, sk: usize, t: DecodeTiles) -> u32 {
    let target = u64::from(t.per_unit.max(1)) * u64::from(p.compute_units.max(1));
    if workgroups >= target || sk <= t.keys() {
        return 1;
    }
    // Two blocks, between 64 and DECODE_MIN_SPLIT keys: a 4k cache (f16
    // D = 128, 32-key blocks) gets 64 splits, 512 workgroups on 8 KV heads.
    let min_split = (2 * t.keys()).clamp(64, DECODE_MIN_SPLIT).max(t.keys());
    let max_splits = (sk as u64).div_ceil(min_split as u64).max(1);
    target.div_ceil(workgroups.max(1)).min(max_splits).min(256) as u32
}

/// Every flash specialisation the dispatcher can produce (for shader
/// validation): each candidate tile shape x value head-dimension bucket x
/// dtype x split mode, plus the merge and naive kernels.
pub fn attention_specs() -> Vec<Spec> {
    let mut specs = Vec::new();
    let mut p = permissive_profile();
    p.max_workgroup_storage = 48 * 1024;
    for dtype in [DType::F32, DType::F16] {
        for t in FLASH_CANDIDATES
            .iter()
            .chain(&TEST_TILES)
            .chain(&SWEEP_TILES)
            .chain([&DECODE_TILES])
        {
            for dv in [1usize, 32, 64, 80, 128, 256] {
                let t = if t.br == DECODE_TILES.br {
                    decode_tiles(dv)
                } else {
                    t.for_value_dim(dv)
                };
                if !t.fits(&p, dv) {
                    continue;
                }
                for split in [false, true] {
                    let s = t.spec(dtype, split);
                    if !specs.contains(&s) {
                        specs.push(s);
                    }
                }
                // The f32 tensor-core plan's guarded fallback.
                if dtype == DType::F32 {
                    let s = t.guarded_spec();
                    if !specs.contains(&s) {
                        specs.push(s);
                    }
                }
            }
        }
        specs.push(Spec::new(Kernel::AttentionMerge).dtype(dtype));
        // The f32 tensor-core kernel's exponents pass (dtype-independent).
        if dtype == DType::F32 {
            specs.push(Spec::new(Kernel::AttentionSplitScale));
        }
        for rows in 1..=DECODE_CHUNK_ROWS {
            for d in [8usize, 32, 64, 80, 128, 256] {
                for dv in [8usize, 48, 64, 128, 256] {
                    if !decode_fits(dtype, d, dv) {
                        continue;
                    }
                    // The sweep's variants for the benchmarked shapes; the
                    // dispatcher's tile for all.
                    let sweep = if [1, 4, 5, 8].contains(&rows) && [64, 128].contains(&d) && d == dv
                    {
                        &DECODE_SWEEP[..]
                    } else {
                        &[]
                    };
                    for t in sweep
                        .iter()
                        .copied()
                        .chain([decode_kernel_tiles(dtype, d)])
                        .filter(|t| decode_tiles_fit(dtype, dv, *t))
                    {
                        for shuffle in [false, true] {
                            let s = decode_spec(dtype, rows, d, dv, t, shuffle);
                            if !specs.contains(&s) {
                                specs.push(s);
                            }
                        }
                    }
                }
            }
        }
        for t in BACKWARD_CANDIDATES {
            for (d, dv) in [(1usize, 1usize), (32, 24), (64, 64), (128, 80), (256, 256)] {
                let t = t.for_dims(d, dv);
                for k in [
                    Kernel::AttentionBwdPrepare,
                    Kernel::AttentionBwdDkDv,
                    Kernel::AttentionBwdDq,
                ] {
                    let s = t.spec(k, dtype);
                    if !specs.contains(&s) {
                        specs.push(s);
                    }
                }
            }
        }
        for k in [
            Kernel::AttentionScores,
            Kernel::AttentionSoftmax,
            Kernel::AttentionPv,
        ] {
            specs.push(Spec::new(k).dtype(dtype));
        }
    }
    specs
}

/// More tile shapes the benchmark's `--sweep-tiles` times on GPUs (never
/// picked by the dispatcher): wider key blocks, the 8-rows-per-invocation
/// tile at 128 rows (10x slower than 4 rows on the H200: register spills),
/// a 128-invocation 32-row tile. Where one beats [`FLASH_CANDIDATES`] on a
/// GPU, it belongs there.
pub const SWEEP_TILES: [FlashTiles; 3] = [
    FlashTiles {
        br: 64,
        tr: 4,
        nc: 32,
        td: 4,
        dk: 16,
        vk: 16,
    },
    FlashTiles {
        br: 128,
        tr: 8,
        nc: 16,
        td: 8,
        dk: 16,
        vk: 16,
    },
    FlashTiles {
        br: 32,
        tr: 4,
        nc: 16,
        td: 8,
        dk: 16,
        vk: 16,
    },
];

/// Tile shapes the tests force on small adapters to cover the 8-rows-per-
/// invocation path of the largest candidate within 32 KiB.
pub const TEST_TILES: [FlashTiles; 1] = [FlashTiles {
    br: 64,
    tr: 8,
    nc: 16,
    td: 8,
    dk: 16,
    vk: 16,
}];

fn permissive_profile() -> AdapterProfile {
    AdapterProfile {
        name: String::new(),
        backend: wgpu::Backend::Vulkan,
        device_type: wgpu::DeviceType::DiscreteGpu,
        vendor: 0,
        device: 0,
        driver: String::new(),
        driver_info: String::new(),
        subgroup_min_size: 32,
        subgroup_max_size: 32,
        shader_f16: true,
        subgroups: true,
        subgroup_barrier: true,
        timestamps: true,
        cooperative_matrix: false,
        coop_configs: Vec::new(),
        max_workgroup_storage: 32 * 1024,
        max_invocations: 256,
        max_workgroup_size_x: 256,
        max_workgroup_size_y: 256,
        max_workgroups_per_dim: 65535,
        max_storage_binding: 1 << 31,
        max_buffer_size: 1 << 31,
        max_storage_buffers_per_stage: 8,
        compute_units: 1,
    }
}

/// The split-merge kernel's specialisation for value head dim `dv` and its
/// grid's z size (column chunks): 256 invocations (64 where the adapter
/// allows fewer) over 32 columns, so 8 (2) split lanes read a row's splits
/// in parallel.
pub(crate) fn merge_spec(profile: &AdapterProfile, dtype: DType, dv: usize) -> (Spec, u32) {
    const CW: usize = 32;
    let wg = if profile.max_invocations >= 256 && profile.max_workgroup_size_x >= 256 {
        256
    } else {
        64
    };
    let spec = Spec::new(Kernel::AttentionMerge)
        .dtype(dtype)
        .override_("WG", wg)
        .override_("CW", CW as u32);
    (spec, dv.div_ceil(CW).max(1) as u32)
}
