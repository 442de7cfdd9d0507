//! The padding layer: padded runs give the same results as unpadded ones (on
//! the f64 reference too), at 50257-like sizes, batched and broadcast; the
//! last rows of C computed apart as GEMVs; a padded plan run stage by stage.
//! The cost model's decisions, which need no GPU, are unit tests of `tune`.

use crate::common;

use wgtile::{DType, MatmulOptions, MatmulShape, Padding};

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
    // Same compute core, same summation order, zeros added exactly: equal
    // values. (A few rows of x against an N padded to even run on the GEMV
    // of several rows instead: another order, the f64 check below.)
    if !label.contains("coop") && !label.contains("gemv") {
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
