// attention_decode_lanes: split-KV attention for few query rows (KV-cache
// decoding) with no workgroup barrier in the key loop: each group of LK
// lanes of a subgroup streams its own keys and keeps its own softmax state.
//
// Algorithm: a workgroup owns one (batch, KV head, key split) and up to ROWS
//   query rows of that KV head (the (query head, position) pairs of its GQA
//   group, as in attention_decode.wgsl), four to a vec4 ("row quads", RQ of
//   them), so every per-row quantity is a vec4 over rows.
//   Lane `part` of a key slot (LK lanes per key, a power of two that divides
//   the subgroup) owns the 16-byte words part + LK i of a key row (i < KW)
//   and of a value row (i < VW), for K and V alike, so a key's score and its
//   share of P V stay in the same lanes:
//   1. the lane dots its K words with the query rows, which it holds in
//      registers (element d of the 4 rows of a quad as one vec4, staged once);
//   2. the key's LK partial dots are added by subgroup shuffles (xor 1 ..
//      LK / 2), so every lane of the slot holds the key's logits;
//   3. the running max m moves lazily (only when a logit passes it by more
//      than TAU, as in attention_decode.wgsl; the slot's lanes agree, since
//      they hold the same logits), p = exp2(s - m), l += p, and the lane adds
//      p times its V words to its accumulators.
//   A subgroup step takes KPL keys per slot (slots = subgroup size / LK: for
//   a given u < KPL the slots read consecutive keys, so one load instruction
//   of a subgroup covers consecutive rows); the subgroups of the workgroup
//   interleave their steps over the split (step width KPL * WG / LK keys).
//   The next step's K and V words are loaded into registers before the
//   current step is computed. No workgroup memory, no barrier in the loop.
// Epilogue: the slots' states are combined by shuffles (xor LK ..), the
//   subgroups' through workgroup memory (one barrier), and the first LK
//   lanes of subgroup 0 write the split's state (O / l, m, l) to the scratch
//   bound as `lse` in attention_merge.wgsl's layout; the merge kernel
//   combines the splits.
// Masking: `logit` (causal in both alignments, windows, key lengths,
//   boolean/additive masks, soft-cap) except on steps every row sees whole
//   (no mask tensor, no soft-cap): those take one multiply per logit. The
//   key range is clipped to what any of the workgroup's rows can see. Rows
//   with no visible key get l = 0 (merge: O = 0, lse = -inf); a NaN logit
//   makes its row NaN (NaN stays out of the max).
// Tile parameters (text constants, set by the host, tune/attention.rs
//   `decode_lanes_spec`): ROWS (query rows per workgroup, 1 to 8), RQ =
//   ceil(ROWS / 4), EPW (elements per 16-byte word: 4 for f32, 8 for f16),
//   LK (lanes per key; at most the adapter's smallest subgroup), KW =
//   ceil(D / EPW / LK), VW = ceil(Dv / EPW / LK), KPL (keys per slot and
//   step), WG, SGMIN (the smallest subgroup size, for the epilogue's
//   workgroup memory).
// Bindings: K and V as 16-byte words (12, 13), as attention_decode.wgsl;
//   the host guarantees D and Dv are multiples of EPW and row strides
//   multiples of EPW.
// Grid: (splits, Hkv * row chunks, B).

const ROWS: u32 = 4u;
const RQ: u32 = 1u;
const EPW: u32 = 8u;
const LK: u32 = 16u;
const KW: u32 = 1u;
const VW: u32 = 1u;
const KPL: u32 = 2u;
const WG: u32 = 128u;
const SGMIN: u32 = 32u;

const TAU: f32 = 8.0;
const E4: u32 = EPW / 4u;
// Accumulator vec4s per quad: VW words of EPW elements.
const AQ: u32 = VW * EPW;
// Query vec4s per quad: KW words of EPW elements.
const QQ: u32 = KW * EPW;
// Vec4s of one lane's state in the epilogue: m and l per quad, then the
// accumulators.
const ST: u32 = 2u * RQ + RQ * AQ;
// Lanes that hold a state after the shuffles: LK per subgroup.
const STATES: u32 = (WG / SGMIN) * LK;

@group(0) @binding(12) var<storage, read> kw: array<vec4<u32>>;
@group(0) @binding(13) var<storage, read> vw: array<vec4<u32>>;

