// matmul_split_scale: partial maxima of |A| and |B| for the tensor-core
// matmul's f32 form (matmul_coop.wgsl with SPLIT = 1).
//
// That kernel scales each operand by a power of two 2^e before splitting
// every value into two f16 halves (hi + lo), so that no hi overflows f16 and
// the large values, which dominate the sums, keep their 21 bits; it divides
// C by 2^(ea + eb) before the epilogue. e comes from the operand's largest
// finite magnitude, which this pass reduces in two steps: workgroup g of
// operand w (grid (NP, 2)) takes the max over elements g * WG + tid, step
// NP * WG, of the operand's logical elements (batches x rows x cols through
// its strides: padding and spare capacity never count) and writes
// partial[w * NP + g]; the matmul kernel's invocations each reduce the 2 NP
// partials at their start (split_exponent there). Infinities and NaN are
// left out (they stay what they are, 2^e x, in the products).

const WG: u32 = 256u;
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
@group(0) @binding(9) var<storage, read_write> partial: array<f32>;

var<workgroup> red: array<f32, WG>;

fn value(which: u32, at: u32) -> f32 {
    if which == 0u {
        return lhs[at];
    }
    return rhs[at];
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
    let per_batch = op.rows * op.cols;
    let total = op.batches * per_batch;
    var m = 0.0;
    for (var i = wid.x * WG + tid; i < total; i += groups.x * WG) {
        let z = i / per_batch;
        let rc = i % per_batch;
        let at = (z / op.inner) * op.s0 + (z % op.inner) * op.s1 + (rc / op.cols) * op.rs
            + (rc % op.cols) * op.cs;
        let a = abs(value(which, at));
        m = max(m, select(0.0, a, a <= F32_MAX));
    }
    red[tid] = m;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        if tid < s {
            red[tid] = max(red[tid], red[tid + s]);
        }
        workgroupBarrier();
    }
    if tid == 0u {
        partial[which * groups.x + wid.x] = red[0];
    }
}
