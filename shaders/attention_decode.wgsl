// attention_decode: split-KV attention for few query rows (KV-cache decoding),
// shaped for memory bandwidth rather than arithmetic.
//
// Algorithm: a workgroup owns one (batch, KV head, key split) and up to ROWS
//   query rows of that KV head (the (query head, position) pairs of its GQA
//   group, row r = head (hk * group + r / Sq) at position r % Sq), so every
//   K and V byte of the split is read from memory once for all of them.
//   Query rows are packed four to a vec4 ("row quads", RQ of them), so every
//   per-row quantity (dots, logits, running max and sum, accumulators) is a
//   vec4 over rows and no per-row array or loop exists: the registers are
//   fixed-index vec4s the compiler keeps in registers.
//   It walks the split KB = WG / LK keys at a time:
//   1. scores: LK invocations per key, each reading KWPL 16-byte words of the
//      key row (word p + LK i: the LK invocations of a key read contiguous
//      bytes per load) and dotting them with the query rows staged transposed
//      in workgroup memory (element d of the 4 rows of a quad is one vec4,
//      one broadcast read serves the invocations of many keys; stored
//      element-in-word major, see q_t): one partial vec4 per (quad, key,
//      p).
//   2. logits: SHUFFLE = 1 (subgroups of at least LK lanes): the key's LK
//      invocations add their partials by subgroup shuffles and each takes
//      rows p, p + LK, .. of the quads; SHUFFLE = 0: the partials go to
//      `part`, a barrier, and invocation e of (quad, key) pair e adds them
//      and takes the 4 rows. Either way `logit` (scale, soft-cap, masks)
//      runs once per (row, key) into `lgs` (one multiply instead on blocks
//      every position sees, with no mask tensor or soft-cap), and the
//      probabilities p =
//      exp2(s - m) against the running max m as it stood before the block
//      go to `prob`: one exp2 per (row, key), not one per value word. m is
//      the same in every invocation and moves lazily (as in
//      FlashAttention-4's conditional rescaling): only when a logit passes
//      it by more than TAU (a flag in workgroup memory holding the block's
//      number, one per block parity); probabilities stay below 2^TAU, so
//      nothing overflows between moves. H200 (run 40): shuffles took
//      f16 32k from 76 to 70 us, 128k from 201 to 188.
//   3. P V: invocation (g, c) owns 16-byte word c of the value rows (WVP
//      invocations per row, contiguous loads) and the keys g + G t of the
//      block (t < VPL), with EPW vec4 accumulators per quad (element k of
//      its word, 4 rows) and its keys' probability sums l. When the block
//      moved the max (the first block with a visible key, then rarely),
//      every invocation takes the new max from the block's logits,
//      rescales its state and recomputes its keys' probabilities. No
//      reduction inside the loop; one barrier per block (two with
//      SHUFFLE = 0): lgs and prob alternate between two buffers by block
//      parity, so a block's are rewritten only after the next barrier.
//   Register pipelining: the next block's K words, and its V words (VPRE =
//   1; else the current block's V words, when double-buffering them would
//   cost too many registers), are loaded into registers before the current
//   block is computed (loads never compute with what they just loaded).
//   At the end the G states of each quad are summed through workgroup
//   memory (the max is common, so no rescale: `quad_stats` sums l,
//   `out_chunk` CE elements of every value word per barrier pair, called
//   with constant accumulator indices) and the split's state (O / l, m, l)
//   goes to the scratch bound as `lse` in attention_merge.wgsl's layout;
//   the merge kernel combines the splits (also when there is one). H200
//   (runs 94-96, f16 32k): the epilogue with CE 2 takes the split pass
//   from 64.6 to 61.9 us; CE 4 and CE 1 made the driver give the whole
//   kernel 168 registers instead of 128 (3 workgroups per SM instead of
//   4): 91-94 us. Measure every edit.
//   Registers per invocation: 2 blocks of KWPL K words and VPL V words
//   (VPRE = 1; else 1 block of V), EPW * RQ accumulator vec4s, m and l.
//   Masking: the common `logit` rule (causal in both alignments, windows,
//   key lengths, boolean/additive masks, soft-cap); the key range of a
//   workgroup is clipped to what any of its rows can see. Rows with no
//   visible key get l = 0 (merge: O = 0, lse = -inf); a NaN logit makes its
//   row NaN (its probability is NaN, and with it the row's l and O; NaN
//   stays out of the max).
// Workgroup: WG invocations (128 or 256, host); KB = WG / LK keys per block.
// Tile parameters (text constants, set by the host, tune/attention.rs
//   `DecodeTiles`): ROWS (query rows per workgroup, 1 to 8), RQ = ceil(ROWS /
//   4), EPW (elements per 16-byte word: 4 for f32, 8 for f16 and bf16), LK
//   (invocations per key in the score step, 2 to 8), KWPL = ceil(D / EPW /
//   LK), WVP (power of two >= Dv / EPW, with WG / WVP dividing KB), VPRE (1:
//   V words prefetched a block ahead), WG.
// Bindings: K and V as 16-byte words (bindings 12, 13: the same buffers as
//   k and v, whose element bindings 2, 3 this kernel does not use); the
//   host guarantees D and Dv are multiples of EPW (so every row starts on a
//   word) and falls back to the flash kernel otherwise.
// Grid: (splits, Hkv * row chunks, B).
// Limits: D <= LK * KWPL * EPW, Dv <= WVP * EPW (256 on the host), any Sk,
//   split length a multiple of KB (the last split and key lengths may end
//   anywhere; every global access is checked against the logical shape).

