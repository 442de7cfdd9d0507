// half_bits: 16-bit float patterns to and from f32 bit patterns, in integer
// arithmetic (exact, NaN payloads kept, no shader-f16 needed, no flushing of
// subnormals). Narrowing rounds to nearest even from the exact f32 value;
// overflow rounds to infinity; NaN stays NaN with its quiet bit set.
// src/dtype.rs's host conversions (the `half` crate) agree bit for bit.

// f32 bits of the bf16 pattern b (exact: bf16 is the top half of an f32).
fn bf16_to_f32_bits(b: u32) -> u32 {
    return (b & 0xffffu) << 16u;
}

// The bf16 pattern nearest to the f32 with bits x.
fn f32_bits_to_bf16(x: u32) -> u32 {
    if (x & 0x7fffffffu) > 0x7f800000u {
        return (x >> 16u) | 0x40u;
    }
    return (x + 0x7fffu + ((x >> 16u) & 1u)) >> 16u;
}

// f32 bits of the f16 pattern h (exact).
fn f16_to_f32_bits(h: u32) -> u32 {
    let sign = (h & 0x8000u) << 16u;
    let e = (h >> 10u) & 0x1fu;
    let m = h & 0x3ffu;
    if e == 0x1fu {
        return sign | 0x7f800000u | (m << 13u);
    }
    if e == 0u {
        if m == 0u {
            return sign;
        }
        // m * 2^-24: shift the leading one to the implicit position.
        let lead = firstLeadingBit(m);
        return sign | ((lead + 103u) << 23u) | ((m << (23u - lead)) & 0x7fffffu);
    }
    return sign | ((e + 112u) << 23u) | (m << 13u);
}

// The f16 pattern nearest to the f32 with bits x.
fn f32_bits_to_f16(x: u32) -> u32 {
    let sign = (x >> 16u) & 0x8000u;
    let a = x & 0x7fffffffu;
    if a > 0x7f800000u {
        return sign | 0x7e00u | ((a >> 13u) & 0x3ffu);
    }
    // 65520 and above round to infinity.
    if a >= 0x477ff000u {
        return sign | 0x7c00u;
    }
    if a >= 0x38800000u {
        // Normal f16: rebias the exponent, round 13 bits off.
        let r = a - 0x38000000u;
        return sign | ((r + 0xfffu + ((r >> 13u) & 1u)) >> 13u);
    }
    // At most 2^-25 (a tie at 2^-25) rounds to zero.
    if a <= 0x33000000u {
        return sign;
    }
    // Subnormal f16, in units of 2^-24 (a carry into 0x400 is the smallest normal).
    let m = (a & 0x7fffffu) | 0x800000u;
    let shift = 126u - (a >> 23u);
    let q = m >> shift;
    let rem = m & ((1u << shift) - 1u);
    let half = 1u << (shift - 1u);
    let up = rem > half || (rem == half && (q & 1u) == 1u);
    return sign | (q + u32(up));
}
