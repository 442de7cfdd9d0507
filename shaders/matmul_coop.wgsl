// matmul_coop: f16 matmul on tensor cores through WGSL cooperative matrices
// (wgpu's experimental `wgpu_cooperative_matrix`), f32 accumulation.
//
// Algorithm: a workgroup owns a BM x BN block of C and is WARPS_M x WARPS_N
//   subgroups; each subgroup owns a 64 x 32 block of C as 4 x 2 cooperative
//   16 x 16 f32 accumulators. Per K step of BK, all invocations copy a BM x BK
//   tile of A and a BK x BN tile of B from global memory into workgroup memory
//   with 16-byte loads (zero-filled past the edges, so the tensor-core loads
//   never leave the tile), barrier, then each subgroup loads its 4 A and 2 B
//   16 x 16 fragments per 16-wide k slice and issues 8 multiply-adds.
// Epilogue: matmul_epilogue.wgsl, applied per element on the way out. Each
//   accumulator goes through a per-subgroup 16 x 16 f32 scratch
//   in workgroup memory (a cooperative store cannot convert to f16 nor skip
//   the out-of-bounds part of an edge tile); the subgroup's lanes then write
//   the in-bounds elements as f16.
// Workgroup memory: A tile [BM][BK + 8] and B tile [BK][BN + 8] in f16 (rows
//   padded by 16 bytes so consecutive rows start in different banks), plus
//   WARPS * 256 f32 of scratch. 128 x 128 x 32: 27.5 KiB.
// Workgroup: WARPS_M * WARPS_N subgroups of SG invocations (override; the
//   dispatcher runs this kernel only on adapters with one fixed subgroup size).
//   Subgroup w owns rows (w / WARPS_N) * 64.. and columns (w % WARPS_N) * 32..
// Constraints: K and N multiples of 8 (16-byte rows; the padding layer makes
//   other shapes so); any M. f16 only. Vulkan only: naga's MSL backend has
//   8 x 8 simdgroup matrices and its HLSL backend none.
// Params: matmul_params.wgsl (appended by the registry).
// Batching: as the other matmul kernels (two batch indices with strides).

enable f16;
enable wgpu_cooperative_matrix;

// The epilogue part reads bias and residual as Elem.
alias Elem = f16;

const WARPS_M: u32 = 2u;
const WARPS_N: u32 = 4u;
const BK: u32 = 32u;

const WARPS: u32 = WARPS_M * WARPS_N;
const BM: u32 = WARPS_M * 64u;
const BN: u32 = WARPS_N * 32u;
const LDA: u32 = BK + 8u;
const LDB: u32 = BN + 8u;

override SG: u32 = 32u;

// 8 halves per vec4<u32>: one 16-byte load.
@group(0) @binding(1) var<storage, read> lhs: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read> rhs: array<vec4<u32>>;
@group(0) @binding(3) var<storage, read_write> out: array<f16>;

var<workgroup> a_sh: array<f16, BM * LDA>;
var<workgroup> b_sh: array<f16, BK * LDB>;
var<workgroup> c_sh: array<f32, WARPS * 256u>;

fn store8(dst: u32, v: vec4<u32>, is_a: bool) {
    // Two halves per word; unpack2x16float widens exactly, f16() narrows back exactly.
    let h0 = vec2<f16>(unpack2x16float(v.x));
    let h1 = vec2<f16>(unpack2x16float(v.y));
    let h2 = vec2<f16>(unpack2x16float(v.z));
    let h3 = vec2<f16>(unpack2x16float(v.w));
    if is_a {
        a_sh[dst] = h0.x;
        a_sh[dst + 1u] = h0.y;
        a_sh[dst + 2u] = h1.x;
        a_sh[dst + 3u] = h1.y;
        a_sh[dst + 4u] = h2.x;
        a_sh[dst + 5u] = h2.y;
        a_sh[dst + 6u] = h3.x;
        a_sh[dst + 7u] = h3.y;
    } else {
        b_sh[dst] = h0.x;
        b_sh[dst + 1u] = h0.y;
        b_sh[dst + 2u] = h1.x;
        b_sh[dst + 3u] = h1.y;
        b_sh[dst + 4u] = h2.x;
        b_sh[dst + 5u] = h2.y;
        b_sh[dst + 6u] = h3.x;
        b_sh[dst + 7u] = h3.y;
    }
}

// Writes one 16 x 16 accumulator tile at (row, col) of C through the
// subgroup's scratch, converting to f16 and skipping out-of-bounds elements.
fn write_tile(acc: coop_mat16x16<f32, C>, warp: u32, lane: u32, z: u32, row: u32, col: u32) {
    let c_base = z * params.m * params.n;
    let scratch = warp * 256u;
    coopStoreT(acc, &c_sh[scratch], 16u);
    workgroupBarrier();
    for (var e = lane; e < 256u; e += SG) {
        let r = row + e / 16u;
        let c = col + e % 16u;
        if r < params.m && c < params.n {
            out[c_base + r * params.n + c] = f16(epilogue(c_sh[scratch + e], z, r, c));
        }
    }
    workgroupBarrier();
}

