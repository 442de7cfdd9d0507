// attention_bwd_coop_common: staging helpers of the tensor-core backward
// kernels (attention_bwd_coop_dkdv.wgsl, attention_bwd_coop_dq.wgsl).
//
// Operands are read 16 bytes (8 halves) at a time through vec4<u32> views
// of q, k, v and dO (bindings 15-18; the host guarantees every stride is a
// multiple of 8 halves and D, Dv are multiples of 16, so a run of 8 halves
// never straddles a row or the head dim). A "block" is `rows` rows of one
// operand from row0 (rows at or past `limit` read as zero), columns c0 ..
// c0 + width (a multiple of 8; columns at or past `dim` read as zero),
// staged into kv_sh (vec4 of halves) at element dst0 with rows of `ld`
// halves. Prefetch follows the fetch/put rule of matmul_coop: a fetch only
// issues the global load, the put (after the math in between) converts and
// stores.

@group(0) @binding(15) var<storage, read> q4: array<vec4<u32>>;
@group(0) @binding(16) var<storage, read> k4: array<vec4<u32>>;
@group(0) @binding(17) var<storage, read> v4: array<vec4<u32>>;
@group(0) @binding(18) var<storage, read> do4: array<vec4<u32>>;

// Orders a subgroup's accesses to its own rows of the scratch (s_sh, p_sh)
// without waiting for the rest of the workgroup: subgroupBarrier() on NVIDIA
// adapters with the feature (the subgroups the hardware's), else
// workgroupBarrier() (BackwardCoopTiles::spec writes the block; naga gives
// the subgroup barrier subgroup-memory semantics only, so it is used where
// measured and tested: src/ops/attention.rs has the rule).
fn sub_barrier() {
    // @gen sub_barrier
}

const OP_Q: u32 = 0u;
const OP_K: u32 = 1u;
const OP_V: u32 = 2u;
const OP_DO: u32 = 3u;

// The 16 bytes of operand `which` at element `at` (a multiple of 8), zero
// when not `inside`.
fn fetch(which: u32, at: u32, inside: bool) -> vec4<u32> {
    if !inside {
        return vec4<u32>();
    }
    let e = at / 8u;
    switch which {
        case 0u: {
            return q4[e];
        }
        case 1u: {
            return k4[e];
        }
        case 2u: {
            return v4[e];
        }
        default: {
            return do4[e];
        }
    }
}

// Run i (8 halves) of a block `width` columns wide: its global load.
fn run_fetch(
    which: u32, i: u32, width: u32,
    row0: u32, limit: u32, base: u32, stride: u32, c0: u32, dim: u32,
) -> vec4<u32> {
    let per_row = width / 8u;
    let row = row0 + i / per_row;
    let c = c0 + (i % per_row) * 8u;
    return fetch(which, base + row * stride + c, row < limit && c < dim);
}

// Run i of a block `width` columns wide into kv_sh (rows of ld from dst0).
fn run_put(i: u32, width: u32, dst0: u32, ld: u32, x: vec4<u32>) {
    let per_row = width / 8u;
    let dst = dst0 + (i / per_row) * ld + (i % per_row) * 8u;
    let h0 = vec2<f16>(unpack2x16float(x.x));
    let h1 = vec2<f16>(unpack2x16float(x.y));
    let h2 = vec2<f16>(unpack2x16float(x.z));
    let h3 = vec2<f16>(unpack2x16float(x.w));
    kv_sh[dst / 4u] = vec4<f16>(h0, h1);
    kv_sh[dst / 4u + 1u] = vec4<f16>(h2, h3);
}

// A whole block staged by the workgroup (no prefetch): the one-time loads
// of the operand a subgroup keeps in registers.
fn stage_block(
    tid: u32, which: u32, rows: u32, width: u32,
    row0: u32, limit: u32, base: u32, stride: u32, c0: u32, dim: u32, ld: u32,
) {
    for (var i = tid; i < rows * width / 8u; i += THREADS) {
        run_put(i, width, 0u, ld, run_fetch(which, i, width, row0, limit, base, stride, c0, dim));
    }
}
