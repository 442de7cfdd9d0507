// matmul_coop: f16 matmul on tensor cores through WGSL cooperative matrices
// (wgpu's experimental `wgpu_cooperative_matrix`), f32 accumulation.
//
// Algorithm: a workgroup owns a BM x BN block of C and is WARPS_M x WARPS_N
//   subgroups; each subgroup owns a 64 x (16 FN) block of C as 4 x FN
//   cooperative 16 x 16 f32 accumulators (FN = 2 or 4). Per K step of BK, all
//   invocations copy a BM x BK tile of A and a BK x BN tile of B from global
//   memory into workgroup memory with 16-byte loads (zero-filled past the
//   edges, so the tensor-core loads never leave the tile), barrier, then each
//   subgroup loads its 4 A and FN B 16 x 16 fragments per 16-wide k slice and
//   issues 4 FN multiply-adds.
// Prefetch: the global loads of step k + 1 go into registers (A_LOADS +
//   B_LOADS vec4 per invocation) before the multiply-adds of step k, and are
//   written to workgroup memory after them: the loads' latency hides behind
//   the tensor-core work instead of stalling every subgroup at the barrier
//   (one workgroup of 16 subgroups fills an SM, so nothing else would hide it).
// Why this shape (H200): the 4x4x32x2 layout (256 x 128 blocks, 512
//   invocations) leads every layout measured at 2048 and 4096; the driver
//   gives it 125 of the 128 registers 512 invocations allow, so one
//   workgroup fills an SM and its barriers separate the staging from the
//   products (timing probes: products ~0.26 of 0.558 ms at 4096). Small
//   edits move it by several percent (fetch/put moved into functions with
//   pointer parameters alone: 0.72x; a variant's dead code: ~5%): measure
//   every edit. Tried and lost here (double-buffered tiles, prefetch
//   distance 2, grouped launch order, 48-deep K steps, staging orders
//   against bank conflicts, f16-typed loads, ping-pong groups of subgroups,
//   which lost because the driver's tensor-core path wants constant control
//   flow): docs/perf/matmul.md#tensor-cores.
// Epilogue: matmul_epilogue.wgsl, applied per element on the way out. Each
//   accumulator goes through a per-subgroup 16 x 16 f32 scratch
//   in workgroup memory (a cooperative store cannot convert to f16 nor skip
//   the out-of-bounds part of an edge tile); the subgroup's lanes then write
//   the in-bounds elements as f16.
// Workgroup memory: A tile [BM][BK + 8] and B tile [BK][BN + 8] in f16 (rows
//   padded by 16 bytes so consecutive rows start in different banks), plus
//   WARPS * 256 f32 of scratch. 256 x 128 x 32 (4 x 4 subgroups): 44.8 KiB.
//   The tiles are arrays of vec4<f16>: staging stores 8 bytes at a time, and
//   the cooperative loads take their strides in vec4 units (LDA / 4).
//   Operands are loaded as u32 words: mat2x4<f16> loads ran at 0.56x
//   (run 18), naga rejects bitcasts between u32 and f16 vectors, and tiles
//   of vec4<u32> read by coopLoad do not validate (naga takes a cooperative
//   load's element type from its pointer); docs/perf/matmul.md#tensor-cores.
// Workgroup: WARPS_M * WARPS_N subgroups of SG invocations (text-specialised;
//   the dispatcher runs this kernel only on adapters with one fixed subgroup
//   size). Subgroup w owns rows (w / WARPS_N) * 64.. and columns
//   (w % WARPS_N) * 16 FN..
// Loads: ALIGNED = 1 when the row strides (K and N when dense, the pitch of
//   a padded tensor) are multiples of 8 halves: one 16-byte load per 8
//   halves. ALIGNED = 0 for any other row-major layout (1793 as it is): the
//   same 8 halves from 4-5 word loads and a shift, the buffers also bound as
//   words (bindings 7, 8), so odd shapes need no padding copies.
// Inputs: f16 (INPUT_F32 = 0), or f32 rounded to f16 in the put
//   (INPUT_F32 = 1: reduced precision, opt-in only; values beyond the f16
//   range saturate at +-65504): the same tensor-core work, twice the bytes
//   loaded (ALIGNED then means row strides multiples of 4 floats).
// bf16 inputs (INPUT_BF16 = 1): loaded exactly as f16 ones (2-byte
//   elements), widened to f32 and narrowed to f16 in the put: exact for
//   values f16 holds, within 2^-24 for the smaller ones; the bf16 plan runs
//   the range test first (cast.wgsl) and arms the f32 plan where it fails
//   (src/ops/matmul/bf16.rs). Scaled
//   (BF16_SCALED = 1, with the split's `split_decl` and `split_exps`): each
//   operand times its power of two 2^e from its largest finite |x|
//   (matmul_split_scale.wgsl with IN_BF16) before the narrowing, so that
//   every value within 2^29 of the largest is an f16 value (8 significant
//   bits in f16's 11) and smaller ones keep f16's subnormal steps; C is
//   divided by 2^(ea + eb) before the epilogue as in the split. No check
//   and no fallback: infinities and NaN pass through f16 as through f32.
// Quantised B (the `quant_*` blocks, matmul_coop_quant.wgsl): B is a
//   QuantTensor blocked along K, staged as B^T with each run of 8 k
//   decoded to f16 in the put; A is f16 (src/ops/quant/gemm.rs).
// Split f32 (SPLIT = 1, with INPUT_F32 = 1; MatmulOptions::split_f32): a
//   first pass (matmul_split_scale.wgsl) finds the largest finite |A| and
//   |B| (binding 9, generated `split_decl`); each value, times its operand's
//   2^e (into [2^14, 2^15]), is staged as two f16 halves, hi (rounded to 11
//   bits with integer operations, split_hi) and lo = x - hi, the lo tiles
//   after the hi ones (A_TILE, B_TILE); per 16-wide k slice the generated
//   `split_products` take lo*hi + hi*lo + hi*hi into a zeroed tile and add
//   it to the accumulator in f32 (instead of the usual hi*hi), and C is
//   divided by 2^(ea + eb) before the epilogue. The tensor cores truncate
//   when they accumulate: with the three products accumulated into the
//   running sum, the error was 3.5-7x the f32 tiled kernel's at K
//   1024-4096. The scale is a multiply by 2^e, not a vector ldexp (46.3 ->
//   92.8 TFLOP/s at 4096^3). Measurements: docs/perf/matmul.md#f32-split.
// Output and epilogue tensors: Elem (text-specialised, f16 or f32).
//   OUT_BF16 = 1 (Elem f32, N even): the output is bf16, each invocation
//   rounding two adjacent columns to nearest even (half_bits.wgsl) and
//   storing them as one word (`OutStore` = u32): no f32 result and no
//   rounding pass after the kernel (src/ops/matmul/bf16.rs).
// Transposed operands (TRANS_A, TRANS_B = 1: A stored [K, M], B stored
//   [N, K], read in place): the 16-byte runs go along the stored rows (m for
//   A^T, k for B^T) and the put scatters their 8 halves down a column of the
//   usual row-major tile, so the fragments load as for row-major operands.
//   TRANS_COLMAJOR = 1 instead stages the tile as stored (A^T [BK][BM + 8],
//   B^T [BN][BK + 8], 16-byte stores) and reads the fragments with the
//   column-major cooperative load (`coopLoad`).
// Constraints: any M, N, K: elements of A and B past K are zeroed, rows and
//   columns of C past M and N are never stored. Vulkan only: naga's MSL backend
//   has 8 x 8 simdgroup matrices and its HLSL backend none.
// Params: matmul_params.wgsl (appended by the registry).
// Batching: as the other matmul kernels (two batch indices with strides).

