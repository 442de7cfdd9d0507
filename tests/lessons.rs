//! The lesson kernels (`Context::divergence_plan`, `sigmoid_chain_plans`,
//! `ordered_copy_plan`, `naive_transpose_plan`, `relu_fp8_plan`) against
//! f64 or exact references on odd sizes, with outputs poisoned first, and
//! their bad inputs.

mod common;

use wgtile::{Activations, BranchForm, DType, Error, ReadOrder};

/// The divergence lesson's iteration in f64.
fn iterate(x: f32, steps: u32) -> f64 {
    let (a, c) = if x >= 0.0 { (0.5, 0.25) } else { (-0.5, 0.5) };
    let mut z = 0.5 * f64::from(x);
    for _ in 0..steps {
        z = a * z * z + c;
    }
    z
}

#[test]
fn divergence_forms_agree_with_f64() {
    let Some(ctx) = common::ctx() else { return };
    let steps = 37;
    for n in [1, 257, 10007] {
        let base: Vec<f32> = common::random(n, n as u64)
            .iter()
            .map(|v| v.abs())
            .collect();
        // Alternating signs (every subgroup divergent), signs in blocks of
        // 64 (subgroups agree), and random signs.
        let signs: [Box<dyn Fn(usize) -> bool>; 3] = [
            Box::new(|i| i % 2 == 0),
            Box::new(|i| (i / 64) % 2 == 0),
            Box::new(move |i| (i * 2654435761) % 7 < 3),
        ];
        for sign in &signs {
            let xs: Vec<f32> = base
                .iter()
                .enumerate()
                .map(|(i, &v)| if sign(i) { v } else { -v })
                .collect();
            let x = ctx.tensor(&xs, [n]).unwrap();
            for form in [BranchForm::Branch, BranchForm::Select] {
                let plan = ctx.divergence_plan(&x, form, steps).unwrap();
                ctx.fill(plan.output(), f32::NAN).unwrap();
                plan.run().unwrap();
                let got = plan.output().to_vec_blocking::<f32>().unwrap();
                let want: Vec<f64> = xs.iter().map(|&v| iterate(v, steps)).collect();
                // Contractive iteration: each step's rounding (a few ulp of
                // values below 1) does not grow.
                common::assert_close(&format!("{form:?} n {n}"), &got, &want, |_| 4e-7);
                assert_eq!(plan.flops(), 3 * u64::from(steps) * n as u64);
            }
        }
    }
}

fn sigmoid(v: f64) -> f64 {
    1.0 / (1.0 + (-v).exp())
}

#[test]
fn sigmoid_chain_both_ways_against_f64() {
    let Some(ctx) = common::ctx() else { return };
    for (n, shape) in [
        (1usize, vec![1]),
        (1009, vec![1009]),
        (37 * 53, vec![37, 53]),
    ] {
        let xs: Vec<f32> = common::random(n, 3).iter().map(|v| 4.0 * v).collect();
        let dys = common::random(n, 4);
        let x = ctx.tensor(&xs, &shape[..]).unwrap();
        let dy = ctx.tensor(&dys, &shape[..]).unwrap();
        let (mut y_want, mut dx_want) = (Vec::new(), Vec::new());
        for (&xv, &d) in xs.iter().zip(&dys) {
            let a1 = sigmoid(f64::from(xv));
            let a2 = sigmoid(a1);
            let y = sigmoid(a2);
            y_want.push(y);
            dx_want.push(f64::from(d) * y * (1.0 - y) * a2 * (1.0 - a2) * a1 * (1.0 - a1));
        }
        for (activations, accesses) in [
            (Activations::Store, (4, 4)),
            (Activations::Recompute, (2, 3)),
        ] {
            let chain = ctx.sigmoid_chain_plans(&x, &dy, activations).unwrap();
            ctx.fill(chain.forward.output(), f32::NAN).unwrap();
            ctx.fill(chain.backward.output(), f32::NAN).unwrap();
            chain.forward.run().unwrap();
            chain.backward.run().unwrap();
            let y = chain.forward.output().to_vec_blocking::<f32>().unwrap();
            let dx = chain.backward.output().to_vec_blocking::<f32>().unwrap();
            // exp's accuracy in WGSL is a few ulp: relative 2e-6 per
            // sigmoid, three of them, and five factors in dx.
            common::assert_close(&format!("{activations:?} y n {n}"), &y, &y_want, |i| {
                1e-5 * y_want[i].abs()
            });
            common::assert_close(&format!("{activations:?} dx n {n}"), &dx, &dx_want, |i| {
                4e-5 * dx_want[i].abs() + 1e-30
            });
            assert_eq!(
                chain.forward.bytes(),
                4 * accesses.0 * n as u64,
                "{activations:?} forward bytes"
            );
            assert_eq!(
                chain.backward.bytes(),
                4 * accesses.1 * n as u64,
                "{activations:?} backward bytes"
            );
        }
    }
}

