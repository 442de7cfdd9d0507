//! Every specialisation the attention dispatcher (and the sweeps) can
//! produce, for the shader validation tests. Built for tests and the `dev`
//! feature only.

use super::*;

/// Every tensor-core flash specialisation the dispatcher (and the sweep) can
/// produce on an H200-like profile (subgroup size 32, 48 KiB), plus the
/// default tile at subgroup sizes 16 and 64.
// Long on purpose: a flat list of every tensor-core attention specialisation (head dims,
// tiles, subgroup sizes), for the shader tests.
pub fn attention_coop_specs() -> Vec<Spec> {
    let mut p = permissive_profile();
    p.max_workgroup_storage = 48 * 1024;
    p.max_invocations = 1024;
    p.max_workgroup_size_x = 1024;
    // The H200's limit is far above; the backward kernels bind 9 (with 8,
    // as before run 56, none of their tensor-core specialisations was
    // produced here, so the shader tests never saw them).
    p.max_storage_buffers_per_stage = 16;
    p.cooperative_matrix = true;
    p.coop_configs = vec![crate::gpu::CoopMatrixConfig {
        m: 16,
        n: 16,
        k: 16,
        ab_type: "f16",
        cr_type: "f32",
    }];
    let mut specs = Vec::new();
    let dims: Vec<usize> = (1..=16).map(|i| i * 16).collect();
    for t in FLASH_COOP_CANDIDATES
        .iter()
        .chain(&FLASH_COOP_SWEEP)
        .chain(&FLASH_COOP_TEST_TILES)
    {
        for &d in &dims {
            for &dv in &dims {
                if t.fits(&p, d, dv, DType::F16) {
                    specs.push(t.spec(d, dv, 32, DType::F16));
                    // bf16 O (the bf16 plans' f16 staging), the dispatcher's tiles.
                    if FLASH_COOP_CANDIDATES.contains(t) {
                        specs.push(flash_coop_out_bf16(t.spec(d, dv, 32, DType::F16)));
                    }
                }
            }
        }
    }
    let t = FLASH_COOP_CANDIDATES[0];
    for sg in [16, 64] {
        specs.push(t.spec(64, 64, sg, DType::F16));
        specs.push(t.spec(128, 64, sg, DType::F16));
    }
    // The f32 (split) kernel: every tile at a few head-dim pairs, the
    // default tile at subgroup sizes 16 and 64.
    for t in FLASH_COOP_CANDIDATES
        .iter()
        .chain(&FLASH_COOP_SWEEP)
        .chain(&FLASH_COOP_TEST_TILES)
    {
        for (d, dv) in [
            (16, 16),
            (32, 48),
            (64, 64),
            (80, 80),
            (128, 128),
            (256, 256),
        ] {
            if t.fits(&p, d, dv, DType::F32) {
                specs.push(t.spec(d, dv, 32, DType::F32));
            }
        }
    }
    for sg in [16, 64] {
        specs.push(t.spec(128, 128, sg, DType::F32));
    }
    // The tensor-core backward: both passes, every tile, head dims and
    // subgroup size the dispatcher and the sweep use, and the emulated
    // kernels at the shapes the tests force.
    // Head-dim pairs: the smallest, unequal ones, the dispatcher's 64 and
    // 128, and the largest (every pair of 16..=256 would be 4000 kernels).
    let pairs = [
        (16, 16),
        (32, 48),
        (48, 32),
        (64, 64),
        (80, 80),
        (64, 128),
        (128, 64),
        (128, 128),
        (192, 256),
        (256, 256),
    ];
    for t in BACKWARD_COOP_CANDIDATES.iter().chain(&BACKWARD_COOP_SWEEP) {
        for (d, dv) in pairs {
            if t.fits(&p, d, dv) {
                for pass in [BackwardCoopPass::DkDv, BackwardCoopPass::Dq] {
                    for sub_barrier in [true, false] {
                        specs.push(t.spec(pass, d, dv, 32, false, sub_barrier));
                    }
                }
            }
        }
    }
    for (d, dv) in [(16, 16), (32, 48), (64, 64), (128, 128)] {
        for pass in [BackwardCoopPass::DkDv, BackwardCoopPass::Dq] {
            specs.push(BACKWARD_COOP_CANDIDATES[0].spec(pass, d, dv, 16, true, false));
        }
    }
    // The tensor-core decode kernel: every head-dim pair at subgroup size
    // 32, the default dims at 16 and 64, the emulated one at the tests'.
    for &d in &dims {
        for &dv in &dims {
            for rf in [1, 2] {
                specs.push(decode_coop_spec(rf, d, dv, 32, false));
            }
        }
    }
    for sg in [16, 64] {
        specs.push(decode_coop_spec(1, 128, 128, sg, false));
    }
    for (d, dv) in [(16, 16), (32, 32), (32, 48), (64, 64)] {
        for rf in [1, 2] {
            specs.push(decode_coop_spec(rf, d, dv, 16, true));
        }
    }
    // The emulated kernel at the shapes the tests force.
    for t in FLASH_COOP_CANDIDATES
        .iter()
        .chain(&FLASH_COOP_SWEEP)
        .chain(&FLASH_COOP_TEST_TILES)
    {
        for (d, dv) in [(16, 16), (64, 64), (64, 128), (128, 64), (256, 256)] {
            specs.push(t.spec_emulated(d, dv, DType::F16));
        }
        specs.push(t.spec_emulated(32, 48, DType::F32));
    }
    specs
}

