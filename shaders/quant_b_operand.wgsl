// quant_b_operand: a matmul's B operand as a quantised weight blocked
// along K, read in runs of 8 consecutive k of one column n (one packed
// word for 4-bit formats, two for 8-bit, inside one block: BLK is a
// multiple of 8). Shared by the tensor-core GEMM (matmul_coop_quant.wgsl)
// and the tiled one (quant_matmul_tiled.wgsl), which differ only in the
// tile a run's values go to.
//
// The includer declares FORMAT, BLK (elements per block), WPB (words per
// block), COLS (1: a [K, N] weight blocked down its columns, block j of
// column n stored at j * N + n; 0: [N, K] blocked along its rows, at
// n * NB + j with NB in params.b_col_stride), ZS (1: `scales` holds one
// word per block, its f16 scale in the low half and its zero point in bits
// 16-23, as quant_scale_check.wgsl pairs them for int4 with zero points),
// the bindings `rhs_w` (codes as u32), `rhs_v2` (the same as vec2<u32>),
// `scales`, `zeros`, `globals`, and `params` (matmul_params.wgsl);
// quant_decode.wgsl decodes.

// The index of the first packed word of the run at column gn, k = gk.
fn quant_word(gn: u32, gk: u32) -> u32 {
    let j = gk / BLK;
    var id = gn * params.b_col_stride + j;
    if COLS == 1u {
        id = j * params.n + gn;
    }
    return id * WPB + (gk % BLK) / select(4u, 8u, four_bit());
}

// The run's raw words (`w` from quant_word): its one or two code words,
// its block's scale word and zero-point word.
fn quant_fetch(w: u32) -> vec4<u32> {
    let id = w / WPB;
    if ZS == 1u {
        // The scale and zero point from one word (each extra load per run
        // costs: below), placed where quant_values reads them.
        let p = scales[id];
        return vec4<u32>(rhs_w[w], 0u, (p & 0xffffu) << (16u * (id % 2u)), (p >> 16u) << (8u * (id % 4u)));
    }
    var v = vec4<u32>(0u, 0u, scale_word(id), 0u);
    if four_bit() {
        v.x = rhs_w[w];
    } else {
        // One 8-byte load, not two of 4 (each extra load per run cost
        // 130-190 us of 650-870 at 4096^3 in the tensor-core GEMM, H200).
        v = vec4<u32>(rhs_v2[w / 2u], v.zw);
    }
    if FORMAT == 6u {
        v.w = zeros[id / 4u];
    }
    return v;
}

// A run's 8 values: elements 0-3 and 4-7.
struct QuantRun {
    lo: vec4<f32>,
    hi: vec4<f32>,
}

// The values of the run fetched as `v` in block `id`: decoded two at a
// time (quant_decode.wgsl), less the integer offset, times the block's
// scale (exact in f32).
fn quant_values(v: vec4<u32>, id: u32) -> QuantRun {
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
    if int_format() {
        let off = vec4<f32>(offset_from(v.w, id));
        lo -= off;
        hi -= off;
    }
    let s = scale_from(v.z, id);
    return QuantRun(lo * s, hi * s);
}

// `run` (starting at k = gk) with its values from k = k_end on zeroed:
// the codes past K in a block's padding may be anything in uploaded data,
// and a NaN there times A's zero padding would leak into the sum.
fn quant_k_edge(run: QuantRun, gk: u32, k_end: u32) -> QuantRun {
    let ks = vec4<u32>(gk) + vec4<u32>(0u, 1u, 2u, 3u);
    return QuantRun(
        select(vec4<f32>(), run.lo, ks < vec4<u32>(k_end)),
        select(vec4<f32>(), run.hi, ks + vec4<u32>(4u) < vec4<u32>(k_end)),
    );
}
