// copy: a block of one tensor's elements copied into positions of another,
// both given by element strides: permute, transpose, narrow, split and
// concat are this one kernel (src/ops/layout.rs).
//
// Algorithm: a grid-stride loop over the block's elements in row-major
//   order of its shape (rank 4, padded with leading 1s). Element i goes
//   from src_base + i . src_strides to dst_base + i . dst_strides; writes
//   follow the loop, so they are coalesced when the destination's last
//   stride is 1 (the reads are where the source's is).
// Entry `main`: HALF 0 copies 4-byte elements as words. HALF 1 copies
//   2-byte elements in pairs along the last axis into whole destination
//   words (the host picks it when the last dim is even, its destination
//   stride 1 and every other destination position even).
// Entry `halves`: each 2-byte element into its half of a destination word
//   with atomicAnd / atomicOr (any layout: there an invocation owns no
//   whole word).
// Workgroup: WG x 1 x 1 (override); 2-D grid.
// Bindings: 0 params, 1 src (u32 words), 2 dst (u32 words; `halves`: 3,
//   the same buffer as atomics).

const HALF: u32 = 0u;
override WG: u32 = 256u;

struct Params {
    shape: vec4<u32>,
    src_strides: vec4<u32>,
    dst_strides: vec4<u32>,
    src_base: u32,
    dst_base: u32,
    // Loop steps: elements, or pairs for HALF 1.
    steps: u32,
    groups_x: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> src: array<u32>;
@group(0) @binding(2) var<storage, read_write> dst: array<u32>;
@group(0) @binding(3) var<storage, read_write> dst_atomic: array<atomic<u32>>;

// The block index of step e, row-major over `shape` with `last` steps per
// row (shape.w, or its pairs).
fn index_of(e: u32, last: u32) -> vec4<u32> {
    let w = e % last;
    let r = e / last;
    let z = r % params.shape.z;
    let r2 = r / params.shape.z;
    return vec4<u32>(r2 / params.shape.y, r2 % params.shape.y, z, w);
}

fn half_at(s: u32) -> u32 {
    return (src[s >> 1u] >> ((s & 1u) * 16u)) & 0xffffu;
}

@compute @workgroup_size(WG, 1, 1)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let threads = groups.x * groups.y * WG;
    for (var e = (wid.y * params.groups_x + wid.x) * WG + lid; e < params.steps; e += threads) {
        if HALF == 0u {
            let i = index_of(e, params.shape.w);
            dst[params.dst_base + dot(i, params.dst_strides)] = src[params.src_base + dot(i, params.src_strides)];
            continue;
        }
        var i = index_of(e, params.shape.w / 2u);
        i.w *= 2u;
        let s = params.src_base + dot(i, params.src_strides);
        let d = params.dst_base + dot(i, params.dst_strides);
        dst[d >> 1u] = half_at(s) | (half_at(s + params.src_strides.w) << 16u);
    }
}

@compute @workgroup_size(WG, 1, 1)
fn halves(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let threads = groups.x * groups.y * WG;
    for (var e = (wid.y * params.groups_x + wid.x) * WG + lid; e < params.steps; e += threads) {
        let i = index_of(e, params.shape.w);
        let d = params.dst_base + dot(i, params.dst_strides);
        let shift = (d & 1u) * 16u;
        let v = half_at(params.src_base + dot(i, params.src_strides));
        atomicAnd(&dst_atomic[d >> 1u], ~(0xffffu << shift));
        atomicOr(&dst_atomic[d >> 1u], v << shift);
    }
}
