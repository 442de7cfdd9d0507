//! Tensors allocated padded from the start (`Context::tensor_padded`, the
//! 50257 -> 50304 trick): the logical shape is kept, matmul reads them in
//! place on every kernel that accepts the layout, and the padding is never
//! read as a value (it is poisoned with NaN here).

use crate::common;

use wgtile::tune::{Layout, NAIVE_WORKGROUPS, TILE_CONFIGS};
use wgtile::{Context, DType, Error, MatmulKernel, MatmulOptions, MatmulShape, Tensor, f16};

/// A padded tensor holding `data` (as `dtype`) whose padding elements are NaN.
/// Returns it with the values it really holds, widened to f32.
fn padded_poisoned(
    ctx: &Context,
    data: &[f32],
    shape: &[usize],
    multiple: usize,
    dtype: DType,
) -> (Tensor, Vec<f32>) {
    let last = *shape.last().unwrap();
    let (t, held) = match dtype {
        DType::F32 => (
            ctx.tensor_padded(data, shape, multiple).unwrap(),
            data.to_vec(),
        ),
        DType::F16 => {
            let h: Vec<f16> = data.iter().map(|&v| f16::from_f32(v)).collect();
            let held = h.iter().map(|v| v.to_f32()).collect();
            (ctx.tensor_padded(&h, shape, multiple).unwrap(), held)
        }
        DType::BF16 => {
            let h: Vec<wgtile::bf16> = data.iter().map(|&v| wgtile::bf16::from_f32(v)).collect();
            let held = h.iter().map(|v| v.to_f32()).collect();
            (ctx.tensor_padded(&h, shape, multiple).unwrap(), held)
        }
        other => panic!("no padded {other} operands"),
    };
    let stride = t.row_stride();
    assert_eq!(stride, last.next_multiple_of(multiple));
    // The whole storage: the values, NaN in every padding slot.
    let mut storage = Vec::new();
    for row in held.chunks(last) {
        for col in 0..stride {
            let v = row.get(col).copied().unwrap_or(f32::NAN);
            match dtype {
                DType::F32 => storage.extend_from_slice(&v.to_le_bytes()),
                DType::F16 => storage.extend_from_slice(&f16::from_f32(v).to_le_bytes()),
                DType::BF16 => storage.extend_from_slice(&wgtile::bf16::from_f32(v).to_le_bytes()),
                other => panic!("no padded {other} operands"),
            }
        }
    }
    storage.resize(storage.len().next_multiple_of(4), 0);
    ctx.queue().write_buffer(t.buffer(), 0, &storage);
    (t, held)
}

/// Every kernel that fits the adapter, and the dispatcher (None).
fn kernels(ctx: &Context) -> Vec<Option<MatmulKernel>> {
    let mut ks = vec![None, Some(MatmulKernel::Gemv)];
    ks.push(Some(MatmulKernel::Naive {
        wg_x: NAIVE_WORKGROUPS[0].0,
        wg_y: NAIVE_WORKGROUPS[0].1,
    }));
    for vec4 in [false, true] {
        ks.push(Some(MatmulKernel::Tiled {
            tile: TILE_CONFIGS[2],
            vec4,
        }));
        ks.push(Some(MatmulKernel::SplitK {
            tile: TILE_CONFIGS[2],
            vec4,
            splits: 2,
        }));
    }
    ks.extend(
        wgtile::tune::COOP_CONFIGS
            .into_iter()
            .filter_map(|c| MatmulKernel::coop_for(ctx.profile(), c))
            .map(Some),
    );
    ks.retain(|k| k.is_none_or(|k| k.fits(ctx.profile())));
    ks
}

