// norm: LayerNorm, RMSNorm and L2 normalisation over each row (the last
// axis), f32 arithmetic whatever the dtype, with an optional affine weight
// (gamma, FLAG_WEIGHT) and bias (beta, FLAG_BIAS; LayerNorm only):
//   layer: y = (x - mean) / sqrt(var + eps) * gamma + beta   (biased var, / n)
//   rms:   y = x / sqrt(mean(x^2) + eps) * gamma              (FLAG_RMS)
//   l2:    y = x / max(sqrt(sum(x^2)), eps)                   (FLAG_RMS | FLAG_L2)
//
// Entry `main`, rows that fit in registers (n <= 4 * R * T): one read of the
//   row. WG / T rows per workgroup, T invocations per row, R chunks of 4
//   per invocation in registers. Two-pass statistics over the registers:
//   mean first (`row_sum`), then the sum of squared deviations from it
//   (`row_sum`), so no cancellation between E[x^2] and E[x]^2. RMSNorm
//   skips the mean. Traffic: n reads + n writes (+ gamma/beta, cached).
// Entry `streaming`, longer rows (T == WG): each invocation streams its
//   chunks keeping (count, mean, M2) and merges each chunk's own statistics
//   with Chan et al.'s pairwise update; the invocations' triples then merge
//   the same way through a workgroup-memory tree; RMSNorm holds the mean at
//   0, so M2 / n is mean(x^2). A second pass re-reads the row and writes.
//   Traffic: 2n reads + n writes.
// NaN anywhere in a row makes the row's output NaN (through the sums).
// Workgroup: WG x 1 x 1 (override); red, red_mean, red_m2: WG floats each.
// Measurements: docs/perf/rows.md.

alias Elem = f32;
const VEC: u32 = 4u;
// Chunks of 4 elements each invocation holds in registers (`main`).
const R: u32 = 4u;

@group(0) @binding(3) var<storage, read> weight: array<vec4<Elem>>;
@group(0) @binding(4) var<storage, read> bias: array<vec4<Elem>>;

var<workgroup> red_mean: array<f32, WG>;
var<workgroup> red_m2: array<f32, WG>;

// Chunk c of a length-n vector parameter (gamma or beta), lanes past n read 0.
fn load_param_w(c: u32) -> vec4<f32> {
    if VEC == 4u {
        return vec4<f32>(weight[c]);
    }
    var v = vec4<f32>(0.0);
    for (var j = 0u; j < 4u; j++) {
        let col = c * 4u + j;
        if col < params.n {
            v[j] = f32(weight[col / 4u][col % 4u]);
        }
    }
    return v;
}

fn load_param_b(c: u32) -> vec4<f32> {
    if VEC == 4u {
        return vec4<f32>(bias[c]);
    }
    var v = vec4<f32>(0.0);
    for (var j = 0u; j < 4u; j++) {
        let col = c * 4u + j;
        if col < params.n {
            v[j] = f32(bias[col / 4u][col % 4u]);
        }
    }
    return v;
}

// The normalised, affine-transformed chunk c.
fn norm_out(v: vec4<f32>, c: u32, mean: f32, inv: f32) -> vec4<f32> {
    var y = (v - vec4<f32>(mean)) * inv;
    if (params.flags & FLAG_WEIGHT) != 0u {
        y *= load_param_w(c);
    }
    if (params.flags & FLAG_BIAS) != 0u {
        y += load_param_b(c);
    }
    return y;
}

// The factor each element is multiplied by, from the row's sum of squared
// deviations (of squares, for RMS and L2) over n elements.
fn norm_inv(sq: f32, n: f32) -> f32 {
    if (params.flags & FLAG_L2) != 0u {
        // max() may drop a NaN, and a NaN compare may be folded away: a NaN
        // sum (told by its bits) is passed on as it is.
        if (bitcast<u32>(sq) & 0x7fffffffu) > 0x7f800000u {
            return sq;
        }
        return 1.0 / max(sqrt(sq), params.eps);
    }
    return inverseSqrt(sq / n + params.eps);
}

@compute @workgroup_size(WG, 1, 1)
fn main(ids: Ids) {
    init_ids(ids);
    let row = group_index() * (WG / T) + lid / T;
    let tid = lid % T;
    let live = row < params.rows;
    let chunks = chunk_count();
    let rms = (params.flags & FLAG_RMS) != 0u;
    let n = f32(params.n);
    var v: array<vec4<f32>, R>;
    var s = 0.0;
    for (var i = 0u; i < R; i++) {
        let c = i * T + tid;
        var x = vec4<f32>(0.0);
        if live && c < chunks {
            x = load_chunk(row, c, 0.0);
        }
        v[i] = x;
        s += hsum(x);
    }
    var mean = 0.0;
    if !rms {
        mean = row_sum(s) / n;
    }
    var q = 0.0;
    for (var i = 0u; i < R; i++) {
        let d = select(vec4<f32>(0.0), v[i] - vec4<f32>(mean), lane_mask(i * T + tid));
        q += dot(d, d);
    }
    let inv = norm_inv(row_sum(q), n);
    if live {
        for (var i = 0u; i < R; i++) {
            let c = i * T + tid;
            if c < chunks {
                store_chunk(row, c, norm_out(v[i], c, mean, inv));
            }
        }
    }
}

@compute @workgroup_size(WG, 1, 1)
fn streaming(ids: Ids) {
    init_ids(ids);
    let row = group_index();
    let live = row < params.rows;
    let chunks = chunk_count();
    let rms = (params.flags & FLAG_RMS) != 0u;
    var cnt = 0.0;
    var mean = 0.0;
    var m2 = 0.0;
    if live {
        for (var c = lid; c < chunks; c += WG) {
            let mask = lane_mask(c);
            let k = dot(select(vec4<f32>(0.0), vec4<f32>(1.0), mask), vec4<f32>(1.0));
            let x = select(vec4<f32>(0.0), load_chunk(row, c, 0.0), mask);
            // RMSNorm accumulates the squares themselves (mean held at 0):
            // mean(x^2) then has no cancellation and an infinity stays one.
            let cm = select(hsum(x) / k, 0.0, rms);
            let d = select(vec4<f32>(0.0), x - vec4<f32>(cm), mask);
            // Chan et al.: merge (k, cm, |d|^2) into (cnt, mean, m2).
            let total = cnt + k;
            let delta = cm - mean;
            mean += delta * (k / total);
            m2 += dot(d, d) + delta * delta * (cnt * k / total);
            cnt = total;
        }
    }
    red[lid] = cnt;
    red_mean[lid] = mean;
    red_m2[lid] = m2;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s = s / 2u) {
        if lid < s && red[lid + s] > 0.0 {
            let na = red[lid];
            let nb = red[lid + s];
            let total = na + nb;
            let delta = red_mean[lid + s] - red_mean[lid];
            red_mean[lid] += delta * (nb / total);
            red_m2[lid] += red_m2[lid + s] + delta * delta * (na * nb / total);
            red[lid] = total;
        }
        workgroupBarrier();
    }
    let row_mean = red_mean[0];
    // For RMSNorm and L2 the mean is 0 and m2 the sum of squares.
    let inv = norm_inv(red_m2[0], f32(params.n));
    if live {
        for (var c = lid; c < chunks; c += WG) {
            store_chunk(row, c, norm_out(load_chunk(row, c, 0.0), c, row_mean, inv));
        }
    }
}
