//! The matmul dispatcher on fake adapters: limits, wave arithmetic, tensor
//! cores, transposed operands, CPU adapters.

use super::*;

// ---- the matmul dispatcher: filtering by limits and wave arithmetic ----

#[test]
fn tiny_problems_use_the_naive_kernel() {
    let p = gpu();
    let c = tune::choose_matmul(&p, DType::F32, 8, 8, 8, 1);
    assert!(
        matches!(c.kernel, MatmulKernel::Naive { wg_x: 16, wg_y: 16 }),
        "{c}"
    );
}

fn tiled(i: usize, vec4: bool) -> MatmulKernel {
    MatmulKernel::Tiled {
        tile: TILE_CONFIGS[i],
        vec4,
    }
}

#[test]
fn large_problems_take_the_largest_tile_that_fills_a_wave() {
    let p = gpu();
    // 4096^2 in 128x128 tiles: 1024 workgroups = 7.76 waves of 132.
    let c = tune::choose_matmul(&p, DType::F32, 4096, 4096, 4096, 1);
    assert_eq!(c.kernel, tiled(0, true), "{c}");
    assert_eq!(c.workgroups, 1024);
    assert!((c.waves - 1024.0 / 132.0).abs() < 1e-9);
    // 1024^2: 64 tiles of 128x128 are under 0.7 of a wave; 128 of 64x128
    // reach 0.97 of one (WAVE_FILL = 0.7).
    let c = tune::choose_matmul(&p, DType::F32, 1024, 1024, 1024, 1);
    assert_eq!(c.kernel, tiled(1, true), "{c}");
    // 768^2: 36 tiles of 128x128 and 72 of 64x128 fall short; 144 of 64x64.
    let c = tune::choose_matmul(&p, DType::F32, 768, 768, 768, 1);
    assert_eq!(c.kernel, tiled(2, true), "{c}");
    // 512^2: no tile shape fills a wave: the smallest, for the most workgroups.
    let c = tune::choose_matmul(&p, DType::F32, 512, 512, 512, 1);
    assert_eq!(c.kernel, tiled(2, true), "{c}");
    assert!(c.reason.contains("no tile shape fills"), "{c}");
    // Batching multiplies the grid: 4 x 512^2 = 64 tiles of 128x128 (short),
    // 128 of 64x128 (0.97 of a wave).
    let c = tune::choose_matmul(&p, DType::F32, 512, 512, 512, 4);
    assert_eq!(c.kernel, tiled(1, true), "{c}");
    // Unaligned N or K: the scalar-load variant.
    let c = tune::choose_matmul(&p, DType::F32, 4096, 4097, 4096, 1);
    assert_eq!(c.kernel, tiled(0, false), "{c}");
    let c = tune::choose_matmul(&p, DType::F32, 4096, 4096, 4098, 1);
    assert_eq!(c.kernel, tiled(0, false), "{c}");
}

#[test]
fn lecture_example_wave_counts() {
    // The lecture: 256x128 tiles on 108 SMs, N = 1792 -> 98 tiles (one wave),
    // 1793 -> 120 tiles (a full wave plus 12). Our arithmetic on our own tiles:
    let t = tiled(0, true);
    assert_eq!(tune::workgroup_count(t, 1792, 1792, 1), 14 * 14);
    assert_eq!(tune::workgroup_count(t, 1793, 1793, 1), 15 * 15);
}

#[test]
fn limits_filter_the_candidates() {
    // 128 invocations: the 256-invocation 128x128 tile is out, 64x128 (128) fits.
    let p = gpu().with_units(1).with_invocations(128);
    let c = tune::choose_matmul(&p, DType::F32, 2048, 2048, 2048, 1);
    assert_eq!(c.kernel, tiled(1, true), "{c}");
    // 32 invocations: no tile fits and the naive kernel drops to 4x4.
    let p = gpu().with_invocations(32);
    let c = tune::choose_matmul(&p, DType::F32, 2048, 2048, 2048, 1);
    assert_eq!(c.kernel, MatmulKernel::Naive { wg_x: 4, wg_y: 4 }, "{c}");
    assert!(c.reason.contains("no tile shape fits"));
    // 6 KiB of workgroup memory: only 64x128x8 (6 KiB) fits.
    let p = gpu().with_units(1).with_workgroup_storage(6 << 10);
    let c = tune::choose_matmul(&p, DType::F32, 2048, 2048, 2048, 1);
    assert_eq!(c.kernel, tiled(1, true), "{c}");
    for t in TILE_CONFIGS {
        assert_eq!(t.fits(&p), t.workgroup_bytes() <= 6 << 10);
    }
}