const ROWS: u32 = 4u;
const RQ: u32 = 1u;
const EPW: u32 = 8u;
const LK: u32 = 4u;
const KWPL: u32 = 4u;
const WVP: u32 = 16u;
const VPRE: u32 = 1u;
const WG: u32 = 256u;
// Timing probe (WGTILE_DECODE_PROBE, results meaningless when set): bit 0
// replaces the score math by one add per K word, bit 1 the softmax and P V
// math by one add per V word; the loads, barriers and epilogue stay; bit
// 2 replaces the epilogue by one store per invocation, bit 3 skips the key
// loop (the prologue, launch and epilogue alone).
// Why this kernel and not another (H200): it runs the f16 32k decode in
// 67.6 us (51% of the copy rate); f16 widening by integer operations, an
// L2 prefetch two or three blocks ahead, and a barrier-free kernel with
// LK lanes per key and the query in registers all lost (the key loop does
// not wait on DRAM latency; per-lane shuffles and exp2 cost more than the
// barrier): docs/perf/attention.md#decode.
const PROBE: u32 = 0u;
// 1: the LK partial dots of a key are added by subgroup shuffles and each
// of the key's LK invocations computes logits and probabilities of its own
// rows (no `part` round trip, one barrier per block); needs subgroups of at
// least LK invocations (attention_decode_shuffle.wgsl's entry point). 0:
// `part` in workgroup memory, a barrier, the first RQ * KB invocations
// (attention_decode_plain.wgsl).
const SHUFFLE: u32 = 0u;
// 1: K and V are bf16 (8 per word, EPW = 8) widened by shifts, q f32
// (staged by the host, `Elem` = f32); 0: K, V and q are `Elem`.
const KV_BF16: u32 = 0u;

// The running max moves only when a logit passes it by more than TAU
// (log2 units): probabilities stay below 2^TAU, far from f32's range.
const TAU: f32 = 8.0;
const KB: u32 = WG / LK;          // keys per block
const G: u32 = WG / WVP;          // key groups of the P V step
const VPL: u32 = KB / G;          // keys per invocation per block in P V
const E4: u32 = EPW / 4u;         // vec4<f32> per 16-byte word
const DP: u32 = KWPL * LK * EPW;  // staged (padded) query row length
const WPR: u32 = KWPL * LK;       // 16-byte words of a staged row

@group(0) @binding(12) var<storage, read> kw: array<vec4<u32>>;
@group(0) @binding(13) var<storage, read> vw: array<vec4<u32>>;

