// norm_cols: LayerNorm, RMSNorm and L2 normalisation over the middle axis
// of x viewed as [outer, n, inner] with inner > 1 (any axis but the last),
// without moving the axis last and back (three passes over x); the column
// counterpart of norm.wgsl, laid out as softmax_cols.wgsl. Each invocation
// owns one column (stride inner) and adjacent invocations take adjacent
// columns, so every row step is a coalesced read. Statistics down the
// column in four (count, mean, M2) accumulators, four rows per step (four
// loads in flight), each updated by Welford's step and merged at the end
// with Chan et al.'s pairwise formula, numerically stable for any mean;
// RMSNorm and L2 hold the mean at 0, so M2 is the sum of squares. Then the
// column is read again and written: 2 reads + 1 write per element, against
// the row kernel's 1 + 1. The optional affine weight (gamma) and bias
// (beta) are indexed by the row along the axis:
//   layer: y = (x - mean) / sqrt(M2 / n + eps) * gamma[r] + beta[r]
//   rms:   y = x / sqrt(sum(x^2) / n + eps) * gamma[r]        (FLAG_RMS)
//   l2:    y = x / max(sqrt(sum(x^2)), eps)           (FLAG_RMS | FLAG_L2)
//
// Entry `main` (cols_driver.wgsl, with `combine` and `finish`; this file
//   defines the hooks they call): invocation c of the outer * inner
//   columns folds rows
//   [s * seg, (s + 1) * seg) of its column, s = workgroup y. With one split
//   it reads those rows again and writes them; with more it writes its
//   (mean, M2) to partials[s * cols + c] (the count is the segment's
//   length), entry `combine` merges each column's into
//   partials[split * cols + c] (CW columns per workgroup, WG / CW lanes
//   each, as softmax_cols' combine), and entry `finish` (main's grid)
//   writes each segment from that pair. The host splits when there are too
//   few columns to fill the GPU.
// Semantics: the row kernel's (norm.wgsl): the same formulas and eps
//   rules, the variance biased (/ n) and summed in f32; a NaN or infinity in
//   a column makes a layer-norm column NaN (through the mean and M2) and an
//   RMS / L2 column's sum NaN or +inf (NaN, or 0 times the finite values);
//   a constant column has M2 = 0 exactly (the running mean stays the
//   constant), so eps = 0 gives 0 / 0 = NaN. f32 arithmetic whatever Elem.
// Workgroup: WG x 1 x 1 (override, a multiple of CW); grid (ceil(cols / WG),
//   split) for `main` and `finish`, (ceil(cols / CW)) for `combine`.
// The predicted bandwidth: docs/perf/layout.md.

alias Elem = f32;
override WG: u32 = 256u;

// No mean subtraction: M2 is the sum of squares (RMSNorm and L2).
const FLAG_RMS: u32 = 2u;
// Multiply by `weight` (gamma).
const FLAG_WEIGHT: u32 = 4u;
// Add `bias` (beta).
const FLAG_BIAS: u32 = 8u;
// With FLAG_RMS: x / max(||x||, eps).
const FLAG_L2: u32 = 16u;

// (mean, M2) pairs: split * cols partials, then each column's merged pair.
@group(0) @binding(3) var<storage, read_write> partials: array<vec2<f32>>;
@group(0) @binding(4) var<storage, read> weight: array<Elem>;
@group(0) @binding(5) var<storage, read> bias: array<Elem>;

fn rms() -> bool {
    return (params.op_word & FLAG_RMS) != 0u;
}

// v folded into the accumulator (count, mean, M2): Welford's step, or the
// square added with the mean held at 0.
fn fold(a: vec3<f32>, v: f32) -> vec3<f32> {
    let count = a.x + 1.0;
    if rms() {
        return vec3<f32>(count, 0.0, a.z + v * v);
    }
    let delta = v - a.y;
    let mean = a.y + delta / count;
    return vec3<f32>(count, mean, a.z + delta * (v - mean));
}

