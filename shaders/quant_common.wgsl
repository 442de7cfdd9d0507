// quant_common: what the quantisation kernels share (quant.wgsl reads the
// input a word at a time, quant_vec.wgsl 16 bytes at a time): the formats'
// constants, the parameter block, the block scale from a block's
// statistics, the element encoder, the packed scale stores and the
// decoding factor of a block.
//
// Bindings: 0 params, 2 data, 3 scales, 4 zero points, 5 globals
// ([amax bits, per-tensor scale bits]), 7 the gathered ids (dequantise
// only); the includer declares 1 (input) and 6 (output).

// quant_codec.wgsl's format code.
const FORMAT: u32 = 0u;
// Input: 0 f32, 1 f16, 2 bf16 (16-bit inputs two per word).
const IN_HALF: u32 = 0u;
// Dequantise rows by id (`Context::gather_quantized`): output row r is the
// table's row `gather_ids[r]` (binding 7; i32 ids read as u32, so negative
// ones are 2^31 or more), and ids past `params.rows` give NaN rows.
const GATHER: u32 = 0u;
// 1 / 2688 rounded to f32 (src/quant.rs: NVFP4_GLOBAL_FACTOR).
const NVFP4_GLOBAL_FACTOR: f32 = 0x1.861862p-12f;

// Timing probe of the per-word quantisers (0 unless set through wgtile's
// dev overrides; results wrong while set): bit 0 encodes every element
// with one shift (no rounding), bit 1 drops the exchange of a block's
// statistics (the barrier after them and the other words' slots).
const PROBE: u32 = 0u;
// MXFP4 elements by seven compares of the exactly scaled value (1; 0:
// round_fast's bit arithmetic, kept for an A/B through wgtile's dev
// overrides). Both give the nearest even code.
const E2M1_COMPARE: u32 = 1u;

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
@group(0) @binding(2) var<storage, read_write> data: array<u32>;
@group(0) @binding(3) var<storage, read_write> scales: array<u32>;
@group(0) @binding(4) var<storage, read_write> zeros: array<u32>;
@group(0) @binding(5) var<storage, read_write> globals: array<atomic<u32>>;
// The dequantise entries' gathered rows (bound to any buffer otherwise).
@group(0) @binding(7) var<storage, read> gather_ids: array<u32>;

// The table row of output row r: r itself, or its id (GATHER); 0xffffffff
// for an id outside the table.
fn table_row(r: u32) -> u32 {
    if GATHER == 0u {
        return r;
    }
    let t = gather_ids[r];
    return select(0xffffffffu, t, t < params.rows);
}

fn elem_bits() -> u32 {
    return select(4u, 8u, FORMAT <= 1u || FORMAT == 4u || f32_scales());
}

fn is_mx() -> bool {
    return FORMAT <= 2u;
}

fn mini() -> Mini {
    if e4m3_codes() {
        return E4M3;
    }
    if e5m2_codes() {
        return E5M2;
    }
    return E2M1;
}

// emax of the MX element type.
fn emax() -> i32 {
    return select(select(2, 15, FORMAT == 1u), 8, FORMAT == 0u);
}

// The line (x) and the block within it (y) of block `id` in the packed
// order: line by line for blocks along rows, block row by block row
// otherwise (axis 2 included: the lines are then the input's rows).
fn block_place(id: u32) -> vec2<u32> {
    if params.axis == 0u {
        return vec2<u32>(id / params.nb, id % params.nb);
    }
    return vec2<u32>(id % params.cols, id / params.cols);
}

// Elements per line of the input (a row of it: blocks along rows, or
// down the columns of its transpose).
fn line_len() -> u32 {
    return select(params.cols, params.rows, params.axis == 2u);
}

// Packed words per block.
fn block_words() -> u32 {
    return params.block / (32u / elem_bits());
}

fn linear_id(wg: vec3<u32>, lid: u32) -> u32 {
    return (wg.y * params.gx + wg.x) * WG + lid;
}

// One block's scale code, zero point, and what the elements are divided by:
// `k` (MX: a power of two) or `y` (the rest; 0: every element encodes 0)
// with `inv`, its `reciprocal`.
struct BlockScale {
    scale: u32,
    zero: u32,
    k: i32,
    y: f32,
    inv: f32,
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

fn scale_of(st: Stats) -> BlockScale {
    let amax_b = st.amax_b;
    let finite = st.finite;
    let lo = st.lo;
    let hi = st.hi;
    var r = BlockScale(0u, 0u, 0, 0.0, 0.0);
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
        r.scale = round_div_mini(amax_b, denom, 0.0, E4M3);
        r.y = e4m3_value(r.scale) * g;
        r.inv = reciprocal(r.y);
        return r;
    }
    if f32_scales() {
        // A NaN scale for a block with NaN or Inf; 0 (every code 0) for
        // an all-zero block.
        if !finite {
            r.scale = 0x7fc00000u;
            return r;
        }
        r.y = bitcast<f32>(amax_b) * select(FP8_E4M3_FACTOR, FP8_E5M2_FACTOR, FORMAT == 8u);
        r.scale = bitcast<u32>(r.y);
        r.inv = reciprocal(r.y);
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
            s = round_div_mini(bitcast<u32>(range), 15.0, 0.0, F16S);
        }
        r.scale = s;
        r.y = f16_value(s);
        r.inv = reciprocal(r.y);
        if r.y != 0.0 {
            r.zero = round_div_int(bitcast<u32>(lo), r.y, r.inv, 15u);
        }
        return r;
    }
    let top = select(7.0, 127.0, FORMAT == 4u);
    r.scale = round_div_mini(amax_b, top, 0.0, F16S);
    r.y = f16_value(r.scale);
    r.inv = reciprocal(r.y);
    return r;
}

