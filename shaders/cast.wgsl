// cast: converts a tensor between f32, f16, bf16, i32 and u32, or copies
// one into a contiguous tensor of the same dtype, bit-exactly
// (half_bits.wgsl; the integer conversions below).
//
// Algorithm: output words in a grid-stride loop (at most CAST_GROUPS
//   workgroups, src/kernels/cast.rs): one element per word for an f32
//   output, two (low half first) for a 16-bit one; a last odd element
//   leaves the word's high half zero. Values travel as bit patterns: no float
//   arithmetic, so nothing is flushed or canonicalised and no shader-f16 is
//   needed. The source may have padded rows (`stride` >= `row`).
// Workgroup: WG x 1 x 1 (override, default 256). Grid: 2-D; invocation
//   (y * groups_x + x) * WG + local starts at that word.
// IN / OUT: 0 f32, 1 f16, 2 bf16, 3 i32, 4 u32. Integers to floats round
//   to nearest even (through f32: one rounding up to 2^24 in magnitude,
//   two beyond for bf16); floats to integers truncate toward zero and
//   saturate, NaN giving 0 (Rust's `as`); i32 <-> u32 keeps the bits.
// Entry `check`: the range test alone over two operands (below).
// Generated blocks (src/kernels/cast.rs), the checked cast of bf16 operands
//   staged to f16 for the tensor cores: `flag_decl`, `flag` (`flag8`) and
//   `flag_end` gather each value's `range_bits` and publish them into the
//   flag buffer the arm pass reads (arm.wgsl), operand slot `params.pad1`.

struct Params {
    elements: u32,
    words: u32,
    row: u32,
    stride: u32,
    groups_x: u32,
    groups_y: u32,
    pad0: u32,
    pad1: u32,
}

const IN: u32 = 0u;
const OUT: u32 = 0u;
override WG: u32 = 256u;

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> src: array<u32>;
@group(0) @binding(2) var<storage, read_write> dst: array<u32>;
// @gen flag_decl

// The stored bits of logical element e.
fn raw(e: u32) -> u32 {
    var s = e;
    if params.stride != params.row {
        s = (e / params.row) * params.stride + e % params.row;
    }
    if IN == 0u || IN >= 3u {
        return src[s];
    }
    return (src[s >> 1u] >> ((s & 1u) * 16u)) & 0xffffu;
}

// i32 (`signed`) or u32 bits to f32 bits, rounded to nearest even in
// integer arithmetic (WGSL leaves f32(i32)'s rounding beyond 2^24 to the
// implementation).
fn int_to_f32_bits(b: u32, signed: bool) -> u32 {
    let neg = signed && (b >> 31u) == 1u;
    // |i32::MIN| = 2^31 fits a u32.
    let mag = select(b, ~b + 1u, neg);
    if mag == 0u {
        return 0u;
    }
    var e = 31u - countLeadingZeros(mag);
    var sig = mag << (23u - min(e, 23u));
    if e > 23u {
        let sh = e - 23u;
        let rem = mag & ((1u << sh) - 1u);
        let half = 1u << (sh - 1u);
        sig = mag >> sh;
        if rem > half || (rem == half && (sig & 1u) == 1u) {
            sig += 1u;
        }
        if sig == (1u << 24u) {
            sig = 1u << 23u;
            e += 1u;
        }
    }
    return (select(0u, 1u, neg) << 31u) | ((e + 127u) << 23u) | (sig & 0x7fffffu);
}

// f32 bits to i32 (`signed`) or u32 bits as Rust's `as`: truncated toward
// zero, saturated, NaN to 0.
fn f32_bits_to_int(x: u32, signed: bool) -> u32 {
    let neg = (x >> 31u) == 1u;
    let ef = (x >> 23u) & 0xffu;
    let man = x & 0x7fffffu;
    if (ef == 0xffu && man != 0u) || ef < 127u {
        // NaN, or |x| < 1 (zeros and subnormals included).
        return 0u;
    }
    let e = ef - 127u;
    if signed && e >= 31u {
        return select(0x7fffffffu, 0x80000000u, neg);
    }
    if !signed && neg {
        return 0u;
    }
    if !signed && e >= 32u {
        return 0xffffffffu;
    }
    let sig = man | 0x800000u;
    var mag = sig >> (23u - min(e, 23u));
    if e > 23u {
        mag = sig << (e - 23u);
    }
    return select(mag, ~mag + 1u, signed && neg);
}

