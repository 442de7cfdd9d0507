// matmul_coop_quant: the tensor-core matmul's B operand as a quantised
// weight (a QuantTensor blocked along K), decoded into f16 in the put: the
// weight is read packed (0.5-1 byte per element with its scales) and never
// written wider. Inserted through matmul_coop.wgsl's `quant_*` blocks.
//
// Runs: B is staged as B^T ([BN][BK + 8], read column-major: TRANS_B and
//   TRANS_COLMAJOR), so each run is 8 consecutive k of one column n
//   (quant_b_operand.wgsl: one or two packed words inside one block, plus
//   the words holding the block's scale and zero point). The fetch only
//   loads them; the put decodes (two elements per unpack2x16float), scales
//   in f32 (exact), zeroes k from K on, and rounds to f16 (nearest even;
//   f16 subnormals kept).
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

// Run r's 8 values from its fetched words `v`, as f16 at half offset `dst`
// of the B tile.
fn quant_put(dst: u32, r: vec3<u32>, v: vec4<u32>) {
    var run = quant_values(v, r.x / WPB);
    if EDGE_K == 1u && r.y + 8u > params.k {
        run = quant_k_edge(run, r.y, params.k);
    }
    store_halves(dst, vec4<f16>(run.lo), vec4<f16>(run.hi), false);
}