/// `a_shape x b_shape` with A's rows padded to `a_multiple` and B's to
/// `b_multiple` (1: contiguous), on every kernel that accepts the layout.
fn check(
    ctx: &Context,
    (a_shape, a_multiple): (&[usize], usize),
    (b_shape, b_multiple): (&[usize], usize),
    dtype: DType,
    seed: u64,
) {
    let a_len: usize = a_shape.iter().product();
    let b_len: usize = b_shape.iter().product();
    let make = |shape: &[usize], multiple: usize, len: usize, seed: u64| {
        let data = common::random(len, seed);
        if multiple == 1 {
            common::upload(ctx, &data, shape, dtype)
        } else {
            padded_poisoned(ctx, &data, shape, multiple, dtype)
        }
    };
    let (a, ha) = make(a_shape, a_multiple, a_len, seed);
    let (b, hb) = make(b_shape, b_multiple, b_len, seed + 1);
    let dense = MatmulShape::new(a_shape, b_shape).unwrap();
    let pitch = |t: &Tensor, default: usize| {
        if t.is_contiguous() {
            default
        } else {
            t.row_stride()
        }
    };
    let shape = dense
        .clone()
        .with_pitches(pitch(&a, dense.a_pitch), pitch(&b, dense.b_pitch))
        .unwrap();
    let layout = Layout::of(&shape);
    let offsets = common::batch_offsets(&dense);
    let (want, mag) = common::matmul_ref(&ha, &hb, shape.m, shape.n, shape.k, &offsets);
    for kernel in kernels(ctx) {
        let what =
            format!("{a_shape:?}/{a_multiple} x {b_shape:?}/{b_multiple} {dtype} {kernel:?}");
        if kernel.is_some_and(|k| !k.accepts_with(dtype, shape.m, shape.n, shape.k, layout)) {
            let refused =
                ctx.matmul_plan(&a, &b, None, &MatmulOptions::with_kernel(kernel.unwrap()));
            assert!(
                matches!(refused, Err(Error::InvalidArgument(_))),
                "{what}: a kernel that does not accept the layout must be refused"
            );
            continue;
        }
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
        assert!(
            !plan.label().contains("padded to"),
            "{what}: padded tensors must not be copied again: {}",
            plan.label()
        );
        plan.run().unwrap();
        let got = out.to_f32_vec_blocking().unwrap();
        common::assert_close(&format!("{what} [{}]", plan.label()), &got, &want, |i| {
            common::matmul_tolerance(dtype, shape.k, want[i], mag[i])
        });
    }
}

#[test]
fn matmul_reads_padded_operands_in_place() {
    let Some(ctx) = common::ctx() else { return };
    let mut dtypes = vec![DType::F32];
    if ctx.profile().shader_f16 {
        dtypes.push(DType::F16);
    }
    for (i, dtype) in dtypes.into_iter().enumerate() {
        let seed = 100 * i as u64;
        // Odd K and N, both operands padded to 8 (the coop kernel's rows).
        check(&ctx, (&[37, 61], 8), (&[61, 53], 8), dtype, seed);
        // N a multiple of 4 and A padded: the vec4 kernels run, and their
        // loads past K must be masked.
        check(&ctx, (&[37, 61], 8), (&[61, 52], 1), dtype, seed + 1);
        // Only B padded, to 4 (vec4 rows), N a multiple of 4.
        check(&ctx, (&[33, 20], 1), (&[20, 33], 4), dtype, seed + 2);
        // The vocabulary case at lavapipe size: a row times a 1031-wide layer.
        check(&ctx, (&[1, 130], 1), (&[130, 1031], 8), dtype, seed + 4);
        check(&ctx, (&[1, 130], 1), (&[130, 1030], 8), dtype, seed + 5);
        // Matrix times vector with A padded, and with B a padded [K, 1]
        // (the vector read through its pitch).
        check(&ctx, (&[29, 257], 16), (&[257], 1), dtype, seed + 6);
        check(&ctx, (&[29, 257], 1), (&[257, 1], 8), dtype, seed + 7);
        // Batched A, broadcast padded B.
        check(&ctx, (&[3, 19, 45], 8), (&[45, 33], 8), dtype, seed + 8);
        // K longer than the split-K chunks, with a ragged tail.
        check(&ctx, (&[9, 1037], 8), (&[1037, 13], 8), dtype, seed + 10);
        check(&ctx, (&[9, 1037], 8), (&[1037, 16], 8), dtype, seed + 12);
    }
}

#[test]
fn transposed_padded_operand() {
    // B stored [N, K] with K = 61 padded to 64 and read transposed: the
    // vec4 kernel's loads along K must stop at K.
    let Some(ctx) = common::ctx() else { return };
    let (m, n, k) = (37, 52, 61);
    let (a, ha) = padded_poisoned(&ctx, &common::random(m * k, 7), &[m, k], 8, DType::F32);
    let (bt, hbt) = padded_poisoned(&ctx, &common::random(n * k, 8), &[n, k], 8, DType::F32);
    // B = bt^T, row-major [k, n], for the reference.
    let hb: Vec<f32> = (0..k * n).map(|i| hbt[(i % n) * k + i / n]).collect();
    let (want, mag) = common::matmul_ref(&ha, &hb, m, n, k, &[(0, 0)]);
    for vec4 in [false, true] {
        let kernel = MatmulKernel::Tiled {
            tile: TILE_CONFIGS[2],
            vec4,
        };
        let options = MatmulOptions {
            kernel: Some(kernel),
            transpose_b: true,
            ..Default::default()
        };
        let out = ctx.full([m, n], f32::NAN, DType::F32).unwrap();
        let plan = ctx.matmul_plan(&a, &bt, Some(&out), &options).unwrap();
        plan.run().unwrap();
        let got = out.to_f32_vec_blocking().unwrap();
        common::assert_close(
            &format!("B^T padded [{}]", plan.label()),
            &got,
            &want,
            |i| common::matmul_tolerance(DType::F32, k, want[i], mag[i]),
        );
    }
}

