// cols_driver: the entries shared by the column kernels (softmax_cols,
// norm_cols) over x viewed as [outer, n, inner]: `main` (one invocation
// per column, workgroup y the segment), `combine` (each column's segment
// partials merged) and `finish` (each segment written from its column's
// merged partial). Appended after the kernel's file, which defines:
//   alias Acc                    the accumulator (statistics of a segment)
//   fn column_acc(base, r0, r1)  Acc of rows [r0, r1) of the column at base
//   fn stored(a: Acc)            the vec2<f32> a partial keeps of it
//   fn partial(s, c, cols)       partial s of column c as an Acc
//   fn empty(), fn merge(a, b)   the identity and the merge of Accs
//   fn write_rows(base, r0, r1, p: vec2<f32>)  the rows written from p
// and `params` (outer, n, inner, split, seg), `partials` (vec2<f32>:
// split * cols partials, then each column's merged one) and `WG`.

// The first element of column c (of outer * inner).
fn column_base(c: u32) -> u32 {
    return (c / params.inner) * params.n * params.inner + c % params.inner;
}

@compute @workgroup_size(WG, 1, 1)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let cols = params.outer * params.inner;
    let c = wid.x * WG + lid;
    if c >= cols {
        return;
    }
    let base = column_base(c);
    let r0 = wid.y * params.seg;
    let r1 = min(params.n, r0 + params.seg);
    let a = stored(column_acc(base, r0, r1));
    if params.split == 1u {
        write_rows(base, r0, r1, a);
        return;
    }
    partials[wid.y * cols + c] = a;
}

// Columns per workgroup of `combine` (WG / CW lanes share a column).
const CW: u32 = 32u;
var<workgroup> sh_acc: array<Acc, WG>;

@compute @workgroup_size(WG, 1, 1)
fn combine(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    // WG / CW lanes per column each merge every (WG / CW)-th partial (rows
    // of CW adjacent columns: coalesced), then meet in workgroup memory.
    let cols = params.outer * params.inner;
    let parts = WG / CW;
    let c = wid.x * CW + lid % CW;
    let part = lid / CW;
    var a0 = empty();
    var a1 = a0;
    if c < cols {
        var s = part;
        for (; s + parts < params.split; s += 2u * parts) {
            a0 = merge(a0, partial(s, c, cols));
            a1 = merge(a1, partial(s + parts, c, cols));
        }
        if s < params.split {
            a0 = merge(a0, partial(s, c, cols));
        }
    }
    sh_acc[lid] = merge(a0, a1);
    workgroupBarrier();
    if part == 0u && c < cols {
        var acc = sh_acc[lid];
        for (var p = 1u; p < parts; p++) {
            acc = merge(acc, sh_acc[p * CW + lid]);
        }
        partials[params.split * cols + c] = stored(acc);
    }
}

@compute @workgroup_size(WG, 1, 1)
fn finish(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let cols = params.outer * params.inner;
    let c = wid.x * WG + lid;
    if c >= cols {
        return;
    }
    let r0 = wid.y * params.seg;
    let r1 = min(params.n, r0 + params.seg);
    write_rows(column_base(c), r0, r1, partials[params.split * cols + c]);
}
