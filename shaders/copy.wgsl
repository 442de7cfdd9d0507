// copy: a block of one tensor's elements copied into positions of another,
// both given by element strides: permute, transpose, narrow, split and
// concat are this one kernel (src/ops/layout.rs).
//
// Block: rank 4 (leading 1s), seen as `rows` (its first three axes) of
//   `cols` steps along the last. Element i goes from src_base + i . src_strides
//   to dst_base + i . dst_strides.
// Entry `main`: a workgroup takes WG / LPR rows at a time, LPR lanes
//   (a power of two) along each: a row's three-axis index is divided out
//   once per row, not per element, and consecutive lanes touch consecutive
//   elements (coalesced where the last stride is 1 on that side). HALF 0
//   copies 4-byte elements as words; HALF 1 copies 2-byte elements in
//   pairs along the last axis into whole destination words (the host
//   picks it when the last dim is even, its destination stride 1 and
//   every other destination position even).
// Entry `units`: the word copy on 16-byte units (the host divides the
//   block's last axis, strides and offsets by the elements per unit when
//   both last strides are 1 and everything else divides).
// Entry `halves`: the same loop writing each 2-byte element into its half
//   of a destination word with atomicAnd / atomicOr (any layout: there an
//   invocation owns no whole word).
// Entry `tiled`: the block's axis 2 is contiguous in the source and its
//   axis 3 in the destination (a transpose): 32 x 32 tiles through
//   workgroup memory, read along axis 2 and written along axis 3, so both
//   sides are coalesced; the host reorders the block's axes. HALF 1:
//   2-byte elements, written in pairs by 16 lanes of each row (the host
//   checks that every pair is one destination word).
// Workgroup: WG x 1 x 1 (override; `tiled`: 32 x 8); 2-D grid (`tiled`:
//   tiles in x and y, the first two axes in z).
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
    // Steps per row: shape.w, or its pairs for HALF 1.
    cols: u32,
    // Lanes per row (a power of two, at most WG).
    lpr: u32,
    // workgroups per grid row
    groups_x: u32,
    pad0: u32,
    pad1: u32,
    pad2: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> src: array<u32>;
@group(0) @binding(2) var<storage, read_write> dst: array<u32>;
@group(0) @binding(3) var<storage, read_write> dst_atomic: array<atomic<u32>>;
@group(0) @binding(4) var<storage, read> src4: array<vec4<u32>>;
@group(0) @binding(5) var<storage, read_write> dst4: array<vec4<u32>>;

// The three leading axes' index of row r.
fn row_index(r: u32) -> vec4<u32> {
    let z = r % params.shape.z;
    let r2 = r / params.shape.z;
    return vec4<u32>(r2 / params.shape.y, r2 % params.shape.y, z, 0u);
}

fn src_base(r: u32) -> u32 {
    return params.src_base + dot(row_index(r), params.src_strides);
}

fn dst_base(r: u32) -> u32 {
    return params.dst_base + dot(row_index(r), params.dst_strides);
}

// This invocation's walk over the rows: (first row, rows, row step, first
// step along the row), WG / lpr rows per workgroup at a time.
fn walk(wid: vec3<u32>, groups: vec3<u32>, lid: u32) -> vec4<u32> {
    let per = WG / params.lpr;
    return vec4<u32>(
        (wid.y * params.groups_x + wid.x) * per + lid / params.lpr,
        params.shape.x * params.shape.y * params.shape.z,
        groups.x * groups.y * per,
        lid % params.lpr,
    );
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
    let w = walk(wid, groups, lid);
    for (var r = w.x; r < w.y; r += w.z) {
        let sb = src_base(r);
        let db = dst_base(r);
        for (var c = w.w; c < params.cols; c += params.lpr) {
            if HALF == 0u {
                dst[db + c * params.dst_strides.w] = src[sb + c * params.src_strides.w];
                continue;
            }
            let s = sb + 2u * c * params.src_strides.w;
            dst[(db >> 1u) + c] = half_at(s) | (half_at(s + params.src_strides.w) << 16u);
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
        let sb = src_base(r);
        let db = dst_base(r);
        for (var c = w.w; c < params.cols; c += params.lpr) {
            dst4[db + c] = src4[sb + c];
        }
    }
}

@compute @workgroup_size(WG, 1, 1)
fn halves(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let w = walk(wid, groups, lid);
    for (var r = w.x; r < w.y; r += w.z) {
        let sb = src_base(r);
        let db = dst_base(r);
        for (var c = w.w; c < params.cols; c += params.lpr) {
            let d = db + c * params.dst_strides.w;
            let shift = (d & 1u) * 16u;
            let v = half_at(sb + c * params.src_strides.w);
            atomicAnd(&dst_atomic[d >> 1u], ~(0xffffu << shift));
            atomicOr(&dst_atomic[d >> 1u], v << shift);
        }
    }
}

// 32 x 32 words, rows padded by one so a column read hits 32 banks.
var<workgroup> tile: array<u32, 1056>;

@compute @workgroup_size(32, 8, 1)
fn tiled(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_id) lid: vec3<u32>,
) {
    let z0 = wid.y * 32u;
    let w0 = wid.x * 32u;
    let batches = params.shape.x * params.shape.y;
    for (var b = wid.z; b < batches; b += groups.z) {
        let i = vec4<u32>(b / params.shape.y, b % params.shape.y, 0u, 0u);
        let sb = params.src_base + dot(i, params.src_strides);
        let db = params.dst_base + dot(i, params.dst_strides);
        // Read along axis 2 (contiguous in the source).
        for (var k = 0u; k < 32u; k += 8u) {
            let z = z0 + lid.x;
            let w = w0 + lid.y + k;
            if z < params.shape.z && w < params.shape.w {
                let s = sb + z * params.src_strides.z + w * params.src_strides.w;
                if HALF == 1u {
                    tile[(lid.y + k) * 33u + lid.x] = half_at(s);
                } else {
                    tile[(lid.y + k) * 33u + lid.x] = src[s];
                }
            }
        }
        workgroupBarrier();
        // Write along axis 3 (contiguous in the destination).
        for (var k = 0u; k < 32u; k += 8u) {
            if HALF == 1u {
                let w = w0 + 2u * lid.x;
                let z = z0 + lid.y + k;
                if lid.x < 16u && z < params.shape.z && w < params.shape.w {
                    let d = db + z * params.dst_strides.z + w;
                    let lo = tile[2u * lid.x * 33u + lid.y + k];
                    let hi = tile[(2u * lid.x + 1u) * 33u + lid.y + k];
                    dst[d >> 1u] = lo | (hi << 16u);
                }
                continue;
            }
            let w = w0 + lid.x;
            let z = z0 + lid.y + k;
            if z < params.shape.z && w < params.shape.w {
                dst[db + z * params.dst_strides.z + w * params.dst_strides.w] = tile[lid.x * 33u + lid.y + k];
            }
        }
        workgroupBarrier();
    }
}
