//! Matmul against the f64 CPU reference: every kernel, odd and prime sizes,
//! tile multiples +-1, rectangular, batched with broadcasting, 1-D operands,
//! f16, zero-sized dimensions. Outputs are NaN-poisoned before each run.

use crate::common;

use wgtile::tune::{NAIVE_WORKGROUPS, TILE_CONFIGS};
use wgtile::{Context, DType, MatmulKernel, MatmulOptions, MatmulShape};

/// Every kernel the adapter can run, plus `None` (the dispatcher's choice).
fn kernels(ctx: &Context) -> Vec<Option<MatmulKernel>> {
    let mut ks = vec![None];
    for (wg_x, wg_y) in NAIVE_WORKGROUPS {
        ks.push(Some(MatmulKernel::Naive { wg_x, wg_y }));
    }
    for tile in TILE_CONFIGS
        .into_iter()
        .chain(wgtile::tune::CPU_TILE_CONFIGS)
    {
        for vec4 in [false, true] {
            ks.push(Some(MatmulKernel::Tiled { tile, vec4 }));
        }
    }
    ks.push(Some(MatmulKernel::Gemv));
    for vec4 in [false, true] {
        ks.push(Some(MatmulKernel::Broadcast { vec4 }));
        ks.push(Some(MatmulKernel::SplitK {
            tile: TILE_CONFIGS[2],
            vec4,
            splits: 3,
        }));
    }
    ks.extend(
        wgtile::tune::COOP_CONFIGS
            .into_iter()
            .filter_map(|c| MatmulKernel::coop_for(ctx.profile(), c))
            .map(Some),
    );
    // f32 split into halves on tensor cores (f32 operands only).
    ks.extend(
        wgtile::tune::COOP_SPLIT_CONFIGS
            .into_iter()
            .filter_map(|c| MatmulKernel::coop_split_for(ctx.profile(), c))
            .map(Some),
    );
    ks.retain(|k| k.is_none_or(|k| k.fits(ctx.profile())));
    ks
}

fn check(
    ctx: &Context,
    a_shape: &[usize],
    b_shape: &[usize],
    dtype: DType,
    kernel: Option<MatmulKernel>,
    seed: u64,
) {
    let shape = MatmulShape::new(a_shape, b_shape).unwrap();
    if kernel.is_some_and(|k| !k.accepts(dtype, shape.m, shape.n, shape.k)) {
        return; // refused with InvalidArgument; see tests/errors.rs
    }
    let a_len: usize = a_shape.iter().product();
    let b_len: usize = b_shape.iter().product();
    let (a, ha) = common::upload(ctx, &common::random(a_len, seed), a_shape, dtype);
    let (b, hb) = common::upload(ctx, &common::random(b_len, seed + 1), b_shape, dtype);
    let out = ctx.full(&shape.out_shape, f32::NAN, dtype).unwrap();
    let plan = ctx
        .matmul_plan(
            &a,
            &b,
            Some(&out),
            &MatmulOptions {
                kernel,
                ..Default::default()
            },
        )
        .unwrap();
    plan.run().unwrap();
    let got = out.to_f32_vec_blocking().unwrap();

    let offsets = common::batch_offsets(&shape);
    let (want, mag) = common::matmul_ref(&ha, &hb, shape.m, shape.n, shape.k, &offsets);
    let what = format!("{a_shape:?} x {b_shape:?} {dtype} [{}]", plan.label());
    let split = plan.label().contains("f32 as f16 pairs");
    common::assert_close(&what, &got, &want, |i| {
        common::matmul_tolerance(dtype, shape.k, want[i], mag[i]) + split_slack(split, mag[i])
    });
}

/// `got` against an f64 reference that may hold infinities and NaN: those
/// exactly (the same infinity, NaN for NaN), the finite ones within f32's
/// accumulation bound.
fn assert_ieee_close(what: &str, got: &[f32], want: &[f64], mag: &[f64], k: usize) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let mut non_finite = 0;
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let g = f64::from(g);
        if w.is_finite() {
            let bound = common::matmul_tolerance(DType::F32, k, w, mag[i]);
            assert!(
                (g - w).abs() <= bound,
                "{what}: element {i}: got {g}, want {w} (bound {bound:e})"
            );
        } else {
            non_finite += 1;
            let same = if w.is_nan() { g.is_nan() } else { g == w };
            assert!(same, "{what}: element {i}: got {g}, want {w}");
        }
    }
    assert!(
        non_finite > 0,
        "{what}: the reference has no infinity or NaN"
    );
}

/// The f32 split kernel's bound beyond f32's accumulation: each product
/// within 2^-19 of exact (hi rounded to 11 bits, lo to f16, lo*lo dropped;
/// ~2^-20 in the worst case).
fn split_slack(split: bool, magnitude: f64) -> f64 {
    if split {
        2f64.powi(-19) * magnitude
    } else {
        0.0
    }
}

/// (M, N, K): 1, primes, tile multiples +-1 for the 64/128 tiles, rectangular;
/// the first four have K and N multiples of 4 with M off the tiles (vec4 path edges).
const SHAPES: [(usize, usize, usize); 18] = [
    (4, 4, 4),
    (129, 132, 36),
    (63, 68, 124),
    (257, 60, 12),
    (1, 1, 1),
    (7, 13, 31),
    (13, 7, 127),
    (31, 127, 13),
    (31, 33, 32),
    (32, 32, 16),
    (33, 31, 17),
    (63, 65, 64),
    (64, 64, 64),
    (65, 63, 15),
    (127, 129, 9),
    (129, 127, 8),
    (1, 3, 512),
    (300, 200, 1),
];

#[test]
fn f32_every_kernel_odd_shapes() {
    let Some(ctx) = common::ctx() else { return };
    for kernel in kernels(&ctx) {
        for (i, &(m, n, k)) in SHAPES.iter().enumerate() {
            check(&ctx, &[m, k], &[k, n], DType::F32, kernel, 10 + i as u64);
        }
    }
}

#[test]
fn f32_several_workgroups_and_k_tiles() {
    let Some(ctx) = common::ctx() else { return };
    for kernel in kernels(&ctx) {
        check(&ctx, &[257, 131], &[131, 263], DType::F32, kernel, 3);
        check(&ctx, &[257, 132], &[132, 260], DType::F32, kernel, 4);
    }
}

