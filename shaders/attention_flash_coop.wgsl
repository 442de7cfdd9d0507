// attention_flash_coop: FlashAttention forward on tensor cores (WGSL
// cooperative matrices, wgpu's experimental `wgpu_cooperative_matrix`):
// f16 Q, K, V, f32 accumulation and f32 softmax statistics, Elem output.
//
// Algorithm (FlashAttention-2 forward): a workgroup owns BR = W * RF * 16
//   query rows of one (batch, query head) and is W subgroups; subgroup w owns
//   RF fragments of 16 rows (rows (w RF + f) 16 ..). Its Q fragments are
//   loaded once (staged through workgroup memory, zero past Sq) into RF * D16
//   cooperative A matrices kept in registers. The visible key blocks of BC
//   keys are walked in order (blocks that causal/window masking or the key
//   length hide completely are never loaded); per block:
//   1. K's block is in `kv_sh` as stored ([BC][LDKV] f16). S = Q K^T: the
//      B fragments of K^T are K's 16 x 16 blocks read column-major
//      (`coopLoad`, load_bt_kv), each serving the subgroup's RF row
//      fragments. Each 16 x 16 S tile goes to the subgroup's f32 scratch
//      `s_sh`.
//   2. Barrier; V's block (prefetched into registers before step 1) is put
//      into `kv_sh`. The subgroup's lanes apply `logit` (attention_common:
//      scale, soft-cap, causal/window, masks, key lengths; interior blocks
//      without a mask tensor or soft-cap take only the scale, folded into
//      the max and the exponent's fma) and the online softmax: LPR = SG / 16
//      lanes per row, each reading its columns 4 at a time (vec4 loads of
//      the scratch; groups 4 cg + 4 LPR g), partial maxima combined by
//      subgroup shuffles. P = exp2(t - m_ref) is written as f16 to the
//      subgroup's `p_sh`, 4 halves per store; l sums the f32 values (NaN
//      when a score is: a running sum of the scores catches it). K's
//      next block is fetched into registers. Measured (H200, run 66,
//      timing probes at B4 H16 S4096 D128): the products are the smallest
//      share of this kernel's time; the softmax, the loads and the barriers
//      each cost more (docs/perf/attention.md#tensor-core-forward).
//   3. Conditional rescaling: the O accumulators are cooperative matrices
//      and cannot be scaled per row in place, so each row keeps a reference
//      max m_ref and moves it only when a block's max exceeds it by more than
//      RESCALE (log2 units; P <= 2^RESCALE stays exact enough in f16 and l
//      stays finite). Then the workgroup (one flag, uniform) spills O through
//      `s_sh`, scales the rows by exp2(m_old - m_new) (1 for other rows) and
//      loads it back; l is scaled in the lane. Random data almost never
//      triggers it after the first block.
//   4. O += P V: P's A fragments from `p_sh` (coopLoadT), V's B fragments
//      row-major from `kv_sh` (coopLoadT, each serving the RF row
//      fragments), RF * DV16 f32 accumulators.
//   5. Barrier; K's next block is put into `kv_sh`; barrier.
//   End: l summed over the row's lanes, O tiles stored to `s_sh`, divided by
//   l and written with bounds checks as Elem, or as bf16 (O_BF16 = 1, f16
//   inputs: two values per word, `OStore` = u32, for the bf16 plans that
//   stage their operands to f16); lse = (m_ref + log2 l) ln 2.
//   Rows with no visible key give O = 0 and lse = -inf; a NaN logit makes
//   its row NaN.
// f32 inputs (SPLIT = 1; Elem = f32): each value x of q, k and v, scaled
//   by its head's 2^e (attention_split_scale.wgsl, a pass before this one;
//   per-head maxima at binding 13), is split into two halves, hi (x rounded
//   to 11 significant bits) and lo = x - hi rounded to f16 (split_halves),
//   staged one after the other (kv_sh and p_sh twice as long, the lo block
//   at KV_LO, P_LO), and every product takes three tensor-core
//   multiply-adds, lo*hi + hi*lo + hi*hi (the error of the dropped lo*lo and
//   of rounding lo is ~2^-20 of the product; as CUTLASS's 3xTF32 does it),
//   from a zero tile per 16-wide slice, added to S or O in f32: the tensor
//   cores truncate when they accumulate, which in the running sums cost 4x
//   the error (H200, run 83: 8e-7 against 2e-7 from the scalar kernel).
//   P is split the same way (no scale: P <= 2^RESCALE). Q's fragments are
//   held twice (hi and lo), the scores are divided by 2^(eq + ek) before the
//   softmax and O by 2^ev at the end. Loads are 16 bytes, 4 floats; 8
//   storage buffers. Measured (H200, run 84, S4096 D128): 65.7 TFLOP/s
//   with 4 subgroups, PyTorch's fp32 SDPA 46.2. The scale is a multiply by
//   2^e (split4): a vector ldexp per staged value held the kernel at 42
//   (runs 72-81; timing probe 64 showed it). Measurements:
//   docs/perf/attention.md#f32-on-tensor-cores.
// Loads: 16 bytes (8 halves) per load: q, k, v are bound as vec4<u32> at
//   bindings 10, 11, 12 (attention_common's f16 views at 1-3 stay unused, so
//   the kernel needs 7 storage buffers). The host guarantees every stride of
//   q, k, v is a multiple of 8 halves (D, Dv multiples of 16 make it so for
//   every layout wgtile builds). Prefetch follows the
//   fetch/put rule of matmul_coop: a fetch only issues loads (into `pre`),
//   the put (after the math) converts and stores.
// Workgroup memory: kv_sh max(BC * (max(D, Dv) + 8), 24 BR) f16 as vec4
//   (rows padded by 16 bytes; it also stages Q at the start), s_sh
//   W * RF * 16 * (BC + 8) f32, p_sh W * RF * 16 * (BC + 8) f16 (both as
//   vec4), 2 BR f32 and a vec4<u32> flag (FlashCoopTiles::workgroup_bytes:
//   the default W = 4, BC = 16 needs 13.8 KiB at D = Dv = 128).
// Text constants (tune::attention::FlashCoopTiles): W, RF, BC (16 | BC),
//   SG (fixed subgroup size, a multiple of 16), D and DV (head dims,
//   multiples of 16 up to 256), RESCALE, QCH (Q columns per staging pass,
//   checked by a const_assert), PROBE (debugging, 0).
// Grid: (ceil(Sq / BR), Hq, B); no split-KV, no packed GQA rows (decode
//   shapes use attention_flash.wgsl).
// Named fragments: every loop over fragments is unrolled by the host
//   (FlashCoopTiles::blocks generates the `// @gen NAME` blocks: declare,
//   load_q, qk, rescale, pv, store_o), so each cooperative matrix is a named
//   variable (q<f>_<d>, o<f>_<x>, s<f>) and never an element of an array
//   indexed in a loop, which a driver may keep in local memory.
// Alignment: every workgroup variable is a multiple of 16 bytes, so each
//   one starts 16-byte aligned, as cooperative loads and stores need (a u32
//   flag among them shifted every coop access by 4 bytes on the H200: the
//   wrong rows of runs 20-24).
// Matrix operations: through the types MatA, MatB, MatC and the functions
//   load_a_kv, load_bt_kv, load_b_kv, load_a_p, load_c_s,
//   store_c_s, mma, subgroup_of, lane_of of the part in front of this one:
//   attention_coop_mma.wgsl (cooperative matrices, the real kernel) or
//   attention_coop_emulated.wgsl (lane r of a virtual 16-lane subgroup
//   holds row r of each A and C matrix and reads B from workgroup memory:
//   slow, runs the same algorithm on adapters without tensor cores, for
//   tests; SG = 16, LPR = 1).
// Why these tiles (H200): 4 subgroups of 16 rows with 16-key blocks lead
//   the f16 sweep at D128 (2 subgroups at D <= 64); Q in workgroup memory,
//   separate K/V regions on subgroup barriers, D split between subgroup
//   pairs and one barrier fewer per block all lost:
//   docs/perf/attention.md#tensor-core-forward.
// Backends: the cooperative-matrix module is Vulkan only (naga's MSL backend
//   has 8 x 8 simdgroup matrices and its HLSL backend none); tests/shaders/kernels.rs
//   checks it for SPIR-V, the emulated one for every backend.

