// matmul_gemv: matrix-vector products, the memory-bound corner of matmul
// (M = 1 or N = 1), judged in GB/s: every element of the matrix is read once
// and used for one multiply-add, so no tiling can help; what matters is
// coalescing and keeping enough loads in flight.
//
// Entry points:
// - vecmat (M = 1): y[n] = sum_k x[k] B[k, n]. A workgroup is 128 columns x 4
//   k-groups, each invocation two columns 64 apart; the 32 invocations of a
//   warp read 32 consecutive columns of one row of B (one 128-byte burst in
//   f32) twice while x[k] is a broadcast. K is split
//   over SPLITS workgroups (grid y) so even N = 4096 fills the GPU; each
//   invocation keeps 8 independent accumulators (8 loads in flight), the 4
//   k-groups reduce through workgroup memory and write an f32 partial sum.
// - vecmat_pairs (M = 1, N and B's row stride and batch strides even): the
//   same with each invocation reading two adjacent columns as one vec2 (4
//   bytes in f16): a warp-wide load is a 128-byte burst in f16 too (256 in
//   f32), half the load instructions per byte. Two pairs 64 apart per
//   invocation; a workgroup covers 256 columns.
// - vecmat_wide (M = 1, N and B's strides multiples of one 16-byte word: 8
//   halves or 4 floats): one dispatch, no partials. A workgroup owns
//   WIDE_LANES words of columns (32 columns in f16, 16 in f32) over all of K:
//   its WIDE_SLICES x WIDE_LANES invocations read rows lid.y, lid.y + 64, ...
//   as 16-byte words (a warp covers 8 rows x 64 contiguous bytes), 8 rows
//   per step with all 8 loads issued before the multiply-adds, and the 64
//   slices reduce through workgroup memory (a tree) before the epilogue and
//   the store. Chosen when N alone gives at least a workgroup per compute
//   unit; otherwise K must be split over workgroups (vecmat + reduce).
//   WIDE_HALF (text const): 1 for f16 words (unpack2x16float), 2 for bf16
//   words against f32 x (each half shifted into an f32), 0 for f32.
//   16 rows per step (16 loads in flight per invocation) first, then 8-row
//   steps and single rows for the tail (H200, run 37: f16 4096 x 4096
//   +3% over 8-row steps only). Software-pipelined 16-row steps (the next
//   step's 16 loads issued before this step's arithmetic) lost twice (runs
//   44 and 123: f32 -15%, 158 registers; f16 -1%): the steps are not
//   latency-bound. At 4096 x 4096 the kernel reads W at 0.87-0.93x of a
//   plain read of the same bytes: docs/perf/matmul.md#gemv.
// - vecmat_rows (2 <= M <= 8, N and B's strides even; 1 <= M <= 8 for a
//   bf16 B, read as u32 words, B_BF16): vecmat_pairs for MR
//   rows of x at once (MR = M, text-specialised), so the weight is read
//   once for all of them: every pair of B loaded feeds 2 x MR multiply-adds
//   (MR accumulator chains, no k unroll into separate sums), x's rows are
//   broadcasts. The 4 k-groups reduce one row at a time through workgroup
//   memory into partials [count, MR, SPLITS, N]. The general kernels ran
//   M = 4 and 8 against a 4096 x 14336 weight at 9-23% of the copy (H200,
//   run 158), reading their M-row tiles mostly empty.
// - reduce: y[z, row, n] = sum over the SPLITS partials (f32), written as
//   Elem; grid y = M (1 but for vecmat_rows).
// - matvec (N = 1): y[m] = sum_k A[m, k] x[k]. A workgroup is 4 rows x 64
//   invocations; the 64 invocations of a row stride along it (consecutive
//   addresses), keep 4 accumulators, and reduce through workgroup memory.
//   x is read through B's row stride (a [K, 1] tensor with padded rows).
// Batching: z = batch_base + workgroup z splits into (z / batch_inner,
//   z % batch_inner) with a stride per batch dimension for each operand, as
//   in the other matmul kernels. `lhs` is A (or x for vecmat), `rhs` is B (or
//   x for matvec). The partial sums are indexed by the dispatch's own
//   workgroup z ([count, SPLITS, N]), so a dispatch that starts at batch
//   batch_base (the padding layer's last row of C, batch M - 1 of a
//   [M, 1, K] view of A) needs partials for its own batches only.
// Epilogue: matmul_epilogue.wgsl (appended) on each output of reduce / matvec.
// Params: matmul_params.wgsl (appended; k_chunk and splits are vecmat's).
// Types: Elem is f32 or f16 (text-specialised); accumulation is f32.