#[test]
fn f16_inputs_accumulate_in_f32() {
    let Some(ctx) = common::ctx() else { return };
    if !ctx.profile().shader_f16 {
        eprintln!("adapter has no shader-f16; f16 matmul is covered by the error tests");
        return;
    }
    for kernel in kernels(&ctx) {
        for (i, &(m, n, k)) in [
            (1, 1, 1),
            (7, 13, 31),
            (65, 63, 15),
            (129, 127, 8),
            (33, 68, 200),
            (7, 8, 8),
            (129, 136, 40),
            (65, 256, 24),
        ]
        .iter()
        .enumerate()
        {
            check(&ctx, &[m, k], &[k, n], DType::F16, kernel, 50 + i as u64);
        }
    }
}

#[test]
fn batched_and_broadcast() {
    let Some(ctx) = common::ctx() else { return };
    let cases: [(&[usize], &[usize]); 6] = [
        (&[3, 17, 9], &[3, 9, 11]),
        (&[3, 17, 9], &[9, 11]),
        (&[17, 9], &[4, 9, 11]),
        (&[2, 1, 5, 7], &[3, 7, 4]),
        (&[2, 3, 33, 65], &[2, 3, 65, 31]),
        (&[1, 3, 5, 7], &[2, 1, 7, 70]),
    ];
    for kernel in kernels(&ctx) {
        for (i, (a, b)) in cases.iter().enumerate() {
            check(&ctx, a, b, DType::F32, kernel, 100 + i as u64);
        }
    }
}

/// Batches of A over a shared B fold into one taller product (same
/// memory, one kernel choice for all rows); anything else stays batched.
/// Both give NumPy's results, batches of single rows included.
#[test]
fn batches_over_a_shared_weight_fold_into_rows() {
    let folded = MatmulShape::new(&[3, 17, 9], &[9, 11]).unwrap().folded();
    assert_eq!(
        (folded.m, folded.batch, folded.out_shape.clone()),
        (51, [1, 1], vec![3, 17, 11])
    );
    let two = MatmulShape::new(&[2, 3, 5, 7], &[7, 4]).unwrap().folded();
    assert_eq!((two.m, two.batch), (30, [1, 1]));
    // B per batch, A broadcast over a batch dimension, A transposed: not folded.
    for shape in [
        MatmulShape::new(&[3, 17, 9], &[3, 9, 11]).unwrap(),
        MatmulShape::new(&[2, 1, 5, 7], &[3, 7, 4]).unwrap(),
        MatmulShape::with_transposes(&[3, 9, 17], &[9, 11], true, false).unwrap(),
    ] {
        assert_eq!(shape.clone().folded(), shape);
    }
    let Some(ctx) = common::ctx() else { return };
    for (i, (a, b)) in [
        (&[4, 1, 9][..], &[9, 11][..]),
        (&[2, 3, 5, 7], &[7, 4]),
        (&[3, 7, 13], &[13, 5]),
    ]
    .into_iter()
    .enumerate()
    {
        check(&ctx, a, b, DType::F32, None, 300 + i as u64);
    }
}

#[test]
fn vector_operands_follow_numpy() {
    let Some(ctx) = common::ctx() else { return };
    for (a, b, out) in [
        (&[5][..], &[5, 3][..], &[3][..]),
        (&[4, 5][..], &[5][..], &[4][..]),
        (&[6][..], &[6][..], &[][..]),
        (&[2, 4, 5][..], &[5][..], &[2, 4][..]),
    ] {
        assert_eq!(MatmulShape::new(a, b).unwrap().out_shape, out);
        check(&ctx, a, b, DType::F32, None, 7);
    }
}

#[test]
fn zero_sized_dimensions_give_numpy_results() {
    let Some(ctx) = common::ctx() else { return };
    for (a, b, out) in [
        (&[0, 5][..], &[5, 3][..], &[0, 3][..]),
        (&[4, 5][..], &[5, 0][..], &[4, 0][..]),
        (&[0, 4, 5][..], &[0, 5, 3][..], &[0, 4, 3][..]),
    ] {
        let ta = ctx.zeros(a, DType::F32).unwrap();
        let tb = ctx.zeros(b, DType::F32).unwrap();
        let c = ctx.matmul(&ta, &tb).unwrap();
        assert_eq!(c.shape(), out);
        assert!(c.to_vec_blocking::<f32>().unwrap().is_empty());
    }
    // K = 0: a sum over nothing, so zeros, also over a poisoned output.
    let ta = ctx.zeros([4, 0], DType::F32).unwrap();
    let tb = ctx.zeros([0, 3], DType::F32).unwrap();
    let out = ctx.full([4, 3], f32::NAN, DType::F32).unwrap();
    ctx.matmul_into(&ta, &tb, &out).unwrap();
    assert_eq!(out.to_vec_blocking::<f32>().unwrap(), vec![0.0; 12]);
    let c = ctx.matmul(&ta, &tb).unwrap();
    assert_eq!(c.to_vec_blocking::<f32>().unwrap(), vec![0.0; 12]);
}

#[test]
fn plans_rerun_deterministically() {
    let Some(ctx) = common::ctx() else { return };
    let a = ctx
        .rand_uniform([70, 45], -1.0, 1.0, DType::F32, 1)
        .unwrap();
    let b = ctx
        .rand_uniform([45, 90], -1.0, 1.0, DType::F32, 2)
        .unwrap();
    let plan = ctx
        .matmul_plan(&a, &b, None, &MatmulOptions::default())
        .unwrap();
    plan.run().unwrap();
    let first = plan.output().to_vec_blocking::<f32>().unwrap();
    ctx.fill(plan.output(), f32::NAN).unwrap();
    plan.run().unwrap();
    assert_eq!(first, plan.output().to_vec_blocking::<f32>().unwrap());
    assert_eq!(plan.flops(), 2 * 70 * 45 * 90);
}

