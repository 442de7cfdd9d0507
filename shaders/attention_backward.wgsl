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
//   `prepare`: 16 lanes per row: stats[row] = lse * log2(e) (log2 units,
//     as the forward's logits) and stats[rows + row] = Delta.
//   `dkdv`: a workgroup owns BR keys of one (batch, KV head) and loops over
//     the visible query blocks (BC = 4 NC queries) of every query head of its
//     group (GQA gradients are summed there, no atomics). Per block: the
//     register-tiled products S^T = K Q^T and dP^T = V dO^T (D and Dv
//     streamed through workgroup memory in chunks of DK, as vec4 of 4
//     rows), then P^T and dS^T element-wise into workgroup tiles, then
//     dV += P^T dO and dK += dS^T Q with dO / Q rows streamed VK at a time.
//     Every staged chunk is prefetched into registers during the previous
//     chunk's arithmetic (software pipelining, as in the forward).
//   `dq`: a workgroup owns BR query rows of one (batch, head) and loops over
//     the visible key blocks: S = Q K^T, dP = dO V^T, dS, then dQ += dS K
//     (a separate pass instead of float atomics).
// Register tiles: invocation (rg = t / NC, cg = t % NC) owns tile rows
//   4 rg .. 4 rg + 3, tile columns 4 cg .. 4 cg + 3 and output columns
//   4 (x NC + cg) .. + 3 for x < TD / 4 (the forward's layout,
//   attention_flash.wgsl).
// Workgroup: (BR / 4) * NC invocations.
// Tile parameters (text): BR, NC, TD (NC * TD >= max(D, Dv)), DK, VK,
//   STAGE4 (vec4: max of DK * (BR/4 + BC/4 + 2) and VK * NC * TD / 4).
// Bindings beyond attention_common.wgsl: attention_backward_common.wgsl's
//   10 dO, 11 stats, 12 dQ, 13 dK, 14 dV (also P and dS from the raw
//   products: p_ds).
// Limits: D, Dv <= NC * TD; `dkdv` binds 9 storage buffers.
// Measurements: docs/perf/attention.md#backward.

const BR: u32 = 32u;
const NC: u32 = 16u;
const TD: u32 = 8u;
const DK: u32 = 16u;
const VK: u32 = 8u;
const STAGE4: u32 = 416u;

const BC: u32 = 4u * NC;
const NRG: u32 = BR / 4u;
const WG: u32 = NRG * NC;
const QS4: u32 = BR / 4u + 1u;
const KS4: u32 = BC / 4u + 1u;
const K_OFF: u32 = DK * QS4;
const PS4: u32 = BC / 4u;
const DVP4: u32 = NC * TD / 4u;
const XV: u32 = TD / 4u;
// vec4 each invocation prefetches per A chunk, B chunk and gradient-operand slab.
const AL: u32 = (BR / 4u * DK + WG - 1u) / WG;
const BL: u32 = (BC / 4u * DK + WG - 1u) / WG;
const VL: u32 = (VK * DVP4 + WG - 1u) / WG;

// Operand selectors for `load_op` (WGSL functions cannot take storage pointers).
const OP_Q: u32 = 0u;
const OP_K: u32 = 1u;
const OP_V: u32 = 2u;
const OP_DO: u32 = 3u;

var<workgroup> stage: array<vec4<f32>, STAGE4>;
// P^T (dkdv) at offset 0 and dS (or dS^T) at offset P_OFF: one array, since
// naga passes no workgroup pointers to functions.
const P_OFF: u32 = BR * PS4;
var<workgroup> tiles: array<vec4<f32>, 2u * BR * PS4>;

// `prepare`: PREP_ROWS rows per workgroup, PREP_LANES lanes per row. Lane l
// reads columns l, l + PREP_LANES, ..., so the lanes of a row read
// consecutive elements (one 32-byte sector per row for f16) instead of one
// invocation walking a whole row; the row's partial sums meet in prep_sh.
const PREP_LANES: u32 = 16u;
const PREP_ROWS: u32 = 16u;
var<workgroup> prep_sh: array<f32, PREP_LANES * PREP_ROWS>;

