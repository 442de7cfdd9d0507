// matmul_split_scale: the largest finite |A| and |B| for the tensor-core
// matmul's f32 form (matmul_coop.wgsl with SPLIT = 1).
//
// That kernel scales each operand by a power of two 2^e before splitting
// every value into two f16 halves (hi + lo), so that no hi overflows f16 and
// the large values, which dominate the sums, keep their 21 bits; it divides
// C by 2^(ea + eb) before the epilogue. e comes from the operand's largest
// finite magnitude m, found here: workgroup (x, w) of the grid (X, 2) takes
// rows x R .. x R + R of operand w (A: batches x M rows of K; B: batches x
// K rows of N; logical elements only, through the operand's strides:
// padding and spare capacity never count), its invocations walk each row's
// columns, a workgroup tree gives its max, and one atomicMax on the bits
// (finite non-negative floats order as their bits do) folds it into
// maxima[w], which the host zeroes first. Infinities and NaN are left out
// of the maxima.
// Non-finite operands: the split cannot carry them (an infinity's halves
// are inf and inf - inf = NaN, so a product an f32 kernel gives as inf
// comes out NaN). A workgroup that sees one sets maxima[2]; the f32
// CUDA-core kernel's dispatches after the split kernel read it (their
// guard, matmul_tiled_core.wgsl) and recompute C with IEEE semantics, or
// return at once where it is 0.
// bf16 operands (IN_BF16 = 1, the scaled bf16 form of the tensor-core
// kernel: BF16_SCALED in matmul_coop.wgsl): the same pass over 16-bit
// elements, read two to a word (16-byte loads of 8 where rows start on 16
// bytes) and widened exactly (bf16 is the top half of an f32).
// Why this grid (H200): a workgroup per R rows with one atomic max each
// replaced 64 workgroups per operand with a grid-stride loop (~128 GB/s,
// ~1 ms of a 4.2 ms f32 4096^3 matmul); loading the R rows together lost:
// docs/perf/matmul.md#f32-split.

const WG: u32 = 256u;
// Rows per workgroup.
const R: u32 = 8u;
// 1: A and B are bf16 (element indices count 16-bit values).
const IN_BF16: u32 = 0u;
const F32_MAX: f32 = 3.4028235e38;

// One operand's logical layout: element (z, r, c) at
// (z / inner) * s0 + (z % inner) * s1 + r * rs + c * cs.
struct Operand {
    batches: u32,
    rows: u32,
    cols: u32,
    inner: u32,
    s0: u32,
    s1: u32,
    rs: u32,
    cs: u32,
}

struct ScaleParams {
    a: Operand,
    b: Operand,
}

@group(0) @binding(0) var<uniform> sp: ScaleParams;
@group(0) @binding(1) var<storage, read> lhs: array<f32>;
@group(0) @binding(2) var<storage, read> rhs: array<f32>;
// The same buffers as 16-byte words, for rows that start on 16 bytes.
@group(0) @binding(3) var<storage, read> lhs4: array<vec4<f32>>;
@group(0) @binding(4) var<storage, read> rhs4: array<vec4<f32>>;
// [0], [1]: the maxima; [2]: 1 where an infinity or NaN was seen.
@group(0) @binding(9) var<storage, read_write> maxima: array<atomic<u32>, 3>;

var<workgroup> red: array<f32, WG>;
// Whether an invocation saw an infinity or NaN.
var<workgroup> bad: atomic<u32>;

fn value(which: u32, at: u32) -> f32 {
    if IN_BF16 == 1u {
        // The word holding element `at` (bits only: no float operation).
        var w = bitcast<u32>(rhs[at >> 1u]);
        if which == 0u {
            w = bitcast<u32>(lhs[at >> 1u]);
        }
        return bitcast<f32>(((w >> ((at & 1u) * 16u)) & 0xffffu) << 16u);
    }
    if which == 0u {
        return lhs[at];
    }
    return rhs[at];
}