enable f16;
enable wgpu_cooperative_matrix;

// The output's element type; the epilogue part reads bias and residual as Elem.
alias Elem = f32;
// The epilogue's tensors: the output type (Elem here; the other matmul
// kernels specialise Out separately).
alias Out = Elem;
// 1: A and B are f32, converted to f16 when staged (reduced precision).
const INPUT_F32: u32 = 0u;
// 1: A and B are bf16 (the same 2-byte layout as f16), widened exactly and
// narrowed to f16 when staged.
const INPUT_BF16: u32 = 0u;
// 1 (with INPUT_F32): each f32 value split into two halves, three products
// per fragment pair: f32's accuracy (see "Split f32" above).
const SPLIT: u32 = 0u;
// 1 (with INPUT_BF16): each operand scaled by its power of two before the
// narrowing to f16 (see "bf16 inputs" above).
const BF16_SCALED: u32 = 0u;
// 1: bf16 output, two columns per u32 word (see "Output" above).
const OUT_BF16: u32 = 0u;
// The output binding's element: Elem, or u32 with OUT_BF16 (rewritten).
alias OutStore = Elem;

const WARPS_M: u32 = 2u;
const WARPS_N: u32 = 4u;
const BK: u32 = 32u;
const FN: u32 = 2u;
const SG: u32 = 32u;
// 1: rows of A and B start on 16 bytes (row strides multiples of 8), one
// 16-byte load per 8 halves. 0: any row stride (K or N = 1793 as they are):
// 8 halves come from 4 or 5 32-bit loads and a shift, no padding copies.
const ALIGNED: u32 = 1u;
// 1: the operand is stored transposed (A as [K, M], B as [N, K]).
const TRANS_A: u32 = 0u;
const TRANS_B: u32 = 0u;
// 1: transposed tiles staged as stored and read column-major.
const TRANS_COLMAJOR: u32 = 0u;
// Timing probe (WGTILE_COOP_PROBE; 0 off, results wrong when set), to see
// what each part of the K loop costs: bit 0 issues half the multiply-adds
// (each slice's 6 fragments still all used, FN 2 only); bit 1 loads the
// fragments once before the loop and reuses them; bit 2 issues the global
// loads of the first step only; bit 3 skips the staging of every step
// after the first (no global loads either); bit 4 drops the loop's two
// barriers. What each bit measured at 4096 (H200, run 103):
// docs/perf/matmul.md#where-the-time-goes.
const PROBE: u32 = 0u;
// Edge checks per dimension (1, the default: any size; 0 when M, N or K
// is a multiple of BM, BN or BK, so no run or element can pass it and the
// compares go). The host sets 0 for the split kernel (the padding layer
// runs it on a padded K of whole steps where it copies both operands;
// WGTILE_COOP_EDGES=0 keeps every check). The split kernel gains 3.5-8%
// (runs 114-115); the f16 kernel, at 125 of 128 registers, lost up to
// 0.87x without them and keeps every check: docs/perf/matmul.md#f32-split.
const EDGE_M: u32 = 1u;
const EDGE_N: u32 = 1u;
const EDGE_K: u32 = 1u;
const CM_A: bool = TRANS_A == 1u && TRANS_COLMAJOR == 1u;
const CM_B: bool = TRANS_B == 1u && TRANS_COLMAJOR == 1u;