#[test]
fn matrix_vector_shapes() {
    let Some(ctx) = common::ctx() else { return };
    // N and B's strides multiples of 16 bytes: the one-dispatch kernel (64
    // and 16 columns, 4099 rows with a tail, 264 batched); other even N or
    // rows over 16 KiB: the split kernel reading column pairs (several
    // workgroups of 256 columns, batched with even strides); odd N: one
    // column per load.
    let cases: [(&[usize], &[usize]); 16] = [
        (&[1, 129], &[129, 522]),
        (&[2, 1, 129], &[2, 129, 264]),
        (&[1, 517], &[517, 16]),
        (&[1, 33], &[33, 8200]),
        (&[2, 1, 129], &[2, 129, 258]),
        (&[1, 13], &[13, 7]),
        (&[1, 1000], &[1000, 300]),
        (&[1, 4099], &[4099, 64]),
        (&[1, 65], &[65, 4099]),
        (&[7, 13], &[13, 1]),
        (&[300, 1000], &[1000, 1]),
        (&[129, 4099], &[4099, 1]),
        (&[3, 1, 257], &[3, 257, 131]),
        (&[2, 3, 70, 257], &[257, 1]),
        (&[4099], &[4099]),
        (&[257], &[257, 129]),
    ];
    for kernel in [None, Some(MatmulKernel::Gemv)] {
        for (i, (a, b)) in cases.iter().enumerate() {
            check(&ctx, a, b, DType::F32, kernel, 200 + i as u64);
            if ctx.profile().shader_f16 {
                check(&ctx, a, b, DType::F16, kernel, 300 + i as u64);
            }
        }
    }
    // The dispatcher sends these shapes to the GEMV kernel.
    let c = ctx.explain_matmul(DType::F32, 1, 4096, 4096, 1).unwrap();
    assert_eq!(c.kernel(), MatmulKernel::Gemv, "{c}");
    let c = ctx.explain_matmul(DType::F32, 4096, 1, 4096, 1).unwrap();
    assert_eq!(c.kernel(), MatmulKernel::Gemv, "{c}");
}

#[test]
fn few_rows_of_x_read_the_weight_once() {
    let Some(ctx) = common::ctx() else { return };
    // 2 to 8 rows against even N: vecmat_rows. N past one workgroup's 256
    // columns and off its second pair block (258, 514, 1030); K prime and
    // long enough for several splits (4099); x batched over a shared
    // weight, and both batched.
    let cases: [(&[usize], &[usize]); 9] = [
        (&[2, 129], &[129, 522]),
        (&[3, 257], &[257, 258]),
        (&[4, 4099], &[4099, 64]),
        (&[5, 31], &[31, 1030]),
        (&[6, 64], &[64, 2]),
        (&[7, 13], &[13, 514]),
        (&[8, 1000], &[1000, 300]),
        (&[3, 2, 67], &[67, 130]),
        (&[2, 4, 33], &[2, 33, 260]),
    ];
    for kernel in [None, Some(MatmulKernel::Gemv)] {
        for (i, (a, b)) in cases.iter().enumerate() {
            check(&ctx, a, b, DType::F32, kernel, 400 + i as u64);
            if ctx.profile().shader_f16 {
                check(&ctx, a, b, DType::F16, kernel, 500 + i as u64);
            }
        }
    }
    // The dispatcher's pick, and the rows an epilogue sees: bias per
    // column, ReLU, then a residual per (row, column).
    for m in 2..=8 {
        let c = ctx.explain_matmul(DType::F32, m, 4096, 4096, 1).unwrap();
        assert_eq!(c.kernel(), MatmulKernel::Gemv, "{c}");
    }
    let c = ctx.explain_matmul(DType::F32, 9, 4096, 4096, 1).unwrap();
    assert_ne!(c.kernel(), MatmulKernel::Gemv, "{c}");
    let c = ctx.explain_matmul(DType::F32, 4, 4095, 4096, 1).unwrap();
    assert_ne!(c.kernel(), MatmulKernel::Gemv, "odd N: {c}");
    let (m, k, n) = (5, 77, 262);
    let av = common::random(m * k, 31);
    let bv = common::random(k * n, 32);
    let biasv = common::random(n, 33);
    let resv = common::random(m * n, 34);
    let a = ctx.tensor(&av, [m, k]).unwrap();
    let b = ctx.tensor(&bv, [k, n]).unwrap();
    let bias = ctx.tensor(&biasv, [n]).unwrap();
    let res = ctx.tensor(&resv, [m, n]).unwrap();
    let out = ctx.full([m, n], f32::NAN, DType::F32).unwrap();
    let epilogue = wgtile::Epilogue::new().bias(&bias).residual(&res).relu();
    let plan = ctx
        .matmul_plan_with(&a, &b, Some(&out), &MatmulOptions::default(), &epilogue)
        .unwrap();
    assert!(plan.label().contains("5 rows at once"), "{}", plan.label());
    plan.run().unwrap();
    let (c, mag) = common::matmul_ref(&av, &bv, m, n, k, &[(0, 0)]);
    let want: Vec<f64> = c
        .iter()
        .enumerate()
        .map(|(i, v)| (v + f64::from(biasv[i % n])).max(0.0) + f64::from(resv[i]))
        .collect();
    common::assert_close(
        "5 rows, relu(bias) + residual",
        &out.to_vec_blocking::<f32>().unwrap(),
        &want,
        |i| common::matmul_tolerance(DType::F32, k, want[i], mag[i]) + 1e-7,
    );
}

/// `data` stored as `[.., rows, cols]` returned as `[.., cols, rows]`.
fn transpose_batched(data: &[f32], dims: &[usize]) -> Vec<f32> {
    let (rows, cols) = (dims[dims.len() - 2], dims[dims.len() - 1]);
    let mut out = vec![0.0; data.len()];
    for (src, dst) in data.chunks(rows * cols).zip(out.chunks_mut(rows * cols)) {
        for r in 0..rows {
            for c in 0..cols {
                dst[c * rows + r] = src[r * cols + c];
            }
        }
    }
    out
}

#[test]
fn transposed_operands_in_place() {
    let Some(ctx) = common::ctx() else { return };
    // (A as stored, B as stored, transpose A, transpose B)
    let cases: [(&[usize], &[usize], bool, bool); 10] = [
        (&[31, 13], &[31, 7], true, false),
        (&[13, 31], &[7, 31], false, true),
        (&[31, 13], &[7, 31], true, true),
        (&[129, 65], &[127, 129], true, true),
        (&[3, 40, 33], &[3, 70, 40], true, true),
        (&[2, 65, 17], &[65, 63], true, false),
        (&[1, 300], &[129, 300], false, true),
        (&[64, 36], &[68, 64], true, true),
        (&[3, 40, 132], &[40, 68], true, false),
        (&[2, 65, 44], &[2, 132, 44], false, true),
    ];
    let kernels = [
        None,
        Some(MatmulKernel::naive_for(ctx.profile())),
        Some(MatmulKernel::Tiled {
            tile: TILE_CONFIGS[0],
            vec4: false,
        }),
        Some(MatmulKernel::Tiled {
            tile: TILE_CONFIGS[2],
            vec4: false,
        }),
        Some(MatmulKernel::Tiled {
            tile: TILE_CONFIGS[1],
            vec4: true,
        }),
        Some(MatmulKernel::SplitK {
            tile: TILE_CONFIGS[2],
            vec4: true,
            splits: 2,
        }),
        // CPU adapters with subgroups of 8 (lavapipe); the vec4 variant
        // refuses transposed operands and is skipped.
        Some(MatmulKernel::Broadcast { vec4: false }),
        Some(MatmulKernel::Broadcast { vec4: true }),
    ];
    for kernel in kernels {
        if kernel.is_some_and(|k| !k.fits(ctx.profile())) {
            continue;
        }
        for (i, &(a_dims, b_dims, ta, tb)) in cases.iter().enumerate() {
            transposed_case(
                &ctx,
                (a_dims, b_dims),
                (ta, tb),
                kernel,
                DType::F32,
                i as u64,
            );
        }
    }
    // vec4 kernels refuse transposed operands whose stored rows are not
    // 16-byte aligned: A^T stored [8, 6] has rows of M = 6.
    let a = ctx.zeros([8, 6], DType::F32).unwrap();
    let b = ctx.zeros([8, 8], DType::F32).unwrap();
    let vec4 = MatmulOptions::with_kernel(MatmulKernel::Tiled {
        tile: TILE_CONFIGS[0],
        vec4: true,
    })
    .transposed(true, false);
    assert!(matches!(
        ctx.matmul_plan(&a, &b, None, &vec4),
        Err(wgtile::Error::InvalidArgument(_))
    ));
    let v = ctx.zeros([8], DType::F32).unwrap();
    assert!(matches!(
        ctx.matmul_plan(
            &v,
            &a,
            None,
            &MatmulOptions::default().transposed(true, false)
        ),
        Err(wgtile::Error::InvalidArgument(_))
    ));
}

