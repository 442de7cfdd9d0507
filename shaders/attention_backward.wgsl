// attention_backward: FlashAttention-2 backward with recomputation. The
// Sq x Sk probabilities are never stored: each kernel recomputes its tiles of
// S = Q K^T and P = exp(S' - lse) from Q, K and the forward's logsumexp.
//
// Algorithm (with S' the masked, scaled, soft-capped logits and Delta_i =
//   rowsum(dO_i * O_i)):
//   dV_j = sum_i P_ij dO_i,  dP_ij = dO_i . V_j,  dS_ij = P_ij (dP_ij - Delta_i),
//   dK_j = sum_i dS_ij g_ij Q_i,  dQ_i = sum_j dS_ij g_ij K_j,
//   where g_ij = dS'/d(q.k) = scale, or scale (1 - tanh^2(scale q.k / cap))
//   with soft-capping (the chain rule through tanh).
// Kernels:
//   `prepare`: one invocation per row: stats[row] = lse * log2(e) (log2 units,
//     as the forward's logits) and stats[rows + row] = Delta.
//   `dkdv`: a workgroup owns T keys of one (batch, KV head) and loops over the
//     visible query blocks of every query head of its group (GQA gradients are
//     summed there, no atomics). Thread (i, j) of the T x T tile recomputes
//     s_ij and dP_ij (D and Dv streamed through workgroup memory in chunks of
//     CH), then thread (key, cg) accumulates columns cg + T x of dK and dV in
//     registers from the P / dS tile and the staged dO / Q rows.
//   `dq`: a workgroup owns T query rows of one (batch, head) and loops over
//     the visible key blocks, accumulating dQ the same way (a separate pass
//     instead of float atomics).
// Workgroup: T x T invocations (T = 16, or 8 where 256 are not allowed).
// Tile parameters (text): T, CPT (columns per invocation: T * CPT >= max(D, Dv)).
// Bindings beyond attention_common.wgsl: 10 dO (o's strides), 11 stats (f32
//   [2, B, Hq, Sq]), 12 dQ (q's strides), 13 dK (k's), 14 dV (v's).
// Limits: D, Dv <= T * CPT; `dkdv` binds 9 storage buffers.

const T: u32 = 16u;
const CPT: u32 = 8u;
const CH: u32 = 64u;

const TT: u32 = T * T;
const TC: u32 = T * CPT;
const AS: u32 = CH + 1u;

@group(0) @binding(10) var<storage, read> d_o: array<Elem>;
@group(0) @binding(11) var<storage, read_write> stats: array<f32>;
@group(0) @binding(12) var<storage, read_write> dq_out: array<Elem>;
@group(0) @binding(13) var<storage, read_write> dk_out: array<Elem>;
@group(0) @binding(14) var<storage, read_write> dv_out: array<Elem>;

var<workgroup> a_sh: array<f32, T * AS>;
var<workgroup> b_sh: array<f32, T * AS>;
var<workgroup> p_sh: array<f32, TT>;
var<workgroup> ds_sh: array<f32, TT>;
var<workgroup> c_sh: array<f32, T * TC>;

@compute @workgroup_size(64, 1, 1)
fn prepare(
    @builtin(global_invocation_id) gid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
) {
    let row = gid.y * groups.x * 64u + gid.x;
    let rows = params.batch * params.hq * params.sq;
    if row >= rows {
        return;
    }
    let i = row % params.sq;
    let h = (row / params.sq) % params.hq;
    let b = row / (params.sq * params.hq);
    let base = b * params.o_sb + h * params.o_sh + i * params.o_sr;
    var delta = 0.0;
    for (var c = 0u; c < params.dv; c++) {
        delta = fma(f32(d_o[base + c]), f32(o[base + c]), delta);
    }
    stats[row] = lse[row] * LOG2E;
    stats[rows + row] = delta;
}

