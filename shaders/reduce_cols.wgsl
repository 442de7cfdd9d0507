// reduce_cols: sum, max or mean over the middle axis of x viewed as
// [outer, n, inner] with inner > 1 (Axis::Dim of any axis but the last),
// reading x once: each invocation owns one output column, and adjacent
// invocations take adjacent columns, so every row step is a coalesced read.
// Four rows per step into four accumulators: four loads in flight per
// invocation instead of one waiting on the last (docs/perf/layout.md).
//
// Entry `main` (cols_driver.wgsl, with `combine`; this file defines the
//   hooks they call): invocation c of the outer * inner columns sums (or maxes)
//   rows [s * seg, (s + 1) * seg) of its column, s = workgroup y. With
//   one split it writes out[c] (the sum times `scale`: 1, or 1/n for the
//   mean); with more it writes the f32 partial partials[s * cols + c] and
//   entry `combine` finishes (CW columns per workgroup, WG / CW lanes
//   each; one invocation per column walking every partial dominated when
//   the split was large, docs/perf/layout.md). The host splits when there
//   are too few columns to fill the GPU.
// NaN: max tracks NaN by its bits (WGSL's max() may drop it, and a NaN
//   compare may be folded away); sums carry it. Accumulation in f32.
// Workgroup: WG x 1 x 1 (override); grid (ceil(cols / WG), split).

alias Elem = f32;
// 0 sum (times scale), 1 max.
const OP: u32 = 0u;
override WG: u32 = 256u;

@group(0) @binding(3) var<storage, read_write> partials: array<f32>;

// The identity of OP (0, or -inf for max).
fn start() -> f32 {
    return select(0.0, from_bits(0xff800000u), OP == 1u);
}

// One value folded into (acc, NaN seen).
fn fold(s: vec2<f32>, v: f32) -> vec2<f32> {
    if OP == 1u {
        return vec2<f32>(max(s.x, v), select(s.y, 1.0, is_nan(v)));
    }
    return vec2<f32>(s.x + v, 0.0);
}

// Two (acc, NaN seen) pairs as one.
fn merge(a: vec2<f32>, b: vec2<f32>) -> vec2<f32> {
    if OP == 1u {
        return vec2<f32>(max(a.x, b.x), max(a.y, b.y));
    }
    return vec2<f32>(a.x + b.x, 0.0);
}

// The result from (acc, NaN seen), scaled for a sum (the mean's 1/n).
// The accumulator with NaN as a value where one was seen (max).
fn value(s: vec2<f32>) -> f32 {
    return select(s.x, from_bits(0x7fc00000u), s.y > 0.0);
}

fn finish(s: vec2<f32>) -> f32 {
    if OP == 1u {
        return value(s);
    }
    return s.x * params.op_value;
}

// The hooks of cols_driver.wgsl (its `main` and `combine`): (acc, NaN
// seen) pairs; a partial keeps the value (NaN as a value, sums unscaled).
alias Acc = vec2<f32>;
alias Stored = f32;

fn empty() -> Acc {
    return vec2<f32>(start(), 0.0);
}

fn stored(a: Acc) -> Stored {
    return value(a);
}

fn partial(s: u32, c: u32, cols: u32) -> Acc {
    return fold(empty(), partials[s * cols + c]);
}

fn load(at: u32) -> f32 {
    return f32(x[at]);
}

fn single(c: u32, base: u32, r0: u32, r1: u32, a: Acc) {
    out[c] = Elem(finish(a));
}

fn combined(c: u32, a: Acc) {
    out[c] = Elem(finish(a));
}
