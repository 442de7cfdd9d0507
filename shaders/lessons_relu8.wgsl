// lessons_relu8: ReLU over FP8 (E4M3) codes, four per 32-bit word: the
// lecture's low-precision lesson at 2 bytes per FLOP (f32: 8, f16 and
// bf16: 4). ReLU on a sign-magnitude code is a mask: a code with its sign
// bit set becomes +0, except the NaN codes (S.1111.111), which stay NaN.
//
// Workgroup: WG invocations (override), one 16-byte word (four u32 words,
// 16 codes) each; a 2-D grid. Whole 16-byte accesses: with one 4-byte
// word per invocation the H200 ran this at about 1950 GB/s, half its
// copy, bound by accesses rather than bytes (run 158). Buffers are
// allocated in multiples of 16 bytes, so the last word may run into the
// padding of both. Why: docs/perf/lessons.md.

struct Params {
    words: u32,      // u32 words of codes
    groups_x: u32,
    pad0: u32,
    pad1: u32,
}

override WG: u32 = 256u;

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> src: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read_write> dst: array<vec4<u32>>;

@compute @workgroup_size(WG, 1, 1)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = (wid.y * params.groups_x + wid.x) * WG + lid;
    if 4u * i >= params.words {
        return;
    }
    let w = src[i];
    // Per byte: the sign bit, and whether the magnitude is the NaN code
    // (magnitude + 1 carries into bit 7 only from 0x7f).
    let sign = w & vec4(0x80808080u);
    let nan = ((w & vec4(0x7f7f7f7fu)) + vec4(0x01010101u)) & vec4(0x80808080u);
    let negative = sign & ~nan;
    // 0xff in every byte whose code is negative and not NaN.
    let clear = (negative >> vec4(7u)) * vec4(0xffu);
    dst[i] = w & ~clear;
}