// s = q_(i0 + ti) . k_(j0 + tj) for thread (ti, tj) = (tid / T, tid % T).
fn qk_tile(tid: u32, q_base: u32, i0: u32, k_base: u32, j0: u32, keys: u32) -> f32 {
    let ti = tid / T;
    let tj = tid % T;
    var acc = 0.0;
    for (var d0 = 0u; d0 < params.d; d0 += CH) {
        for (var e = tid; e < T * CH; e += TT) {
            let r = e / CH;
            let dd = e % CH;
            let d = d0 + dd;
            var a = 0.0;
            var bb = 0.0;
            if i0 + r < params.sq && d < params.d {
                a = f32(q[q_base + (i0 + r) * params.q_sr + d]);
            }
            if j0 + r < keys && d < params.d {
                bb = f32(k[k_base + (j0 + r) * params.k_sr + d]);
            }
            a_sh[r * AS + dd] = a;
            b_sh[r * AS + dd] = bb;
        }
        workgroupBarrier();
        for (var dd = 0u; dd < CH; dd++) {
            acc = fma(a_sh[ti * AS + dd], b_sh[tj * AS + dd], acc);
        }
        workgroupBarrier();
    }
    return acc;
}

// dp = dO_(i0 + ti) . v_(j0 + tj).
fn dov_tile(tid: u32, o_base: u32, i0: u32, v_base: u32, j0: u32, keys: u32) -> f32 {
    let ti = tid / T;
    let tj = tid % T;
    var acc = 0.0;
    for (var c0 = 0u; c0 < params.dv; c0 += CH) {
        for (var e = tid; e < T * CH; e += TT) {
            let r = e / CH;
            let cc = e % CH;
            let c = c0 + cc;
            var a = 0.0;
            var bb = 0.0;
            if i0 + r < params.sq && c < params.dv {
                a = f32(d_o[o_base + (i0 + r) * params.o_sr + c]);
            }
            if j0 + r < keys && c < params.dv {
                bb = f32(v[v_base + (j0 + r) * params.v_sr + c]);
            }
            a_sh[r * AS + cc] = a;
            b_sh[r * AS + cc] = bb;
        }
        workgroupBarrier();
        for (var cc = 0u; cc < CH; cc++) {
            acc = fma(a_sh[ti * AS + cc], b_sh[tj * AS + cc], acc);
        }
        workgroupBarrier();
    }
    return acc;
}

// d(logit in natural units) / d(q . k).
fn dlogit(dot: f32) -> f32 {
    if params.softcap > 0.0 {
        let th = tanh(clamp(dot * params.scale / params.softcap, -15.0, 15.0));
        return params.scale * (1.0 - th * th);
    }
    return params.scale;
}

// Recomputes P and dS for thread (ti, tj) of the tile at (i0, j0) and stores
// them in p_sh / ds_sh.
fn p_ds_tile(tid: u32, b: u32, h: u32, i0: u32, j0: u32, keys: u32) {
    let hk = h / params.group;
    let q_base = b * params.q_sb + h * params.q_sh;
    let k_base = b * params.k_sb + hk * params.k_sh;
    let o_base = b * params.o_sb + h * params.o_sh;
    let v_base = b * params.v_sb + hk * params.v_sh;
    let s = qk_tile(tid, q_base, i0, k_base, j0, keys);
    let dp = dov_tile(tid, o_base, i0, v_base, j0, keys);
    let i = i0 + tid / T;
    let j = j0 + tid % T;
    var p = 0.0;
    var ds = 0.0;
    if i < params.sq && j < keys {
        let rows = params.batch * params.hq * params.sq;
        let row = (b * params.hq + h) * params.sq + i;
        let t = logit(s, b, h, i, j, keys);
        let l2 = stats[row];
        if t != neg_inf() && l2 != neg_inf() {
            p = exp2(t - l2);
        }
        ds = p * (dp - stats[rows + row]) * dlogit(s);
    }
    p_sh[tid] = p;
    ds_sh[tid] = ds;
}

