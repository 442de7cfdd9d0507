// matmul_tiled_b: the B side of matmul_tiled (scalar global loads, any
// shape): consecutive invocations read consecutive n of one row of B (or
// consecutive k of a transposed B), bounds-checked, into the k-major B tile.
// Registry part after matmul_tiled.wgsl, before the core.

@group(0) @binding(2) var<storage, read> rhs: array<Elem>;

// What a B fetch holds in registers until its put (the core's prefetch).
alias BStage = vec4<f32>;

// (k, column, 1 when inside the tile) of element e of group j.
fn b_index(j: u32, e: u32, tid: u32) -> vec3<u32> {
    // Row-major B: n fastest; transposed B: k fastest.
    let i = tid + (4u * j + e) * THREADS;
    let inside = u32(i < BK * BN);
    if params.b_col_stride == 1u {
        return vec3<u32>(i / BN, i % BN, inside);
    }
    return vec3<u32>(i % BK, i / BK, inside);
}

fn fetch_b(j: u32, tid: u32, b_base: u32, col0: u32, k0: u32, k_end: u32) -> vec4<f32> {
    var v = vec4<f32>();
    for (var e = 0u; e < 4u; e++) {
        let kc = b_index(j, e, tid);
        let gk = k0 + kc.x;
        let gc = col0 + kc.y;
        if kc.z == 1u && gk < k_end && gc < params.n {
            v[e] = f32(rhs[b_base + gk * params.b_row_stride + gc * params.b_col_stride]);
        }
    }
    return v;
}

fn put_b(j: u32, tid: u32, v: vec4<f32>, k0: u32, k_end: u32) {
    for (var e = 0u; e < 4u; e++) {
        let kc = b_index(j, e, tid);
        if kc.z == 1u {
            b_sh[kc.x * BN4 + kc.y / 4u][kc.y % 4u] = v[e];
        }
    }
}

