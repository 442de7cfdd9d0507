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
// Entry `gather`: a workgroup takes WG / LPR output rows (an id each) at a
//   time, LPR lanes (a power of two) along each, copying whole words: the
//   id is read and the row's offsets divided out once per row. Words are
//   elements of a 4-byte dtype, or pairs of a 2-byte one with an even row
//   (`inner`, `rows` and `poison` count words then).
// Entry `units`: `gather` on 16-byte units (rows of a multiple of 16
//   bytes; `inner` counts units, `poison` fills all four words).
// Entry `gather_words`: 2-byte elements with an odd row: one output word
//   per loop step, its two elements looked up apart.
// Both are grid-stride loops over at most a few thousand workgroups
//   (src/ops/index.rs).
// Workgroup: WG x 1 x 1 (override); 2-D grid.
// Bindings: 0 params, 1 table (u32 words), 2 ids (u32 words), 3 out.

// iota: 0 u32 / i32 values, 1 f32 values.
const IOTA_F32: u32 = 0u;
override WG: u32 = 256u;

struct Params {
    elements: u32,
    words: u32,
    inner: u32,
    n_ids: u32,
    rows: u32,
    // One element's (or word's) bit pattern for an out-of-range id.
    poison: u32,
    groups_x: u32,
    // `gather`: lanes per row (a power of two, at most WG).
    lpr: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> table: array<u32>;
@group(0) @binding(2) var<storage, read> ids: array<u32>;
@group(0) @binding(3) var<storage, read_write> out: array<u32>;
@group(0) @binding(4) var<storage, read> table4: array<vec4<u32>>;
@group(0) @binding(5) var<storage, read_write> out4: array<vec4<u32>>;

// The bits of output element e (2-byte elements, `gather_words`).
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
    return (table[s >> 1u] >> ((s & 1u) * 16u)) & 0xffffu;
}

// This invocation's walk over the output rows: (first row, rows, row
// step, first step along the row), WG / lpr rows per workgroup at a time.
fn walk(wid: vec3<u32>, groups: vec3<u32>, lid: u32) -> vec4<u32> {
    let per = WG / params.lpr;
    return vec4<u32>(
        (wid.y * params.groups_x + wid.x) * per + lid / params.lpr,
        params.elements / max(params.inner, 1u),
        groups.x * groups.y * per,
        lid % params.lpr,
    );
}

@compute @workgroup_size(WG, 1, 1)
fn gather(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let w = walk(wid, groups, lid);
    for (var r = w.x; r < w.y; r += w.z) {
        let id = ids[r % params.n_ids];
        let sb = (r / params.n_ids * params.rows + id) * params.inner;
        let db = r * params.inner;
        for (var c = w.w; c < params.inner; c += params.lpr) {
            // A branch, not a select: an out-of-range id's row is never read.
            if id < params.rows {
                out[db + c] = table[sb + c];
            } else {
                out[db + c] = params.poison;
            }
        }
    }
}

@compute @workgroup_size(WG, 1, 1)
fn units(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let w = walk(wid, groups, lid);
    for (var r = w.x; r < w.y; r += w.z) {
        let id = ids[r % params.n_ids];
        let sb = (r / params.n_ids * params.rows + id) * params.inner;
        let db = r * params.inner;
        for (var c = w.w; c < params.inner; c += params.lpr) {
            if id < params.rows {
                out4[db + c] = table4[sb + c];
            } else {
                out4[db + c] = vec4<u32>(params.poison);
            }
        }
    }
}

@compute @workgroup_size(WG, 1, 1)
fn gather_words(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let threads = groups.x * groups.y * WG;
    for (var w = (wid.y * params.groups_x + wid.x) * WG + lid; w < params.words; w += threads) {
        let e = 2u * w;
        var hi = 0u;
        if e + 1u < params.elements {
            hi = element(e + 1u);
        }
        out[w] = element(e) | (hi << 16u);
    }
}

@compute @workgroup_size(WG, 1, 1)
fn iota(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let threads = groups.x * groups.y * WG;
    for (var w = (wid.y * params.groups_x + wid.x) * WG + lid; w < params.words; w += threads) {
        // Exact: the host allows f32 values up to 2^24 only.
        out[w] = select(w, bitcast<u32>(f32(w)), IOTA_F32 == 1u);
    }
}
