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

/// Operand slots of the range test (q, k, v and a mask at most).
pub(crate) const RANGE_SLOTS: u32 = 4;

/// Words of a range-test flag buffer: word 2 (a value beyond f16's range)
/// and two per operand slot from word 4 (`shaders/arm.wgsl`).
pub(crate) const FLAG_WORDS: usize = 4 + 2 * RANGE_SLOTS as usize;

/// The flag buffer's declaration and `publish_range`: a workgroup's range
/// bits (`range_bits` in `shaders/cast.wgsl`) of operand slots `slot` and
/// `slot + 1` into the flag buffer, one global atomic per workgroup and
/// word (nearly every value of real data sets bit 4: one per value would
/// queue millions on one word).
fn flag_decl() -> String {
    format!(
        "@group(0) @binding({CAST_FLAG_BINDING}) var<storage, read_write> cast_flag: \
         array<atomic<u32>>;
var<private> range_seen: u32;
var<workgroup> range_wg: array<atomic<u32>, 2>;

// Sets word `word` where `on`, reading it first: once one workgroup has
// set it the others skip their atomic (thousands queue on one word).
fn publish_bit(on: bool, word: u32) {{
    if on && atomicLoad(&cast_flag[word]) == 0u {{
        atomicOr(&cast_flag[word], 1u);
    }}
}}

fn publish_range(lid: u32, seen: vec2<u32>, slot: u32) {{
    // Workgroup memory starts undefined (pipelines skip its zeroing).
    if lid == 0u {{
        atomicStore(&range_wg[0], 0u);
        atomicStore(&range_wg[1], 0u);
    }}
    workgroupBarrier();
    atomicOr(&range_wg[0], seen.x);
    atomicOr(&range_wg[1], seen.y);
    workgroupBarrier();
    if lid == 0u {{
        for (var s = 0u; s < 2u; s++) {{
            let bits = atomicLoad(&range_wg[s]);
            publish_bit((bits & 1u) != 0u, 2u);
            publish_bit((bits & 2u) != 0u, 4u + 2u * (slot + s));
            publish_bit((bits & 4u) != 0u, 5u + 2u * (slot + s));
        }}
    }}
}}"
    )
}

/// The check pass of two bf16 operands: their range bits published as
/// slots 0 and 1 of the flag buffer at [`CAST_FLAG_BINDING`].
pub(crate) fn cast_check_spec() -> Spec {
    Spec::new(Kernel::CastCheck)
        .constant("IN", code(DType::BF16))
        .constant("OUT", code(DType::F16))
        .override_("WG", CAST_WG)
        .block("flag_decl", flag_decl())
        .block("check_flag", "    publish_range(lid, seen, 0u);")
}

/// bf16 to f16 publishing the source's range bits as slot `params.pad1`
/// of the flag buffer at [`CAST_FLAG_BINDING`] (what arms the f32
/// fallback).
pub(crate) fn cast_checked_spec() -> Spec {
    cast_spec(DType::BF16, DType::F16)
        .block("flag_decl", flag_decl())
        .block("flag", "        range_seen |= range_bits(r0) | range_bits(r1);")
        .block(
            "flag8",
            "            range_seen |= range_bits2(v.x) | range_bits2(v.y) | range_bits2(v.z) | range_bits2(v.w);",
        )
        .block("flag_end", "    publish_range(lid, vec2<u32>(range_seen, 0u), params.pad1);")
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

