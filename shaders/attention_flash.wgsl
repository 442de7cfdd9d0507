// attention_flash: FlashAttention forward, O = softmax(scale * Q K^T + mask) V,
// without ever writing the Sq x Sk score matrix to global memory.
//
// Algorithm (FlashAttention-2 forward, online softmax): a workgroup owns BR
//   query rows of one (batch, query head). It walks the visible key blocks of
//   BC keys (blocks that the causal/window diagonal or the key-padding length
//   masks completely are never loaded). Per block:
//   1. S = Q K^T for BR x BC, D streamed in chunks of DK through workgroup
//      memory (Q chunk transposed [DK][BR+1], K chunk [DK][BC+1]: +1 padding
//      keeps the transposing stores free of bank conflicts); each invocation
//      accumulates a TR x TC register tile of S.
//   2. masking and scaling in log2 units (exp2 with log2(e) folded into the
//      scale), partial row maxima exchanged through workgroup memory, new
//      running max m; P = exp2(S - m) goes to workgroup memory [BR][BC+1];
//      each invocation keeps a partial row sum l over its columns and rescales
//      its accumulator rows by exp2(m_old - m_new).
//   3. O += P V with V streamed VK keys at a time through workgroup memory;
//      each invocation owns TR rows x TD output columns in registers.
//   At the end the partial sums l of the NC invocations sharing a row are
//   added and the output divided once by l; lse = (m + log2 l) * ln 2.
//   Rows with no visible key give O = 0 and lse = -inf (never NaN).
// Workgroup: (BR / TR) * NC invocations; invocation t owns rows
//   (t / NC) + r * (BR / TR) for r < TR and columns (t % NC) + c * NC (strided
//   ownership so neighbouring invocations touch neighbouring addresses).
// Tile parameters (text constants, chosen by tune::attention): BR, BC, TR,
//   TC = BC / NC, NC, TD = ceil(Dv / NC), DK, VK, STAGE (f32 words of the
//   staging buffer: max of DK*(BR+BC+2) and VK*NC*TD).
// Grid: (ceil(Sq / BR) * splits, Hq, B). With SPLIT = 1 (split-KV decoding)
//   workgroup x also picks a key range of split_len keys and writes its
//   unnormalised state (O / l, and m, l as lse) to the f32 scratch bound as
//   `lse`; attention_merge.wgsl combines the splits.
// Types: Elem f32 or f16 (text); all arithmetic and statistics in f32.
// Limits: any Sq, Sk, D; Dv <= NC * TD; every global access is bounds-checked.

const BR: u32 = 64u;
const BC: u32 = 64u;
const TR: u32 = 4u;
const TC: u32 = 4u;
const NC: u32 = 16u;
const TD: u32 = 8u;
const DK: u32 = 16u;
const VK: u32 = 16u;
const STAGE: u32 = 2080u;
const SPLIT: u32 = 0u;

const NRG: u32 = BR / TR;
const WG: u32 = NRG * NC;
const QS: u32 = BR + 1u;
const KS: u32 = BC + 1u;
const PS: u32 = BC + 1u;
const DVP: u32 = NC * TD;

var<workgroup> stage: array<f32, STAGE>;
var<workgroup> p_tile: array<f32, BR * PS>;
var<workgroup> red: array<f32, BR * NC>;