const W: u32 = 4u;
const RF: u32 = 1u;
const BC: u32 = 64u;
const SG: u32 = 32u;
const D: u32 = 128u;
const DV: u32 = 128u;
const RESCALE: u32 = 8u;
// 1: f32 inputs split into two halves each (see "f32 inputs" above).
const SPLIT: u32 = 0u;
// Debugging probe (0 off; WGTILE_COOP_ATTN_PROBE): 1 P = 1 for visible
// keys; 2 O = raw S of the first key block. Timing bits (results
// meaningless): 4 skips the softmax, 8 the products, 16 the K/V loads and
// puts after the first block, 32 the rescale check; SPLIT only: 64 stages
// K/V without the split arithmetic (hi = f16(x), lo = 0), 128 writes P
// without it.
const PROBE: u32 = 0u;
// 1: O written as bf16 words (see "End" above).
const O_BF16: u32 = 0u;

const THREADS: u32 = W * SG;
const BR: u32 = W * RF * 16u;
const D16: u32 = D / 16u;
const DV16: u32 = DV / 16u;
const BC16: u32 = BC / 16u;
const DX: u32 = max(D, DV);
const LDKV: u32 = DX + 8u;
// kv_sh also stages Q, QCH columns of the BR rows at a time (rows of LQ).
const KV_ELEMS: u32 = max(BC * LDKV, BR * 24u);
// (Set by the host, which unrolls the staging passes: FlashCoopTiles::qch.)
const QCH: u32 = 128u;
const_assert QCH == min(D, (KV_ELEMS / BR - 8u) / 16u * 16u);
const LQ: u32 = QCH + 8u;
// Scratch rows (floats, halves): multiples of 4 (the tiles are vec4
// arrays); BC + 8 puts the 4-column groups a quarter-warp reads or writes
// in distinct banks.
const LDS: u32 = BC + 8u;
const LDP: u32 = BC + 8u;
// Lanes per softmax row, and the columns each handles.
const LPR: u32 = SG / 16u;
const CPL: u32 = BC / LPR;
// Each lane's columns come in groups of 4 (c = 4 cg + 4 LPR g), read and
// written a vec4 at a time.
const CPL4: u32 = CPL / 4u;
const_assert CPL % 4u == 0u;
// 8-half runs per invocation for a BC-row block of the widest operand.
// Elements per 16-byte load: 8 halves, or 4 floats (SPLIT).
const RUN: u32 = select(8u, 4u, SPLIT == 1u);
const LOADS: u32 = (BC * DX / RUN + THREADS - 1u) / THREADS;
// SPLIT: the lo halves of a K/V block, and of P, follow the hi ones.
const KV_LO: u32 = KV_ELEMS;
const P_LO: u32 = W * RF * 16u * LDP;

