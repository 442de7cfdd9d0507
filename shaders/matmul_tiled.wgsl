// matmul_tiled: register-tiled matmul with scalar global loads; any M, N, K.
//
// The compute part (tiles, register tile, workgroup shape) is in
// matmul_tiled_core.wgsl, which the registry appends to this file; this
// prelude holds the bindings and the global-memory side:
// - fetch_a / put_a: consecutive invocations read consecutive k of one row of
//   A (row-major A: consecutive addresses), scattered k-major into workgroup
//   memory.
// - fetch_b / put_b (matmul_tiled_b.wgsl, or a quantised weight's in
//   quant_matmul_tiled.wgsl): consecutive invocations read consecutive n
//   of one row of B.
// - store_row: one output row's two 4-wide column groups, element by element.
// Every global access is bounds-checked, so edges need no special case; the
// vec4 variant (matmul_tiled_vec4) is what aligned shapes should use.
// Operands may be transposed (A stored [K, M], B stored [N, K]): addresses go
// through the row and column strides in Params, and each load walks the
// operand's contiguous dimension so it stays coalesced.
// Measurements: docs/perf/matmul.md#tiled-kernels.

alias Elem = f32;
// The output's element type (text-specialised when it differs from Elem).
alias Out = Elem;

@group(0) @binding(1) var<storage, read> lhs: array<Elem>;
@group(0) @binding(3) var<storage, read_write> out: array<Out>;

// Group j of an invocation is the four elements tid + (4 j + e) * THREADS,
// e = 0..3, of the tile in load order: consecutive invocations read
// consecutive addresses for every e.
// (row, k, 1 when inside the tile) of element e of group j.
fn a_index(j: u32, e: u32, tid: u32) -> vec3<u32> {
    // Row-major A: k fastest; transposed A: m fastest (uniform branch).
    let i = tid + (4u * j + e) * THREADS;
    let inside = u32(i < BM * BK);
    if params.a_col_stride == 1u {
        return vec3<u32>(i / BK, i % BK, inside);
    }
    return vec3<u32>(i % BM, i / BM, inside);
}

fn fetch_a(j: u32, tid: u32, a_base: u32, row0: u32, k0: u32, k_end: u32) -> vec4<f32> {
    var v = vec4<f32>();
    for (var e = 0u; e < 4u; e++) {
        let rk = a_index(j, e, tid);
        let gr = row0 + rk.x;
        let gk = k0 + rk.y;
        if rk.z == 1u && gr < params.m && gk < k_end {
            v[e] = f32(lhs[a_base + gr * params.a_row_stride + gk * params.a_col_stride]);
        }
    }
    return v;
}

fn put_a(j: u32, tid: u32, v: vec4<f32>, k0: u32, k_end: u32) {
    for (var e = 0u; e < 4u; e++) {
        let rk = a_index(j, e, tid);
        if rk.z == 1u {
            a_sh[rk.y * BM4 + rk.x / 4u][rk.x % 4u] = v[e];
        }
    }
}

fn store4(base: u32, col: u32, v: vec4<f32>) {
    let n = params.n;
    if col < n {
        out[base + col] = Out(v.x);
    }
    if col + 1u < n {
        out[base + col + 1u] = Out(v.y);
    }
    if col + 2u < n {
        out[base + col + 2u] = Out(v.z);
    }
    if col + 3u < n {
        out[base + col + 3u] = Out(v.w);
    }
}

fn store_row(c_base: u32, row: u32, ca: u32, cb: u32, lo: vec4<f32>, hi: vec4<f32>) {
    if row < params.m {
        let base = c_base + row * params.n;
        store4(base, ca, lo);
        store4(base, cb, hi);
    }
}
