// attention_decode: split-KV attention for few query rows (KV-cache decoding),
// shaped for memory bandwidth rather than arithmetic.
//
// Algorithm: a workgroup owns one (batch, KV head, key split) and up to ROWS
//   query rows of that KV head (the (query head, position) pairs of its GQA
//   group, row r = head (hk * group + r / Sq) at position r % Sq), so every
//   K and V byte of the split is read from memory once for all of them. It
//   walks the split KB keys at a time:
//   1. scores: LK = 4 invocations per key, each reading KWPL 16-byte words of
//      the key row (word p + 4 i: the 4 invocations of a key read 64
//      contiguous bytes per load), dotting them with the query rows staged
//      in workgroup memory (f32, one broadcast read serves the invocations
//      of many keys) and writing ROWS partial dots per key to `part` (one
//      vec4 per (row, key) holds the 4 partials; the reader adds them).
//   2. logits: invocation e of (row, key) pair e adds the 4 partials and
//      applies `logit` (scale, soft-cap, masks) once, into `lgs`.
//   3. P V: invocation (g, c) owns 16-byte word c of the value rows (WVP
//      invocations per row, contiguous loads) and the keys g + G t of the
//      block (t < VPL); it keeps its own online softmax state per row
//      (running max m and sum l in log2 units, f32) and accumulator, so no
//      reduction is needed inside the loop, only two barriers per block.
//   Register pipelining: the next block's K words, and its V words (VPRE =
//   1; else the current block's V words, when double-buffering them would
//   cost too many registers), are loaded into registers before the current
//   block is computed (loads never compute with what they just loaded).
//   At the end the G states of each row are merged through workgroup memory
//   (max, rescale, sum) and the split's unnormalised state (O / l, m, l) goes
//   to the scratch bound as `lse` in attention_merge.wgsl's layout; the merge
//   kernel combines the splits (also when there is one).
//   Masking: the common `logit` rule (causal in both alignments, windows,
//   key lengths, boolean/additive masks, soft-cap); the key range of a
//   workgroup is clipped to what any of its rows can see. Rows with no
//   visible key get l = 0 (merge: O = 0, lse = -inf); a NaN logit makes its
//   row NaN (tracked explicitly, as in attention_flash.wgsl).
// Workgroup: WG = 256 invocations; KB = WG / LK = 64 keys per block.
// Tile parameters (text constants, set by the host): ROWS (query rows per
//   workgroup, 1 to 8), EPW (elements per 16-byte word: 4 for f32, 8 for
//   f16), KWPL = ceil(D / EPW / 4), WVP (power of two >= Dv / EPW, >= 4),
//   VPRE (1: V words prefetched a block ahead).
// Bindings: K and V as 16-byte words (bindings 12, 13: the same buffers as
//   k and v, whose element bindings 2, 3 this kernel does not use); the
//   host guarantees D and Dv are multiples of EPW (so every row starts on a
//   word) and falls back to the flash kernel otherwise.
// Grid: (splits, Hkv * row chunks, B).
// Limits: D <= 4 * KWPL * EPW, Dv <= WVP * EPW (256 on the host), any Sk,
//   split length a multiple of KB (the last split and key lengths may end
//   anywhere; every global access is checked against the logical shape).

const ROWS: u32 = 4u;
const EPW: u32 = 8u;
const KWPL: u32 = 4u;
const WVP: u32 = 16u;
const VPRE: u32 = 1u;

const WG: u32 = 256u;
const LK: u32 = 4u;
const KB: u32 = WG / LK;          // keys per block
const G: u32 = WG / WVP;          // key groups of the P V step
const VPL: u32 = KB / G;          // keys per invocation per block in P V
const E4: u32 = EPW / 4u;         // vec4<f32> per 16-byte word
const QW4: u32 = KWPL * LK * E4;  // vec4<f32> of a staged query row

@group(0) @binding(12) var<storage, read> kw: array<vec4<u32>>;
@group(0) @binding(13) var<storage, read> vw: array<vec4<u32>>;

var<workgroup> q_s: array<vec4<f32>, ROWS * QW4>;
var<workgroup> part: array<vec4<f32>, ROWS * KB>;
var<workgroup> lgs: array<f32, ROWS * KB>;
var<workgroup> comb: array<vec4<f32>, WG * E4>;
var<workgroup> red: array<f32, WG>;

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