/// One product with operands stored transposed as flagged, against the f64
/// reference on the logical operands; skipped when `kernel` refuses the layout.
fn transposed_case(
    ctx: &Context,
    (a_dims, b_dims): (&[usize], &[usize]),
    (ta, tb): (bool, bool),
    kernel: Option<MatmulKernel>,
    dtype: DType,
    seed: u64,
) {
    let shape = MatmulShape::with_transposes(a_dims, b_dims, ta, tb).unwrap();
    let (m, n, k) = (shape.m, shape.n, shape.k);
    if kernel.is_some_and(|kr| !kr.accepts_layout(dtype, m, n, k, ta, tb)) {
        return; // refused with InvalidArgument, checked by the callers
    }
    let a_len: usize = a_dims.iter().product();
    let b_len: usize = b_dims.iter().product();
    let (a, ha) = common::upload(ctx, &common::random(a_len, 70 + seed), a_dims, dtype);
    let (b, hb) = common::upload(ctx, &common::random(b_len, 80 + seed), b_dims, dtype);
    let out = ctx.full(&shape.out_shape, f32::NAN, dtype).unwrap();
    let options = MatmulOptions {
        kernel,
        ..Default::default()
    }
    .transposed(ta, tb);
    let plan = ctx.matmul_plan(&a, &b, Some(&out), &options).unwrap();
    plan.run().unwrap();
    let got = out.to_f32_vec_blocking().unwrap();
    // The reference on the logical (row-major) operands.
    let la = if ta {
        transpose_batched(&ha, a_dims)
    } else {
        ha.clone()
    };
    let lb = if tb {
        transpose_batched(&hb, b_dims)
    } else {
        hb.clone()
    };
    let offsets = common::batch_offsets(&shape);
    let (want, mag) = common::matmul_ref(&la, &lb, shape.m, shape.n, shape.k, &offsets);
    let what = format!(
        "{a_dims:?}^{ta} x {b_dims:?}^{tb} {dtype} [{}]",
        plan.label()
    );
    let split = plan.label().contains("f32 as f16 pairs");
    common::assert_close(&what, &got, &want, |j| {
        common::matmul_tolerance(dtype, shape.k, want[j], mag[j]) + split_slack(split, mag[j])
    });
}

#[test]
fn transposed_operands_on_tensor_cores() {
    let Some(ctx) = common::ctx() else { return };
    let coops: Vec<MatmulKernel> = wgtile::tune::COOP_CONFIGS
        .into_iter()
        .filter_map(|c| MatmulKernel::coop_for(ctx.profile(), c))
        .collect();
    if coops.is_empty() {
        eprintln!("adapter has no 16x16 f16 cooperative matrices: covered by naga validation only");
        return;
    }
    // Stored rows multiples of 8 halves (16-byte loads) and not (word
    // loads); K past a BK step (40, 300); batched and broadcast; edges.
    let cases: [(&[usize], &[usize], bool, bool); 9] = [
        (&[31, 13], &[31, 7], true, false),
        (&[13, 31], &[7, 31], false, true),
        (&[129, 65], &[127, 129], true, true),
        (&[3, 40, 136], &[3, 72, 40], true, true),
        (&[2, 65, 17], &[65, 63], true, false),
        (&[300, 264], &[200, 300], true, true),
        (&[2, 264, 48], &[2, 136, 48], false, true),
        (&[40, 264], &[40, 136], true, false),
        (&[1, 300], &[129, 300], false, true),
    ];
    for kernel in coops.into_iter().map(Some).chain([None]) {
        for (i, &(a_dims, b_dims, ta, tb)) in cases.iter().enumerate() {
            transposed_case(
                &ctx,
                (a_dims, b_dims),
                (ta, tb),
                kernel,
                DType::F16,
                100 + i as u64,
            );
        }
    }
    // The dispatcher sends transposed f16 to tensor cores.
    let a = ctx.zeros([64, 128], DType::F16).unwrap();
    let b = ctx.zeros([256, 64], DType::F16).unwrap();
    let plan = ctx
        .matmul_plan(
            &a,
            &b,
            None,
            &MatmulOptions::default().transposed(true, true),
        )
        .unwrap();
    assert!(plan.label().contains("coop"), "{}", plan.label());
}

#[test]
fn split_k_long_contractions() {
    let Some(ctx) = common::ctx() else { return };
    let cases: [(&[usize], &[usize]); 4] = [
        (&[33, 1000], &[1000, 65]),
        (&[7, 2051], &[2051, 12]),
        (&[2, 17, 600], &[600, 40]),
        (&[64, 1024], &[1024, 64]),
    ];
    for splits in [2, 3, 7] {
        for vec4 in [false, true] {
            let kernel = MatmulKernel::SplitK {
                tile: TILE_CONFIGS[1],
                vec4,
                splits,
            };
            for (i, (a, b)) in cases.iter().enumerate() {
                check(&ctx, a, b, DType::F32, Some(kernel), 400 + i as u64);
            }
        }
    }
    // The dispatcher splits K when M x N gives too few tiles for the adapter.
    let p = wgtile::AdapterProfile::fake_gpu()
        .named("synthetic")
        .with_units(132);
    let c = wgtile::tune::choose_matmul(&p, DType::F32, 128, 128, 65536, 1);
    assert!(
        matches!(c.kernel, MatmulKernel::SplitK { splits: 16, .. }),
        "{c}"
    );
    let c = wgtile::tune::choose_matmul(&p, DType::F32, 128, 128, 600, 1);
    assert!(matches!(c.kernel, MatmulKernel::Tiled { .. }), "{c}");
}