const WARPS: u32 = WARPS_M * WARPS_N;
const THREADS: u32 = WARPS * SG;
const BM: u32 = WARPS_M * 64u;
const BN: u32 = WARPS_N * FN * 16u;
// Staged row lengths (halves): the tile's rows, or the stored rows (CM_*).
const LDA: u32 = select(BK, BM, CM_A) + 8u;
const LDB: u32 = select(BN, BK, CM_B) + 8u;
// 16-byte runs per row of the block as stored (k, or m for A^T; n, or k for B^T).
const A_RUNS: u32 = select(BK, BM, TRANS_A == 1u) / 8u;
const B_RUNS: u32 = select(BN, BK, TRANS_B == 1u) / 8u;
// 16-byte loads per tile, and per invocation (rounded up; the last round is guarded).
const A_VECS: u32 = BM * BK / 8u;
const B_VECS: u32 = BK * BN / 8u;
const A_LOADS: u32 = (A_VECS + THREADS - 1u) / THREADS;
const B_LOADS: u32 = (B_VECS + THREADS - 1u) / THREADS;

// 8 halves per vec4<u32>: one 16-byte load.
@group(0) @binding(1) var<storage, read> lhs: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read> rhs: array<vec4<u32>>;
@group(0) @binding(3) var<storage, read_write> out: array<OutStore>;
// The same buffers as 32-bit words, for the unaligned loads (bound always).
@group(0) @binding(7) var<storage, read> lhs_w: array<u32>;
@group(0) @binding(8) var<storage, read> rhs_w: array<u32>;

// Halves of one A or B tile (SPLIT: the lo tile follows the hi one).
const A_TILE: u32 = BM * BK / (LDA - 8u) * LDA;
const B_TILE: u32 = BK * BN / (LDB - 8u) * LDB;
var<workgroup> a_sh: array<vec4<f16>, (1u + SPLIT) * A_TILE / 4u>;
var<workgroup> b_sh: array<vec4<f16>, (1u + SPLIT) * B_TILE / 4u>;
var<workgroup> c_sh: array<f32, WARPS * 256u>;

// SPLIT: the largest finite |A| and |B| (matmul_split_scale.wgsl), binding 9.
// @gen split_decl
// Quantised B: its bindings and decoding (empty otherwise).
// @gen quant_decl
// SPLIT: A's and B's exponents (ea, eb), set at the start.
var<private> unscale: vec2<i32>;
// SPLIT: 2^ea and 2^eb, the factors the staged values are multiplied by.
var<private> split_scale: vec2<f32>;

// Stores 8 halves at half offset `dst` (a multiple of 8) of the A or B tile.
fn store_halves(dst: u32, lo: vec4<f16>, hi: vec4<f16>, is_a: bool) {
    let d = dst / 4u;
    if is_a {
        a_sh[d] = lo;
        a_sh[d + 1u] = hi;
    } else {
        b_sh[d] = lo;
        b_sh[d + 1u] = hi;
    }
}

// Two 16-bit values per word as f32: f16 (unpack2x16float widens exactly)
// or bf16 (INPUT_BF16: the top half of an f32).
fn unpack_pair(w: u32) -> vec2<f32> {
    if INPUT_BF16 == 1u {
        return bitcast<vec2<f32>>(vec2<u32>(w << 16u, w & 0xffff0000u));
    }
    return unpack2x16float(w);
}

// 8 halves as two vec4<f16>; f16() narrows back exactly (for bf16, values
// f16 holds; the range test bounds the others, cast.wgsl; scaled bf16
// values times their operand's 2^e first).
fn halves8(v: vec4<u32>, is_a: bool) -> array<vec4<f16>, 2> {
    if INPUT_BF16 == 1u && BF16_SCALED == 1u {
        let s = select(split_scale.y, split_scale.x, is_a);
        return array<vec4<f16>, 2>(
            vec4<f16>(vec4<f32>(unpack_pair(v.x), unpack_pair(v.y)) * s),
            vec4<f16>(vec4<f32>(unpack_pair(v.z), unpack_pair(v.w)) * s),
        );
    }
    return array<vec4<f16>, 2>(
        vec4<f16>(vec4<f32>(unpack_pair(v.x), unpack_pair(v.y))),
        vec4<f16>(vec4<f32>(unpack_pair(v.z), unpack_pair(v.w))),
    );
}

fn store8(dst: u32, v: vec4<u32>, is_a: bool) {
    let h = halves8(v, is_a);
    store_halves(dst, h[0], h[1], is_a);
}

