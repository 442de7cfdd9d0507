// attention_decode_coop: split-KV attention for few query rows (KV-cache
// decoding) on tensor cores (WGSL cooperative matrices): f16 Q, K, V, f32
// accumulation and softmax statistics, the partial states of the merge
// kernel (attention_merge.wgsl) as output.
//
// Algorithm: a workgroup is one subgroup and owns one (batch, KV head, row
//   chunk, key split): up to ROWS = 16 RF query rows of the KV head packed
//   into RF fragments (row r = head hk * group + r / Sq at position r % Sq:
//   the query heads of a GQA group share every K and V fragment; each
//   fragment loaded serves the RF row fragments), their Q staged once
//   through workgroup memory into RF * D16 cooperative A matrices.
//   The split's visible keys are walked 16 at a time; per block:
//   1. S = Q K^T with K^T's B fragments loaded column-major straight from
//      the k buffer (no staging, no barrier: the fragments are the loads),
//      stored to the f32 scratch s_sh.
//   2. The lanes (LPR = SG / 16 per row) apply `logit` (masks, soft-cap,
//      causal/window in both alignments, key lengths) and the online
//      softmax with a reference max per row that moves only when a block
//      exceeds it by RESCALE (as attention_flash_coop.wgsl), P = exp2(t -
//      m_ref) as f16 into p_sh.
//   3. When a row's reference moved, the O accumulators are spilled through
//      s_sh and scaled (uniform flag).
//   4. O += P V with V's B fragments loaded row-major straight from v.
//   Blocks that reach past the key length are staged instead (zero rows
//   past it, so stale cache rows never reach O): the kernel walks the full
//   blocks in one loop and the last partial block in a second one (naga
//   accepts cooperative operations under loop bounds, not under `if`).
//   End: l summed over the row's lanes; O / l, the reference max m (log2
//   units) and l of each row go to the scratch (attention_merge's layout);
//   rows without a visible key in the split leave l = 0 and weigh nothing.
// Prefill shapes: nothing limits Sq, so the kernel also runs as a forward
//   kernel (forced; a chunk's rows are then 16 positions of one head): the
//   key range is clipped to the chunk's own causal/window band, and blocks
//   inside it for every row (no mask tensor, no soft-cap) skip `logit`.
// Workgroup: SG invocations (the fixed subgroup size, a multiple of 16; 16
//   virtual lanes in the emulated variant).
// Workgroup memory: kv_sh ROWS * (max(D, Dv) + 8) f16 (Q at the start, a
//   partial block's K or V later), s_sh ROWS * 24 f32, p_sh ROWS * 24 f16 (as vec4),
//   2 ROWS f32 and a vec4<u32> flag; each a multiple of 16 bytes.
// Text constants (tune::attention::decode_coop_spec): SG, RF (1 or 2), D,
//   DV (multiples of 16 up to 256), RESCALE.
// Grid: (splits, Hkv * row chunks, B).
// Bindings: attention_common's q, k, v (f16), the scratch at 5 (`lse`),
//   mask, key lengths. The host guarantees every stride of k and v is a
//   multiple of 8 halves (16-byte rows for the fragment loads).
// Named fragments: the `// @gen` blocks (declare, load_q, qk_direct,
//   pv_direct, qk_staged, pv_staged, rescale, store) come from
//   tune::attention::decode_coop_blocks (unrolled) or its looped form for
//   the emulated variant.
// Matrix operations: attention_coop_mma.wgsl + attention_decode_coop_mma.wgsl
//   (load_bt_k, load_b_v from storage) or their emulated twins.
// Why forced only: cooperative loads from storage are slow on the H200's
//   driver (32k f16 194 us against 102 for the scalar decode kernel of the
//   time, run 29; that kernel now takes 67.6), and staging the blocks
//   through workgroup memory was 2x slower still (run 65):
//   docs/perf/attention.md#decode.

const SG: u32 = 32u;
const RF: u32 = 1u;
const D: u32 = 128u;
const DV: u32 = 128u;
const RESCALE: u32 = 8u;