@compute @workgroup_size(WG, 1, 1)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
) {
    let split = wid.x;
    let rows_kv = params.group * params.sq;
    let chunks = (rows_kv + ROWS - 1u) / ROWS;
    let hk = wid.y / chunks;
    let r0 = (wid.y % chunks) * ROWS;
    let b = wid.z;
    let keys = key_count(b);

    // Stage the query rows (f32, zero past D and for absent rows).
    for (var e = tid; e < ROWS * QW4; e += WG) {
        let r = e / QW4;
        let d0 = (e % QW4) * 4u;
        var val = vec4<f32>(0.0);
        let row = r0 + r;
        if row < rows_kv {
            let h = hk * params.group + row / params.sq;
            let pos = row % params.sq;
            let base = b * params.q_sb + h * params.q_sh + pos * params.q_sr;
            for (var i = 0u; i < 4u; i++) {
                if d0 + i < params.d && base + d0 + i < arrayLength(&q) {
                    val[i] = f32(q[base + d0 + i]);
                }
            }
        }
        q_s[e] = val;
    }

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
    let kk = tid / LK;
    let p = tid % LK;
    let c = tid % WVP;
    let g = tid / WVP;
    let v_words = params.dv / EPW;

    var m: array<f32, ROWS>;
    var l: array<f32, ROWS>;
    var bad: array<bool, ROWS>;
    var acc: array<vec4<f32>, ROWS * E4>;
    for (var r = 0u; r < ROWS; r++) {
        m[r] = neg_inf();
        l[r] = 0.0;
        bad[r] = false;
    }
    for (var i = 0u; i < ROWS * E4; i++) {
        acc[i] = vec4<f32>(0.0);
    }

    var k_cur = load_k(k_base, j_start, kk, p, j_end);
    var v_cur: array<vec4<u32>, VPL>;
    if VPRE == 1u {
        v_cur = load_v(v_base, j_start, g, c, j_end);
    }
    workgroupBarrier();
    for (var j0 = j_start; j0 < j_end; j0 += KB) {
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

        // 1. partial dots of key j0 + kk over the words p + 4 i.
        var dots: array<f32, ROWS>;
        for (var r = 0u; r < ROWS; r++) {
            dots[r] = 0.0;
        }
        for (var i = 0u; i < KWPL; i++) {
            let w = p + i * LK;
            for (var h = 0u; h < E4; h++) {
                let kv = unpack_word(k_cur[i], h);
                for (var r = 0u; r < ROWS; r++) {
                    dots[r] += dot(kv, q_s[r * QW4 + w * E4 + h]);
                }
            }
        }
        for (var r = 0u; r < ROWS; r++) {
            part[r * KB + kk][p] = dots[r];
        }
        workgroupBarrier();

        // 2. the logits (scale, soft-cap, masks), once per (row, key).
        for (var e = tid; e < ROWS * KB; e += WG) {
            let key = e % KB;
            let row = r0 + e / KB;
            let j = j0 + key;
            var s = neg_inf();
            if j < j_end && row < rows_kv {
                let pd = part[e];
                let h = hk * params.group + row / params.sq;
                s = logit(pd.x + pd.y + pd.z + pd.w, b, h, row % params.sq, j, keys);
            }
            lgs[e] = s;
        }
        // No barrier closes the block: `part` is read only before this
        // barrier and `lgs` written only after the next block's first one.
        workgroupBarrier();

        // 3. online softmax and P V over the keys g + G t.
        for (var r = 0u; r < ROWS; r++) {
            var lg: array<f32, VPL>;
            var mb = m[r];
            for (var t = 0u; t < VPL; t++) {
                var s = lgs[r * KB + g + t * G];
                if is_nan(s) {
                    bad[r] = true;
                    s = neg_inf();
                }
                lg[t] = s;
                mb = max(mb, s);
            }
            if mb > m[r] {
                let alpha = select(0.0, exp2(m[r] - mb), m[r] > neg_inf());
                l[r] *= alpha;
                for (var e = 0u; e < E4; e++) {
                    acc[r * E4 + e] *= alpha;
                }
                m[r] = mb;
            }
            for (var t = 0u; t < VPL; t++) {
                if lg[t] > neg_inf() {
                    let pr = exp2(lg[t] - m[r]);
                    l[r] += pr;
                    for (var e = 0u; e < E4; e++) {
                        acc[r * E4 + e] += pr * unpack_word(v_reg[t], e);
                    }
                }
            }
        }
        k_cur = k_next;
        v_cur = v_next;
    }
    workgroupBarrier();

    // Merge the G per-invocation states of each row and write the split's
    // state: O / l at [split][state][Dv], (m, l) after all outputs.
    let rows_all = params.batch * params.hq * params.sq;
    let stats = params.splits * rows_all * params.dv;
    for (var r = 0u; r < ROWS; r++) {
        let row = r0 + r;
        if c == 0u {
            red[g] = m[r];
        }
        workgroupBarrier();
        var mm = neg_inf();
        for (var x = 0u; x < G; x++) {
            mm = max(mm, red[x]);
        }
        let sc = select(0.0, exp2(m[r] - mm), m[r] > neg_inf());
        workgroupBarrier();
        for (var e = 0u; e < E4; e++) {
            comb[(g * WVP + c) * E4 + e] = acc[r * E4 + e] * sc;
        }
        if c == 0u {
            red[g] = select(l[r] * sc, nan(), bad[r]);
        }
        workgroupBarrier();
        if row < rows_kv && g == 0u {
            let h = hk * params.group + row / params.sq;
            let pos = row % params.sq;
            let state = (b * params.hq + h) * params.sq + pos;
            var ll = 0.0;
            for (var x = 0u; x < G; x++) {
                ll += red[x];
            }
            let inv = select(0.0, 1.0 / ll, ll != 0.0);
            if c < v_words {
                for (var e = 0u; e < E4; e++) {
                    var sum = vec4<f32>(0.0);
                    for (var x = 0u; x < G; x++) {
                        sum += comb[(x * WVP + c) * E4 + e];
                    }
                    let o0 = (split * rows_all + state) * params.dv + c * EPW + e * 4u;
                    for (var i = 0u; i < 4u; i++) {
                        if o0 + i < stats && o0 + i < arrayLength(&lse) {
                            lse[o0 + i] = sum[i] * inv;
                        }
                    }
                }
            }
            if c == 0u {
                let st = stats + 2u * (split * rows_all + state);
                if st + 1u < arrayLength(&lse) {
                    lse[st] = mm;
                    lse[st + 1u] = ll;
                }
            }
        }
        workgroupBarrier();
    }
}
