//! The dispatcher's decisions on fake adapter profiles, no GPU needed: the
//! matmul kernels and tiles (filtering by limits, wave arithmetic, tensor
//! cores, transposed operands, CPU adapters), the padding layer's cost model,
//! and the autotuner and its cache (shape buckets, keys, the JSON file, the
//! decision rules, with a fake measuring closure).

use std::cell::Cell;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, Once};

use crate::tune::autotune::{
    AutotuneMode, Autotuner, DecisionSource, FAST_CANDIDATES, TUNE_MIN_FLOPS,
};
use crate::tune::cache::{
    CACHE_FORMAT_VERSION, DimBucket, Entry, Measurement, ShapeBucket, TuneCache, TuneKey,
    candidates_checksum,
};
use crate::tune::{self, COOP_CONFIGS, MatmulKernel, TILE_CONFIGS};
use crate::{AdapterProfile, DType, Error, Padding};

/// A discrete GPU: 132 compute units, 1024 invocations, 48 KiB of workgroup
/// memory, subgroups of 32, f16, no cooperative matrix.
fn gpu() -> AdapterProfile {
    AdapterProfile::fake_gpu().named("synthetic")
}

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
fn h200_like() -> AdapterProfile {
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

// ---- the padding layer's decisions ----

/// A CPU adapter of 2 cores with [`gpu`]'s other limits.
fn cpu_adapter() -> AdapterProfile {
    let mut p = gpu().with_units(2);
    p.device_type = wgpu::DeviceType::Cpu;
    p
}

#[test]
fn cost_model_decisions() {
    use crate::tune::pad::choose;
    let gpu = h200_like();
    // Aligned shapes, tiny shapes and the Never policy: no padding.
    assert_eq!(
        choose(&gpu, DType::F32, 4096, 4096, 4096, 1, Padding::Auto),
        None
    );
    assert_eq!(choose(&gpu, DType::F32, 7, 13, 31, 1, Padding::Auto), None);
    assert_eq!(
        choose(&gpu, DType::F32, 4097, 4097, 4097, 1, Padding::Never),
        None
    );
    // 4097 in f32: the vec4 kernel on 4100 is no faster than the scalar
    // loads on 4097 (H200, with register prefetch): Auto copies nothing, but
    // takes the last row apart (1089 workgroups of 128 x 128 are 8.25 waves,
    // 1056 are 8); Always pads (for measuring).
    let p = choose(&gpu, DType::F32, 4097, 4097, 4097, 1, Padding::Auto).unwrap();
    assert!(!p.copies && p.fringe_rows == 1, "{p}");
    assert_eq!((p.k, p.n), (4097, 4097));
    assert!(p.to_string().starts_with("no copies"), "{p}");
    assert!(
        matches!(p.kernel, MatmulKernel::Tiled { .. }),
        "{p}"
    );
    // 1793: 225 workgroups (1.70 waves) and 210 without the last row (1.59):
    // no wave saved, nothing to do.
    assert_eq!(
        choose(&gpu, DType::F32, 1793, 1793, 1793, 1, Padding::Auto),
        None
    );
    let p = choose(&gpu, DType::F32, 4097, 4097, 4097, 1, Padding::Always).unwrap();
    assert_eq!((p.k, p.n), (4100, 4100));
    assert!(
        matches!(p.kernel, MatmulKernel::Tiled { vec4: true, .. }),
        "{p}"
    );
    // 1793 and 1028 in f16 on tensor cores: the coop kernel's word-load
    // variant reads any row-major layout, but at about 0.6x of its 16-byte
    // loads (H200, run 15), so copying the unaligned operands into rows of a
    // multiple of 8 halves pays (rows padded to 32 halves: 64 bytes)...
    let p = choose(&gpu, DType::F16, 1793, 1793, 1793, 1, Padding::Auto).unwrap();
    assert_eq!((p.k, p.n), (1824, 1824));
    assert!(matches!(p.kernel, MatmulKernel::Coop { .. }), "{p}");
    assert!(!p.crop, "{p}");
    let p = choose(&gpu, DType::F16, 1024, 1028, 1024, 1, Padding::Auto).unwrap();
    assert_eq!((p.k, p.n), (1024, 1056));
    // A dimension already on 16 bytes is left alone (N = 1032).
    let p = choose(&gpu, DType::F16, 1024, 1032, 1025, 1, Padding::Auto).unwrap();
    assert_eq!((p.k, p.n), (1056, 1032));
    // ...and without padding the dispatcher still takes tensor cores.
    let c = tune::choose_matmul(&gpu, DType::F16, 1793, 1793, 1793, 1);
    assert!(matches!(c.kernel, MatmulKernel::Coop { .. }), "{c}");
    // N = 3 padded to 4 would add a third more work than the kernel gains:
    // Auto runs the raw shape; Always pads anyway (it is for measuring).
    assert_eq!(
        choose(&gpu, DType::F32, 4096, 3, 4096, 1, Padding::Auto),
        None
    );
    assert!(choose(&gpu, DType::F32, 4096, 3, 4096, 1, Padding::Always).is_some());
    // Small shapes: the copies cost more than they save on a GPU...
    assert_eq!(choose(&gpu, DType::F32, 33, 65, 65, 1, Padding::Auto), None);
    // ...but Always pads whenever there is a gain at all.
    assert!(choose(&gpu, DType::F32, 33, 65, 65, 1, Padding::Always).is_some());
    // The last-row split: at 4097 the coop grid (256-row blocks) is 17 x 33
    // = 561 workgroups, 5 waves on 132 units; without the last row 528, 4.
    let p = choose(&gpu, DType::F16, 4097, 4097, 4097, 1, Padding::Auto).unwrap();
    assert!(p.fringe_rows == 1, "{p}");
    assert!(p.to_string().contains("last row of C as a GEMV"), "{p}");
    // 1793: 120 workgroups either way within one wave: no rows apart; nor
    // for batches. The tiled kernels take them on GPUs (f32 4097 padded to
    // 4100: 1089 workgroups, 8.25 waves, 1056 without the last row), never
    // on CPU adapters.
    let rows_apart = |m: usize, batch: usize| {
        choose(&gpu, DType::F16, m, 4097, 4097, batch, Padding::Auto)
            .unwrap()
            .fringe_rows
    };
    assert_eq!(
        choose(&gpu, DType::F16, 1793, 1793, 1793, 1, Padding::Auto)
            .unwrap()
            .fringe_rows,
        0
    );
    assert_eq!(rows_apart(4097, 2), 0);
    let tiled = choose(&gpu, DType::F32, 4097, 4097, 4097, 1, Padding::Always).unwrap();
    assert!(tiled.copies && tiled.fringe_rows == 1, "{tiled}");
    assert_eq!(
        tune::pad::fringe_rows(&cpu_adapter(), tiled.kernel, 4097, 4097, 1),
        0
    );
    // Two and three rows past a block: as many GEMVs (each reads B once)
    // against a fifth round; four rows past it: the fifth round.
    assert_eq!(rows_apart(4098, 1), 2);
    assert_eq!(rows_apart(4099, 1), 3);
    assert_eq!(rows_apart(4100, 1), 0);
    let p = choose(&gpu, DType::F16, 4099, 4097, 4097, 1, Padding::Auto).unwrap();
    assert!(p.to_string().contains("last 3 rows of C as GEMVs"), "{p}");
    let coop = choose(&gpu, DType::F16, 4097, 4097, 4097, 1, Padding::Auto)
        .unwrap()
        .kernel;
    assert_eq!(tune::pad::fringe_rows(&gpu, coop, 4097, 4097, 1), 1);
    assert_eq!(tune::pad::fringe_rows(&gpu, coop, 4097, 4097, 3), 0);
}

#[test]
fn split_kernel_padding_decisions() {
    use crate::tune::pad::choose_for;
    let gpu = h200_like();
    let split = |(m, n, k)| {
        tune::coop_split_for_shape(&gpu, (m, n, k), 1, false).expect("tensor cores")
    };
    // The padding layer's decision for the split kernel the dispatcher
    // picks for the shape as it is.
    let decide = |shape, policy| choose_for(&gpu, split(shape), DType::F32, shape, 1, policy);
    let auto = |shape| decide(shape, Padding::Auto).unwrap();
    let is_split = |k: MatmulKernel| matches!(k, MatmulKernel::Coop { split: true, .. });
    // Aligned rows: nothing to copy, and at 4096 no wave to save.
    assert_eq!(decide((4096, 4096, 4096), Padding::Auto), None);
    // The K step of a split kernel.
    let bk = |k: MatmulKernel| match k {
        MatmulKernel::Coop { bk, .. } => bk as usize,
        other => panic!("not a coop kernel: {other}"),
    };
    // 1793: rows of 1793 floats take the word loads (about 0.8x of the
    // 16-byte ones); the copies cost a fraction of that and the split
    // kernel stays. Both operands are copied, so the kernel runs on the
    // padded K (a whole number of K steps; B's rows past 1793 zero) and
    // N is padded to 4 floats.
    let p = auto((1793, 1793, 1793));
    assert!(p.copies && !p.crop && p.full_k, "{p}");
    assert!(is_split(p.kernel), "{p}");
    assert_eq!(p.k, 1793usize.next_multiple_of(bk(p.kernel)), "{p}");
    assert_eq!(p.n, 1796);
    // Only the unaligned operand is copied: N = 1028 is on 16 bytes
    // already, B stays as it is and the kernel runs K = 1025.
    let p = auto((1024, 1028, 1025));
    assert_eq!((p.k, p.n), (1028, 1028));
    assert!(!p.full_k, "{p}");
    // 4097: padded, and on 128x128 blocks with the last row apart (1056
    // workgroups, 8 whole rounds on 132 units; 128x256 blocks would take 5
    // rounds with or without it, the fifth a quarter full).
    let p = auto((4097, 4097, 4097));
    assert!(p.copies && p.fringe_rows == 1 && p.full_k, "{p}");
    assert_eq!((p.k, p.n), (4128, 4100));
    assert!(
        matches!(
            p.kernel,
            MatmulKernel::Coop {
                warps_m: 2,
                warps_n: 4,
                bk: 32,
                frags_n: 2,
                split: true,
                ..
            }
        ),
        "{p}"
    );
    // Aligned rows and M one past a block: the last row apart alone (N =
    // 4224: 561 blocks of 128x256 or 1056 of 128x128 on 4096 rows)...
    let p = auto((4097, 4224, 4096));
    assert!(!p.copies && p.fringe_rows == 1, "{p}");
    // ...but not where no round is saved (N = 4096: 528 blocks of 128x256
    // are 4 whole rounds already).
    assert_eq!(decide((4097, 4096, 4096), Padding::Auto), None);
    // Small problems (forced onto the split kernel): the copies cost more
    // than the word loads do, the raw shape runs; Never never pads.
    let small = tune::coop_split_for_shape(&gpu, (67, 45, 129), 1, true).unwrap();
    assert_eq!(
        choose_for(&gpu, small, DType::F32, (67, 45, 129), 1, Padding::Auto),
        None
    );
    assert_eq!(decide((1793, 1793, 1793), Padding::Never), None);
    // Zero-sized problems are never padded.
    assert_eq!(
        choose_for(&gpu, small, DType::F32, (0, 4097, 4097), 1, Padding::Always),
        None
    );
}

// ---- the autotuner and its cache, with a fake measuring closure ----

// ---- a logger that keeps every message, to check warnings and log lines ----

static LOGS: Mutex<Vec<(log::Level, String)>> = Mutex::new(Vec::new());

struct Capture;

impl log::Log for Capture {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }
    fn log(&self, record: &log::Record<'_>) {
        LOGS.lock()
            .unwrap()
            .push((record.level(), record.args().to_string()));
    }
    fn flush(&self) {}
}

