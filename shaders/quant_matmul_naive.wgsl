// quant_matmul_naive: y[M, N] = x[M, K] @ W for a quantised weight W, one
// invocation per output element, in f32: the tensor-core quantised GEMM's
// fallback, armed where a block decodes beyond f16's range (rare: one
// dispatch, so that the unarmed plan pays for one empty launch only).
//
// Algorithm: invocation o = row * N + col runs over K, decoding each
//   weight element (quant_decode.wgsl) and multiplying it by x in f32.
// W: [K, N] blocked down columns (COLS = 1; block j of column n at
//   j * N + n) or [N, K] along rows (at n * NB + j).
// Workgroup: 64 x 1 x 1; 2-D grid.
// Output: the fused matmul epilogue, as the kernel it stands in for.
// Params: quant_product_params.wgsl (appended by the registry).
// Bindings: 0 params, 1 x (f16 pairs, or f32 with X_HALF = 0), 2 data,
//   3 out (f32), 5 and 6 the epilogue's bias and residual, 10 scales,
//   11 zero points, 12 globals.

// quant_codec.wgsl's format code.
const FORMAT: u32 = 0u;
const COLS: u32 = 0u;
const X_HALF: u32 = 1u;

@group(0) @binding(1) var<storage, read> x: array<u32>;
@group(0) @binding(2) var<storage, read> data: array<u32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;
@group(0) @binding(10) var<storage, read> scales: array<u32>;
@group(0) @binding(11) var<storage, read> zeros: array<u32>;
@group(0) @binding(12) var<storage, read> globals: array<u32>;

fn x_at(i: u32) -> f32 {
    if X_HALF == 1u {
        return unpack2x16float(x[i / 2u])[i % 2u];
    }
    return bitcast<f32>(x[i]);
}

@compute @workgroup_size(64, 1, 1)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let o = (wg.y * params.gx + wg.x) * 64u + lid;
    if o >= params.m * params.n {
        return;
    }
    let row = o / params.n;
    let col = o % params.n;
    // Elements per word, and per decoded pair's half of the word.
    let per_word = select(4u, 8u, four_bit());
    let half = per_word / 2u;
    var acc = 0.0;
    for (var kk = 0u; kk < params.k; kk++) {
        let j = kk / params.block;
        let t = kk % params.block;
        var id = col * params.nb + j;
        if COLS == 1u {
            id = j * params.n + col;
        }
        let e = t % per_word;
        let code = pair(data[id * (params.block / per_word) + t / per_word], e % half)[e / half];
        var v = code;
        if int_format() {
            v -= int_offset(id);
        }
        acc += x_at(row * params.k + kk) * (v * block_scale(id));
    }
    out[o] = epilogue(acc, 0u, row, col);
}
