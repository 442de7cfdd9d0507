//! The padding layer: padded runs give the same results as unpadded ones (on
//! the f64 reference too), at 50257-like sizes, batched and broadcast; and the
//! cost model's decisions on synthetic adapters.

mod common;

use wgtile::{AdapterProfile, DType, MatmulKernel, MatmulOptions, MatmulShape, Padding, wgpu};

fn run(
    ctx: &wgtile::Context,
    a: &wgtile::Tensor,
    b: &wgtile::Tensor,
    padding: Padding,
) -> (Vec<f32>, String) {
    let shape = MatmulShape::new(a.shape(), b.shape()).unwrap();
    let out = ctx.full(&shape.out_shape, f32::NAN, a.dtype()).unwrap();
    let plan = ctx
        .matmul_plan(a, b, Some(&out), &MatmulOptions::with_padding(padding))
        .unwrap();
    plan.run().unwrap();
    (out.to_f32_vec_blocking().unwrap(), plan.label().to_string())
}

fn check(ctx: &wgtile::Context, a_shape: &[usize], b_shape: &[usize], dtype: DType, seed: u64) {
    let a_len: usize = a_shape.iter().product();
    let b_len: usize = b_shape.iter().product();
    let (a, ha) = common::upload(ctx, &common::random(a_len, seed), a_shape, dtype);
    let (b, hb) = common::upload(ctx, &common::random(b_len, seed + 1), b_shape, dtype);
    let (padded, label) = run(ctx, &a, &b, Padding::Always);
    let (raw, raw_label) = run(ctx, &a, &b, Padding::Never);
    let what = format!("{a_shape:?} x {b_shape:?} {dtype}");
    // The tensor-core kernel reads any row-major layout: nothing to pad.
    assert!(
        label.contains("padded") || raw_label.contains("coop"),
        "{what}: expected a padded plan, got {label}"
    );
    assert!(!raw_label.contains("padded"), "{what}: {raw_label}");
    // Same compute core, same summation order, zeros added exactly: equal values.
    if !label.contains("coop") {
        for (i, (p, r)) in padded.iter().zip(&raw).enumerate() {
            assert!(
                p == r,
                "{what}: element {i}: padded {p} vs unpadded {r} ({label})"
            );
        }
    }
    let shape = MatmulShape::new(a_shape, b_shape).unwrap();
    let offsets = common::batch_offsets(&shape);
    let (want, mag) = common::matmul_ref(&ha, &hb, shape.m, shape.n, shape.k, &offsets);
    common::assert_close(&format!("{what} [{label}]"), &padded, &want, |i| {
        common::matmul_tolerance(dtype, shape.k, want[i], mag[i])
    });
}

#[test]
fn padded_equals_unpadded_on_awkward_shapes() {
    let Some(ctx) = common::ctx() else { return };
    for (i, (a, b)) in [
        (&[37usize, 61][..], &[61usize, 53][..]),
        (&[65, 67], &[67, 129]),
        (&[3, 37, 61], &[61, 53]),
        (&[2, 1, 33, 45], &[3, 45, 35]),
        (&[2, 201][..], &[201, 301][..]),
    ]
    .into_iter()
    .enumerate()
    {
        check(&ctx, a, b, DType::F32, 10 + i as u64);
        if ctx.profile().shader_f16 {
            check(&ctx, a, b, DType::F16, 20 + i as u64);
        }
    }
}

#[test]
fn vocabulary_sized_output() {
    // The nanoGPT case: logits over a 50257-word vocabulary.
    let Some(ctx) = common::ctx() else { return };
    check(&ctx, &[5, 64], &[64, 50257], DType::F32, 3);
}

fn profile(gpu: bool) -> AdapterProfile {
    if gpu {
        common::with_tensor_cores(common::synthetic_profile(132, 1024, 48 << 10))
    } else {
        let mut p = common::synthetic_profile(2, 1024, 48 << 10);
        p.device_type = wgpu::DeviceType::Cpu;
        p
    }
}