fn put_half(i: u32, h: f16, is_a: bool) {
    if is_a {
        a_sh[i / 4u][i % 4u] = h;
    } else {
        b_sh[i / 4u][i % 4u] = h;
    }
}

// A transposed run: its 8 halves go down a column of the tile, `step`
// halves apart, from half offset `dst`.
fn scatter8(dst: u32, step: u32, v: vec4<u32>, is_a: bool) {
    let h = halves8(v, is_a);
    let lo = h[0];
    let hi = h[1];
    put_half(dst, lo.x, is_a);
    put_half(dst + step, lo.y, is_a);
    put_half(dst + 2u * step, lo.z, is_a);
    put_half(dst + 3u * step, lo.w, is_a);
    put_half(dst + 4u * step, hi.x, is_a);
    put_half(dst + 5u * step, hi.y, is_a);
    put_half(dst + 6u * step, hi.z, is_a);
    put_half(dst + 7u * step, hi.w, is_a);
}

// Word w of A or B, 0 past the buffer's end (the last row's run may reach
// beyond the data; those halves are never used as values).
fn word_a(w: u32) -> u32 {
    if w < arrayLength(&lhs_w) {
        return lhs_w[w];
    }
    return 0u;
}

fn word_b(w: u32) -> u32 {
    if w < arrayLength(&rhs_w) {
        return rhs_w[w];
    }
    return 0u;
}

// The 8 halves from half index e on, whatever e's alignment: the 4 words
// from e / 2, shifted by one half when e is odd.
fn shift_halves(v: vec4<u32>, next: u32, odd: bool) -> vec4<u32> {
    if !odd {
        return v;
    }
    return vec4<u32>(
        (v.x >> 16u) | (v.y << 16u),
        (v.y >> 16u) | (v.z << 16u),
        (v.z >> 16u) | (v.w << 16u),
        (v.w >> 16u) | (next << 16u),
    );
}

// Fetch and put: a fetch only issues the global loads (raw words, zero where
// the run is out of bounds); everything computed from the loaded values (the
// shift of an odd-aligned run, the mask past K, the f16 unpacking) happens
// in the put, after the multiply-adds. Using a loaded value right away would
// make the subgroup wait for the load there and undo the prefetch.

// Run j of an invocation in the A tile: (half index in A, k of its first
// half, 1 when in bounds). Runs go along the stored rows: k (A as stored) or
// m (A^T). Halves past M (A^T) or N (B) only reach rows or columns of C that
// are never stored; halves past K are zeroed in the put (runs along k) or
// the whole run is (runs along m or n, whose row is one k).
fn a_run(j: u32, tid: u32, a_base: u32, row0: u32, k0: u32) -> vec3<u32> {
    let i = tid + j * THREADS;
    let r = i / A_RUNS;
    let c = (i % A_RUNS) * 8u;
    if TRANS_A == 1u {
        let gk = k0 + r;
        let gm = row0 + c;
        let inside = i < A_VECS && (EDGE_K == 0u || gk < params.k) && (EDGE_M == 0u || gm < params.m);
        // Stored rows (one per k) are a_col_stride apart: A(m, k) = m + k * pitch.
        return vec3<u32>(a_base + gk * params.a_col_stride + gm, gk, u32(inside));
    }
    let gr = row0 + r;
    let gk = k0 + c;
    let inside = i < A_VECS && (EDGE_M == 0u || gr < params.m) && (EDGE_K == 0u || gk < params.k);
    return vec3<u32>(a_base + gr * params.a_row_stride + gk, gk, u32(inside));
}

fn b_run(j: u32, tid: u32, b_base: u32, col0: u32, k0: u32) -> vec3<u32> {
    let i = tid + j * THREADS;
    let r = i / B_RUNS;
    let c = (i % B_RUNS) * 8u;
    if TRANS_B == 1u {
        let gn = col0 + r;
        let gk = k0 + c;
        let inside = i < B_VECS && (EDGE_N == 0u || gn < params.n) && (EDGE_K == 0u || gk < params.k);
        // @gen quant_run
        // Stored rows (one per n) are b_col_stride apart: B(k, n) = k + n * pitch.
        return vec3<u32>(b_base + gn * params.b_col_stride + gk, gk, u32(inside));
    }
    let gk = k0 + r;
    let gc = col0 + c;
    let inside = i < B_VECS && (EDGE_K == 0u || gk < params.k) && (EDGE_N == 0u || gc < params.n);
    return vec3<u32>(b_base + gk * params.b_row_stride + gc, gk, u32(inside));
}

// The 16 bytes (ALIGNED) or the 4 words from half e / 2 on; for f32 inputs
// the first 4 of the run's 8 floats.
fn fetch_a(r: vec3<u32>) -> vec4<u32> {
    if r.z == 0u {
        return vec4<u32>();
    }
    if INPUT_F32 == 1u {
        if ALIGNED == 1u {
            return lhs[r.x / 4u];
        }
        return vec4<u32>(word_a(r.x), word_a(r.x + 1u), word_a(r.x + 2u), word_a(r.x + 3u));
    }
    if ALIGNED == 1u {
        return lhs[r.x / 8u];
    }
    let w = r.x / 2u;
    return vec4<u32>(word_a(w), word_a(w + 1u), word_a(w + 2u), word_a(w + 3u));
}