@compute @workgroup_size(PREP_LANES * PREP_ROWS, 1, 1)
fn prepare(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
) {
    let r = tid / PREP_LANES;
    let l = tid % PREP_LANES;
    let row = (wid.y * groups.x + wid.x) * PREP_ROWS + r;
    let rows = params.batch * params.hq * params.sq;
    var delta = 0.0;
    if row < rows {
        let i = row % params.sq;
        let h = (row / params.sq) % params.hq;
        let b = row / (params.sq * params.hq);
        let base = b * params.o_sb + h * params.o_sh + i * params.o_sr;
        for (var c = l; c < params.dv; c += PREP_LANES) {
            delta = fma(f32(d_o[base + c]), f32(o[base + c]), delta);
        }
    }
    prep_sh[tid] = delta;
    workgroupBarrier();
    if l == 0u && row < rows {
        var sum = 0.0;
        for (var n = 0u; n < PREP_LANES; n++) {
            sum += prep_sh[tid + n];
        }
        stats[row] = lse[row] * LOG2E;
        stats[rows + row] = sum;
    }
}

fn load_op(which: u32, idx: u32) -> f32 {
    switch which {
        case 0u: {
            return f32(q[idx]);
        }
        case 1u: {
            return f32(k[idx]);
        }
        case 2u: {
            return f32(v[idx]);
        }
        default: {
            return f32(d_o[idx]);
        }
    }
}

// Global loads of one DK chunk of A rows (4 rows at one d per vec4) and of
// B rows into registers, so their latency overlaps the previous chunk's
// arithmetic.
fn nt_fetch(
    tid: u32, d0: u32,
    wa: u32, a_base: u32, a_stride: u32, a0: u32, a_lim: u32,
    wb: u32, b_base: u32, b_stride: u32, b0: u32, b_lim: u32,
    dim: u32,
    ap: ptr<function, array<vec4<f32>, AL>>,
    bp: ptr<function, array<vec4<f32>, BL>>,
) {
    for (var n = 0u; n < AL; n++) {
        let e = tid + n * WG;
        let r4 = e / DK;
        let d = d0 + e % DK;
        var val = vec4<f32>(0.0);
        for (var i = 0u; i < 4u; i++) {
            let row = a0 + r4 * 4u + i;
            if e < BR / 4u * DK && row < a_lim && d < dim {
                val[i] = load_op(wa, a_base + row * a_stride + d);
            }
        }
        (*ap)[n] = val;
    }
    for (var n = 0u; n < BL; n++) {
        let e = tid + n * WG;
        let c4 = e / DK;
        let d = d0 + e % DK;
        var val = vec4<f32>(0.0);
        for (var i = 0u; i < 4u; i++) {
            let row = b0 + c4 * 4u + i;
            if e < BC / 4u * DK && row < b_lim && d < dim {
                val[i] = load_op(wb, b_base + row * b_stride + d);
            }
        }
        (*bp)[n] = val;
    }
}

// acc[r][c] += sum_d A[a0 + 4 rg + r][d] * B[b0 + 4 cg + c][d] for d < dim:
// A rows from operand wa (base, row stride, valid rows < a_lim), B likewise.
fn nt_tile(
    tid: u32,
    wa: u32, a_base: u32, a_stride: u32, a0: u32, a_lim: u32,
    wb: u32, b_base: u32, b_stride: u32, b0: u32, b_lim: u32,
    dim: u32,
    acc: ptr<function, array<vec4<f32>, 4>>,
) {
    let rg = tid / NC;
    let cg = tid % NC;
    var ap: array<vec4<f32>, AL>;
    var bp: array<vec4<f32>, BL>;
    nt_fetch(tid, 0u, wa, a_base, a_stride, a0, a_lim, wb, b_base, b_stride, b0, b_lim, dim, &ap, &bp);
    for (var d0 = 0u; d0 < dim; d0 += DK) {
        for (var n = 0u; n < AL; n++) {
            let e = tid + n * WG;
            if e < BR / 4u * DK {
                stage[(e % DK) * QS4 + e / DK] = ap[n];
            }
        }
        for (var n = 0u; n < BL; n++) {
            let e = tid + n * WG;
            if e < BC / 4u * DK {
                stage[K_OFF + (e % DK) * KS4 + e / DK] = bp[n];
            }
        }
        workgroupBarrier();
        if d0 + DK < dim {
            nt_fetch(tid, d0 + DK, wa, a_base, a_stride, a0, a_lim, wb, b_base, b_stride, b0, b_lim, dim, &ap, &bp);
        }
        for (var dd = 0u; dd < DK; dd++) {
            let bv = stage[K_OFF + dd * KS4 + cg];
            let av = stage[dd * QS4 + rg];
            for (var i = 0u; i < 4u; i++) {
                (*acc)[i] = fma(vec4<f32>(av[i]), bv, (*acc)[i]);
            }
        }
        workgroupBarrier();
    }
}