alias Elem = f32;
// The output's element type (text-specialised when it differs from Elem).
alias Out = Elem;

@group(0) @binding(1) var<storage, read> lhs: array<Elem>;
@group(0) @binding(2) var<storage, read> rhs: array<Elem>;
@group(0) @binding(3) var<storage, read_write> out: array<Out>;
@group(0) @binding(4) var<storage, read_write> partials: array<f32>;
// B as pairs of adjacent elements (vecmat_pairs; the launch binds B again).
@group(0) @binding(7) var<storage, read> rhs2: array<vec2<Elem>>;

// B as bf16 pairs, one u32 word each (vecmat_rows with B_BF16 = 1; the
// launch binds B at 7 and 9, as the entry point references both).
@group(0) @binding(9) var<storage, read> rhs2b: array<u32>;

// B as 16-byte words (vecmat_wide; the launch binds B again).
@group(0) @binding(8) var<storage, read> rhs4: array<vec4<u32>>;

const WIDE_HALF: u32 = 0u;
// Rows of x per workgroup of vecmat_rows (text-specialised, 1..8).
const MR: u32 = 2u;
// vecmat_rows: B is bf16 (its pairs widened in registers: a shift and a
// mask; x is f32), text-specialised.
const B_BF16: u32 = 0u;

// Pair i of B (vecmat_rows) as f32.
fn b_pair(i: u32) -> vec2<f32> {
    if B_BF16 == 1u {
        let w = rhs2b[i];
        return vec2<f32>(bitcast<f32>(w << 16u), bitcast<f32>(w & 0xffff0000u));
    }
    return vec2<f32>(rhs2[i]);
}
// Words of columns per workgroup (1, 2, 4 or 8) and row slices (a power of
// two; WIDE_LANES * WIDE_SLICES <= 256). Default 4 x 64; the others are
// `WGTILE_GEMV_WIDE_SHAPE` experiments. Every other shape ran at 0.53-0.87x
// of 4 x 64 on the H200 at 4096 x 4096, f32 and f16 (runs 56-57, 125):
// docs/perf/matmul.md#gemv.
const WIDE_LANES: u32 = 4u;
const WIDE_SLICES: u32 = 64u;

var<workgroup> sums: array<f32, 512>;
var<workgroup> sums2: array<vec2<f32>, 512>;

fn batch_offsets(wz: u32) -> vec3<u32> {
    let z = params.batch_base + wz;
    let z0 = z / params.batch_inner;
    let z1 = z % params.batch_inner;
    return vec3<u32>(
        z,
        z0 * params.a_stride0 + z1 * params.a_stride1,
        z0 * params.b_stride0 + z1 * params.b_stride1,
    );
}