// The fifth word an odd-aligned run needs (unaligned layouts only).
fn fetch_a_tail(r: vec3<u32>) -> u32 {
    if INPUT_F32 == 1u || ALIGNED == 1u || r.z == 0u || (r.x & 1u) == 0u {
        return 0u;
    }
    return word_a(r.x / 2u + 4u);
}

// f32 inputs: the run's last 4 floats (zero for f16 inputs).
fn fetch_a_hi(r: vec3<u32>) -> vec4<u32> {
    if INPUT_F32 == 0u || r.z == 0u {
        return vec4<u32>();
    }
    if ALIGNED == 1u {
        return lhs[r.x / 4u + 1u];
    }
    return vec4<u32>(word_a(r.x + 4u), word_a(r.x + 5u), word_a(r.x + 6u), word_a(r.x + 7u));
}

fn fetch_b_hi(r: vec3<u32>) -> vec4<u32> {
    if INPUT_F32 == 0u || r.z == 0u {
        return vec4<u32>();
    }
    if ALIGNED == 1u {
        return rhs[r.x / 4u + 1u];
    }
    return vec4<u32>(word_b(r.x + 4u), word_b(r.x + 5u), word_b(r.x + 6u), word_b(r.x + 7u));
}

fn fetch_b(r: vec3<u32>) -> vec4<u32> {
    if r.z == 0u {
        return vec4<u32>();
    }
    // @gen quant_fetch
    if INPUT_F32 == 1u {
        if ALIGNED == 1u {
            return rhs[r.x / 4u];
        }
        return vec4<u32>(word_b(r.x), word_b(r.x + 1u), word_b(r.x + 2u), word_b(r.x + 3u));
    }
    if ALIGNED == 1u {
        return rhs[r.x / 8u];
    }
    let w = r.x / 2u;
    return vec4<u32>(word_b(w), word_b(w + 1u), word_b(w + 2u), word_b(w + 3u));
}

fn fetch_b_tail(r: vec3<u32>) -> u32 {
    if INPUT_F32 == 1u || ALIGNED == 1u || r.z == 0u || (r.x & 1u) == 0u {
        return 0u;
    }
    return word_b(r.x / 2u + 4u);
}

// SPLIT: run r's 8 floats (v, hi as loaded; masked past K like run_halves)
// times `scale` = 2^e as hi and lo halves (split_hi, split_f32.wgsl), packed
// 8 to a vec4<u32> each. A multiply by the power of two, not ldexp: the
// same values (2^e is a normal f32), and a vector ldexp per staged value
// cost the tensor-core attention kernel 40% of its time (H200, run 80).
fn run_split(r: vec3<u32>, v: vec4<u32>, hi: vec4<u32>, mask_k: bool, scale: f32) -> array<vec4<u32>, 2> {
    var x0 = bitcast<vec4<f32>>(v) * scale;
    var x1 = bitcast<vec4<f32>>(hi) * scale;
    if mask_k && EDGE_K == 1u && r.y + 8u > params.k {
        let ks = vec4<u32>(r.y) + vec4<u32>(0u, 1u, 2u, 3u);
        x0 = select(vec4<f32>(), x0, ks < vec4<u32>(params.k));
        x1 = select(vec4<f32>(), x1, ks + vec4<u32>(4u) < vec4<u32>(params.k));
    }
    let h0 = split_hi(x0);
    let h1 = split_hi(x1);
    let l0 = x0 - h0;
    let l1 = x1 - h1;
    return array<vec4<u32>, 2>(
        vec4<u32>(pack2x16float(h0.xy), pack2x16float(h0.zw), pack2x16float(h1.xy), pack2x16float(h1.zw)),
        vec4<u32>(pack2x16float(l0.xy), pack2x16float(l0.zw), pack2x16float(l1.xy), pack2x16float(l1.zw)),
    );
}

// The 8 halves of run r from its fetched words: shifted when odd-aligned,
// zeroed from K on when the run passes K (`mask_k`; padding or the next row).
fn run_halves(r: vec3<u32>, v: vec4<u32>, hi: vec4<u32>, tail: u32, mask_k: bool) -> vec4<u32> {
    if INPUT_F32 == 1u {
        // f32 -> f16 (saturating: pack2x16float leaves out-of-range values
        // indeterminate), elements from K on zeroed.
        var lo = clamp(bitcast<vec4<f32>>(v), vec4<f32>(-65504.0), vec4<f32>(65504.0));
        var up = clamp(bitcast<vec4<f32>>(hi), vec4<f32>(-65504.0), vec4<f32>(65504.0));
        if mask_k && EDGE_K == 1u && r.y + 8u > params.k {
            let ks = vec4<u32>(r.y) + vec4<u32>(0u, 1u, 2u, 3u);
            lo = select(vec4<f32>(), lo, ks < vec4<u32>(params.k));
            up = select(vec4<f32>(), up, ks + vec4<u32>(4u) < vec4<u32>(params.k));
        }
        return vec4<u32>(
            pack2x16float(lo.xy),
            pack2x16float(lo.zw),
            pack2x16float(up.xy),
            pack2x16float(up.zw),
        );
    }
    var x = v;
    if ALIGNED == 0u {
        x = shift_halves(x, tail, (r.x & 1u) == 1u);
    }
    if mask_k && EDGE_K == 1u && r.y + 8u > params.k {
        let lo = vec4<u32>(0u, 2u, 4u, 6u) + vec4<u32>(r.y);
        let k4 = vec4<u32>(params.k);
        let keep = select(vec4<u32>(), vec4<u32>(0xffffu), lo < k4)
            | select(vec4<u32>(), vec4<u32>(0xffff0000u), lo + vec4<u32>(1u) < k4);
        x &= keep;
    }
    return x;
}

