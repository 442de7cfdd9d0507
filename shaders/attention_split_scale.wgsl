// attention_split_scale: the power-of-two exponents the tensor-core attention
// kernel takes for f32 inputs (attention_flash_coop.wgsl with SPLIT = 1).
//
// That kernel splits each f32 value x * 2^e into two halves, hi (11
// significant bits) and lo (the rest, rounded to f16), and multiplies hi*hi
// + hi*lo + lo*hi on the tensor cores (the dropped lo*lo term is 2^-20 of
// the product). f16 has 5
// exponent bits: without the scale a value past 65504 overflows hi, and a
// value under 2^-3 leaves lo in f16's subnormals, with fewer bits. So each
// (batch, head) of q, k and v gets its own e, chosen so that its largest
// magnitude m scales into [2^14, 2^15): every value's hi stays finite and
// the large ones, which dominate the dot products, keep 22 significant
// bits. Multiplying by 2^e is exact; the attention kernel divides the scores
// by 2^(eq + ek) and the output by 2^ev.
//
// Algorithm: workgroup (x, h, w B + b) of the grid (X, max(Hq, Hkv), 3 B)
//   takes rows x RA .. x RA + RA of head h of batch b of operand w (0 = q:
//   Hq heads, Sq rows, D columns; 1 = k, 2 = v: Hkv heads, the batch's key
//   count, D or Dv columns), 4 floats per 16-byte load (the attention kernel
//   requires strides that are multiples of 8 elements, and D, Dv are
//   multiples of 16); a workgroup tree gives its max, and one atomicMax on
//   the bits (finite non-negative floats order as their bits do) folds it
//   into the head's slot, which the host zeroes first. Workgroups past the
//   operand's heads or rows return.
// Output: ex (u32 bits of m), q's at b * Hq + h, then k's at B * Hq + b *
//   Hkv + h, then v's after B * Hkv more. m is taken over the finite values;
//   the attention kernel turns m into e (split_exponent there; m = 0 gives
//   e = 0). Word B * (Hq + 2 Hkv), the last, is a flag set to 1 when any
//   value is an infinity or NaN: halves cannot carry those (inf's lo is inf
//   - inf), so the plan ends with the f32 flash kernel guarded by this flag
//   (attention_flash.wgsl's generated guard), which recomputes O and lse
//   with IEEE's rules. A workgroup that sees one reduces +inf instead of its
//   maximum and sets the flag.
// Why this grid (H200, runs 70-77): one workgroup per head and operand
//   (192 at B4 H16) had too few loads in flight for the bandwidth
//   (docs/perf/attention.md#f32-on-tensor-cores).
// Params: attention_common's (appended by the registry): batch, hq, hkv,
//   sq, d, dv, the q/k/v strides and the key lengths (key_count).

const WG: u32 = 256u;
// Rows per workgroup.
const RA: u32 = 64u;
const F32_MAX: f32 = 3.4028235e38;

@group(0) @binding(10) var<storage, read> q4f: array<vec4<f32>>;
@group(0) @binding(11) var<storage, read> k4f: array<vec4<f32>>;
@group(0) @binding(12) var<storage, read> v4f: array<vec4<f32>>;
@group(0) @binding(13) var<storage, read_write> ex: array<atomic<u32>>;

var<workgroup> red: array<f32, WG>;

fn load4(which: u32, e: u32) -> vec4<f32> {
    if which == 0u {
        return q4f[e];
    } else if which == 1u {
        return k4f[e];
    }
    return v4f[e];
}

@compute @workgroup_size(WG, 1, 1)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
) {
    let h = wid.y;
    let which = wid.z / params.batch;
    let b = wid.z % params.batch;
    let heads = select(params.hkv, params.hq, which == 0u);
    var rows = params.sq;
    var cols = params.d;
    var base = params.q_off + b * params.q_sb + h * params.q_sh;
    var stride = params.q_sr;
    var slot = b * params.hq + h;
    if which == 1u {
        rows = key_count(b);
        base = params.k_off + b * params.k_sb + h * params.k_sh;
        stride = params.k_sr;
        slot = params.batch * params.hq + b * params.hkv + h;
    } else if which == 2u {
        rows = key_count(b);
        cols = params.dv;
        base = params.v_off + b * params.v_sb + h * params.v_sh;
        stride = params.v_sr;
        slot = params.batch * (params.hq + params.hkv) + b * params.hkv + h;
    }
    let row0 = wid.x * RA;
    // Uniform: the whole workgroup returns together.
    if h >= heads || row0 >= rows {
        return;
    }
    let n_rows = min(RA, rows - row0);
    let per_row = cols / 4u;
    var m = vec4<f32>();
    var bad = false;
    for (var i = tid; i < n_rows * per_row; i += WG) {
        let r = row0 + i / per_row;
        let c = (i % per_row) * 4u;
        let a = abs(load4(which, (base + r * stride + c) / 4u));
        // Finite values only; an infinity or NaN (not <= F32_MAX) marks
        // the invocation.
        let finite = a <= vec4<f32>(F32_MAX);
        bad = bad || !all(finite);
        m = max(m, select(vec4<f32>(), a, finite));
    }
    red[tid] = select(max(max(m.x, m.y), max(m.z, m.w)), -neg_inf(), bad);
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        if tid < s {
            red[tid] = max(red[tid], red[tid + s]);
        }
        workgroupBarrier();
    }
    if tid == 0u {
        if red[0] <= F32_MAX {
            atomicMax(&ex[slot], bitcast<u32>(red[0]));
        } else {
            atomicMax(&ex[params.batch * (params.hq + 2u * params.hkv)], 1u);
        }
    }
}
