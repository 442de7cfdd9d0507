// quant_codec: the element and scale codecs of the block-scaled formats
// (src/quant.rs is the host mirror; both round to nearest even of the
// exact value and must agree bit for bit).
//
// Scaling by a power of two (MX) rounds straight from the f32 bits
// (`round_fast`). Dividing by any other scale (NVFP4, the integer formats)
// takes the f32 quotient as a candidate and, unless it is clear of both
// neighbouring midpoints by more than the division's error, settles it
// against their exact values (`Ex`: significand x 2^exponent, products kept
// within 32 bits), so WGSL's 2.5-ulp division cannot change a result.
// Subnormal inputs are read as bits, so a device that flushes them in
// arithmetic still encodes them exactly.

// The formats (the includer declares `FORMAT`, src/ops/quant/mod.rs's
// `format_code`): 0 MXFP8 E4M3, 1 MXFP8 E5M2, 2 MXFP4, 3 NVFP4, 4 int8,
// 5 int4, 6 int4 with zero points, 7 FP8 E4M3 and 8 FP8 E5M2 with f32
// block scales.
fn int_format() -> bool {
    return FORMAT >= 4u && FORMAT <= 6u;
}

fn f32_scales() -> bool {
    return FORMAT >= 7u;
}

fn e4m3_codes() -> bool {
    return FORMAT == 0u || FORMAT == 7u;
}

fn e5m2_codes() -> bool {
    return FORMAT == 1u || FORMAT == 8u;
}

// 1 / 448 and 1 / 57344 rounded to f32: FP8's block scale is amax times
// one of them (src/quant.rs: FP8_E4M3_FACTOR, FP8_E5M2_FACTOR).
const FP8_E4M3_FACTOR: f32 = 0x1.24924ap-9f;
const FP8_E5M2_FACTOR: f32 = 0x1.24924ap-16f;

// A sign-magnitude float: mantissa bits, exponent bias, largest finite
// magnitude code.
struct Mini {
    mbits: u32,
    bias: i32,
    max_code: u32,
}

const E4M3 = Mini(3u, 7, 0x7Eu);
const E5M2 = Mini(2u, 15, 0x7Bu);
const E2M1 = Mini(1u, 1, 0x7u);
const F16S = Mini(10u, 15, 0x7BFFu);

// An exact non-negative number sig * 2^e.
struct Ex {
    sig: u32,
    e: i32,
}

fn finite_bits(bits: u32) -> bool {
    return (bits & 0x7f800000u) != 0x7f800000u;
}

// sig / 2^shift rounded to nearest even (shift >= 1).
fn rne_shift(sig: u32, shift: u32) -> u32 {
    if shift > 25u {
        return 0u;
    }
    let q = sig >> shift;
    let rem = sig & ((1u << shift) - 1u);
    let half = 1u << (shift - 1u);
    if rem > half || (rem == half && (q & 1u) == 1u) {
        return q + 1u;
    }
    return q;
}

// The magnitude code of |x| * 2^-k (|x| finite, given by its bits),
// saturated at the largest finite magnitude (x), and 1 in y where
// |x| * 2^-k lies within 2^-20 of its own magnitude from a midpoint
// between two codes: there an f32 quotient's error (3.1 ulp) could have
// decided the rounding. The distance is read from the bits the rounding
// drops (their offset from half a step). The general form, for zero and
// subnormal inputs; `round_fast` takes the rest.
fn round_bits_guarded(bits: u32, k: i32, f: Mini) -> vec2<u32> {
    if bits == 0u {
        return vec2<u32>(0u, 0u);
    }
    let ef = bits >> 23u;
    let m = bits & 0x7fffffu;
    var sig = m | 0x800000u;
    var e = i32(ef) - 127;
    if ef == 0u {
        let lz = countLeadingZeros(m) - 8u;
        sig = m << lz;
        e = -126 - i32(lz);
    }
    e -= k;
    let e_eff = max(e, 1 - f.bias);
    let shift = u32(23 - i32(f.mbits) + (e_eff - e));
    let q = rne_shift(sig, shift);
    let hi = u32(max(e_eff + f.bias - 1, 0));
    // Beyond 25 dropped bits the value is under a quarter step: code 0,
    // far from the first midpoint.
    var near = 0u;
    if shift <= 25u {
        let rem = sig & ((1u << shift) - 1u);
        let half = 1u << (shift - 1u);
        let off = select(half - rem, rem - half, rem >= half);
        near = u32(off <= (sig >> 20u) + 1u);
    }
    return vec2<u32>(min((hi << f.mbits) + q, f.max_code), near);
}