// The 16 x 16 A fragment at tile row r, k offset kk (vec4 units):
// row-major, or column-major from a tile staged as stored (CM_A).
fn frag_a(r: u32, kk: u32) -> coop_mat16x16<f16, A> {
    if CM_A {
        return coopLoad<coop_mat16x16<f16, A>>(&a_sh[(kk * LDA + r) / 4u], LDA / 4u);
    }
    return coopLoadT<coop_mat16x16<f16, A>>(&a_sh[(r * LDA + kk) / 4u], LDA / 4u);
}

// The B fragment at k offset kk, tile column c.
fn frag_b(kk: u32, c: u32) -> coop_mat16x16<f16, B> {
    if CM_B {
        return coopLoad<coop_mat16x16<f16, B>>(&b_sh[(c * LDB + kk) / 4u], LDB / 4u);
    }
    return coopLoadT<coop_mat16x16<f16, B>>(&b_sh[(kk * LDB + c) / 4u], LDB / 4u);
}

// SPLIT: the same fragments from the lo tiles. (Separate functions: a
// parameter choosing the tile cost the f16 kernel 1.4%, H200 run 73.)
fn frag_a_lo(r: u32, kk: u32) -> coop_mat16x16<f16, A> {
    if CM_A {
        return coopLoad<coop_mat16x16<f16, A>>(&a_sh[(A_TILE + kk * LDA + r) / 4u], LDA / 4u);
    }
    return coopLoadT<coop_mat16x16<f16, A>>(&a_sh[(A_TILE + r * LDA + kk) / 4u], LDA / 4u);
}

fn frag_b_lo(kk: u32, c: u32) -> coop_mat16x16<f16, B> {
    if CM_B {
        return coopLoad<coop_mat16x16<f16, B>>(&b_sh[(B_TILE + c * LDB + kk) / 4u], LDB / 4u);
    }
    return coopLoadT<coop_mat16x16<f16, B>>(&b_sh[(B_TILE + kk * LDB + c) / 4u], LDB / 4u);
}

// Writes one 16 x 16 accumulator tile at (row, col) of C through the
// subgroup's scratch, converting to f16 and skipping out-of-bounds elements.
// SPLIT: the sums are divided by 2^(ea + eb) first (unscale = (ea, eb)).
fn write_tile(acc: coop_mat16x16<f32, C>, warp: u32, lane: u32, z: u32, row: u32, col: u32) {
    let c_base = z * params.m * params.n;
    let scratch = warp * 256u;
    coopStoreT(acc, &c_sh[scratch], 16u);
    workgroupBarrier();
    if OUT_BF16 == 1u {
        // Columns c and c + 1 (c even, N even: both or neither stored).
        for (var e = lane; e < 128u; e += SG) {
            let r = row + e / 8u;
            let c = col + 2u * (e % 8u);
            if (EDGE_M == 0u || r < params.m) && (EDGE_N == 0u || c < params.n) {
                var x = vec2<f32>(c_sh[scratch + 2u * e], c_sh[scratch + 2u * e + 1u]);
                if SPLIT == 1u || BF16_SCALED == 1u {
                    x = ldexp(ldexp(x, vec2<i32>(-unscale.x)), vec2<i32>(-unscale.y));
                }
                let lo = f32_bits_to_bf16(bitcast<u32>(epilogue(x.x, z, r, c)));
                let hi = f32_bits_to_bf16(bitcast<u32>(epilogue(x.y, z, r, c + 1u)));
                out[(c_base + r * params.n + c) / 2u] = OutStore(lo | (hi << 16u));
            }
        }
        workgroupBarrier();
        return;
    }
    for (var e = lane; e < 256u; e += SG) {
        let r = row + e / 16u;
        let c = col + e % 16u;
        if (EDGE_M == 0u || r < params.m) && (EDGE_N == 0u || c < params.n) {
            if SPLIT == 1u || BF16_SCALED == 1u {
                let x = ldexp(ldexp(c_sh[scratch + e], -unscale.x), -unscale.y);
                out[c_base + r * params.n + c] = OutStore(epilogue(x, z, r, c));
                continue;
            }
            out[c_base + r * params.n + c] = OutStore(epilogue(c_sh[scratch + e], z, r, c));
        }
    }
    workgroupBarrier();
}

