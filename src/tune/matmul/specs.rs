//! Every specialisation the matmul dispatcher can produce, for the shader
//! validation tests.

use super::*;

/// Every matmul specialisation the dispatcher can produce, for validation.
// Long on purpose: a flat list of every specialisation the dispatcher can produce, family by
// family, for the shader tests.
pub fn matmul_specs() -> Vec<Spec> {
    let mut specs = Vec::new();
    for dtype in DType::COMPUTE {
        for (wg_x, wg_y) in NAIVE_WORKGROUPS {
            specs.push(MatmulKernel::Naive { wg_x, wg_y }.spec(dtype));
        }
        for tile in TILE_CONFIGS.into_iter().chain(CPU_TILE_CONFIGS) {
            for vec4 in [false, true] {
                specs.push(MatmulKernel::Tiled { tile, vec4 }.spec(dtype));
            }
        }
        for vec4 in [false, true] {
            specs.push(MatmulKernel::Broadcast { vec4 }.spec(dtype));
        }
    }
    for dtype in DType::COMPUTE {
        for vec4 in [false, true] {
            let tile = TILE_CONFIGS[TILE_CONFIGS.len() - 1];
            specs.push(
                MatmulKernel::SplitK {
                    tile,
                    vec4,
                    splits: 2,
                }
                .spec(dtype),
            );
        }
        specs.push(Spec::new(Kernel::MatmulSplitKReduce).dtype(dtype));
        for kernel in [
            Kernel::GemvVecmat,
            Kernel::GemvVecmatPairs,
            Kernel::GemvReduce,
            Kernel::GemvMatvec,
        ] {
            specs.push(Spec::new(kernel).dtype(dtype));
        }
        // vecmat_rows for every row count it takes.
        for rows in 2..=crate::tune::gemv::GEMV_MAX_ROWS as u32 {
            specs.push(Spec::new(Kernel::GemvVecmatRows).dtype(dtype).constant("MR", rows));
        }
        // A bf16 weight read in place (f32 x), from one row on.
        if dtype == DType::F32 {
            for rows in 1..=crate::tune::gemv::GEMV_MAX_ROWS as u32 {
                specs.push(
                    Spec::new(Kernel::GemvVecmatRows)
                        .dtype(dtype)
                        .constant("MR", rows)
                        .constant("B_BF16", 1),
                );
            }
        }
        specs.push(gemv_wide_spec(dtype));
        if dtype == DType::F32 {
            specs.push(gemv_wide_spec(dtype).constant("WIDE_HALF", wide_half(dtype, true)));
        }
        // WGTILE_GEMV_WIDE_SHAPE's other workgroups.
        for (lanes, slices) in [(2, 64), (2, 128), (1, 256)] {
            specs.push(
                gemv_wide_spec(dtype)
                    .constant("WIDE_LANES", lanes)
                    .constant("WIDE_SLICES", slices),
            );
        }
    }
    // The tensor-core layouts (f16 and f32 rounded; the f32 split form and
    // its first pass), every load variant.
    specs.extend([split_scale_spec(false), split_scale_spec(true)]);
    let layouts = COOP_CONFIGS
        .map(|c| (c, false))
        .into_iter()
        .chain(COOP_SPLIT_CONFIGS.map(|c| (c, true)));
    for ((warps_m, warps_n, bk, frags_n), split) in layouts {
        for subgroup in [32, 64] {
            let kernel = MatmulKernel::Coop {
                warps_m,
                warps_n,
                bk,
                frags_n,
                subgroup,
                split,
            };
            // bf16 operands: read in place (f32 output), and scaled (split).
            let dtypes: &[DType] = if split {
                &[DType::F32, DType::BF16]
            } else {
                &[DType::F32, DType::F16, DType::BF16]
            };
            for &dtype in dtypes {
                let spec = |d: DType| {
                    let s = kernel.spec(d);
                    if d == DType::BF16 { s.dtype(DType::F32) } else { s }
                };
                let mut family = vec![spec(dtype), spec(dtype).constant("ALIGNED", 0)];
                for (ta, tb) in [(1, 0), (0, 1), (1, 1)] {
                    for cm in [0, 1] {
                        let t = spec(dtype)
                            .constant("TRANS_A", ta)
                            .constant("TRANS_B", tb)
                            .constant("TRANS_COLMAJOR", cm);
                        family.push(t.clone());
                        family.push(t.constant("ALIGNED", 0));
                    }
                }
                // bf16 operands with a bf16 result, every layout.
                if dtype == DType::BF16 {
                    let out_bf16: Vec<Spec> = family.iter().cloned().map(coop_out_bf16).collect();
                    family.extend(out_bf16);
                }
                specs.extend(family);
            }
        }
    }
    // The tiled kernels guarded for the f32 split plan's fallback.
    for vec4 in [false, true] {
        specs.push(tiled_guarded(
            MatmulKernel::Tiled {
                tile: TILE_CONFIGS[0],
                vec4,
            }
            .spec(DType::F32),
        ));
    }
    // WGTILE_COOP_PROBE's timing bits, on the default f16 layout.
    let (warps_m, warps_n, bk, frags_n) = COOP_CONFIGS[0];
    let kernel = MatmulKernel::Coop {
        warps_m,
        warps_n,
        bk,
        frags_n,
        subgroup: 32,
        split: false,
    };
    for probe in [1, 2, 4, 8, 16, 24, 31] {
        specs.push(kernel.spec(DType::F16).constant("PROBE", probe));
    }
    // Whole-block dimensions without edge checks (the split kernel's
    // specialisation; f16 checked too).
    for (dtype, split) in [(DType::F16, false), (DType::F32, true)] {
        let k = MatmulKernel::Coop {
            warps_m,
            warps_n,
            bk,
            frags_n,
            subgroup: 32,
            split,
        };
        let mut spec = k.spec(dtype).dtype(dtype);
        for name in ["EDGE_M", "EDGE_N", "EDGE_K"] {
            spec = spec.constant(name, 0);
            specs.push(spec.clone());
        }
    }
    // Results in the other dtype (MatmulOptions::out_dtype): every kernel
    // with a separate `Out` type.
    let mixed: Vec<Spec> = specs
        .iter()
        .filter(|s| s.kernel.has_epilogue() && s.kernel != Kernel::MatmulCoop)
        .map(|s| {
            let other = if s.dtype == DType::F32 {
                DType::F16
            } else {
                DType::F32
            };
            s.clone().output(other)
        })
        .collect();
    specs.extend(mixed);
    specs
}

/// The one-dispatch vector-matrix kernel for `dtype` operands (16-byte words
/// of 8 halves or 4 floats).
pub fn gemv_wide_spec(dtype: DType) -> Spec {
    Spec::new(Kernel::GemvVecmatWide)
        .dtype(dtype)
        .constant("WIDE_HALF", wide_half(dtype, false))
}

/// The one-dispatch GEMV's `WIDE_HALF` for x of `dtype` and B of that
/// dtype or bf16 (`b_bf16`, against f32 x).
pub(crate) fn wide_half(dtype: DType, b_bf16: bool) -> u32 {
    if b_bf16 { 2 } else { u32::from(dtype == DType::F16) }
}

/// The first pass of the split (f32) or scaled (bf16) tensor-core form:
/// the operands' largest finite magnitudes (`shaders/matmul_split_scale.wgsl`).
pub fn split_scale_spec(bf16: bool) -> Spec {
    let spec = Spec::new(Kernel::MatmulSplitScale);
    if bf16 { spec.constant("IN_BF16", 1) } else { spec }
}