#[test]
fn ordered_copies_and_naive_transpose_are_exact() {
    let Some(ctx) = common::ctx() else { return };
    for (rows, cols) in [(1, 1), (37, 101), (256, 3), (0, 5)] {
        let xs = common::random(rows * cols, (rows + cols) as u64);
        let x = ctx.tensor(&xs, [rows, cols]).unwrap();
        for order in [ReadOrder::Rows, ReadOrder::Columns] {
            let plan = ctx.ordered_copy_plan(&x, order).unwrap();
            if rows * cols > 0 {
                ctx.fill(plan.output(), f32::NAN).unwrap();
            }
            plan.run().unwrap();
            let got = plan.output().to_vec_blocking::<f32>().unwrap();
            assert_eq!(got, xs, "{order:?} {rows}x{cols}");
            assert_eq!(plan.output().shape(), [rows, cols]);
        }
        let plan = ctx.naive_transpose_plan(&x).unwrap();
        if rows * cols > 0 {
            ctx.fill(plan.output(), f32::NAN).unwrap();
        }
        plan.run().unwrap();
        let got = plan.output().to_vec_blocking::<f32>().unwrap();
        assert_eq!(plan.output().shape(), [cols, rows]);
        for r in 0..rows {
            for c in 0..cols {
                assert_eq!(
                    got[c * rows + r].to_bits(),
                    xs[r * cols + c].to_bits(),
                    "transpose [{r}, {c}]"
                );
            }
        }
    }
}

/// ReLU of one E4M3 code: negative numbers to +0, NaN codes kept.
fn relu_code(b: u32) -> u32 {
    if b & 0x7f == 0x7f || b & 0x80 == 0 {
        b
    } else {
        0
    }
}

#[test]
fn relu_over_fp8_codes_is_exact() {
    let Some(ctx) = common::ctx() else { return };
    // Every code in every byte position, then random words, an odd count.
    let mut words: Vec<u32> = (0..256u32).map(|c| c * 0x0101_0101).collect();
    words.extend(
        common::random(1001, 9)
            .iter()
            .map(|v| v.to_bits().wrapping_mul(2654435761)),
    );
    // Each invocation takes four words: every tail length too.
    for n in [words.len(), 1, 2, 3, 4, 5] {
        let words = &words[words.len() - n..];
        let t = ctx.tensor(words, [n]).unwrap();
        let plan = ctx.relu_fp8_plan(&t).unwrap();
        ctx.write(plan.output(), &vec![0xdead_beef_u32; n]).unwrap();
        plan.run().unwrap();
        let got = plan.output().to_vec_blocking::<u32>().unwrap();
        for (i, (&w, &g)) in words.iter().zip(&got).enumerate() {
            let want = (0..4).fold(0, |acc, j| {
                acc | relu_code((w >> (8 * j)) & 0xff) << (8 * j)
            });
            assert_eq!(g, want, "{n} words, word {i}: {w:#010x}");
        }
        assert_eq!(plan.bytes(), 2 * plan.flops());
    }
}

#[test]
fn lesson_inputs_are_checked() {
    let Some(ctx) = common::ctx() else { return };
    let h = ctx.zeros([4, 4], DType::F16);
    if let Ok(h) = h {
        assert!(matches!(
            ctx.divergence_plan(&h, BranchForm::Branch, 1),
            Err(Error::DTypeMismatch { .. })
        ));
    }
    let x = ctx.zeros([2, 3, 4], DType::F32).unwrap();
    assert!(matches!(
        ctx.ordered_copy_plan(&x, ReadOrder::Rows),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        ctx.naive_transpose_plan(&x),
        Err(Error::InvalidArgument(_))
    ));
    let dy = ctx.zeros([2, 3, 5], DType::F32).unwrap();
    assert!(matches!(
        ctx.sigmoid_chain_plans(&x, &dy, Activations::Recompute),
        Err(Error::ShapeMismatch { .. })
    ));
    assert!(matches!(
        ctx.relu_fp8_plan(&x),
        Err(Error::DTypeMismatch { .. })
    ));
}