// q_t[qd * DP + (d % EPW) * WPR + d / EPW]: element d of the 4 rows of
// quad qd, ordered element-in-word major so the LK invocations of a key
// (consecutive words) read consecutive vec4s (no bank conflicts).
var<workgroup> q_t: array<vec4<f32>, RQ * DP>;
// part[(qd * LK + p) * KB + key]: partial dots of the quad's rows
// (SHUFFLE = 0 only).
var<workgroup> part: array<vec4<f32>, select(RQ * LK * KB, 1u, SHUFFLE == 1u)>;
// lgs[(block % 2) * RQ * KB + qd * KB + key]: logits of the quad's rows.
var<workgroup> lgs: array<vec4<f32>, 2u * RQ * KB>;
// prob[(block % 2) * RQ * KB + qd * KB + key]: exp2(logit - m) against the
// running max m as it stood before the block.
var<workgroup> prob: array<vec4<f32>, 2u * RQ * KB>;
// grow[(block % 2) * RQ + qd]: the number of the last block (from 1) in
// which some logit passed m + TAU. A block's logits and flags are written
// before its barrier and read after it; the same parity is written again
// two blocks later, after the next barrier, which every reader of this
// block has passed: nothing is cleared, no second barrier is needed.
var<workgroup> grow: array<atomic<u32>, 2u * RQ>;
// Value-word elements the epilogue sums per barrier pair (2 or 4; the
// host sets it: at most 8 KiB of comb).
const CE: u32 = 4u;
// comb[k * WG + tid]: element k0 + k of the invocation's value word.
var<workgroup> comb: array<vec4<f32>, CE * WG>;
var<workgroup> red: array<vec4<f32>, G>;

// Half `i` (0 or 1) of a word as 4 floats; f32 words have one half.
// bf16 (KV_BF16 = 1) widens exactly: element 2m of a u32 is its low half,
// 2m + 1 its high half, each the top 16 bits of its f32.
fn unpack_word(w: vec4<u32>, i: u32) -> vec4<f32> {
    if EPW == 8u && KV_BF16 == 1u {
        let p = select(w.xy, w.zw, i == 1u);
        return bitcast<vec4<f32>>(vec4<u32>(p.x << 16u, p.x & 0xffff0000u, p.y << 16u, p.y & 0xffff0000u));
    }
    if EPW == 8u {
        if i == 0u {
            return vec4<f32>(unpack2x16float(w.x), unpack2x16float(w.y));
        }
        return vec4<f32>(unpack2x16float(w.z), unpack2x16float(w.w));
    }
    return bitcast<vec4<f32>>(w);
}

// exp2(s - m) per lane: 0 for masked logits (s = -inf, also while m is
// -inf), NaN for NaN logits.
fn prob_of(s: vec4<f32>, m: vec4<f32>) -> vec4<f32> {
    return exp2(s - select(m, vec4<f32>(0.0), m == vec4<f32>(neg_inf())));
}

fn nan_lanes(x: vec4<f32>) -> vec4<bool> {
    return vec4<bool>(is_nan(x.x), is_nan(x.y), is_nan(x.z), is_nan(x.w));
}

// Loads the K words of this invocation for the block at key j0.
fn load_k(k_base: u32, j0: u32, kk: u32, p: u32, end: u32) -> array<vec4<u32>, KWPL> {
    var out: array<vec4<u32>, KWPL>;
    let j = j0 + kk;
    let words = params.d / EPW;
    for (var i = 0u; i < KWPL; i++) {
        let w = p + i * LK;
        var val = vec4<u32>(0u);
        if j < end && w < words {
            let idx = (k_base + j * params.k_sr) / EPW + w;
            if idx < arrayLength(&kw) {
                val = kw[idx];
            }
        }
        out[i] = val;
    }
    return out;
}

