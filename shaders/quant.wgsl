// quant: block-scaled quantisation and dequantisation, reading the input
// a word at a time (formats in src/quant.rs; codecs in quant_codec.wgsl;
// shared parts in quant_common.wgsl; 16-byte loads and stores where the
// shape allows in quant_vec.wgsl).
//
// Entry `amax`: the largest finite |x| of the whole input (NVFP4's
//   per-tensor scale): AMAX_PER elements per invocation, a workgroup tree, one
//   atomic max of the bits per workgroup.
// Entry `quantize`: one invocation per group of 4 blocks (so the packed
//   scale and zero-point words have one writer each): a first pass over a
//   block finds its statistics, a second encodes and packs the element
//   codes a word at a time. Any axis and shape.
// Entry `quantize_words` (blocks along rows, or down the columns of the
//   input's transpose, whose blocks are runs of its rows; 4 * words per
//   block <= WG):
//   one invocation per packed word, so a subgroup reads a contiguous run
//   of the row and writes contiguous words; each invocation's statistics
//   meet their block's in workgroup memory, every invocation of a block
//   derives the same scale from them, and one invocation per 4 blocks
//   packs the scale (and zero-point) words.
// Entry `quantize_cols` (blocks down columns, cols % 4 == 0): the same per
//   word, with adjacent columns on adjacent invocations (coalesced loads)
//   and a workgroup of C columns by the words of one block row.
// Entry `quantize_col_blocks` (blocks down columns, cols % 4 == 0): one
//   invocation per block, adjacent columns on adjacent invocations
//   (coalesced loads), two reads of its column (statistics, then codes:
//   the second from the cache), no exchange of statistics; the scale words
//   meet in workgroup memory.
// Entry `dequantize`: one invocation per output element (row-major); with
//   GATHER (quant_common.wgsl) its rows are the ids' rows of the table.
// Entry `dequantize_cols` (blocks down columns): one invocation per 4
//   rows of a column, each store coalesced across adjacent columns.
// Workgroup: WG x 1 x 1 (override); 2-D grid.
// Bindings: quant_common.wgsl's, 1 x (input words: f32, f16 pairs when
//   IN_HALF = 1, bf16 pairs when IN_HALF = 2), 6 out (f32).

@group(0) @binding(1) var<storage, read> x: array<u32>;

// The f32 bits of input element i (row-major).
fn load_bits(i: u32) -> u32 {
    if IN_HALF != 0u {
        return half_bits(x[i / 2u] >> (16u * (i & 1u)));
    }
    return x[i];
}

// The row-major index of element t of block j of line l, or 0xffffffff
// past the line's end.
fn element_index(l: u32, j: u32, t: u32) -> u32 {
    let pos = j * params.block + t;
    if params.axis == 0u {
        if pos >= params.cols {
            return 0xffffffffu;
        }
        return l * params.cols + pos;
    }
    if pos >= params.rows {
        return 0xffffffffu;
    }
    if params.axis == 2u {
        // Columns of the transpose of a row-major [cols, rows] input.
        return l * params.rows + pos;
    }
    return pos * params.cols + l;
}

// Elements per invocation of `amax` (set by the host: src/ops/quant/mod.rs).
const AMAX_PER: u32 = 32u;

@compute @workgroup_size(WG, 1, 1)
fn amax(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    // The host keeps n + WG * AMAX_PER within u32.
    let base = linear_id(wg, 0u) * AMAX_PER;
    var m = 0u;
    for (var k = 0u; k < AMAX_PER; k++) {
        let i = base + k * WG + lid;
        if i < params.n {
            let b = load_bits(i) & 0x7fffffffu;
            if finite_bits(b) {
                m = max(m, b);
            }
        }
    }
    sh_max[lid] = m;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        if lid < s {
            sh_max[lid] = max(sh_max[lid], sh_max[lid + s]);
        }
        workgroupBarrier();
    }
    if lid == 0u && sh_max[0] != 0u {
        atomicMax(&globals[0], sh_max[0]);
    }
}

fn block_scale(l: u32, j: u32) -> BlockScale {
    var st = Stats(0u, true, 0.0, 0.0);
    for (var t = 0u; t < params.block; t++) {
        let i = element_index(l, j, t);
        var b = 0u;
        if i != 0xffffffffu {
            b = load_bits(i);
        }
        stats_add(&st, b);
    }
    return scale_of(st);
}

@compute @workgroup_size(WG, 1, 1)
fn quantize(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let group = linear_id(wg, lid);
    let first = group * 4u;
    if first >= params.blocks {
        return;
    }
    let bits = elem_bits();
    let per_word = 32u / bits;
    let wpb = block_words();
    var sc = array<u32, 4>(0u, 0u, 0u, 0u);
    var z = array<u32, 4>(0u, 0u, 0u, 0u);
    for (var q = 0u; q < 4u; q++) {
        let id = first + q;
        if id >= params.blocks {
            break;
        }
        let place = block_place(id);
        let l = place.x;
        let j = place.y;
        let s = block_scale(l, j);
        for (var w = 0u; w < wpb; w++) {
            var word = 0u;
            for (var f = 0u; f < per_word; f++) {
                let i = element_index(l, j, w * per_word + f);
                var b = 0u;
                if i != 0xffffffffu {
                    b = load_bits(i);
                }
                word |= encode(b, s) << (bits * f);
            }
            data[id * wpb + w] = word;
        }
        sc[q] = s.scale;
        z[q] = s.zero;
    }
    store_group(group, sc, z);
}

