// matmul_splitk: the second pass of split-K matmul. When M x N is too small
// to fill the GPU but K is long, the tiled kernel (SPLIT_K = 1) runs each K
// chunk in its own workgroup and writes f32 partial sums; this kernel adds the
// splits of each output element in order and applies the epilogue.
//
// Workgroup: 16 x 16 (x along N: coalesced). Grid: (ceil(N / 16),
// ceil(M / 16), batches). Params: matmul_params.wgsl (splits); epilogue:
// matmul_epilogue.wgsl; both appended by the registry.
// Types: Elem is f32 or f16 (text-specialised); the sum is f32.
// Measurements: docs/perf/matmul.md#gemv.

alias Elem = f32;
// The output's element type (text-specialised when it differs from Elem).
alias Out = Elem;

@group(0) @binding(3) var<storage, read_write> out: array<Out>;
@group(0) @binding(4) var<storage, read> partials: array<f32>;

@compute @workgroup_size(16, 16, 1)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    let c = gid.x;
    let r = gid.y;
    let z = params.batch_base + wid.z;
    let m = params.m;
    let n = params.n;
    if r >= m || c >= n {
        return;
    }
    var s = 0.0;
    for (var i = 0u; i < params.splits; i++) {
        s += partials[((z * params.splits + i) * m + r) * n + c];
    }
    out[(z * m + r) * n + c] = Out(epilogue(s, z, r, c));
}