@compute @workgroup_size(WARPS * SG, 1, 1)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
    @builtin(subgroup_id) warp: u32,
    @builtin(subgroup_invocation_id) lane: u32,
) {
    let m = params.m;
    let n = params.n;
    let k = params.k;
    let row0 = wid.y * BM;
    let col0 = wid.x * BN;
    let z = params.batch_base + wid.z;
    let z0 = z / params.batch_inner;
    let z1 = z % params.batch_inner;
    let a_base = z0 * params.a_stride0 + z1 * params.a_stride1;
    let b_base = z0 * params.b_stride0 + z1 * params.b_stride1;
    let wr = (warp / WARPS_N) * 64u;
    let wc = (warp % WARPS_N) * 32u;

    var acc00: coop_mat16x16<f32, C>;
    var acc01: coop_mat16x16<f32, C>;
    var acc10: coop_mat16x16<f32, C>;
    var acc11: coop_mat16x16<f32, C>;
    var acc20: coop_mat16x16<f32, C>;
    var acc21: coop_mat16x16<f32, C>;
    var acc30: coop_mat16x16<f32, C>;
    var acc31: coop_mat16x16<f32, C>;

    for (var k0 = 0u; k0 < k; k0 += BK) {
        // A tile: BM rows of BK halves = BM * BK / 8 loads of 16 bytes.
        for (var i = tid; i < BM * BK / 8u; i += WARPS * SG) {
            let r = i / (BK / 8u);
            let kk = (i % (BK / 8u)) * 8u;
            let gr = row0 + r;
            let gk = k0 + kk;
            var v = vec4<u32>();
            if gr < m && gk < k {
                v = lhs[(a_base + gr * k + gk) / 8u];
            }
            store8(r * LDA + kk, v, true);
        }
        // B tile: BK rows of BN halves.
        for (var i = tid; i < BK * BN / 8u; i += WARPS * SG) {
            let r = i / (BN / 8u);
            let c = (i % (BN / 8u)) * 8u;
            let gk = k0 + r;
            let gc = col0 + c;
            var v = vec4<u32>();
            if gk < k && gc < n {
                v = rhs[(b_base + gk * n + gc) / 8u];
            }
            store8(r * LDB + c, v, false);
        }
        workgroupBarrier();
        for (var kk = 0u; kk < BK; kk += 16u) {
            let a0 = coopLoadT<coop_mat16x16<f16, A>>(&a_sh[wr * LDA + kk], LDA);
            let a1 = coopLoadT<coop_mat16x16<f16, A>>(&a_sh[(wr + 16u) * LDA + kk], LDA);
            let a2 = coopLoadT<coop_mat16x16<f16, A>>(&a_sh[(wr + 32u) * LDA + kk], LDA);
            let a3 = coopLoadT<coop_mat16x16<f16, A>>(&a_sh[(wr + 48u) * LDA + kk], LDA);
            let b0 = coopLoadT<coop_mat16x16<f16, B>>(&b_sh[kk * LDB + wc], LDB);
            let b1 = coopLoadT<coop_mat16x16<f16, B>>(&b_sh[kk * LDB + wc + 16u], LDB);
            acc00 = coopMultiplyAdd(a0, b0, acc00);
            acc01 = coopMultiplyAdd(a0, b1, acc01);
            acc10 = coopMultiplyAdd(a1, b0, acc10);
            acc11 = coopMultiplyAdd(a1, b1, acc11);
            acc20 = coopMultiplyAdd(a2, b0, acc20);
            acc21 = coopMultiplyAdd(a2, b1, acc21);
            acc30 = coopMultiplyAdd(a3, b0, acc30);
            acc31 = coopMultiplyAdd(a3, b1, acc31);
        }
        workgroupBarrier();
    }

    let r = row0 + wr;
    let c = col0 + wc;
    write_tile(acc00, warp, lane, z, r, c);
    write_tile(acc01, warp, lane, z, r, c + 16u);
    write_tile(acc10, warp, lane, z, r + 16u, c);
    write_tile(acc11, warp, lane, z, r + 16u, c + 16u);
    write_tile(acc20, warp, lane, z, r + 32u, c);
    write_tile(acc21, warp, lane, z, r + 32u, c + 16u);
    write_tile(acc30, warp, lane, z, r + 48u, c);
    write_tile(acc31, warp, lane, z, r + 48u, c + 16u);
}
