//! Generated fused elementwise kernels parse and validate with naga and
//! translate to SPIR-V, MSL and HLSL, for expressions covering every op, both
//! dtypes, both paths (vec4 and scalar) and every input access kind. No GPU.

use crate::common;

use crate::common::naga_check::{check_spec, check_spec_source};
use wgtile::kernels::codegen::fusion::{Access, generate};
use wgtile::{DType, Expr, UnaryOp};

use crate::common::{BINARY, UNARY};

/// A generated elementwise kernel (entry `main`, no overrides).
fn check_wgsl(label: &str, source: &str) {
    common::naga_check::check_wgsl(label, source, "main", &[], false);
}

fn check(e: &Expr) -> wgtile::kernels::codegen::fusion::Generated {
    let g = generate(e).unwrap_or_else(|err| panic!("{e}: {err}"));
    check_wgsl(&format!("{e} [{}]", g.key), &g.wgsl);
    g
}

/// Shapes giving each path: (vec4 contiguous, scalar contiguous).
const SHAPES: [&[usize]; 2] = [&[8, 12], &[5, 7]];

#[test]
fn every_op_both_dtypes_both_paths() {
    for dtype in DType::ALL {
        for shape in SHAPES {
            let x = Expr::input(0, shape, dtype);
            let y = Expr::input(1, shape, dtype);
            let vec4 = shape.iter().product::<usize>() % 4 == 0;
            for op in UNARY {
                let g = check(&Expr::apply_unary(op, &x));
                assert_eq!(g.vec4, vec4);
            }
            for op in BINARY {
                check(&Expr::apply_binary(op, &x, &y));
                check(&Expr::apply_binary(op, &x, 1.5));
                check(&Expr::apply_binary(op, 0.5, &x));
            }
            check(&Expr::where_(x.clone().gt(0.0), &x, y.clone() * 2.0));
            check(&x.clone().clamp(-0.5, 0.5));
            check(&x.clone().pow(2.5));
        }
    }
}

#[test]
fn access_kinds_and_mixed_dtypes() {
    for (a, b) in [(DType::F32, DType::F16), (DType::F16, DType::F32)] {
        let x = Expr::input(0, [3, 8, 12], a);
        // Inner dimension kept (vec4 loads along it), broadcast over rows.
        let row = Expr::input(1, [12], b);
        // Inner dimension broadcast (one element splat over 4 lanes).
        let col = Expr::input(2, [3, 8, 1], b);
        let one = Expr::input(3, [1], b);
        let g = check(&((&x * &row + &col) * &one));
        assert!(g.vec4, "{}", g.key);
        let kinds: Vec<Access> = g.inputs.iter().map(|i| i.access).collect();
        assert_eq!(
            kinds,
            [
                Access::Contiguous,
                Access::Broadcast { inner_unit: true },
                Access::Broadcast { inner_unit: false },
                Access::Single
            ]
        );
        // Odd inner dimension: scalar path with the same broadcasts.
        let x = Expr::input(0, [3, 5, 7], a);
        let row = Expr::input(1, [7], b);
        let col = Expr::input(2, [3, 5, 1], b);
        let g = check(&(x.clone().sin() * row + col.gelu_erf()));
        assert!(!g.vec4);
        // Rank 4 with broadcasts in every position.
        let p = Expr::input(0, [2, 1, 4, 1], a);
        let q = Expr::input(1, [1, 3, 1, 8], b);
        check(&Expr::where_(p.clone().lt(&q), p.exp(), q.tanh()));
    }
}

#[test]
fn structure_is_the_key() {
    let x = Expr::input(0, [64], DType::F32);
    let a = generate(&(x.clone() * 2.0 + 1.0)).unwrap();
    let b = generate(&(x.clone() * 3.0 + -7.0)).unwrap();
    assert_eq!(a.key, b.key, "constants are data, not structure");
    assert_eq!(a.wgsl, b.wgsl);
    let c = generate(&(x.clone() * 2.0 - 1.0)).unwrap();
    assert_ne!(a.key, c.key);
    // `x * x` loads x once; a shared subexpression is computed once.
    let sq = generate(&(x.clone() * x.clone())).unwrap();
    assert_eq!(sq.inputs.len(), 1);
    assert_eq!(sq.wgsl.matches("ew_in0[").count(), 1, "{}", sq.wgsl);
    let s = x.clone().sin();
    let shared = generate(&(&s * &s + s.clone())).unwrap();
    assert_eq!(shared.wgsl.matches("sin(").count(), 1, "{}", shared.wgsl);
}

