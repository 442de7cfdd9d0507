// attention_bwd_coop_dq: the dQ kernel of the FlashAttention-2 backward on
// tensor cores (WGSL cooperative matrices): f16 operands and gradient, f32
// accumulation and statistics; a separate pass instead of float atomics.
//
// Algorithm: a workgroup owns BR = 16 W query rows of one (batch, query
//   head) and is W subgroups; subgroup w owns rows 16 w .. 16 w + 15, whose
//   Q and dO rows it loads once (staged through workgroup memory CH columns
//   at a time) into D16 + DV16 cooperative A matrices kept in registers. It
//   walks the blocks of BC keys its rows see (causal, window and key-length
//   bounds skip the rest); per block:
//   1. K's and V's blocks are in kv_sh as stored ([BC][LDK] halves each).
//      S = Q K^T and dP = dO V^T: the B fragments are K's and V's 16 x 16
//      blocks read column-major (load_bt_kv); the two 16 x BC f32 tiles go
//      to the subgroup's scratch s_sh.
//   2. Subgroup barrier (s_sh and p_sh rows are the subgroup's own); the
//      next block's K and V are fetched into registers. Lanes
//      (LPR = SG / 16 per query row) turn each pair into dS (p_ds_with,
//      or p_ds_stats on interior blocks; the row's statistics held in
//      registers), written as f16 to the subgroup's p_sh.
//   3. Subgroup barrier; dQ += dS K, dS as A fragments (load_a_p), K row-major B
//      fragments (load_b_kv); D16 accumulators per subgroup.
//   4. Barrier; the prefetched block is put into kv_sh; barrier.
//   End: each accumulator goes through s_sh and is written with bounds
//   checks as Elem (rows below Sq).
// Workgroup: W * SG invocations (SG as in attention_bwd_coop_dkdv.wgsl).
// Workgroup memory: kv_sh max(2 BC LDK, BR LCH) halves (LDK = max(D, Dv) +
//   8, LCH = CH + 8), s_sh W * 32 * (BC + 8) f32, p_sh W * 16 * (BC + 8)
//   f16; every workgroup variable a multiple of 16 bytes.
// Text constants (tune::attention::BackwardCoopTiles): W, BC (a multiple of
//   16), SG, D, DV, CH (checked by a const_assert).
// Grid: (ceil(Sq / BR), Hq, B).
// Named fragments and matrix operations: as attention_bwd_coop_dkdv.wgsl
//   (`// @gen` blocks declare, load_qdo, products, grads, store).

const W: u32 = 4u;
const BC: u32 = 16u;
const SG: u32 = 32u;
const D: u32 = 128u;
const DV: u32 = 128u;
const CH: u32 = 48u;
// Timing probe (WGTILE_COOP_BWD_PROBE; results meaningless when set): bit
// 0 skips the P/dS step, 1 the products (S, dP), 2 the gradient products,
// 3 the next block's loads and puts.
const PROBE: u32 = 0u;
// The register prefetch stays: fetching the next K/V block after the
// products instead (D64: 130 -> 126 registers, 4 workgroups per SM
// instead of 3) ran the dQ pass at 0.79-0.80x (H200, run 100):
// docs/perf/attention.md#backward.

const THREADS: u32 = W * SG;
const BR: u32 = W * 16u;
const D16: u32 = D / 16u;
const DV16: u32 = DV / 16u;
const BC16: u32 = BC / 16u;
const DX: u32 = max(D, DV);
const LDK: u32 = DX + 8u;
const LCH: u32 = CH + 8u;
const KV_ELEMS: u32 = max(2u * BC * LDK, BR * 24u);
const_assert CH == min(DX, (KV_ELEMS / BR - 8u) / 16u * 16u);
// Scratch rows (floats, halves; the tiles are vec4 arrays): BC + 8 puts
// the 4-column groups a quarter-warp reads in distinct banks.
const LDS: u32 = BC + 8u;
const LDP: u32 = BC + 8u;
const LPR: u32 = SG / 16u;
const CPL: u32 = BC / LPR;
// Each lane's columns in groups of 4 (c = 4 cg + 4 LPR g).
const CPL4: u32 = CPL / 4u;
const_assert CPL % 4u == 0u;
// 8-half runs per invocation for a block of K and V.
const LOADS: u32 = (BC * (D + DV) / 8u + THREADS - 1u) / THREADS;

var<workgroup> kv_sh: array<vec4<f16>, KV_ELEMS / 4u>;
// Per subgroup: S (16 rows), then dP (16 rows), BC columns.
var<workgroup> s_sh: array<vec4<f32>, W * 32u * LDS / 4u>;
// Per subgroup: dS as f16.
var<workgroup> p_sh: array<vec4<f16>, W * 16u * LDP / 4u>;

// Run i of the K (then V) block of keys j0 ..: its global load (rows past
// the key length read as zero, so no stale row reaches dQ).
fn fetch_kv(i: u32, j0: u32, keys: u32, k_base: u32, v_base: u32) -> vec4<u32> {
    if i < BC * D / 8u {
        return run_fetch(OP_K, i, D, j0, keys, k_base, params.k_sr, 0u, D);
    }
    return run_fetch(OP_V, i - BC * D / 8u, DV, j0, keys, v_base, params.v_sr, 0u, DV);
}

