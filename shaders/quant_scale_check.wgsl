// quant_scale_check: whether a quantised weight holds a block whose
// decoded values can leave f16's range: its scale (with NVFP4's per-tensor
// one) times the format's largest code magnitude beyond 65504, or NaN.
// The tensor-core quantised GEMM stages weights as f16; this pass runs
// first and sets word 2 of `flag`, which arms the f32 fallback
// (src/ops/quant/gemm.rs).
//
// Algorithm: one invocation per block; every flagging invocation stores
//   the same word (no atomics needed). 2-D grid.
// int4 with zero points (FORMAT 6) and PAIR = 1: each invocation also
//   writes its block's f16 scale and zero point into one word of `paired`
//   (scale in the low half, zero point in bits 16-23), which the tiled GEMM
//   reads instead of the two (quant_b_operand.wgsl's ZS). The tensor-core
//   GEMM lost with it (run 169: 890.7 us against 821.3 at 4096^3) and
//   reads both. Otherwise a placeholder is bound there.

// quant_codec.wgsl's format code.
const FORMAT: u32 = 0u;
// 1: write `paired` (int4 with zero points only).
const PAIR: u32 = 0u;

override WG: u32 = 256u;

struct Params {
    blocks: u32,
    // invocations per grid row
    gx: u32,
    pad0: u32,
    pad1: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(3) var<storage, read> scales: array<u32>;
@group(0) @binding(4) var<storage, read> zeros: array<u32>;
@group(0) @binding(5) var<storage, read> globals: array<u32>;
@group(0) @binding(6) var<storage, read_write> flag: array<u32>;
@group(0) @binding(7) var<storage, read_write> paired: array<u32>;

// The largest code magnitude as quant_decode.wgsl places it (before the
// block scale's factor), for block `id`.
fn largest_code(id: u32) -> f32 {
    switch FORMAT {
        case 0u, 7u: {
            // 448 placed 2^-8 low.
            return 1.75;
        }
        case 1u, 8u: {
            return 57344.0;
        }
        case 2u, 3u: {
            // 6 placed 2^-14 low.
            return 6.0 / 16384.0;
        }
        case 4u: {
            return 128.0;
        }
        case 5u: {
            return 8.0;
        }
        default: {
            let z = offset_from(zeros[id / 4u], id) - 1024.0;
            return max(z, 15.0 - z);
        }
    }
}

@compute @workgroup_size(WG, 1, 1)
fn scale_check(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let id = (wg.y * params.gx + wg.x) * WG + lid;
    if id >= params.blocks {
        return;
    }
    if FORMAT == 6u && PAIR == 1u {
        let scale = (scales[id / 2u] >> (16u * (id % 2u))) & 0xffffu;
        let zero = (zeros[id / 4u] >> (8u * (id % 4u))) & 0xffu;
        paired[id] = scale | (zero << 16u);
    }
    let top = abs(block_scale(id)) * largest_code(id);
    if !(top <= 65504.0) {
        flag[2] = 1u;
    }
}