#[test]
fn padded_tensor_keeps_its_logical_shape() {
    let Some(ctx) = common::ctx() else { return };
    let data = common::random(5 * 7, 1);
    let t = ctx.tensor_padded(&data, [5, 7], 8).unwrap();
    assert_eq!(t.shape(), &[5, 7]);
    assert_eq!(t.row_stride(), 8);
    assert!(!t.is_contiguous());
    assert_eq!(t.size_bytes(), 5 * 8 * 4);
    assert_eq!(t.to_vec_blocking::<f32>().unwrap(), data);
    // A contiguous copy holds the same values.
    let c = ctx.contiguous(&t).unwrap();
    assert!(c.is_contiguous());
    assert_eq!(c.to_vec_blocking::<f32>().unwrap(), data);
    // Already aligned rows: the same layout as a plain tensor.
    let aligned = ctx.tensor_padded(&data[..4 * 8], [4, 8], 8).unwrap();
    assert!(aligned.is_contiguous());
    // f16 round trip with poisoned padding.
    if ctx.profile().shader_f16 {
        let (h, held) = padded_poisoned(&ctx, &data, &[5, 7], 16, DType::F16);
        assert_eq!(h.to_f32_vec_blocking().unwrap(), held);
        assert_eq!(
            ctx.contiguous(&h).unwrap().to_f32_vec_blocking().unwrap(),
            held
        );
    }
    // Zero-sized.
    let e = ctx.tensor_padded::<f32>(&[], [0, 7], 8).unwrap();
    assert!(e.to_vec_blocking::<f32>().unwrap().is_empty());
}

#[test]
fn padded_tensor_errors() {
    let Some(ctx) = common::ctx() else { return };
    let data = common::random(12, 2);
    for (shape, multiple) in [(&[12usize][..], 8usize), (&[3, 4][..], 0)] {
        assert!(
            matches!(
                ctx.tensor_padded(&data, shape, multiple),
                Err(Error::InvalidArgument(_))
            ),
            "{shape:?} / {multiple}"
        );
    }
    assert!(matches!(
        ctx.tensor_padded(&data, [5, 3], 4),
        Err(Error::InvalidArgument(_))
    ));
    let t = ctx.tensor_padded(&data, [3, 4], 8).unwrap();
    // Reshape needs contiguous rows.
    assert!(matches!(t.reshape([4, 3]), Err(Error::InvalidArgument(_))));
    // A padded output or epilogue tensor is refused with a clear error.
    let a = ctx.tensor(&data, [4, 3]).unwrap();
    let out = ctx
        .tensor_padded(&common::random(16, 3), [4, 4], 8)
        .unwrap();
    let b = ctx.tensor(&common::random(12, 4), [3, 4]).unwrap();
    let err = ctx.matmul_into(&a, &b, &out).unwrap_err();
    assert!(
        matches!(&err, Error::InvalidArgument(m) if m.contains("tensor_padded")),
        "{err}"
    );
}

#[test]
fn other_ops_refuse_padded_tensors() {
    // Only matmul reads padded rows; every other op says so instead of
    // reading the padding as data.
    let Some(ctx) = common::ctx() else { return };
    let t = ctx
        .tensor_padded(&common::random(5 * 7, 9), [5, 7], 8)
        .unwrap();
    let refused = |what: &str, r: wgtile::Result<Tensor>| match r {
        Err(Error::InvalidArgument(m)) => assert!(m.contains("tensor_padded"), "{what}: {m}"),
        other => panic!("{what}: expected a refusal, got {other:?}"),
    };
    refused("eval", ctx.eval(&(t.expr() * 2.0)));
    refused("eval_unfused", ctx.eval_unfused(&(t.expr() * 2.0)));
    refused("softmax", ctx.softmax(&t));
    refused("layer_norm", ctx.layer_norm(&t, None, None, 1e-5));
    refused("sum", ctx.sum(&t, wgtile::Axis::Last));
    let q = ctx
        .tensor_padded(&common::random(5 * 7, 10), [1, 1, 5, 7], 8)
        .unwrap();
    let attention = ctx.attention(&q, &q, &q, &wgtile::AttentionOptions::default());
    refused("attention", attention.map(|o| o.o));
    // Through contiguous() they work.
    let c = ctx.contiguous(&t).unwrap();
    assert_eq!(ctx.softmax(&c).unwrap().shape(), &[5, 7]);
}
