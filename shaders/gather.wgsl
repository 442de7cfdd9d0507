// gather: rows of a table picked by integer ids (embedding lookup,
// index_select, NumPy's take along an axis); entry `iota`: 0, 1, 2, ... as
// i32, u32 or f32.
//
// gather: the table is viewed as [outer, rows, inner] around the gathered
//   axis and the output as [outer, n_ids, inner]; output element
//   e = (o * n_ids + j) * inner + c copies table element
//   (o * rows + id_j) * inner + c. An id outside [0, rows) (a negative i32
//   reads as a u32 of 2^31 or more) writes `poison` (the dtype's NaN, zero
//   for integer tables) instead: never a read outside the table.
// Words: one output word per loop step (one element of a 4-byte dtype, two
//   of a 2-byte one, low first), a grid-stride loop over at most a few
//   thousand workgroups (src/ops/index.rs).
// Workgroup: WG x 1 x 1 (override); 2-D grid.
// Bindings: 0 params, 1 table (u32 words), 2 ids (u32 words), 3 out.

// 1: 2-byte elements.
const HALF: u32 = 0u;
// iota: 0 u32 / i32 values, 1 f32 values.
const IOTA_F32: u32 = 0u;
override WG: u32 = 256u;

struct Params {
    elements: u32,
    words: u32,
    inner: u32,
    n_ids: u32,
    rows: u32,
    // One element's bit pattern for an out-of-range id.
    poison: u32,
    groups_x: u32,
    groups_y: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> table: array<u32>;
@group(0) @binding(2) var<storage, read> ids: array<u32>;
@group(0) @binding(3) var<storage, read_write> out: array<u32>;

// The bits of output element e.
fn element(e: u32) -> u32 {
    let c = e % params.inner;
    let r = e / params.inner;
    let j = r % params.n_ids;
    let o = r / params.n_ids;
    let id = ids[j];
    if id >= params.rows {
        return params.poison;
    }
    let s = (o * params.rows + id) * params.inner + c;
    if HALF == 0u {
        return table[s];
    }
    return (table[s >> 1u] >> ((s & 1u) * 16u)) & 0xffffu;
}

@compute @workgroup_size(WG, 1, 1)
fn gather(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let threads = params.groups_x * params.groups_y * WG;
    for (var w = (wid.y * params.groups_x + wid.x) * WG + lid; w < params.words; w += threads) {
        if HALF == 0u {
            out[w] = element(w);
            continue;
        }
        let e = 2u * w;
        var hi = 0u;
        if e + 1u < params.elements {
            hi = element(e + 1u);
        }
        out[w] = element(e) | (hi << 16u);
    }
}

@compute @workgroup_size(WG, 1, 1)
fn iota(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let threads = params.groups_x * params.groups_y * WG;
    for (var w = (wid.y * params.groups_x + wid.x) * WG + lid; w < params.words; w += threads) {
        // Exact: the host allows f32 values up to 2^24 only.
        out[w] = select(w, bitcast<u32>(f32(w)), IOTA_F32 == 1u);
    }
}
