// quant_gemv_common: what both quantised GEMVs share: the scale and
// zero-point bindings, and the decoding of a packed word two elements at a
// time straight into f16 bit patterns (see quant_gemv.wgsl's header).

// 0 MXFP8 E4M3, 1 MXFP8 E5M2, 2 MXFP4, 3 NVFP4, 4 int8, 5 int4, 6 int4+zp.
const FORMAT: u32 = 0u;
// Rows of x (M) an invocation accumulates (a power of two >= M).
const MR: u32 = 1u;

@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> scales: array<u32>;
@group(0) @binding(4) var<storage, read> zeros: array<u32>;
@group(0) @binding(5) var<storage, read> globals: array<u32>;

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

// The dot of word `w` with the x values from vec4 index `base` (two vec4s
// for 8 elements, one for 4), unscaled; `offset` is subtracted from each
// decoded value (the integer formats' 1024 + bias).
fn word_dot(w: u32, base: u32, offset: f32) -> f32 {
    if four_bit() {
        let xa = x[base];
        let xb = x[base + 1u];
        var s = 0.0;
        for (var i = 0u; i < 4u; i++) {
            let p = pair(w, i) - vec2<f32>(offset);
            s += p.x * xa[i] + p.y * xb[i];
        }
        return s;
    }
    let xa = x[base];
    let p0 = pair(w, 0u) - vec2<f32>(offset);
    let p1 = pair(w, 1u) - vec2<f32>(offset);
    return p0.x * xa.x + p1.x * xa.y + p0.y * xa.z + p1.y * xa.w;
}