#[test]
fn compute_unit_table() {
    use wgpu::DeviceType::{Cpu, DiscreteGpu};
    assert_eq!(
        tune::estimate_compute_units("NVIDIA H200", DiscreteGpu, 0x10de),
        132
    );
    assert_eq!(
        tune::estimate_compute_units("NVIDIA A100-SXM4-80GB", DiscreteGpu, 0x10de),
        108
    );
    assert_eq!(
        tune::estimate_compute_units("Some New GPU", DiscreteGpu, 0x10de),
        64
    );
    let cpu = tune::estimate_compute_units("llvmpipe (LLVM 15.0.6, 256 bits)", Cpu, 0x10005);
    assert!(cpu >= 1);
}

/// [`gpu`] with the H200's tensor cores.
pub(super) fn h200_like() -> AdapterProfile {
    gpu().with_tensor_cores()
}

#[test]
fn f16_goes_to_tensor_cores_when_the_adapter_has_them() {
    let p = h200_like();
    let coop = |m: usize| {
        let c = tune::choose_matmul(&p, DType::F16, m, m, m, 1);
        match c.kernel {
            MatmulKernel::Coop {
                warps_m,
                warps_n,
                frags_n,
                subgroup: 32,
                ..
            } => (warps_m, warps_n, frags_n),
            other => panic!("{m}: {other}"),
        }
    };
    // 256x128 blocks (4x4 subgroups of 64x32) while they fill a wave: 512
    // workgroups at 4096, 98 at 1792 (0.74 of 132 units).
    for m in [4096, 1792] {
        assert_eq!(coop(m), (4, 4, 2), "{m}");
    }
    // Then 128x128 (2x2 subgroups of 64x64): 144 workgroups at 1536, 100 at 1280.
    for m in [1536, 1280] {
        assert_eq!(coop(m), (2, 2, 4), "{m}");
    }
    // 1024: 64 such workgroups are under 0.7 of 132 units; 128x64 blocks give 128.
    assert_eq!(coop(1024), (2, 2, 2));
    // f32 never goes there silently.
    let c = tune::choose_matmul(&p, DType::F32, 4096, 4096, 4096, 1);
    assert!(matches!(c.kernel, MatmulKernel::Tiled { .. }), "{c}");
    // K or N not a multiple of 8: the coop kernel still (its word loads).
    let c = tune::choose_matmul(&p, DType::F16, 4096, 4100, 4097, 1);
    assert!(matches!(c.kernel, MatmulKernel::Coop { .. }), "{c}");
    // Transposed f16 operands: the strided CUDA-core kernels.
    let c = tune::choose_matmul_strided(&p, 4096, 4096, 4096, 1, (false, true));
    assert!(matches!(c.kernel, MatmulKernel::Tiled { .. }), "{c}");
    // No cooperative matrix (lavapipe), or only f16 -> f16 configurations, or a
    // variable subgroup size: no coop kernel.
    let mut q = h200_like();
    q.cooperative_matrix = false;
    assert!(!tune::has_coop_f16(&q));
    let mut q = h200_like();
    q.coop_configs[0].cr_type = "f16";
    assert!(!tune::has_coop_f16(&q));
    let q = h200_like().with_subgroups(16, 32);
    assert!(!tune::has_coop_f16(&q));
    assert!(matches!(
        tune::choose_matmul(&q, DType::F16, 4096, 4096, 4096, 1).kernel,
        MatmulKernel::Tiled { .. }
    ));
}

/// The f32 split kernel's dispatch rule: from `COOP_SPLIT_MIN_MACS`
/// multiply-adds with K >= `COOP_SPLIT_MIN_K` (any size when forced), the
/// first layout whose grid fills a wave, nothing without tensor cores.
#[test]
fn f32_split_layouts_follow_the_size_threshold_and_the_time_model() {
    let p = h200_like();
    let layout = |(m, n, k): (usize, usize, usize), forced: bool| {
        tune::coop_split_for_shape(&p, (m, n, k), 1, forced).map(|kernel| match kernel {
            MatmulKernel::Coop {
                warps_m,
                warps_n,
                bk,
                frags_n,
                split: true,
                ..
            } => (warps_m, warps_n, bk, frags_n),
            other => panic!("{m}x{n}x{k}: {other}"),
        })
    };
    // By the time model (whole rounds of one workgroup per unit at each
    // layout's measured speed): 4096 and 2048 on 128x256 blocks (4 rounds /
    // 1 round); 1024 on 128x64 (one round of 128 blocks, each a quarter of
    // a 128x256 one).
    assert_eq!(layout((4096, 4096, 4096), false), Some((2, 4, 16, 4)));
    assert_eq!(layout((2048, 2048, 2048), false), Some((2, 4, 16, 4)));
    assert_eq!(layout((1024, 1024, 1024), false), Some((2, 2, 32, 2)));
    // Below the threshold or with a short K: the f32 CUDA-core kernels,
    // unless forced (then the smallest layout when none fills a wave).
    assert_eq!(layout((1000, 1024, 1024), false), None);
    assert_eq!(layout((1 << 15, 1 << 15, 32), false), None);
    assert_eq!(layout((100, 130, 70), true), Some((2, 2, 32, 2)));
    // No tensor cores: never.
    let plain = gpu();
    assert!(tune::coop_split_for_shape(&plain, (4096, 4096, 4096), 1, true).is_none());
}