@compute @workgroup_size(64, 4, 1)
fn vecmat(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_id) lid: vec3<u32>,
) {
    let n = params.n;
    let k = params.k;
    let ldb = params.b_row_stride;
    let offs = batch_offsets(wid.z);
    // Two columns per invocation, 64 apart: each warp-wide load stays one
    // contiguous run, and every x[k] read feeds two multiply-adds.
    let col = wid.x * 128u + lid.x;
    let col2 = col + 64u;
    let split = wid.y;
    let k_begin = split * params.k_chunk;
    let k_end = min(k_begin + params.k_chunk, k);
    var acc0 = 0.0;
    var acc1 = 0.0;
    var acc2 = 0.0;
    var acc3 = 0.0;
    var bcc0 = 0.0;
    var bcc1 = 0.0;
    var bcc2 = 0.0;
    var bcc3 = 0.0;
    if col < n {
        let x = offs.y;
        let b = offs.z + col;
        // Past the edge the second column re-reads the last one (in bounds);
        // its sum is dropped below.
        let b2 = offs.z + min(col2, n - 1u);
        var kk = k_begin + lid.y;
        for (; kk + 12u < k_end; kk += 16u) {
            let x0 = f32(lhs[x + kk]);
            let x1 = f32(lhs[x + kk + 4u]);
            let x2 = f32(lhs[x + kk + 8u]);
            let x3 = f32(lhs[x + kk + 12u]);
            acc0 = fma(x0, f32(rhs[b + kk * ldb]), acc0);
            bcc0 = fma(x0, f32(rhs[b2 + kk * ldb]), bcc0);
            acc1 = fma(x1, f32(rhs[b + (kk + 4u) * ldb]), acc1);
            bcc1 = fma(x1, f32(rhs[b2 + (kk + 4u) * ldb]), bcc1);
            acc2 = fma(x2, f32(rhs[b + (kk + 8u) * ldb]), acc2);
            bcc2 = fma(x2, f32(rhs[b2 + (kk + 8u) * ldb]), bcc2);
            acc3 = fma(x3, f32(rhs[b + (kk + 12u) * ldb]), acc3);
            bcc3 = fma(x3, f32(rhs[b2 + (kk + 12u) * ldb]), bcc3);
        }
        for (; kk < k_end; kk += 4u) {
            let x0 = f32(lhs[x + kk]);
            acc0 = fma(x0, f32(rhs[b + kk * ldb]), acc0);
            bcc0 = fma(x0, f32(rhs[b2 + kk * ldb]), bcc0);
        }
    }
    let slot = lid.y * 64u + lid.x;
    sums[slot] = (acc0 + acc1) + (acc2 + acc3);
    sums[256u + slot] = (bcc0 + bcc1) + (bcc2 + bcc3);
    workgroupBarrier();
    if lid.y == 0u && col < n {
        let base = (wid.z * params.splits + split) * n;
        let s = (sums[lid.x] + sums[64u + lid.x]) + (sums[128u + lid.x] + sums[192u + lid.x]);
        partials[base + col] = s;
        if col2 < n {
            let t = 256u + lid.x;
            partials[base + col2] = (sums[t] + sums[t + 64u]) + (sums[t + 128u] + sums[t + 192u]);
        }
    }
}

@compute @workgroup_size(64, 4, 1)
fn vecmat_pairs(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_id) lid: vec3<u32>,
) {
    let n = params.n;
    let k = params.k;
    let offs = batch_offsets(wid.z);
    // Pair p holds columns 2p and 2p + 1 (N is even: pairs are whole).
    let pairs = n / 2u;
    let p = wid.x * 128u + lid.x;
    let p2 = p + 64u;
    let split = wid.y;
    let k_begin = split * params.k_chunk;
    let k_end = min(k_begin + params.k_chunk, k);
    var acc0 = vec2<f32>();
    var acc1 = vec2<f32>();
    var acc2 = vec2<f32>();
    var acc3 = vec2<f32>();
    var bcc0 = vec2<f32>();
    var bcc1 = vec2<f32>();
    var bcc2 = vec2<f32>();
    var bcc3 = vec2<f32>();
    if p < pairs {
        let x = offs.y;
        // In pairs: B's batch offset and row stride are even.
        let ldb = params.b_row_stride / 2u;
        let b = offs.z / 2u + p;
        // Past the edge the second pair re-reads the last one (in bounds);
        // its sums are dropped below.
        let b2 = offs.z / 2u + min(p2, pairs - 1u);
        var kk = k_begin + lid.y;
        for (; kk + 12u < k_end; kk += 16u) {
            let x0 = f32(lhs[x + kk]);
            let x1 = f32(lhs[x + kk + 4u]);
            let x2 = f32(lhs[x + kk + 8u]);
            let x3 = f32(lhs[x + kk + 12u]);
            acc0 = fma(vec2(x0), vec2<f32>(rhs2[b + kk * ldb]), acc0);
            bcc0 = fma(vec2(x0), vec2<f32>(rhs2[b2 + kk * ldb]), bcc0);
            acc1 = fma(vec2(x1), vec2<f32>(rhs2[b + (kk + 4u) * ldb]), acc1);
            bcc1 = fma(vec2(x1), vec2<f32>(rhs2[b2 + (kk + 4u) * ldb]), bcc1);
            acc2 = fma(vec2(x2), vec2<f32>(rhs2[b + (kk + 8u) * ldb]), acc2);
            bcc2 = fma(vec2(x2), vec2<f32>(rhs2[b2 + (kk + 8u) * ldb]), bcc2);
            acc3 = fma(vec2(x3), vec2<f32>(rhs2[b + (kk + 12u) * ldb]), acc3);
            bcc3 = fma(vec2(x3), vec2<f32>(rhs2[b2 + (kk + 12u) * ldb]), bcc3);
        }
        for (; kk < k_end; kk += 4u) {
            let x0 = f32(lhs[x + kk]);
            acc0 = fma(vec2(x0), vec2<f32>(rhs2[b + kk * ldb]), acc0);
            bcc0 = fma(vec2(x0), vec2<f32>(rhs2[b2 + kk * ldb]), bcc0);
        }
    }
    let slot = lid.y * 64u + lid.x;
    sums2[slot] = (acc0 + acc1) + (acc2 + acc3);
    sums2[256u + slot] = (bcc0 + bcc1) + (bcc2 + bcc3);
    workgroupBarrier();
    if lid.y == 0u && p < pairs {
        pair_partials((wid.z * params.splits + split) * n, lid.x, p, p2, pairs);
    }
}