// The E2M1 code nearest v >= 0 (ties to even), saturated at 6: the count
// of midpoints it passes (0.25, 1.25, 2.5 and 5 lie between an even code
// and the odd one above: reached only beyond them; 0.75, 1.75 and 3.5 at
// or beyond).
fn e2m1_nearest(v: f32) -> u32 {
    return u32(v > 0.25) + u32(v >= 0.75) + u32(v > 1.25) + u32(v >= 1.75)
        + u32(v > 2.5) + u32(v >= 3.5) + u32(v > 5.0);
}

// The element code of input bits b in a block scaled by s.
fn encode(b: u32, s: BlockScale) -> u32 {
    if (PROBE & 1u) != 0u {
        return (b >> 28u) & ((1u << elem_bits()) - 1u);
    }
    let neg = (b >> 31u) == 1u;
    let mag = b & 0x7fffffffu;
    if is_mx() {
        if s.scale == 0xffu {
            return 0u;
        }
        let sign = select(0u, 1u << (elem_bits() - 1u), neg);
        // 2^-k is a normal f32 for k in -127..126, every scale a finite
        // block gets (k <= 125); a normal input times it is exact, or below
        // 2^-126 and code 0 either way.
        if FORMAT == 2u && E2M1_COMPARE == 1u && s.k >= -127 && s.k <= 126 && (mag >> 23u) != 0u {
            return sign | e2m1_nearest(bitcast<f32>(mag) * bitcast<f32>(u32(127 - s.k) << 23u));
        }
        return sign | round_fast(mag, s.k, mini()).x;
    }
    if s.y == 0.0 {
        return 0u;
    }
    if FORMAT == 3u {
        return select(0u, 8u, neg) | round_div_mini(mag, s.y, s.inv, E2M1);
    }
    if f32_scales() {
        return select(0u, 0x80u, neg) | round_div_mini(mag, s.y, s.inv, mini());
    }
    if FORMAT == 6u {
        let m = i32(round_div_int(mag, s.y, s.inv, 31u));
        return u32(clamp(select(m, -m, neg && mag != 0u) + i32(s.zero), 0, 15));
    }
    let top = select(7u, 127u, FORMAT == 4u);
    let m = i32(round_div_int(mag, s.y, s.inv, top));
    let mask = (1u << elem_bits()) - 1u;
    return u32(select(m, -m, neg && mag != 0u)) & mask;
}