// round_bits_guarded(bits, k, f) in fewer operations (the encoders' inner
// loop): a normal input scaled by 2^-k is exact in f32; a value in the
// target's normal range rounds its dropped significand bits to nearest
// even (a carry into the exponent is the next code), one below it is a
// multiple of the smallest subnormal (`round` is ties-to-even). Its near
// flag (y) is set on a superset of round_bits_guarded's: within 16 units
// of the dropped bits, or 2^-19 of the value, of a midpoint. Zero and
// subnormal inputs take round_bits_guarded. E2M1 takes both roundings and
// selects one (a quarter of a block's range is below its normals: a branch
// would diverge); the 8-bit elements branch, their subnormal codes being
// rare (2^-14 of a block's largest for E4M3).
fn round_fast(bits: u32, k: i32, f: Mini) -> vec2<u32> {
    let ef = i32(bits >> 23u);
    if ef == 0 {
        return round_bits_guarded(bits, k, f);
    }
    // The target's biased exponent of |x| 2^-k.
    let te = ef - 127 - k + f.bias;
    if f.mbits == 1u {
        return select(round_sub(bits, k, f), round_normal(bits, te, f), te >= 1);
    }
    if te >= 1 {
        return round_normal(bits, te, f);
    }
    return round_sub(bits, k, f);
}

// round_fast where |x| 2^-k is a normal of the target (biased exponent te
// >= 1): its dropped significand bits rounded to nearest even.
fn round_normal(bits: u32, te: i32, f: Mini) -> vec2<u32> {
    let m = bits & 0x7fffffu;
    let t = (u32(max(te, 0)) << 23u) | m;
    let s = 23u - f.mbits;
    let code = min((t + (1u << (s - 1u)) - 1u + ((t >> s) & 1u)) >> s, f.max_code);
    let rem = m & ((1u << s) - 1u);
    let half = 1u << (s - 1u);
    return vec2<u32>(code, u32(select(half - rem, rem - half, rem >= half) <= 16u));
}

// round_fast below the target's normals: |x| 2^-k as an f32 (exact when
// normal; below 2^-126 it rounds to 0 either way) in units of the
// smallest subnormal, rounded to nearest even.
fn round_sub(bits: u32, k: i32, f: Mini) -> vec2<u32> {
    let ef = i32(bits >> 23u);
    let v = bitcast<f32>((u32(clamp(ef - k, 0, 254)) << 23u) | (bits & 0x7fffffu));
    let w = v * bitcast<f32>(u32(126 + f.bias + i32(f.mbits)) << 23u);
    return vec2<u32>(u32(round(w)), u32(abs(w - floor(w) - 0.5) <= w * 0x1p-19f));
}

// Margins around a midpoint beyond which an f32 quotient (2.5 ulp, 1.5e-7
// relative) cannot be on the wrong side: 2^-20 relative.
const CLEAR_UP: f32 = 1.00000095367431640625;
const CLEAR_DOWN: f32 = 0.99999904632568359375;

fn ex_f32(bits: u32) -> Ex {
    let b = bits & 0x7fffffffu;
    let ef = b >> 23u;
    let m = b & 0x7fffffu;
    if ef == 0u {
        return Ex(m, -149);
    }
    return Ex(m | 0x800000u, i32(ef) - 150);
}

fn ex_reduced(a: Ex) -> Ex {
    if a.sig == 0u {
        return a;
    }
    let tz = countTrailingZeros(a.sig);
    return Ex(a.sig >> tz, a.e + i32(tz));
}

fn ex_mul(a: Ex, b: Ex) -> Ex {
    let x = ex_reduced(a);
    let y = ex_reduced(b);
    return Ex(x.sig * y.sig, x.e + y.e);
}

// -1, 0 or 1 as a < b, a == b, a > b.
fn ex_cmp(a: Ex, b: Ex) -> i32 {
    if a.sig == 0u || b.sig == 0u {
        return select(select(0, -1, a.sig < b.sig), 1, a.sig > b.sig);
    }
    let la = countLeadingZeros(a.sig);
    let lb = countLeadingZeros(b.sig);
    let ta = 31 - i32(la) + a.e;
    let tb = 31 - i32(lb) + b.e;
    if ta != tb {
        return select(-1, 1, ta > tb);
    }
    let na = a.sig << la;
    let nb = b.sig << lb;
    return select(select(0, -1, na < nb), 1, na > nb);
}

fn mini_exact(code: u32, f: Mini) -> Ex {
    let ef = code >> f.mbits;
    let m = code & ((1u << f.mbits) - 1u);
    if ef == 0u {
        return Ex(m, 1 - f.bias - i32(f.mbits));
    }
    return Ex(m | (1u << f.mbits), i32(ef) - f.bias - i32(f.mbits));
}

// The midpoint of magnitude codes c and c + 1.
fn mini_mid(c: u32, f: Mini) -> Ex {
    let a = mini_exact(c, f);
    let b = mini_exact(c + 1u, f);
    let e = min(a.e, b.e);
    return Ex((a.sig << u32(a.e - e)) + (b.sig << u32(b.e - e)), e - 1);
}

fn goes_down(x: Ex, m: Ex, c: u32) -> bool {
    let o = ex_cmp(x, m);
    return o < 0 || (o == 0 && (c & 1u) == 1u);
}

fn goes_up(x: Ex, m: Ex, c: u32) -> bool {
    let o = ex_cmp(x, m);
    return o > 0 || (o == 0 && (c & 1u) == 1u);
}

