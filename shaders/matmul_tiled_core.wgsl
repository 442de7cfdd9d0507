// matmul_tiled_core: the compute part shared by matmul_tiled (scalar global
// loads, any shape) and matmul_tiled_vec4 (vec4 global loads and stores, for
// K and N multiples of 4). The registry appends this file to either one; the
// prelude supplies the bindings and `fetch_a` / `fetch_b` (the j-th group of
// four tile elements an invocation loads from global memory, zero past the
// edges), `put_a` / `put_b` (where that group goes in workgroup memory),
// `BStage` (what a B fetch holds until its put: the four values, or a
// quantised weight's raw words, decoded in the put) and `store_row`.
//
// Algorithm (the lecture's tiling, plus register tiling): a workgroup owns a
//   BM x BN block of C and walks K in steps of BK. Per step all invocations
//   stage a BM x BK tile of A and a BK x BN tile of B in workgroup memory
//   (zero-filled past the edges), then each invocation accumulates an 8 x 8
//   register tile of C: per k it reads two vec4 of A and two vec4 of B from
//   workgroup memory and issues 16 vec4 fmas (64 multiply-adds for 4 loads).
//   The global loads of step k + 1 are issued into registers before the FMAs
//   of step k and stored to workgroup memory after them (register prefetch):
//   their latency overlaps the arithmetic.
//   Every global element is read N / BN (A) or M / BM (B) times instead of N
//   or M times.
//   Why (H200): the prefetch took 128x128x8 from 27.4 to 33.5 TFLOP/s;
//   the driver gives it 126 registers (vec4: 101): two workgroups, 16
//   warps per SM, as cuBLAS's 128x128 SGEMM. Double-buffered tiles and
//   the operands of k + 1 read before the FMAs of k lost:
//   docs/perf/matmul.md#tiled-kernels.
// Register tile: invocation (tx, ty) owns rows {4ty..4ty+3} and
//   {BM/2 + 4ty..+3}, columns {4tx..4tx+3} and {BN/2 + 4tx..+3}: two vec4 per
//   operand, so neighbouring invocations read neighbouring 16-byte words of
//   workgroup memory (no bank conflicts) and store neighbouring vec4 of C.
//   The 16 accumulators are named variables, not an array: WGSL has no unroll
//   directive and a dynamically indexed array may be placed in slow local memory.
// Workgroup memory: A tile k-major ([BK][BM/4] vec4) so one vec4 read gives
//   four rows at one k; B tile [BK][BN/4] vec4. (BM + BN) * BK * 4 bytes.
// Workgroup: (BN / 8) x (BM / 8) invocations; 128 x 128 tiles -> 16 x 16 = 256.
// Tile parameters (text-specialised consts): BM, BN (multiples of 8; BM/8 and
//   BN/8 are the workgroup's sides), BK (a multiple of 4).
// Types: Elem is f32 or f16 (text-specialised); tiles and accumulation are f32.
// Epilogue: matmul_epilogue.wgsl (appended by the registry) is applied to
//   each register-tile vec4 before its store.
// Params: matmul_params.wgsl (appended by the registry).
// Batching: z = batch_base + workgroup z splits into (z / batch_inner,
//   z % batch_inner), each operand with a stride per batch dimension (0
//   broadcasts); C is dense with C[z] at z * M * N.

const BM: u32 = 128u;
const BN: u32 = 128u;
const BK: u32 = 8u;

const WG_X: u32 = BN / 8u;
const WG_Y: u32 = BM / 8u;
const THREADS: u32 = WG_X * WG_Y;
const BM4: u32 = BM / 4u;
const BN4: u32 = BN / 4u;
// Four-element groups of each staged tile, and per invocation (rounded up;
// the preludes guard the last round).
const A_QUADS: u32 = BM * BK / 4u;
const B_QUADS: u32 = BK * BN / 4u;
const A_LOADS: u32 = (A_QUADS + THREADS - 1u) / THREADS;
const B_LOADS: u32 = (B_QUADS + THREADS - 1u) / THREADS;

// Split-K (text-specialised 0/1): the workgroup's z enumerates (batch, split)
// pairs; each covers k_chunk of K and writes f32 partial sums to `partials`
// ([batch, split, M, N]); matmul_splitk.wgsl sums them and applies the epilogue.
const SPLIT_K: u32 = 0u;

@group(0) @binding(4) var<storage, read_write> partials: array<f32>;

// The f32 split plan's fallback (generated, empty otherwise): the flag the
// maxima pass sets when an operand holds an infinity or NaN; unset, every
// workgroup returns at once.
// @gen guard_decl

var<workgroup> a_sh: array<vec4<f32>, BK * BM4>;
var<workgroup> b_sh: array<vec4<f32>, BK * BN4>;

