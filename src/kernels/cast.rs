//! The cast kernel's specialisations (`shaders/cast.wgsl`): one per
//! (source dtype, target dtype) pair.

use super::{Kernel, Spec};
use crate::dtype::DType;

/// Workgroup size of the cast kernel.
pub(crate) const CAST_WG: u32 = 256;

/// The cast kernel's code for a dtype (`IN` / `OUT` in `shaders/cast.wgsl`).
fn code(dtype: DType) -> u32 {
    match dtype {
        DType::F32 => 0,
        DType::F16 => 1,
        DType::BF16 => 2,
    }
}

/// The cast kernel's specialisation from `from` to `to`.
pub(crate) fn cast_spec(from: DType, to: DType) -> Spec {
    Spec::new(Kernel::Cast)
        .constant("IN", code(from))
        .constant("OUT", code(to))
        .override_("WG", CAST_WG)
}

/// Every specialisation of the cast kernel, for the shader tests.
pub fn cast_specs() -> Vec<Spec> {
    DType::ALL
        .into_iter()
        .flat_map(|from| DType::ALL.map(|to| cast_spec(from, to)))
        .collect()
}

