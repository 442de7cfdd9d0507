// pad_copy: copies a batch of row-major matrices into another row/column
// count, zero-filling where the destination is larger and cropping where it
// is smaller. The padding layer uses it to align awkward matmul shapes (A:
// K -> K', B: K, N -> K', N') and to slice the padded result back (C: N' -> N).
//
// Algorithm: one invocation per destination element; x runs along columns so
//   neighbouring invocations read and write neighbouring addresses (coalesced).
// Workgroup: 16 x 16. Grid: (ceil(dst_cols / 16), ceil(dst_rows / 16), batches).
// Batching: matrix z = batch_base + workgroup z; source and destination are
//   dense batches of their own shapes.
// Types: Elem is f32 or f16 (text-specialised).

alias Elem = f32;

struct Params {
    src_rows: u32,
    src_cols: u32,
    dst_rows: u32,
    dst_cols: u32,
    batch_base: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> src: array<Elem>;
@group(0) @binding(2) var<storage, read_write> dst: array<Elem>;

@compute @workgroup_size(16, 16, 1)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let c = gid.x;
    let r = gid.y;
    let z = params.batch_base + gid.z;
    if r >= params.dst_rows || c >= params.dst_cols {
        return;
    }
    var v = Elem(0.0);
    if r < params.src_rows && c < params.src_cols {
        v = src[(z * params.src_rows + r) * params.src_cols + c];
    }
    dst[(z * params.dst_rows + r) * params.dst_cols + c] = v;
}