/// Every flash specialisation the dispatcher can produce (for shader
/// validation): each candidate tile shape x value head-dimension bucket x
/// dtype x split mode, plus the merge and naive kernels.
pub fn attention_specs() -> Vec<Spec> {
    let mut specs = Vec::new();
    let mut p = permissive_profile();
    p.max_workgroup_storage = 48 * 1024;
    for dtype in [DType::F32, DType::F16] {
        for t in FLASH_CANDIDATES
            .iter()
            .chain(&TEST_TILES)
            .chain(&SWEEP_TILES)
            .chain([&DECODE_TILES])
        {
            for dv in [1usize, 32, 64, 80, 128, 256] {
                let t = if t.br == DECODE_TILES.br {
                    decode_tiles(dv)
                } else {
                    t.for_value_dim(dv)
                };
                if !t.fits(&p, dv) {
                    continue;
                }
                for split in [false, true] {
                    let s = t.spec(dtype, split);
                    if !specs.contains(&s) {
                        specs.push(s);
                    }
                }
                // The f32 tensor-core plan's guarded fallback.
                if dtype == DType::F32 {
                    let s = t.guarded_spec();
                    if !specs.contains(&s) {
                        specs.push(s);
                    }
                }
            }
        }
        specs.push(Spec::new(Kernel::AttentionMerge).dtype(dtype));
        // The f32 tensor-core kernel's exponents pass (dtype-independent).
        if dtype == DType::F32 {
            specs.push(Spec::new(Kernel::AttentionSplitScale));
        }
        for rows in 1..=DECODE_CHUNK_ROWS {
            for d in [8usize, 32, 64, 80, 128, 256] {
                for dv in [8usize, 48, 64, 128, 256] {
                    if !decode_fits(dtype, d, dv) {
                        continue;
                    }
                    // The sweep's variants for the benchmarked shapes; the
                    // dispatcher's tile for all.
                    let sweep = if [1, 4, 5, 8].contains(&rows) && [64, 128].contains(&d) && d == dv
                    {
                        &DECODE_SWEEP[..]
                    } else {
                        &[]
                    };
                    for t in sweep
                        .iter()
                        .copied()
                        .chain([decode_kernel_tiles(dtype, d)])
                        .filter(|t| decode_tiles_fit(dtype, dv, *t))
                    {
                        for shuffle in [false, true] {
                            let s = decode_spec(dtype, rows, d, dv, t, shuffle);
                            if !specs.contains(&s) {
                                specs.push(s);
                            }
                        }
                    }
                }
            }
        }
        for t in BACKWARD_CANDIDATES {
            for (d, dv) in [(1usize, 1usize), (32, 24), (64, 64), (128, 80), (256, 256)] {
                let t = t.for_dims(d, dv);
                for k in [
                    Kernel::AttentionBwdPrepare,
                    Kernel::AttentionBwdDkDv,
                    Kernel::AttentionBwdDq,
                ] {
                    let s = t.spec(k, dtype);
                    if !specs.contains(&s) {
                        specs.push(s);
                    }
                }
            }
        }
        for k in [
            Kernel::AttentionScores,
            Kernel::AttentionSoftmax,
            Kernel::AttentionPv,
        ] {
            specs.push(Spec::new(k).dtype(dtype));
        }
    }
    // The decode kernel reading a bf16 KV cache as words (f32 query): the
    // dispatcher's tile for every row count and head-dim pair it takes.
    for rows in 1..=DECODE_CHUNK_ROWS {
        for d in [8usize, 32, 64, 80, 128, 256] {
            for dv in [8usize, 48, 64, 128, 256] {
                let t = decode_kernel_tiles(DType::BF16, d);
                if !decode_fits(DType::BF16, d, dv) || !decode_tiles_fit(DType::BF16, dv, t) {
                    continue;
                }
                for shuffle in [false, true] {
                    let s = decode_spec(DType::BF16, rows, d, dv, t, shuffle);
                    if !specs.contains(&s) {
                        specs.push(s);
                    }
                }
            }
        }
    }
    specs
}

pub(crate) fn permissive_profile() -> AdapterProfile {
    let mut p = AdapterProfile::fake_gpu()
        .named("")
        .with_units(1)
        .with_invocations(256)
        .with_workgroup_storage(32 * 1024);
    p.vendor = 0;
    p
}