#[test]
fn transposed_operands_get_kernels_that_read_them_in_place() {
    let p = h200_like();
    let shapes = [
        (4096, 4096, 4096),
        (4095, 4096, 4096),
        (1, 4096, 4096),
        (4096, 1, 4096),
        (8, 8, 8),
    ];
    for layout in [(true, false), (false, true), (true, true)] {
        for (m, n, k) in shapes {
            let c = tune::choose_matmul_strided(&p, m, n, k, 1, layout);
            assert!(
                c.kernel
                    .accepts_layout(DType::F32, m, n, k, layout.0, layout.1),
                "{layout:?} {m}x{n}x{k}: {c}"
            );
            assert!(!matches!(
                c.kernel,
                MatmulKernel::Gemv | MatmulKernel::Coop { .. }
            ));
        }
    }
    // Aligned: vec4 loads along each operand's contiguous dimension.
    let c = tune::choose_matmul_strided(&p, 4096, 4096, 4096, 1, (true, true));
    assert!(
        matches!(c.kernel, MatmulKernel::Tiled { vec4: true, .. }),
        "{c}"
    );
    // A^T with M = 4095: its stored rows are not 16-byte aligned.
    let c = tune::choose_matmul_strided(&p, 4095, 4096, 4096, 1, (true, false));
    assert!(
        matches!(c.kernel, MatmulKernel::Tiled { vec4: false, .. }),
        "{c}"
    );
}

/// lavapipe-like: a CPU adapter with subgroups of 8 and 32 KiB of workgroup
/// storage.
fn lavapipe_like() -> AdapterProfile {
    let mut p = gpu()
        .with_units(2)
        .with_invocations(256)
        .with_workgroup_storage(32 << 10)
        .with_subgroups(8, 8);
    p.device_type = wgpu::DeviceType::Cpu;
    p.shader_f16 = false;
    p
}

#[test]
fn cpu_adapters_with_subgroups_of_8_take_the_broadcast_kernel() {
    let p = lavapipe_like();
    let c = tune::choose_matmul(&p, DType::F32, 512, 512, 512, 1);
    assert_eq!(c.kernel, MatmulKernel::Broadcast { vec4: true }, "{c}");
    // N not a multiple of 4: strided scalar loads.
    let c = tune::choose_matmul(&p, DType::F32, 512, 513, 512, 1);
    assert_eq!(c.kernel, MatmulKernel::Broadcast { vec4: false }, "{c}");
    // Transposed operands: read in place by the scalar variant only.
    for layout in [(true, false), (false, true), (true, true)] {
        let c = tune::choose_matmul_strided(&p, 512, 512, 512, 1, layout);
        assert_eq!(c.kernel, MatmulKernel::Broadcast { vec4: false }, "{c}");
        assert!(c.kernel.reads_strided());
        assert!(!MatmulKernel::Broadcast { vec4: true }.accepts_layout(
            DType::F32,
            512,
            512,
            512,
            layout.0,
            layout.1
        ));
    }
    // Below BROADCAST_MIN_MACS (slow to compile): the 16x16 register tile.
    let c = tune::choose_matmul(&p, DType::F32, 256, 256, 16, 1);
    assert!(
        matches!(c.kernel, MatmulKernel::Tiled { tile, .. } if tile.reg == 16),
        "{c}"
    );
    // Tiny problems stay naive, matrix-vector shapes go to the GEMV kernel.
    let c = tune::choose_matmul(&p, DType::F32, 8, 8, 8, 1);
    assert!(matches!(c.kernel, MatmulKernel::Naive { .. }), "{c}");
    let c = tune::choose_matmul(&p, DType::F32, 1, 512, 512, 1);
    assert_eq!(c.kernel, MatmulKernel::Gemv, "{c}");
    assert!(
        tune::matmul_candidates(&p, DType::F32, 512, 512, 512, 1)
            .contains(&MatmulKernel::Broadcast { vec4: false })
    );
    // Other subgroup sizes (SwiftShader 4, llvmpipe on AVX-512 16, a range)
    // or no subgroups: the 16x16 register tile.
    for (lo, hi, subgroups) in [(4, 4, true), (16, 16, true), (8, 16, true), (8, 8, false)] {
        let mut q = lavapipe_like().with_subgroups(lo, hi);
        q.subgroups = subgroups;
        let c = tune::choose_matmul(&q, DType::F32, 512, 512, 512, 1);
        assert!(
            matches!(c.kernel, MatmulKernel::Tiled { tile, .. } if tile.reg == 16),
            "{lo}..{hi} {subgroups}: {c}"
        );
        assert!(!MatmulKernel::Broadcast { vec4: true }.fits(&q));
    }
    // A GPU with subgroups of 8 never gets it, from the heuristic or as an
    // autotuning candidate.
    let g = gpu().with_subgroups(8, 8);
    let c = tune::choose_matmul(&g, DType::F32, 4096, 4096, 4096, 1);
    assert!(matches!(c.kernel, MatmulKernel::Tiled { .. }), "{c}");
    assert!(
        !tune::matmul_candidates(&g, DType::F32, 4096, 4096, 4096, 1)
            .iter()
            .any(|k| matches!(k, MatmulKernel::Broadcast { .. }))
    );
}

