// attention_naive: the three-kernel attention the flash kernel replaces, kept
// as the on-GPU reference and as the tour's "before".
//
// Algorithm: `scores` writes the whole score matrix S = mask(scale Q K^T) in
//   log2 units to global memory ([B, Hq, Sq, Sk] f32, -inf where masked), one
//   invocation per element, walking D straight from global memory; `softmax`
//   turns each row into probabilities in place (one invocation per row: max,
//   sum of exp2, normalise) and writes lse; `pv` computes O = P V, one
//   invocation per output element walking the Sk keys. Memory traffic is
//   O(Sq Sk) per head: exactly what FlashAttention avoids.
// Workgroup: 16 x 16 (scores, pv), 64 (softmax).
// Grid: scores (ceil(Sk/16), ceil(Sq/16), B*Hq); softmax (ceil(rows/64), 1, 1)
//   with rows = B*Hq*Sq split over y when large; pv (ceil(Dv/16), ceil(Sq/16), B*Hq).
// Limits: S must fit one storage binding (the host refuses with LimitExceeded).
// Types: Elem f32 or f16 (text); S, P and statistics in f32.
// Measurements (flash against naive): docs/perf/attention.md#scalar-flash-kernel.

@group(0) @binding(9) var<storage, read_write> scores_buf: array<f32>;

@compute @workgroup_size(16, 16, 1)
fn scores(@builtin(global_invocation_id) gid: vec3<u32>) {
    let j = gid.x;
    let i = gid.y;
    let z = gid.z;
    if j >= params.sk || i >= params.sq {
        return;
    }
    let b = z / params.hq;
    let h = z % params.hq;
    let hk = h / params.group;
    let qr = params.q_off + b * params.q_sb + h * params.q_sh + i * params.q_sr;
    let kr = params.k_off + b * params.k_sb + hk * params.k_sh + j * params.k_sr;
    var dot = 0.0;
    for (var d = 0u; d < params.d; d++) {
        dot = fma(f32(q[qr + d]), f32(k[kr + d]), dot);
    }
    scores_buf[(z * params.sq + i) * params.sk + j] = logit(dot, b, h, i, j, key_count(b));
}

@compute @workgroup_size(64, 1, 1)
fn softmax(
    @builtin(global_invocation_id) gid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
) {
    let row = gid.y * groups.x * 64u + gid.x;
    let rows = params.batch * params.hq * params.sq;
    if row >= rows {
        return;
    }
    let base = row * params.sk;
    var m = neg_inf();
    var row_nan = false;
    for (var j = 0u; j < params.sk; j++) {
        m = max(m, scores_buf[base + j]);
        row_nan = row_nan || is_nan(scores_buf[base + j]);
    }
    let m_use = select(m, 0.0, m == neg_inf());
    var l = 0.0;
    for (var j = 0u; j < params.sk; j++) {
        l += exp2(scores_buf[base + j] - m_use);
    }
    let inv = select(0.0, 1.0 / l, l != 0.0);
    for (var j = 0u; j < params.sk; j++) {
        scores_buf[base + j] = select(exp2(scores_buf[base + j] - m_use) * inv, nan(), row_nan);
    }
    if row < arrayLength(&lse) {
        lse[row] = select(select(neg_inf(), (m + log2(l)) * LN2, l != 0.0), nan(), row_nan);
    }
}

@compute @workgroup_size(16, 16, 1)
fn pv(@builtin(global_invocation_id) gid: vec3<u32>) {
    let c = gid.x;
    let i = gid.y;
    let z = gid.z;
    if c >= params.dv || i >= params.sq {
        return;
    }
    let b = z / params.hq;
    let h = z % params.hq;
    let hk = h / params.group;
    let keys = key_count(b);
    let pr = (z * params.sq + i) * params.sk;
    let vb = params.v_off + b * params.v_sb + hk * params.v_sh + c;
    var acc = 0.0;
    for (var j = 0u; j < keys; j++) {
        acc = fma(scores_buf[pr + j], f32(v[vb + j * params.v_sr]), acc);
    }
    o[b * params.o_sb + h * params.o_sh + i * params.o_sr + c] = Elem(acc);
}