@group(0) @binding(10) var<storage, read> q4: array<vec4<u32>>;
@group(0) @binding(11) var<storage, read> k4: array<vec4<u32>>;
@group(0) @binding(12) var<storage, read> v4: array<vec4<u32>>;

// Four halves per element: the staging stores 8 bytes at a time (the
// element index of half e is e / 4; every fragment starts at a multiple of
// 4 halves).
var<workgroup> kv_sh: array<vec4<f16>, (1u + SPLIT) * KV_ELEMS / 4u>;
var<workgroup> s_sh: array<vec4<f32>, W * RF * 16u * LDS / 4u>;
var<workgroup> p_sh: array<vec4<f16>, (1u + SPLIT) * P_LO / 4u>;
var<workgroup> alpha_sh: array<f32, BR>;
var<workgroup> l_sh: array<f32, BR>;
// A vec4, not a u32: every workgroup variable here is a multiple of 16
// bytes. The NVIDIA driver places them one after another, and cooperative
// loads and stores need 16-byte-aligned addresses: with a 4-byte flag among
// them, every coop access to the tiles after it was silently 4 bytes off
// (the wrong rows of runs 20-24; found with WGTILE_COOP_ATTN_PROBE=2).
var<workgroup> rescale_flag: vec4<u32>;

// SPLIT: the per-head maxima (attention_split_scale.wgsl), binding 13.
// @gen split_decl

// Run i of a block of BC rows starting at row0 with `width` columns:
// (element index of the run's first half, 1 when the row is in bounds).
fn run_of(i: u32, width: u32, row0: u32, limit: u32, base: u32, stride: u32) -> vec2<u32> {
    let per_row = width / RUN;
    let r = i / per_row;
    let c = (i % per_row) * RUN;
    let row = row0 + r;
    let inside = i < BC * per_row && row < limit;
    return vec2<u32>(base + row * stride + c, u32(inside));
}

