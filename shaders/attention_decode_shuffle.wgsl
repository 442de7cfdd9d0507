// attention_decode_shuffle: the entry point of attention_decode.wgsl with
// subgroup shuffles (SHUFFLE = 1). Invocations are numbered subgroup by
// subgroup (subgroup_id * subgroup_size + lane), so the LK invocations of a
// key are consecutive lanes of one subgroup whatever order the driver puts
// invocations into subgroups; the host requires subgroups of at least LK
// lanes (a power of two) that divide the workgroup. No `enable subgroups;`:
// naga gates subgroup operations by the device feature.

@compute @workgroup_size(WG, 1, 1)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
    @builtin(subgroup_id) sg_id: u32,
    @builtin(subgroup_size) sg_size: u32,
    @builtin(subgroup_invocation_id) sg_lane: u32,
) {
    decode(wid, tid, sg_id * sg_size + sg_lane);
}

// The sum of `v` over the LK lanes of this invocation's key (lanes p ^ o),
// in every one of them.
fn key_sum(v: vec4<f32>) -> vec4<f32> {
    var x = v;
    for (var o = 1u; o < LK; o <<= 1u) {
        x += subgroupShuffleXor(x, o);
    }
    return x;
}