fn capture_logs() {
    static INIT: Once = Once::new();
    INIT.call_once(|| {
        log::set_logger(&Capture).expect("no other logger");
        log::set_max_level(log::LevelFilter::Trace);
    });
}

/// Messages at `level` that mention `needle` (tests run in parallel, so each
/// looks for its own unique path or shape).
fn logged(level: log::Level, needle: &str) -> Vec<String> {
    LOGS.lock()
        .unwrap()
        .iter()
        .filter(|(l, m)| *l == level && m.contains(needle))
        .map(|(_, m)| m.clone())
        .collect()
}

/// A fresh, empty directory under the system temp dir.
fn temp_dir(name: &str) -> PathBuf {
    static N: AtomicU32 = AtomicU32::new(0);
    let dir = std::env::temp_dir().join(format!(
        "wgtile-autotune-{}-{name}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

const BIG: usize = 2048; // 2 * 2048^3 = 16 GFLOP

fn big_candidates(p: &AdapterProfile) -> Vec<MatmulKernel> {
    tune::matmul_candidates(p, DType::F32, BIG, BIG, BIG, 1)
}

fn heuristic(p: &AdapterProfile, m: usize, n: usize, k: usize) -> MatmulKernel {
    tune::choose_matmul(p, DType::F32, m, n, k, 1).kernel
}

/// Times in ms by position in the candidate list: the third is fastest.
fn fake_time(candidates: &[MatmulKernel], kernel: MatmulKernel) -> f64 {
    let i = candidates.iter().position(|&c| c == kernel).unwrap();
    [3.0, 2.0, 1.0, 4.0, 5.0, 6.0, 7.0, 8.0][i.min(7)] * 1e-3
}

// ---- shape buckets and keys ----

#[test]
fn buckets_round_up_to_powers_of_two_and_keep_alignment() {
    // 1792 (a multiple of 256) and 1793 (odd) round to the same power of two
    // but not the same kernels: different buckets.
    assert_ne!(
        ShapeBucket::new(1792, 64, 64, 1),
        ShapeBucket::new(1793, 64, 64, 1)
    );
    assert_eq!(
        DimBucket::new(1792),
        DimBucket {
            pow2: 2048,
            align: 16
        }
    );
    assert_eq!(
        DimBucket::new(1793),
        DimBucket {
            pow2: 2048,
            align: 1
        }
    );
    // 1008 and 1024 are both multiples of 16 up to 1024: one bucket.
    assert_eq!(
        ShapeBucket::new(1008, 1008, 1008, 1),
        ShapeBucket::new(1024, 1024, 1024, 1)
    );
    // 1000 is a multiple of 8 only.
    assert_eq!(
        DimBucket::new(1000),
        DimBucket {
            pow2: 1024,
            align: 8
        }
    );
    assert_ne!(DimBucket::new(1000), DimBucket::new(1024));
    // Alignment is capped at 16; powers of two are their own bucket.
    assert_eq!(
        DimBucket::new(4096),
        DimBucket {
            pow2: 4096,
            align: 16
        }
    );
    assert_eq!(DimBucket::new(4097).pow2, 8192);
    assert_eq!(DimBucket::new(1), DimBucket { pow2: 1, align: 1 });
    assert_eq!(DimBucket::new(0).pow2, 1);
    // Each dimension is its own: transposing the shape changes the bucket.
    assert_ne!(
        ShapeBucket::new(64, 1024, 64, 1),
        ShapeBucket::new(1024, 64, 64, 1)
    );
    assert_ne!(
        ShapeBucket::new(64, 64, 64, 1),
        ShapeBucket::new(64, 64, 64, 3)
    );
}

#[test]
fn the_key_changes_with_the_candidate_set_and_the_problem() {
    let p = gpu();
    let c = big_candidates(&p);
    let bucket = ShapeBucket::new(BIG, BIG, BIG, 1);
    let key = TuneKey::new(&p, "matmul", DType::F32, bucket, &c);
    assert_eq!(key, TuneKey::new(&p, "matmul", DType::F32, bucket, &c));
    assert_eq!(key.crate_version, env!("CARGO_PKG_VERSION"));
    assert_eq!(key.adapter.backend, "Vulkan");
    assert_eq!(key.dtype, "f32");
    assert!(!key.a_t && !key.b_t);

    // Stable (FNV-1a of the Debug strings): the same in every process.
    assert_eq!(candidates_checksum(&c), candidates_checksum(&c.clone()));
    assert_ne!(candidates_checksum(&[]), candidates_checksum(&c));
    let fewer = &c[..c.len() - 1];
    assert_ne!(
        TuneKey::new(&p, "matmul", DType::F32, bucket, fewer),
        key,
        "dropping a candidate invalidates the key"
    );
    let mut reordered = c.clone();
    reordered.swap(0, 1);
    assert_ne!(candidates_checksum(&reordered), candidates_checksum(&c));

    assert_ne!(TuneKey::new(&p, "matmul", DType::F16, bucket, &c), key);
    let mut other = p.clone();
    other.driver_info = "555.1".into();
    assert_ne!(
        TuneKey::new(&other, "matmul", DType::F32, bucket, &c),
        key,
        "a driver update invalidates the key"
    );
}

// ---- candidates ----

#[test]
fn candidates_start_with_the_heuristic_and_end_with_naive() {
    let p = gpu();
    let c = big_candidates(&p);
    assert_eq!(c[0], heuristic(&p, BIG, BIG, BIG));
    assert_eq!(*c.last().unwrap(), MatmulKernel::naive_for(&p));
    // 3 vec4 + 3 scalar tiled + naive, no duplicates, no coop on f32.
    assert_eq!(c.len(), 7, "{c:?}");
    for (i, a) in c.iter().enumerate() {
        assert!(!c[i + 1..].contains(a), "duplicate {a}");
        assert!(!matches!(a, MatmulKernel::Coop { .. }));
    }
    let vec4 = c
        .iter()
        .position(|k| matches!(k, MatmulKernel::Tiled { vec4: true, .. }));
    let scalar = c
        .iter()
        .position(|k| matches!(k, MatmulKernel::Tiled { vec4: false, .. }));
    assert!(vec4.unwrap() < scalar.unwrap());

    // Unaligned K: no vec4.
    let c = tune::matmul_candidates(&p, DType::F32, BIG, BIG, BIG + 1, 1);
    assert!(
        c.iter()
            .all(|k| !matches!(k, MatmulKernel::Tiled { vec4: true, .. }))
    );
    assert_eq!(c.len(), 4, "{c:?}");

    // f16 on tensor cores: the coop layouts come right after the heuristic's pick.
    let tc = gpu().with_tensor_cores();
    let c = tune::matmul_candidates(&tc, DType::F16, BIG, BIG, BIG, 1);
    assert!(matches!(c[0], MatmulKernel::Coop { .. }), "{c:?}");
    let coops = c
        .iter()
        .take_while(|k| matches!(k, MatmulKernel::Coop { .. }))
        .count();
    assert_eq!(coops, COOP_CONFIGS.len());
    assert_eq!(c.len(), COOP_CONFIGS.len() + 2 * TILE_CONFIGS.len() + 1);

    // A small adapter: only the tiles that fit.
    let small = gpu()
        .with_units(8)
        .with_invocations(64)
        .with_workgroup_storage(16 << 10);
    let c = tune::matmul_candidates(&small, DType::F32, BIG, BIG, BIG, 1);
    assert!(c.iter().all(|k| k.fits(&small)));
    assert!(c.contains(&MatmulKernel::naive_for(&small)));
}

// ---- decisions ----

#[test]
fn the_fastest_measured_candidate_wins_and_is_cached() {
    let p = gpu();
    let c = big_candidates(&p);
    let tuner = Autotuner::new(AutotuneMode::Fast, None);
    let mut calls = Vec::new();
    let d = tuner
        .decide(&p, "matmul", DType::F32, BIG, BIG, BIG, 1, &c, c[0], |k| {
            calls.push(k);
            Ok(fake_time(&c, k))
        })
        .unwrap();
    assert_eq!(d.source, DecisionSource::Tuned);
    assert_eq!(d.kernel, c[2]);
    assert!(d.tuning_seconds >= 0.0);
    // Fast: the first three, in order.
    assert_eq!(calls, c[..FAST_CANDIDATES].to_vec());

    // Same bucket (2000 is a multiple of 16 up to 2048): from memory.
    let d = tuner
        .decide(
            &p,
            "matmul",
            DType::F32,
            2000,
            2000,
            2000,
            1,
            &c,
            c[0],
            |_| panic!("a cached bucket is not measured"),
        )
        .unwrap();
    assert_eq!(d.source, DecisionSource::Cache);
    assert_eq!(d.kernel, c[2]);
    assert_eq!(d.tuning_seconds, 0.0);
}

#[test]
fn the_full_mode_times_every_candidate_and_a_fast_result_does_not_satisfy_it() {
    let p = gpu();
    let c = big_candidates(&p);
    let dir = temp_dir("full");
    let path = dir.join("autotune.json");
    let fast = Autotuner::new(AutotuneMode::Fast, Some(path.clone()));
    fast.decide(&p, "matmul", DType::F32, BIG, BIG, BIG, 1, &c, c[0], |k| {
        Ok(fake_time(&c, k))
    })
    .unwrap();

    let full = Autotuner::new(AutotuneMode::Full, Some(path.clone()));
    let mut calls = 0;
    // The last candidate is made the fastest: only the full mode finds it.
    let d = full
        .decide(&p, "matmul", DType::F32, BIG, BIG, BIG, 1, &c, c[0], |k| {
            calls += 1;
            Ok(if k == *c.last().unwrap() { 1e-6 } else { 1e-3 })
        })
        .unwrap();
    assert_eq!(calls, c.len());
    assert_eq!(d.source, DecisionSource::Tuned);
    assert_eq!(d.kernel, *c.last().unwrap());

    // A full result answers the fast mode.
    let fast = Autotuner::new(AutotuneMode::Fast, Some(path));
    let d = fast
        .decide(&p, "matmul", DType::F32, BIG, BIG, BIG, 1, &c, c[0], |_| {
            panic!("not measured")
        })
        .unwrap();
    assert_eq!(
        (d.source, d.kernel),
        (DecisionSource::Cache, *c.last().unwrap())
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn off_mode_small_problems_and_cpu_adapters_use_the_heuristic() {
    let p = gpu();
    let c = big_candidates(&p);
    let h = c[0];
    let never = |_| -> crate::Result<f64> { panic!("must not measure") };

    let off = Autotuner::new(AutotuneMode::Off, None);
    let d = off
        .decide(&p, "matmul", DType::F32, BIG, BIG, BIG, 1, &c, h, never)
        .unwrap();
    assert_eq!((d.kernel, d.source), (h, DecisionSource::Heuristic));

    let fast = Autotuner::new(AutotuneMode::Fast, None);
    // 2 * 512^3 = 2^28 flops: below the threshold.
    assert!(2 * 512u64.pow(3) < TUNE_MIN_FLOPS);
    let small = tune::matmul_candidates(&p, DType::F32, 512, 512, 512, 1);
    let d = fast
        .decide(
            &p,
            "matmul",
            DType::F32,
            512,
            512,
            512,
            1,
            &small,
            small[0],
            never,
        )
        .unwrap();
    assert_eq!(d.source, DecisionSource::Heuristic);
    // The threshold counts the batch: 8 x 512^3 is 2^31 flops.
    let mut called = false;
    fast.decide(
        &p,
        "matmul",
        DType::F32,
        512,
        512,
        512,
        8,
        &small,
        small[0],
        |k| {
            called = true;
            Ok(fake_time(&small, k))
        },
    )
    .unwrap();
    assert!(called);

    let mut cpu = gpu();
    cpu.device_type = wgpu::DeviceType::Cpu;
    let d = fast
        .decide(&cpu, "matmul", DType::F32, BIG, BIG, BIG, 1, &c, h, never)
        .unwrap();
    assert_eq!(d.source, DecisionSource::Heuristic);

    // One candidate: nothing to choose between.
    let d = fast
        .decide(
            &p,
            "matmul",
            DType::F32,
            BIG,
            BIG,
            BIG,
            1,
            &c[..1],
            h,
            never,
        )
        .unwrap();
    assert_eq!(d.source, DecisionSource::Heuristic);
}

#[test]
fn failing_candidates_are_skipped() {
    let p = gpu();
    let c = big_candidates(&p);
    let tuner = Autotuner::new(AutotuneMode::Full, None);
    // The naturally fastest (c[2]) fails; one returns a nonsense time.
    let d = tuner
        .decide(&p, "matmul", DType::F32, BIG, BIG, BIG, 1, &c, c[0], |k| {
            if k == c[2] {
                Err(Error::InvalidArgument("no such pipeline".into()))
            } else if k == c[3] {
                Ok(f64::NAN)
            } else {
                Ok(fake_time(&c, k))
            }
        })
        .unwrap();
    assert_eq!((d.kernel, d.source), (c[1], DecisionSource::Tuned));

    // All fail: the heuristic, and nothing cached.
    let k = 3 * BIG;
    let d = tuner
        .decide(&p, "matmul", DType::F32, BIG, BIG, k, 1, &c, c[0], |_| {
            Err(Error::InvalidArgument("broken".into()))
        })
        .unwrap();
    assert_eq!((d.kernel, d.source), (c[0], DecisionSource::Heuristic));
    let mut called = false;
    tuner
        .decide(
            &p,
            "matmul",
            DType::F32,
            BIG,
            BIG,
            k,
            1,
            &c,
            c[0],
            |kernel| {
                called = true;
                Ok(fake_time(&c, kernel))
            },
        )
        .unwrap();
    assert!(called, "a failed tuning is retried");

    // A lost device is an error, not a skipped candidate.
    let e = tuner
        .decide(
            &p,
            "matmul",
            DType::F32,
            BIG,
            BIG,
            5 * BIG,
            1,
            &c,
            c[0],
            |_| Err(Error::DeviceLost("gone".into())),
        )
        .unwrap_err();
    assert!(matches!(e, Error::DeviceLost(_)), "{e}");
}

#[test]
fn a_decision_asked_for_while_measuring_gets_the_heuristic() {
    let p = gpu();
    let c = big_candidates(&p);
    let tuner = Autotuner::new(AutotuneMode::Fast, None);
    let inner = Cell::new(None);
    let d = tuner
        .decide(&p, "matmul", DType::F32, BIG, BIG, BIG, 1, &c, c[0], |k| {
            // E.g. the op layer's measurement going through the dispatcher.
            let nested = tuner
                .decide(
                    &p,
                    "matmul",
                    DType::F32,
                    4096,
                    4096,
                    4096,
                    1,
                    &c,
                    c[1],
                    |_| panic!("nested tuning"),
                )
                .unwrap();
            inner.set(Some(nested.source));
            Ok(fake_time(&c, k))
        })
        .unwrap();
    assert_eq!(d.source, DecisionSource::Tuned);
    assert_eq!(inner.get(), Some(DecisionSource::Heuristic));
}

#[test]
fn concurrent_threads_tune_a_shape_once() {
    let p = gpu();
    let c = big_candidates(&p);
    let tuner = Autotuner::new(AutotuneMode::Fast, None);
    let calls = AtomicU32::new(0);
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                let d = tuner
                    .decide(&p, "matmul", DType::F32, BIG, BIG, BIG, 1, &c, c[0], |k| {
                        calls.fetch_add(1, Ordering::Relaxed);
                        std::thread::sleep(std::time::Duration::from_millis(5));
                        Ok(fake_time(&c, k))
                    })
                    .unwrap();
                assert_eq!(d.kernel, c[2]);
            });
        }
    });
    assert_eq!(calls.load(Ordering::Relaxed), FAST_CANDIDATES as u32);
}

