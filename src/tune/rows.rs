//! Row-kernel launch shapes (softmax, norms, reductions, fused rows): how
//! many invocations share a row, how many chunks each keeps in registers,
//! when a reduction splits a long row over workgroups. Shared by the row
//! families of `ops`; decides only.

use crate::dtype::DType;
use crate::gpu::AdapterProfile;
use crate::kernels::{Kernel, Spec};

/// Most chunks of 4 elements one invocation keeps in registers (32 floats).
pub(crate) const MAX_REGISTER_CHUNKS: u32 = 8;

/// Chunks per invocation the register kernels aim for (16 floats: a row of
/// 4096 on 256 invocations).
pub(crate) const TARGET_CHUNKS: u32 = 4;

/// Fewest invocations per workgroup: short rows share a workgroup of this size.
pub(crate) const MIN_WORKGROUP: u32 = 64;

/// The largest workgroup the row kernels use on `profile`, capped at `cap`.
pub(crate) fn workgroup_cap(profile: &AdapterProfile, cap: u32) -> u32 {
    let max = profile
        .max_invocations
        .min(profile.max_workgroup_size_x)
        .max(1);
    // A power of two: the tree reductions halve.
    let mut wg = 1u32;
    while wg * 2 <= max.min(cap) {
        wg *= 2;
    }
    wg
}

/// How a row kernel is launched: workgroup size, invocations per row, chunks
/// per invocation in registers (0: the streaming kernel), vector access.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RowLayout {
    /// Invocations per workgroup.
    pub(crate) wg: u32,
    /// Invocations per row (a power of two dividing `wg`).
    pub(crate) t: u32,
    /// Chunks per invocation held in registers; 0 for the streaming kernels.
    pub(crate) r: u32,
    /// `n % 4 == 0`: one vector access per chunk.
    pub(crate) vec4: bool,
}

impl RowLayout {
    /// Rows per workgroup.
    pub(crate) fn rows_per_group(&self) -> u32 {
        self.wg / self.t
    }

    /// Whether this layout may use the subgroup kernels (one row per workgroup).
    pub(crate) fn subgroup_ok(&self, profile: &AdapterProfile) -> bool {
        profile.subgroups && self.t == self.wg
    }
}

/// The layout for a register (one-read) kernel over rows of `n`, or the
/// streaming layout (`r == 0`, one row per workgroup) when a row does not fit.
pub(crate) fn register_layout(profile: &AdapterProfile, n: u32) -> RowLayout {
    let vec4 = n.is_multiple_of(4);
    let chunks = n.div_ceil(4).max(1);
    let small = workgroup_cap(profile, 256);
    let big = workgroup_cap(profile, 1024);
    let t_for = |cap: u32| chunks.div_ceil(TARGET_CHUNKS).next_power_of_two().min(cap);
    for cap in [small, big] {
        let t = t_for(cap);
        let r = chunks.div_ceil(t).next_power_of_two();
        if r <= MAX_REGISTER_CHUNKS {
            return RowLayout {
                wg: t.max(MIN_WORKGROUP.min(small)),
                t,
                r,
                vec4,
            };
        }
    }
    streaming_layout(profile, n)
}

/// The streaming layout: one row per workgroup of up to 256 invocations.
pub(crate) fn streaming_layout(profile: &AdapterProfile, n: u32) -> RowLayout {
    let small = workgroup_cap(profile, 256);
    RowLayout {
        wg: small,
        t: small,
        r: 0,
        vec4: n.is_multiple_of(4),
    }
}

/// The spec of a row kernel at a layout (`R` only for the register kernels).
pub(crate) fn row_spec(kernel: Kernel, dtype: DType, layout: &RowLayout) -> Spec {
    let mut spec = Spec::new(kernel)
        .dtype(dtype)
        .constant("VEC", if layout.vec4 { 4 } else { 1 })
        .override_("WG", layout.wg)
        .override_("T", layout.t);
    if layout.r > 0 {
        spec = spec.constant("R", layout.r);
    }
    spec
}

/// Chunks of 4 elements each invocation accumulates (32 elements).
pub(crate) const CHUNKS_PER_INVOCATION: u32 = 8;

/// The spec of the second (combine) pass.
pub(crate) fn combine_spec(dtype: DType, op: u32, wg: u32) -> Spec {
    Spec::new(Kernel::ReduceCombine)
        .dtype(dtype)
        .constant("OP", op)
        .override_("WG", wg)
        .override_("T", wg)
}

/// How a reduction launches: the row layout and the split (1: no split).
#[derive(Clone, Copy, Debug)]
pub(crate) struct ReduceLayout {
    pub(crate) row: RowLayout,
    pub(crate) split: u32,
    pub(crate) seg: u32,
}

/// The row layout of the reduction kernel for rows of `n` (before any split).
pub(crate) fn reduce_row_layout(profile: &AdapterProfile, n: u32) -> RowLayout {
    let chunks = n.div_ceil(4).max(1);
    let small = workgroup_cap(profile, 256);
    let t = chunks
        .div_ceil(CHUNKS_PER_INVOCATION)
        .next_power_of_two()
        .min(small);
    RowLayout {
        wg: t.max(MIN_WORKGROUP.min(small)),
        t,
        r: 0,
        vec4: n.is_multiple_of(4),
    }
}

pub(crate) fn reduce_layout(profile: &AdapterProfile, rows: u32, n: u32) -> ReduceLayout {
    let chunks = n.div_ceil(4).max(1);
    let small = workgroup_cap(profile, 256);
    let row = reduce_row_layout(profile, n);
    let t = row.t;
    let groups = u64::from(rows).div_ceil(u64::from(row.rows_per_group()));
    // Enough workgroups to fill the GPU a few times over.
    let target = u64::from(profile.compute_units.max(4)) * 4;
    let per_group = u64::from(small) * u64::from(CHUNKS_PER_INVOCATION);
    if t == small && groups < target && u64::from(chunks) > per_group {
        let split = target
            .div_ceil(u64::from(rows))
            .min(u64::from(chunks).div_ceil(per_group));
        let seg = u64::from(chunks).div_ceil(split);
        let split = u64::from(chunks).div_ceil(seg);
        if split > 1 {
            return ReduceLayout {
                row,
                split: split as u32,
                seg: seg as u32,
            };
        }
    }
    ReduceLayout {
        row,
        split: 1,
        seg: 0,
    }
}