@compute @workgroup_size(TT, 1, 1)
fn dkdv(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
) {
    let b = wid.z;
    let hk = wid.y;
    let j0 = wid.x * T;
    let keys = key_count(b);
    let jr = tid / T;
    let cg = tid % T;
    var dk_acc: array<f32, CPT>;
    var dv_acc: array<f32, CPT>;
    for (var x = 0u; x < CPT; x++) {
        dk_acc[x] = 0.0;
        dv_acc[x] = 0.0;
    }
    // Query rows that see some key of this block: j - hi <= i <= j - lo.
    let j_last = i32(min(j0 + T, keys)) - 1;
    let i_begin = max(0, i32(j0) - params.hi_off);
    var i_end = min(i32(params.sq), j_last - params.lo_off + 1);
    if j0 >= keys {
        i_end = 0;
    }
    for (var g = 0u; g < params.group; g++) {
        let h = hk * params.group + g;
        let q_base = b * params.q_sb + h * params.q_sh;
        let o_base = b * params.o_sb + h * params.o_sh;
        for (var i0 = u32(i_begin) / T * T; i32(i0) < i_end; i0 += T) {
            p_ds_tile(tid, b, h, i0, j0, keys);
            // dV += P^T dO.
            for (var e = tid; e < T * TC; e += TT) {
                let r = e / TC;
                let c = e % TC;
                var val = 0.0;
                if i0 + r < params.sq && c < params.dv {
                    val = f32(d_o[o_base + (i0 + r) * params.o_sr + c]);
                }
                c_sh[e] = val;
            }
            workgroupBarrier();
            for (var ii = 0u; ii < T; ii++) {
                let pv = p_sh[ii * T + jr];
                for (var x = 0u; x < CPT; x++) {
                    dv_acc[x] = fma(pv, c_sh[ii * TC + cg + T * x], dv_acc[x]);
                }
            }
            workgroupBarrier();
            // dK += dS^T Q (g folded into dS).
            for (var e = tid; e < T * TC; e += TT) {
                let r = e / TC;
                let c = e % TC;
                var val = 0.0;
                if i0 + r < params.sq && c < params.d {
                    val = f32(q[q_base + (i0 + r) * params.q_sr + c]);
                }
                c_sh[e] = val;
            }
            workgroupBarrier();
            for (var ii = 0u; ii < T; ii++) {
                let dsv = ds_sh[ii * T + jr];
                for (var x = 0u; x < CPT; x++) {
                    dk_acc[x] = fma(dsv, c_sh[ii * TC + cg + T * x], dk_acc[x]);
                }
            }
            workgroupBarrier();
        }
    }
    let j = j0 + jr;
    if j < params.sk {
        let k_row = b * params.k_sb + hk * params.k_sh + j * params.k_sr;
        let v_row = b * params.v_sb + hk * params.v_sh + j * params.v_sr;
        for (var x = 0u; x < CPT; x++) {
            let c = cg + T * x;
            if c < params.d {
                dk_out[k_row + c] = Elem(dk_acc[x]);
            }
            if c < params.dv {
                dv_out[v_row + c] = Elem(dv_acc[x]);
            }
        }
    }
}

@compute @workgroup_size(TT, 1, 1)
fn dq(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
) {
    let b = wid.z;
    let h = wid.y;
    let i0 = wid.x * T;
    let hk = h / params.group;
    let keys = key_count(b);
    let ir = tid / T;
    let cg = tid % T;
    let k_base = b * params.k_sb + hk * params.k_sh;
    var dq_acc: array<f32, CPT>;
    for (var x = 0u; x < CPT; x++) {
        dq_acc[x] = 0.0;
    }
    let i_last = i32(min(i0 + T, params.sq)) - 1;
    let j_begin = max(0, i32(i0) + params.lo_off);
    let j_end = min(i32(keys), i_last + params.hi_off + 1);
    for (var j0 = u32(j_begin) / T * T; i32(j0) < j_end; j0 += T) {
        p_ds_tile(tid, b, h, i0, j0, keys);
        for (var e = tid; e < T * TC; e += TT) {
            let r = e / TC;
            let c = e % TC;
            var val = 0.0;
            if j0 + r < keys && c < params.d {
                val = f32(k[k_base + (j0 + r) * params.k_sr + c]);
            }
            c_sh[e] = val;
        }
        workgroupBarrier();
        for (var jj = 0u; jj < T; jj++) {
            let dsv = ds_sh[ir * T + jj];
            for (var x = 0u; x < CPT; x++) {
                dq_acc[x] = fma(dsv, c_sh[jj * TC + cg + T * x], dq_acc[x]);
            }
        }
        workgroupBarrier();
    }
    let i = i0 + ir;
    if i < params.sq {
        let q_row = b * params.q_sb + h * params.q_sh + i * params.q_sr;
        for (var x = 0u; x < CPT; x++) {
            let c = cg + T * x;
            if c < params.d {
                dq_out[q_row + c] = Elem(dq_acc[x]);
            }
        }
    }
}
