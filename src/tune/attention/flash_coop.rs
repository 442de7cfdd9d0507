//! The tensor-core flash forward's tiles: which fit the adapter, which the
//! dispatcher prefers (f16, f32 split, small head dims).

use super::*;

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

/// The tensor-core flash kernel of f16 operands writing O as bf16, two
/// values per word (`O_BF16`).
pub fn flash_coop_out_bf16(spec: Spec) -> Spec {
    spec.constant("O_BF16", 1).alias("OStore", "u32")
}

/// Tensor-core flash tiles, preferred first; the dispatcher takes the first
/// that fits the adapter and head dims. Measured on the H200 (runs 22-27,
/// `attention_sweep --sweep-coop`, B4 H16 f16, TFLOP/s, K read column-major, vec4
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