// Global loads of one run (zero when out of bounds): 16 bytes of q
// (which = 0), k (1) or v (2).
fn fetch(which: u32, r: vec2<u32>) -> vec4<u32> {
    if r.y == 0u {
        return vec4<u32>();
    }
    let e = r.x / RUN;
    if which == 0u {
        return q4[e];
    } else if which == 1u {
        return k4[e];
    }
    return v4[e];
}

// Stores run i of a block with `width` columns into kv_sh: 8 halves, or
// (SPLIT) 4 floats times `scale` (2^e) as their hi and lo halves.
fn put(i: u32, width: u32, x: vec4<u32>, scale: f32) {
    let per_row = width / RUN;
    if i >= BC * per_row {
        return;
    }
    let dst = (i / per_row) * LDKV + (i % per_row) * RUN;
    if SPLIT == 1u && (PROBE & 64u) != 0u {
        kv_sh[dst / 4u] = vec4<f16>(bitcast<vec4<f32>>(x));
        kv_sh[(KV_LO + dst) / 4u] = vec4<f16>();
        return;
    }
    if SPLIT == 1u {
        let hl = split4(x, scale);
        kv_sh[dst / 4u] = hl[0];
        kv_sh[(KV_LO + dst) / 4u] = hl[1];
        return;
    }
    let h0 = vec2<f16>(unpack2x16float(x.x));
    let h1 = vec2<f16>(unpack2x16float(x.y));
    let h2 = vec2<f16>(unpack2x16float(x.z));
    let h3 = vec2<f16>(unpack2x16float(x.w));
    kv_sh[dst / 4u] = vec4<f16>(h0, h1);
    kv_sh[dst / 4u + 1u] = vec4<f16>(h2, h3);
}

// 4 floats (as loaded) times `scale` = 2^e, split into hi + lo
// (attention_split_scale chooses e so that no hi overflows). A multiply by
// the power of two, not ldexp: the same values (2^e is a normal f32), and
// a vector ldexp per staged value cost the H200 kernel 40% of its time
// (run 80, f32 S4096 D128: 13.1 against 7.5 ms without the split).
fn split4(x: vec4<u32>, scale: f32) -> array<vec4<f16>, 2> {
    return split_halves(bitcast<vec4<f32>>(x) * scale);
}

// x = hi + lo as two f16 values (split_hi, split_f32.wgsl).
fn split_halves(x: vec4<f32>) -> array<vec4<f16>, 2> {
    let hi = split_hi(x);
    return array<vec4<f16>, 2>(vec4<f16>(hi), vec4<f16>(x - hi));
}

// Q columns dc0 .. dc0 + QCH of the block's BR rows into kv_sh (rows of
// LQ), zero past Sq and D (SPLIT: scaled by 2^e, the hi halves for part 0,
// the lo halves for part 1).
fn stage_q(tid: u32, dc0: u32, i0: u32, rows: u32, q_base: u32, part: u32, scale: f32) {
    for (var i = tid; i < BR * QCH / RUN; i += THREADS) {
        let r = i / (QCH / RUN);
        let col = dc0 + (i % (QCH / RUN)) * RUN;
        let inside = i0 + r < rows && col < D;
        let x = fetch(0u, vec2<u32>(q_base + (i0 + r) * params.q_sr + col, u32(inside)));
        let dst = r * LQ + col - dc0;
        if SPLIT == 1u {
            let hl = split4(x, scale);
            kv_sh[dst / 4u] = select(hl[0], hl[1], part == 1u);
            continue;
        }
        let h0 = vec2<f16>(unpack2x16float(x.x));
        let h1 = vec2<f16>(unpack2x16float(x.y));
        let h2 = vec2<f16>(unpack2x16float(x.z));
        let h3 = vec2<f16>(unpack2x16float(x.w));
        kv_sh[dst / 4u] = vec4<f16>(h0, h1);
        kv_sh[dst / 4u + 1u] = vec4<f16>(h2, h3);
    }
}