// Loads the V words of this invocation for the block at key j0.
fn load_v(v_base: u32, j0: u32, g: u32, c: u32, end: u32) -> array<vec4<u32>, VPL> {
    var out: array<vec4<u32>, VPL>;
    let v_words = params.dv / EPW;
    for (var t = 0u; t < VPL; t++) {
        let j = j0 + g + t * G;
        var val = vec4<u32>(0u);
        if j < end && c < v_words {
            let idx = (v_base + j * params.v_sr) / EPW + c;
            if idx < arrayLength(&vw) {
                val = vw[idx];
            }
        }
        out[t] = val;
    }
    return out;
}

// The kernel; `lin` numbers the invocation so that the LK invocations of a
// key are consecutive lanes of one subgroup (the entry points in
// attention_decode_shuffle.wgsl / _plain.wgsl).
fn decode(wid: vec3<u32>, tid: u32, lin: u32) {
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

    let k_base = params.k_off + b * params.k_sb + hk * params.k_sh;
    let v_base = params.v_off + b * params.v_sb + hk * params.v_sh;
    let kk = lin / LK;
    let p = lin % LK;
    let c = tid % WVP;
    let g = tid / WVP;
    let v_words = params.dv / EPW;

    // The first block's loads go out before the query rows are staged, so
    // their latency and the query's overlap.
    var k_cur = load_k(k_base, j_start, kk, p, j_end);
    var v_cur: array<vec4<u32>, VPL>;
    if VPRE == 1u {
        v_cur = load_v(v_base, j_start, g, c, j_end);
    }

    // Stage the query rows transposed (f32, zero past D and for absent rows).
    for (var e = tid; e < RQ * DP; e += WG) {
        let qd = e / DP;
        let d = e % DP;
        var val = vec4<f32>(0.0);
        for (var lane = 0u; lane < 4u; lane++) {
            let r = qd * 4u + lane;
            let row = r0 + r;
            if r < ROWS && row < rows_kv && d < params.d {
                let h = hk * params.group + row / params.sq;
                let pos = row % params.sq;
                let idx = params.q_off + b * params.q_sb + h * params.q_sh + pos * params.q_sr + d;
                if idx < arrayLength(&q) {
                    val[lane] = f32(q[idx]);
                }
            }
        }
        q_t[qd * DP + (d % EPW) * WPR + d / EPW] = val;
    }

    // Sized for the largest tile (2 quads, 8 elements per word) so the
    // epilogue indexes them with constants only; loops touch RQ (* EPW).
    // m: the running max of each row quad, the same in every invocation
    // (every change is computed by all from the same logits); l and acc:
    // this invocation's probability sums and P V over its own keys.
    var m: array<vec4<f32>, 2>;
    var l: array<vec4<f32>, 2>;
    var acc: array<vec4<f32>, 16>;
    for (var qd = 0u; qd < RQ; qd++) {
        m[qd] = vec4<f32>(neg_inf());
        l[qd] = vec4<f32>(0.0);
    }
    if tid < 2u * RQ {
        atomicStore(&grow[tid], 0u);
    }
    for (var i = 0u; i < RQ * EPW; i++) {
        acc[i] = vec4<f32>(0.0);
    }

    // No mask tensor, no soft-cap: blocks whose keys every position of the
    // slice sees (inside the band, below the split's end) take the logit as
    // one multiply instead of `logit`'s checks and the row's head division.
    let plain = params.mask_kind == 0u && params.softcap <= 0.0;

    workgroupBarrier();
    var blk = 0u;
    for (var j0 = j_start; j0 < j_end && (PROBE & 8u) == 0u; j0 += KB) {
        let interior = plain && j0 + KB <= j_end
            && i32(j0) >= i32(params.sq) - 1 + first_off(keys)
            && i32(j0 + KB - 1u) <= last_off(keys);
        let cur = (blk % 2u) * RQ;
        let slot = (blk % 2u) * RQ * KB;
        blk += 1u;
        // Loads in flight while this block is computed: the next block's K
        // words, and the next block's V words (VPRE = 1) or this block's.
        var v_reg: array<vec4<u32>, VPL>;
        var v_next: array<vec4<u32>, VPL>;
        if VPRE == 1u {
            v_next = load_v(v_base, j0 + KB, g, c, j_end);
            v_reg = v_cur;
        } else {
            v_reg = load_v(v_base, j0, g, c, j_end);
        }
        let k_next = load_k(k_base, j0 + KB, kk, p, j_end);

        // 1. partial dots of key j0 + kk over the words p + LK i.
        var dots: array<vec4<f32>, RQ>;
        for (var qd = 0u; qd < RQ; qd++) {
            dots[qd] = vec4<f32>(0.0);
        }
        for (var i = 0u; i < KWPL; i++) {
            let w = p + i * LK;
            if (PROBE & 1u) != 0u {
                dots[0] += bitcast<vec4<f32>>(k_cur[i]);
                continue;
            }
            for (var h = 0u; h < E4; h++) {
                let kv = unpack_word(k_cur[i], h);
                for (var qd = 0u; qd < RQ; qd++) {
                    let qb = qd * DP + h * 4u * WPR + w;
                    dots[qd] += kv.x * q_t[qb] + kv.y * q_t[qb + WPR]
                        + kv.z * q_t[qb + 2u * WPR] + kv.w * q_t[qb + 3u * WPR];
                }
            }
        }
        if SHUFFLE == 1u {
            // 2. the key's LK invocations add their partials by shuffles;
            // each then takes rows p, p + LK, .. of the block's quads: the
            // logit (scale, soft-cap, masks) and the probability against
            // the running max, once per (row, key); a logit past the max by
            // more than TAU flags the block.
            for (var qd = 0u; qd < RQ; qd++) {
                dots[qd] = key_sum(dots[qd]);
            }
            let j = j0 + kk;
            for (var t = p; t < RQ * 4u; t += LK) {
                let qd = t / 4u;
                let lane = t % 4u;
                let r = t;
                let row = r0 + r;
                var sv = neg_inf();
                if j < j_end && r < ROWS && row < rows_kv {
                    if interior {
                        sv = dots[qd][lane] * params.scale_log2;
                    } else {
                        let h = hk * params.group + row / params.sq;
                        sv = logit(dots[qd][lane], b, h, row % params.sq, j, keys);
                    }
                }
                let mr = m[qd][lane];
                let e = slot + qd * KB + kk;
                lgs[e][lane] = sv;
                prob[e][lane] = exp2(sv - select(mr, 0.0, mr == neg_inf()));
                if sv > mr + TAU {
                    atomicStore(&grow[cur + qd], blk);
                }
            }
        } else {
            for (var qd = 0u; qd < RQ; qd++) {
                part[(qd * LK + p) * KB + kk] = dots[qd];
            }
            workgroupBarrier();

            // 2. the logits (scale, soft-cap, masks) and their
            // probabilities against the running max, once per (row, key);
            // a logit past the max by more than TAU flags the block.
            // Invocation e for (quad, key) pair e: on NVIDIA warp 0 alone
            // while the others wait at the barrier. Spreading the pairs
            // over every warp (the first invocation of each key) measured
            // slower (H200, run 37: f16 32k 78.0 against 76.0 us, 128k
            // 210 against 202).
            for (var e = tid; e < RQ * KB; e += WG) {
                let qd = e / KB;
                let key = e % KB;
                let j = j0 + key;
                var sum = vec4<f32>(0.0);
                for (var x = 0u; x < LK; x++) {
                    sum += part[(qd * LK + x) * KB + key];
                }
                var sv = vec4<f32>(neg_inf());
                for (var lane = 0u; lane < 4u; lane++) {
                    let r = qd * 4u + lane;
                    let row = r0 + r;
                    if j < j_end && r < ROWS && row < rows_kv {
                        if interior {
                            sv[lane] = sum[lane] * params.scale_log2;
                        } else {
                            let h = hk * params.group + row / params.sq;
                            sv[lane] = logit(sum[lane], b, h, row % params.sq, j, keys);
                        }
                    }
                }
                lgs[slot + e] = sv;
                prob[slot + e] = prob_of(sv, m[qd]);
                if any(sv > m[qd] + vec4<f32>(TAU)) {
                    atomicStore(&grow[cur + qd], blk);
                }
            }
        }
        // The block's one barrier (two with SHUFFLE = 0): its logits,
        // probabilities and flags are complete. `part` is read only before
        // it; lgs, prob and grow of this parity are written again only two
        // blocks on, after the next block's barrier.
        workgroupBarrier();

        // 3. P V over the keys g + G t, 4 rows at once. When the block
        // moved the max (rarely, after the first), every invocation takes
        // the new max from the block's logits (NaN left out), rescales its
        // state and recomputes its keys' probabilities.
        if (PROBE & 2u) != 0u {
            for (var t = 0u; t < VPL; t++) {
                acc[0] += bitcast<vec4<f32>>(v_reg[t]) + prob[slot + g + t * G];
            }
        }
        for (var qd = 0u; qd < RQ && (PROBE & 2u) == 0u; qd++) {
            let moved = atomicLoad(&grow[cur + qd]) == blk;
            if moved {
                var mb = m[qd];
                for (var x = 0u; x < KB; x++) {
                    let sx = lgs[slot + qd * KB + x];
                    mb = max(mb, select(sx, vec4<f32>(neg_inf()), nan_lanes(sx)));
                }
                let alpha = select(vec4<f32>(0.0), exp2(m[qd] - mb), m[qd] > vec4<f32>(neg_inf()));
                l[qd] *= alpha;
                for (var k = 0u; k < EPW; k++) {
                    acc[qd * EPW + k] *= alpha;
                }
                m[qd] = mb;
            }
            for (var t = 0u; t < VPL; t++) {
                let at = slot + qd * KB + g + t * G;
                var pr = prob[at];
                if moved {
                    pr = prob_of(lgs[at], m[qd]);
                }
                l[qd] += pr;
                for (var h = 0u; h < E4; h++) {
                    let vv = unpack_word(v_reg[t], h);
                    let a = qd * EPW + h * 4u;
                    acc[a] += pr * vv.x;
                    acc[a + 1u] += pr * vv.y;
                    acc[a + 2u] += pr * vv.z;
                    acc[a + 3u] += pr * vv.w;
                }
            }
        }
        k_cur = k_next;
        v_cur = v_next;
    }
    workgroupBarrier();
    if (PROBE & 4u) != 0u {
        var keep = l[0] + m[0];
        for (var i = 0u; i < RQ * EPW; i++) {
            keep += acc[i];
        }
        let at = split * WG + tid;
        if at < arrayLength(&lse) {
            lse[at] = dot(keep, vec4<f32>(1.0));
        }
        return;
    }

    // Merge the G per-invocation states of each quad and write the split's
    // state: O / l at [split][state][Dv], (m, l) after all outputs. m is
    // the same in every invocation, so the states add without rescaling.
    // Written out call by call with constant indices: a loop holding
    // barriers that the driver did not unroll would index the accumulators
    // dynamically and push them to local memory for the whole kernel.
    let ex = EpiCtx(split, hk, r0, b, rows_kv, g, c, tid);
    let inv0 = quad_stats(ex, 0u, m[0], l[0]);
    out_chunk(ex, 0u, 0u, acc[0], acc[1], acc[2], acc[3], inv0);
    if EPW == 8u {
        out_chunk(ex, 0u, 4u, acc[4], acc[5], acc[6], acc[7], inv0);
    }
    if RQ == 2u {
        let inv1 = quad_stats(ex, 1u, m[1], l[1]);
        out_chunk(ex, 1u, 0u, acc[EPW], acc[EPW + 1u], acc[EPW + 2u], acc[EPW + 3u], inv1);
        if EPW == 8u {
            out_chunk(ex, 1u, 4u, acc[EPW + 4u], acc[EPW + 5u], acc[EPW + 6u], acc[EPW + 7u], inv1);
        }
    }
}

