// matmul_params: the uniform every matmul kernel reads, appended by the
// registry after the kernel's own file (one definition, one Rust writer:
// `Context::matmul_params`).
//
// m, n, k: C[z] is m x n, the contraction has k terms.
// Batching: z = batch_base + workgroup z splits into (z / batch_inner,
//   z % batch_inner); each operand has an element stride per batch dimension
//   (0 where it broadcasts); C is dense, C[z] at z * m * n.
// alpha: the epilogue's scale (1.0 when unset).
// k_chunk, splits: rows of B per split and the number of splits (split-K
//   GEMV only; 0 elsewhere).
// epi_k: a generated epilogue's scalars (zeros otherwise).
// *_row_stride, *_col_stride: operand layouts (dense, transposed, or rows
//   padded by `tensor_padded`); every kernel addresses A and B through them.
//   C is always dense: C[z, r, c] at (z * m + r) * n + c.

struct Params {
    m: u32,
    n: u32,
    k: u32,
    batch_inner: u32,
    a_stride0: u32,
    a_stride1: u32,
    b_stride0: u32,
    b_stride1: u32,
    batch_base: u32,
    alpha: f32,
    k_chunk: u32,
    splits: u32,
    // Element strides of A's rows and columns and of B's rows and columns:
    // (k, 1) and (n, 1) for row-major operands, (1, m) and (1, k) for
    // transposed ones (A stored [k, m], B stored [n, k]).
    a_row_stride: u32,
    a_col_stride: u32,
    b_row_stride: u32,
    b_col_stride: u32,
    // The first 8 scalar constants of a generated epilogue
    // (`Epilogue::expr`): data, so epilogues that differ only in their
    // scalars share one pipeline.
    epi_k: array<vec4<f32>, 2>,
}

@group(0) @binding(0) var<uniform> params: Params;
