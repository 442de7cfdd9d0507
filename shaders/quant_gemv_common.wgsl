// quant_gemv_common: what both quantised GEMVs share: the x, scale and
// zero-point bindings and the dot of one packed word with x (the decoding
// is quant_decode.wgsl's, shared with the tensor-core GEMM; the parameters
// are quant_product_params.wgsl's).

// quant_codec.wgsl's format code.
const FORMAT: u32 = 0u;
// Rows of x (M) an invocation accumulates (a power of two >= M).
const MR: u32 = 1u;

@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(10) var<storage, read> scales: array<u32>;
@group(0) @binding(11) var<storage, read> zeros: array<u32>;
@group(0) @binding(12) var<storage, read> globals: array<u32>;

// A packed word decoded once, minus `offset` (the integer formats' 1024 +
// bias), in x's order: `lo` holds elements 0..3, `hi` 4..7 (four-bit
// formats; zero otherwise). The GEMVs decode each word once and take its
// dot with every row of x: decoding per row made each extra row cost as
// much as the first (17-19 us a row at 4096 x 14336 on the H200, run 158).
struct Decoded {
    lo: vec4<f32>,
    hi: vec4<f32>,
}

fn decode_word(w: u32, offset: f32) -> Decoded {
    let o = vec2<f32>(offset);
    if four_bit() {
        // pair(w, i) is elements (i, i + 4).
        let p0 = pair(w, 0u) - o;
        let p1 = pair(w, 1u) - o;
        let p2 = pair(w, 2u) - o;
        let p3 = pair(w, 3u) - o;
        return Decoded(vec4<f32>(p0.x, p1.x, p2.x, p3.x), vec4<f32>(p0.y, p1.y, p2.y, p3.y));
    }
    // pair(w, i) is elements (i, i + 2).
    let p0 = pair(w, 0u) - o;
    let p1 = pair(w, 1u) - o;
    return Decoded(vec4<f32>(p0.x, p1.x, p0.y, p1.y), vec4<f32>());
}

// The dot of a decoded word with the x values from vec4 index `base` (two
// vec4s for 8 elements, one for 4), unscaled.
fn decoded_dot(d: Decoded, base: u32) -> f32 {
    if four_bit() {
        return dot(d.lo, x[base]) + dot(d.hi, x[base + 1u]);
    }
    return dot(d.lo, x[base]);
}