#[test]
fn cost_model_decisions() {
    use wgtile::tune::pad::choose;
    let gpu = profile(true);
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
        matches!(p.kernel, wgtile::MatmulKernel::Tiled { .. }),
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
        matches!(p.kernel, wgtile::MatmulKernel::Tiled { vec4: true, .. }),
        "{p}"
    );
    // 1793 and 1028 in f16 on tensor cores: the coop kernel's word-load
    // variant reads any row-major layout, but at about 0.6x of its 16-byte
    // loads (H200, run 15), so copying the unaligned operands into rows of a
    // multiple of 8 halves pays (rows padded to 32 halves: 64 bytes)...
    let p = choose(&gpu, DType::F16, 1793, 1793, 1793, 1, Padding::Auto).unwrap();
    assert_eq!((p.k, p.n), (1824, 1824));
    assert!(matches!(p.kernel, wgtile::MatmulKernel::Coop { .. }), "{p}");
    assert!(!p.crop, "{p}");
    let p = choose(&gpu, DType::F16, 1024, 1028, 1024, 1, Padding::Auto).unwrap();
    assert_eq!((p.k, p.n), (1024, 1056));
    // A dimension already on 16 bytes is left alone (N = 1032).
    let p = choose(&gpu, DType::F16, 1024, 1032, 1025, 1, Padding::Auto).unwrap();
    assert_eq!((p.k, p.n), (1056, 1032));
    // ...and without padding the dispatcher still takes tensor cores.
    let c = wgtile::tune::choose_matmul(&gpu, DType::F16, 1793, 1793, 1793, 1);
    assert!(matches!(c.kernel, wgtile::MatmulKernel::Coop { .. }), "{c}");
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
        wgtile::tune::pad::fringe_rows(&profile(false), tiled.kernel, 4097, 4097, 1),
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
    assert_eq!(wgtile::tune::pad::fringe_rows(&gpu, coop, 4097, 4097, 1), 1);
    assert_eq!(wgtile::tune::pad::fringe_rows(&gpu, coop, 4097, 4097, 3), 0);
}

