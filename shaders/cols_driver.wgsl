// cols_driver: the entries shared by the column kernels (reduce_cols,
// softmax_cols, norm_cols) over x viewed as [outer, n, inner]: `main` (one
// invocation per column, workgroup y the segment) and `combine` (each
// column's segment partials merged); cols_finish.wgsl adds `finish` for
// the kernels that write the column again. Appended after the kernel's
// file, which defines:
//   alias Acc, alias Stored      a segment's accumulator, what a partial keeps
//   fn load(at) -> f32           element `at` of x, as the fold reads it
//   fn fold(a: Acc, v: f32)      a with one more element
//   fn stored(a: Acc) -> Stored
//   fn partial(s, c, cols)       partial s of column c as an Acc
//   fn empty(), fn merge(a, b)   the identity and the merge of Accs
//   fn single(c, base, r0, r1, a)  the result of column c from its one segment
//   fn combined(c, a)            column c's merged Acc written (by `combine`)
// and `alias Elem`, `partials` (Stored: split * cols partials, then what
// `combined` keeps) and `WG`. The uniform and x and out are declared here.

// The column kernels' uniform (one Rust writer, `Context::column_params`):
// x viewed as [outer, n, inner]; `split` segments of `seg` rows; the op's
// word (softmax_cols: 1 for log-softmax; norm_cols: its FLAG_*) and value
// (reduce_cols: the sum's scale; norm_cols: eps).
struct Params {
    outer: u32,
    n: u32,
    inner: u32,
    split: u32,
    seg: u32,
    op_word: u32,
    op_value: f32,
    pad0: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> x: array<Elem>;
@group(0) @binding(2) var<storage, read_write> out: array<Elem>;

fn is_nan(v: f32) -> bool {
    return (bitcast<u32>(v) & 0x7fffffffu) > 0x7f800000u;
}

// Non-finite values from bit patterns held in a var: a constant expression
// that is not finite is a shader-creation error in WGSL (the browser's
// compiler rejects it), and integer tests survive compilers that assume
// finite math.
fn from_bits(bits: u32) -> f32 {
    var b = bits;
    return bitcast<f32>(b);
}

// The accumulator of rows [r0, r1) of the column starting at `base`: four
// rows per step into four accumulators (four loads in flight per
// invocation instead of one waiting on the last), merged at the end.
fn column_acc(base: u32, r0: u32, r1: u32) -> Acc {
    let step = params.inner;
    var a0 = empty();
    var a1 = a0;
    var a2 = a0;
    var a3 = a0;
    var r = r0;
    for (; r + 4u <= r1; r += 4u) {
        let at = base + r * step;
        a0 = fold(a0, load(at));
        a1 = fold(a1, load(at + step));
        a2 = fold(a2, load(at + 2u * step));
        a3 = fold(a3, load(at + 3u * step));
    }
    for (; r < r1; r++) {
        a0 = fold(a0, load(base + r * step));
    }
    return merge(merge(a0, a1), merge(a2, a3));
}

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
    let a = column_acc(base, r0, r1);
    if params.split == 1u {
        single(c, base, r0, r1, a);
        return;
    }
    partials[wid.y * cols + c] = stored(a);
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
        combined(c, acc);
    }
}