// A candidate for |x| / y: |x| * inv where `inv` (1 / y, 2.5 ulp) was taken
// once per block (0 when y is outside [2^-100, 2^100], where the quotient
// is divided). Its error stays below 3.1 ulp, inside the 2^-20 guard band.
fn quotient(xb: u32, y: f32, inv: f32) -> f32 {
    let m = bitcast<f32>(xb & 0x7fffffffu);
    if inv != 0.0 {
        return m * inv;
    }
    return m / y;
}

// `inv` for `quotient`: 1 / y where y is in [2^-100, 2^100], else 0.
fn reciprocal(y: f32) -> f32 {
    if y >= 0x1p-100f && y <= 0x1p100f {
        return 1.0 / y;
    }
    return 0.0;
}

// The magnitude code nearest |x| / y (ties to even), saturated; y > 0
// finite; inv from `reciprocal(y)` or 0.
fn round_div_mini(xb: u32, y: f32, inv: f32, f: Mini) -> u32 {
    let t = quotient(xb, y, inv);
    var c = f.max_code;
    if finite_bits(bitcast<u32>(t)) {
        // Clear of every midpoint by more than the division's error: c is
        // the exact quotient's code, no exact comparison needed.
        let r = round_fast(bitcast<u32>(t) & 0x7fffffffu, 0, f);
        if r.y == 0u {
            return r.x;
        }
        c = r.x;
    }
    let ax = ex_f32(xb);
    let ey = ex_f32(bitcast<u32>(y));
    if c > 0u && goes_down(ax, ex_mul(mini_mid(c - 1u, f), ey), c) {
        c -= 1u;
    } else if c < f.max_code && goes_up(ax, ex_mul(mini_mid(c, f), ey), c) {
        c += 1u;
    }
    return c;
}

// The integer in [0, top] nearest |x| / y (ties to even); y > 0 finite;
// inv from `reciprocal(y)` or 0.
fn round_div_int(xb: u32, y: f32, inv: f32, top: u32) -> u32 {
    let t = quotient(xb, y, inv);
    var c = top;
    if finite_bits(bitcast<u32>(t)) {
        c = u32(min(round(t), f32(top)));
    }
    let lo_clear = c == 0u || t > (f32(c) - 0.5) * CLEAR_UP;
    let hi_clear = c == top || t < (f32(c) + 0.5) * CLEAR_DOWN;
    if lo_clear && hi_clear {
        return c;
    }
    let ax = ex_f32(xb);
    let ey = ex_f32(bitcast<u32>(y));
    if c > 0u && goes_down(ax, ex_mul(Ex(2u * c - 1u, -1), ey), c) {
        c -= 1u;
    } else if c < top && goes_up(ax, ex_mul(Ex(2u * c + 1u, -1), ey), c) {
        c += 1u;
    }
    return c;
}

// floor(log2 |x|) of a finite nonzero f32 given by its bits.
fn floor_log2_bits(bits: u32) -> i32 {
    let b = bits & 0x7fffffffu;
    let e = i32(b >> 23u);
    if e == 0 {
        return i32(firstLeadingBit(b)) - 149;
    }
    return e - 127;
}

// An f32 from its bits, as a runtime value: a constant expression that is
// not finite (the NaN and infinity codes) is a shader-creation error in
// WGSL (the browser's compiler rejects it).
fn codec_bits(bits: u32) -> f32 {
    var b = bits;
    return bitcast<f32>(b);
}

// Magnitudes as f32 without passing through subnormal f32 arithmetic.
fn e4m3_value(code: u32) -> f32 {
    let mag = code & 0x7fu;
    var v: f32;
    if mag == 0x7fu {
        v = codec_bits(0x7fc00000u);
    } else if (mag >> 3u) == 0u {
        v = f32(mag) * 0.001953125;
    } else {
        v = bitcast<f32>((((mag >> 3u) + 120u) << 23u) | ((mag & 7u) << 20u));
    }
    return select(v, -v, (code & 0x80u) != 0u);
}

fn e5m2_value(code: u32) -> f32 {
    let mag = code & 0x7fu;
    var v: f32;
    if mag >= 0x7cu {
        v = select(codec_bits(0x7fc00000u), codec_bits(0x7f800000u), mag == 0x7cu);
    } else if (mag >> 2u) == 0u {
        v = f32(mag) * 0.0000152587890625;
    } else {
        v = bitcast<f32>((((mag >> 2u) + 112u) << 23u) | ((mag & 3u) << 21u));
    }
    return select(v, -v, (code & 0x80u) != 0u);
}

fn e2m1_value(code: u32) -> f32 {
    let mag = code & 7u;
    var v = f32(mag) * 0.5;
    if mag >= 2u {
        v = bitcast<f32>((((mag >> 1u) + 126u) << 23u) | ((mag & 1u) << 22u));
    }
    return select(v, -v, (code & 8u) != 0u);
}

fn f16_value(code: u32) -> f32 {
    return unpack2x16float(code & 0xffffu).x;
}

// 2^(code - 127) for an E8M0 scale; NaN for 0xFF.
fn e8m0_value(code: u32) -> f32 {
    if code == 0xffu {
        return codec_bits(0x7fc00000u);
    }
    if code == 0u {
        return bitcast<f32>(0x00400000u);
    }
    return bitcast<f32>(code << 23u);
}
