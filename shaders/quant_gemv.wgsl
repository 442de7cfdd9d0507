// quant_gemv: y[M, N] = x[M, K] @ W^T for a quantised weight W [N, K] with
// blocks along K (QuantAxis::Rows), M <= MR, f32 activations and
// accumulation. The weight is decoded in registers and never stored wider.
//
// Algorithm: a workgroup owns ROWS rows of W, T = WG / ROWS invocations
//   each; invocation t of a row takes its words t, t + T, ...: adjacent
//   invocations read adjacent words of W (one 128-byte line per subgroup
//   load) and adjacent 32-byte runs of x (a chunk per invocation instead
//   scattered x loads 128 bytes apart, 8x the cache transactions: run 133
//   of docs/perf/log-2026-12.md). Each word is decoded two elements at a
//   time straight into f16 bit patterns (unpack2x16float: no table, no
//   branch), dotted with its x values, and scaled by its block's scale;
//   the T partial sums per output are added through workgroup memory.
// Decoding: an E2M1 nibble's 3 magnitude bits placed at f16 bits 9..11
//   (sign at 15) read as 2^-14 times its value (subnormals included); E4M3
//   at bits 7..13 as 2^-8 times; E5M2 is the top byte of an f16; int8 and
//   int4 codes, offset to unsigned, sit in the mantissa of 1024. Those
//   factors fold into the block scale. E4M3's NaN codes decode to NaN
//   (quant_decode.wgsl); a NaN block scale propagates.
// Element pairing: word w holds elements 8w.. (4-bit) or 4w.. (8-bit);
//   pair i of a 4-bit word is nibbles (i, i + 4), of an 8-bit word bytes
//   (i, i + 2), matched with x[.. + i] and x[.. + 4 + i] (or + 2).
// Needs K a multiple of a word's elements (8 at 4 bits, 4 at 8); the host
//   falls back to dequantise + matmul otherwise.
// Workgroup: WG x 1 x 1 (override); grid of ceil(N / ROWS) workgroups (2-D).
// Output: the fused matmul epilogue (bias, activation, residual) applied
//   to each sum on its way out.
// Bindings: 0 params, 1 x (vec4 f32), 2 data (u32), 3 out, 5 and 6 the
//   epilogue's bias and residual, 10 scales, 11 zero points, 12 globals.

// Weight rows per workgroup.
const ROWS: u32 = 8u;
// Words per block (block * bits / 32).
const WPB: u32 = 4u;
// Words each invocation loads per step.
const UNROLL: u32 = 4u;

@group(0) @binding(2) var<storage, read> data: array<u32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

override WG: u32 = 256u;
override T: u32 = WG / ROWS;

var<workgroup> red: array<f32, MR * WG>;

@compute @workgroup_size(WG, 1, 1)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let row = (wg.y * params.gx + wg.x) * ROWS + lid / T;
    let tid = lid % T;
    let live = row < params.n;
    var acc: array<f32, MR>;
    for (var m = 0u; m < MR; m++) {
        acc[m] = 0.0;
    }
    // x vec4s per word: 2 (8 elements) or 1 (4 elements).
    let xw = select(1u, 2u, four_bit());
    if live {
        let row_words = params.nb * WPB;
        // UNROLL words per step, all loaded before any is used (more bytes
        // in flight; 9-16% faster with the runtime checks off, run 139).
        for (var w0 = tid; w0 < params.words; w0 += T * UNROLL) {
            var words: array<u32, UNROLL>;
            for (var u = 0u; u < UNROLL; u++) {
                let wi = w0 + u * T;
                words[u] = 0u;
                if wi < params.words {
                    words[u] = data[row * row_words + wi];
                }
            }
            for (var u = 0u; u < UNROLL; u++) {
                let wi = w0 + u * T;
                if wi < params.words {
                    let id = row * params.nb + wi / WPB;
                    let scale = block_scale(id);
                    var offset = 0.0;
                    if int_format() {
                        offset = int_offset(id);
                    }
                    let d = decode_word(words[u], offset);
                    for (var m = 0u; m < MR; m++) {
                        if m < params.m {
                            acc[m] += decoded_dot(d, m * (params.k / 4u) + wi * xw) * scale;
                        }
                    }
                }
            }
        }
    }
    for (var m = 0u; m < MR; m++) {
        red[m * WG + lid] = acc[m];
    }
    workgroupBarrier();
    for (var s = T / 2u; s > 0u; s = s / 2u) {
        if tid < s {
            for (var m = 0u; m < MR; m++) {
                red[m * WG + lid] += red[m * WG + lid + s];
            }
        }
        workgroupBarrier();
    }
    if live && tid == 0u {
        for (var m = 0u; m < MR; m++) {
            if m < params.m {
                out[m * params.n + row] = epilogue(red[m * WG + lid], 0u, m, row);
            }
        }
    }
}
