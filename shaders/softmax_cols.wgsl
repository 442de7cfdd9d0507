// softmax_cols: softmax or log-softmax (params.op_word) over the middle
// axis of x viewed as [outer, n, inner] with inner > 1 (any axis but the
// last), without moving the axis last and back (three passes over x). Each
// invocation owns one column (stride inner) and adjacent invocations take
// adjacent columns, so every row step is a coalesced read. Online softmax
// down the column: a running max m and sum s of exp(x - m), rescaled by
// exp(m_old - m_new) when the max grows; four rows per step into four
// (m, s) pairs merged at the end (four loads in flight, as
// reduce_cols.wgsl). Then the column is read again and written: 2 reads +
// 1 write per element, against the row kernel's 1 + 1.
//
// Entry `main` (cols_driver.wgsl, with `combine` and `finish`; this file
//   defines the hooks they call): invocation c of the outer * inner
//   columns folds rows
//   [s * seg, (s + 1) * seg) of its column, s = workgroup y. With one split
//   it reads those rows again and writes them; with more it writes its pair
//   to partials[s * cols + c], entry `combine` merges each column's pairs
//   into partials[split * cols + c] (CW columns per workgroup, WG / CW lanes
//   each, as reduce_cols' combine), and entry `finish` (main's grid) writes
//   each segment from that pair. The host splits when there are too few
//   columns to fill the GPU.
// Semantics: the row kernel's (softmax.wgsl): NaN is read as +inf, so a NaN
//   or +inf in a column makes the column NaN; an all -inf column gives zeros
//   (log-softmax -inf); exp only sees x - max <= 0. f32 arithmetic whatever
//   Elem.
// Workgroup: WG x 1 x 1 (override, a multiple of CW); grid (ceil(cols / WG),
//   split) for `main` and `finish`, (ceil(cols / CW)) for `combine`.
// The predicted bandwidth: docs/perf/layout.md.

alias Elem = f32;
override WG: u32 = 256u;

// (max, sum) pairs: split * cols partials, then each column's merged pair.
@group(0) @binding(3) var<storage, read_write> partials: array<vec2<f32>>;

fn is_pos_inf(v: f32) -> bool {
    return bitcast<u32>(v) == 0x7f800000u;
}

fn is_neg_inf(v: f32) -> bool {
    return bitcast<u32>(v) == 0xff800000u;
}

// x[at] widened to f32, NaN read as +inf (it poisons the column through the
// max, so max() and the compares never see NaN).
fn load(at: u32) -> f32 {
    let v = f32(x[at]);
    return select(v, from_bits(0x7f800000u), is_nan(v));
}

// The pair of no elements.
fn empty() -> vec2<f32> {
    return vec2<f32>(from_bits(0xff800000u), 0.0);
}

// v folded into the running (max, sum of exp(x - max)). The sum stays 0
// while the max is -inf; past a +inf max it is never read.
fn fold(a: vec2<f32>, v: f32) -> vec2<f32> {
    var m = a.x;
    var s = a.y;
    if v > m {
        s *= exp(m - v);
        m = v;
    }
    if !is_neg_inf(m) {
        s += exp(v - m);
    }
    return vec2<f32>(m, s);
}

// Two pairs as one: a side whose max is -inf adds its sum of 0.
fn merge(a: vec2<f32>, b: vec2<f32>) -> vec2<f32> {
    let m = max(a.x, b.x);
    if is_neg_inf(m) || is_pos_inf(m) {
        return vec2<f32>(m, 0.0);
    }
    return vec2<f32>(m, a.y * exp(a.x - m) + b.y * exp(b.x - m));
}

// Softmax (or log-softmax) of v given its column's pair and log(sum); the
// column-level special cases first.
fn softmax_out(v: f32, p: vec2<f32>, log_sum: f32) -> f32 {
    if is_pos_inf(p.x) {
        return from_bits(0x7fc00000u);
    }
    let log_out = params.op_word != 0u;
    if is_neg_inf(p.x) {
        return select(0.0, from_bits(0xff800000u), log_out);
    }
    if log_out {
        // (x - max) - ln sum, as the row kernel: max + ln sum would absorb
        // ln sum at large max.
        return (v - p.x) - log_sum;
    }
    return exp(v - p.x) / p.y;
}

// Rows [r0, r1) of the column starting at `base` read again and written.
fn write_rows(base: u32, r0: u32, r1: u32, p: vec2<f32>) {
    let step = params.inner;
    let log_sum = log(p.y);
    var r = r0;
    for (; r + 4u <= r1; r += 4u) {
        let at = base + r * step;
        let v0 = load(at);
        let v1 = load(at + step);
        let v2 = load(at + 2u * step);
        let v3 = load(at + 3u * step);
        out[at] = Elem(softmax_out(v0, p, log_sum));
        out[at + step] = Elem(softmax_out(v1, p, log_sum));
        out[at + 2u * step] = Elem(softmax_out(v2, p, log_sum));
        out[at + 3u * step] = Elem(softmax_out(v3, p, log_sum));
    }
    for (; r < r1; r++) {
        let at = base + r * step;
        out[at] = Elem(softmax_out(load(at), p, log_sum));
    }
}

// The hooks of cols_driver.wgsl: a (max, sum) pair is its own partial.
alias Acc = vec2<f32>;

alias Stored = vec2<f32>;

fn stored(a: Acc) -> Stored {
    return a;
}

fn partial(s: u32, c: u32, cols: u32) -> Acc {
    return partials[s * cols + c];
}

fn single(c: u32, base: u32, r0: u32, r1: u32, a: Acc) {
    write_rows(base, r0, r1, stored(a));
}

fn combined(c: u32, a: Acc) {
    partials[params.split * params.outer * params.inner + c] = stored(a);
}