// The 4 k-groups' sums of pairs p and p2 (sums2[0..256) and [256..512),
// 64 invocations a group) added and written as partials from `base`;
// pair p2 only where it is whole (N = 2 * pairs).
fn pair_partials(base: u32, lx: u32, p: u32, p2: u32, pairs: u32) {
    let s = (sums2[lx] + sums2[64u + lx]) + (sums2[128u + lx] + sums2[192u + lx]);
    partials[base + 2u * p] = s.x;
    partials[base + 2u * p + 1u] = s.y;
    if p2 < pairs {
        let t = 256u + lx;
        let s2 = (sums2[t] + sums2[t + 64u]) + (sums2[t + 128u] + sums2[t + 192u]);
        partials[base + 2u * p2] = s2.x;
        partials[base + 2u * p2 + 1u] = s2.y;
    }
}

// The first four columns of a 16-byte word of B (all of them in f32).
fn word_lo(w: vec4<u32>) -> vec4<f32> {
    if WIDE_HALF == 1u {
        return vec4<f32>(unpack2x16float(w.x), unpack2x16float(w.y));
    }
    if WIDE_HALF == 2u {
        return bf16_quad(w.x, w.y);
    }
    return bitcast<vec4<f32>>(w);
}

// Columns 4..7 of a word of 8 halves.
fn word_hi(w: vec4<u32>) -> vec4<f32> {
    if WIDE_HALF == 2u {
        return bf16_quad(w.z, w.w);
    }
    return vec4<f32>(unpack2x16float(w.z), unpack2x16float(w.w));
}

// The four bf16 values of words a and b (low half first), exactly in f32.
fn bf16_quad(a: u32, b: u32) -> vec4<f32> {
    return bitcast<vec4<f32>>(vec4<u32>(a << 16u, a & 0xffff0000u, b << 16u, b & 0xffff0000u));
}

var<workgroup> wide_lo: array<vec4<f32>, WIDE_LANES * WIDE_SLICES>;
var<workgroup> wide_hi: array<vec4<f32>, WIDE_LANES * WIDE_SLICES>;

