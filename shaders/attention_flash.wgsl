// attention_flash: FlashAttention forward, O = softmax(scale * Q K^T + mask) V,
// without ever writing the Sq x Sk score matrix to global memory.
//
// Algorithm (FlashAttention-2 forward, online softmax): a workgroup owns BR
//   query rows of one (batch, query head). It walks the visible key blocks of
//   BC keys (blocks that the causal/window diagonal or the key-padding length
//   masks completely are never loaded). Per block:
//   1. S = Q K^T for BR x BC, D streamed in chunks of DK through workgroup
//      memory (Q and K chunks d-major as vec4 of 4 rows/keys, [DK][BR/4+1]
//      and [DK][BC/4+1]: the extra vec4 spreads the transposing stores over
//      the banks); each invocation accumulates a TR x 4 register tile of S
//      from one vec4 of Q and one vec4 of K per d (TR * 4 fmas per 2 loads).
//      Software pipelining: the next chunk's global loads go to registers
//      (QL + KL vec4 per invocation) before the current chunk's arithmetic,
//      and V's first slab is loaded before the softmax step.
//   2. masking and scaling in log2 units (exp2 with log2(e) folded into the
//      scale; blocks where every pair is visible, with no mask tensor or
//      soft-cap, take one multiply per score instead of `logit`), partial
//      row maxima exchanged through workgroup memory, new
//      running max m; P = exp2(S - m) goes to workgroup memory [BR][BC+1];
//      each invocation keeps a partial row sum l over its columns and rescales
//      its accumulator rows by exp2(m_old - m_new).
//   3. O += P V with V streamed VK keys at a time through workgroup memory
//      ([VK][DVP/4] vec4); each invocation owns TR rows x TD output columns
//      in registers, and per 4 keys reads one vec4 of P per row and one vec4
//      of V per 4 columns.
//   At the end the partial sums l of the NC invocations sharing a row are
//   added and the output divided once by l; lse = (m + log2 l) * ln 2.
//   Rows with no visible key give O = 0 and lse = -inf (never NaN).
// Workgroup: (BR / TR) * NC invocations. Invocation t (rg = t / NC, cg = t %
//   NC) owns the query rows 4 rg .. 4 rg + 3 of each of the TR / 4 row groups
//   (group g starts at g * BR * 4 / TR), score columns 4 cg .. 4 cg + 3 (so
//   BC = 4 NC) and output columns 4 (x NC + cg) .. + 3 for x < TD / 4:
//   neighbouring invocations read neighbouring vec4 of workgroup memory.
// Tile parameters (text constants, chosen by tune::attention): BR, TR (4 or
//   8), NC (BC = 4 NC), TD (4, 8 or 16; NC * TD >= Dv), DK, VK (a multiple of
//   4 dividing BC), STAGE4 (vec4 of the staging buffer: max of
//   DK * (BR/4 + BC/4 + 2), VK * NC * TD / 4 and BR * NC / 4, since the row
//   reductions reuse it).
// Packed GQA rows (pack_heads = 1, few query rows): the workgroup's y is a KV
//   head and its rows run over the (query head, position) pairs of that KV
//   head's group, row r being head hk * group + r / Sq at position r % Sq, so
//   K and V are read once per group instead of once per query head.
// Grid: (ceil(rows / BR) * splits, Hq or Hkv when packed, B), rows = Sq or
//   group * Sq when packed. With SPLIT = 1 (split-KV decoding)
//   workgroup x also picks a key range of split_len keys and writes its
//   unnormalised state (O / l, and m, l as lse) to the f32 scratch bound as
//   `lse`; attention_merge.wgsl combines the splits.
// Types: Elem f32 or f16 (text); all arithmetic and statistics in f32.
// Limits: any Sq, Sk, D; Dv <= NC * TD; every global access is checked
//   against the logical shape (the host checks shapes against buffers).
// Why these tiles: 4 query rows per invocation (8 spill, 11x slower) and
//   the dispatcher's candidates measured per adapter:
//   docs/perf/attention.md#scalar-flash-kernel.

const BR: u32 = 64u;
const TR: u32 = 4u;
const NC: u32 = 16u;
const TD: u32 = 8u;
const DK: u32 = 16u;
const VK: u32 = 16u;
const STAGE4: u32 = 544u;
const SPLIT: u32 = 0u;