struct EpiCtx {
    split: u32,
    hk: u32,
    r0: u32,
    b: u32,
    rows_kv: u32,
    g: u32,
    c: u32,
    tid: u32,
}

// The scratch index of row lane `lane` of quad `qd`, or 0xffffffff when
// the lane holds no row: the state (b, h, position) of the row.
fn lane_state(x: EpiCtx, qd: u32, lane: u32) -> u32 {
    let r = qd * 4u + lane;
    let row = x.r0 + r;
    if r >= ROWS || row >= x.rows_kv {
        return 0xffffffffu;
    }
    let h = x.hk * params.group + row / params.sq;
    return (x.b * params.hq + h) * params.sq + row % params.sq;
}

// Quad qd's weight sum over the G key groups (m is common to all):
// writes (m, l) of its rows to the scratch and returns 1 / l (0 for rows
// that saw no key).
fn quad_stats(x: EpiCtx, qd: u32, mq: vec4<f32>, lq: vec4<f32>) -> vec4<f32> {
    workgroupBarrier();
    if x.c == 0u {
        red[x.g] = lq;
    }
    workgroupBarrier();
    var ll = vec4<f32>(0.0);
    for (var i = 0u; i < G; i++) {
        ll += red[i];
    }
    if x.tid == 0u {
        let rows_all = params.batch * params.hq * params.sq;
        let stats = params.splits * rows_all * params.dv;
        for (var lane = 0u; lane < 4u; lane++) {
            let state = lane_state(x, qd, lane);
            if state != 0xffffffffu {
                let st = stats + 2u * (x.split * rows_all + state);
                if st + 1u < arrayLength(&lse) {
                    lse[st] = mq[lane];
                    lse[st + 1u] = ll[lane];
                }
            }
        }
    }
    return select(vec4<f32>(0.0), 1.0 / ll, ll != vec4<f32>(0.0));
}