@compute @workgroup_size(WIDE_LANES, WIDE_SLICES, 1)
fn vecmat_wide(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_id) lid: vec3<u32>,
) {
    let n = params.n;
    let k = params.k;
    let offs = batch_offsets(wid.z);
    // Columns per word, words per row of the output, B's row stride in words.
    let cw = select(4u, 8u, WIDE_HALF != 0u);
    let words = n / cw;
    let ldw = params.b_row_stride / cw;
    let wc = wid.x * WIDE_LANES + lid.x;
    var lo = vec4<f32>();
    var hi = vec4<f32>();
    if wc < words {
        let x = offs.y;
        let b = offs.z / cw + wc;
        var kk = lid.y;
        let step = WIDE_SLICES;
        // 16 rows per step first (twice the loads in flight).
        for (; kk + 15u * step < k; kk += 16u * step) {
            // Every load first, then the arithmetic.
            let w0 = rhs4[b + kk * ldw];
            let w1 = rhs4[b + (kk + step) * ldw];
            let w2 = rhs4[b + (kk + 2u * step) * ldw];
            let w3 = rhs4[b + (kk + 3u * step) * ldw];
            let w4 = rhs4[b + (kk + 4u * step) * ldw];
            let w5 = rhs4[b + (kk + 5u * step) * ldw];
            let w6 = rhs4[b + (kk + 6u * step) * ldw];
            let w7 = rhs4[b + (kk + 7u * step) * ldw];
            let w8 = rhs4[b + (kk + 8u * step) * ldw];
            let w9 = rhs4[b + (kk + 9u * step) * ldw];
            let w10 = rhs4[b + (kk + 10u * step) * ldw];
            let w11 = rhs4[b + (kk + 11u * step) * ldw];
            let w12 = rhs4[b + (kk + 12u * step) * ldw];
            let w13 = rhs4[b + (kk + 13u * step) * ldw];
            let w14 = rhs4[b + (kk + 14u * step) * ldw];
            let w15 = rhs4[b + (kk + 15u * step) * ldw];
            let x0 = f32(lhs[x + kk]);
            let x1 = f32(lhs[x + kk + step]);
            let x2 = f32(lhs[x + kk + 2u * step]);
            let x3 = f32(lhs[x + kk + 3u * step]);
            let x4 = f32(lhs[x + kk + 4u * step]);
            let x5 = f32(lhs[x + kk + 5u * step]);
            let x6 = f32(lhs[x + kk + 6u * step]);
            let x7 = f32(lhs[x + kk + 7u * step]);
            let x8 = f32(lhs[x + kk + 8u * step]);
            let x9 = f32(lhs[x + kk + 9u * step]);
            let x10 = f32(lhs[x + kk + 10u * step]);
            let x11 = f32(lhs[x + kk + 11u * step]);
            let x12 = f32(lhs[x + kk + 12u * step]);
            let x13 = f32(lhs[x + kk + 13u * step]);
            let x14 = f32(lhs[x + kk + 14u * step]);
            let x15 = f32(lhs[x + kk + 15u * step]);
            lo = fma(vec4(x0), word_lo(w0), lo);
            lo = fma(vec4(x1), word_lo(w1), lo);
            lo = fma(vec4(x2), word_lo(w2), lo);
            lo = fma(vec4(x3), word_lo(w3), lo);
            lo = fma(vec4(x4), word_lo(w4), lo);
            lo = fma(vec4(x5), word_lo(w5), lo);
            lo = fma(vec4(x6), word_lo(w6), lo);
            lo = fma(vec4(x7), word_lo(w7), lo);
            lo = fma(vec4(x8), word_lo(w8), lo);
            lo = fma(vec4(x9), word_lo(w9), lo);
            lo = fma(vec4(x10), word_lo(w10), lo);
            lo = fma(vec4(x11), word_lo(w11), lo);
            lo = fma(vec4(x12), word_lo(w12), lo);
            lo = fma(vec4(x13), word_lo(w13), lo);
            lo = fma(vec4(x14), word_lo(w14), lo);
            lo = fma(vec4(x15), word_lo(w15), lo);
            if WIDE_HALF != 0u {
                hi = fma(vec4(x0), word_hi(w0), hi);
                hi = fma(vec4(x1), word_hi(w1), hi);
                hi = fma(vec4(x2), word_hi(w2), hi);
                hi = fma(vec4(x3), word_hi(w3), hi);
                hi = fma(vec4(x4), word_hi(w4), hi);
                hi = fma(vec4(x5), word_hi(w5), hi);
                hi = fma(vec4(x6), word_hi(w6), hi);
                hi = fma(vec4(x7), word_hi(w7), hi);
                hi = fma(vec4(x8), word_hi(w8), hi);
                hi = fma(vec4(x9), word_hi(w9), hi);
                hi = fma(vec4(x10), word_hi(w10), hi);
                hi = fma(vec4(x11), word_hi(w11), hi);
                hi = fma(vec4(x12), word_hi(w12), hi);
                hi = fma(vec4(x13), word_hi(w13), hi);
                hi = fma(vec4(x14), word_hi(w14), hi);
                hi = fma(vec4(x15), word_hi(w15), hi);
            }
        }
        for (; kk + 7u * step < k; kk += 8u * step) {
            // Every load first, then the arithmetic.
            let w0 = rhs4[b + kk * ldw];
            let w1 = rhs4[b + (kk + step) * ldw];
            let w2 = rhs4[b + (kk + 2u * step) * ldw];
            let w3 = rhs4[b + (kk + 3u * step) * ldw];
            let w4 = rhs4[b + (kk + 4u * step) * ldw];
            let w5 = rhs4[b + (kk + 5u * step) * ldw];
            let w6 = rhs4[b + (kk + 6u * step) * ldw];
            let w7 = rhs4[b + (kk + 7u * step) * ldw];
            let x0 = f32(lhs[x + kk]);
            let x1 = f32(lhs[x + kk + step]);
            let x2 = f32(lhs[x + kk + 2u * step]);
            let x3 = f32(lhs[x + kk + 3u * step]);
            let x4 = f32(lhs[x + kk + 4u * step]);
            let x5 = f32(lhs[x + kk + 5u * step]);
            let x6 = f32(lhs[x + kk + 6u * step]);
            let x7 = f32(lhs[x + kk + 7u * step]);
            lo = fma(vec4(x0), word_lo(w0), lo);
            lo = fma(vec4(x1), word_lo(w1), lo);
            lo = fma(vec4(x2), word_lo(w2), lo);
            lo = fma(vec4(x3), word_lo(w3), lo);
            lo = fma(vec4(x4), word_lo(w4), lo);
            lo = fma(vec4(x5), word_lo(w5), lo);
            lo = fma(vec4(x6), word_lo(w6), lo);
            lo = fma(vec4(x7), word_lo(w7), lo);
            if WIDE_HALF != 0u {
                hi = fma(vec4(x0), word_hi(w0), hi);
                hi = fma(vec4(x1), word_hi(w1), hi);
                hi = fma(vec4(x2), word_hi(w2), hi);
                hi = fma(vec4(x3), word_hi(w3), hi);
                hi = fma(vec4(x4), word_hi(w4), hi);
                hi = fma(vec4(x5), word_hi(w5), hi);
                hi = fma(vec4(x6), word_hi(w6), hi);
                hi = fma(vec4(x7), word_hi(w7), hi);
            }
        }
        for (; kk < k; kk += step) {
            let w0 = rhs4[b + kk * ldw];
            let x0 = f32(lhs[x + kk]);
            lo = fma(vec4(x0), word_lo(w0), lo);
            if WIDE_HALF != 0u {
                hi = fma(vec4(x0), word_hi(w0), hi);
            }
        }
    }
    // Tree over the WIDE_SLICES slices of each word.
    let slot = lid.y * WIDE_LANES + lid.x;
    wide_lo[slot] = lo;
    wide_hi[slot] = hi;
    workgroupBarrier();
    for (var stride = WIDE_SLICES / 2u; stride > 0u; stride /= 2u) {
        if lid.y < stride {
            let other = slot + stride * WIDE_LANES;
            wide_lo[slot] += wide_lo[other];
            wide_hi[slot] += wide_hi[other];
        }
        workgroupBarrier();
    }
    if lid.y == 0u && wc < words {
        let s_lo = wide_lo[lid.x];
        let s_hi = wide_hi[lid.x];
        let col = wc * cw;
        let o = offs.x * n + col;
        for (var j = 0u; j < 4u; j++) {
            out[o + j] = Out(epilogue(s_lo[j], offs.x, 0u, col + j));
        }
        if WIDE_HALF != 0u {
            for (var j = 0u; j < 4u; j++) {
                out[o + 4u + j] = Out(epilogue(s_hi[j], offs.x, 0u, col + 4u + j));
            }
        }
    }
}