// Global loads of rows b0 + k0 .. + VK of a gradient operand (columns < dim).
fn nn_fetch(
    tid: u32, k0: u32,
    wb: u32, b_base: u32, b_stride: u32, b0: u32, b_lim: u32,
    dim: u32,
    vp: ptr<function, array<vec4<f32>, VL>>,
) {
    for (var n = 0u; n < VL; n++) {
        let e = tid + n * WG;
        let kk = e / DVP4;
        let c4 = e % DVP4;
        let row = b0 + k0 + kk;
        var val = vec4<f32>(0.0);
        if e < VK * DVP4 && row < b_lim {
            for (var i = 0u; i < 4u; i++) {
                let c = c4 * 4u + i;
                if c < dim {
                    val[i] = load_op(wb, b_base + row * b_stride + c);
                }
            }
        }
        (*vp)[n] = val;
    }
}

// acc[r][x] += sum_k T[4 rg + r][k] (T the tile at offset `tile` of `tiles`) * B[b0 + k][4 (x NC + cg) + 0..3] over
// the BC tile columns, B rows from operand wb (valid rows < b_lim, columns < dim).
fn nn_accum(
    tid: u32,
    tile: u32,
    wb: u32, b_base: u32, b_stride: u32, b0: u32, b_lim: u32,
    dim: u32,
    acc: ptr<function, array<vec4<f32>, 4u * XV>>,
) {
    let rg = tid / NC;
    let cg = tid % NC;
    var vp: array<vec4<f32>, VL>;
    nn_fetch(tid, 0u, wb, b_base, b_stride, b0, b_lim, dim, &vp);
    for (var k0 = 0u; k0 < BC; k0 += VK) {
        for (var n = 0u; n < VL; n++) {
            let e = tid + n * WG;
            if e < VK * DVP4 {
                stage[e] = vp[n];
            }
        }
        workgroupBarrier();
        if k0 + VK < BC {
            nn_fetch(tid, k0 + VK, wb, b_base, b_stride, b0, b_lim, dim, &vp);
        }
        for (var kq = 0u; kq < VK / 4u; kq++) {
            var pr: array<vec4<f32>, 4>;
            for (var r = 0u; r < 4u; r++) {
                pr[r] = tiles[tile + (rg * 4u + r) * PS4 + k0 / 4u + kq];
            }
            for (var kk = 0u; kk < 4u; kk++) {
                for (var x = 0u; x < XV; x++) {
                    let bv = stage[(kq * 4u + kk) * DVP4 + x * NC + cg];
                    for (var r = 0u; r < 4u; r++) {
                        (*acc)[r * XV + x] = fma(vec4<f32>(pr[r][kk]), bv, (*acc)[r * XV + x]);
                    }
                }
            }
        }
        workgroupBarrier();
    }
}

// Writes a 4 x (4 XV) register tile to rows row0 + 4 rg + r (< row_lim) of
// an output with the given base and row stride, columns < dim.
fn store_dq(base: u32, stride: u32, row0: u32, row_lim: u32, dim: u32, rg: u32, cg: u32, acc: ptr<function, array<vec4<f32>, 4u * XV>>) {
    for (var r = 0u; r < 4u; r++) {
        let row = row0 + rg * 4u + r;
        if row >= row_lim {
            continue;
        }
        for (var x = 0u; x < XV; x++) {
            for (var i = 0u; i < 4u; i++) {
                let c = (x * NC + cg) * 4u + i;
                if c < dim {
                    dq_out[base + row * stride + c] = Elem((*acc)[r * XV + x][i]);
                }
            }
        }
    }
}