#[test]
fn split_kernel_padding_decisions() {
    use wgtile::tune::pad::choose_for;
    let gpu = profile(true);
    let split = |(m, n, k)| {
        wgtile::tune::coop_split_for_shape(&gpu, (m, n, k), 1, false).expect("tensor cores")
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
    let small = wgtile::tune::coop_split_for_shape(&gpu, (67, 45, 129), 1, true).unwrap();
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

/// How a plan's label names `rows` rows of C computed apart as GEMVs.
fn rows_label(rows: usize) -> String {
    if rows == 1 {
        "last row as a GEMV".into()
    } else {
        format!("last {rows} rows as GEMVs")
    }
}

/// Random A [m, k] and B [k, n] (device and host copies) and a poisoned C.
fn operands(
    ctx: &wgtile::Context,
    (m, k, n): (usize, usize, usize),
    dtype: DType,
    seed: u64,
) -> (
    wgtile::Tensor,
    Vec<f32>,
    wgtile::Tensor,
    Vec<f32>,
    wgtile::Tensor,
) {
    let (a, ha) = common::upload(ctx, &common::random(m * k, seed), &[m, k], dtype);
    let (b, hb) = common::upload(ctx, &common::random(k * n, seed + 1), &[k, n], dtype);
    let out = ctx.full([m, n], f32::NAN, dtype).unwrap();
    (a, ha, b, hb, out)
}

/// The padding layer's last-row split, forced on any adapter (on the GPU
/// the wave rule picks it for the tensor-core kernel): the kernel runs the
/// first M - 1 rows, a GEMV the last, with the epilogue's scale and
/// activation on both; C is poisoned first, so a row left unwritten fails.
#[test]
fn last_row_split_equals_the_full_product() {
    use wgtile::{Activation, Epilogue};
    let Some(ctx) = common::ctx() else { return };
    // Shapes the padding layer pads (K or N unaligned, not tiny), M from
    // 65 to 257 (odd, prime, one past a block).
    let cases = [(65, 61, 53), (130, 67, 129), (67, 129, 66), (257, 255, 31)];
    for (i, &(m, k, n)) in cases.iter().enumerate() {
        for dtype in [DType::F32, DType::F16] {
            if dtype == DType::F16 && !ctx.profile().shader_f16 {
                continue;
            }
            let seed = 40 + 2 * i as u64;
            // One to three rows apart.
            let rows = 1 + i % 3;
            let (a, ha, b, hb, out) = operands(&ctx, (m, k, n), dtype, seed);
            let options = MatmulOptions {
                padding: Padding::Always,
                fringe_rows: Some(rows),
                ..Default::default()
            };
            let alpha = 0.75;
            let epi = Epilogue::new().scale(alpha).activation(Activation::Relu);
            let plan = ctx
                .matmul_plan_with(&a, &b, Some(&out), &options, &epi)
                .unwrap();
            let what = format!("{m}x{k} @ {k}x{n} {dtype} [{}]", plan.label());
            assert!(
                plan.label().contains(&rows_label(rows.min(m - 1))),
                "{what}"
            );
            plan.run().unwrap();
            let got = out.to_f32_vec_blocking().unwrap();
            let (prod, mag) = common::matmul_ref(&ha, &hb, m, n, k, &[(0, 0)]);
            let want: Vec<f64> = prod
                .iter()
                .map(|&p| (f64::from(alpha) * p).max(0.0))
                .collect();
            common::assert_close(&what, &got, &want, |i| {
                common::matmul_tolerance(dtype, k, want[i], f64::from(alpha) * mag[i])
            });
        }
    }
}

/// `Plan::stages`: a padded plan (copies, then the kernel) split into one
/// plan per dispatch; running them in order computes the same product as
/// the whole plan (the stages share its scratch and output).
#[test]
fn plan_stages_run_in_order_equal_the_plan() {
    let Some(ctx) = common::ctx() else { return };
    let (m, k, n) = (37, 61, 53);
    let (a, ha) = common::upload(&ctx, &common::random(m * k, 90), &[m, k], DType::F32);
    let (b, hb) = common::upload(&ctx, &common::random(k * n, 91), &[k, n], DType::F32);
    let out = ctx.full([m, n], f32::NAN, DType::F32).unwrap();
    let plan = ctx
        .matmul_plan(
            &a,
            &b,
            Some(&out),
            &MatmulOptions::with_padding(Padding::Always),
        )
        .unwrap();
    let stages = plan.stages();
    assert_eq!(stages.len(), plan.dispatch_count());
    assert!(
        stages.len() > 1,
        "expected copies and a kernel: {}",
        plan.label()
    );
    for (i, stage) in stages.iter().enumerate() {
        assert_eq!(stage.dispatch_count(), 1);
        assert!(
            stage
                .label()
                .ends_with(&format!("[stage {} of {}]", i + 1, stages.len()))
        );
        stage.run().unwrap();
    }
    let got = out.to_f32_vec_blocking().unwrap();
    let (want, mag) = common::matmul_ref(&ha, &hb, m, n, k, &[(0, 0)]);
    common::assert_close(&format!("stages of {}", plan.label()), &got, &want, |i| {
        common::matmul_tolerance(DType::F32, k, want[i], mag[i])
    });
}

#[test]
fn f16_operands_padded_in_one_dispatch() {
    let Some(ctx) = common::ctx() else { return };
    if !ctx.profile().shader_f16 {
        return;
    }
    // A and B both padded (K 61, N 53), once with A batched: the two copies
    // share one dispatch, then the kernel (and the crop of C where the kernel
    // needs aligned rows). padded_equals_unpadded_on_awkward_shapes checks
    // these shapes' values.
    for (a_shape, b_shape) in [
        (&[37usize, 61][..], &[61usize, 53][..]),
        (&[3, 37, 61], &[61, 53]),
    ] {
        let a = ctx.full(a_shape, 1.0, DType::F16).unwrap();
        let b = ctx.full(b_shape, 1.0, DType::F16).unwrap();
        let plan = ctx
            .matmul_plan(&a, &b, None, &MatmulOptions::with_padding(Padding::Always))
            .unwrap();
        let label = plan.label();
        // Padded rows: multiples of 4 halves, or of COOP_PAD_HALVES for the
        // tensor-core kernel (the H200 pads N = 53 to 64).
        let np = if wgtile::tune::has_coop_f16(ctx.profile()) {
            53usize.next_multiple_of(wgtile::tune::pad::COOP_PAD_HALVES)
        } else {
            56
        };
        assert!(
            label.contains(&format!("padded to K = 64, N = {np}")),
            "{label}"
        );
        let crop = usize::from(label.contains("(cropped)"));
        assert_eq!(plan.dispatch_count(), 2 + crop, "{label}");
    }
}

/// The last-row split without copies (aligned K and N; on a GPU the wave
/// rule picks it for f32 4097 on the tiled kernel, here it is forced): the
/// raw kernel reads the operands in place for the first M - 1 rows, a GEMV
/// computes the last; C is poisoned first.
#[test]
fn last_row_split_without_copies() {
    let Some(ctx) = common::ctx() else { return };
    for (i, &(m, k, n)) in [(65, 64, 64), (129, 36, 20), (2, 100, 8)]
        .iter()
        .enumerate()
    {
        for dtype in [DType::F32, DType::F16] {
            if dtype == DType::F16 && !ctx.profile().shader_f16 {
                continue;
            }
            let seed = 80 + 2 * i as u64;
            let rows = 3 - i;
            let (a, ha, b, hb, out) = operands(&ctx, (m, k, n), dtype, seed);
            let options = MatmulOptions {
                fringe_rows: Some(rows),
                ..Default::default()
            };
            let plan = ctx.matmul_plan(&a, &b, Some(&out), &options).unwrap();
            let what = format!("{m}x{k} @ {k}x{n} {dtype} [{}]", plan.label());
            assert!(
                plan.label().contains(&rows_label(rows.min(m - 1))),
                "{what}"
            );
            assert!(!plan.label().contains("padded"), "{what}");
            plan.run().unwrap();
            let got = out.to_f32_vec_blocking().unwrap();
            let (want, mag) = common::matmul_ref(&ha, &hb, m, n, k, &[(0, 0)]);
            common::assert_close(&what, &got, &want, |i| {
                common::matmul_tolerance(dtype, k, want[i], mag[i])
            });
            // Without the option the same product is one plain kernel.
            let plain = ctx
                .matmul_plan(&a, &b, None, &MatmulOptions::default())
                .unwrap();
            assert!(!plain.label().contains("last row"), "{}", plain.label());
        }
    }
}