@compute @workgroup_size(256, 1, 1)
fn reduce(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    let n = params.n;
    let col = gid.x;
    let row = wid.y;
    let z = params.batch_base + wid.z;
    if col >= n {
        return;
    }
    let first = (wid.z * params.m + row) * params.splits;
    var s = 0.0;
    for (var i = 0u; i < params.splits; i++) {
        s += partials[(first + i) * n + col];
    }
    out[(z * params.m + row) * n + col] = Out(epilogue(s, z, row, col));
}

@compute @workgroup_size(64, 4, 1)
fn vecmat_rows(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_id) lid: vec3<u32>,
) {
    let n = params.n;
    let k = params.k;
    let offs = batch_offsets(wid.z);
    // Pair p holds columns 2p and 2p + 1 (N is even: pairs are whole).
    let pairs = n / 2u;
    let p = wid.x * 128u + lid.x;
    let p2 = p + 64u;
    let split = wid.y;
    let k_begin = split * params.k_chunk;
    let k_end = min(k_begin + params.k_chunk, k);
    var acc: array<vec2<f32>, MR>;
    var bcc: array<vec2<f32>, MR>;
    if p < pairs {
        let lda = params.a_row_stride;
        let ldb = params.b_row_stride / 2u;
        let b = offs.z / 2u + p;
        // Past the edge the second pair re-reads the last one (in bounds);
        // its sums are dropped below.
        let b2 = offs.z / 2u + min(p2, pairs - 1u);
        var kk = k_begin + lid.y;
        for (; kk + 12u < k_end; kk += 16u) {
            // The weight's eight pairs first, then every row's arithmetic.
            let w0 = b_pair(b + kk * ldb);
            let w1 = b_pair(b + (kk + 4u) * ldb);
            let w2 = b_pair(b + (kk + 8u) * ldb);
            let w3 = b_pair(b + (kk + 12u) * ldb);
            let v0 = b_pair(b2 + kk * ldb);
            let v1 = b_pair(b2 + (kk + 4u) * ldb);
            let v2 = b_pair(b2 + (kk + 8u) * ldb);
            let v3 = b_pair(b2 + (kk + 12u) * ldb);
            for (var r = 0u; r < MR; r++) {
                let x = offs.y + r * lda + kk;
                let x0 = vec2(f32(lhs[x]));
                let x1 = vec2(f32(lhs[x + 4u]));
                let x2 = vec2(f32(lhs[x + 8u]));
                let x3 = vec2(f32(lhs[x + 12u]));
                acc[r] = fma(x3, w3, fma(x2, w2, fma(x1, w1, fma(x0, w0, acc[r]))));
                bcc[r] = fma(x3, v3, fma(x2, v2, fma(x1, v1, fma(x0, v0, bcc[r]))));
            }
        }
        for (; kk < k_end; kk += 4u) {
            let w0 = b_pair(b + kk * ldb);
            let v0 = b_pair(b2 + kk * ldb);
            for (var r = 0u; r < MR; r++) {
                let x0 = vec2(f32(lhs[offs.y + r * lda + kk]));
                acc[r] = fma(x0, w0, acc[r]);
                bcc[r] = fma(x0, v0, bcc[r]);
            }
        }
    }
    // One row at a time: the 4 k-groups meet in workgroup memory.
    let slot = lid.y * 64u + lid.x;
    for (var r = 0u; r < MR; r++) {
        sums2[slot] = acc[r];
        sums2[256u + slot] = bcc[r];
        workgroupBarrier();
        if lid.y == 0u && p < pairs {
            pair_partials(((wid.z * MR + r) * params.splits + split) * n, lid.x, p, p2, pairs);
        }
        workgroupBarrier();
    }
}