@compute @workgroup_size(WG, 1, 1)
fn dkdv(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
) {
    let b = wid.z;
    let hk = wid.y;
    let j0 = wid.x * BR;
    let keys = key_count(b);
    let rg = tid / NC;
    let cg = tid % NC;
    let k_base = b * params.k_sb + hk * params.k_sh;
    let v_base = b * params.v_sb + hk * params.v_sh;
    var dk_acc: array<vec4<f32>, 4u * XV>;
    var dv_acc: array<vec4<f32>, 4u * XV>;
    for (var x = 0u; x < 4u * XV; x++) {
        dk_acc[x] = vec4<f32>(0.0);
        dv_acc[x] = vec4<f32>(0.0);
    }
    // Query rows that see some key of this block: j - hi <= i <= j - lo.
    let j_last = i32(min(j0 + BR, keys)) - 1;
    let i_begin = max(0, i32(j0) - last_off(keys));
    var i_end = min(i32(params.sq), j_last - first_off(keys) + 1);
    if j0 >= keys {
        i_end = 0;
    }
    for (var g = 0u; g < params.group; g++) {
        let h = hk * params.group + g;
        let q_base = b * params.q_sb + h * params.q_sh;
        let o_base = b * params.o_sb + h * params.o_sh;
        for (var i0 = u32(i_begin) / BC * BC; i32(i0) < i_end; i0 += BC) {
            // S^T (keys x queries) and dP^T.
            var s: array<vec4<f32>, 4>;
            var dp: array<vec4<f32>, 4>;
            for (var r = 0u; r < 4u; r++) {
                s[r] = vec4<f32>(0.0);
                dp[r] = vec4<f32>(0.0);
            }
            nt_tile(tid, OP_K, k_base, params.k_sr, j0, keys, OP_Q, q_base, params.q_sr, i0, params.sq, params.d, &s);
            nt_tile(tid, OP_V, v_base, params.v_sr, j0, keys, OP_DO, o_base, params.o_sr, i0, params.sq, params.dv, &dp);
            for (var r = 0u; r < 4u; r++) {
                var pv = vec4<f32>(0.0);
                var dsv = vec4<f32>(0.0);
                for (var c = 0u; c < 4u; c++) {
                    let pd = p_ds(b, h, i0 + cg * 4u + c, j0 + rg * 4u + r, keys, s[r][c], dp[r][c]);
                    pv[c] = pd.x;
                    dsv[c] = pd.y;
                }
                tiles[(rg * 4u + r) * PS4 + cg] = pv;
                tiles[P_OFF + (rg * 4u + r) * PS4 + cg] = dsv;
            }
            // dV += P^T dO, dK += dS^T Q (g folded into dS).
            nn_accum(tid, 0u, OP_DO, o_base, params.o_sr, i0, params.sq, params.dv, &dv_acc);
            nn_accum(tid, P_OFF, OP_Q, q_base, params.q_sr, i0, params.sq, params.d, &dk_acc);
        }
    }
    for (var r = 0u; r < 4u; r++) {
        let j = j0 + rg * 4u + r;
        if j >= params.sk {
            continue;
        }
        let k_row = k_base + j * params.k_sr;
        let v_row = v_base + j * params.v_sr;
        for (var x = 0u; x < XV; x++) {
            for (var i = 0u; i < 4u; i++) {
                let c = (x * NC + cg) * 4u + i;
                if c < params.d {
                    dk_out[k_row + c] = Elem(dk_acc[r * XV + x][i]);
                }
                if c < params.dv {
                    dv_out[v_row + c] = Elem(dv_acc[r * XV + x][i]);
                }
            }
        }
    }
}

@compute @workgroup_size(WG, 1, 1)
fn dq(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
) {
    let b = wid.z;
    let h = wid.y;
    let i0 = wid.x * BR;
    let hk = h / params.group;
    let keys = key_count(b);
    let rg = tid / NC;
    let cg = tid % NC;
    let q_base = b * params.q_sb + h * params.q_sh;
    let o_base = b * params.o_sb + h * params.o_sh;
    let k_base = b * params.k_sb + hk * params.k_sh;
    let v_base = b * params.v_sb + hk * params.v_sh;
    var dq_acc: array<vec4<f32>, 4u * XV>;
    for (var x = 0u; x < 4u * XV; x++) {
        dq_acc[x] = vec4<f32>(0.0);
    }
    let i_last = i32(min(i0 + BR, params.sq)) - 1;
    let j_begin = max(0, i32(i0) + first_off(keys));
    let j_end = min(i32(keys), i_last + last_off(keys) + 1);
    for (var j0 = u32(j_begin) / BC * BC; i32(j0) < j_end; j0 += BC) {
        var s: array<vec4<f32>, 4>;
        var dp: array<vec4<f32>, 4>;
        for (var r = 0u; r < 4u; r++) {
            s[r] = vec4<f32>(0.0);
            dp[r] = vec4<f32>(0.0);
        }
        nt_tile(tid, OP_Q, q_base, params.q_sr, i0, params.sq, OP_K, k_base, params.k_sr, j0, keys, params.d, &s);
        nt_tile(tid, OP_DO, o_base, params.o_sr, i0, params.sq, OP_V, v_base, params.v_sr, j0, keys, params.dv, &dp);
        for (var r = 0u; r < 4u; r++) {
            var dsv = vec4<f32>(0.0);
            for (var c = 0u; c < 4u; c++) {
                dsv[c] = p_ds(b, h, i0 + rg * 4u + r, j0 + cg * 4u + c, keys, s[r][c], dp[r][c]).y;
            }
            tiles[P_OFF + (rg * 4u + r) * PS4 + cg] = dsv;
        }
        nn_accum(tid, P_OFF, OP_K, k_base, params.k_sr, j0, keys, params.d, &dq_acc);
    }
    store_dq(q_base, params.q_sr, i0, params.sq, params.d, rg, cg, &dq_acc);
}
