// lessons_relu8: ReLU over FP8 (E4M3) codes, four per 32-bit word: the
// lecture's low-precision lesson at 2 bytes per FLOP (f32: 8, f16 and
// bf16: 4). ReLU on a sign-magnitude code is a mask: a code with its sign
// bit set becomes +0, except the NaN codes (S.1111.111), which stay NaN.
//
// Workgroup: WG invocations (override), one word each; a 2-D grid.
// Why: docs/perf/lessons.md.

struct Params {
    words: u32,
    groups_x: u32,
    pad0: u32,
    pad1: u32,
}

override WG: u32 = 256u;

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> src: array<u32>;
@group(0) @binding(2) var<storage, read_write> dst: array<u32>;

@compute @workgroup_size(WG, 1, 1)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = (wid.y * params.groups_x + wid.x) * WG + lid;
    if i >= params.words {
        return;
    }
    let w = src[i];
    // Per byte: the sign bit, and whether the magnitude is the NaN code
    // (magnitude + 1 carries into bit 7 only from 0x7f).
    let sign = w & 0x80808080u;
    let nan = ((w & 0x7f7f7f7fu) + 0x01010101u) & 0x80808080u;
    let negative = sign & ~nan;
    // 0xff in every byte whose code is negative and not NaN.
    let clear = (negative >> 7u) * 0xffu;
    dst[i] = w & ~clear;
}