const ROWS: u32 = 16u * RF;
const D16: u32 = D / 16u;
const DV16: u32 = DV / 16u;
const DX: u32 = max(D, DV);
const LDKV: u32 = DX + 8u;
// Scratch rows (floats, halves; the tiles are vec4 arrays).
const LDS: u32 = 24u;
const LDP: u32 = 24u;
const LPR: u32 = SG / 16u;
const CPL: u32 = 16u / LPR;
// Each lane's columns in groups of 4 (c = 4 cg + 4 LPR g).
const CPL4: u32 = CPL / 4u;
const_assert CPL % 4u == 0u;

var<workgroup> kv_sh: array<vec4<f16>, ROWS * LDKV / 4u>;
var<workgroup> s_sh: array<vec4<f32>, ROWS * LDS / 4u>;
var<workgroup> p_sh: array<vec4<f16>, ROWS * LDP / 4u>;
var<workgroup> alpha_sh: array<f32, ROWS>;
var<workgroup> l_sh: array<f32, ROWS>;
var<workgroup> rescale_flag: vec4<u32>;

// The (head, position) of packed row `row` of KV head hk, or (hq, 0) when
// the chunk has no such row.
fn row_head(hk: u32, row: u32) -> vec2<u32> {
    if row >= params.group * params.sq {
        return vec2<u32>(params.hq, 0u);
    }
    return vec2<u32>(hk * params.group + row / params.sq, row % params.sq);
}

// Rows r0 .. r0 + ROWS - 1 of Q into kv_sh (rows of LDKV), zero for
// absent rows.
fn stage_q(lane: u32, b: u32, hk: u32, r0: u32) {
    for (var e = lane; e < ROWS * D; e += SG) {
        let r = e / D;
        let c = e % D;
        let hp = row_head(hk, r0 + r);
        var x = 0.0h;
        if hp.x < params.hq {
            let idx = params.q_off + b * params.q_sb + hp.x * params.q_sh + hp.y * params.q_sr + c;
            x = q[min(idx, arrayLength(&q) - 1u)];
        }
        kv_sh[(r * LDKV + c) / 4u][c % 4u] = x;
    }
}

// Keys j0 .. j0 + 15 of K (which = 0, D columns) or V (1, DV columns) into
// kv_sh, zero at and past `keys`.
fn stage_block(lane: u32, which: u32, j0: u32, keys: u32, base: u32) {
    let width = select(DV, D, which == 0u);
    for (var e = lane; e < 16u * width; e += SG) {
        let r = e / width;
        let c = e % width;
        var x = 0.0h;
        if j0 + r < keys {
            if which == 0u {
                x = k[min(base + (j0 + r) * params.k_sr + c, arrayLength(&k) - 1u)];
            } else {
                x = v[min(base + (j0 + r) * params.v_sr + c, arrayLength(&v) - 1u)];
            }
        }
        kv_sh[(r * LDKV + c) / 4u][c % 4u] = x;
    }
}

// Softmax state of this lane's row: reference max, partial sum, NaN seen.
struct RowState {
    m_ref: f32,
    l: f32,
}

