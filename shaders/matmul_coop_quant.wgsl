// matmul_coop_quant: the tensor-core matmul's B operand as a quantised
// weight (a QuantTensor blocked along K), decoded into f16 in the put: the
// weight is read packed (0.5-1 byte per element with its scales) and never
// written wider. Inserted through matmul_coop.wgsl's `quant_*` blocks.
//
// Runs: B is staged as B^T ([BN][BK + 8], read column-major: TRANS_B and
//   TRANS_COLMAJOR), so each run is 8 consecutive k of one column n: one
//   packed word (4-bit formats) or two (8-bit), inside one block (BLK is a
//   multiple of 8), plus the words holding the block's scale and zero
//   point. The fetch only loads them; the put decodes (quant_decode.wgsl:
//   two elements per unpack2x16float), scales in f32 (exact), zeroes k from
//   K on, and rounds to f16 (nearest even; f16 subnormals kept).
// Range: a decoded value beyond f16's range would not survive the
//   rounding. The host's scale check (quant.wgsl, `scale_check`) flags any
//   block whose largest code times its scale is beyond 65504 or NaN and
//   arms the f32 fallback, which then writes the whole result.
// Generated before this text (src/kernels/codegen/matmul_coop.rs): FORMAT,
//   BLK (elements per block), WPB (words per block) and COLS: 1 for a
//   [K, N] weight blocked down its columns (block j of column n stored at
//   j * N + n), 0 for [N, K] blocked along its rows (at n * NB + j, NB in
//   params.b_col_stride).
// Bindings: 2, 8 and 13 the packed codes, 10 scales, 11 zero points, 12
//   the per-tensor scale (NVFP4).

@group(0) @binding(10) var<storage, read> scales: array<u32>;
@group(0) @binding(11) var<storage, read> zeros: array<u32>;
@group(0) @binding(12) var<storage, read> globals: array<u32>;
// The codes again, two words at a time (8-bit runs start on even words).
@group(0) @binding(13) var<storage, read> rhs_v2: array<vec2<u32>>;

// The index of the first packed word of the run at column gn, k = gk.
fn quant_word(gn: u32, gk: u32) -> u32 {
    let j = gk / BLK;
    var id = gn * params.b_col_stride + j;
    if COLS == 1u {
        id = j * params.n + gn;
    }
    return id * WPB + (gk % BLK) / select(4u, 8u, four_bit());
}

// The run's raw words (r.x from quant_word): its one or two code words,
// its block's scale word and zero-point word.
fn quant_fetch(r: vec3<u32>) -> vec4<u32> {
    let id = r.x / WPB;
    var v = vec4<u32>(0u, 0u, scale_word(id), 0u);
    if four_bit() {
        v.x = rhs_w[r.x];
    } else {
        // One 8-byte load, not two of 4 (each extra load per run cost
        // 130-190 us of 650-870 at 4096^3, H200).
        v = vec4<u32>(rhs_v2[r.x / 2u], v.zw);
    }
    if FORMAT == 6u {
        v.w = zeros[id / 4u];
    }
    return v;
}

// Run r's 8 values from its fetched words `v`, as f16 at half offset `dst`
// of the B tile.
fn quant_put(dst: u32, r: vec3<u32>, v: vec4<u32>) {
    let id = r.x / WPB;
    var lo: vec4<f32>;
    var hi: vec4<f32>;
    if four_bit() {
        // pair(w, i) holds elements i and i + 4.
        let p0 = pair(v.x, 0u);
        let p1 = pair(v.x, 1u);
        let p2 = pair(v.x, 2u);
        let p3 = pair(v.x, 3u);
        lo = vec4<f32>(p0.x, p1.x, p2.x, p3.x);
        hi = vec4<f32>(p0.y, p1.y, p2.y, p3.y);
    } else {
        // pair(w, i) holds bytes i and i + 2 of word w.
        let a0 = pair(v.x, 0u);
        let a1 = pair(v.x, 1u);
        let b0 = pair(v.y, 0u);
        let b1 = pair(v.y, 1u);
        lo = vec4<f32>(a0.x, a1.x, a0.y, a1.y);
        hi = vec4<f32>(b0.x, b1.x, b0.y, b1.y);
    }
    if FORMAT >= 4u {
        let off = vec4<f32>(offset_from(v.w, id));
        lo -= off;
        hi -= off;
    }
    let s = scale_from(v.z, id);
    lo *= s;
    hi *= s;
    if EDGE_K == 1u && r.y + 8u > params.k {
        let ks = vec4<u32>(r.y) + vec4<u32>(0u, 1u, 2u, 3u);
        lo = select(vec4<f32>(), lo, ks < vec4<u32>(params.k));
        hi = select(vec4<f32>(), hi, ks + vec4<u32>(4u) < vec4<u32>(params.k));
    }
    store_halves(dst, vec4<f16>(lo), vec4<f16>(hi), false);
}