#[test]
fn f32_on_tensor_cores_only_when_asked() {
    let Some(ctx) = common::ctx() else { return };
    let coop = wgtile::tune::COOP_CONFIGS
        .into_iter()
        .find_map(|c| MatmulKernel::coop_for(ctx.profile(), c));
    // Odd K and N (the word-load variant on tensor cores) and aligned ones.
    for (i, &(m, n, k)) in [(67usize, 45usize, 129usize), (64, 48, 96)]
        .iter()
        .enumerate()
    {
        let (a, ha) = common::upload(
            &ctx,
            &common::random(m * k, 40 + i as u64),
            &[m, k],
            DType::F32,
        );
        let (b, hb) = common::upload(
            &ctx,
            &common::random(k * n, 50 + i as u64),
            &[k, n],
            DType::F32,
        );
        // By default f32 is never rounded to f16 (and these problems are
        // below the split's size threshold)...
        let plan = ctx
            .matmul_plan(&a, &b, None, &MatmulOptions::default())
            .unwrap();
        assert!(!plan.label().contains("coop"), "{}", plan.label());
        // ...and forcing the kernel without the option is refused (the
        // split form, f32-accurate, is not).
        if let Some(coop) = coop {
            let refused = ctx.matmul_plan(&a, &b, None, &MatmulOptions::with_kernel(coop));
            assert!(matches!(refused, Err(wgtile::Error::InvalidArgument(_))));
        }
        if let Some(split) =
            wgtile::tune::coop_split_for_shape(ctx.profile(), (4096, 4096, 4096), 1, false)
        {
            let plan = ctx.matmul_plan(&a, &b, None, &MatmulOptions::with_kernel(split));
            assert!(plan.is_ok(), "{:?}", plan.map(|p| p.label().to_string()));
        }
        let options = MatmulOptions {
            reduced_precision: true,
            ..Default::default()
        };
        let out = ctx.full([m, n], f32::NAN, DType::F32).unwrap();
        let plan = ctx.matmul_plan(&a, &b, Some(&out), &options).unwrap();
        plan.run().unwrap();
        let got = out.to_vec_blocking::<f32>().unwrap();
        let on_tensor_cores = plan.label().contains("coop");
        assert_eq!(on_tensor_cores, coop.is_some(), "{}", plan.label());
        // On tensor cores the products are those of the f16-rounded inputs,
        // accumulated in f32; elsewhere the f32 kernels run unchanged.
        let round = |v: &[f32]| -> Vec<f32> {
            v.iter()
                .map(|&x| wgtile::f16::from_f32(x).to_f32())
                .collect()
        };
        let (ra, rb) = if on_tensor_cores {
            (round(&ha), round(&hb))
        } else {
            (ha.clone(), hb.clone())
        };
        let (want, mag) = common::matmul_ref(&ra, &rb, m, n, k, &[(0, 0)]);
        common::assert_close(
            &format!("reduced precision [{}]", plan.label()),
            &got,
            &want,
            |j| common::matmul_tolerance(DType::F32, k, want[j], mag[j]),
        );
    }
}

#[test]
fn output_dtype_differs_from_the_operands() {
    // f16 operands with an f32 result (no rounding of the accumulators to
    // f16) and f32 operands with an f16 result, on every kernel.
    let Some(ctx) = common::ctx() else { return };
    if !ctx.profile().shader_f16 {
        return;
    }
    for (i, (a_shape, b_shape)) in [
        (&[70usize, 133][..], &[133usize, 41][..]),
        (&[1, 300][..], &[300, 64][..]),
        (&[29, 257][..], &[257][..]),
        (&[2, 9, 600][..], &[600, 12][..]),
    ]
    .into_iter()
    .enumerate()
    {
        let shape = MatmulShape::new(a_shape, b_shape).unwrap();
        let (m, n, k) = (shape.m, shape.n, shape.k);
        for (dtype, out_dtype) in [(DType::F16, DType::F32), (DType::F32, DType::F16)] {
            let a_len: usize = a_shape.iter().product();
            let b_len: usize = b_shape.iter().product();
            let (a, ha) =
                common::upload(&ctx, &common::random(a_len, 60 + i as u64), a_shape, dtype);
            let (b, hb) =
                common::upload(&ctx, &common::random(b_len, 70 + i as u64), b_shape, dtype);
            let offsets = common::batch_offsets(&shape);
            let (want, mag) = common::matmul_ref(&ha, &hb, m, n, k, &offsets);
            for kernel in kernels(&ctx) {
                if kernel.is_some_and(|kr| !kr.accepts(dtype, m, n, k)) {
                    continue;
                }
                // The output type is the store path's business: one naive
                // workgroup shape and one tile shape per register-tile core
                // are enough, and the kernels that are slow to compile on
                // llvmpipe (the subgroup-broadcast and 16x16 register-tile
                // cores, 4-12 s each) take each direction with one of their
                // two load paths (each variant is another pipeline).
                let f16_in = dtype == DType::F16;
                let redundant = match kernel {
                    Some(MatmulKernel::Naive { wg_x, wg_y }) => (wg_x, wg_y) != NAIVE_WORKGROUPS[0],
                    Some(MatmulKernel::Tiled { tile, vec4 }) => {
                        TILE_CONFIGS[1..].contains(&tile)
                            || (wgtile::tune::CPU_TILE_CONFIGS.contains(&tile) && vec4 == f16_in)
                    }
                    Some(MatmulKernel::Broadcast { vec4 }) => vec4 == f16_in,
                    _ => false,
                };
                if redundant {
                    continue;
                }
                let options = MatmulOptions {
                    kernel,
                    out_dtype: Some(out_dtype),
                    ..Default::default()
                };
                let out = ctx.full(&shape.out_shape, f32::NAN, out_dtype).unwrap();
                let plan = ctx.matmul_plan(&a, &b, Some(&out), &options).unwrap();
                plan.run().unwrap();
                let got = out.to_f32_vec_blocking().unwrap();
                // f16 x f16 products are exact in f32: an f32 result carries only
                // f32 accumulation error; an f16 result also its final rounding.
                common::assert_close(
                    &format!(
                        "{dtype} -> {out_dtype} {a_shape:?} x {b_shape:?} [{}]",
                        plan.label()
                    ),
                    &got,
                    &want,
                    |j| common::matmul_tolerance(out_dtype, k, want[j], mag[j]),
                );
            }
        }
    }
    // The output tensor must have the requested dtype.
    let (a, _) = common::upload(&ctx, &common::random(6, 1), &[2, 3], DType::F16);
    let (b, _) = common::upload(&ctx, &common::random(12, 2), &[3, 4], DType::F16);
    let wrong = ctx.full([2, 4], 0.0, DType::F16).unwrap();
    let options = MatmulOptions {
        out_dtype: Some(DType::F32),
        ..Default::default()
    };
    assert!(matches!(
        ctx.matmul_plan(&a, &b, Some(&wrong), &options),
        Err(wgtile::Error::DTypeMismatch { .. })
    ));
}