@compute @workgroup_size(64, 4, 1)
fn matvec(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_id) lid: vec3<u32>,
) {
    let m = params.m;
    let k = params.k;
    let offs = batch_offsets(wid.z);
    let row = wid.x * 4u + lid.y;
    var acc0 = 0.0;
    var acc1 = 0.0;
    var acc2 = 0.0;
    var acc3 = 0.0;
    if row < m {
        let a = offs.y + row * params.a_row_stride;
        let x = offs.z;
        // x's elements are B's rows: 1 apart when B is a dense [K, 1], a
        // pitch apart when its rows are padded.
        let xs = params.b_row_stride;
        var kk = lid.x;
        for (; kk + 192u < k; kk += 256u) {
            acc0 = fma(f32(lhs[a + kk]), f32(rhs[x + kk * xs]), acc0);
            acc1 = fma(f32(lhs[a + kk + 64u]), f32(rhs[x + (kk + 64u) * xs]), acc1);
            acc2 = fma(f32(lhs[a + kk + 128u]), f32(rhs[x + (kk + 128u) * xs]), acc2);
            acc3 = fma(f32(lhs[a + kk + 192u]), f32(rhs[x + (kk + 192u) * xs]), acc3);
        }
        for (; kk < k; kk += 64u) {
            acc0 = fma(f32(lhs[a + kk]), f32(rhs[x + kk * xs]), acc0);
        }
    }
    let slot = lid.y * 64u + lid.x;
    sums[slot] = (acc0 + acc1) + (acc2 + acc3);
    workgroupBarrier();
    // Tree reduction over the 64 invocations of each row.
    for (var stride = 32u; stride > 0u; stride /= 2u) {
        if lid.x < stride {
            sums[slot] += sums[slot + stride];
        }
        workgroupBarrier();
    }
    if lid.x == 0u && row < m {
        out[offs.x * m + row] = Out(epilogue(sums[slot], offs.x, row, 0u));
    }
}
