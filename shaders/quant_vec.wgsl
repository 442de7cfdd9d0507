// quant_vec: the row-blocked quantiser and dequantiser with 16-byte loads
// and stores (shared parts in quant_common.wgsl).
//
// Entry `quantize_vec`: quant.wgsl's `quantize_words` where the input's
//   rows are a multiple of 8 values, each invocation's word read as one or
//   two 16-byte loads (a word's elements then never cross a row's end).
// Entry `dequantize_vec` (blocks along rows, cols % 4 == 0): one
//   invocation per 4 consecutive elements of a row (one word, one scale:
//   blocks are whole words), one 16-byte store; rows by id with GATHER.
// Workgroup: WG x 1 x 1 (override); 2-D grid.
// Bindings: quant_common.wgsl's, 1 x (16-byte units of the input: f32,
//   or f16 / bf16 pairs per u32 when IN_HALF != 0), 6 out (vec4 f32).

@group(0) @binding(1) var<storage, read> x: array<vec4<u32>>;
@group(0) @binding(6) var<storage, read_write> out: array<vec4<f32>>;

// The f32 bits of the per_word elements from element i0 (i0 % 8 == 0 for
// 4-bit formats, i0 % 4 == 0 for 8-bit ones).
fn load_word(i0: u32, per_word: u32) -> array<u32, 8> {
    var b: array<u32, 8>;
    if IN_HALF == 0u {
        let v0 = x[i0 / 4u];
        b[0] = v0.x;
        b[1] = v0.y;
        b[2] = v0.z;
        b[3] = v0.w;
        if per_word == 8u {
            let v1 = x[i0 / 4u + 1u];
            b[4] = v1.x;
            b[5] = v1.y;
            b[6] = v1.z;
            b[7] = v1.w;
        }
        return b;
    }
    let v = x[i0 / 8u];
    var h = v;
    if per_word == 4u && (i0 & 4u) != 0u {
        h = vec4<u32>(v.z, v.w, 0u, 0u);
    }
    for (var k = 0u; k < 4u; k++) {
        b[2u * k] = half_bits(h[k]);
        b[2u * k + 1u] = half_bits(h[k] >> 16u);
    }
    return b;
}

@compute @workgroup_size(WG, 1, 1)
fn quantize_vec(ids: Ids) {
    let lid = lane(ids);
    let wg = ids.wg;
    let per_word = 32u / elem_bits();
    let wpb = block_words();
    let bpw = (WG / (4u * wpb)) * 4u;
    let first_block = (wg.y * params.gx + wg.x) * bpw;
    let local_block = lid / wpb;
    let id = first_block + local_block;
    let live = lid < bpw * wpb && id < params.blocks;
    let place = block_place(id);
    let line = line_len();
    let pos = place.y * params.block + (lid % wpb) * per_word;
    var b = array<u32, 8>(0u, 0u, 0u, 0u, 0u, 0u, 0u, 0u);
    if live && pos < line {
        b = load_word(place.x * line + pos, per_word);
    }
    let st = block_stats(lid, word_stats(b), local_block * wpb);
    if live {
        encode_word(b, st, id * wpb + lid % wpb, lid % wpb == 0u, local_block);
    }
    workgroupBarrier();
    store_scales(lid, first_block, min(bpw, params.blocks - min(first_block, params.blocks)));
}

@compute @workgroup_size(WG, 1, 1)
fn dequantize_vec(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    // n: rows * cols / 4 invocations.
    let g = linear_id(wg, lid);
    if g >= params.n {
        return;
    }
    let quads = params.cols / 4u;
    let r = table_row(g / quads);
    if r == 0xffffffffu {
        out[g] = vec4<f32>(codec_bits(0x7fc00000u));
        return;
    }
    let pos = (g % quads) * 4u;
    let j = pos / params.block;
    let t = pos % params.block;
    let id = r * params.nb + j;
    let bits = elem_bits();
    let per_word = 32u / bits;
    let wpb = block_words();
    let word = data[id * wpb + t / per_word] >> (bits * (t % per_word));
    let d = block_decode(id);
    var v: vec4<f32>;
    for (var k = 0u; k < 4u; k++) {
        v[k] = element_value((word >> (bits * k)) & ((1u << bits) - 1u), d);
    }
    out[g] = v;
}