// st[x * STATES + sg * LK + part]: vec4 x of the state of lane `part` of
// subgroup sg (x < 2 RQ: m then l per quad; then the accumulators).
var<workgroup> st: array<vec4<f32>, ST * STATES>;

// Half `i` (0 or 1) of a word as 4 floats; f32 words have one half.
fn unpack_word(w: vec4<u32>, i: u32) -> vec4<f32> {
    if EPW == 8u {
        if i == 0u {
            return vec4<f32>(unpack2x16float(w.x), unpack2x16float(w.y));
        }
        return vec4<f32>(unpack2x16float(w.z), unpack2x16float(w.w));
    }
    return bitcast<vec4<f32>>(w);
}

fn nan_lanes(x: vec4<f32>) -> vec4<bool> {
    return vec4<bool>(is_nan(x.x), is_nan(x.y), is_nan(x.z), is_nan(x.w));
}

// exp2(a - m) as a weight: 0 while m is -inf (no visible key yet).
fn weight(a: vec4<f32>, m: vec4<f32>) -> vec4<f32> {
    return select(vec4<f32>(0.0), exp2(a - m), a > vec4<f32>(neg_inf()));
}

struct Words {
    k: array<vec4<u32>, KPL * KW>,
    v: array<vec4<u32>, KPL * VW>,
}

// The K and V words of this lane for the step whose first key (of this
// subgroup) is j0: key j0 + u * slots + slot for u < KPL.
fn load_step(k_base: u32, v_base: u32, j0: u32, slots: u32, slot: u32, part: u32, end: u32) -> Words {
    var out: Words;
    let k_words = params.d / EPW;
    let v_words = params.dv / EPW;
    for (var u = 0u; u < KPL; u++) {
        let j = j0 + u * slots + slot;
        for (var i = 0u; i < KW; i++) {
            let w = part + i * LK;
            var val = vec4<u32>(0u);
            if j < end && w < k_words {
                let idx = (k_base + j * params.k_sr) / EPW + w;
                if idx < arrayLength(&kw) {
                    val = kw[idx];
                }
            }
            out.k[u * KW + i] = val;
        }
        for (var i = 0u; i < VW; i++) {
            let w = part + i * LK;
            var val = vec4<u32>(0u);
            if j < end && w < v_words {
                let idx = (v_base + j * params.v_sr) / EPW + w;
                if idx < arrayLength(&vw) {
                    val = vw[idx];
                }
            }
            out.v[u * VW + i] = val;
        }
    }
    return out;
}

// The sum of `x` over the LK lanes of this lane's key slot, in each of them.
fn slot_sum(v: vec4<f32>) -> vec4<f32> {
    var x = v;
    for (var o = 1u; o < LK; o <<= 1u) {
        x += subgroupShuffleXor(x, o);
    }
    return x;
}

// The scratch index of row lane `lane` of quad qd, or 0xffffffff when the
// lane holds no row.
fn row_state(hk: u32, r0: u32, b: u32, rows_kv: u32, qd: u32, lane: u32) -> u32 {
    let r = qd * 4u + lane;
    let row = r0 + r;
    if r >= ROWS || row >= rows_kv {
        return 0xffffffffu;
    }
    let h = hk * params.group + row / params.sq;
    return (b * params.hq + h) * params.sq + row % params.sq;
}