@compute @workgroup_size(WG, 1, 1)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
) {
    let b = wid.z;
    let h = wid.y;
    let q_blocks = (params.sq + BR - 1u) / BR;
    var qb = wid.x % q_blocks;
    let split = wid.x / q_blocks;
    if SPLIT == 0u {
        // Heavy (late, causal) query blocks first: better tail balance.
        qb = q_blocks - 1u - qb;
    }
    let i0 = qb * BR;
    let hk = h / params.group;
    let rg = tid / NC;
    let cg = tid % NC;
    let q_base = b * params.q_sb + h * params.q_sh;
    let k_base = b * params.k_sb + hk * params.k_sh;
    let v_base = b * params.v_sb + hk * params.v_sh;
    let keys = key_count(b);

    // Visible key range of this query block (and split).
    let i_last = i32(min(i0 + BR, params.sq)) - 1;
    var j_begin = max(0, i32(i0) + params.lo_off);
    var j_end = min(i32(keys), i_last + params.hi_off + 1);
    if SPLIT == 1u {
        j_begin = max(j_begin, i32(split * params.split_len));
        j_end = min(j_end, i32((split + 1u) * params.split_len));
    }
    let first_block = u32(max(j_begin, 0)) / BC * BC;

    var m: array<f32, TR>;
    var l: array<f32, TR>;
    var acc: array<f32, TR * TD>;
    for (var r = 0u; r < TR; r++) {
        m[r] = neg_inf();
        l[r] = 0.0;
    }
    for (var x = 0u; x < TR * TD; x++) {
        acc[x] = 0.0;
    }

    for (var j0 = first_block; i32(j0) < j_end; j0 += BC) {
        // 1. S = Q K^T over D in chunks of DK.
        var s: array<f32, TR * TC>;
        for (var x = 0u; x < TR * TC; x++) {
            s[x] = 0.0;
        }
        for (var d0 = 0u; d0 < params.d; d0 += DK) {
            for (var e = tid; e < BR * DK; e += WG) {
                let r = e / DK;
                let dd = e % DK;
                let row = i0 + r;
                let d = d0 + dd;
                var val = 0.0;
                if row < params.sq && d < params.d {
                    val = f32(q[q_base + row * params.q_sr + d]);
                }
                stage[dd * QS + r] = val;
            }
            for (var e = tid; e < BC * DK; e += WG) {
                let c = e / DK;
                let dd = e % DK;
                let j = j0 + c;
                let d = d0 + dd;
                var val = 0.0;
                if j < keys && d < params.d {
                    val = f32(k[k_base + j * params.k_sr + d]);
                }
                stage[DK * QS + dd * KS + c] = val;
            }
            workgroupBarrier();
            for (var dd = 0u; dd < DK; dd++) {
                var qr: array<f32, TR>;
                var kc: array<f32, TC>;
                for (var r = 0u; r < TR; r++) {
                    qr[r] = stage[dd * QS + rg + r * NRG];
                }
                for (var c = 0u; c < TC; c++) {
                    kc[c] = stage[DK * QS + dd * KS + cg + c * NC];
                }
                for (var r = 0u; r < TR; r++) {
                    for (var c = 0u; c < TC; c++) {
                        s[r * TC + c] = fma(qr[r], kc[c], s[r * TC + c]);
                    }
                }
            }
            workgroupBarrier();
        }

        // 2. Mask, scale, online softmax.
        for (var r = 0u; r < TR; r++) {
            let row = i0 + rg + r * NRG;
            var row_max = neg_inf();
            for (var c = 0u; c < TC; c++) {
                var t = neg_inf();
                let j = j0 + cg + c * NC;
                if row < params.sq && (SPLIT == 0u || (i32(j) >= j_begin && i32(j) < j_end)) {
                    t = logit(s[r * TC + c], b, h, row, j, keys);
                }
                s[r * TC + c] = t;
                row_max = max(row_max, t);
            }
            red[(rg + r * NRG) * NC + cg] = row_max;
        }
        workgroupBarrier();
        for (var r = 0u; r < TR; r++) {
            let lr = rg + r * NRG;
            var m_new = m[r];
            for (var g = 0u; g < NC; g++) {
                m_new = max(m_new, red[lr * NC + g]);
            }
            // A row with nothing visible yet keeps m = -inf; subtracting 0
            // instead of -inf keeps exp2 at 0 rather than NaN.
            let m_use = select(m_new, 0.0, m_new == neg_inf());
            let alpha = exp2(m[r] - m_use);
            m[r] = m_new;
            var sum = 0.0;
            var saw_nan = false;
            for (var c = 0u; c < TC; c++) {
                let t = s[r * TC + c];
                saw_nan = saw_nan || is_nan(t);
                let p = exp2(t - m_use);
                sum += p;
                p_tile[lr * PS + cg + c * NC] = p;
            }
            l[r] = l[r] * alpha + sum;
            if saw_nan {
                // A NaN logit poisons its row only: l = NaN marks it.
                l[r] = nan();
            }
            for (var x = 0u; x < TD; x++) {
                acc[r * TD + x] *= alpha;
            }
        }
        workgroupBarrier();

        // 3. O += P V, V streamed VK keys at a time.
        for (var k0 = 0u; k0 < BC; k0 += VK) {
            for (var e = tid; e < VK * DVP; e += WG) {
                let kk = e / DVP;
                let c = e % DVP;
                let j = j0 + k0 + kk;
                var val = 0.0;
                // Keys past the padding length are zeroed, so garbage there
                // (a KV cache's spare capacity) cannot reach the output.
                if j < keys && c < params.dv {
                    val = f32(v[v_base + j * params.v_sr + c]);
                }
                stage[kk * DVP + c] = val;
            }
            workgroupBarrier();
            for (var kk = 0u; kk < VK; kk++) {
                var pr: array<f32, TR>;
                var vc: array<f32, TD>;
                for (var r = 0u; r < TR; r++) {
                    pr[r] = p_tile[(rg + r * NRG) * PS + k0 + kk];
                }
                for (var x = 0u; x < TD; x++) {
                    vc[x] = stage[kk * DVP + cg + x * NC];
                }
                for (var r = 0u; r < TR; r++) {
                    for (var x = 0u; x < TD; x++) {
                        acc[r * TD + x] = fma(pr[r], vc[x], acc[r * TD + x]);
                    }
                }
            }
            workgroupBarrier();
        }
    }

    // Sum the partial row sums of the NC invocations sharing each row.
    for (var r = 0u; r < TR; r++) {
        red[(rg + r * NRG) * NC + cg] = l[r];
    }
    workgroupBarrier();
    for (var r = 0u; r < TR; r++) {
        let lr = rg + r * NRG;
        let row = i0 + lr;
        var l_sum = 0.0;
        for (var g = 0u; g < NC; g++) {
            l_sum += red[lr * NC + g];
        }
        if row >= params.sq {
            continue;
        }
        let row_nan = is_nan(l_sum);
        let inv = select(select(0.0, 1.0 / l_sum, l_sum != 0.0), nan(), row_nan);
        if SPLIT == 0u {
            let o_row = b * params.o_sb + h * params.o_sh + row * params.o_sr;
            for (var x = 0u; x < TD; x++) {
                let c = cg + x * NC;
                if c < params.dv {
                    o[o_row + c] = Elem(select(acc[r * TD + x] * inv, nan(), row_nan));
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
            let rows = params.batch * params.hq * params.sq;
            let state = (split * params.batch + b) * params.hq * params.sq
                + h * params.sq + row;
            for (var x = 0u; x < TD; x++) {
                let c = cg + x * NC;
                if c < params.dv {
                    lse[state * params.dv + c] = select(acc[r * TD + x] * inv, nan(), row_nan);
                }
            }
            if cg == 0u {
                let stats = params.splits * rows * params.dv + 2u * state;
                lse[stats] = m[r];
                lse[stats + 1u] = select(l_sum, nan(), row_nan);
            }
        }
    }
}
