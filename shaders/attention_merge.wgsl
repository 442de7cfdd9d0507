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
//   columns of one row: LANES = WG / CW split lanes per column. Each lane
//   merges every LANES-th split online (the running max, the weight sum and
//   the weighted output of its splits, rescaled as the max grows), loading
//   UNROLL splits' state before combining them so their loads are in flight
//   together; then lane 0 of each column merges the LANES lane states from
//   workgroup memory. One barrier in all, and no split is read twice (the
//   max and weights need no pass of their own).
// Grid: (rows = B * Hq * Sq, 1, ceil(Dv / CW)), rows split into (x, y) when
//   they exceed the per-dimension limit.
// Scratch: the f32 buffer bound as `lse` (binding 5): partial outputs
//   [splits][B][Hq][Sq][Dv] followed by (m, l) pairs [splits][B][Hq][Sq].
// Limits: any number of splits (each lane loops over its share).

override WG: u32 = 256u;
override CW: u32 = 32u;
// Measured (H200, run 97): 8 was 1.1-1.3 us slower at 4k-128k caches
// (docs/perf/attention.md#decode).
const UNROLL: u32 = 4u;

@group(0) @binding(8) var<storage, read_write> lse_out: array<f32>;

// A lane's merged state: (max m, weight sum l, weighted output o, NaN seen).
var<workgroup> lane_state: array<vec4<f32>, 256>;

struct Merged {
    m: f32,
    l: f32,
    o: f32,
    nan: bool,
}

// Merges a state (m_s, l_s, o_s) into `acc`: weights relative to the larger
// max; a state with no visible key (l_s = 0) weighs nothing, a NaN l_s
// marks the row.
fn merge_into(acc: Merged, m_s: f32, l_s: f32, o_s: f32) -> Merged {
    var r = acc;
    if is_nan(l_s) {
        r.nan = true;
    } else if l_s != 0.0 {
        let m = max(acc.m, m_s);
        let a = select(0.0, exp2(acc.m - m), acc.m > neg_inf());
        let w = l_s * exp2(m_s - m);
        r.m = m;
        r.l = acc.l * a + w;
        r.o = acc.o * a + w * o_s;
    }
    return r;
}

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
    let lanes = WG / CW;
    let c = wid.z * CW + tid % CW;
    let lane = tid / CW;
    let col = min(c, params.dv - 1u);
    var acc = Merged(neg_inf(), 0.0, 0.0, false);
    for (var s0 = lane; s0 < params.splits; s0 += UNROLL * lanes) {
        var m_s: array<f32, UNROLL>;
        var l_s: array<f32, UNROLL>;
        var o_s: array<f32, UNROLL>;
        for (var u = 0u; u < UNROLL; u++) {
            let s = s0 + u * lanes;
            m_s[u] = 0.0;
            l_s[u] = 0.0;
            o_s[u] = 0.0;
            if s < params.splits {
                let st = stats + 2u * (s * rows + state);
                m_s[u] = lse[st];
                l_s[u] = lse[st + 1u];
                o_s[u] = lse[(s * rows + state) * params.dv + col];
            }
        }
        for (var u = 0u; u < UNROLL; u++) {
            acc = merge_into(acc, m_s[u], l_s[u], o_s[u]);
        }
    }
    // Stored as a state of the same form as a split's (output divided by
    // its weight sum), so lane 0 merges it like one.
    let o_lane = select(0.0, acc.o / acc.l, acc.l != 0.0);
    lane_state[tid] = vec4<f32>(acc.m, acc.l, o_lane, select(0.0, 1.0, acc.nan));
    workgroupBarrier();
    if lane != 0u {
        return;
    }
    var row = Merged(neg_inf(), 0.0, 0.0, false);
    for (var x = 0u; x < lanes; x++) {
        let ls = lane_state[x * CW + tid];
        row = merge_into(row, ls.x, select(ls.y, nan(), ls.w != 0.0), ls.z);
    }
    let inv = select(0.0, 1.0 / row.l, row.l != 0.0);
    // state = (b * Hq + h) * Sq + position
    let pos = state % params.sq;
    let bh = state / params.sq;
    let h = bh % params.hq;
    let b = bh / params.hq;
    if c < params.dv {
        let o_row = b * params.o_sb + h * params.o_sh + pos * params.o_sr;
        o[o_row + c] = Elem(select(row.o * inv, nan(), row.nan));
    }
    if tid == 0u && wid.z == 0u && state < arrayLength(&lse_out) {
        let lse_row = select(neg_inf(), (row.m + log2(row.l)) * LN2, row.l != 0.0);
        lse_out[state] = select(lse_row, nan(), row.nan);
    }
}