fn convert(b: u32) -> u32 {
    if IN == OUT || (IN >= 3u && OUT >= 3u) {
        return b;
    }
    var x = b;
    if IN == 1u {
        x = f16_to_f32_bits(b);
    } else if IN == 2u {
        x = bf16_to_f32_bits(b);
    } else if IN >= 3u {
        x = int_to_f32_bits(b, IN == 3u);
    }
    if OUT == 1u {
        return f32_bits_to_f16(x);
    }
    if OUT == 2u {
        return f32_bits_to_bf16(x);
    }
    if OUT >= 3u {
        return f32_bits_to_int(x, OUT == 3u);
    }
    return x;
}

@compute @workgroup_size(WG, 1, 1)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    // A grid-stride loop over the words: a grid of a few thousand
    // workgroups, not one per 256 words, so launching costs little next to
    // the copy.
    let threads = params.groups_x * params.groups_y * WG;
    for (var w = (wid.y * params.groups_x + wid.x) * WG + lid; w < params.words; w += threads) {
        if OUT == 0u || OUT >= 3u {
            dst[w] = convert(raw(w));
            continue;
        }
        let e = 2u * w;
        let r0 = raw(e);
        var r1 = 0u;
        if e + 1u < params.elements {
            r1 = raw(e + 1u);
        }
        let word = convert(r0) | (convert(r1) << 16u);
        // @gen flag
        dst[w] = word;
    }
    // @gen flag_end
}

// Entry `main8` (a contiguous source of a multiple of 8 elements): 8
// elements per step, loaded and stored as 16-byte units (one per 8 16-bit
// values, two per 8 32-bit ones), the loads and stores of a copy; `main`'s
// single words held the H200's casts at 1.3-1.7 TB/s (runs 140-145 of
// docs/perf/log-2026-12.md: 26 us for a 16.8 MB bf16 -> f16 cast). Grid
// stride over the units (`params.words` of them); the same conversions and
// generated blocks (`flag8` for the checked cast).
@group(0) @binding(7) var<storage, read> src8: array<vec4<u32>>;
@group(0) @binding(8) var<storage, read_write> dst8: array<vec4<u32>>;

// The bits of unit u's 8 elements (16-bit values in the low half).
fn raw8(u: u32) -> array<u32, 8> {
    if IN == 0u || IN >= 3u {
        let a = src8[2u * u];
        let b = src8[2u * u + 1u];
        return array<u32, 8>(a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w);
    }
    let v = src8[u];
    return array<u32, 8>(
        v.x & 0xffffu, v.x >> 16u, v.y & 0xffffu, v.y >> 16u,
        v.z & 0xffffu, v.z >> 16u, v.w & 0xffffu, v.w >> 16u,
    );
}

@compute @workgroup_size(WG, 1, 1)
fn main8(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let threads = params.groups_x * params.groups_y * WG;
    for (var u = (wid.y * params.groups_x + wid.x) * WG + lid; u < params.words; u += threads) {
        if IN == 2u && OUT == 1u {
            // bf16 to f16 two values at a time (bf16_pair_to_f16).
            let v = src8[u];
            // @gen flag8
            dst8[u] = vec4<u32>(
                bf16_pair_to_f16(v.x), bf16_pair_to_f16(v.y),
                bf16_pair_to_f16(v.z), bf16_pair_to_f16(v.w),
            );
            continue;
        }
        let r = raw8(u);
        var c: array<u32, 8>;
        for (var i = 0u; i < 8u; i++) {
            c[i] = convert(r[i]);
        }
        if OUT == 0u || OUT >= 3u {
            dst8[2u * u] = vec4<u32>(c[0], c[1], c[2], c[3]);
            dst8[2u * u + 1u] = vec4<u32>(c[4], c[5], c[6], c[7]);
        } else {
            dst8[u] = vec4<u32>(
                c[0] | (c[1] << 16u), c[2] | (c[3] << 16u),
                c[4] | (c[5] << 16u), c[6] | (c[7] << 16u),
            );
        }
    }
    // @gen flag_end
}

