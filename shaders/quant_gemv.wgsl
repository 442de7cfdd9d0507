// quant_gemv: y[M, N] = x[M, K] @ W^T for a quantised weight W [N, K] with
// blocks along K (QuantAxis::Rows), M <= MR, f32 activations and
// accumulation. The weight is decoded in registers and never stored wider.
//
// Algorithm: a workgroup owns ROWS rows of W, T = WG / ROWS invocations
//   each; an invocation walks its row in 16-byte chunks (tid, tid + T, ...:
//   adjacent invocations read adjacent chunks, so a row streams in order),
//   decodes each chunk's four words two elements at a time straight into
//   f16 bit patterns (unpack2x16float: no table, no branch), dots them with
//   the matching x values (two vec4 loads per word, shared by all rows of
//   the workgroup through the cache) and scales each word's partial sum by
//   its block's scale. The T partial sums per output are added through
//   workgroup memory.
// Decoding: an E2M1 nibble's 3 magnitude bits placed at f16 bits 9..11
//   (sign at 15) read as 2^-14 times its value (subnormals included); E4M3
//   at bits 7..13 as 2^-8 times; E5M2 is the top byte of an f16; int8 and
//   int4 codes, offset to unsigned, sit in the mantissa of 1024. Those
//   factors fold into the block scale. NaN element codes are not honoured
//   (the quantiser never writes them; a NaN block scale propagates).
// Element pairing: word w holds elements 8w.. (4-bit) or 4w.. (8-bit);
//   pair i of a 4-bit word is nibbles (i, i + 4), of an 8-bit word bytes
//   (i, i + 2), matched with x[.. + i] and x[.. + 4 + i] (or + 2).
// Needs K a multiple of the chunk (32 elements at 4 bits, 16 at 8) and each
//   row's words a multiple of 4; the host falls back to dequantise + matmul
//   otherwise.
// Workgroup: WG x 1 x 1 (override); grid of ceil(N / ROWS) workgroups (2-D).
// Bindings: 0 params, 1 x (vec4 f32), 2 data (vec4 u32), 3 scales, 4 zero
//   points, 5 globals, 6 out.

const FORMAT: u32 = 0u;
// Rows of x (M) the invocation accumulates (a power of two >= M).
const MR: u32 = 1u;
// Weight rows per workgroup.
const ROWS: u32 = 8u;

struct Params {
    n: u32,
    k: u32,
    m: u32,
    // blocks per weight row
    nb: u32,
    // words per block
    wpb: u32,
    // 16-byte chunks per weight row
    chunks: u32,
    // workgroups per grid row
    gx: u32,
    pad: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> data: array<vec4<u32>>;
@group(0) @binding(3) var<storage, read> scales: array<u32>;
@group(0) @binding(4) var<storage, read> zeros: array<u32>;
@group(0) @binding(5) var<storage, read> globals: array<u32>;
@group(0) @binding(6) var<storage, read_write> out: array<f32>;

override WG: u32 = 256u;
override T: u32 = WG / ROWS;

var<workgroup> red: array<f32, MR * WG>;

fn four_bit() -> bool {
    return FORMAT == 2u || FORMAT == 3u || FORMAT == 5u || FORMAT == 6u;
}

// The scale of block `id`, times the decoding factor.
fn block_scale(id: u32) -> f32 {
    if FORMAT >= 4u {
        return f16_value(scales[id / 2u] >> (16u * (id % 2u)));
    }
    let sc = (scales[id / 4u] >> (8u * (id % 4u))) & 0xffu;
    if FORMAT == 3u {
        // 2^14 undoes the f16 placement of E2M1.
        return e4m3_value(sc) * bitcast<f32>(globals[1]) * 16384.0;
    }
    let s = e8m0_value(sc);
    if FORMAT == 0u {
        return s * 256.0;
    }
    if FORMAT == 2u {
        return s * 16384.0;
    }
    return s;
}

// The offset subtracted from each decoded integer (1024 + bias, or + z).
fn int_offset(id: u32) -> f32 {
    if FORMAT == 4u {
        return 1152.0;
    }
    if FORMAT == 5u {
        return 1032.0;
    }
    let z = (zeros[id / 4u] >> (8u * (id % 4u))) & 0xffu;
    return 1024.0 + f32(z);
}

// Pair i of word w as two f32 values (before the scale).
fn pair(w: u32, i: u32) -> vec2<f32> {
    var bits: u32;
    if FORMAT == 2u || FORMAT == 3u {
        // E2M1 nibbles (i, i + 4) at bit offsets 4i and 4i + 16.
        let v = w >> (4u * i);
        bits = ((v & 0x00070007u) << 9u) | ((v & 0x00080008u) << 12u);
    } else if FORMAT == 0u {
        // E4M3 bytes (i, i + 2).
        let v = w >> (8u * i);
        bits = ((v & 0x007f007fu) << 7u) | ((v & 0x00800080u) << 8u);
    } else if FORMAT == 1u {
        let v = w >> (8u * i);
        bits = (v & 0x00ff00ffu) << 8u;
    } else if FORMAT == 4u {
        let v = (w ^ 0x80808080u) >> (8u * i);
        bits = (v & 0x00ff00ffu) | 0x64006400u;
    } else if FORMAT == 5u {
        let v = (w ^ 0x88888888u) >> (4u * i);
        bits = (v & 0x000f000fu) | 0x64006400u;
    } else {
        let v = w >> (4u * i);
        bits = (v & 0x000f000fu) | 0x64006400u;
    }
    return unpack2x16float(bits);
}

// The dot of word `w` (elements from x chunk offset `xo`, in vec4s) with
// row m of x, unscaled.
fn word_dot(w: u32, xo: u32, m: u32, offset: f32) -> f32 {
    let base = m * (params.k / 4u) + xo;
    var s = 0.0;
    if four_bit() {
        let xa = x[base];
        let xb = x[base + 1u];
        for (var i = 0u; i < 4u; i++) {
            let p = pair(w, i) - vec2<f32>(offset);
            s += p.x * xa[i] + p.y * xb[i];
        }
    } else {
        let xa = x[base];
        let p0 = pair(w, 0u) - vec2<f32>(offset);
        let p1 = pair(w, 1u) - vec2<f32>(offset);
        s = p0.x * xa.x + p1.x * xa.y + p0.y * xa.z + p1.y * xa.w;
    }
    return s;
}

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
        for (var c = tid; c < params.chunks; c += T) {
            let words = data[row * params.chunks + c];
            for (var w = 0u; w < 4u; w++) {
                let word_in_row = c * 4u + w;
                let id = row * params.nb + word_in_row / params.wpb;
                let scale = block_scale(id);
                var offset = 0.0;
                if FORMAT >= 4u {
                    offset = int_offset(id);
                }
                for (var m = 0u; m < MR; m++) {
                    if m < params.m {
                        acc[m] += word_dot(words[w], word_in_row * xw, m, offset) * scale;
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
                out[m * params.n + row] = red[m * WG + lid];
            }
        }
    }
}