// Writes the packed scale words (and zero-point word) of blocks 4g..4g+3
// (`sc`, `z`: 0 past the last block), and for NVFP4 (group 0) the
// per-tensor scale.
fn store_group(g: u32, sc: array<u32, 4>, z: array<u32, 4>) {
    if f32_scales() {
        for (var q = 0u; q < 4u; q++) {
            if g * 4u + q < arrayLength(&scales) {
                scales[g * 4u + q] = sc[q];
            }
        }
    } else if int_format() {
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


// How block `id` decodes: code values times `factor`, integer codes less
// `zero` first.
struct Decode {
    factor: f32,
    zero: i32,
}

fn block_decode(id: u32) -> Decode {
    if f32_scales() {
        return Decode(bitcast<f32>(scales[id]), 0);
    }
    if int_format() {
        let s = f16_value(scales[id / 2u] >> (16u * (id % 2u)));
        var z = 0;
        if FORMAT == 6u {
            z = i32((zeros[id / 4u] >> (8u * (id % 4u))) & 0xffu);
        }
        return Decode(s, z);
    }
    let sc = (scales[id / 4u] >> (8u * (id % 4u))) & 0xffu;
    if FORMAT == 3u {
        return Decode(e4m3_value(sc) * bitcast<f32>(atomicLoad(&globals[1])), 0);
    }
    // The NaN scale (0xFF) decodes every element to NaN.
    return Decode(e8m0_value(sc), 0);
}

// The value of element code q of a block that decodes as `d`.
fn element_value(q: u32, d: Decode) -> f32 {
    if FORMAT == 6u {
        return f32(i32(q) - d.zero) * d.factor;
    }
    if int_format() {
        let shift = 32u - elem_bits();
        return f32(i32(q << shift) >> shift) * d.factor;
    }
    var v: f32;
    if e4m3_codes() {
        v = e4m3_value(q);
    } else if e5m2_codes() {
        v = e5m2_value(q);
    } else {
        v = e2m1_value(q);
    }
    return v * d.factor;
}

// The f32 bits of the 16-bit input (IN_HALF 1 f16, 2 bf16) in the low half
// of h.
fn half_bits(h: u32) -> u32 {
    if IN_HALF == 1u {
        // f16 to f32 is exact (subnormal halves become normal floats).
        return bitcast<u32>(unpack2x16float(h & 0xffffu).x);
    }
    // bf16 is the top half of an f32.
    return h << 16u;
}

// Workgroup slots of the per-word quantisers: one per invocation for its
// word's statistics (`sh_max` holds the largest |bits|, non-finite
// included, for every format but Int4Zp, which needs `sh_stats`); one per
// local block for its scale and zero point.
var<workgroup> sh_stats: array<Stats, WG>;
var<workgroup> sh_max: array<u32, WG>;
var<workgroup> sh_scale: array<u32, WG>;
var<workgroup> sh_zero: array<u32, WG>;

// Adds one element's f32 bits to st: Int4Zp needs every statistic; the
// other formats only the largest |bits| in amax_b, non-finite ones
// included (`stats_done` derives `finite` from it).
fn stats_take(st: ptr<function, Stats>, b: u32) {
    if FORMAT == 6u {
        stats_add(st, b);
    } else {
        (*st).amax_b = max((*st).amax_b, b & 0x7fffffffu);
    }
}

// A block's statistics once every element is taken: for the formats that
// keep only amax_b, finite where the largest |bits| is.
fn stats_done(st: Stats) -> Stats {
    if FORMAT == 6u {
        return st;
    }
    return Stats(st.amax_b, finite_bits(st.amax_b), 0.0, 0.0);
}

// The statistics of one word's elements (f32 bits b, the first per_word;
// 0 past a line's end), before `stats_done`.
fn word_stats(b: array<u32, 8>) -> Stats {
    let per_word = 32u / elem_bits();
    var st = Stats(0u, true, 0.0, 0.0);
    for (var f = 0u; f < per_word; f++) {
        stats_take(&st, b[f]);
    }
    return st;
}

// A word's statistics into workgroup slot `slot`, for slot_stats after a
// barrier (`stats_barrier`).
fn put_stats(slot: u32, st: Stats) {
    if FORMAT == 6u {
        sh_stats[slot] = st;
    } else {
        sh_max[slot] = st.amax_b;
    }
}

// The barrier between put_stats and slot_stats (dropped by the probe).
fn stats_barrier() {
    if (PROBE & 2u) == 0u {
        workgroupBarrier();
    }
}

// The merged statistics of a block whose words' slots are
// slot0 + w * stride (w < words per block).
fn slot_stats(slot0: u32, stride: u32) -> Stats {
    // The probe reads the first word's slot alone.
    let words = select(block_words(), 1u, (PROBE & 2u) != 0u);
    if FORMAT == 6u {
        var st = sh_stats[slot0];
        for (var w = 1u; w < words; w++) {
            st = stats_merge(st, sh_stats[slot0 + w * stride]);
        }
        return st;
    }
    var m = sh_max[slot0];
    for (var w = 1u; w < words; w++) {
        m = max(m, sh_max[slot0 + w * stride]);
    }
    return stats_done(Stats(m, true, 0.0, 0.0));
}

// The codes of a word whose elements' f32 bits are b, in a block of
// statistics st, stored at data[word]; the block's first word (w0) leaves
// its scale in slot `local` of sh_scale / sh_zero.
fn encode_word(b: array<u32, 8>, st: Stats, word: u32, w0: bool, local: u32) {
    let bits = elem_bits();
    let per_word = 32u / bits;
    let s = scale_of(st);
    var code = 0u;
    for (var f = 0u; f < per_word; f++) {
        code |= encode(b[f], s) << (bits * f);
    }
    data[word] = code;
    if w0 {
        sh_scale[local] = s.scale;
        sh_zero[local] = s.zero;
    }
}

// After a barrier: invocation `lid` packs the scale (and zero-point) words
// of local blocks 4 lid .. 4 lid + 3, which are blocks first + 4 lid ..,
// of which `count` from `first` exist (first a multiple of 4).
fn store_scales(lid: u32, first: u32, count: u32) {
    if lid * 4u >= count {
        return;
    }
    var sc = array<u32, 4>(0u, 0u, 0u, 0u);
    var z = array<u32, 4>(0u, 0u, 0u, 0u);
    for (var q = 0u; q < 4u; q++) {
        if lid * 4u + q < count {
            sc[q] = sh_scale[lid * 4u + q];
            z[q] = sh_zero[lid * 4u + q];
        }
    }
    store_group(first / 4u + lid, sc, z);
}
