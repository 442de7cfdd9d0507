// softmax: softmax or log-softmax (params.flags & FLAG_LOG) over each row
// (the last axis), max-subtracted, f32 arithmetic whatever the dtype.
//
// Entry `main`, rows that fit in registers (n <= 4 * R * T): one read of the
//   row. WG / T rows per workgroup, T invocations per row, each holding R
//   chunks of 4 elements (R text const, 1..8) in registers: row max
//   (`row_max`), then the sum of exp(x - max) (`row_sum`; softmax keeps the
//   exponentials in the registers, one exp per element), then the writes
//   from registers. Memory traffic: n reads + n writes per row.
// Entry `online`, longer rows (T == WG, one row per workgroup): online
//   softmax. Pass 1 streams the row once keeping a running max m and a sum s
//   rescaled by exp(m_old - m_new) whenever the max grows (once per chunk);
//   the per-invocation (m, s) pairs merge as max M and sum of s * exp(m - M).
//   Pass 2 re-reads the row and writes. Traffic: 2n reads + n writes.
// Semantics (both entries):
//   - -inf entries get probability 0 (log-softmax -inf): masking;
//   - a row of only -inf gives zeros (log-softmax: -inf), not NaN;
//   - a NaN or +inf anywhere in a row makes the whole output row NaN (as
//     PyTorch: exp(inf - inf)); detected with integer tests, NaN mapped to
//     +inf before the max so max() never sees NaN;
//   - no overflow for large inputs: exp only sees x - max <= 0, and the sum
//     lies in [1, n].
// Workgroup: WG x 1 x 1 (override); red: WG floats.
// Measurements: docs/perf/rows.md.

alias Elem = f32;
const VEC: u32 = 4u;
// Chunks of 4 elements each invocation holds in registers (`main`).
const R: u32 = 4u;

// Softmax (or log-softmax) of chunk `v` given the row's max and sum of
// exp(x - max); the row-level special cases first.
fn softmax_out(v: vec4<f32>, mx: f32, total: f32) -> vec4<f32> {
    let log_out = (params.flags & FLAG_LOG) != 0u;
    if is_pos_inf(mx) {
        return vec4<f32>(nan_value());
    }
    if is_neg_inf(mx) {
        return select(vec4<f32>(0.0), vec4<f32>(neg_inf()), log_out);
    }
    if log_out {
        // (x - max) - ln sum: at |max| far above ln sum, max + ln sum would
        // absorb ln sum (all-equal logits of 1e8 gave 0).
        return (v - vec4<f32>(mx)) - vec4<f32>(log(total));
    }
    return exp(v - vec4<f32>(mx)) / total;
}

// A loaded chunk with NaN lanes mapped to +inf (they poison the row through
// the max, see above).
fn load_masked(row: u32, c: u32) -> vec4<f32> {
    let v = load_chunk(row, c, neg_inf());
    return select(v, vec4<f32>(pos_inf()), is_nan4(v));
}

@compute @workgroup_size(WG, 1, 1)
fn main(ids: Ids) {
    init_ids(ids);
    let row = group_index() * (WG / T) + lid / T;
    let tid = lid % T;
    let live = row < params.rows;
    let chunks = chunk_count();
    var v: array<vec4<f32>, R>;
    var m = neg_inf();
    for (var i = 0u; i < R; i++) {
        let c = i * T + tid;
        var x = vec4<f32>(neg_inf());
        if live && c < chunks {
            x = load_masked(row, c);
        }
        v[i] = x;
        m = max(m, hmax(x));
    }
    let mx = row_max(m);
    let log_out = (params.flags & FLAG_LOG) != 0u;
    let finite = !is_neg_inf(mx) && !is_pos_inf(mx);
    var s = 0.0;
    if finite {
        for (var i = 0u; i < R; i++) {
            let e = exp(v[i] - vec4<f32>(mx));
            s += hsum(e);
            // Softmax keeps exp(x - max) for the write (one exp per element).
            if !log_out {
                v[i] = e;
            }
        }
    }
    let total = row_sum(s);
    if live {
        for (var i = 0u; i < R; i++) {
            let c = i * T + tid;
            if c < chunks {
                var y: vec4<f32>;
                if finite && !log_out {
                    y = v[i] / total;
                } else {
                    y = softmax_out(v[i], mx, total);
                }
                store_chunk(row, c, y);
            }
        }
    }
}

@compute @workgroup_size(WG, 1, 1)
fn online(ids: Ids) {
    init_ids(ids);
    let row = group_index();
    let live = row < params.rows;
    let chunks = chunk_count();
    var m = neg_inf();
    var s = 0.0;
    if live {
        for (var c = lid; c < chunks; c += WG) {
            let x = load_masked(row, c);
            let cm = hmax(x);
            if cm > m {
                // exp(-inf - cm) = 0 drops the empty sum of an all -inf prefix.
                s *= exp(m - cm);
                m = cm;
            }
            if !is_neg_inf(m) {
                s += hsum(exp(x - vec4<f32>(m)));
            }
        }
    }
    let mx = row_max(m);
    var scaled = 0.0;
    if !is_neg_inf(m) && !is_pos_inf(mx) {
        scaled = s * exp(m - mx);
    }
    let total = row_sum(scaled);
    if live {
        for (var c = lid; c < chunks; c += WG) {
            store_chunk(row, c, softmax_out(load_masked(row, c), mx, total));
        }
    }
}
