//! Tiles and generated blocks of the tensor-core attention backward
//! (`shaders/attention_bwd_coop_dkdv.wgsl`, `shaders/attention_bwd_coop_dq.wgsl`).

use super::CoopLaunch;
use crate::dtype::DType;
use crate::gpu::AdapterProfile;
use crate::kernels::Spec;
use crate::kernels::codegen::coop_backward::sub_barrier_text;
pub use crate::kernels::codegen::coop_backward::{BackwardCoopPass, BackwardCoopTiles};

/// Tensor-core backward tiles, preferred first (the dispatcher takes the
/// first that fits; [`backward_coop_tiles`] puts 8 subgroups first for head
/// dims above 64). Measured on the H200 (run 28, `attention_sweep
/// --sweep-backward`, f16 B4 H16 S4096, TFLOP/s at 2.5x the forward FLOPs):
/// at D = 128 8 subgroups 80.2 (causal 71.6), 4 subgroups 62.0, 2
/// subgroups 54.0; at D = 64 4 subgroups 55.0, 2 subgroups 48.4, 8
/// subgroups 43.4. 32-row blocks were slower everywhere (4 x 32: 51.5 and
/// 32.3).
pub const BACKWARD_COOP_CANDIDATES: [BackwardCoopTiles; 3] = [
    BackwardCoopTiles {
        subgroups: 4,
        block: 16,
    },
    BackwardCoopTiles {
        subgroups: 8,
        block: 16,
    },
    BackwardCoopTiles {
        subgroups: 2,
        block: 16,
    },
];

/// More tiles for the benchmark's backward sweep (never picked by the
/// dispatcher).
pub const BACKWARD_COOP_SWEEP: [BackwardCoopTiles; 2] = [
    BackwardCoopTiles {
        subgroups: 4,
        block: 32,
    },
    BackwardCoopTiles {
        subgroups: 2,
        block: 32,
    },
];

impl BackwardCoopTiles {
    /// Whether the tile is well formed for head dims `d`, `dv` (multiples of
    /// 16 in 16..=256) and the adapter runs both kernels on tensor cores.
    pub fn fits(self, p: &AdapterProfile, d: usize, dv: usize) -> bool {
        crate::tune::has_coop_f16(p) && self.fits_with(p, d, dv, p.subgroup_max_size)
    }

    /// Whether the emulated kernels (16 virtual lanes per subgroup) run this
    /// tile: f16, subgroups and the workgroup limits.
    pub fn fits_emulated(self, p: &AdapterProfile, d: usize, dv: usize) -> bool {
        p.shader_f16 && p.subgroups && self.fits_with(p, d, dv, 16)
    }

    fn fits_with(self, p: &AdapterProfile, d: usize, dv: usize, sg: u32) -> bool {
        let launch = CoopLaunch {
            threads: self.threads(sg),
            bytes: self
                .workgroup_bytes(BackwardCoopPass::DkDv, d as u32, dv as u32)
                .max(self.workgroup_bytes(BackwardCoopPass::Dq, d as u32, dv as u32)),
            // q, k, v, dO as words, stats, mask, key lengths, dK, dV.
            buffers: 9,
        };
        self.subgroups >= 1
            && self.block >= 16
            && self.block.is_multiple_of(16)
            // P/dS columns in groups of 4 per lane (LPR = SG / 16 per row).
            && self.block.is_multiple_of(4 * (sg / 16).max(1))
            && launch.fits(p, d, dv, sg)
    }

    /// The specialisation of `pass` for head dims `d`, `dv` and subgroup
    /// size `sg` (`emulated`: the per-invocation matrix operations, 16
    /// virtual lanes; `sub_barrier`: the adapter has `subgroupBarrier()`,
    /// used on the subgroups' own scratch unless emulated).
    pub fn spec(
        self,
        pass: BackwardCoopPass,
        d: usize,
        dv: usize,
        sg: u32,
        emulated: bool,
        sub_barrier: bool,
    ) -> Spec {
        let (d32, dv32) = (d as u32, dv as u32);
        let mut spec = Spec::new(pass.kernel(emulated))
            .dtype(DType::F16)
            .constant("W", self.subgroups)
            .constant(pass.block_const(), self.block)
            .constant("SG", if emulated { 16 } else { sg })
            .constant("D", d32)
            .constant("DV", dv32)
            .constant("CH", self.ch(d32, dv32));
        let blocks = if emulated {
            self.blocks_looped(pass, d32, dv32)
        } else {
            self.blocks(pass, d32, dv32)
        };
        for (name, text) in blocks {
            spec = spec.block(name, text);
        }
        spec.block("sub_barrier", sub_barrier_text(sub_barrier && !emulated))
    }
}

/// The tensor-core backward tiles for this adapter and head dims, or `None`
/// when the adapter lacks the cooperative matrix or no candidate fits.
pub fn backward_coop_tiles(p: &AdapterProfile, d: usize, dv: usize) -> Option<BackwardCoopTiles> {
    let wide = BACKWARD_COOP_CANDIDATES[1];
    let first = (d.max(dv) > 64).then_some(wide);
    first
        .into_iter()
        .chain(BACKWARD_COOP_CANDIDATES)
        .find(|t| t.fits(p, d, dv))
}
