// matmul_tiled_vec4: register-tiled matmul with 16-byte global loads and
// stores; needs K and N to be multiples of 4 (the dispatcher checks; the
// padding layer makes other shapes so).
//
// The compute part is matmul_tiled_core.wgsl, appended by the registry. This
// prelude binds A, B, C as arrays of vec4 (so every load is one 16-byte
// transaction: the lecture's burst alignment) and supplies:
// - fetch_a / put_a: an invocation reads 4 consecutive k of one row of A as
//   one vec4 and scatters them k-major into workgroup memory.
// - fetch_b / put_b: an invocation reads 4 consecutive n of one row of B as
//   one vec4 and writes it whole.
// - store_row: each 4-wide column group of an output row is one vec4 store.
// Rows are read through the row strides in Params, which must be multiples of
// 4 (dense rows: K and N; padded tensors: their pitch), so every vec4 load is
// aligned; a vec4 that runs past K has those lanes zeroed (padding is never
// read as a value). N must be a multiple of 4 for the stores. Any M.
// Transposed operands (A stored [K, M], B stored [N, K]) are read in place
// with vec4 along their contiguous dimension: then M (for A^T) and K (for
// B^T) must be multiples of 4 instead; N always (the stores).
// Measurements: docs/perf/matmul.md#tiled-kernels.

alias Elem = f32;
// The output's element type (text-specialised when it differs from Elem).
alias Out = Elem;

@group(0) @binding(1) var<storage, read> lhs: array<vec4<Elem>>;
@group(0) @binding(2) var<storage, read> rhs: array<vec4<Elem>>;
@group(0) @binding(3) var<storage, read_write> out: array<vec4<Out>>;

// What a B fetch holds in registers until its put (the core's prefetch).
alias BStage = vec4<f32>;

// Zeroes the lanes of a 4-wide run along K from k_end on: padded rows
// (`tensor_padded`) hold arbitrary values there, never read as values.
fn mask_k(v: vec4<f32>, gk: u32, k_end: u32) -> vec4<f32> {
    if gk + 4u <= k_end {
        return v;
    }
    return select(vec4<f32>(), v, vec4<u32>(gk) + vec4<u32>(0u, 1u, 2u, 3u) < vec4<u32>(k_end));
}

// Group j of an invocation is element group i = tid + j * THREADS of the tile.
fn fetch_a(j: u32, tid: u32, a_base: u32, row0: u32, k0: u32, k_end: u32) -> vec4<f32> {
    let i = tid + j * THREADS;
    var v = vec4<f32>();
    if params.a_col_stride != 1u {
        // A stored transposed ([K, M], M a multiple of 4): a vec4 holds four
        // consecutive rows at one k, exactly one slot of the k-major tile.
        let gk = k0 + i / BM4;
        let gr = row0 + (i % BM4) * 4u;
        if i < A_QUADS && gk < k_end && gr < params.m {
            v = vec4<f32>(lhs[(a_base + gk * params.a_col_stride + gr) / 4u]);
        }
        return v;
    }
    let gr = row0 + i / (BK / 4u);
    let gk = k0 + (i % (BK / 4u)) * 4u;
    if i < A_QUADS && gr < params.m && gk < k_end {
        v = vec4<f32>(lhs[(a_base + gr * params.a_row_stride + gk) / 4u]);
    }
    return v;
}

// Puts mask what a fetch loaded past K: a fetch only issues the load, so the
// invocation does not wait for it before the FMAs (the prefetch).
fn put_a(j: u32, tid: u32, raw: vec4<f32>, k0: u32, k_end: u32) {
    let i = tid + j * THREADS;
    if i >= A_QUADS {
        return;
    }
    if params.a_col_stride != 1u {
        a_sh[(i / BM4) * BM4 + i % BM4] = raw;
        return;
    }
    // Four consecutive k of one row, scattered k-major.
    let r = i / (BK / 4u);
    let kk = (i % (BK / 4u)) * 4u;
    let v = mask_k(raw, k0 + kk, k_end);
    let slot = r / 4u;
    let lane = r % 4u;
    a_sh[kk * BM4 + slot][lane] = v.x;
    a_sh[(kk + 1u) * BM4 + slot][lane] = v.y;
    a_sh[(kk + 2u) * BM4 + slot][lane] = v.z;
    a_sh[(kk + 3u) * BM4 + slot][lane] = v.w;
}

fn fetch_b(j: u32, tid: u32, b_base: u32, col0: u32, k0: u32, k_end: u32) -> vec4<f32> {
    let i = tid + j * THREADS;
    var v = vec4<f32>();
    if params.b_col_stride != 1u {
        // B stored transposed ([N, K], K a multiple of 4): a vec4 holds four
        // consecutive k of one column, scattered down the tile.
        let gc = col0 + i / (BK / 4u);
        let gk = k0 + (i % (BK / 4u)) * 4u;
        if i < B_QUADS && gc < params.n && gk < k_end {
            v = vec4<f32>(rhs[(b_base + gc * params.b_col_stride + gk) / 4u]);
        }
        return v;
    }
    let gk = k0 + i / BN4;
    let gc = col0 + (i % BN4) * 4u;
    if i < B_QUADS && gk < k_end && gc < params.n {
        v = vec4<f32>(rhs[(b_base + gk * params.b_row_stride + gc) / 4u]);
    }
    return v;
}

fn put_b(j: u32, tid: u32, raw: vec4<f32>, k0: u32, k_end: u32) {
    let i = tid + j * THREADS;
    if i >= B_QUADS {
        return;
    }
    if params.b_col_stride != 1u {
        let c = i / (BK / 4u);
        let kq = (i % (BK / 4u)) * 4u;
        let v = mask_k(raw, k0 + kq, k_end);
        let slot = c / 4u;
        let lane = c % 4u;
        b_sh[kq * BN4 + slot][lane] = v.x;
        b_sh[(kq + 1u) * BN4 + slot][lane] = v.y;
        b_sh[(kq + 2u) * BN4 + slot][lane] = v.z;
        b_sh[(kq + 3u) * BN4 + slot][lane] = v.w;
        return;
    }
    b_sh[i] = raw;
}

fn store_row(c_base: u32, row: u32, ca: u32, cb: u32, lo: vec4<f32>, hi: vec4<f32>) {
    if row < params.m {
        let base = c_base + row * params.n;
        if ca < params.n {
            out[(base + ca) / 4u] = vec4<Out>(lo);
        }
        if cb < params.n {
            out[(base + cb) / 4u] = vec4<Out>(hi);
        }
    }
}