fn put_kv(i: u32, x: vec4<u32>) {
    if i < BC * D / 8u {
        run_put(i, D, 0u, LDK, x);
    } else if i < BC * (D + DV) / 8u {
        run_put(i - BC * D / 8u, DV, BC * LDK, LDK, x);
    }
}

@compute @workgroup_size(THREADS, 1, 1)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
    @builtin(subgroup_id) sg_id: u32,
    @builtin(subgroup_invocation_id) sg_lane: u32,
) {
    let sub = subgroup_of(tid, sg_id);
    let lane = lane_of(tid, sg_lane);
    let b = wid.z;
    let h = wid.y;
    let rows = params.sq;
    let q_blocks = (rows + BR - 1u) / BR;
    // Heavy (late, causal) query blocks first: better tail balance.
    let i0 = (q_blocks - 1u - wid.x) * BR;
    let hk = h / params.group;
    let q_base = b * params.q_sb + h * params.q_sh;
    let o_base = b * params.o_sb + h * params.o_sh;
    let k_base = b * params.k_sb + hk * params.k_sh;
    let v_base = b * params.v_sb + hk * params.v_sh;
    let keys = key_count(b);
    let i_last = i32(min(i0 + BR, rows)) - 1;
    let j_begin = max(0, i32(i0) + first_off(keys));
    let j_end = min(i32(keys), i_last + last_off(keys) + 1);
    let first = u32(j_begin) / BC * BC;
    let plain = params.mask_kind == 0u && params.softcap <= 0.0;
    let sr = lane / LPR;
    let cg = lane % LPR;
    let row = i0 + sub * 16u + sr;
    // This lane's row's statistics (zeros past Sq, where p_ds_with gives 0).
    var st = vec2<f32>();
    if row < rows {
        st = row_stats(b, h, row);
    }
    let s_base = sub * 32u * LDS;
    let p_base = sub * 16u * LDP;

    var pre: array<vec4<u32>, LOADS>;
    var zc: MatC;

    // Q's and dO's fragments (registers) and the dQ accumulators.
    // @gen declare
    // @gen load_qdo

    if i32(first) < j_end {
        for (var n = 0u; n < LOADS; n++) {
            pre[n] = fetch_kv(tid + n * THREADS, first, keys, k_base, v_base);
        }
        for (var n = 0u; n < LOADS; n++) {
            put_kv(tid + n * THREADS, pre[n]);
        }
    }
    workgroupBarrier();
    for (var j0 = first; i32(j0) < j_end; j0 += BC) {
        // 1. S = Q K^T and dP = dO V^T into the subgroup's scratch.
        if (PROBE & 2u) == 0u {
            // @gen products
        }
        sub_barrier();

        // 2. Next block's loads in flight; dS as f16.
        let more = i32(j0 + BC) < j_end && (PROBE & 8u) == 0u;
        if more {
            for (var n = 0u; n < LOADS; n++) {
                pre[n] = fetch_kv(tid + n * THREADS, j0 + BC, keys, k_base, v_base);
            }
        }
        let interior = plain && i0 + BR <= rows && j0 + BC <= keys
            && i32(j0) >= i32(i0 + BR - 1u) + first_off(keys)
            && i32(j0 + BC - 1u) <= i32(i0) + last_off(keys);
        for (var g = 0u; g < CPL4 && (PROBE & 1u) == 0u; g++) {
            let c = cg * 4u + g * 4u * LPR;
            let dot = s_sh[(s_base + sr * LDS + c) / 4u];
            let dp = s_sh[(s_base + (16u + sr) * LDS + c) / 4u];
            var ds: vec4<f32>;
            if interior {
                // p_ds_stats on four columns.
                let p = exp2(dot * params.scale_log2 - st.x);
                ds = p * (dp - st.y) * params.scale;
            } else {
                ds = vec4<f32>(
                    p_ds_with(b, h, row, j0 + c, keys, dot.x, dp.x, st).y,
                    p_ds_with(b, h, row, j0 + c + 1u, keys, dot.y, dp.y, st).y,
                    p_ds_with(b, h, row, j0 + c + 2u, keys, dot.z, dp.z, st).y,
                    p_ds_with(b, h, row, j0 + c + 3u, keys, dot.w, dp.w, st).y,
                );
            }
            p_sh[(p_base + sr * LDP + c) / 4u] = vec4<f16>(ds);
        }
        sub_barrier();

        // 3. dQ += dS K.
        if (PROBE & 4u) == 0u {
            // @gen grads
        }
        workgroupBarrier();

        // 4. The next block into kv_sh.
        if more {
            for (var n = 0u; n < LOADS; n++) {
                put_kv(tid + n * THREADS, pre[n]);
            }
        }
        workgroupBarrier();
    }

    // dQ through the scratch, rows below Sq.
    let row0 = i0 + sub * 16u;
    // @gen store
}
