// matmul_naive: C[z] = A[z] x B[z], one invocation per output element.
//
// Algorithm: invocation (col, row) walks the whole K dimension, reading a row
//   of A and a column of B straight from global memory (no reuse: every input
//   element is read N or M times). Kept as the on-GPU reference and as the
//   tour's "before" for tiling.
// Workgroup: WG_X x WG_Y (overrides, default 16 x 16); x runs along N so
//   neighbouring invocations read neighbouring B elements (coalesced).
// Grid: (ceil(N / WG_X), ceil(M / WG_Y), batches in this dispatch).
// Types: Elem is f32 or f16 (text-specialised); accumulation is always f32.
// Params: matmul_params.wgsl (appended by the registry).
// Batching: z = batch_base + workgroup z; z splits into (z / batch_inner,
//   z % batch_inner) and each operand has its own stride per batch dimension
//   (stride 0 broadcasts). C is dense: C[z] starts at z * M * N.
// Epilogue: matmul_epilogue.wgsl (appended by the registry) before the store.
// Limits: any M, N, K >= 1 (bounds-checked); offsets must fit in u32.
// Why: the on-GPU reference every other kernel is checked and timed
// against (H200 4096^3 f32: 1.6 TFLOP/s, the tiled kernel ~20x that):
// docs/perf/matmul.md#tiled-kernels.

alias Elem = f32;
// The output's element type (text-specialised when it differs from Elem).
alias Out = Elem;

override WG_X: u32 = 16u;
override WG_Y: u32 = 16u;

@group(0) @binding(1) var<storage, read> lhs: array<Elem>;
@group(0) @binding(2) var<storage, read> rhs: array<Elem>;
@group(0) @binding(3) var<storage, read_write> out: array<Out>;

@compute @workgroup_size(WG_X, WG_Y, 1)
fn main(
    @builtin(global_invocation_id) gid: vec3<u32>,
    @builtin(workgroup_id) wid: vec3<u32>,
) {
    let col = gid.x;
    let row = gid.y;
    if row >= params.m || col >= params.n {
        return;
    }
    let z = params.batch_base + wid.z;
    let z0 = z / params.batch_inner;
    let z1 = z % params.batch_inner;
    // Row-major or transposed operands alike, through their strides.
    let a_row = z0 * params.a_stride0 + z1 * params.a_stride1 + row * params.a_row_stride;
    let b_col = z0 * params.b_stride0 + z1 * params.b_stride1 + col * params.b_col_stride;
    var acc = 0.0;
    for (var i = 0u; i < params.k; i++) {
        let a = lhs[a_row + i * params.a_col_stride];
        let b = rhs[b_col + i * params.b_row_stride];
        acc = fma(f32(a), f32(b), acc);
    }
    out[(z * params.m + row) * params.n + col] = Out(epilogue(acc, z, row, col));
}
