//! The cast kernel's specialisations (`shaders/cast.wgsl`): one per
//! (source dtype, target dtype) pair.

use super::{Kernel, Spec};
use crate::dtype::DType;

/// Workgroup size of the cast kernel.
pub(crate) const CAST_WG: u32 = 256;

/// Most workgroups of one cast (its loop strides over the rest): with one
/// workgroup per 256 words, launching them bounded the cast at 1.2-1.5 TB/s
/// on the H200 and a guarded cast that skips cost as much as one that copies
/// (docs/perf/log-2026-12.md, run 140).
pub(crate) const CAST_GROUPS: u64 = 4096;

/// The cast kernel's code for a dtype (`IN` / `OUT` in `shaders/cast.wgsl`).
fn code(dtype: DType) -> u32 {
    match dtype {
        DType::F32 => 0,
        DType::F16 => 1,
        DType::BF16 => 2,
        DType::I32 => 3,
        DType::U32 => 4,
    }
}

/// The cast kernel's specialisation from `from` to `to`.
pub(crate) fn cast_spec(from: DType, to: DType) -> Spec {
    Spec::new(Kernel::Cast)
        .constant("IN", code(from))
        .constant("OUT", code(to))
        .override_("WG", CAST_WG)
}

/// Binding of the flag buffer of the checked cast and the check pass.
pub(crate) const CAST_FLAG_BINDING: u32 = 3;

/// The flag buffer's declaration (word 2 is the flag that arms the f32
/// fallback).
fn flag_decl() -> String {
    format!(
        "@group(0) @binding({CAST_FLAG_BINDING}) var<storage, read_write> cast_flag: \
         array<atomic<u32>>;"
    )
}

/// The check pass of a bf16 operand: sets the flag at
/// [`CAST_FLAG_BINDING`] where a value is not exactly an f16 value.
pub(crate) fn cast_check_spec() -> Spec {
    Spec::new(Kernel::CastCheck)
        .constant("IN", code(DType::BF16))
        .constant("OUT", code(DType::F16))
        .override_("WG", CAST_WG)
        .block("flag_decl", flag_decl())
        .block(
            "check_flag",
            "    if bad {\n        atomicOr(&cast_flag[2], 1u);\n    }",
        )
}

/// bf16 to f16, setting word 2 of the buffer at [`CAST_FLAG_BINDING`]
/// where a value is not exactly representable in f16 (the word that arms
/// the f32 fallback).
pub(crate) fn cast_checked_spec() -> Spec {
    cast_spec(DType::BF16, DType::F16)
        .block("flag_decl", flag_decl())
        .block(
            "flag",
            "    if !bf16_fits_f16(r0) || !bf16_fits_f16(r1) {\n\
             \x20       atomicOr(&cast_flag[2], 1u);\n    }",
        )
        .block(
            "flag8",
            "        let packed = vec4<u32>(r[0] | (r[1] << 16u), r[2] | (r[3] << 16u), \
             r[4] | (r[5] << 16u), r[6] | (r[7] << 16u));\n\
             \x20       if !fits8(packed) {\n\
             \x20           atomicOr(&cast_flag[2], 1u);\n        }",
        )
}

/// `spec` (a cast's) as the 8-element entry `main8`, for a contiguous
/// source of a multiple of 8 elements.
pub(crate) fn cast_vec(spec: Spec) -> Spec {
    Spec {
        kernel: Kernel::CastVec,
        ..spec
    }
}

/// Every specialisation of the cast kernel, for the shader tests.
pub fn cast_specs() -> Vec<Spec> {
    let all = [&DType::ALL[..], &DType::INTEGERS[..]].concat();
    let pairs: Vec<(DType, DType)> = all
        .iter()
        .flat_map(|&from| all.iter().map(move |&to| (from, to)))
        .collect();
    let all: Vec<Spec> = pairs
        .into_iter()
        .map(|(from, to)| cast_spec(from, to))
        .chain([cast_checked_spec()])
        .collect();
    let vec: Vec<Spec> = all.iter().cloned().map(cast_vec).collect();
    all.into_iter().chain(vec).chain([cast_check_spec()]).collect()
}

