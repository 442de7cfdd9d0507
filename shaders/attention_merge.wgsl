// attention_merge: combines the partial states of split-KV (flash-decoding)
// attention into the output.
//
// Algorithm: split s of a query row left O_s = (sum_j p_j v_j) / l_s with its
//   running max m_s and sum l_s in log2 units (attention_flash.wgsl, SPLIT =
//   1). With m = max_s m_s and w_s = l_s * exp2(m_s - m):
//   O = sum_s w_s O_s / sum_s w_s and lse = (m + log2(sum_s w_s)) * ln 2.
//   Splits that saw no visible key have l_s = 0 and weigh nothing; a row with
//   no visible key at all gets O = 0 and lse = -inf.
// Workgroup: WG invocations (override, a power of two, CW to 256) over CW
//   columns of one row: WG / CW split lanes each sum every (WG / CW)-th
//   split of a column, so a row's splits are read in parallel (the serial
//   chain is splits * CW / WG long), then the lanes are added through
//   workgroup memory. The split statistics (max, weight sum, NaN) are
//   reduced over all WG invocations first (a tree in workgroup memory).
// Grid: (rows = B * Hq * Sq, 1, ceil(Dv / CW)), rows split into (x, y) when
//   they exceed the per-dimension limit.
// Scratch: the f32 buffer bound as `lse` (binding 5): partial outputs
//   [splits][B][Hq][Sq][Dv] followed by (m, l) pairs [splits][B][Hq][Sq].
// Limits: any number of splits (each lane loops over its share).

override WG: u32 = 256u;
override CW: u32 = 32u;

@group(0) @binding(8) var<storage, read_write> lse_out: array<f32>;

var<workgroup> red_m: array<f32, 256>;
var<workgroup> red_s: array<f32, 256>;

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
    // Row maximum over the splits that saw a key; NaN flags ride along as
    // a NaN partial sum (l_s NaN).
    var m_loc = neg_inf();
    var nan_loc = 0.0;
    for (var s = tid; s < params.splits; s += WG) {
        let st = stats + 2u * (s * rows + state);
        let l_s = lse[st + 1u];
        if is_nan(l_s) {
            nan_loc = 1.0;
        }
        if l_s != 0.0 {
            m_loc = max(m_loc, lse[st]);
        }
    }
    red_m[tid] = m_loc;
    red_s[tid] = nan_loc;
    workgroupBarrier();
    for (var w = WG / 2u; w > 0u; w /= 2u) {
        if tid < w {
            red_m[tid] = max(red_m[tid], red_m[tid + w]);
            red_s[tid] = max(red_s[tid], red_s[tid + w]);
        }
        workgroupBarrier();
    }
    let m = red_m[0];
    let row_nan = red_s[0] > 0.0;
    workgroupBarrier();
    var t_loc = 0.0;
    for (var s = tid; s < params.splits; s += WG) {
        let st = stats + 2u * (s * rows + state);
        let l_s = lse[st + 1u];
        if l_s != 0.0 && !is_nan(l_s) {
            t_loc += l_s * exp2(lse[st] - m);
        }
    }
    red_s[tid] = t_loc;
    workgroupBarrier();
    for (var w = WG / 2u; w > 0u; w /= 2u) {
        if tid < w {
            red_s[tid] += red_s[tid + w];
        }
        workgroupBarrier();
    }
    let total = red_s[0];
    workgroupBarrier();
    let inv = select(0.0, 1.0 / total, total != 0.0);

    // Column c of this workgroup's CW, split lane `lane` of WG / CW.
    let lanes = WG / CW;
    let c = wid.z * CW + tid % CW;
    let lane = tid / CW;
    var sum = 0.0;
    if c < params.dv {
        for (var s = lane; s < params.splits; s += lanes) {
            let st = stats + 2u * (s * rows + state);
            let l_s = lse[st + 1u];
            if l_s != 0.0 && !is_nan(l_s) {
                sum += l_s * exp2(lse[st] - m) * lse[(s * rows + state) * params.dv + c];
            }
        }
    }
    red_s[tid] = sum;
    workgroupBarrier();
    // state = (b * Hq + h) * Sq + row
    let row = state % params.sq;
    let bh = state / params.sq;
    let h = bh % params.hq;
    let b = bh / params.hq;
    if lane == 0u && c < params.dv {
        var out = 0.0;
        for (var x = 0u; x < lanes; x++) {
            out += red_s[x * CW + tid];
        }
        let o_row = b * params.o_sb + h * params.o_sh + row * params.o_sr;
        o[o_row + c] = Elem(select(out * inv, nan(), row_nan));
    }
    if tid == 0u && wid.z == 0u && state < arrayLength(&lse_out) {
        let lse_row = select(neg_inf(), (m + log2(total)) * LN2, total != 0.0);
        lse_out[state] = select(lse_row, nan(), row_nan);
    }
}
