// attention_backward_common: the bindings and the elementwise gradient rule
// shared by the backward kernels (attention_backward.wgsl, the scalar ones,
// and attention_bwd_coop_*.wgsl, the tensor-core ones). Appended by the
// registry before attention_common.wgsl.
//
// With S' the masked, scaled, soft-capped logit (log2 units, `logit`),
// lse2 = lse log2(e) and Delta_i = rowsum(dO_i * O_i) from `prepare`:
//   P_ij = exp2(S'_ij - lse2_i),  dS_ij = P_ij (dP_ij - Delta_i) g_ij,
//   g_ij = d(natural logit) / d(q . k) = scale, or scale (1 - tanh^2) with
//   soft-capping.
// Bindings: 10 dO (o's strides), 11 stats (f32 [2, B, Hq, Sq]: lse2, then
//   Delta), 12 dQ (q's strides), 13 dK (k's), 14 dV (v's).

@group(0) @binding(10) var<storage, read> d_o: array<Elem>;
@group(0) @binding(11) var<storage, read_write> stats: array<f32>;
@group(0) @binding(12) var<storage, read_write> dq_out: array<Elem>;
@group(0) @binding(13) var<storage, read_write> dk_out: array<Elem>;
@group(0) @binding(14) var<storage, read_write> dv_out: array<Elem>;

// d(logit in natural units) / d(q . k).
fn dlogit(dot: f32) -> f32 {
    if params.softcap > 0.0 {
        let th = tanh(clamp(dot * params.scale / params.softcap, -15.0, 15.0));
        return params.scale * (1.0 - th * th);
    }
    return params.scale;
}

// P and dS of query i, key j from the raw dot product and dO . v.
fn p_ds(b: u32, h: u32, i: u32, j: u32, keys: u32, dot: f32, dp: f32) -> vec2<f32> {
    if i >= params.sq {
        return vec2<f32>(0.0);
    }
    return p_ds_with(b, h, i, j, keys, dot, dp, row_stats(b, h, i));
}

// p_ds with query i's row_stats `st` already loaded (the tensor-core
// kernels keep them in registers or workgroup memory: `stats` is a
// read_write binding, and reading it per element cost them 15%, run 59).
// The scalar kernels keep p_ds: loading their 4 rows' statistics once per
// block measured 0.88-0.97x there (register pressure, run 62).
fn p_ds_with(b: u32, h: u32, i: u32, j: u32, keys: u32, dot: f32, dp: f32, st: vec2<f32>) -> vec2<f32> {
    if i >= params.sq || j >= keys {
        return vec2<f32>(0.0);
    }
    let t = logit(dot, b, h, i, j, keys);
    var p = 0.0;
    if t != neg_inf() && st.x != neg_inf() {
        p = exp2(t - st.x);
    }
    return vec2<f32>(p, p * (dp - st.y) * dlogit(dot));
}

// p_ds for a pair known to be visible, with no mask tensor and no soft-cap
// (interior blocks): the logit is one multiply.
fn p_ds_plain(b: u32, h: u32, i: u32, dot: f32, dp: f32) -> vec2<f32> {
    return p_ds_stats(row_stats(b, h, i), dot, dp);
}

// Query i's (lse2, Delta) from `prepare`.
fn row_stats(b: u32, h: u32, i: u32) -> vec2<f32> {
    let rows = params.batch * params.hq * params.sq;
    let row = (b * params.hq + h) * params.sq + i;
    return vec2<f32>(stats[row], stats[rows + row]);
}

// p_ds_plain with the query's row_stats already loaded.
fn p_ds_stats(st: vec2<f32>, dot: f32, dp: f32) -> vec2<f32> {
    let p = exp2(dot * params.scale_log2 - st.x);
    return vec2<f32>(p, p * (dp - st.y) * params.scale);
}
