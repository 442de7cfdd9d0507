// matmul_tiled: C[z] = A[z] x B[z] with workgroup-memory tiles and a register
// tile per invocation (the lecture's tiling trick).
//
// Algorithm: a workgroup owns a BM x BN block of C. It walks K in steps of BK:
//   all invocations cooperatively copy a BM x BK tile of A and a BK x BN tile of
//   B into workgroup memory (zero-filled past the matrix edges), barrier, then
//   each invocation accumulates its TM x TN outputs from registers: per k it
//   loads TM values of A and TN of B and does TM * TN fmas. Each global element
//   is read N / BN (A) or M / BM (B) times instead of N or M times.
// Thread-to-output map: invocation (tx, ty) owns rows ty + i * WG_Y and columns
//   tx + j * WG_X (strided, not blocked), so neighbouring invocations read
//   neighbouring workgroup-memory words (no bank conflicts) and store
//   neighbouring C elements (coalesced).
// Global loads: A's tile is read along k (row-major A: consecutive k are
//   consecutive addresses), B's along n; both coalesced.
// Workgroup: WG_X = BN / TN by WG_Y = BM / TM invocations.
// Tile parameters (text-specialised consts, since they size register arrays):
//   BM, BN, BK, TM, TN; defaults 64 x 64 x 16 with 4 x 4 per invocation
//   (256 invocations, 8 KiB of workgroup memory).
//   Workgroup memory = (BM + BN) * BK * 4 bytes.
// Types: Elem is f32 or f16 (text-specialised); tiles and accumulation are f32.
// Batching: as matmul_naive (z splits into two batch indices with strides).
// Limits: any M, N, K >= 1; every global access is bounds-checked (the
//   interior/edge split comes with the matmul engine).

alias Elem = f32;

const BM: u32 = 64u;
const BN: u32 = 64u;
const BK: u32 = 16u;
const TM: u32 = 4u;
const TN: u32 = 4u;

const WG_X: u32 = BN / TN;
const WG_Y: u32 = BM / TM;
const THREADS: u32 = WG_X * WG_Y;

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
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> lhs: array<Elem>;
@group(0) @binding(2) var<storage, read> rhs: array<Elem>;
@group(0) @binding(3) var<storage, read_write> out: array<Elem>;

// A tile stored k-major ([BK][BM]) so the inner loop reads a column of A as
// consecutive words; B tile stored [BK][BN].
var<workgroup> a_tile: array<f32, BK * BM>;
var<workgroup> b_tile: array<f32, BK * BN>;

@compute @workgroup_size(WG_X, WG_Y, 1)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_id) lid: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
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

    var acc: array<f32, TM * TN>;
    var a_reg: array<f32, TM>;
    var b_reg: array<f32, TN>;

    for (var k0 = 0u; k0 < k; k0 += BK) {
        for (var i = tid; i < BM * BK; i += THREADS) {
            let r = i / BK;
            let kk = i % BK;
            let gr = row0 + r;
            let gk = k0 + kk;
            var v = 0.0;
            if gr < m && gk < k {
                v = f32(lhs[a_base + gr * k + gk]);
            }
            a_tile[kk * BM + r] = v;
        }
        for (var i = tid; i < BK * BN; i += THREADS) {
            let kk = i / BN;
            let c = i % BN;
            let gk = k0 + kk;
            let gc = col0 + c;
            var v = 0.0;
            if gk < k && gc < n {
                v = f32(rhs[b_base + gk * n + gc]);
            }
            b_tile[kk * BN + c] = v;
        }
        workgroupBarrier();

        for (var kk = 0u; kk < BK; kk++) {
            for (var i = 0u; i < TM; i++) {
                a_reg[i] = a_tile[kk * BM + lid.y + i * WG_Y];
            }
            for (var j = 0u; j < TN; j++) {
                b_reg[j] = b_tile[kk * BN + lid.x + j * WG_X];
            }
            for (var i = 0u; i < TM; i++) {
                for (var j = 0u; j < TN; j++) {
                    acc[i * TN + j] = fma(a_reg[i], b_reg[j], acc[i * TN + j]);
                }
            }
        }
        workgroupBarrier();
    }

    let c_base = z * m * n;
    for (var i = 0u; i < TM; i++) {
        let r = row0 + lid.y + i * WG_Y;
        if r < m {
            for (var j = 0u; j < TN; j++) {
                let c = col0 + lid.x + j * WG_X;
                if c < n {
                    out[c_base + r * n + c] = Elem(acc[i * TN + j]);
                }
            }
        }
    }
}