@compute @workgroup_size(WG_X, WG_Y, 1)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_id) lid: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
) {
    // @gen guard
    let row0 = wid.y * BM;
    let col0 = wid.x * BN;
    var z = params.batch_base + wid.z;
    var split = 0u;
    var k_begin = 0u;
    var k_end = params.k;
    if SPLIT_K == 1u {
        split = z % params.splits;
        z = z / params.splits;
        k_begin = split * params.k_chunk;
        k_end = min(k_begin + params.k_chunk, params.k);
    }
    let z0 = z / params.batch_inner;
    let z1 = z % params.batch_inner;
    let a_base = z0 * params.a_stride0 + z1 * params.a_stride1;
    let b_base = z0 * params.b_stride0 + z1 * params.b_stride1;

    var c00 = vec4<f32>();
    var c01 = vec4<f32>();
    var c10 = vec4<f32>();
    var c11 = vec4<f32>();
    var c20 = vec4<f32>();
    var c21 = vec4<f32>();
    var c30 = vec4<f32>();
    var c31 = vec4<f32>();
    var c40 = vec4<f32>();
    var c41 = vec4<f32>();
    var c50 = vec4<f32>();
    var c51 = vec4<f32>();
    var c60 = vec4<f32>();
    var c61 = vec4<f32>();
    var c70 = vec4<f32>();
    var c71 = vec4<f32>();

    // Register prefetch: the next step's global loads are issued before this
    // step's FMAs and land in workgroup memory after them, so their latency
    // hides behind the arithmetic.
    var pa: array<vec4<f32>, A_LOADS>;
    var pb: array<BStage, B_LOADS>;
    for (var j = 0u; j < A_LOADS; j++) {
        pa[j] = fetch_a(j, tid, a_base, row0, k_begin, k_end);
    }
    for (var j = 0u; j < B_LOADS; j++) {
        pb[j] = fetch_b(j, tid, b_base, col0, k_begin, k_end);
    }
    for (var k0 = k_begin; k0 < k_end; k0 += BK) {
        for (var j = 0u; j < A_LOADS; j++) {
            put_a(j, tid, pa[j], k0, k_end);
        }
        for (var j = 0u; j < B_LOADS; j++) {
            put_b(j, tid, pb[j], k0, k_end);
        }
        workgroupBarrier();
        if k0 + BK < k_end {
            for (var j = 0u; j < A_LOADS; j++) {
                pa[j] = fetch_a(j, tid, a_base, row0, k0 + BK, k_end);
            }
            for (var j = 0u; j < B_LOADS; j++) {
                pb[j] = fetch_b(j, tid, b_base, col0, k0 + BK, k_end);
            }
        }
        for (var kk = 0u; kk < BK; kk++) {
            let a0 = a_sh[kk * BM4 + lid.y];
            let a1 = a_sh[kk * BM4 + WG_Y + lid.y];
            let b0 = b_sh[kk * BN4 + lid.x];
            let b1 = b_sh[kk * BN4 + WG_X + lid.x];
            c00 = fma(vec4(a0.x), b0, c00);
            c01 = fma(vec4(a0.x), b1, c01);
            c10 = fma(vec4(a0.y), b0, c10);
            c11 = fma(vec4(a0.y), b1, c11);
            c20 = fma(vec4(a0.z), b0, c20);
            c21 = fma(vec4(a0.z), b1, c21);
            c30 = fma(vec4(a0.w), b0, c30);
            c31 = fma(vec4(a0.w), b1, c31);
            c40 = fma(vec4(a1.x), b0, c40);
            c41 = fma(vec4(a1.x), b1, c41);
            c50 = fma(vec4(a1.y), b0, c50);
            c51 = fma(vec4(a1.y), b1, c51);
            c60 = fma(vec4(a1.z), b0, c60);
            c61 = fma(vec4(a1.z), b1, c61);
            c70 = fma(vec4(a1.w), b0, c70);
            c71 = fma(vec4(a1.w), b1, c71);
        }
        workgroupBarrier();
    }

    let r0 = row0 + lid.y * 4u;
    let r1 = row0 + BM / 2u + lid.y * 4u;
    let ca = col0 + lid.x * 4u;
    let cb = col0 + BN / 2u + lid.x * 4u;
    if SPLIT_K == 1u {
        let p_base = (z * params.splits + split) * params.m * params.n;
        store_partial(p_base, r0, ca, cb, c00, c01);
        store_partial(p_base, r0 + 1u, ca, cb, c10, c11);
        store_partial(p_base, r0 + 2u, ca, cb, c20, c21);
        store_partial(p_base, r0 + 3u, ca, cb, c30, c31);
        store_partial(p_base, r1, ca, cb, c40, c41);
        store_partial(p_base, r1 + 1u, ca, cb, c50, c51);
        store_partial(p_base, r1 + 2u, ca, cb, c60, c61);
        store_partial(p_base, r1 + 3u, ca, cb, c70, c71);
        return;
    }
    let c_base = z * params.m * params.n;
    store_row(c_base, r0, ca, cb, epilogue4(c00, z, r0, ca), epilogue4(c01, z, r0, cb));
    store_row(c_base, r0 + 1u, ca, cb, epilogue4(c10, z, r0 + 1u, ca), epilogue4(c11, z, r0 + 1u, cb));
    store_row(c_base, r0 + 2u, ca, cb, epilogue4(c20, z, r0 + 2u, ca), epilogue4(c21, z, r0 + 2u, cb));
    store_row(c_base, r0 + 3u, ca, cb, epilogue4(c30, z, r0 + 3u, ca), epilogue4(c31, z, r0 + 3u, cb));
    store_row(c_base, r1, ca, cb, epilogue4(c40, z, r1, ca), epilogue4(c41, z, r1, cb));
    store_row(c_base, r1 + 1u, ca, cb, epilogue4(c50, z, r1 + 1u, ca), epilogue4(c51, z, r1 + 1u, cb));
    store_row(c_base, r1 + 2u, ca, cb, epilogue4(c60, z, r1 + 2u, ca), epilogue4(c61, z, r1 + 2u, cb));
    store_row(c_base, r1 + 3u, ca, cb, epilogue4(c70, z, r1 + 3u, ca), epilogue4(c71, z, r1 + 3u, cb));
}

// One output row's two 4-wide column groups as f32 partial sums (split-K).
fn store_partial(p_base: u32, row: u32, ca: u32, cb: u32, lo: vec4<f32>, hi: vec4<f32>) {
    if row >= params.m {
        return;
    }
    let base = p_base + row * params.n;
    for (var j = 0u; j < 4u; j++) {
        if ca + j < params.n {
            partials[base + ca + j] = lo[j];
        }
        if cb + j < params.n {
            partials[base + cb + j] = hi[j];
        }
    }
}
