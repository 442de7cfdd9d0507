// attention_common: the parameters, bindings and masking rule shared by every
// attention kernel (appended by the registry after the kernel's own file).
//
// Layout: every operand is addressed through (batch, head, row) strides in
// elements with a contiguous last dimension, so both [B, H, S, D] and the
// packed [B, S, H*D] layout (and a KV cache with spare capacity) are read in
// place, without copies; q, k and v may start at an element offset (the
// three parts of one fused QKV projection bound as one buffer).
// Masking: key j is visible to query row i when
//     i + lo_off <= j <= i + hi_off   (causal and sliding window, folded by
//                                      the host into two diagonal offsets)
//     j < kv_len[b]                   (key padding, when has_kv_len = 1)
//   with bottom-right alignment and key lengths (align_keys = 1) the band
//   follows each batch's own last key: both offsets move by kv_len[b] - sk.
//     mask[b, h, i, j] != 0           (mask_kind 1, boolean as 0/1 floats)
// and an additive mask (mask_kind 2) is added to the logit after soft-capping.
// Logits are kept in log2 units (scale and the additive mask multiplied by
// log2(e)) so softmax uses exp2.

struct Params {
    batch: u32,
    hq: u32,
    hkv: u32,
    sq: u32,
    sk: u32,
    d: u32,
    dv: u32,
    group: u32,        // hq / hkv: query heads per KV head
    q_sb: u32, q_sh: u32, q_sr: u32,
    k_sb: u32, k_sh: u32, k_sr: u32,
    v_sb: u32, v_sh: u32, v_sr: u32,
    o_sb: u32, o_sh: u32, o_sr: u32,
    // first element of q, k and v in their bindings (one fused projection
    // read in place); the backward kernels take 0
    q_off: u32, k_off: u32, v_off: u32,
    lo_off: i32,       // first visible key is i + lo_off
    hi_off: i32,       // last visible key is i + hi_off
    scale: f32,        // softmax scale in natural units
    scale_log2: f32,   // scale * log2(e)
    softcap: f32,      // 0 = off; else cap * tanh(s / cap)
    softcap_log2: f32, // softcap * log2(e)
    mask_kind: u32,    // 0 none, 1 boolean (0 = masked), 2 additive
    m_sb: u32, m_sh: u32, m_sr: u32, m_sc: u32,
    has_kv_len: u32,
    align_keys: u32,   // 1: bottom-right alignment to each batch's key length
    split_len: u32,    // keys per split (split-KV decoding); 0 = one split
    splits: u32,       // number of key splits
    pack_heads: u32,   // flash: rows of a workgroup run over the query heads of one KV head
}

@group(0) @binding(0) var<uniform> params: Params;

const LOG2E: f32 = 1.4426950408889634;
const LN2: f32 = 0.6931471805599453;

fn neg_inf() -> f32 {
    // A var, not a constant: a constant expression that is not finite is a
    // shader-creation error in WGSL (the browser's compiler rejects it).
    var bits = 0xff800000u;
    return bitcast<f32>(bits);
}

fn nan() -> f32 {
    var bits = 0x7fc00000u;
    return bitcast<f32>(bits);
}

// NaN test on the bits: compilers may assume arithmetic has no NaN and fold
// x != x away, and software exp2 clamps its argument (turning NaN into 0), so
// NaN propagation is tracked explicitly.
fn is_nan(x: f32) -> bool {
    return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u;
}

// Number of keys batch b may attend to (key padding).
fn key_count(b: u32) -> u32 {
    if params.has_kv_len == 1u {
        return min(kv_len[min(b, arrayLength(&kv_len) - 1u)], params.sk);
    }
    return params.sk;
}

// How far batch b's diagonal band moves from the host's offsets: with
// bottom-right alignment to key lengths, each batch ends at its own last key.
fn diag_shift(keys: u32) -> i32 {
    if params.align_keys == 1u {
        return i32(keys) - i32(params.sk);
    }
    return 0;
}

// The first and last visible key of row i are i + first_off(keys) and
// i + last_off(keys), for a batch with `keys` keys.
fn first_off(keys: u32) -> i32 {
    return params.lo_off + diag_shift(keys);
}

fn last_off(keys: u32) -> i32 {
    return params.hi_off + diag_shift(keys);
}

// Turns the raw dot product q_i . k_j into a logit in log2 units, or -inf
// when key j is masked for row i. `keys` is key_count(b).
fn logit(dot: f32, b: u32, h: u32, i: u32, j: u32, keys: u32) -> f32 {
    let ii = i32(i);
    let jj = i32(j);
    if j >= keys || jj < ii + first_off(keys) || jj > ii + last_off(keys) {
        return neg_inf();
    }
    var t: f32;
    if params.softcap > 0.0 {
        // clamp keeps tanh away from exp overflow in implementations that
        // compute it as a ratio of exponentials (tanh(15) == 1 in f32).
        t = params.softcap_log2 * tanh(clamp(dot * params.scale / params.softcap, -15.0, 15.0));
    } else {
        t = dot * params.scale_log2;
    }
    if params.mask_kind != 0u {
        // In bounds by the host's broadcast check; the explicit guard keeps
        // the trusted (unchecked) modules safe against any stride mistake.
        let mi = min(b * params.m_sb + h * params.m_sh + i * params.m_sr + j * params.m_sc,
                     arrayLength(&mask) - 1u);
        let mv = f32(mask[mi]);
        if params.mask_kind == 1u {
            if mv == 0.0 {
                return neg_inf();
            }
        } else {
            t = t + mv * LOG2E;
        }
    }
    return t;
}

alias Elem = f32;

@group(0) @binding(1) var<storage, read> q: array<Elem>;
@group(0) @binding(2) var<storage, read> k: array<Elem>;
@group(0) @binding(3) var<storage, read> v: array<Elem>;
// O's element: Elem, or u32 words of two bf16 values (the tensor-core
// flash kernel's O_BF16; the specialisation rewrites the alias).
alias OStore = Elem;
@group(0) @binding(4) var<storage, read_write> o: array<OStore>;
// Per-row logsumexp [B, Hq, Sq] in natural units (f32); split-KV kernels use
// it as f32 scratch for their partial states.
@group(0) @binding(5) var<storage, read_write> lse: array<f32>;
@group(0) @binding(6) var<storage, read> mask: array<Elem>;
@group(0) @binding(7) var<storage, read> kv_len: array<u32>;