// Multiplies the 16 x 16 f32 tile at float s_sh[at] (rows of LDS) by each
// row's alpha (local rows row0 ..), a vec4 at a time.
fn scale_tile(lane: u32, at: u32, row0: u32) {
    for (var e = lane; e < 64u; e += SG) {
        let r = e / 4u;
        s_sh[(at + r * LDS) / 4u + e % 4u] *= alpha_sh[row0 + r];
    }
}

// Two f32 values rounded to bf16 (nearest even), low half first.
fn bf16_pair(lo: f32, hi: f32) -> u32 {
    return f32_bits_to_bf16(bitcast<u32>(lo)) | (f32_bits_to_bf16(bitcast<u32>(hi)) << 16u);
}

// Writes the 16 x 16 O tile at float s_sh[at] (local rows lr0 .., columns
// 16 x ..) divided by the rows' l (and multiplied by `unscale`, 2^-ev for
// SPLIT), rows past Sq skipped.
fn write_tile(lane: u32, at: u32, lr0: u32, i0: u32, rows: u32, o_base: u32, x: u32, unscale: f32) {
    if PROBE == 2u {
        return;
    }
    for (var e = lane; e < 64u; e += SG) {
        let r = e / 4u;
        let lr = lr0 + r;
        let row = i0 + lr;
        let l_row = l_sh[lr];
        let inv = select(0.0, unscale / l_row, l_row != 0.0);
        let val = select(s_sh[(at + r * LDS) / 4u + e % 4u] * inv, vec4<f32>(nan()), is_nan(l_row));
        if row < rows && O_BF16 == 1u {
            // Even: O's strides are multiples of Dv (of 16).
            let w = (o_base + row * params.o_sr + x * 16u + (e % 4u) * 4u) / 2u;
            o[w] = OStore(bf16_pair(val.x, val.y));
            o[w + 1u] = OStore(bf16_pair(val.z, val.w));
        } else if row < rows {
            let dst = o_base + row * params.o_sr + x * 16u + (e % 4u) * 4u;
            o[dst] = OStore(val.x);
            o[dst + 1u] = OStore(val.y);
            o[dst + 2u] = OStore(val.z);
            o[dst + 3u] = OStore(val.w);
        }
    }
}

// The logit of one score outside interior blocks: -inf past Sq.
fn logit_at(dot: f32, b: u32, h: u32, row: u32, j: u32, keys: u32, rows: u32) -> f32 {
    if row < rows {
        return logit(dot, b, h, row, j, keys);
    }
    return neg_inf();
}

