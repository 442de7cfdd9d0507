// lessons_coalescing: the lecture's memory coalescing, measured on copies
// of a row-major [rows, cols] f32 matrix that move the same bytes in a
// different order.
//
// Entries (one invocation per element, WG per workgroup, 2-D grid):
// - copy_rows: invocation t copies element t: the lanes of a subgroup read
//   and write consecutive addresses, so one burst serves many lanes;
// - copy_columns: invocation t copies element (t % rows, t / rows):
//   consecutive lanes walk down a column, 4 * cols bytes apart, so every
//   lane's access is a burst of its own (the same elements, the same
//   result as copy_rows);
// - transpose_naive: out[c, r] = x[r, c] with invocation t on x's element
//   t: coalesced reads, writes 4 * rows bytes apart (the tiled transpose
//   through workgroup memory is `copy.wgsl`'s, Context::transpose).
// Why: docs/perf/lessons.md.

struct Params {
    rows: u32,
    cols: u32,
    groups_x: u32,
    pad: u32,
}

override WG: u32 = 256u;

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> src: array<f32>;
@group(0) @binding(2) var<storage, read_write> dst: array<f32>;

fn index(wid: vec3<u32>, lid: u32) -> u32 {
    return (wid.y * params.groups_x + wid.x) * WG + lid;
}

@compute @workgroup_size(WG, 1, 1)
fn copy_rows(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let t = index(wid, lid);
    if t < params.rows * params.cols {
        dst[t] = src[t];
    }
}

@compute @workgroup_size(WG, 1, 1)
fn copy_columns(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let t = index(wid, lid);
    if t < params.rows * params.cols {
        let e = (t % params.rows) * params.cols + t / params.rows;
        dst[e] = src[e];
    }
}

@compute @workgroup_size(WG, 1, 1)
fn transpose_naive(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let t = index(wid, lid);
    if t < params.rows * params.cols {
        let r = t / params.cols;
        let c = t % params.cols;
        dst[c * params.rows + r] = src[t];
    }
}
