// quant: block-scaled quantisation and dequantisation (formats in
// src/quant.rs; codecs in quant_codec.wgsl).
//
// Entry `amax`: the largest finite |x| of the whole input as an atomic max
//   of its bits (NVFP4's per-tensor scale), one element per invocation.
// Entry `quantize`: one invocation per group of 4 blocks (so the packed
//   scale and zero-point words have one writer each): a first pass over a
//   block finds amax (min and max for Int4Zp) and whether every value is
//   finite, a second encodes and packs the element codes a word at a time.
//   Blocks down columns (AXIS 1) put adjacent columns on adjacent
//   invocations, so each load is coalesced.
// Entry `quantize_words` (blocks along rows, 4 * words per block <= WG):
//   one invocation per packed word, so a subgroup reads a contiguous run
//   of the row and writes contiguous words; each invocation's statistics
//   meet their block's in workgroup memory, every invocation of a block
//   derives the same scale from them, and one invocation per 4 blocks
//   packs the scale (and zero-point) words.
// Entry `dequantize`: one invocation per output element (row-major).
// Workgroup: WG x 1 x 1 (override); 2-D grid.
// Bindings: 0 params, 1 x (input words: f32, f16 pairs when IN_HALF = 1,
//   bf16 pairs when IN_HALF = 2),
//   2 data, 3 scales, 4 zero points, 5 globals ([amax bits, per-tensor
//   scale bits]), 6 out (f32).

// 0 MXFP8 E4M3, 1 MXFP8 E5M2, 2 MXFP4, 3 NVFP4, 4 int8, 5 int4, 6 int4+zp.
const FORMAT: u32 = 0u;
// Input: 0 f32, 1 f16, 2 bf16 (16-bit inputs two per word).
const IN_HALF: u32 = 0u;
// 1 / 2688 rounded to f32 (src/quant.rs: NVFP4_GLOBAL_FACTOR).
const NVFP4_GLOBAL_FACTOR: f32 = 0x1.861862p-12f;

override WG: u32 = 256u;

