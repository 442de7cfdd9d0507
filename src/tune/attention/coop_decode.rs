//! The tensor-core decode kernel's specialisation
//! (`shaders/attention_decode_coop.wgsl`): its generated blocks and splits.

use crate::dtype::DType;
use crate::gpu::AdapterProfile;
pub use crate::kernels::codegen::coop_decode::decode_coop_blocks;
use crate::kernels::{Kernel, Spec};

/// Row fragments (16 packed query rows each) per workgroup of the
/// tensor-core decode kernel: 1 for decode shapes (up to 16 rows per KV
/// head), 2 beyond (each K and V fragment loaded then serves 32 rows).
pub fn decode_coop_rf(rows_kv: usize) -> u32 {
    if rows_kv <= 16 { 1 } else { 2 }
}

/// The specialisation for `rf` row fragments (1 or 2: 16 or 32 rows per
/// workgroup), head dims `d`, `dv` (multiples of 16 up to 256) and
/// subgroup size `sg` (`emulated`: 16 virtual lanes, emulated matrix
/// operations).
pub fn decode_coop_spec(rf: u32, d: usize, dv: usize, sg: u32, emulated: bool) -> Spec {
    let kernel = if emulated {
        Kernel::AttentionDecodeCoopEmulated
    } else {
        Kernel::AttentionDecodeCoop
    };
    let mut spec = Spec::new(kernel)
        .dtype(DType::F16)
        .constant("SG", if emulated { 16 } else { sg })
        .constant("RF", rf)
        .constant("D", d as u32)
        .constant("DV", dv as u32);
    for (name, text) in decode_coop_blocks(rf, d as u32, dv as u32, emulated) {
        spec = spec.block(name, text);
    }
    spec
}

/// Workgroup memory of the kernel in bytes for `rf` row fragments.
pub const fn decode_coop_workgroup_bytes(rf: u32, d: u32, dv: u32) -> u32 {
    let dx = if d > dv { d } else { dv };
    let rows = 16 * rf;
    2 * rows * (dx + 8) + 4 * rows * 24 + 2 * rows * 24 + 8 * rows + 16
}

/// Whether the adapter runs the kernel (`emulated`: the emulated variant)
/// with `rf` row fragments for head dims `d`, `dv`.
pub fn decode_coop_fits(p: &AdapterProfile, rf: u32, d: usize, dv: usize, emulated: bool) -> bool {
    let sg = if emulated { 16 } else { p.subgroup_max_size };
    let hw = if emulated {
        p.shader_f16 && p.subgroups
    } else {
        crate::tune::has_coop_f16(p)
    };
    // Each lane's softmax columns in groups of 4: 16 / (SG / 16) a
    // multiple of 4.
    hw && matches!(rf, 1 | 2)
        && sg <= 64
        && super::CoopLaunch {
            threads: sg,
            bytes: decode_coop_workgroup_bytes(rf, d as u32, dv as u32),
            buffers: 6,
        }
        .fits(p, d, dv, sg)
}

/// Key splits of the kernel: enough one-subgroup workgroups for about 8
/// per compute unit (`workgroups` is the grid without splitting), each
/// split a multiple of 16 keys and at least 64 long.
pub fn decode_coop_splits(p: &AdapterProfile, workgroups: u64, sk: usize) -> usize {
    let target = u64::from(p.compute_units.max(1)) * 8;
    let want = target.div_ceil(workgroups.max(1)).max(1) as usize;
    want.min(sk.div_ceil(64)).max(1)
}
