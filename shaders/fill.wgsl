// fill: writes one 32-bit pattern to every word of a buffer.
//
// Algorithm: one invocation per 32-bit word; dtype-agnostic (an f16 value is
//   written as two copies of its bits per word).
// Workgroup: WG x 1 x 1 invocations (override, default 256).
// Grid: 2-D so buffers over 65535 * WG words fit within
//   max_compute_workgroups_per_dimension; word = (y * groups_x + x) * WG + local.
// Used for zeros, constants and NaN poison in tests.

struct Params {
    words: u32,
    pattern: u32,
    groups_x: u32,
    _pad: u32,
}

override WG: u32 = 256u;

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read_write> data: array<u32>;

@compute @workgroup_size(WG, 1, 1)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let i = (wid.y * params.groups_x + wid.x) * WG + lid;
    if i < params.words {
        data[i] = params.pattern;
    }
}
