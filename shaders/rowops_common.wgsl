// rowops_common: what every row kernel (reduce, softmax, norm, copy) shares:
// the parameter block, the row/column chunk helpers and the workgroup-memory
// tree reductions.
//
// Layout: a tensor is `rows` rows of `n` contiguous elements (the last axis).
//   A row is walked in chunks of 4 consecutive elements; invocation `tid` of
//   the row's `T` invocations takes chunks tid, tid + T, tid + 2T, ... so
//   neighbouring invocations read neighbouring 16-byte (f32) or 8-byte (f16)
//   pieces: coalesced.
// Workgroup: WG invocations (override) = WG / T rows of T invocations each
//   (T a power of two dividing WG; T == WG is one row per workgroup).
// Grid: 2-D (groups_x, y) so more than 65535 workgroups fit;
//   workgroup g = wid.y * groups_x + wid.x.
// Reductions (`tree_sum`, `tree_max`): each invocation writes its partial to
//   `red[lid]`, then a halving tree within each T-segment (stride s reads
//   red[lid + s]: consecutive words, no bank conflicts), log2(T) barriers.
//   Every call ends with a barrier, so calls may follow each other. All
//   callers reach them in uniform control flow (no early returns).
// VEC (text const): 4 when n % 4 == 0, so a chunk is one vector access
//   (`load_x4`/`store_y4`); 1 otherwise: four bounds-checked scalar accesses.
// Limits: WG <= 1024; rows * n < 2^32 elements.

struct Params {
    // Number of rows.
    rows: u32,
    // Row length in elements.
    n: u32,
    // Workgroups along x of the 2-D grid.
    groups_x: u32,
    // Workgroups per row (reduce pass 1 over long rows), else 1.
    split: u32,
    // Chunks per split segment.
    seg: u32,
    // Op bits: FLAG_* below.
    flags: u32,
    // Norm epsilon.
    eps: f32,
    // Reduce: factor applied to the result (1 / n for mean, else 1).
    scale: f32,
}

// Softmax: write log-softmax.
const FLAG_LOG: u32 = 1u;
// Norm: RMSNorm (no mean subtraction, no bias).
const FLAG_RMS: u32 = 2u;
// Norm: multiply by `weight` (gamma).
const FLAG_WEIGHT: u32 = 4u;
// Norm: add `bias` (beta).
const FLAG_BIAS: u32 = 8u;
// Norm (with FLAG_RMS): L2 normalisation, x / max(||x||, eps).
const FLAG_L2: u32 = 16u;

@group(0) @binding(0) var<uniform> params: Params;

// Invocations per workgroup.
override WG: u32 = 64u;
// Invocations per row (power of two dividing WG).
override T: u32 = 64u;

var<workgroup> red: array<f32, WG>;

var<private> lid: u32;
var<private> wid: vec3<u32>;

fn group_index() -> u32 {
    return wid.y * params.groups_x + wid.x;
}

// Chunks of 4 elements per row (the last one partial when n % 4 != 0).
fn chunk_count() -> u32 {
    return (params.n + 3u) / 4u;
}

// Non-finite constants come from bit patterns: WGSL has no inf/NaN literals,
// and integer tests (below) survive compilers that assume finite math. The
// patterns are vars: a constant expression that is not finite is a
// shader-creation error in WGSL (the browser's compiler rejects it).
fn neg_inf() -> f32 {
    var bits = 0xff800000u;
    return bitcast<f32>(bits);
}

fn pos_inf() -> f32 {
    var bits = 0x7f800000u;
    return bitcast<f32>(bits);
}

fn nan_value() -> f32 {
    var bits = 0x7fc00000u;
    return bitcast<f32>(bits);
}

fn is_nan4(v: vec4<f32>) -> vec4<bool> {
    return (bitcast<vec4<u32>>(v) & vec4<u32>(0x7fffffffu)) > vec4<u32>(0x7f800000u);
}

fn is_nan1(v: f32) -> bool {
    return (bitcast<u32>(v) & 0x7fffffffu) > 0x7f800000u;
}

fn is_pos_inf(v: f32) -> bool {
    return bitcast<u32>(v) == 0x7f800000u;
}

fn is_neg_inf(v: f32) -> bool {
    return bitcast<u32>(v) == 0xff800000u;
}

// Which lanes of chunk `c` are columns of the row.
fn lane_mask(c: u32) -> vec4<bool> {
    return vec4<u32>(c * 4u) + vec4<u32>(0u, 1u, 2u, 3u) < vec4<u32>(params.n);
}

fn hsum(v: vec4<f32>) -> f32 {
    return (v.x + v.y) + (v.z + v.w);
}

fn hmax(v: vec4<f32>) -> f32 {
    return max(max(v.x, v.y), max(v.z, v.w));
}

// Chunk `c` of `row` through the fusion hooks `load_x4` / `load_x`; lanes
// past the row end read `pad`.
fn load_chunk(row: u32, c: u32, pad: f32) -> vec4<f32> {
    if VEC == 4u {
        return load_x4(row, c);
    }
    let col = c * 4u;
    var v = vec4<f32>(pad);
    for (var j = 0u; j < 4u; j++) {
        if col + j < params.n {
            v[j] = load_x(row, col + j);
        }
    }
    return v;
}

fn tree_sum(v: f32) -> f32 {
    red[lid] = v;
    workgroupBarrier();
    let tid = lid % T;
    for (var s = T / 2u; s > 0u; s = s / 2u) {
        if tid < s {
            red[lid] += red[lid + s];
        }
        workgroupBarrier();
    }
    let r = red[lid - tid];
    workgroupBarrier();
    return r;
}

fn tree_max(v: f32) -> f32 {
    red[lid] = v;
    workgroupBarrier();
    let tid = lid % T;
    for (var s = T / 2u; s > 0u; s = s / 2u) {
        if tid < s {
            red[lid] = max(red[lid], red[lid + s]);
        }
        workgroupBarrier();
    }
    let r = red[lid - tid];
    workgroupBarrier();
    return r;
}
