// quant_gemv_cols: y[M, N] = x[M, K] @ W for a quantised weight W [K, N]
// with blocks down the columns (QuantAxis::Columns: block j of column n is
// stored at j * N + n), M <= MR, f32 activations and accumulation.
//
// Algorithm: a workgroup owns COLS = 32 adjacent columns and splits K into
//   S = WG / COLS slices, one per run of 32 invocations: invocation (s, c)
//   takes blocks s, s + S, ... of column c (in units of UNIT words, with
//   SUB invocations of a run on adjacent units of one column: below). The 32 invocations of a run
//   read 32 adjacent columns' blocks, contiguous in memory (one coalesced
//   load of 8 bytes each per step), and the same x values (a broadcast):
//   the access pattern of the f16 GEMV (`matmul_gemv.vecmat_wide`), with
//   4 or 8 bits per weight instead of 16. Each word is decoded as in
//   quant_gemv.wgsl and scaled by its block's scale once per block; the
//   S slices' sums meet in workgroup memory.
// Needs K a multiple of the block and an even number of words per block
//   (every default block); the host falls back to dequantise + matmul
//   otherwise.
// Workgroup: WG x 1 x 1 (override, a multiple of 32); grid of ceil(N /
//   COLS) workgroups (2-D) times KSPLIT (z: a share of K each, partials
//   added by `reduce_k`).
// Output: the fused matmul epilogue applied to each sum on its way out
//   (by `reduce_k` when K is split).
// Bindings: 0 params, 1 x (vec4 f32), 2 data (vec2 u32), 3 out, 5 and 6 the
//   epilogue's bias and residual, 7 partials (KSPLIT > 1; bound either
//   way), 10 scales, 11 zero points, 12 globals.

// Words per block (block * bits / 32), even.
const WPB: u32 = 4u;
// A step's words (an even divisor of WPB, at most 8): an invocation takes
// one unit of UNIT words of a block per step, so a block of 128 8-bit
// values (32 words) is 4 units. SUB adjacent invocations (1, 2 or 4,
// dividing S) take adjacent units of one column: their loads stay
// contiguous however long the block (32 invocations on 32 columns of
// 32-word blocks read 128 bytes apart: half the speed, run 168).
const UNIT: u32 = 4u;
const SUB: u32 = 1u;
const UPB: u32 = WPB / UNIT;
const COLS: u32 = 32u;
// Workgroups along K per group of columns (grid z): with more than one,
// each writes its sums to `partials` and entry `reduce_k` adds them.
const KSPLIT: u32 = 1u;

@group(0) @binding(2) var<storage, read> data: array<vec2<u32>>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;
@group(0) @binding(7) var<storage, read_write> partials: array<f32>;

override WG: u32 = 256u;
override S: u32 = WG / COLS;

var<workgroup> red: array<f32, MR * WG>;

// The invocation of column c's slot v.
fn slot_lane(c: u32, v: u32) -> u32 {
    let run = (v / SUB) * SUB + c / (COLS / SUB);
    return run * COLS + (c % (COLS / SUB)) * SUB + v % SUB;
}

@compute @workgroup_size(WG, 1, 1)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    // Column c and slot t (0..S) of this invocation (`slot_lane`'s inverse).
    let run = lid / COLS;
    let lane = lid % COLS;
    let c = (run % SUB) * (COLS / SUB) + lane / SUB;
    let t = (run / SUB) * SUB + lane % SUB;
    let col = (wg.y * params.gx + wg.x) * COLS + c;
    let live = col < params.n;
    var acc: array<f32, MR>;
    for (var m = 0u; m < MR; m++) {
        acc[m] = 0.0;
    }
    // x vec4s per word: 2 (8 elements) or 1 (4 elements).
    let xw = select(1u, 2u, four_bit());
    if live {
        let units = params.nb * UPB;
        let uz = (units + KSPLIT - 1u) / KSPLIT;
        let ue = min(units, (wg.z + 1u) * uz);
        for (var u = wg.z * uz + t; u < ue; u += S) {
            let j = u / UPB;
            let id = j * params.n + col;
            var words: array<vec2<u32>, UNIT / 2u>;
            let first = (id * WPB + (u % UPB) * UNIT) / 2u;
            for (var h = 0u; h < UNIT / 2u; h++) {
                words[h] = data[first + h];
            }
            let scale = block_scale(id);
            var offset = 0.0;
            if int_format() {
                offset = int_offset(id);
            }
            var part: array<f32, MR>;
            for (var m = 0u; m < MR; m++) {
                part[m] = 0.0;
            }
            for (var w = 0u; w < UNIT; w++) {
                let word = words[w / 2u][w % 2u];
                let xo = (u * UNIT + w) * xw;
                let d = decode_word(word, offset);
                for (var m = 0u; m < MR; m++) {
                    if m < params.m {
                        part[m] += decoded_dot(d, m * (params.k / 4u) + xo);
                    }
                }
            }
            for (var m = 0u; m < MR; m++) {
                acc[m] += part[m] * scale;
            }
        }
    }
    for (var m = 0u; m < MR; m++) {
        red[m * WG + lid] = acc[m];
    }
    workgroupBarrier();
    if live && t == 0u {
        for (var m = 0u; m < MR; m++) {
            if m < params.m {
                var total = 0.0;
                for (var v = 0u; v < S; v++) {
                    total += red[m * WG + slot_lane(c, v)];
                }
                if KSPLIT == 1u {
                    out[m * params.n + col] = epilogue(total, 0u, m, col);
                } else {
                    partials[(wg.z * params.m + m) * params.n + col] = total;
                }
            }
        }
    }
}

// The KSPLIT partial sums of each output added (one invocation each).
@compute @workgroup_size(256, 1, 1)
fn reduce_k(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let count = params.m * params.n;
    let i = (wg.y * nwg.x + wg.x) * 256u + lid;
    if i >= count {
        return;
    }
    var total = 0.0;
    for (var z = 0u; z < KSPLIT; z++) {
        total += partials[z * count + i];
    }
    out[i] = epilogue(total, 0u, i / params.n, i % params.n);
}
