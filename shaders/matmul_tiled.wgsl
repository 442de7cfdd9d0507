// matmul_tiled: register-tiled matmul with scalar global loads; any M, N, K.
//
// The compute part (tiles, register tile, workgroup shape) is in
// matmul_tiled_core.wgsl, which the registry appends to this file; this
// prelude holds the bindings and the global-memory side:
// - load_a_tile: consecutive invocations read consecutive k of one row of A
//   (row-major A: consecutive addresses), scattered k-major into workgroup memory.
// - load_b_tile: consecutive invocations read consecutive n of one row of B.
// - store_row: one output row's two 4-wide column groups, element by element.
// Every global access is bounds-checked, so edges need no special case; the
// vec4 variant (matmul_tiled_vec4) is what aligned shapes should use.
// Operands may be transposed (A stored [K, M], B stored [N, K]): addresses go
// through the row and column strides in Params, and each load walks the
// operand's contiguous dimension so it stays coalesced.

alias Elem = f32;

@group(0) @binding(1) var<storage, read> lhs: array<Elem>;
@group(0) @binding(2) var<storage, read> rhs: array<Elem>;
@group(0) @binding(3) var<storage, read_write> out: array<Elem>;

fn load_a_tile(a_base: u32, row0: u32, k0: u32, k_end: u32, tid: u32) {
    // Consecutive invocations walk the operand's contiguous dimension: k for
    // a row-major A, m for a transposed one (uniform branch).
    let k_fastest = params.a_col_stride == 1u;
    for (var i = tid; i < BM * BK; i += THREADS) {
        var r = i / BK;
        var kk = i % BK;
        if !k_fastest {
            r = i % BM;
            kk = i / BM;
        }
        let gr = row0 + r;
        let gk = k0 + kk;
        var v = 0.0;
        if gr < params.m && gk < k_end {
            v = f32(lhs[a_base + gr * params.a_row_stride + gk * params.a_col_stride]);
        }
        a_sh[kk * BM4 + r / 4u][r % 4u] = v;
    }
}

fn load_b_tile(b_base: u32, col0: u32, k0: u32, k_end: u32, tid: u32) {
    // n fastest for a row-major B, k fastest for a transposed one.
    let n_fastest = params.b_col_stride == 1u;
    for (var i = tid; i < BK * BN; i += THREADS) {
        var kk = i / BN;
        var c = i % BN;
        if !n_fastest {
            kk = i % BK;
            c = i / BK;
        }
        let gk = k0 + kk;
        let gc = col0 + c;
        var v = 0.0;
        if gk < k_end && gc < params.n {
            v = f32(rhs[b_base + gk * params.b_row_stride + gc * params.b_col_stride]);
        }
        b_sh[kk * BN4 + c / 4u][c % 4u] = v;
    }
}

fn store4(base: u32, col: u32, v: vec4<f32>) {
    let n = params.n;
    if col < n {
        out[base + col] = Elem(v.x);
    }
    if col + 1u < n {
        out[base + col + 1u] = Elem(v.y);
    }
    if col + 2u < n {
        out[base + col + 2u] = Elem(v.z);
    }
    if col + 3u < n {
        out[base + col + 3u] = Elem(v.w);
    }
}

fn store_row(c_base: u32, row: u32, ca: u32, cb: u32, lo: vec4<f32>, hi: vec4<f32>) {
    if row < params.m {
        let base = c_base + row * params.n;
        store4(base, ca, lo);
        store4(base, cb, hi);
    }
}
