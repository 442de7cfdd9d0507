// quant_gemv_common: what both quantised GEMVs share: the scale and
// zero-point bindings and the dot of one packed word with x (the decoding
// is quant_decode.wgsl's, shared with the tensor-core GEMM).

// 0 MXFP8 E4M3, 1 MXFP8 E5M2, 2 MXFP4, 3 NVFP4, 4 int8, 5 int4, 6 int4+zp.
const FORMAT: u32 = 0u;
// Rows of x (M) an invocation accumulates (a power of two >= M).
const MR: u32 = 1u;

@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> scales: array<u32>;
@group(0) @binding(4) var<storage, read> zeros: array<u32>;
@group(0) @binding(5) var<storage, read> globals: array<u32>;

// The dot of word `w` with the x values from vec4 index `base` (two vec4s
// for 8 elements, one for 4), unscaled; `offset` is subtracted from each
// decoded value (the integer formats' 1024 + bias).
fn word_dot(w: u32, base: u32, offset: f32) -> f32 {
    if four_bit() {
        let xa = x[base];
        let xb = x[base + 1u];
        var s = 0.0;
        for (var i = 0u; i < 4u; i++) {
            let p = pair(w, i) - vec2<f32>(offset);
            s += p.x * xa[i] + p.y * xb[i];
        }
        return s;
    }
    let xa = x[base];
    let p0 = pair(w, 0u) - vec2<f32>(offset);
    let p1 = pair(w, 1u) - vec2<f32>(offset);
    return p0.x * xa.x + p1.x * xa.y + p0.y * xa.z + p1.y * xa.w;
}