struct Params {
    rows: u32,
    cols: u32,
    block: u32,
    // 0 blocks along rows, 1 down columns, 2 down the columns of the
    // input's transpose (quantize only)
    axis: u32,
    // blocks per line
    nb: u32,
    // blocks in all
    blocks: u32,
    // invocations per grid row (2-D grids)
    gx: u32,
    n: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> x: array<u32>;
@group(0) @binding(2) var<storage, read_write> data: array<u32>;
@group(0) @binding(3) var<storage, read_write> scales: array<u32>;
@group(0) @binding(4) var<storage, read_write> zeros: array<u32>;
@group(0) @binding(5) var<storage, read_write> globals: array<atomic<u32>>;

fn elem_bits() -> u32 {
    return select(4u, 8u, FORMAT <= 1u || FORMAT == 4u);
}

fn is_mx() -> bool {
    return FORMAT <= 2u;
}

fn mini() -> Mini {
    if FORMAT == 0u {
        return E4M3;
    }
    if FORMAT == 1u {
        return E5M2;
    }
    return E2M1;
}

// emax of the MX element type.
fn emax() -> i32 {
    return select(select(2, 15, FORMAT == 1u), 8, FORMAT == 0u);
}

// The f32 bits of input element i (row-major).
fn load_bits(i: u32) -> u32 {
    if IN_HALF == 1u {
        let w = x[i / 2u];
        // f16 to f32 is exact (subnormal halves become normal floats).
        return bitcast<u32>(unpack2x16float(select(w & 0xffffu, w >> 16u, (i & 1u) == 1u)).x);
    }
    if IN_HALF == 2u {
        // bf16 is the top half of an f32.
        let w = x[i / 2u];
        return select(w << 16u, w & 0xffff0000u, (i & 1u) == 1u);
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

fn linear_id(wg: vec3<u32>, lid: u32) -> u32 {
    return (wg.y * params.gx + wg.x) * WG + lid;
}

@compute @workgroup_size(WG, 1, 1)
fn amax(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = linear_id(wg, lid);
    if i >= params.n {
        return;
    }
    let b = load_bits(i) & 0x7fffffffu;
    if finite_bits(b) && b != 0u {
        atomicMax(&globals[0], b);
    }
}

// One block's scale code, zero point, and what the elements are divided by:
// `k` (MX: a power of two) or `y` (the rest; 0: every element encodes 0).
struct BlockScale {
    scale: u32,
    zero: u32,
    k: i32,
    y: f32,
}

// What a block's scale depends on: the largest finite magnitude (bits),
// whether every value is finite, and the smallest and largest value (with
// 0: Int4Zp's range).
struct Stats {
    amax_b: u32,
    finite: bool,
    lo: f32,
    hi: f32,
}

fn stats_add(st: ptr<function, Stats>, b: u32) {
    let a = b & 0x7fffffffu;
    if finite_bits(a) {
        (*st).amax_b = max((*st).amax_b, a);
        let v = bitcast<f32>(b);
        (*st).lo = min((*st).lo, v);
        (*st).hi = max((*st).hi, v);
    } else {
        (*st).finite = false;
    }
}

fn stats_merge(a: Stats, b: Stats) -> Stats {
    return Stats(max(a.amax_b, b.amax_b), a.finite && b.finite, min(a.lo, b.lo), max(a.hi, b.hi));
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

fn scale_of(st: Stats) -> BlockScale {
    let amax_b = st.amax_b;
    let finite = st.finite;
    let lo = st.lo;
    let hi = st.hi;
    var r = BlockScale(0u, 0u, 0, 0.0);
    if is_mx() {
        if !finite {
            r.scale = 0xffu;
            return r;
        }
        var e = -127;
        if amax_b != 0u {
            e = clamp(floor_log2_bits(amax_b) - emax(), -127, 127);
        }
        r.scale = u32(e + 127);
        r.k = e;
        return r;
    }
    if FORMAT == 3u {
        if !finite {
            r.scale = 0x7fu;
            return r;
        }
        let g = bitcast<f32>(atomicLoad(&globals[0])) * NVFP4_GLOBAL_FACTOR;
        let denom = 6.0 * g;
        if denom == 0.0 || !finite_bits(bitcast<u32>(denom)) {
            return r;
        }
        r.scale = round_div_mini(amax_b, denom, E4M3);
        r.y = e4m3_value(r.scale) * g;
        return r;
    }
    if !finite {
        r.scale = 0x7e00u;
        return r;
    }
    if FORMAT == 6u {
        let range = hi - lo;
        var s = F16S.max_code;
        if finite_bits(bitcast<u32>(range)) {
            s = round_div_mini(bitcast<u32>(range), 15.0, F16S);
        }
        r.scale = s;
        r.y = f16_value(s);
        if r.y != 0.0 {
            r.zero = round_div_int(bitcast<u32>(lo), r.y, 15u);
        }
        return r;
    }
    let top = select(7.0, 127.0, FORMAT == 4u);
    r.scale = round_div_mini(amax_b, top, F16S);
    r.y = f16_value(r.scale);
    return r;
}

// The element code of input bits b in a block scaled by s.
fn encode(b: u32, s: BlockScale) -> u32 {
    let neg = (b >> 31u) == 1u;
    let mag = b & 0x7fffffffu;
    if is_mx() {
        if s.scale == 0xffu {
            return 0u;
        }
        let sign = select(0u, 1u << (elem_bits() - 1u), neg);
        return sign | round_bits(mag, s.k, mini());
    }
    if s.y == 0.0 {
        return 0u;
    }
    if FORMAT == 3u {
        return select(0u, 8u, neg) | round_div_mini(mag, s.y, E2M1);
    }
    if FORMAT == 6u {
        let m = i32(round_div_int(mag, s.y, 31u));
        return u32(clamp(select(m, -m, neg && mag != 0u) + i32(s.zero), 0, 15));
    }
    let top = select(7u, 127u, FORMAT == 4u);
    let m = i32(round_div_int(mag, s.y, top));
    let mask = (1u << elem_bits()) - 1u;
    return u32(select(m, -m, neg && mag != 0u)) & mask;
}

// Writes the packed scale words (and zero-point word) of blocks 4g..4g+3
// (`sc`, `z`: 0 past the last block), and for NVFP4 (group 0) the
// per-tensor scale.
fn store_group(g: u32, sc: array<u32, 4>, z: array<u32, 4>) {
    if FORMAT >= 4u {
        scales[g * 2u] = sc[0] | (sc[1] << 16u);
        if g * 2u + 1u < arrayLength(&scales) {
            scales[g * 2u + 1u] = sc[2] | (sc[3] << 16u);
        }
    } else {
        scales[g] = sc[0] | (sc[1] << 8u) | (sc[2] << 16u) | (sc[3] << 24u);
    }
    if FORMAT == 6u {
        zeros[g] = z[0] | (z[1] << 8u) | (z[2] << 16u) | (z[3] << 24u);
    }
    if FORMAT == 3u && g == 0u {
        let gs = bitcast<f32>(atomicLoad(&globals[0])) * NVFP4_GLOBAL_FACTOR;
        atomicStore(&globals[1], bitcast<u32>(gs));
    }
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
    let wpb = params.block / per_word;
    var sc = array<u32, 4>(0u, 0u, 0u, 0u);
    var z = array<u32, 4>(0u, 0u, 0u, 0u);
    for (var q = 0u; q < 4u; q++) {
        let id = first + q;
        if id >= params.blocks {
            break;
        }
        var l: u32;
        var j: u32;
        if params.axis == 0u {
            l = id / params.nb;
            j = id % params.nb;
        } else {
            j = id / params.cols;
            l = id % params.cols;
        }
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

// The value of element code q of block `id` (scale and zero point unpacked).
fn element_value(q: u32, id: u32) -> f32 {
    if FORMAT >= 4u {
        let s = f16_value(scales[id / 2u] >> (16u * (id % 2u)));
        if FORMAT == 6u {
            let z = (zeros[id / 4u] >> (8u * (id % 4u))) & 0xffu;
            return f32(i32(q) - i32(z)) * s;
        }
        let shift = 32u - elem_bits();
        return f32(i32(q << shift) >> shift) * s;
    }
    let sc = (scales[id / 4u] >> (8u * (id % 4u))) & 0xffu;
    if FORMAT == 3u {
        let g = bitcast<f32>(atomicLoad(&globals[1]));
        return e2m1_value(q) * (e4m3_value(sc) * g);
    }
    if sc == 0xffu {
        return bitcast<f32>(0x7fc00000u);
    }
    var v: f32;
    if FORMAT == 0u {
        v = e4m3_value(q);
    } else if FORMAT == 1u {
        v = e5m2_value(q);
    } else {
        v = e2m1_value(q);
    }
    return v * e8m0_value(sc);
}

@compute @workgroup_size(WG, 1, 1)
fn dequantize(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = linear_id(wg, lid);
    if i >= params.n {
        return;
    }
    let r = i / params.cols;
    let c = i % params.cols;
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
    let wpb = params.block / per_word;
    let q = (data[id * wpb + t / per_word] >> (bits * (t % per_word))) & ((1u << bits) - 1u);
    out[i] = element_value(q, id);
}

var<workgroup> sh_stats: array<Stats, WG>;
var<workgroup> sh_scale: array<u32, WG>;
var<workgroup> sh_zero: array<u32, WG>;

@compute @workgroup_size(WG, 1, 1)
fn quantize_words(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let bits = elem_bits();
    let per_word = 32u / bits;
    let wpb = params.block / per_word;
    // Whole groups of 4 blocks per workgroup.
    let bpw = (WG / (4u * wpb)) * 4u;
    let group = wg.y * params.gx + wg.x;
    let first_block = group * bpw;
    let local_block = lid / wpb;
    let id = first_block + local_block;
    let live = lid < bpw * wpb && id < params.blocks;
    let l = id / params.nb;
    let j = id % params.nb;
    let t0 = (lid % wpb) * per_word;
    var st = Stats(0u, true, 0.0, 0.0);
    var b: array<u32, 8>;
    for (var f = 0u; f < 8u; f++) {
        b[f] = 0u;
        if live && f < per_word {
            let i = element_index(l, j, t0 + f);
            if i != 0xffffffffu {
                b[f] = load_bits(i);
            }
            stats_add(&st, b[f]);
        }
    }
    sh_stats[lid] = st;
    workgroupBarrier();
    var s = BlockScale(0u, 0u, 0, 0.0);
    if live {
        var all = sh_stats[local_block * wpb];
        for (var w = 1u; w < wpb; w++) {
            all = stats_merge(all, sh_stats[local_block * wpb + w]);
        }
        s = scale_of(all);
        var word = 0u;
        for (var f = 0u; f < per_word; f++) {
            word |= encode(b[f], s) << (bits * f);
        }
        data[id * wpb + lid % wpb] = word;
        if lid % wpb == 0u {
            sh_scale[local_block] = s.scale;
            sh_zero[local_block] = s.zero;
        }
    }
    workgroupBarrier();
    // One invocation per 4 blocks writes their packed scale and zero words.
    let g = first_block / 4u + lid;
    if lid < bpw / 4u && g * 4u < params.blocks {
        var sc = array<u32, 4>(0u, 0u, 0u, 0u);
        var z = array<u32, 4>(0u, 0u, 0u, 0u);
        for (var q = 0u; q < 4u; q++) {
            if g * 4u + q < params.blocks {
                sc[q] = sh_scale[lid * 4u + q];
                z[q] = sh_zero[lid * 4u + q];
            }
        }
        store_group(g, sc, z);
    }
}