// ---- the cache file ----

#[test]
fn a_second_tuner_on_the_same_file_does_no_tuning() {
    capture_logs();
    let p = gpu();
    let c = big_candidates(&p);
    let dir = temp_dir("second");
    let path = dir.join("nested").join("autotune.json");
    let first = Autotuner::new(AutotuneMode::Fast, Some(path.clone()));
    let d = first
        .decide(&p, "matmul", DType::F32, BIG, BIG, BIG, 1, &c, c[0], |k| {
            Ok(fake_time(&c, k))
        })
        .unwrap();
    assert_eq!(d.source, DecisionSource::Tuned);
    assert!(
        path.exists(),
        "the directory is created and the file written"
    );
    // Atomic write: no temp files left behind.
    let names: Vec<_> = std::fs::read_dir(path.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names.len(), 1, "{names:?}");

    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(json["version"], CACHE_FORMAT_VERSION);
    assert_eq!(json["entries"].as_array().unwrap().len(), 1);

    // "A second process": a new tuner on the same file.
    let second = Autotuner::new(AutotuneMode::Fast, Some(path.clone()));
    let called = Cell::new(false);
    let d = second
        .decide(&p, "matmul", DType::F32, BIG, BIG, BIG, 1, &c, c[0], |_| {
            called.set(true);
            Ok(1.0)
        })
        .unwrap();
    assert!(!called.get(), "the closure is not called on a cache hit");
    assert_eq!((d.source, d.kernel), (DecisionSource::Cache, c[2]));
    let hits = logged(log::Level::Info, "cache hit for matmul f32 2048x2048x2048");
    assert!(hits.iter().any(|m| m.contains("(no tuning)")), "{hits:?}");

    // clear_memory re-reads the file, as a new process would.
    first.clear_memory();
    let d = first
        .decide(&p, "matmul", DType::F32, BIG, BIG, BIG, 1, &c, c[0], |_| {
            panic!("not measured")
        })
        .unwrap();
    assert_eq!(d.source, DecisionSource::Cache);

    // A changed candidate set does not reuse the entry.
    let fewer = &c[..4];
    let d = second
        .decide(
            &p,
            "matmul",
            DType::F32,
            BIG,
            BIG,
            BIG,
            1,
            fewer,
            c[0],
            |k| Ok(fake_time(&c, k)),
        )
        .unwrap();
    assert_eq!(d.source, DecisionSource::Tuned);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn tune_cache_round_trips_and_merges_with_other_writers() {
    let p = gpu();
    let c = big_candidates(&p);
    let dir = temp_dir("roundtrip");
    let path = dir.join("autotune.json");
    let key = |m| TuneKey::new(&p, "matmul", DType::F32, ShapeBucket::new(m, m, m, 1), &c);
    let entry = |kernel| Entry {
        kernel,
        measured: vec![Measurement {
            kernel,
            seconds: 1.5e-3,
        }],
        mode: AutotuneMode::Fast,
        tuning_seconds: 0.25,
    };

    let mut a = TuneCache::new(Some(path.clone()));
    let mut b = TuneCache::new(Some(path.clone()));
    assert!(a.is_empty());
    assert!(b.is_empty());
    a.insert(key(1024), entry(c[0]));
    // b read the (missing) file before a wrote: its save keeps a's entry.
    b.insert(key(4096), entry(c[1]));

    let mut fresh = TuneCache::new(Some(path.clone()));
    assert_eq!(fresh.len(), 2);
    assert_eq!(fresh.get(&key(1024)), Some(&entry(c[0])));
    assert_eq!(fresh.get(&key(4096)), Some(&entry(c[1])));
    assert_eq!(fresh.path(), Some(path.as_path()));
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_corrupt_cache_warns_and_is_replaced() {
    capture_logs();
    let p = gpu();
    let c = big_candidates(&p);
    let dir = temp_dir("corrupt");
    let path = dir.join("autotune.json");
    std::fs::write(&path, "{ this is not json").unwrap();
    let tuner = Autotuner::new(AutotuneMode::Fast, Some(path.clone()));
    let d = tuner
        .decide(&p, "matmul", DType::F32, BIG, BIG, BIG, 1, &c, c[0], |k| {
            Ok(fake_time(&c, k))
        })
        .unwrap();
    assert_eq!((d.source, d.kernel), (DecisionSource::Tuned, c[2]));
    let warnings = logged(log::Level::Warn, &path.display().to_string());
    assert!(
        warnings.iter().any(|w| w.contains("corrupt")),
        "{warnings:?}"
    );
    // Rewritten as a valid cache.
    let mut reread = TuneCache::new(Some(path.clone()));
    assert_eq!(reread.len(), 1);

    // Valid JSON of another format version: ignored with a warning too.
    std::fs::write(&path, r#"{"version": 999, "entries": "something else"}"#).unwrap();
    let tuner = Autotuner::new(AutotuneMode::Fast, Some(path.clone()));
    let d = tuner
        .decide(&p, "matmul", DType::F32, BIG, BIG, BIG, 1, &c, c[0], |k| {
            Ok(fake_time(&c, k))
        })
        .unwrap();
    assert_eq!(d.source, DecisionSource::Tuned);
    let warnings = logged(log::Level::Warn, &path.display().to_string());
    assert!(
        warnings.iter().any(|w| w.contains("version 999")),
        "{warnings:?}"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn an_unwritable_cache_warns_once_and_tunes_in_memory() {
    capture_logs();
    let p = gpu();
    let c = big_candidates(&p);
    let dir = temp_dir("unwritable");
    let file = dir.join("a-file");
    std::fs::write(&file, "not a directory").unwrap();
    let path = file.join("sub").join("autotune.json");
    let tuner = Autotuner::new(AutotuneMode::Fast, Some(path.clone()));
    for m in [BIG, 2 * BIG] {
        let d = tuner
            .decide(&p, "matmul", DType::F32, m, BIG, BIG, 1, &c, c[0], |k| {
                Ok(fake_time(&c, k))
            })
            .unwrap();
        assert_eq!((d.source, d.kernel), (DecisionSource::Tuned, c[2]));
    }
    let warnings = logged(log::Level::Warn, &path.display().to_string());
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    // Still cached in memory.
    let d = tuner
        .decide(&p, "matmul", DType::F32, BIG, BIG, BIG, 1, &c, c[0], |_| {
            panic!("not measured")
        })
        .unwrap();
    assert_eq!(d.source, DecisionSource::Cache);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn modes_parse() {
    assert_eq!(AutotuneMode::parse("off"), Some(AutotuneMode::Off));
    assert_eq!(AutotuneMode::parse(" FULL "), Some(AutotuneMode::Full));
    assert_eq!(AutotuneMode::parse("fast"), Some(AutotuneMode::Fast));
    assert_eq!(AutotuneMode::parse(""), Some(AutotuneMode::Fast));
    assert_eq!(AutotuneMode::parse("0"), Some(AutotuneMode::Off));
    assert_eq!(AutotuneMode::parse("sometimes"), None);
    assert_eq!(AutotuneMode::default(), AutotuneMode::Fast);
    assert_eq!(AutotuneMode::Fast.repeats(), 3);
    assert_eq!(AutotuneMode::Full.repeats(), 5);
    assert_eq!(AutotuneMode::Fast.timing_options().repeats, 3);
}

#[test]
fn transposed_layouts_are_tuned_and_cached_apart() {
    let p = gpu();
    let layout = tune::Layout::dense(BIG, BIG, BIG, true, false);
    let c = tune::matmul_candidates_layout(&p, DType::F32, (BIG, BIG, BIG), 1, layout);
    // Only kernels that read A transposed (strided or vec4 along M).
    assert!(c.len() >= 2, "{c:?}");
    assert!(
        c.iter()
            .all(|k| k.accepts_layout(DType::F32, BIG, BIG, BIG, true, false))
    );
    let tuner = Autotuner::new(AutotuneMode::Fast, None);
    let mut measured = 0;
    let mut tune = |t: (bool, bool)| {
        tuner
            .decide_transposed(
                &p,
                ("matmul", DType::F32),
                (BIG, BIG, BIG, 1),
                t,
                &c,
                c[0],
                |k| {
                    measured += 1;
                    Ok(fake_time(&c, k))
                },
            )
            .unwrap()
            .source
    };
    assert_eq!(tune((true, false)), DecisionSource::Tuned);
    assert_eq!(tune((true, false)), DecisionSource::Cache);
    // The same shape with another layout is another key: tuned again.
    assert_eq!(tune((false, true)), DecisionSource::Tuned);
    assert!(measured >= 4, "{measured}");
}
