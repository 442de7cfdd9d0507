// reduce: sum, max or mean of each row (the last axis), or of a whole tensor
// viewed as one row. Accumulates in f32 whatever the input dtype; the output
// has the input's dtype.
//
// Entry `main`, one pass:
//   split == 1: WG / T rows per workgroup, T invocations per row; each
//     invocation accumulates its chunks, four loads in flight per step
//     (4-wide f32 accumulators: 4 independent sums), then the row is reduced with `row_sum`/`row_max`
//     (subgroup ops or the workgroup-memory tree, per the assembled part);
//     invocation 0 of the row writes out[row].
//   split > 1 (few long rows, e.g. a whole-tensor reduction, that would
//     leave the GPU idle): T == WG; `split` workgroups per row, workgroup s
//     takes chunks [s * seg, (s + 1) * seg) and writes one f32 partial to
//     partials[row * split + s]; entry `combine` finishes.
// Entry `combine`: one workgroup per row reduces the row's `split` f32
//   partials (strided by WG) and writes out[row].
// OP (text const): 0 = sum (the result is multiplied by params.scale: 1, or
//   1/n for mean), 1 = max. NaN propagates: max tracks NaN lanes with an
//   integer test and returns NaN when any is found (WGSL's max() may drop
//   NaN); sums carry NaN arithmetically.
// Workgroup: WG x 1 x 1 (override), red: WG floats of workgroup memory.
// Limits: the host handles n == 0 (sum 0, mean NaN, max an error).
// Measurements: docs/perf/rows.md.

alias Elem = f32;
const VEC: u32 = 4u;
const OP: u32 = 0u;

@group(0) @binding(2) var<storage, read_write> out: array<Elem>;
@group(0) @binding(3) var<storage, read_write> partials: array<f32>;

fn reduce_row(acc: vec4<f32>, hi: vec4<f32>, saw_nan: bool) -> f32 {
    if OP == 0u {
        return row_sum(hsum(acc));
    }
    let m = row_max(hmax(hi));
    let bad = row_max(select(0.0, 1.0, saw_nan));
    return select(m, nan_value(), bad > 0.0);
}

@compute @workgroup_size(WG, 1, 1)
fn main(ids: Ids) {
    init_ids(ids);
    let g = group_index();
    let tid = lid % T;
    var row = g * (WG / T) + lid / T;
    var part = 0u;
    var start = 0u;
    var end = chunk_count();
    if params.split > 1u {
        row = g / params.split;
        part = g % params.split;
        start = part * params.seg;
        end = min(start + params.seg, end);
    }
    let live = row < params.rows;
    var acc = vec4<f32>(0.0);
    var hi = vec4<f32>(neg_inf());
    var saw_nan = false;
    // Lanes past the row end: the identity of the reduction.
    let pad = select(0.0, neg_inf(), OP == 1u);
    if live {
        var c = start + tid;
        // Four chunks per step, loaded before they are combined: four loads
        // in flight per invocation however the compiler treats the loop.
        for (; c + 3u * T < end; c += 4u * T) {
            let a = load_chunk(row, c, pad);
            let b = load_chunk(row, c + T, pad);
            let d = load_chunk(row, c + 2u * T, pad);
            let e = load_chunk(row, c + 3u * T, pad);
            if OP == 0u {
                acc += (a + b) + (d + e);
            } else {
                saw_nan = saw_nan || any(is_nan4(a) | is_nan4(b) | is_nan4(d) | is_nan4(e));
                hi = max(hi, max(max(a, b), max(d, e)));
            }
        }
        for (; c < end; c += T) {
            let v = load_chunk(row, c, pad);
            if OP == 0u {
                acc += v;
            } else {
                saw_nan = saw_nan || any(is_nan4(v));
                hi = max(hi, v);
            }
        }
    }
    let r = reduce_row(acc, hi, saw_nan);
    if live && tid == 0u {
        if params.split > 1u {
            partials[row * params.split + part] = r;
        } else {
            out[row] = Elem(r * params.scale);
        }
    }
}

@compute @workgroup_size(WG, 1, 1)
fn combine(ids: Ids) {
    init_ids(ids);
    let row = group_index();
    let live = row < params.rows;
    var acc = 0.0;
    var hi = neg_inf();
    var saw_nan = false;
    if live {
        for (var i = lid; i < params.split; i += WG) {
            let p = partials[row * params.split + i];
            if OP == 0u {
                acc += p;
            } else {
                saw_nan = saw_nan || is_nan1(p);
                hi = max(hi, p);
            }
        }
    }
    let r = reduce_row(vec4<f32>(acc, 0.0, 0.0, 0.0), vec4<f32>(hi), saw_nan);
    if live && lid == 0u {
        out[row] = Elem(r * params.scale);
    }
}