#[test]
fn broadcast_errors_name_both_shapes() {
    let x = Expr::input(0, [3, 4], DType::F32);
    let y = Expr::input(1, [5, 4], DType::F32);
    match generate(&(x + y)) {
        Err(wgtile::Error::ShapeMismatch { lhs, rhs, .. }) => {
            assert_eq!(lhs, [3, 4]);
            assert_eq!(rhs, [5, 4]);
        }
        other => panic!("expected ShapeMismatch, got {other:?}"),
    }
    assert!(matches!(
        generate(&(Expr::scalar(1.0) + 2.0)),
        Err(wgtile::Error::InvalidArgument(_))
    ));
}

#[test]
fn generated_epilogues_in_every_matmul_kernel() {
    use wgtile::kernels::{Kernel, Spec};
    let acc = Expr::acc();
    let bias = Expr::input(1, [8], DType::F32);
    let residual = Expr::input(2, [8, 8], DType::F32);
    let exprs = [
        (acc.clone() * 0.5 + &bias).gelu_erf() + &residual,
        Expr::where_(acc.clone().gt(0.0), &acc, acc.clone() * 0.01).tanh(),
        (acc.clone().abs() + 1.0).log().pow(1.5).min(&bias).silu() - acc.clone().sigmoid(),
        Expr::apply_unary(UnaryOp::Rsqrt, acc.clone().square() + 1.0).max(&residual),
    ];
    for e in &exprs {
        let code = wgtile::kernels::codegen::fusion::generate_epilogue(e).unwrap();
        for kernel in Kernel::ALL.into_iter().filter(|k| k.has_epilogue()) {
            // bf16 operands reach the matmul kernels as f16 or f32 copies.
            let dtypes: &[DType] = if kernel.is_dtype_generic() {
                &[DType::F32, DType::F16]
            } else {
                &[kernel.fixed_dtype()]
            };
            for &dtype in dtypes {
                check_spec(
                    &Spec::new(kernel)
                        .dtype(dtype)
                        .epilogue_text(code.wgsl.clone()),
                );
            }
        }
    }
    // A kernel without an epilogue refuses the text; two biases are refused.
    assert!(
        Spec::new(Kernel::Fill)
            .epilogue_text("fn epilogue() {}")
            .wgsl()
            .is_err()
    );
    let two = Expr::acc() + Expr::input(1, [8], DType::F32) + Expr::input(3, [8], DType::F32);
    assert!(wgtile::kernels::codegen::fusion::generate_epilogue(&two).is_err());
    assert!(generate(&(Expr::acc() + 1.0)).is_err());
}

#[test]
fn several_outputs_in_one_kernel() {
    for (dtype, shape) in [(DType::F32, &[8usize, 12][..]), (DType::F16, &[5, 7][..])] {
        let x = Expr::input(0, shape, dtype);
        let y = Expr::input(1, shape, DType::F32);
        let s = x.clone().sin();
        let g =
            wgtile::kernels::codegen::fusion::generate_many(&[s.clone(), s * &y, x.clone().exp()])
                .unwrap();
        check_wgsl(&g.key, &g.wgsl);
        assert_eq!(g.wgsl.matches("sin(").count(), 1);
        assert_eq!(g.wgsl.matches("ew_in0[").count(), 1);
    }
    let a = Expr::input(0, [3, 4], DType::F32);
    let b = Expr::input(1, [4], DType::F32);
    assert!(matches!(
        wgtile::kernels::codegen::fusion::generate_many(&[a.clone(), b]),
        Err(wgtile::Error::ShapeMismatch { .. })
    ));
}

/// Validation and translation of a spliced row-kernel module at `spec`'s
/// entry point with its overrides.
fn check_row_module(label: &str, source: &str, spec: &wgtile::kernels::Spec) {
    check_spec_source(label, source, spec);
}