#[test]
fn every_shipped_configuration_is_well_formed_and_zeros_are_not() {
    use crate::tune::attention::{
        DECODE_TILES, FLASH_CANDIDATES, FlashTiles, SWEEP_TILES, TEST_TILES,
    };
    use crate::tune::{CPU_TILE_CONFIGS, TileConfig};
    let p = h200_like();
    for tile in TILE_CONFIGS.into_iter().chain(CPU_TILE_CONFIGS) {
        for vec4 in [false, true] {
            assert_eq!(MatmulKernel::Tiled { tile, vec4 }.invalid_reason(), None, "{tile}");
            let split = MatmulKernel::SplitK { tile, vec4, splits: 2 };
            assert_eq!(split.invalid_reason(), None, "{split}");
        }
    }
    for c in COOP_CONFIGS {
        let k = MatmulKernel::coop_for(&p, c).expect("the H200 runs every coop layout");
        assert_eq!(k.invalid_reason(), None, "{k}");
    }
    for t in FLASH_CANDIDATES.into_iter().chain(SWEEP_TILES).chain(TEST_TILES).chain([DECODE_TILES]) {
        assert_eq!(t.invalid_reason(), None, "{t}");
    }
    let zero = TileConfig { bm: 0, bn: 0, bk: 0, reg: 8 };
    for bad in [
        MatmulKernel::Naive { wg_x: 0, wg_y: 16 },
        MatmulKernel::Tiled { tile: zero, vec4: false },
        MatmulKernel::Tiled { tile: TileConfig { reg: 0, ..TILE_CONFIGS[0] }, vec4: false },
        MatmulKernel::SplitK { tile: TILE_CONFIGS[0], vec4: false, splits: 0 },
        MatmulKernel::SplitK { tile: TILE_CONFIGS[0], vec4: false, splits: 1 },
    ] {
        assert!(bad.invalid_reason().is_some(), "{bad:?}");
    }
    let zeros = FlashTiles { br: 0, tr: 0, nc: 0, td: 0, dk: 0, vk: 0 };
    assert!(zeros.invalid_reason().is_some());
}

#[test]
fn quantised_gemm_of_f32_x_follows_the_f32_engine() {
    // Without tensor cores the f32 dispatcher runs large shapes on its
    // tiled kernel: so does the quantised GEMM (the weight decoded in its
    // tiles).
    let plain = gpu();
    assert!(tune::quant::runs_tiled(&plain, DType::F32, (4096, 4096, 4096)));
    // With them, f32 from the split's threshold runs as f16 halves: the
    // weight is dequantised for that kernel, not decoded into slower tiles.
    let h = h200_like();
    assert!(tune::coop_split_for_shape(&h, (4096, 4096, 4096), 1, false).is_some());
    assert!(!tune::quant::runs_tiled(&h, DType::F32, (4096, 4096, 4096)));
    // Below the threshold the f32 dispatcher's tiled kernel, as without.
    let small = (64, 96, 128);
    assert!(tune::coop_split_for_shape(&h, small, 1, false).is_none());
    assert_eq!(
        tune::quant::runs_tiled(&h, DType::F32, small),
        tune::quant::runs_tiled(&plain, DType::F32, small)
    );
    // Few rows of x: the GEMVs.
    assert!(!tune::quant::runs_tiled(&plain, DType::F32, (8, 4096, 4096)));
}