// Step 2 for fragment f of the block at j0 (S in s_sh): P into p_sh, the
// state updated, alpha into alpha_sh and the rescale flag raised when the
// reference moved. `interior`: every pair of the block is visible and
// plain (the logit is the scaled dot product).
fn softmax_block(
    lane: u32, b: u32, hk: u32, r0: u32, j0: u32, keys: u32, interior: bool, f: u32, st: RowState,
) -> RowState {
    var out = st;
    let sr = f * 16u + lane / LPR;
    let cg = lane % LPR;
    let hp = row_head(hk, r0 + sr);
    // Interior blocks keep the raw scores (the scale, > 0, is applied in
    // the max and the exponent), the others the logits.
    let sc = select(1.0, params.scale_log2, interior);
    var t: array<vec4<f32>, CPL4>;
    var bm = vec4<f32>(neg_inf());
    // The scores' sum: NaN when any score is (max() may drop a NaN, and a
    // software exp2 may turn it into 0).
    var nsum = vec4<f32>();
    for (var g = 0u; g < CPL4; g++) {
        let c = cg * 4u + g * 4u * LPR;
        var x = s_sh[(sr * LDS + c) / 4u];
        if !interior {
            if hp.x < params.hq {
                x = vec4<f32>(
                    logit(x.x, b, hp.x, hp.y, j0 + c, keys),
                    logit(x.y, b, hp.x, hp.y, j0 + c + 1u, keys),
                    logit(x.z, b, hp.x, hp.y, j0 + c + 2u, keys),
                    logit(x.w, b, hp.x, hp.y, j0 + c + 3u, keys),
                );
            } else {
                x = vec4<f32>(neg_inf());
            }
        }
        t[g] = x;
        bm = max(bm, x);
        nsum += x;
    }
    let bmax = row_max(max(max(bm.x, bm.y), max(bm.z, bm.w)) * sc);
    var alpha = 1.0;
    let m_old = out.m_ref;
    if bmax > m_old + f32(RESCALE) {
        out.m_ref = bmax;
        if m_old != neg_inf() {
            alpha = exp2(m_old - bmax);
            out.l *= alpha;
            rescale_flag.x = 1u;
        }
    }
    if cg == 0u {
        alpha_sh[sr] = alpha;
    }
    let m_use = select(out.m_ref, 0.0, out.m_ref == neg_inf());
    var psum = vec4<f32>();
    for (var g = 0u; g < CPL4; g++) {
        let c = cg * 4u + g * 4u * LPR;
        let p = exp2(fma(t[g], vec4<f32>(sc), vec4<f32>(-m_use)));
        p_sh[(sr * LDP + c) / 4u] = vec4<f16>(p);
        psum += p;
    }
    out.l += (psum.x + psum.y) + (psum.z + psum.w);
    if is_nan((nsum.x + nsum.y) + (nsum.z + nsum.w)) || is_nan(out.l) {
        out.l = nan();
    }
    return out;
}

// Multiplies fragment f's 16 x 16 tile in s_sh by each row's alpha.
fn scale_tile(lane: u32, f: u32) {
    for (var e = lane; e < 64u; e += SG) {
        let r = f * 16u + e / 4u;
        s_sh[r * LDS / 4u + e % 4u] *= alpha_sh[r];
    }
}

// Writes O's columns 16 x .. of fragment f's rows (tile in s_sh) divided
// by l to the split's scratch.
fn write_state_tile(lane: u32, b: u32, hk: u32, r0: u32, split: u32, f: u32, x: u32) {
    let rows_all = params.batch * params.hq * params.sq;
    for (var e = lane; e < 64u; e += SG) {
        let r = f * 16u + e / 4u;
        let hp = row_head(hk, r0 + r);
        let l_row = l_sh[r];
        if hp.x < params.hq {
            let state = (b * params.hq + hp.x) * params.sq + hp.y;
            let inv = select(0.0, 1.0 / l_row, l_row != 0.0);
            let val = select(s_sh[r * LDS / 4u + e % 4u] * inv, vec4<f32>(nan()), is_nan(l_row));
            let idx = (split * rows_all + state) * params.dv + x * 16u + (e % 4u) * 4u;
            if idx + 3u < arrayLength(&lse) {
                lse[idx] = val.x;
                lse[idx + 1u] = val.y;
                lse[idx + 2u] = val.z;
                lse[idx + 3u] = val.w;
            }
        }
    }
}

