// attention_decode_plain: the entry point of attention_decode.wgsl for
// adapters without subgroup operations (SHUFFLE = 0): invocations numbered
// in index order, partial dots added through workgroup memory.

@compute @workgroup_size(WG, 1, 1)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
) {
    decode(wid, tid, tid);
}

// Never called with SHUFFLE = 0 (the kernel adds the partials in `part`).
fn key_sum(v: vec4<f32>) -> vec4<f32> {
    return v;
}