/// Every row-kernel family the dispatchers use (each kernel x dtype x
/// vector/scalar chunks, one layout each: the generated parts do not depend
/// on the layout) with generated load parts (contiguous, broadcast mask,
/// broadcast row vector, column broadcast, mixed dtypes, a scalar path under
/// vector chunks) and, for the kernels with a store hook, generated
/// epilogues; as `Context::softmax_of` & co. splice and compile them.
#[test]
fn row_kernels_with_generated_hooks() {
    use wgtile::kernels::Kernel;
    use wgtile::kernels::codegen::fusion::generate_row_hooks;
    use wgtile::ops::rows::{rowops_specs, spliced_row_module};
    let mut families = std::collections::BTreeMap::new();
    for spec in rowops_specs() {
        if matches!(spec.kernel, Kernel::ReduceCombine) {
            continue;
        }
        let vec = spec.consts.iter().any(|&(k, v)| k == "VEC" && v == 4);
        families
            .entry((spec.kernel.name(), spec.dtype.to_string(), vec))
            .or_insert(spec);
    }
    assert!(families.len() >= 2 * 2 * 8, "{}", families.len());
    let mut checked = 0;
    // bf16 leaves run in the f32 specialisations (a bf16 result is packed by
    // the store part where the chunks are vectors, rounded behind the kernel
    // elsewhere): every f32 family again with bf16 leaves.
    let runs = families.iter().flat_map(|((_, _, vec4), spec)| {
        let leaves = if spec.dtype == DType::F32 {
            vec![DType::F32, DType::BF16]
        } else {
            vec![spec.dtype]
        };
        leaves.into_iter().map(move |d| (*vec4, spec, d))
    });
    for (vec4, spec, dtype) in runs {
        let vec4 = &vec4;
        // Row length: a multiple of 4 for vector chunks.
        let n = if *vec4 { 8 } else { 7 };
        let other = if dtype == DType::F32 {
            DType::F16
        } else {
            DType::F32
        };
        let x = Expr::input(0, [2, 3, 5, n], dtype);
        let mask = Expr::input(1, [5, n], dtype);
        let row = Expr::input(2, [n], dtype);
        let col = Expr::input(3, [2, 3, 5, 1], dtype);
        let mixed = Expr::input(4, [5, n], other);
        let keep = Expr::input(5, [2, 3, 5, n], dtype);
        let single = Expr::input(6, [1], dtype);
        let loads = [
            &x * &x,
            &x * 0.125 + &mask,
            (&x - &row).abs(),
            (&x + &col).exp(),
            &x * 0.5 + &mixed,
            &x * &single - &single,
            x.clone(),
        ];
        let store = spec.kernel.parts().contains(&wgtile::ops::rows::STORE_HOOK);
        let epilogues: Vec<Option<Expr>> = if store {
            vec![
                None,
                Some(Expr::acc() * &keep),
                Some(Expr::acc().gelu()),
                Some(Expr::acc() + &x * 2.0 - &row),
                Some(Expr::acc() * &mixed),
            ]
        } else {
            vec![None]
        };
        for load in &loads {
            for epi in &epilogues {
                let hooks = generate_row_hooks(load, epi.as_ref(), *vec4, store)
                    .unwrap_or_else(|e| panic!("{load}: {e}"));
                assert_eq!(hooks.vec4, *vec4, "{}", hooks.key);
                let text = spliced_row_module(spec, &hooks).unwrap();
                check_row_module(&format!("{spec:?} [{}]", hooks.key), &text, spec);
                checked += 1;
            }
        }
        // The scalar path under vector chunks (a whole-tensor reduction of a
        // [4, 7] expression: 28 elements, rows of 7).
        if *vec4 {
            let a = Expr::input(0, [4, 7], dtype);
            let b = Expr::input(1, [7], dtype);
            let hooks = generate_row_hooks(&(&a * &b), None, true, store).unwrap();
            assert!(!hooks.vec4);
            let text = spliced_row_module(spec, &hooks).unwrap();
            check_row_module(&format!("{spec:?} [{}]", hooks.key), &text, spec);
        }
    }
    assert!(checked > 100, "{checked}");
}