@group(0) @binding(6) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(WG, 1, 1)
fn dequantize(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = linear_id(wg, lid);
    if i >= params.n {
        return;
    }
    let r = table_row(i / params.cols);
    let c = i % params.cols;
    if r == 0xffffffffu {
        out[i] = codec_bits(0x7fc00000u);
        return;
    }
    var l = r;
    var pos = c;
    if params.axis == 1u {
        l = c;
        pos = r;
    }
    let j = pos / params.block;
    let t = pos % params.block;
    var id = l * params.nb + j;
    if params.axis == 1u {
        id = j * params.cols + l;
    }
    let bits = elem_bits();
    let per_word = 32u / bits;
    let wpb = block_words();
    let q = (data[id * wpb + t / per_word] >> (bits * (t % per_word))) & ((1u << bits) - 1u);
    out[i] = element_value(q, block_decode(id));
}

@compute @workgroup_size(WG, 1, 1)
fn dequantize_cols(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    // n: ceil(rows / 4) * cols invocations.
    let g = linear_id(wg, lid);
    if g >= params.n {
        return;
    }
    let c = g % params.cols;
    let r0 = (g / params.cols) * 4u;
    let j = r0 / params.block;
    let t = r0 % params.block;
    let id = j * params.cols + c;
    let bits = elem_bits();
    let per_word = 32u / bits;
    let wpb = block_words();
    // Blocks are whole words and words whole quads: one word, one scale.
    let word = data[id * wpb + t / per_word] >> (bits * (t % per_word));
    let d = block_decode(id);
    for (var k = 0u; k < 4u; k++) {
        if r0 + k < params.rows {
            let q = (word >> (bits * k)) & ((1u << bits) - 1u);
            out[(r0 + k) * params.cols + c] = element_value(q, d);
        }
    }
}

@compute @workgroup_size(WG, 1, 1)
fn quantize_words(ids: Ids) {
    let lid = lane(ids);
    let wg = ids.wg;
    let per_word = 32u / elem_bits();
    let wpb = block_words();
    // Whole groups of 4 blocks per workgroup.
    let bpw = (WG / (4u * wpb)) * 4u;
    let first_block = (wg.y * params.gx + wg.x) * bpw;
    let local_block = lid / wpb;
    let id = first_block + local_block;
    let live = lid < bpw * wpb && id < params.blocks;
    let place = block_place(id);
    let l = place.x;
    let j = place.y;
    let t0 = (lid % wpb) * per_word;
    var b: array<u32, 8>;
    for (var f = 0u; f < 8u; f++) {
        b[f] = 0u;
        if live && f < per_word {
            let i = element_index(l, j, t0 + f);
            if i != 0xffffffffu {
                b[f] = load_bits(i);
            }
        }
    }
    let st = block_stats(lid, word_stats(b), local_block * wpb);
    if live {
        encode_word(b, st, id * wpb + lid % wpb, lid % wpb == 0u, local_block);
    }
    workgroupBarrier();
    store_scales(lid, first_block, min(bpw, params.blocks - min(first_block, params.blocks)));
}

@compute @workgroup_size(WG, 1, 1)
fn quantize_cols(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let per_word = 32u / elem_bits();
    let wpb = block_words();
    // C columns (a multiple of 4) by the wpb words of one block row.
    let ncol = (WG / (4u * wpb)) * 4u;
    let c_local = lid % ncol;
    let w = lid / ncol;
    // Grid: x over column groups (params.gx of them), y over block rows.
    let col0 = wg.x * ncol;
    let j = wg.y;
    let l = col0 + c_local;
    let id = j * params.cols + l;
    let live = w < wpb && l < params.cols;
    var b: array<u32, 8>;
    for (var f = 0u; f < 8u; f++) {
        b[f] = 0u;
        let r = j * params.block + w * per_word + f;
        if live && f < per_word && r < params.rows {
            b[f] = load_bits(r * params.cols + l);
        }
    }
    put_stats(lid, word_stats(b));
    stats_barrier();
    if live {
        encode_word(b, slot_stats(c_local, ncol), id * wpb + w, w == 0u, c_local);
    }
    workgroupBarrier();
    store_scales(lid, j * params.cols + col0, min(ncol, params.cols - min(col0, params.cols)));
}

@compute @workgroup_size(WG, 1, 1)
fn quantize_col_blocks(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let bits = elem_bits();
    let per_word = 32u / bits;
    let wpb = block_words();
    // Grid: x over groups of WG columns (params.gx of them), y over block
    // rows. One block per invocation: nothing to exchange but the scales.
    let col0 = wg.x * WG;
    let l = col0 + lid;
    let j = wg.y;
    let id = j * params.cols + l;
    let live = l < params.cols;
    let r0 = j * params.block;
    // Rows past the end read as 0 (a partial last block).
    let rows = min(params.block, params.rows - r0);
    var st = Stats(0u, true, 0.0, 0.0);
    if live {
        for (var r = 0u; r < rows; r++) {
            stats_take(&st, load_bits((r0 + r) * params.cols + l));
        }
    }
    let s = scale_of(stats_done(st));
    if live {
        // The second read of the block's column hits the cache.
        for (var w = 0u; w < wpb; w++) {
            var code = 0u;
            for (var f = 0u; f < per_word; f++) {
                let r = w * per_word + f;
                var b = 0u;
                if r < rows {
                    b = load_bits((r0 + r) * params.cols + l);
                }
                code |= encode(b, s) << (bits * f);
            }
            data[id * wpb + w] = code;
        }
    }
    sh_scale[lid] = s.scale;
    sh_zero[lid] = s.zero;
    workgroupBarrier();
    store_scales(lid, j * params.cols + col0, min(WG, params.cols - min(col0, params.cols)));
}
