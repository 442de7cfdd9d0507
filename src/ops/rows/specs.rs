//! Every specialisation the row-op and reduction dispatchers produce, for
//! the shader validation tests (no GPU).

use crate::dtype::DType;
use crate::gpu::AdapterProfile;
use crate::kernels::{Kernel, Spec};
use crate::ops::rows::reduce;
use crate::ops::rows::{RowLayout, register_layout, row_spec};

/// An NVIDIA-like profile allowing `invocations` per workgroup (layout sweeps
/// and tests need no GPU).
pub(super) fn synthetic_profile(invocations: u32) -> AdapterProfile {
    AdapterProfile::fake_gpu()
        .named("synthetic")
        .with_invocations(invocations)
}

/// Every specialisation the row-op and reduction dispatchers can produce,
/// for `tests/shaders/kernels.rs`: the layouts chosen for every row length up to
/// 40000 (past the longest register row) on adapters allowing 64, 256 and
/// 1024 invocations, times kernels, dtypes and reduction ops.
pub fn rowops_specs() -> Vec<Spec> {
    let mut row_layouts = std::collections::BTreeSet::new();
    let mut reduce_layouts = std::collections::BTreeSet::new();
    for invocations in [64, 256, 1024] {
        let profile = synthetic_profile(invocations);
        for n in 1..=40_000 {
            let l = register_layout(&profile, n);
            row_layouts.insert((l.wg, l.t, l.r, l.vec4));
            let l = reduce::reduce_row_layout(&profile, n);
            reduce_layouts.insert((l.wg, l.t, l.vec4));
        }
    }
    let mut specs = Vec::new();
    for dtype in [DType::F32, DType::F16] {
        for &(wg, t, r, vec4) in &row_layouts {
            let layout = RowLayout { wg, t, r, vec4 };
            let kernels: &[Kernel] = if r == 0 {
                &[
                    Kernel::SoftmaxOnline,
                    Kernel::SoftmaxOnlineSubgroup,
                    Kernel::NormStreaming,
                ]
            } else {
                &[
                    Kernel::Softmax,
                    Kernel::SoftmaxSubgroup,
                    Kernel::Norm,
                    Kernel::NormSubgroup,
                ]
            };
            for &kernel in kernels {
                specs.push(row_spec(kernel, dtype, &layout));
            }
        }
        for &(wg, t, vec4) in &reduce_layouts {
            let layout = RowLayout { wg, t, r: 0, vec4 };
            for op in [0, 1] {
                for kernel in [Kernel::Reduce, Kernel::ReduceSubgroup] {
                    specs.push(row_spec(kernel, dtype, &layout).constant("OP", op));
                }
                if t == wg {
                    specs.push(reduce::combine_spec(dtype, op, wg));
                }
            }
        }
        for wg in [64, 256] {
            for vec4 in [false, true] {
                let layout = RowLayout {
                    wg,
                    t: wg,
                    r: 0,
                    vec4,
                };
                specs.push(row_spec(Kernel::RowCopy, dtype, &layout));
            }
        }
    }
    specs.sort_by_key(|s| format!("{s:?}"));
    specs.dedup();
    specs
}