const BC: u32 = 4u * NC;
const RV: u32 = TR / 4u;          // row groups (vec4 of rows) per invocation
const NRG: u32 = BR / TR;         // invocations along the rows
const GROUP_ROWS: u32 = BR / RV;  // rows per row group
const WG: u32 = NRG * NC;
const QS4: u32 = BR / 4u + 1u;    // vec4 per d of the Q chunk
const KS4: u32 = BC / 4u + 1u;
const K_OFF: u32 = DK * QS4;      // K chunk after the Q chunk
const PS4: u32 = BC / 4u;
const DVP4: u32 = NC * TD / 4u;
const XV: u32 = TD / 4u;          // vec4 of output columns per invocation
// vec4 each invocation prefetches per Q chunk, K chunk and V slab.
const QL: u32 = (BR / 4u * DK + WG - 1u) / WG;
const KL: u32 = (BC / 4u * DK + WG - 1u) / WG;
const VL: u32 = (VK * DVP4 + WG - 1u) / WG;

// The f32 tensor-core plan's fallback (generated, empty otherwise): the
// flag attention_split_scale.wgsl sets when q, k or v hold an infinity or
// NaN; unset, every workgroup returns at once.
// @gen guard_decl

var<workgroup> stage: array<vec4<f32>, STAGE4>;
var<workgroup> p_tile: array<vec4<f32>, BR * PS4>;

// Rows of one workgroup's (batch, y) slice: Sq, or group * Sq when packed.
fn row_count() -> u32 {
    return select(params.sq, params.group * params.sq, params.pack_heads == 1u);
}

// (query head, position) of row r in the slice of workgroup y.
fn row_head_pos(y: u32, r: u32) -> vec2<u32> {
    if params.pack_heads == 1u {
        return vec2<u32>(y * params.group + r / params.sq, r % params.sq);
    }
    return vec2<u32>(y, r);
}

// Row of the block owned by invocation row-group rg as its r-th row.
fn local_row(rg: u32, r: u32) -> u32 {
    return (r / 4u) * GROUP_ROWS + rg * 4u + (r % 4u);
}

// Scalar view of the staging buffer (row reductions).
fn red_store(i: u32, x: f32) {
    stage[i / 4u][i % 4u] = x;
}

fn red_load(i: u32) -> f32 {
    return stage[i / 4u][i % 4u];
}

// Global loads of the next Q and K chunks into registers (4 rows or keys at
// one d per vec4), issued before the current chunk's arithmetic so their
// latency overlaps it.
fn prefetch_qk(
    tid: u32,
    d0: u32,
    i0: u32,
    b: u32,
    y: u32,
    j0: u32,
    k_base: u32,
    keys: u32,
    qp: ptr<function, array<vec4<f32>, QL>>,
    kp: ptr<function, array<vec4<f32>, KL>>,
) {
    for (var n = 0u; n < QL; n++) {
        let e = tid + n * WG;
        let r4 = e / DK;
        let d = d0 + e % DK;
        var val = vec4<f32>(0.0);
        for (var i = 0u; i < 4u; i++) {
            let row = i0 + r4 * 4u + i;
            if e < BR / 4u * DK && row < row_count() && d < params.d {
                let hp = row_head_pos(y, row);
                val[i] = f32(q[params.q_off + b * params.q_sb + hp.x * params.q_sh + hp.y * params.q_sr + d]);
            }
        }
        (*qp)[n] = val;
    }
    for (var n = 0u; n < KL; n++) {
        let e = tid + n * WG;
        let c4 = e / DK;
        let d = d0 + e % DK;
        var val = vec4<f32>(0.0);
        for (var i = 0u; i < 4u; i++) {
            let j = j0 + c4 * 4u + i;
            if e < BC / 4u * DK && j < keys && d < params.d {
                val[i] = f32(k[k_base + j * params.k_sr + d]);
            }
        }
        (*kp)[n] = val;
    }
}

// Global loads of V rows k0 .. k0 + VK of the block at j0 into registers.
// Keys past the padding length are zeroed, so garbage there (a KV cache's
// spare capacity) cannot reach the output.
fn prefetch_v(
    tid: u32,
    j0: u32,
    k0: u32,
    v_base: u32,
    keys: u32,
    vp: ptr<function, array<vec4<f32>, VL>>,
) {
    for (var n = 0u; n < VL; n++) {
        let e = tid + n * WG;
        let kk = e / DVP4;
        let c4 = e % DVP4;
        let j = j0 + k0 + kk;
        var val = vec4<f32>(0.0);
        if e < VK * DVP4 && j < keys {
            for (var i = 0u; i < 4u; i++) {
                let c = c4 * 4u + i;
                if c < params.dv {
                    val[i] = f32(v[v_base + j * params.v_sr + c]);
                }
            }
        }
        (*vp)[n] = val;
    }
}