// The range test of bf16 values staged to f16. A value f16 holds exactly
// converts as it is; one below 2^-17 (bf16's 8 significant bits past f16's
// subnormals; normal data always has a few) moves to a neighbouring
// multiple of 2^-24, at most 2^-14 of its operand's largest magnitude when
// that is at least 2^-10. So the f16 kernels run unless a finite value is
// beyond f16's range or an operand holds an inexact value and nothing of
// 2^-10 or more (arm.wgsl). Bits of 16-bit pattern `b`: 1 beyond f16's
// finite range, 2 not an f16 value (below f16's normals), 4 at least 2^-10
// in magnitude (infinities and NaN included).
fn range_bits(b: u32) -> u32 {
    let mag = b & 0x7fffu;
    // Below f16's normals (2^-14) and nonzero, a value is an f16 value when
    // its lowest set bit, 2^(e - 134 + ctz), is at least 2^-24. Branch-free
    // (`&`, not `&&`): the test runs on every value.
    let e = mag >> 7u;
    let inexact = (mag != 0u) & (mag < 0x3880u) & (e + countTrailingZeros(mag | 0x80u) < 110u);
    return select(0u, 4u, mag >= 0x3a80u)
        | select(0u, 1u, (mag >= 0x4780u) & (mag < 0x7f80u))
        | select(0u, 2u, inexact);
}

// Two bf16 values in one word at once (SWAR): each half with its top bit
// set (`tagged`), less a threshold below 2^15, keeps that bit where the
// value's magnitude reaches the threshold; no borrow crosses the halves.
const HALVES_TOP: u32 = 0x80008000u;

fn tagged(w: u32) -> u32 {
    return (w & 0x7fff7fffu) | HALVES_TOP;
}

fn halves_at_least(t: u32, threshold: u32) -> u32 {
    return (t - threshold * 0x10001u) & HALVES_TOP;
}

// range_bits of both values of word `w`, or-ed: the thresholds on both
// halves at once, the exact test only for a nonzero value below 2^-17
// (rare in real data; only those can be inexact).
fn range_bits2(w: u32) -> u32 {
    let t = tagged(w);
    let over = halves_at_least(t, 0x4780u) & ~halves_at_least(t, 0x7f80u);
    let small = halves_at_least(t, 1u) & ~halves_at_least(t, 0x3700u);
    var r = select(0u, 4u, halves_at_least(t, 0x3a80u) != 0u) | select(0u, 1u, over != 0u);
    if small != 0u {
        r |= range_bits(w & 0xffffu) | range_bits(w >> 16u);
    }
    return r;
}

// Both bf16 values of word `w` as f16, as `convert` gives them: where each
// is zero or an f16 normal (2^-14 to 65280), rebiased in place
// ((magnitude - 0x3800) << 3 moves bf16's exponent and 7 mantissa bits
// into f16's fields), else one at a time.
fn bf16_pair_to_f16(w: u32) -> u32 {
    let t = tagged(w);
    let normal = halves_at_least(t, 0x3880u) & ~halves_at_least(t, 0x4780u);
    let zero = HALVES_TOP & ~halves_at_least(t, 1u);
    if (normal | zero) != HALVES_TOP {
        return convert(w & 0xffffu) | (convert(w >> 16u) << 16u);
    }
    return (((w & 0x7fff7fffu) - (normal >> 15u) * 0x3800u) << 3u) | (w & HALVES_TOP);
}

// Entry `check` (the bf16 matmul's first pass): the range bits of bf16
// operand A (`src4`, `words` 16-byte units of 8 values, `elements` values
// stored) and B (`src24`, `params.pad0` units, `params.pad1` values)
// published as slots 0 and 1; writes nothing else. Lanes past the stored
// values (a 16-byte unit's tail) do not count.
@group(0) @binding(5) var<storage, read> src4: array<vec4<u32>>;
@group(0) @binding(6) var<storage, read> src24: array<vec4<u32>>;

// The range bits of the values of unit `v` (values `first`..) below `count`.
fn range8(v: vec4<u32>, first: u32, count: u32) -> u32 {
    if first + 8u <= count {
        return range_bits2(v.x) | range_bits2(v.y) | range_bits2(v.z) | range_bits2(v.w);
    }
    let w = array<u32, 4>(v.x, v.y, v.z, v.w);
    var r = 0u;
    for (var i = 0u; i < 4u; i++) {
        let at = first + 2u * i;
        if at < count {
            r |= range_bits(w[i] & 0xffffu);
        }
        if at + 1u < count {
            r |= range_bits(w[i] >> 16u);
        }
    }
    return r;
}

@compute @workgroup_size(WG, 1, 1)
fn check(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let threads = params.groups_x * params.groups_y * WG;
    let first = (wid.y * params.groups_x + wid.x) * WG + lid;
    var seen = vec2<u32>(0u, 0u);
    for (var w = first; w < params.words; w += threads) {
        seen.x |= range8(src4[w], 8u * w, params.elements);
    }
    for (var w = first; w < params.pad0; w += threads) {
        seen.y |= range8(src24[w], 8u * w, params.pad1);
    }
    // @gen check_flag
}