fn quad(which: u32, at: u32) -> vec4<f32> {
    if which == 0u {
        return lhs4[at];
    }
    return rhs4[at];
}

// The largest finite |x| of a 16-byte unit `q` (4 f32 values, or 8 bf16
// ones), per lane.
fn unit_max(q: vec4<f32>) -> vec4<f32> {
    if IN_BF16 == 1u {
        let u = bitcast<vec4<u32>>(q);
        return max(finite_abs(bitcast<vec4<f32>>(u << vec4<u32>(16u))),
            finite_abs(bitcast<vec4<f32>>(u & vec4<u32>(0xffff0000u))));
    }
    return finite_abs(q);
}

// 1 where a value of unit `q` is an infinity or NaN.
fn unit_bad(q: vec4<f32>) -> u32 {
    if IN_BF16 == 1u {
        let u = bitcast<vec4<u32>>(q);
        return non_finite(bitcast<vec4<f32>>(u << vec4<u32>(16u)))
            | non_finite(bitcast<vec4<f32>>(u & vec4<u32>(0xffff0000u)));
    }
    return non_finite(q);
}

// |x| where finite, else 0 (per lane).
fn finite_abs(x: vec4<f32>) -> vec4<f32> {
    let a = abs(x);
    return select(vec4<f32>(0.0), a, a <= vec4<f32>(F32_MAX));
}

// 1 where x is an infinity or NaN (a comparison with NaN is false).
fn non_finite(x: vec4<f32>) -> u32 {
    return u32(!all(abs(x) <= vec4<f32>(F32_MAX)));
}

@compute @workgroup_size(WG, 1, 1)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
) {
    let which = wid.y;
    var op = sp.a;
    if which == 1u {
        op = sp.b;
    }
    let total_rows = op.batches * op.rows;
    // Rows of contiguous columns that all start on 16 bytes: 16-byte loads
    // for the whole words of each row, single loads for the rest (H200,
    // run 90: single loads alone read ~1.3 TB/s at 1792).
    // Elements per 16-byte unit: 4 f32 values or 8 bf16 ones.
    let per = select(4u, 8u, IN_BF16 == 1u);
    let words = op.cs == 1u && ((op.rs | op.s0 | op.s1) & (per - 1u)) == 0u;
    if tid == 0u {
        atomicStore(&bad, 0u);
    }
    workgroupBarrier();
    var m = 0.0;
    var m4 = vec4<f32>(0.0);
    var seen = 0u;
    // Row groups beyond the grid's width come round again.
    for (var g = wid.x; g * R < total_rows; g += groups.x) {
        for (var i = 0u; i < R; i++) {
            let zr = g * R + i;
            if zr >= total_rows {
                break;
            }
            let z = zr / op.rows;
            let base = (z / op.inner) * op.s0 + (z % op.inner) * op.s1 + (zr % op.rows) * op.rs;
            var c0 = 0u;
            if words {
                let quads = op.cols / per;
                for (var q = tid; q < quads; q += WG) {
                    let x = quad(which, base / per + q);
                    m4 = max(m4, unit_max(x));
                    seen |= unit_bad(x);
                }
                c0 = quads * per;
            }
            for (var c = c0 + tid; c < op.cols; c += WG) {
                let a = abs(value(which, base + c * op.cs));
                m = max(m, select(0.0, a, a <= F32_MAX));
                seen |= u32(!(a <= F32_MAX));
            }
        }
    }
    red[tid] = max(m, max(max(m4.x, m4.y), max(m4.z, m4.w)));
    if seen != 0u {
        atomicOr(&bad, 1u);
    }
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        if tid < s {
            red[tid] = max(red[tid], red[tid + s]);
        }
        workgroupBarrier();
    }
    if tid == 0u {
        atomicMax(&maxima[which], bitcast<u32>(red[0]));
    }
    if tid == 0u && atomicLoad(&bad) != 0u {
        atomicStore(&maxima[2], 1u);
    }
}