/// The subgroup-broadcast CPU kernel (BROADCAST_ROWS x 64 blocks, 32-deep K steps) at
/// its own edges: blocks and K steps +-1, a K shorter than one step, batches
/// with broadcasting, and every epilogue term; both load paths.
#[test]
fn broadcast_kernel_block_edges_and_epilogue() {
    let Some(ctx) = common::ctx() else { return };
    let kernels: Vec<MatmulKernel> = [false, true]
        .into_iter()
        .map(|vec4| MatmulKernel::Broadcast { vec4 })
        .filter(|k| k.fits(ctx.profile()))
        .collect();
    if kernels.is_empty() {
        eprintln!(
            "adapter has no subgroups of 8: the broadcast kernel is covered by naga validation only"
        );
        return;
    }
    // Row blocks of R = BROADCAST_ROWS, column blocks of 64, K steps of 32:
    // every edge +-1, several blocks, batches with broadcasting.
    assert_eq!(
        wgtile::tune::BROADCAST_COLS,
        64,
        "update the edge shapes below"
    );
    let r = wgtile::tune::BROADCAST_ROWS as usize;
    let cases: Vec<(Vec<usize>, Vec<usize>)> = vec![
        (vec![r - 1, 31], vec![31, 65]),
        (vec![r, 32], vec![32, 64]),
        (vec![r + 1, 33], vec![33, 63]),
        (vec![2 * r + 1, 95], vec![95, 127]),
        (vec![2 * r - 1, 96], vec![96, 128]),
        (vec![r + 5, 3], vec![3, 68]),
        (vec![2, r + 1, 36], vec![36, 68]),
        (vec![3, 1, 40], vec![3, 40, 67]),
        (vec![2, 2, 31, 64], vec![2, 1, 64, 33]),
    ];
    for kernel in &kernels {
        for (i, (a, b)) in cases.iter().enumerate() {
            check(&ctx, a, b, DType::F32, Some(*kernel), 200 + i as u64);
        }
    }
    // The fused epilogue (scale, bias, GELU, residual) on a shape with a
    // partial block in M, N and K, batched.
    let (a_shape, b_shape): (&[usize], &[usize]) = (&[2, 67, 40], &[40, 72]);
    let shape = MatmulShape::new(a_shape, b_shape).unwrap();
    let (m, n, k) = (shape.m, shape.n, shape.k);
    let (a, ha) = common::upload(&ctx, &common::random(2 * m * k, 300), a_shape, DType::F32);
    let (b, hb) = common::upload(&ctx, &common::random(k * n, 301), b_shape, DType::F32);
    let (bias, hbias) = common::upload(&ctx, &common::random(n, 302), &[n], DType::F32);
    let (res, hres) = common::upload(
        &ctx,
        &common::random(2 * m * n, 303),
        &shape.out_shape,
        DType::F32,
    );
    let epilogue = wgtile::Epilogue::new()
        .scale(-0.5)
        .bias(&bias)
        .activation(wgtile::Activation::GeluTanh)
        .residual(&res);
    let (prod, mag) = common::matmul_ref(&ha, &hb, m, n, k, &common::batch_offsets(&shape));
    let want: Vec<f64> = prod
        .iter()
        .enumerate()
        .map(|(i, &p)| {
            let v = -0.5 * p + f64::from(hbias[i % n]);
            let u = (2.0 / std::f64::consts::PI).sqrt() * (v + 0.044715 * v * v * v);
            0.5 * v * (1.0 + u.tanh()) + f64::from(hres[i])
        })
        .collect();
    for kernel in kernels {
        let out = ctx.full(&shape.out_shape, f32::NAN, DType::F32).unwrap();
        let plan = ctx
            .matmul_plan_with(
                &a,
                &b,
                Some(&out),
                &MatmulOptions::with_kernel(kernel),
                &epilogue,
            )
            .unwrap();
        plan.run().unwrap();
        let got = out.to_f32_vec_blocking().unwrap();
        common::assert_close(&format!("epilogue [{}]", plan.label()), &got, &want, |i| {
            // GELU's slope is at most 1.13; a few f32 ulps for its own rounding.
            0.6 * common::matmul_tolerance(DType::F32, k, prod[i], mag[i])
                + 8.0 * 2f64.powi(-24) * (want[i].abs() + 1.0)
        });
    }
}

/// Random values times `scale`.
fn scaled(n: usize, seed: u64, scale: f32) -> Vec<f32> {
    common::random(n, seed)
        .into_iter()
        .map(|x| x * scale)
        .collect()
}

