// attention_merge: combines the partial states of split-KV (flash-decoding)
// attention into the output.
//
// Algorithm: split s of a query row left O_s = (sum_j p_j v_j) / l_s with its
//   running max m_s and sum l_s in log2 units (attention_flash.wgsl, SPLIT =
//   1). With m = max_s m_s and w_s = l_s * exp2(m_s - m):
//   O = sum_s w_s O_s / sum_s w_s and lse = (m + log2(sum_s w_s)) * ln 2.
//   Splits that saw no visible key have l_s = 0 and weigh nothing; a row with
//   no visible key at all gets O = 0 and lse = -inf.
// Workgroup: WG invocations (override) over the Dv columns of one row.
// Grid: (rows = B * Hq * Sq, 1, 1) split into (x, y) when rows exceed the
//   per-dimension limit (x_groups in the second word of params below).
// Scratch: the f32 buffer bound as `lse` (binding 5): partial outputs
//   [splits][B][Hq][Sq][Dv] followed by (m, l) pairs [splits][B][Hq][Sq].
// Limits: splits small (each invocation loops over all of them).

override WG: u32 = 64u;

@group(0) @binding(8) var<storage, read_write> lse_out: array<f32>;

@compute @workgroup_size(WG, 1, 1)
fn merge(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
) {
    let state = wid.y * groups.x + wid.x;
    let rows = params.batch * params.hq * params.sq;
    if state >= rows {
        return;
    }
    let stats = params.splits * rows * params.dv;
    var m = neg_inf();
    for (var s = 0u; s < params.splits; s++) {
        let st = stats + 2u * (s * rows + state);
        if lse[st + 1u] != 0.0 {
            m = max(m, lse[st]);
        }
    }
    var total = 0.0;
    for (var s = 0u; s < params.splits; s++) {
        let st = stats + 2u * (s * rows + state);
        let l_s = lse[st + 1u];
        if l_s != 0.0 {
            total += l_s * exp2(lse[st] - m);
        }
    }
    var row_nan = false;
    for (var s = 0u; s < params.splits; s++) {
        row_nan = row_nan || is_nan(lse[stats + 2u * (s * rows + state) + 1u]);
    }
    let inv = select(0.0, 1.0 / total, total != 0.0);
    // state = (b * Hq + h) * Sq + row
    let row = state % params.sq;
    let bh = state / params.sq;
    let h = bh % params.hq;
    let b = bh / params.hq;
    let o_row = b * params.o_sb + h * params.o_sh + row * params.o_sr;
    for (var c = tid; c < params.dv; c += WG) {
        var sum = 0.0;
        for (var s = 0u; s < params.splits; s++) {
            let st = stats + 2u * (s * rows + state);
            let l_s = lse[st + 1u];
            if l_s != 0.0 {
                sum += l_s * exp2(lse[st] - m) * lse[(s * rows + state) * params.dv + c];
            }
        }
        o[o_row + c] = Elem(select(sum * inv, nan(), row_nan));
    }
    if tid == 0u && state < arrayLength(&lse_out) {
        let lse_row = select(neg_inf(), (m + log2(total)) * LN2, total != 0.0);
        lse_out[state] = select(lse_row, nan(), row_nan);
    }
}