// Chan et al.'s merge of two accumulators; an empty side (count 0, decided
// by the count alone so a NaN or infinite mean is never weighted by 0)
// gives the other. delta * (delta * w) with w >= 1/2 overflows only where
// the term itself does.
fn merge(a: vec3<f32>, b: vec3<f32>) -> vec3<f32> {
    if b.x == 0.0 {
        return a;
    }
    if a.x == 0.0 {
        return b;
    }
    let count = a.x + b.x;
    let delta = b.y - a.y;
    let mean = a.y + delta * (b.x / count);
    let m2 = a.z + b.z + delta * (delta * (a.x * b.x / count));
    return vec3<f32>(count, mean, m2);
}

// The factor each element is multiplied by, from the column's M2 (sum of
// squared deviations, or of squares for RMS and L2): norm.wgsl's norm_inv.
fn norm_inv(m2: f32) -> f32 {
    if (params.op_word & FLAG_L2) != 0u {
        // max() may drop a NaN, and a NaN compare may be folded away: a NaN
        // sum (told by its bits) is passed on as it is.
        if is_nan(m2) {
            return m2;
        }
        return 1.0 / max(sqrt(m2), params.op_value);
    }
    return inverseSqrt(m2 / f32(params.n) + params.op_value);
}

// Element v of row r normalised and affine-transformed (norm.wgsl's
// norm_out, in its order).
fn norm_out(v: f32, r: u32, mean: f32, inv: f32) -> f32 {
    var y = (v - mean) * inv;
    if (params.op_word & FLAG_WEIGHT) != 0u {
        y *= f32(weight[r]);
    }
    if (params.op_word & FLAG_BIAS) != 0u {
        y += f32(bias[r]);
    }
    return y;
}

// Rows [r0, r1) of the column starting at `base` read again and written,
// given the column's (mean, M2).
fn write_rows(base: u32, r0: u32, r1: u32, p: vec2<f32>) {
    let step = params.inner;
    let mean = p.x;
    let inv = norm_inv(p.y);
    var r = r0;
    for (; r + 4u <= r1; r += 4u) {
        let at = base + r * step;
        let v0 = f32(x[at]);
        let v1 = f32(x[at + step]);
        let v2 = f32(x[at + 2u * step]);
        let v3 = f32(x[at + 3u * step]);
        out[at] = Elem(norm_out(v0, r, mean, inv));
        out[at + step] = Elem(norm_out(v1, r + 1u, mean, inv));
        out[at + 2u * step] = Elem(norm_out(v2, r + 2u, mean, inv));
        out[at + 3u * step] = Elem(norm_out(v3, r + 3u, mean, inv));
    }
    for (; r < r1; r++) {
        let at = base + r * step;
        out[at] = Elem(norm_out(f32(x[at]), r, mean, inv));
    }
}

// The hooks of cols_driver.wgsl: (count, mean, M2); a partial keeps
// (mean, M2), its count is its segment's length.
alias Acc = vec3<f32>;

fn load(at: u32) -> f32 {
    return f32(x[at]);
}

alias Stored = vec2<f32>;

fn stored(a: Acc) -> Stored {
    return a.yz;
}

fn empty() -> Acc {
    return vec3<f32>(0.0);
}

// Partial s of a column as an accumulator: its segment's row count with
// the (mean, M2) main wrote.
fn partial(s: u32, c: u32, cols: u32) -> vec3<f32> {
    let count = f32(min(params.seg, params.n - s * params.seg));
    let p = partials[s * cols + c];
    return vec3<f32>(count, p.x, p.y);
}

fn single(c: u32, base: u32, r0: u32, r1: u32, a: Acc) {
    write_rows(base, r0, r1, stored(a));
}

fn combined(c: u32, a: Acc) {
    partials[params.split * params.outer * params.inner + c] = stored(a);
}