@compute @workgroup_size(WG, 1, 1)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(subgroup_id) sg_id: u32,
    @builtin(subgroup_size) sg_size: u32,
    @builtin(subgroup_invocation_id) sg_lane: u32,
) {
    let split = wid.x;
    let rows_kv = params.group * params.sq;
    let chunks = (rows_kv + ROWS - 1u) / ROWS;
    let hk = wid.y / chunks;
    let r0 = (wid.y % chunks) * ROWS;
    let b = wid.z;
    let keys = key_count(b);

    // Keys this workgroup reads: its split, clipped to the band any of its
    // rows sees (positions 0 .. Sq - 1) and to the key length.
    var start = i32(split * params.split_len);
    var end = i32(min(keys, select(params.sk, (split + 1u) * params.split_len, params.splits > 1u)));
    start = max(start, first_off(keys));
    end = min(end, i32(params.sq) - 1 + last_off(keys) + 1);
    let j_start = u32(max(start, 0));
    let j_end = u32(max(end, 0));

    let k_base = b * params.k_sb + hk * params.k_sh;
    let v_base = b * params.v_sb + hk * params.v_sh;
    let slots = sg_size / LK;
    let slot = sg_lane / LK;
    let part = sg_lane % LK;
    let subgroups = WG / sg_size;
    // Keys per subgroup step and per workgroup step.
    let ks = KPL * slots;
    let kstep = KPL * (WG / LK);

    // The first step's loads go out before the query rows are read.
    var cur = load_step(k_base, v_base, j_start + sg_id * ks, slots, slot, part, j_end);

    // This lane's query elements: qr[(qd * KW + i) * EPW + e] holds element
    // (part + LK i) EPW + e of the quad's 4 rows (0 past D and for absent
    // rows).
    var qr: array<vec4<f32>, RQ * QQ>;
    for (var qd = 0u; qd < RQ; qd++) {
        for (var i = 0u; i < KW; i++) {
            for (var e = 0u; e < EPW; e++) {
                let d = (part + i * LK) * EPW + e;
                var val = vec4<f32>(0.0);
                for (var lane = 0u; lane < 4u; lane++) {
                    let r = qd * 4u + lane;
                    let row = r0 + r;
                    if r < ROWS && row < rows_kv && d < params.d {
                        let h = hk * params.group + row / params.sq;
                        let idx = b * params.q_sb + h * params.q_sh + (row % params.sq) * params.q_sr + d;
                        if idx < arrayLength(&q) {
                            val[lane] = f32(q[idx]);
                        }
                    }
                }
                qr[(qd * KW + i) * EPW + e] = val;
            }
        }
    }

    var m: array<vec4<f32>, RQ>;
    var l: array<vec4<f32>, RQ>;
    var acc: array<vec4<f32>, RQ * AQ>;
    for (var qd = 0u; qd < RQ; qd++) {
        m[qd] = vec4<f32>(neg_inf());
        l[qd] = vec4<f32>(0.0);
    }
    for (var i = 0u; i < RQ * AQ; i++) {
        acc[i] = vec4<f32>(0.0);
    }

    // No mask tensor, no soft-cap: steps whose keys every position of the
    // chunk sees take the logit as one multiply.
    let plain = params.mask_kind == 0u && params.softcap <= 0.0;

    for (var j0 = j_start; j0 < j_end; j0 += kstep) {
        let interior = plain && j0 + kstep <= j_end
            && i32(j0) >= i32(params.sq) - 1 + first_off(keys)
            && i32(j0 + kstep - 1u) <= last_off(keys);
        let js = j0 + sg_id * ks;
        let next = load_step(k_base, v_base, js + kstep, slots, slot, part, j_end);
        for (var u = 0u; u < KPL; u++) {
            let j = js + u * slots + slot;
            // 1-2. the key's logits, in every lane of its slot.
            var s: array<vec4<f32>, RQ>;
            for (var qd = 0u; qd < RQ; qd++) {
                var dot4 = vec4<f32>(0.0);
                for (var i = 0u; i < KW; i++) {
                    for (var hh = 0u; hh < E4; hh++) {
                        let kv = unpack_word(cur.k[u * KW + i], hh);
                        let qb = (qd * KW + i) * EPW + hh * 4u;
                        dot4 += kv.x * qr[qb] + kv.y * qr[qb + 1u] + kv.z * qr[qb + 2u] + kv.w * qr[qb + 3u];
                    }
                }
                dot4 = slot_sum(dot4);
                if interior {
                    s[qd] = dot4 * params.scale_log2;
                } else {
                    var sv = vec4<f32>(neg_inf());
                    for (var lane = 0u; lane < 4u; lane++) {
                        let r = qd * 4u + lane;
                        let row = r0 + r;
                        if j < j_end && r < ROWS && row < rows_kv {
                            let h = hk * params.group + row / params.sq;
                            sv[lane] = logit(dot4[lane], b, h, row % params.sq, j, keys);
                        }
                    }
                    s[qd] = sv;
                }
            }
            // 3. the lazy max, the probabilities and P V.
            for (var qd = 0u; qd < RQ; qd++) {
                let sm = select(s[qd], vec4<f32>(neg_inf()), nan_lanes(s[qd]));
                if any(sm > m[qd] + vec4<f32>(TAU)) {
                    let mn = max(m[qd], sm);
                    let alpha = weight(m[qd], mn);
                    l[qd] *= alpha;
                    for (var a = 0u; a < AQ; a++) {
                        acc[qd * AQ + a] *= alpha;
                    }
                    m[qd] = mn;
                }
                let p = exp2(s[qd] - select(m[qd], vec4<f32>(0.0), m[qd] == vec4<f32>(neg_inf())));
                l[qd] += p;
                for (var i = 0u; i < VW; i++) {
                    for (var hh = 0u; hh < E4; hh++) {
                        let vv = unpack_word(cur.v[u * VW + i], hh);
                        let a = qd * AQ + i * EPW + hh * 4u;
                        acc[a] += p * vv.x;
                        acc[a + 1u] += p * vv.y;
                        acc[a + 2u] += p * vv.z;
                        acc[a + 3u] += p * vv.w;
                    }
                }
            }
        }
        cur = next;
    }

    // The slots' states, combined by shuffles: after the steps xor LK,
    // 2 LK, .., lanes of the same part in every slot hold the subgroup's.
    for (var o = LK; o < sg_size; o <<= 1u) {
        for (var qd = 0u; qd < RQ; qd++) {
            let m2 = subgroupShuffleXor(m[qd], o);
            let l2 = subgroupShuffleXor(l[qd], o);
            let mn = max(m[qd], m2);
            let wa = weight(m[qd], mn);
            let wb = weight(m2, mn);
            l[qd] = l[qd] * wa + l2 * wb;
            for (var a = 0u; a < AQ; a++) {
                let x2 = subgroupShuffleXor(acc[qd * AQ + a], o);
                acc[qd * AQ + a] = acc[qd * AQ + a] * wa + x2 * wb;
            }
            m[qd] = mn;
        }
    }
    // The subgroups' states through workgroup memory.
    if slot == 0u {
        let at = sg_id * LK + part;
        for (var qd = 0u; qd < RQ; qd++) {
            st[qd * STATES + at] = m[qd];
            st[(RQ + qd) * STATES + at] = l[qd];
            for (var a = 0u; a < AQ; a++) {
                st[(2u * RQ + qd * AQ + a) * STATES + at] = acc[qd * AQ + a];
            }
        }
    }
    workgroupBarrier();
    if sg_id != 0u || slot != 0u {
        return;
    }
    for (var x = 1u; x < subgroups; x++) {
        let at = x * LK + part;
        for (var qd = 0u; qd < RQ; qd++) {
            let m2 = st[qd * STATES + at];
            let l2 = st[(RQ + qd) * STATES + at];
            let mn = max(m[qd], m2);
            let wa = weight(m[qd], mn);
            let wb = weight(m2, mn);
            l[qd] = l[qd] * wa + l2 * wb;
            for (var a = 0u; a < AQ; a++) {
                let x2 = st[(2u * RQ + qd * AQ + a) * STATES + at];
                acc[qd * AQ + a] = acc[qd * AQ + a] * wa + x2 * wb;
            }
            m[qd] = mn;
        }
    }

    // The split's state: O / l at [split][state][Dv], (m, l) after all
    // outputs.
    let rows_all = params.batch * params.hq * params.sq;
    let stats = params.splits * rows_all * params.dv;
    let v_words = params.dv / EPW;
    for (var qd = 0u; qd < RQ; qd++) {
        let inv = select(vec4<f32>(0.0), 1.0 / l[qd], l[qd] != vec4<f32>(0.0));
        for (var lane = 0u; lane < 4u; lane++) {
            let state = row_state(hk, r0, b, rows_kv, qd, lane);
            if state == 0xffffffffu {
                continue;
            }
            let base = (split * rows_all + state) * params.dv;
            for (var i = 0u; i < VW; i++) {
                let w = part + i * LK;
                if w >= v_words {
                    continue;
                }
                for (var e = 0u; e < EPW; e++) {
                    let at = base + w * EPW + e;
                    if at < stats && at < arrayLength(&lse) {
                        lse[at] = acc[qd * AQ + i * EPW + e][lane] * inv[lane];
                    }
                }
            }
            if part == 0u {
                let sa = stats + 2u * (split * rows_all + state);
                if sa + 1u < arrayLength(&lse) {
                    lse[sa] = m[qd][lane];
                    lse[sa + 1u] = l[qd][lane];
                }
            }
        }
    }
}