// Elements k0 .. k0 + 3 of every value word of quad qd (a0 .. a3, this
// invocation's sums), CE at a time: to `comb`, a barrier, and for each e
// < CE WVP an invocation sums element e % CE of word e / CE over the G key
// groups, times 1 / l, into the scratch; a barrier.
fn out_chunk(
    x: EpiCtx,
    qd: u32,
    k0: u32,
    a0: vec4<f32>,
    a1: vec4<f32>,
    a2: vec4<f32>,
    a3: vec4<f32>,
    inv: vec4<f32>,
) {
    if CE == 4u {
        comb[x.tid] = a0;
        comb[WG + x.tid] = a1;
        comb[2u * WG + x.tid] = a2;
        comb[3u * WG + x.tid] = a3;
        out_sums(x, qd, k0, inv);
    } else {
        comb[x.tid] = a0;
        comb[WG + x.tid] = a1;
        out_sums(x, qd, k0, inv);
        comb[x.tid] = a2;
        comb[WG + x.tid] = a3;
        out_sums(x, qd, k0 + 2u, inv);
    }
}

// One pass of out_chunk once `comb` holds elements k0 .. k0 + CE - 1:
// the barrier, the sums over the key groups, the stores, the barrier.
fn out_sums(x: EpiCtx, qd: u32, k0: u32, inv: vec4<f32>) {
    workgroupBarrier();
    for (var e = x.tid; e < CE * WVP; e += WG) {
        let word = e / CE;
        let k = e % CE;
        if word >= params.dv / EPW {
            continue;
        }
        var sum = vec4<f32>(0.0);
        for (var i = 0u; i < G; i++) {
            sum += comb[k * WG + i * WVP + word];
        }
        let o = sum * inv;
        let rows_all = params.batch * params.hq * params.sq;
        let stats = params.splits * rows_all * params.dv;
        for (var lane = 0u; lane < 4u; lane++) {
            let state = lane_state(x, qd, lane);
            if state != 0xffffffffu {
                let o0 = (x.split * rows_all + state) * params.dv + word * EPW + k0 + k;
                if o0 < stats && o0 < arrayLength(&lse) {
                    lse[o0] = o[lane];
                }
            }
        }
    }
    workgroupBarrier();
}
