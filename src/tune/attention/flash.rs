//! The flash forward's tiles per adapter and head dim, and the key splits
//! of the split-KV (flash-decoding) pass.

use super::*;

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
    /// Why these tiles cannot be the flash kernel's, naming the field
    /// (`None`: well formed; whether the adapter runs them is `fits`).
    pub fn invalid_reason(self) -> Option<String> {
        if !matches!(self.tr, 4 | 8) {
            return Some(format!("flash tiles tr = {} (must be 4 or 8)", self.tr));
        }
        if self.br == 0 || !self.br.is_multiple_of(self.tr) {
            return Some(format!(
                "flash tiles br = {} (must be a positive multiple of tr = {})",
                self.br, self.tr
            ));
        }
        if self.nc == 0 {
            return Some("flash tiles nc = 0 (must be at least 1)".into());
        }
        if !matches!(self.td, 4 | 8 | 16) {
            return Some(format!("flash tiles td = {} (must be 4, 8 or 16)", self.td));
        }
        if self.dk == 0 || !self.dk.is_multiple_of(4) {
            return Some(format!("flash tiles dk = {} (must be a positive multiple of 4)", self.dk));
        }
        if self.vk == 0 || !self.vk.is_multiple_of(4) || !(4 * self.nc).is_multiple_of(self.vk) {
            return Some(format!(
                "flash tiles vk = {} (must be a positive multiple of 4 dividing 4 nc = {})",
                self.vk,
                4 * self.nc
            ));
        }
        None
    }
}

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
/// dimension. Measured on the H200 (`attention_sweep --sweep-tiles`, B=4 H=16
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