@compute @workgroup_size(THREADS, 1, 1)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
    @builtin(subgroup_id) warp: u32,
    @builtin(subgroup_invocation_id) lane: u32,
) {
    let k = params.k;
    let row0 = wid.y * BM;
    let col0 = wid.x * BN;
    let z = params.batch_base + wid.z;
    let z0 = z / params.batch_inner;
    let z1 = z % params.batch_inner;
    let a_base = z0 * params.a_stride0 + z1 * params.a_stride1;
    let b_base = z0 * params.b_stride0 + z1 * params.b_stride1;
    let wr = (warp / WARPS_N) * 64u;
    let wc = (warp % WARPS_N) * (16u * FN);

    var acc00: coop_mat16x16<f32, C>;
    var acc01: coop_mat16x16<f32, C>;
    var acc02: coop_mat16x16<f32, C>;
    var acc03: coop_mat16x16<f32, C>;
    var acc10: coop_mat16x16<f32, C>;
    var acc11: coop_mat16x16<f32, C>;
    var acc12: coop_mat16x16<f32, C>;
    var acc13: coop_mat16x16<f32, C>;
    var acc20: coop_mat16x16<f32, C>;
    var acc21: coop_mat16x16<f32, C>;
    var acc22: coop_mat16x16<f32, C>;
    var acc23: coop_mat16x16<f32, C>;
    var acc30: coop_mat16x16<f32, C>;
    var acc31: coop_mat16x16<f32, C>;
    var acc32: coop_mat16x16<f32, C>;
    var acc33: coop_mat16x16<f32, C>;
    // SPLIT: A's and B's exponents into `unscale` and `split_scale`, and
    // `zc`, the zero tile each k slice's products start from.
    // @gen split_exps

    var pa: array<vec4<u32>, A_LOADS>;
    var pb: array<vec4<u32>, B_LOADS>;
    var ha: array<vec4<u32>, A_LOADS>;
    var hb: array<vec4<u32>, B_LOADS>;
    var ta: array<u32, A_LOADS>;
    var tb: array<u32, B_LOADS>;
    for (var j = 0u; j < A_LOADS; j++) {
        let r = a_run(j, tid, a_base, row0, 0u);
        pa[j] = fetch_a(r);
        ha[j] = fetch_a_hi(r);
        ta[j] = fetch_a_tail(r);
    }
    for (var j = 0u; j < B_LOADS; j++) {
        let r = b_run(j, tid, b_base, col0, 0u);
        pb[j] = fetch_b(r);
        hb[j] = fetch_b_hi(r);
        tb[j] = fetch_b_tail(r);
    }

    // PROBE bit 1: fragments loaded once (from a tile staged now) and reused.
    var fa0: coop_mat16x16<f16, A>;
    var fa1: coop_mat16x16<f16, A>;
    var fa2: coop_mat16x16<f16, A>;
    var fa3: coop_mat16x16<f16, A>;
    var fb0: coop_mat16x16<f16, B>;
    var fb1: coop_mat16x16<f16, B>;
    if (PROBE & 2u) != 0u {
        workgroupBarrier();
        fa0 = frag_a(wr, 0u);
        fa1 = frag_a(wr + 16u, 0u);
        fa2 = frag_a(wr + 32u, 0u);
        fa3 = frag_a(wr + 48u, 0u);
        fb0 = frag_b(0u, wc);
        fb1 = frag_b(0u, wc + 16u);
    }

    for (var k0 = 0u; k0 < k; k0 += BK) {
        // Stage the prefetched step in workgroup memory.
        for (var j = 0u; j < A_LOADS; j++) {
            let i = tid + j * THREADS;
            if (PROBE & 8u) != 0u && k0 > 0u {
                break;
            }
            if i < A_VECS {
                let r = a_run(j, tid, a_base, row0, k0);
                if SPLIT == 1u {
                    let hl = run_split(r, pa[j], ha[j], TRANS_A == 0u, split_scale.x);
                    if TRANS_A == 1u && !CM_A {
                        let dst = (i % A_RUNS) * 8u * LDA + i / A_RUNS;
                        scatter8(dst, LDA, hl[0], true);
                        scatter8(A_TILE + dst, LDA, hl[1], true);
                    } else {
                        let dst = (i / A_RUNS) * LDA + (i % A_RUNS) * 8u;
                        store8(dst, hl[0], true);
                        store8(A_TILE + dst, hl[1], true);
                    }
                    continue;
                }
                let v = run_halves(r, pa[j], ha[j], ta[j], TRANS_A == 0u);
                if TRANS_A == 1u && !CM_A {
                    // Run at k = i / A_RUNS, rows m = (i % A_RUNS) * 8 ..
                    scatter8((i % A_RUNS) * 8u * LDA + i / A_RUNS, LDA, v, true);
                } else {
                    store8((i / A_RUNS) * LDA + (i % A_RUNS) * 8u, v, true);
                }
            }
        }
        for (var j = 0u; j < B_LOADS; j++) {
            let i = tid + j * THREADS;
            if (PROBE & 8u) != 0u && k0 > 0u {
                break;
            }
            if i < B_VECS {
                let r = b_run(j, tid, b_base, col0, k0);
                // @gen quant_put
                if SPLIT == 1u {
                    let hl = run_split(r, pb[j], hb[j], TRANS_B == 1u, split_scale.y);
                    if TRANS_B == 1u && !CM_B {
                        let dst = (i % B_RUNS) * 8u * LDB + i / B_RUNS;
                        scatter8(dst, LDB, hl[0], false);
                        scatter8(B_TILE + dst, LDB, hl[1], false);
                    } else {
                        let dst = (i / B_RUNS) * LDB + (i % B_RUNS) * 8u;
                        store8(dst, hl[0], false);
                        store8(B_TILE + dst, hl[1], false);
                    }
                    continue;
                }
                let v = run_halves(r, pb[j], hb[j], tb[j], TRANS_B == 1u);
                if TRANS_B == 1u && !CM_B {
                    // Run at n = i / B_RUNS, k = (i % B_RUNS) * 8 ..
                    scatter8((i % B_RUNS) * 8u * LDB + i / B_RUNS, LDB, v, false);
                } else {
                    store8((i / B_RUNS) * LDB + (i % B_RUNS) * 8u, v, false);
                }
            }
        }
        if (PROBE & 16u) == 0u {
            workgroupBarrier();
        }
        // Issue the next step's global loads; they complete during the multiply-adds.
        if k0 + BK < k && (PROBE & 12u) == 0u {
            for (var j = 0u; j < A_LOADS; j++) {
                let r = a_run(j, tid, a_base, row0, k0 + BK);
                pa[j] = fetch_a(r);
                ha[j] = fetch_a_hi(r);
                ta[j] = fetch_a_tail(r);
            }
            for (var j = 0u; j < B_LOADS; j++) {
                let r = b_run(j, tid, b_base, col0, k0 + BK);
                pb[j] = fetch_b(r);
                hb[j] = fetch_b_hi(r);
                tb[j] = fetch_b_tail(r);
            }
        }
        for (var kk = 0u; kk < BK; kk += 16u) {
            // SPLIT: the slice's lo*hi, hi*lo and hi*hi from zero, added
            // to the accumulators in f32 (the generated block continues).
            if SPLIT == 1u {
                // @gen split_products
            }
            var a0 = fa0;
            var a1 = fa1;
            var a2 = fa2;
            var a3 = fa3;
            var b0 = fb0;
            var b1 = fb1;
            if (PROBE & 2u) == 0u {
                a0 = frag_a(wr, kk);
                a1 = frag_a(wr + 16u, kk);
                a2 = frag_a(wr + 32u, kk);
                a3 = frag_a(wr + 48u, kk);
                b0 = frag_b(kk, wc);
                b1 = frag_b(kk, wc + 16u);
            }
            if (PROBE & 1u) != 0u {
                acc00 = coopMultiplyAdd(a0, b0, acc00);
                acc11 = coopMultiplyAdd(a1, b1, acc11);
                acc20 = coopMultiplyAdd(a2, b0, acc20);
                acc31 = coopMultiplyAdd(a3, b1, acc31);
                continue;
            }
            acc00 = coopMultiplyAdd(a0, b0, acc00);
            acc01 = coopMultiplyAdd(a0, b1, acc01);
            acc10 = coopMultiplyAdd(a1, b0, acc10);
            acc11 = coopMultiplyAdd(a1, b1, acc11);
            acc20 = coopMultiplyAdd(a2, b0, acc20);
            acc21 = coopMultiplyAdd(a2, b1, acc21);
            acc30 = coopMultiplyAdd(a3, b0, acc30);
            acc31 = coopMultiplyAdd(a3, b1, acc31);
            if FN == 4u {
                let b2 = frag_b(kk, wc + 32u);
                let b3 = frag_b(kk, wc + 48u);
                acc02 = coopMultiplyAdd(a0, b2, acc02);
                acc03 = coopMultiplyAdd(a0, b3, acc03);
                acc12 = coopMultiplyAdd(a1, b2, acc12);
                acc13 = coopMultiplyAdd(a1, b3, acc13);
                acc22 = coopMultiplyAdd(a2, b2, acc22);
                acc23 = coopMultiplyAdd(a2, b3, acc23);
                acc32 = coopMultiplyAdd(a3, b2, acc32);
                acc33 = coopMultiplyAdd(a3, b3, acc33);
            }
        }
        if (PROBE & 16u) == 0u {
            workgroupBarrier();
        }
    }

    let r = row0 + wr;
    let c = col0 + wc;
    write_tile(acc00, warp, lane, z, r + 0u, c + 0u);
    write_tile(acc01, warp, lane, z, r + 0u, c + 16u);
    write_tile(acc10, warp, lane, z, r + 16u, c + 0u);
    write_tile(acc11, warp, lane, z, r + 16u, c + 16u);
    write_tile(acc20, warp, lane, z, r + 32u, c + 0u);
    write_tile(acc21, warp, lane, z, r + 32u, c + 16u);
    write_tile(acc30, warp, lane, z, r + 48u, c + 0u);
    write_tile(acc31, warp, lane, z, r + 48u, c + 16u);
    if FN == 4u {
        write_tile(acc02, warp, lane, z, r + 0u, c + 32u);
        write_tile(acc03, warp, lane, z, r + 0u, c + 48u);
        write_tile(acc12, warp, lane, z, r + 16u, c + 32u);
        write_tile(acc13, warp, lane, z, r + 16u, c + 48u);
        write_tile(acc22, warp, lane, z, r + 32u, c + 32u);
        write_tile(acc23, warp, lane, z, r + 32u, c + 48u);
        write_tile(acc32, warp, lane, z, r + 48u, c + 32u);
        write_tile(acc33, warp, lane, z, r + 48u, c + 48u);
    }
}