@compute @workgroup_size(WG, 1, 1)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
) {
    // @gen guard
    let b = wid.z;
    let y = wid.y;
    let rows = row_count();
    let q_blocks = (rows + BR - 1u) / BR;
    var qb = wid.x % q_blocks;
    let split = wid.x / q_blocks;
    if SPLIT == 0u {
        // Heavy (late, causal) query blocks first: better tail balance.
        qb = q_blocks - 1u - qb;
    }
    let i0 = qb * BR;
    let hk = select(y / params.group, y, params.pack_heads == 1u);
    let rg = tid / NC;
    let cg = tid % NC;
    let k_base = params.k_off + b * params.k_sb + hk * params.k_sh;
    let v_base = params.v_off + b * params.v_sb + hk * params.v_sh;
    let keys = key_count(b);

    // Visible key range of this query block (and split).
    // Positions of the block's rows (packed blocks may hold every position).
    var i_first = i32(i0);
    var i_last = i32(min(i0 + BR, rows)) - 1;
    if params.pack_heads == 1u {
        i_first = 0;
        i_last = i32(params.sq) - 1;
    }
    var j_begin = max(0, i_first + first_off(keys));
    var j_end = min(i32(keys), i_last + last_off(keys) + 1);
    if SPLIT == 1u {
        j_begin = max(j_begin, i32(split * params.split_len));
        j_end = min(j_end, i32((split + 1u) * params.split_len));
    }
    let first_block = u32(max(j_begin, 0)) / BC * BC;
    // No mask tensor, no soft-cap: blocks whose every (row, key) pair is
    // visible and in range take the logit as one multiply per score
    // instead of `logit`'s checks.
    let plain = params.mask_kind == 0u && params.softcap <= 0.0;

    var m: array<f32, TR>;
    var l: array<f32, TR>;
    var acc: array<vec4<f32>, TR * XV>;
    for (var r = 0u; r < TR; r++) {
        m[r] = neg_inf();
        l[r] = 0.0;
    }
    for (var x = 0u; x < TR * XV; x++) {
        acc[x] = vec4<f32>(0.0);
    }

    for (var j0 = first_block; i32(j0) < j_end; j0 += BC) {
        // 1. S = Q K^T over D in chunks of DK.
        var s: array<vec4<f32>, TR>;
        for (var r = 0u; r < TR; r++) {
            s[r] = vec4<f32>(0.0);
        }
        var qp: array<vec4<f32>, QL>;
        var kp: array<vec4<f32>, KL>;
        prefetch_qk(tid, 0u, i0, b, y, j0, k_base, keys, &qp, &kp);
        for (var d0 = 0u; d0 < params.d; d0 += DK) {
            // Each invocation stages 4 rows (keys) at one d as one vec4.
            for (var n = 0u; n < QL; n++) {
                let e = tid + n * WG;
                if e < BR / 4u * DK {
                    stage[(e % DK) * QS4 + e / DK] = qp[n];
                }
            }
            for (var n = 0u; n < KL; n++) {
                let e = tid + n * WG;
                if e < BC / 4u * DK {
                    stage[K_OFF + (e % DK) * KS4 + e / DK] = kp[n];
                }
            }
            workgroupBarrier();
            if d0 + DK < params.d {
                prefetch_qk(tid, d0 + DK, i0, b, y, j0, k_base, keys, &qp, &kp);
            }
            for (var dd = 0u; dd < DK; dd++) {
                let kv = stage[K_OFF + dd * KS4 + cg];
                for (var g = 0u; g < RV; g++) {
                    let qv = stage[dd * QS4 + g * (GROUP_ROWS / 4u) + rg];
                    for (var i = 0u; i < 4u; i++) {
                        s[g * 4u + i] = fma(vec4<f32>(qv[i]), kv, s[g * 4u + i]);
                    }
                }
            }
            workgroupBarrier();
        }

        // V's first slab is fetched now: its latency overlaps the softmax.
        var vp: array<vec4<f32>, VL>;
        prefetch_v(tid, j0, 0u, v_base, keys, &vp);

        // 2. Mask, scale, online softmax.
        let interior = plain && i0 + BR <= rows && i32(j0) >= j_begin && i32(j0 + BC) <= j_end
            && i32(j0) >= i_last + first_off(keys)
            && i32(j0 + BC - 1u) <= i_first + last_off(keys);
        for (var r = 0u; r < TR; r++) {
            let lr = local_row(rg, r);
            let row = i0 + lr;
            var t = vec4<f32>(neg_inf());
            if interior {
                t = s[r] * params.scale_log2;
            } else {
                let hp = row_head_pos(y, row);
                for (var c = 0u; c < 4u; c++) {
                    let j = j0 + cg * 4u + c;
                    if row < rows && (SPLIT == 0u || (i32(j) >= j_begin && i32(j) < j_end)) {
                        t[c] = logit(s[r][c], b, hp.x, hp.y, j, keys);
                    }
                }
            }
            s[r] = t;
            red_store(lr * NC + cg, max(max(t.x, t.y), max(t.z, t.w)));
        }
        workgroupBarrier();
        for (var r = 0u; r < TR; r++) {
            let lr = local_row(rg, r);
            var m_new = m[r];
            for (var g = 0u; g < NC; g++) {
                m_new = max(m_new, red_load(lr * NC + g));
            }
            // A row with nothing visible yet keeps m = -inf; subtracting 0
            // instead of -inf keeps exp2 at 0 rather than NaN.
            let m_use = select(m_new, 0.0, m_new == neg_inf());
            let alpha = exp2(m[r] - m_use);
            m[r] = m_new;
            let t = s[r];
            let p = exp2(t - vec4<f32>(m_use));
            p_tile[lr * PS4 + cg] = p;
            l[r] = l[r] * alpha + (p.x + p.y + p.z + p.w);
            if is_nan(t.x) || is_nan(t.y) || is_nan(t.z) || is_nan(t.w) {
                // A NaN logit poisons its row only: l = NaN marks it.
                l[r] = nan();
            }
            for (var x = 0u; x < XV; x++) {
                acc[r * XV + x] *= alpha;
            }
        }
        workgroupBarrier();

        // 3. O += P V, V streamed VK keys at a time.
        for (var k0 = 0u; k0 < BC; k0 += VK) {
            for (var n = 0u; n < VL; n++) {
                let e = tid + n * WG;
                if e < VK * DVP4 {
                    stage[e] = vp[n];
                }
            }
            workgroupBarrier();
            if k0 + VK < BC {
                prefetch_v(tid, j0, k0 + VK, v_base, keys, &vp);
            }
            for (var kq = 0u; kq < VK / 4u; kq++) {
                var pr: array<vec4<f32>, TR>;
                for (var r = 0u; r < TR; r++) {
                    pr[r] = p_tile[local_row(rg, r) * PS4 + k0 / 4u + kq];
                }
                for (var kk = 0u; kk < 4u; kk++) {
                    for (var x = 0u; x < XV; x++) {
                        let vv = stage[(kq * 4u + kk) * DVP4 + x * NC + cg];
                        for (var r = 0u; r < TR; r++) {
                            acc[r * XV + x] = fma(vec4<f32>(pr[r][kk]), vv, acc[r * XV + x]);
                        }
                    }
                }
            }
            workgroupBarrier();
        }
    }

    // Sum the partial row sums of the NC invocations sharing each row.
    for (var r = 0u; r < TR; r++) {
        red_store(local_row(rg, r) * NC + cg, l[r]);
    }
    workgroupBarrier();
    for (var r = 0u; r < TR; r++) {
        let lr = local_row(rg, r);
        var l_sum = 0.0;
        for (var g = 0u; g < NC; g++) {
            l_sum += red_load(lr * NC + g);
        }
        if i0 + lr >= rows {
            continue;
        }
        let hp = row_head_pos(y, i0 + lr);
        let h = hp.x;
        let row = hp.y;
        let row_nan = is_nan(l_sum);
        let inv = select(select(0.0, 1.0 / l_sum, l_sum != 0.0), nan(), row_nan);
        if SPLIT == 0u {
            let o_row = b * params.o_sb + h * params.o_sh + row * params.o_sr;
            for (var x = 0u; x < XV; x++) {
                let ov = acc[r * XV + x] * inv;
                for (var i = 0u; i < 4u; i++) {
                    let c = (x * NC + cg) * 4u + i;
                    if c < params.dv {
                        o[o_row + c] = Elem(select(ov[i], nan(), row_nan));
                    }
                }
            }
            if cg == 0u {
                let idx = (b * params.hq + h) * params.sq + row;
                if idx < arrayLength(&lse) {
                    let lse_row = select(neg_inf(), (m[r] + log2(l_sum)) * LN2, l_sum != 0.0);
                    lse[idx] = select(lse_row, nan(), row_nan);
                }
            }
        } else {
            // Partial state of this split: O_s = acc / l_s, and (m, l) in log2 units.
            let all_rows = params.batch * params.hq * params.sq;
            let state = (split * params.batch + b) * params.hq * params.sq
                + h * params.sq + row;
            for (var x = 0u; x < XV; x++) {
                let ov = acc[r * XV + x] * inv;
                for (var i = 0u; i < 4u; i++) {
                    let c = (x * NC + cg) * 4u + i;
                    if c < params.dv {
                        lse[state * params.dv + c] = select(ov[i], nan(), row_nan);
                    }
                }
            }
            if cg == 0u {
                let stats = params.splits * all_rows * params.dv + 2u * state;
                lse[stats] = m[r];
                lse[stats + 1u] = select(l_sum, nan(), row_nan);
            }
        }
    }
}