@compute @workgroup_size(THREADS, 1, 1)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
    @builtin(subgroup_id) sg_id: u32,
    @builtin(subgroup_invocation_id) sg_lane: u32,
) {
    let sub = subgroup_of(tid, sg_id);
    let lane = lane_of(tid, sg_lane);
    let b = wid.z;
    let h = wid.y;
    let rows = params.sq;
    let q_blocks = (rows + BR - 1u) / BR;
    // Heavy (late, causal) query blocks first: better tail balance.
    let i0 = (q_blocks - 1u - wid.x) * BR;
    let hk = h / params.group;
    let q_base = params.q_off + b * params.q_sb + h * params.q_sh;
    let k_base = params.k_off + b * params.k_sb + hk * params.k_sh;
    let v_base = params.v_off + b * params.v_sb + hk * params.v_sh;
    let keys = key_count(b);

    // Visible key range of this query block.
    let i_first = i32(i0);
    let i_last = i32(min(i0 + BR, rows)) - 1;
    let j_begin = max(0, i_first + first_off(keys));
    let j_end = min(i32(keys), i_last + last_off(keys) + 1);
    let first_block = u32(max(j_begin, 0)) / BC * BC;
    // No mask tensor, no soft-cap, a positive scale: interior blocks skip
    // `logit` (the scale goes into the max and the exponent).
    let plain = params.mask_kind == 0u && params.softcap <= 0.0 && params.scale_log2 > 0.0;

    // Local rows of this subgroup, and the row (within a fragment) and the
    // column group of this lane in the softmax.
    let sub_row0 = sub * RF * 16u;
    let sr = lane / LPR;
    let cg = lane % LPR;
    let s_base = sub * RF * 16u * LDS;
    let p_base = sub * RF * 16u * LDP;

    var pre: array<vec4<u32>, LOADS>;
    var zc: MatC;

    // The exponents of q, k and v (SPLIT; 0 otherwise), and what the scores
    // and the output are multiplied by to undo them (1 otherwise).
    // @gen split_exps

    // Q's fragments q<f>_<d> and the O accumulators o<f>_<x> (RF x D16 and
    // RF x DV16 cooperative matrices, named: the host unrolls every loop
    // over fragments, see the file header). Q is staged QCH columns of all
    // BR rows at a time through kv_sh; every subgroup loads in every pass
    // (cooperative loads need uniform control flow).
    // @gen declare
    // @gen load_q

    var m_ref: array<f32, RF>;
    var l: array<f32, RF>;
    for (var f = 0u; f < RF; f++) {
        m_ref[f] = neg_inf();
        l[f] = 0.0;
    }
    if tid == 0u {
        rescale_flag = vec4<u32>();
    }

    // K's first block.
    if i32(first_block) < j_end {
        for (var j = 0u; j < LOADS; j++) {
            let i = tid + j * THREADS;
            pre[j] = fetch(1u, run_of(i, D, first_block, keys, k_base, params.k_sr));
        }
        for (var j = 0u; j < LOADS; j++) {
            put(tid + j * THREADS, D, pre[j], sk);
        }
    }
    workgroupBarrier();

    for (var j0 = first_block; i32(j0) < j_end; j0 += BC) {
        // V's block: loads in flight during S = Q K^T.
        if (PROBE & 16u) == 0u {
            for (var j = 0u; j < LOADS; j++) {
                let i = tid + j * THREADS;
                pre[j] = fetch(2u, run_of(i, DV, j0, keys, v_base, params.v_sr));
            }
        }

        // 1. S = Q K^T into the subgroup's scratch, one 16-key column of
        // fragments at a time; each K^T fragment serves the RF row fragments.
        if (PROBE & 8u) == 0u {
            // @gen qk
        }
        workgroupBarrier();

        // 2. V into kv_sh; softmax of the subgroup's rows.
        if (PROBE & 16u) == 0u {
            for (var j = 0u; j < LOADS; j++) {
                put(tid + j * THREADS, DV, pre[j], sv);
            }
        }
        // Interior blocks (every row and key of the block in range and
        // inside the band, no mask tensor, no soft-cap; uniform) take the
        // logit as a single multiply instead of `logit`'s checks.
        let interior = plain && i0 + BR <= rows && j0 + BC <= keys
            && i32(j0) >= i32(i0 + BR - 1u) + first_off(keys)
            && i32(j0 + BC - 1u) <= i32(i0) + last_off(keys);
        // Interior blocks keep the raw scores in t (the scale applied in
        // the max and in the exponent's fma), the others the logits.
        let sc = select(1.0, params.scale_log2 * qk_unscale, interior);
        for (var f = 0u; f < RF && (PROBE & 4u) == 0u; f++) {
            let lr = sub_row0 + f * 16u + sr;
            let row = i0 + lr;
            let s_row = (s_base + (f * 16u + sr) * LDS) / 4u;
            let p_row = (p_base + (f * 16u + sr) * LDP) / 4u;
            var t: array<vec4<f32>, CPL4>;
            var bm = vec4<f32>(neg_inf());
            // The scores' sum: NaN when any score is (max() may drop a NaN,
            // and a software exp2 may turn it into 0).
            var nsum = vec4<f32>();
            for (var g = 0u; g < CPL4; g++) {
                let c = cg * 4u + g * 4u * LPR;
                var x = s_sh[s_row + c / 4u];
                if !interior {
                    x *= qk_unscale;
                    let jj = j0 + c;
                    x = vec4<f32>(
                        logit_at(x.x, b, h, row, jj, keys, rows),
                        logit_at(x.y, b, h, row, jj + 1u, keys, rows),
                        logit_at(x.z, b, h, row, jj + 2u, keys, rows),
                        logit_at(x.w, b, h, row, jj + 3u, keys, rows),
                    );
                }
                t[g] = x;
                bm = max(bm, x);
                nsum += x;
            }
            let bmax = row_max(max(max(bm.x, bm.y), max(bm.z, bm.w)) * sc);
            var alpha = 1.0;
            let m_old = m_ref[f];
            if bmax > m_old + f32(RESCALE) {
                m_ref[f] = bmax;
                if m_old != neg_inf() {
                    alpha = exp2(m_old - bmax);
                    l[f] *= alpha;
                    rescale_flag.x = 1u;
                }
            }
            if cg == 0u {
                alpha_sh[lr] = alpha;
            }
            // A row with nothing visible yet keeps m_ref = -inf; subtracting
            // 0 keeps exp2 at 0 rather than NaN.
            let m_use = select(m_ref[f], 0.0, m_ref[f] == neg_inf());
            var psum = vec4<f32>();
            for (var g = 0u; g < CPL4; g++) {
                let c = cg * 4u + g * 4u * LPR;
                var p = exp2(fma(t[g], vec4<f32>(sc), vec4<f32>(-m_use)));
                if PROBE == 1u {
                    p = select(p, vec4<f32>(1.0), t[g] != vec4<f32>(neg_inf()));
                }
                if PROBE == 2u && j0 == first_block && row < rows && c < DV {
                    let raw = s_sh[s_row + c / 4u];
                    let dst = b * params.o_sb + h * params.o_sh + row * params.o_sr + c;
                    o[dst] = OStore(raw.x);
                    o[dst + 1u] = OStore(raw.y);
                    o[dst + 2u] = OStore(raw.z);
                    o[dst + 3u] = OStore(raw.w);
                }
                if SPLIT == 1u && (PROBE & 128u) != 0u {
                    p_sh[p_row + c / 4u] = vec4<f16>(p);
                    p_sh[P_LO / 4u + p_row + c / 4u] = vec4<f16>();
                } else if SPLIT == 1u {
                    let hl = split_halves(p);
                    p_sh[p_row + c / 4u] = hl[0];
                    p_sh[P_LO / 4u + p_row + c / 4u] = hl[1];
                } else {
                    p_sh[p_row + c / 4u] = vec4<f16>(p);
                }
                // l sums the f32 probabilities (the products take them
                // rounded to f16), as FlashAttention does.
                psum += p;
            }
            l[f] += (psum.x + psum.y) + (psum.z + psum.w);
            // A NaN score makes its row NaN (l = NaN marks it).
            if is_nan((nsum.x + nsum.y) + (nsum.z + nsum.w)) {
                l[f] = nan();
            }
        }
        // K's next block: loads in flight during P V.
        let more = i32(j0 + BC) < j_end && (PROBE & 16u) == 0u;
        if more {
            for (var j = 0u; j < LOADS; j++) {
                let i = tid + j * THREADS;
                pre[j] = fetch(1u, run_of(i, D, j0 + BC, keys, k_base, params.k_sr));
            }
        }

        // 3. Conditional rescaling of O (uniform: one flag per workgroup).
        // Measured and dropped (run 68): one flag per block parity read
        // plainly after a barrier that also publishes V (one barrier per
        // block fewer than this load's two) ran at 0.97-0.98x.
        if (PROBE & 32u) == 0u && workgroupUniformLoad(&rescale_flag).x != 0u {
            // @gen rescale
            if tid == 0u {
                rescale_flag = vec4<u32>();
            }
        }

        // 4. O += P V; each V fragment serves the RF row fragments.
        if (PROBE & 8u) == 0u {
            // @gen pv
        }
        workgroupBarrier();

        // 5. K's next block into kv_sh.
        if more {
            for (var j = 0u; j < LOADS; j++) {
                put(tid + j * THREADS, D, pre[j], sk);
            }
        }
        workgroupBarrier();
    }

    // Row sums over the row's lanes; lse.
    for (var f = 0u; f < RF; f++) {
        let lr = sub_row0 + f * 16u + sr;
        let l_row = row_sum(l[f]);
        if cg == 0u {
            l_sh[lr] = l_row;
            let row = i0 + lr;
            let idx = (b * params.hq + h) * params.sq + row;
            if row < rows && idx < arrayLength(&lse) {
                let lse_row = select(neg_inf(), (m_ref[f] + log2(l_row)) * LN2, l_row != 0.0);
                lse[idx] = select(lse_row, nan(), is_nan(l_row));
            }
        }
    }
    workgroupBarrier();

    // O / l, written through the scratch with bounds checks.
    let o_base = b * params.o_sb + h * params.o_sh;
    // @gen store_o
}
