//! The attention dispatcher: tile sizes of the flash kernel per adapter and
//! head dimension, and the number of key splits for decoding (flash-decoding).
//!
//! It decides only; `ops::attention` builds and encodes the dispatches.

use std::fmt;

use crate::context::AdapterProfile;
use crate::dtype::DType;
use crate::kernels::{Kernel, Spec};

/// Tile shape of the flash forward kernel (`shaders/attention_flash.wgsl`).
///
/// A workgroup owns `br` query rows and streams `bc` keys per block; its
/// `(br / tr) * nc` invocations each own `tr` rows x `bc / nc` score columns
/// and `tr` rows x `td` output columns in registers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FlashTiles {
    /// Query rows per workgroup.
    pub br: u32,
    /// Keys per block.
    pub bc: u32,
    /// Query rows per invocation.
    pub tr: u32,
    /// Column groups: invocations sharing the same rows.
    pub nc: u32,
    /// Output (Dv) columns per invocation: `nc * td >= Dv`.
    pub td: u32,
    /// Head-dimension chunk staged through workgroup memory for Q K^T.
    pub dk: u32,
    /// Keys of V staged at a time for P V.
    pub vk: u32,
}

/// Largest value head dimension (Dv) the flash kernel supports.
pub const MAX_FLASH_DV: usize = 256;

impl FlashTiles {
    /// Score columns per invocation.
    pub const fn tc(self) -> u32 {
        self.bc / self.nc
    }

    /// Invocations per workgroup.
    pub const fn threads(self) -> u32 {
        (self.br / self.tr) * self.nc
    }

    /// f32 words of the staging buffer (Q and K chunks, or V rows).
    pub const fn stage_words(self) -> u32 {
        let qk = self.dk * (self.br + self.bc + 2);
        let v = self.vk * self.nc * self.td;
        if qk > v { qk } else { v }
    }

    /// Workgroup memory in bytes (staging, P tile, row reductions).
    pub const fn workgroup_bytes(self) -> u32 {
        4 * (self.stage_words() + self.br * (self.bc + 1) + self.br * self.nc)
    }

    /// Whether the adapter can run this tile shape.
    pub fn fits(self, p: &AdapterProfile) -> bool {
        self.threads() <= p.max_invocations
            && self.threads() <= p.max_workgroup_size_x
            && self.workgroup_bytes() <= p.max_workgroup_storage
    }

    /// The kernel specialisation (`split`: the split-KV decoding pass).
    pub fn spec(self, dtype: DType, split: bool) -> Spec {
        Spec::new(Kernel::AttentionFlash)
            .dtype(dtype)
            .constant("BR", self.br)
            .constant("BC", self.bc)
            .constant("TR", self.tr)
            .constant("TC", self.tc())
            .constant("NC", self.nc)
            .constant("TD", self.td)
            .constant("DK", self.dk)
            .constant("VK", self.vk)
            .constant("STAGE", self.stage_words())
            .constant("SPLIT", u32::from(split))
    }
}

impl fmt::Display for FlashTiles {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Br={} Bc={} {}x{}+{}x{} per invocation, {} invocations",
            self.br,
            self.bc,
            self.tr,
            self.tc(),
            self.tr,
            self.td,
            self.threads()
        )
    }
}

/// Output columns per invocation for a value head dimension `dv` (a power of
/// two, so few specialisations exist).
fn td_for(dv: usize, nc: u32) -> u32 {
    (dv.max(1) as u32).div_ceil(nc).next_power_of_two()
}

/// The flash kernel's tiles for this adapter and value head dimension, or
/// `None` when no candidate fits the adapter (or `dv > MAX_FLASH_DV`).
///
/// Candidates, largest first: 64 query rows x 64 keys with 256 invocations
/// (4 rows each, 16 column groups), then 32 rows with 128 invocations for
/// adapters capped lower. Both fit 32 KiB of workgroup memory (lavapipe)
/// at Dv = 256.
pub fn flash_tiles(p: &AdapterProfile, dv: usize) -> Option<FlashTiles> {
    if dv > MAX_FLASH_DV {
        return None;
    }
    [64u32, 32, 16].into_iter().find_map(|br| {
        let nc = 16;
        let td = td_for(dv, nc);
        let (bc, dk) = (64, 16);
        let stage = dk * (br + bc + 2);
        // Largest power-of-two V slab that fits the Q/K staging space.
        let mut vk = bc;
        while vk > 1 && vk * nc * td > stage {
            vk /= 2;
        }
        let t = FlashTiles {
            br,
            bc,
            tr: 4,
            nc,
            td,
            dk,
            vk,
        };
        t.fits(p).then_some(t)
    })
}

/// How many key splits a decode-shaped problem gets: enough workgroups to
/// fill about two waves of the adapter's compute units, each split at least
/// two key blocks long; 1 (no split) when the query blocks alone fill the GPU.
/// `workgroups` is the grid without splitting (query blocks x heads x batch).
pub fn kv_splits(p: &AdapterProfile, workgroups: u64, sk: usize, tiles: FlashTiles) -> u32 {
    let target = 2 * u64::from(p.compute_units.max(1));
    if workgroups >= target || sk == 0 {
        return 1;
    }
    let max_splits = (sk as u64).div_ceil(2 * u64::from(tiles.bc)).max(1);
    target.div_ceil(workgroups.max(1)).min(max_splits).min(64) as u32
}

/// Every flash specialisation the dispatcher can produce (for shader
/// validation): each candidate tile shape x value head-dimension bucket x
/// dtype x split mode, plus the merge and naive kernels.
pub fn attention_specs() -> Vec<Spec> {
    let mut specs = Vec::new();
    for dtype in [DType::F32, DType::F16] {
        for br in [64u32, 32, 16] {
            for dv in [1usize, 32, 64, 128, 256] {
                let mut p = permissive_profile();
                p.max_invocations = (br / 4) * 16;
                p.max_workgroup_size_x = p.max_invocations;
                let Some(t) = flash_tiles(&p, dv) else {
                    continue;
                };
                for split in [false, true] {
                    let s = t.spec(dtype, split);
                    if !specs.contains(&s) {
                        specs.push(s);
                    }
                }
            }
        }
        specs.push(Spec::new(Kernel::AttentionMerge).dtype(dtype));
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