/// The f32 split kernel on tensor cores (adapters with cooperative
/// matrices): the dispatcher's default for large f32 problems (never with
/// `MatmulOptions::split_f32 = Some(false)`), every split
/// layout on odd shapes, transposed and batched operands, and magnitudes f16
/// cannot hold (A up to 1e5, past 65504; B down to 1e-5, where f16's
/// subnormals begin): f32's accumulation bound plus 2^-19 per product.
#[test]
fn f32_split_on_tensor_cores() {
    let Some(ctx) = common::ctx() else { return };
    let splits: Vec<MatmulKernel> = wgtile::tune::COOP_SPLIT_CONFIGS
        .into_iter()
        .filter_map(|c| MatmulKernel::coop_split_for(ctx.profile(), c))
        .collect();
    if splits.is_empty() {
        eprintln!("f32_split_on_tensor_cores: skipped, no tensor cores");
        return;
    }
    // The plan `options` give for A [m, k] x B [k, n] (values in [-sa, sa]
    // and [-sb, sb]), checked against f64; returns the plan's label.
    let check_split = |(m, n, k): (usize, usize, usize),
                       (sa, sb): (f32, f32),
                       options: &MatmulOptions| {
        let (a, ha) = common::upload(&ctx, &scaled(m * k, 70, sa), &[m, k], DType::F32);
        let (b, hb) = common::upload(&ctx, &scaled(k * n, 71, sb), &[k, n], DType::F32);
        let out = ctx.full([m, n], f32::NAN, DType::F32).unwrap();
        let plan = ctx.matmul_plan(&a, &b, Some(&out), options).unwrap();
        assert!(
            plan.label().contains("f32 as f16 pairs"),
            "{}",
            plan.label()
        );
        plan.run().unwrap();
        let got = out.to_vec_blocking::<f32>().unwrap();
        let (want, mag) = common::matmul_ref(&ha, &hb, m, n, k, &[(0, 0)]);
        common::assert_close(
            &format!("{m}x{n}x{k} scales {sa} {sb} [{}]", plan.label()),
            &got,
            &want,
            |j| {
                common::matmul_tolerance(DType::F32, k, want[j], mag[j]) + split_slack(true, mag[j])
            },
        );
        plan.label().to_string()
    };
    let run = |m: usize, n: usize, k: usize, sa: f32, sb: f32, kernel: Option<MatmulKernel>| {
        let (a, _) = common::upload(&ctx, &scaled(m * k, 70, sa), &[m, k], DType::F32);
        let (b, _) = common::upload(&ctx, &scaled(k * n, 71, sb), &[k, n], DType::F32);
        // Never when turned off; by default from the size threshold on.
        let off = MatmulOptions {
            split_f32: Some(false),
            ..Default::default()
        };
        let plain = ctx.matmul_plan(&a, &b, None, &off).unwrap();
        assert!(!plain.label().contains("coop"), "{}", plain.label());
        let auto = ctx
            .matmul_plan(&a, &b, None, &MatmulOptions::default())
            .unwrap();
        let big = (m * n * k) as u64 >= wgtile::tune::COOP_SPLIT_MIN_MACS
            && k >= wgtile::tune::COOP_SPLIT_MIN_K;
        assert_eq!(
            auto.label().contains("f32 as f16 pairs"),
            big,
            "{}",
            auto.label()
        );
        let options = MatmulOptions {
            kernel,
            split_f32: Some(true),
            ..Default::default()
        };
        check_split((m, n, k), (sa, sb), &options);
    };
    // f16 operands never take the f32 split kernel (the f16 one instead).
    let (a16, _) = common::upload(
        &ctx,
        &scaled(1024 * 1024, 72, 1.0),
        &[1024, 1024],
        DType::F16,
    );
    let f16 = ctx
        .matmul_plan(&a16, &a16, None, &MatmulOptions::default())
        .unwrap();
    assert!(f16.label().contains("coop"), "{}", f16.label());
    assert!(!f16.label().contains("pairs"), "{}", f16.label());
    // The dispatcher's choice from COOP_SPLIT_MIN_MACS on, and below it
    // when asked.
    run(1024, 1024, 4096, 1.0, 1.0, None);
    run(100, 130, 70, 1.0, 1.0, None);
    for &kernel in &splits {
        for (m, n, k) in [(67, 45, 129), (129, 257, 300), (1, 33, 17), (256, 128, 64)] {
            run(m, n, k, 1.0, 1.0, Some(kernel));
        }
        run(129, 65, 200, 1e5, 1e-5, Some(kernel));
        run(64, 64, 96, 3e-20, 7e20, Some(kernel));
    }
    // The padding layer takes the split kernel too: rows not on 16 bytes
    // copied into rows of a multiple of 4 floats (by default from the size
    // threshold on; with both operands copied, K to a whole number of the
    // kernel's K steps, 16 or 32, which the kernel runs on zeros past
    // 1027), the last rows of C as f32 GEMVs (forced here; by default where
    // that saves a wave), and both.
    let padded = check_split((1025, 1031, 1027), (1.0, 1.0), &MatmulOptions::default());
    assert!(
        padded.contains("rows padded to K = 1040, N = 1032")
            || padded.contains("rows padded to K = 1056, N = 1032"),
        "{padded}"
    );
    for (shape, scales, rows, label) in [
        ((257, 131, 129), (1e5, 1e-5), 3, "last 3 rows as GEMVs"),
        ((1025, 1031, 1027), (1.0, 1.0), 1, "last row as a GEMV"),
    ] {
        let fringe = check_split(
            shape,
            scales,
            &MatmulOptions {
                split_f32: Some(true),
                fringe_rows: Some(rows),
                ..Default::default()
            },
        );
        assert!(fringe.contains(label), "{fringe}");
    }
    // Infinities and NaN, which the split cannot carry: the f32 fallback
    // the maxima pass arms gives IEEE's answer, through the plain plan, the
    // padding layer's copies and the rows apart.
    for ((m, n, k), fringe_rows, split) in [
        ((129, 257, 300), None, Some(true)),
        ((1025, 1031, 1027), None, None),
        ((257, 131, 129), Some(3), Some(true)),
    ] {
        let mut ha = scaled(m * k, 73, 1.0);
        ha[5 * k + 7] = f32::INFINITY;
        ha[(m - 1) * k + 2] = f32::NAN;
        let mut hb = scaled(k * n, 74, 1.0);
        hb[3 * n + n - 1] = f32::NEG_INFINITY;
        let a = ctx.tensor(&ha, [m, k]).unwrap();
        let b = ctx.tensor(&hb, [k, n]).unwrap();
        let out = ctx.full([m, n], 12345.0, DType::F32).unwrap();
        let options = MatmulOptions {
            split_f32: split,
            fringe_rows,
            ..Default::default()
        };
        let plan = ctx.matmul_plan(&a, &b, Some(&out), &options).unwrap();
        assert!(
            plan.label().contains("f32 as f16 pairs"),
            "{}",
            plan.label()
        );
        plan.run().unwrap();
        let (want, mag) = common::matmul_ref(&ha, &hb, m, n, k, &[(0, 0)]);
        assert_ieee_close(
            &format!("non-finite {m}x{n}x{k} [{}]", plan.label()),
            &out.to_vec_blocking::<f32>().unwrap(),
            &want,
            &mag,
            k,
        );
    }
    // Transposed and batched operands through the shared checks.
    let kernel = Some(splits[0]);
    check(&ctx, &[3, 67, 45], &[3, 45, 129], DType::F32, kernel, 80);
    check(
        &ctx,
        &[2, 1, 33, 70],
        &[1, 3, 70, 65],
        DType::F32,
        kernel,
        82,
    );
    for (ta, tb) in [(true, false), (false, true), (true, true)] {
        let a_dims: &[usize] = if ta { &[129, 67] } else { &[67, 129] };
        let b_dims: &[usize] = if tb { &[45, 129] } else { &[129, 45] };
        transposed_case(&ctx, (a_dims, b_dims), (ta, tb), kernel, DType::F32, 90);
    }
}

