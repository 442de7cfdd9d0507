// fill: writes one 32-bit pattern to every word of a buffer.
//
// Algorithm: one invocation per 32-bit word; dtype-agnostic (an f16 value is
//   written as two copies of its bits per word).
// Workgroup: WG x 1 x 1 invocations (override, default 256).
// Grid: 2-D so buffers over 65535 * WG words fit within
//   max_compute_workgroups_per_dimension; word = (y * groups_x + x) * WG + local.
// Used for zeros, constants and NaN poison in tests.
// Entry `random`: uniform values in [-1, 1) from a counter-based integer hash
//   of (seed, word index), identical on every adapter; `pattern` is the seed
//   and `half` = 1 writes two f16 values per word, 2 two bf16 values. For inputs the library
//   generates itself (autotuning), where a host generator and upload would
//   cost more than the kernels being timed.

struct Params {
    words: u32,
    pattern: u32,
    groups_x: u32,
    half: u32,
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

// PCG-style permutation of 32 bits (an output hash, not a stream generator).
fn hash(x: u32) -> u32 {
    let state = x * 747796405u + 2891336453u;
    let word = ((state >> ((state >> 28u) + 4u)) ^ state) * 277803737u;
    return (word >> 22u) ^ word;
}

// 24 random bits to [-1, 1).
fn signed_unit(h: u32) -> f32 {
    return f32(h >> 8u) * (2.0 / 16777216.0) - 1.0;
}

@compute @workgroup_size(WG, 1, 1)
fn random(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let i = (wid.y * params.groups_x + wid.x) * WG + lid;
    if i < params.words {
        let h = hash(i ^ hash(params.pattern));
        if params.half == 1u {
            data[i] = pack2x16float(vec2<f32>(signed_unit(h), signed_unit(hash(h))));
        } else if params.half == 2u {
            // bf16 pairs: 8 random significant bits each (the top of the f32).
            let lo = bitcast<u32>(signed_unit(h)) >> 16u;
            let hi = bitcast<u32>(signed_unit(hash(h))) & 0xffff0000u;
            data[i] = lo | hi;
        } else {
            data[i] = bitcast<u32>(signed_unit(h));
        }
    }
}
