// quant_decode: a packed word's elements two at a time straight into f16
// bit patterns, and each block's scale times the factor that undoes the
// placement (shared by the quantised GEMVs and the tensor-core GEMM).
//
// The includer declares `FORMAT` (quant_codec.wgsl's code) and the
// `scales`, `zeros` and `globals` bindings.
// Placement: an E2M1 nibble or an E4M3 byte is moved into an f16's
//   exponent and mantissa fields as they stand, so the f16 reads the code's
//   value times 2^-14 or 2^-8 (the bias difference), which the block scale
//   multiplies back; E5M2 is the top byte of an f16 (factor 1); FP8 with
//   f32 scales decodes as MXFP8 does, its scale in place of 2^e. An integer
//   code lands as 1024 + code (+ bias 128 or 8) in an f16 whose exponent
//   is 10, subtracted as `int_offset`. One unpack2x16float then widens two
//   elements exactly.
// Specials: E4M3's NaN codes become f16 NaNs; E5M2's infinities and NaNs
//   are f16's own. E2M1 and the integers have none.

fn four_bit() -> bool {
    return FORMAT == 2u || FORMAT == 3u || FORMAT == 5u || FORMAT == 6u;
}

// The word of `scales` holding block `id`'s scale (four E8M0 / E4M3
// bytes, two f16 halves or one f32 per word).
fn scale_word(id: u32) -> u32 {
    if f32_scales() {
        return scales[id];
    }
    if int_format() {
        return scales[id / 2u];
    }
    return scales[id / 4u];
}

// Block `id`'s scale from its word, times the decoding factor.
fn scale_from(word: u32, id: u32) -> f32 {
    if f32_scales() {
        // 2^8 undoes the f16 placement of E4M3.
        return bitcast<f32>(word) * select(1.0, 256.0, FORMAT == 7u);
    }
    if int_format() {
        return f16_value(word >> (16u * (id % 2u)));
    }
    let sc = (word >> (8u * (id % 4u))) & 0xffu;
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

fn block_scale(id: u32) -> f32 {
    return scale_from(scale_word(id), id);
}

// The offset subtracted from each decoded integer (1024 + bias, or + z,
// from `zword`, the word of `zeros` holding block `id`'s zero point).
fn offset_from(zword: u32, id: u32) -> f32 {
    if FORMAT == 4u {
        return 1152.0;
    }
    if FORMAT == 5u {
        return 1032.0;
    }
    let z = (zword >> (8u * (id % 4u))) & 0xffu;
    return 1024.0 + f32(z);
}

fn int_offset(id: u32) -> f32 {
    if FORMAT == 6u {
        return offset_from(zeros[id / 4u], id);
    }
    return offset_from(0u, id);
}

// Pair i of word w as two f32 values (before the scale).
fn pair(w: u32, i: u32) -> vec2<f32> {
    var bits: u32;
    if FORMAT == 2u || FORMAT == 3u {
        // E2M1 nibbles (i, i + 4) at bit offsets 4i and 4i + 16.
        let v = w >> (4u * i);
        bits = ((v & 0x00070007u) << 9u) | ((v & 0x00080008u) << 12u);
    } else if e4m3_codes() {
        // E4M3 bytes (i, i + 2). The NaN code S.1111.111 would place as
        // 1.875 (480 after the scale): its magnitude + 1 carries into bit 7
        // (no other magnitude's does), which placed with the magnitude sets
        // the f16's top exponent bit: 0x7f -> 0x7f80, a NaN. Three integer
        // operations per pair; the first form (five, the carry shifted down
        // and multiplied by 0x7c00) cost the H200's E4M3 GEMV 17% (run 159).
        let v = w >> (8u * i);
        let mag = v & 0x007f007fu;
        let carry = (mag + 0x00010001u) & 0x00800080u;
        bits = ((mag | carry) << 7u) | ((v & 0x00800080u) << 8u);
    } else if e5m2_codes() {
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