@compute @workgroup_size(SG, 1, 1)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
    @builtin(subgroup_id) sg_id: u32,
    @builtin(subgroup_invocation_id) sg_lane: u32,
) {
    _ = subgroup_of(tid, sg_id);
    let lane = lane_of(tid, sg_lane);
    let split = wid.x;
    let rows_kv = params.group * params.sq;
    let chunks = (rows_kv + ROWS - 1u) / ROWS;
    let hk = wid.y / chunks;
    let r0 = (wid.y % chunks) * ROWS;
    let b = wid.z;
    let keys = key_count(b);
    let k_base = params.k_off + b * params.k_sb + hk * params.k_sh;
    let v_base = params.v_off + b * params.v_sb + hk * params.v_sh;

    // The chunk's positions: one head's run p_lo .. p_hi when it does not
    // cross heads (prefill shapes), else every position.
    let r_last = min(r0 + ROWS - 1u, rows_kv - 1u);
    var p_lo = 0u;
    var p_hi = params.sq - 1u;
    if r0 / params.sq == r_last / params.sq {
        p_lo = r0 % params.sq;
        p_hi = r_last % params.sq;
    }
    // The split's keys, clipped to the band any row of the chunk sees and
    // to the key length.
    var start = i32(split * params.split_len);
    var end = i32(min(keys, select(params.sk, (split + 1u) * params.split_len, params.splits > 1u)));
    start = max(start, i32(p_lo) + first_off(keys));
    end = min(end, i32(p_hi) + last_off(keys) + 1);
    // No mask tensor, no soft-cap, all 16 rows present: blocks inside the
    // band for every row take the logit as one multiply.
    let plain = params.mask_kind == 0u && params.softcap <= 0.0 && params.scale_log2 > 0.0
        && r0 + ROWS <= rows_kv;
    let j_start = u32(max(start, 0)) / 16u * 16u;
    let j_end = u32(max(end, 0));
    // Full blocks (every key below the key length) load their fragments
    // straight from memory; the rest are staged.
    let full_end = max(j_start, min(j_end, keys / 16u * 16u));

    var zc: MatC;
    // @gen declare
    stage_q(lane, b, hk, r0);
    workgroupBarrier();
    // @gen load_q
    workgroupBarrier();

    var st: array<RowState, RF>;
    for (var f = 0u; f < RF; f++) {
        st[f] = RowState(neg_inf(), 0.0);
    }
    if tid == 0u {
        rescale_flag = vec4<u32>();
    }
    for (var j0 = j_start; j0 < full_end; j0 += 16u) {
        // @gen qk_direct
        workgroupBarrier();
        let interior = plain && i32(j0) >= i32(p_hi) + first_off(keys)
            && i32(j0 + 15u) <= i32(p_lo) + last_off(keys);
        for (var f = 0u; f < RF; f++) {
            st[f] = softmax_block(lane, b, hk, r0, j0, keys, interior, f, st[f]);
        }
        if workgroupUniformLoad(&rescale_flag).x != 0u {
            // @gen rescale
            if tid == 0u {
                rescale_flag = vec4<u32>();
            }
        }
        workgroupBarrier();
        // @gen pv_direct
        workgroupBarrier();
    }
    for (var j0 = full_end; j0 < j_end; j0 += 16u) {
        stage_block(lane, 0u, j0, keys, k_base);
        workgroupBarrier();
        // @gen qk_staged
        workgroupBarrier();
        for (var f = 0u; f < RF; f++) {
            st[f] = softmax_block(lane, b, hk, r0, j0, keys, false, f, st[f]);
        }
        stage_block(lane, 1u, j0, keys, v_base);
        if workgroupUniformLoad(&rescale_flag).x != 0u {
            // @gen rescale
            if tid == 0u {
                rescale_flag = vec4<u32>();
            }
        }
        workgroupBarrier();
        // @gen pv_staged
        workgroupBarrier();
    }

    // Row sums over the row's lanes; the statistics of the split.
    for (var f = 0u; f < RF; f++) {
        let sr = f * 16u + lane / LPR;
        let l_row = row_sum(st[f].l);
        if lane % LPR == 0u {
            l_sh[sr] = l_row;
            let hp = row_head(hk, r0 + sr);
            if hp.x < params.hq {
                let rows_all = params.batch * params.hq * params.sq;
                let state = (b * params.hq + hp.x) * params.sq + hp.y;
                let at = params.splits * rows_all * params.dv + 2u * (split * rows_all + state);
                if at + 1u < arrayLength(&lse) {
                    lse[at] = st[f].m_ref;
                    lse[at + 1u] = l_row;
                }
            }
        }
    }
    workgroupBarrier();
    // @gen store
}
