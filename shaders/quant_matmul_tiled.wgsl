// quant_matmul_tiled: the register-tiled matmul (matmul_tiled_core.wgsl)
// with B a quantised weight blocked along K, decoded into the f32 B tile
// as it is staged: the GEMM for adapters without cooperative matrices.
// The weight is read packed (0.5-1 byte per element with its scales) and
// never written wider; A (x, f32 or f16) comes through matmul_tiled.wgsl.
//
// Runs: per K step of BK (a multiple of 8) the tile holds BN * BK / 8 runs
//   of 8 consecutive k of one column (quant_b_operand.wgsl); run r of the
//   step is column r % BN of k-run r / BN, so consecutive invocations
//   take consecutive columns. The fetch loads the run's code word(s) and
//   its block's scale (and zero-point) word into registers before the
//   step's FMAs (BStage: raw words); the put, after them, decodes two
//   elements per unpack2x16float, scales in f32 (exact), zeroes k from K
//   on and writes the 8 values down one column of the k-major tile.
//   Columns past N decode whatever was fetched (zeros) into columns of C
//   that are never stored.
// Bindings: 1 x, 2 and 13 the packed codes, 3 C, 10 scales, 11 zero
//   points, 12 the per-tensor scale (NVFP4); params.b_col_stride holds the
//   blocks per row of an [N, K] weight.
// Specialised (text): FORMAT (quant_decode.wgsl's code), BLK, WPB, COLS
//   (quant_b_operand.wgsl), BM, BN, BK (the core).

const FORMAT: u32 = 2u;
const BLK: u32 = 32u;
const WPB: u32 = 4u;
const COLS: u32 = 1u;
const ZS: u32 = 0u;

@group(0) @binding(2) var<storage, read> rhs_w: array<u32>;
@group(0) @binding(10) var<storage, read> scales: array<u32>;
@group(0) @binding(11) var<storage, read> zeros: array<u32>;
@group(0) @binding(12) var<storage, read> globals: array<u32>;
// The codes again, two words at a time (8-bit runs start on even words).
@group(0) @binding(13) var<storage, read> rhs_v2: array<vec2<u32>>;

// A run's raw words until its put.
alias BStage = vec4<u32>;

const RUNS: u32 = BN * (BK / 8u);

// Run tid + j * THREADS of the step at k0, or zeros past the tile, N or K.
// The block's scale and zero point are shifted to the low bits of their
// words here, where the run's block is known, so the put decodes them as
// block 0's.
fn fetch_b(j: u32, tid: u32, b_base: u32, col0: u32, k0: u32, k_end: u32) -> vec4<u32> {
    let r = tid + j * THREADS;
    let gn = col0 + r % BN;
    let gk = k0 + 8u * (r / BN);
    if r >= RUNS || gn >= params.n || gk >= k_end {
        return vec4<u32>();
    }
    let w = quant_word(gn, gk);
    let id = w / WPB;
    var v = quant_fetch(w);
    // (An f32 scale fills its word.)
    v.z = v.z >> select(select(8u * (id % 4u), 16u * (id % 2u), int_format()), 0u, f32_scales());
    v.w = v.w >> (8u * (id % 4u));
    return v;
}

fn put_b(j: u32, tid: u32, v: vec4<u32>, k0: u32, k_end: u32) {
    let r = tid + j * THREADS;
    if r >= RUNS {
        return;
    }
    let c = r % BN;
    let kk = 8u * (r / BN);
    let gk = k0 + kk;
    // Zero words (past N or K) decode to zero in every format.
    var run = quant_values(v, 0u);
    if gk + 8u > k_end {
        run = quant_k_edge(run, gk, k_end);
    }
    let slot = c / 4u;
    let lane = c % 4u;
    for (var e = 0u; e < 4u; e++) {
        b_sh[(kk + e) * BN4 + slot][lane] = run.lo[e];
        b_sh[(kk + 4u + e) * BN4 + slot][lane] = run.hi[e];
    }
}