/// The split kernel's passes around it (on any adapter): the largest finite
/// |A| and |B| over the logical elements only, and the f32 CUDA-core
/// fallback they arm where an operand holds an infinity or NaN. Each case
/// plants the largest value where one path of the pass reads it (16-byte
/// words of rows that start on 16 bytes, the single loads of a row's tail,
/// unaligned rows, transposed and batched operands, padded rows) and
/// infinities and NaN that must not count; the output starts as a
/// sentinel, which stays where nothing is armed.
#[test]
fn split_maxima_over_logical_elements() {
    let Some(ctx) = common::ctx() else { return };
    // `values` with `big` at `at`, and `extra` elsewhere (left out by the pass).
    let planted = |n: usize, seed: u64, at: usize, big: f32, extra: &[(usize, f32)]| {
        let mut v = scaled(n, seed, 1.0);
        v[at] = big;
        for &(i, x) in extra {
            v[i] = x;
        }
        v
    };
    const SENTINEL: f32 = 12345.0;
    // The maxima; asserts the fallback stayed off and the output untouched.
    let maxima = |a: &wgtile::Tensor, b: &wgtile::Tensor, options: &MatmulOptions| {
        let shape = MatmulShape::with_transposes(
            a.shape(),
            b.shape(),
            options.transpose_a,
            options.transpose_b,
        )
        .unwrap();
        let dims = shape.out_shape;
        let out = ctx.full(&dims, SENTINEL, DType::F32).unwrap();
        let (maxima, armed) = ctx.split_passes(a, b, &out, options).unwrap();
        assert!(!armed, "finite operands armed the fallback");
        let got = out.to_vec_blocking::<f32>().unwrap();
        assert!(got.iter().all(|&x| x == SENTINEL), "the output was written");
        maxima
    };
    // A [67, 45]: rows of 45 floats (single loads), all finite.
    let ha = planted(67 * 45, 1, 66 * 45 + 44, 3.5, &[]);
    let a = ctx.tensor(&ha, [67, 45]).unwrap();
    // B [45, 36]: rows of 36 (9 words each), its largest |value| negative;
    // finite first, then with inf, NaN and -inf beside it.
    let b_finite = planted(45 * 36, 2, 17 * 36 + 9, -7.25, &[]);
    let b = ctx.tensor(&b_finite, [45, 36]).unwrap();
    assert_eq!(maxima(&a, &b, &MatmulOptions::default()), [3.5, 7.25]);
    let hb = planted(
        45 * 36,
        2,
        17 * 36 + 9,
        -7.25,
        &[
            (3, f32::INFINITY),
            (40, f32::NAN),
            (44 * 36 + 35, f32::NEG_INFINITY),
        ],
    );
    // Runs the passes on A [m, k] x B [k, n] holding non-finite values:
    // the fallback must run and give IEEE's answer; returns the maxima.
    let armed_case = |what: &str, (ha, hb): (&[f32], &[f32]), a_dims: &[usize], n: usize| {
        let k = a_dims[a_dims.len() - 1];
        let a = ctx.tensor(ha, a_dims).unwrap();
        let b = ctx.tensor(hb, [k, n]).unwrap();
        let shape = MatmulShape::new(a_dims, &[k, n]).unwrap();
        let out = ctx.full(&shape.out_shape, SENTINEL, DType::F32).unwrap();
        let (got_max, armed) = ctx
            .split_passes(&a, &b, &out, &MatmulOptions::default())
            .unwrap();
        assert!(armed, "{what}: the fallback was not armed");
        let offsets = common::batch_offsets(&shape);
        let (want, mag) = common::matmul_ref(ha, hb, shape.m, n, k, &offsets);
        let got = out.to_vec_blocking::<f32>().unwrap();
        assert_ieee_close(what, &got, &want, &mag, k);
        got_max
    };
    let maxima_seen = armed_case("B with inf, NaN, -inf", (&ha, &hb), &[67, 45], 36);
    assert_eq!(maxima_seen, [3.5, 7.25]);
    // A NaN in A alone (unaligned rows of 45, the single-load path) arms it.
    let ha_nan = planted(67 * 45, 1, 66 * 45 + 44, 3.5, &[(10 * 45 + 7, f32::NAN)]);
    armed_case("A with a NaN", (&ha_nan, &b_finite), &[67, 45], 36);
    // Rows of 70 floats padded to 72 (17 words and a tail of 2): the largest
    // value in the tail.
    let a_host = planted(33 * 70, 3, 20 * 70 + 69, -9.5, &[]);
    let a = ctx.tensor_padded(&a_host, [33, 70], 8).unwrap();
    assert_eq!(a.row_stride(), 72);
    let b = ctx
        .tensor(&planted(70 * 8, 4, 69 * 8 + 7, 2.25, &[]), [70, 8])
        .unwrap();
    assert_eq!(maxima(&a, &b, &MatmulOptions::default()), [9.5, 2.25]);
    // Batched A [3, 20, 16] (largest in the last batch) and A^T stored [16, 20].
    let a = ctx
        .tensor(
            &planted(3 * 20 * 16, 5, 2 * 320 + 7 * 16 + 3, 4.75, &[]),
            [3, 20, 16],
        )
        .unwrap();
    let b = ctx
        .tensor(&planted(16 * 12, 6, 5, 1.5, &[]), [16, 12])
        .unwrap();
    assert_eq!(maxima(&a, &b, &MatmulOptions::default()), [4.75, 1.5]);
    let at = ctx
        .tensor(&planted(16 * 20, 7, 15 * 20 + 19, 6.0, &[]), [16, 20])
        .unwrap();
    let options = MatmulOptions::default().transposed(true, false);
    assert_eq!(maxima(&at, &b, &options), [6.0, 1.5]);
    // Batched, an infinity in the middle batch: the fallback covers every
    // batch (the guarded kernel's grid covers all three).
    let ha = planted(
        3 * 20 * 16,
        5,
        2 * 320 + 7 * 16 + 3,
        4.75,
        &[(320 + 9 * 16 + 11, f32::INFINITY)],
    );
    let hb = planted(16 * 12, 6, 5, 1.5, &[]);
    let maxima_seen = armed_case("batched", (&ha, &hb), &[3, 20, 16], 12);
    assert_eq!(maxima_seen, [4.75, 1.5]);
}
