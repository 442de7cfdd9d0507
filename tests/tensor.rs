//! Tensors, the context and timing on a real adapter.

mod common;

use wgtile::{Context, DType, MatmulKernel, TimingOptions};

#[test]
fn f32_and_f16_round_trip_exactly() {
    let Some(ctx) = common::ctx() else { return };
    for n in [1usize, 2, 3, 7, 13, 1021] {
        let data = common::random(n, n as u64);
        let t = ctx.tensor(&data, [n]).unwrap();
        assert_eq!(t.to_vec_blocking::<f32>().unwrap(), data);
        let h: Vec<wgtile::f16> = data.iter().map(|&v| wgtile::f16::from_f32(v)).collect();
        let t = ctx.tensor(&h, [n]).unwrap();
        assert_eq!(t.dtype(), DType::F16);
        assert_eq!(t.to_vec_blocking::<wgtile::f16>().unwrap(), h);
    }
}

#[test]
fn zeros_full_and_rand_uniform() {
    let Some(ctx) = common::ctx() else { return };
    let z = ctx.zeros([3, 5, 7], DType::F32).unwrap();
    assert_eq!(z.shape(), [3, 5, 7]);
    assert_eq!(z.to_vec_blocking::<f32>().unwrap(), vec![0.0; 105]);
    // Odd f16 length: the fill writes whole words, the read returns exactly n.
    let f = ctx.full([3, 3], 1.5, DType::F16).unwrap();
    let v = f.to_vec_blocking::<wgtile::f16>().unwrap();
    assert_eq!(v, vec![wgtile::f16::from_f32(1.5); 9]);
    let r = ctx
        .rand_uniform([4, 1000], -2.0, 3.0, DType::F32, 42)
        .unwrap();
    let v = r.to_vec_blocking::<f32>().unwrap();
    assert_eq!(v, wgtile::uniform_values(4000, -2.0, 3.0, 42));
    assert!(v.iter().all(|x| (-2.0..3.0).contains(x)));
    let mean = v.iter().map(|&x| f64::from(x)).sum::<f64>() / 4000.0;
    assert!((mean - 0.5).abs() < 0.1, "mean {mean}");
    let again = ctx
        .rand_uniform([4, 1000], -2.0, 3.0, DType::F32, 43)
        .unwrap();
    assert_ne!(again.to_vec_blocking::<f32>().unwrap(), v);
}

/// Normal samples: the host's values uploaded (and rounded to bf16 as the
/// half crate rounds), their mean and spread near the asked ones, some
/// values near zero that a uniform grid never has, a new seed new values,
/// bad parameters refused by name.
#[test]
fn rand_normal_matches_its_host_values() {
    let Some(ctx) = common::ctx() else { return };
    let n = 20_000;
    let r = ctx
        .rand_normal([20, 1000], 1.5, 0.25, DType::F32, 7)
        .unwrap();
    let v = r.to_vec_blocking::<f32>().unwrap();
    assert_eq!(v, wgtile::normal_values(n, 1.5, 0.25, 7));
    let mean = v.iter().map(|&x| f64::from(x)).sum::<f64>() / n as f64;
    let var = v
        .iter()
        .map(|&x| (f64::from(x) - mean).powi(2))
        .sum::<f64>()
        / n as f64;
    assert!(
        (mean - 1.5).abs() < 0.01 && (var.sqrt() - 0.25).abs() < 0.01,
        "mean {mean}, std {}",
        var.sqrt()
    );
    let b = ctx.rand_normal([n], 0.0, 1.0, DType::BF16, 8).unwrap();
    let want: Vec<wgtile::bf16> = wgtile::normal_values(n, 0.0, 1.0, 8)
        .into_iter()
        .map(wgtile::bf16::from_f32)
        .collect();
    assert_eq!(b.to_vec_blocking::<wgtile::bf16>().unwrap(), want);
    // Values within 1e-3 of zero: about 0.08% of N(0, 1).
    assert!(want.iter().filter(|x| x.to_f32().abs() < 1e-3).count() > 2);
    assert_ne!(
        ctx.rand_normal([n], 0.0, 1.0, DType::BF16, 9)
            .unwrap()
            .to_vec_blocking::<wgtile::bf16>()
            .unwrap(),
        want
    );
    for (mean, std) in [(0.0, -1.0), (f32::NAN, 1.0), (0.0, f32::INFINITY)] {
        assert!(matches!(
            ctx.rand_normal([4], mean, std, DType::F32, 1),
            Err(wgtile::Error::InvalidArgument(_))
        ));
    }
    assert!(matches!(
        ctx.rand_normal([4], 0.0, 1.0, DType::I32, 1),
        Err(wgtile::Error::NotFloat { .. })
    ));
}

#[test]
fn empty_tensors_and_reshape() {
    let Some(ctx) = common::ctx() else { return };
    let e = ctx.tensor::<f32>(&[], [0, 4]).unwrap();
    assert!(e.is_empty());
    assert!(e.to_vec_blocking::<f32>().unwrap().is_empty());
    let t = ctx.tensor(&common::random(12, 1), [3, 4]).unwrap();
    let r = t.reshape([2, 6]).unwrap();
    assert_eq!(r.shape(), [2, 6]);
    assert_eq!(
        r.to_vec_blocking::<f32>().unwrap(),
        t.to_vec_blocking::<f32>().unwrap()
    );
}

#[test]
fn context_is_send_sync_and_usable_from_threads() {
    fn assert_send_sync<T: Send + Sync + Clone>() {}
    assert_send_sync::<Context>();
    assert_send_sync::<wgtile::Tensor>();
    let Some(ctx) = common::ctx() else { return };
    let handles: Vec<_> = (0..3)
        .map(|i| {
            let ctx = ctx.clone();
            std::thread::spawn(move || {
                let n = 17 + i;
                let a = ctx
                    .rand_uniform([n, n], -1.0, 1.0, DType::F32, i as u64)
                    .unwrap();
                let c = ctx.matmul(&a, &a).unwrap();
                c.to_vec_blocking::<f32>().unwrap().len()
            })
        })
        .collect();
    for (i, h) in handles.into_iter().enumerate() {
        assert_eq!(h.join().unwrap(), (17 + i) * (17 + i));
    }
}

#[test]
fn profile_prints_a_readable_block() {
    let Some(ctx) = common::ctx() else { return };
    let text = ctx.profile().to_string();
    for key in [
        "adapter",
        "backend",
        "subgroups",
        "features",
        "workgroups",
        "buffers",
    ] {
        assert!(text.contains(key), "{text}");
    }
    assert!(ctx.profile().max_workgroup_storage >= 16 << 10);
}

#[test]
fn timing_reports_positive_samples() {
    let Some(ctx) = common::ctx() else { return };
    let a = ctx
        .rand_uniform([64, 64], -1.0, 1.0, DType::F32, 1)
        .unwrap();
    let plan = ctx
        .matmul_plan(
            &a,
            &a,
            None,
            &wgtile::MatmulOptions::with_kernel(MatmulKernel::naive_for(ctx.profile())),
        )
        .unwrap();
    let t = ctx
        .time(
            &plan,
            &TimingOptions {
                warmup: 1,
                warmup_seconds: 0.0,
                repeats: 5,
            },
        )
        .unwrap();
    assert_eq!(t.samples.len(), 5);
    assert!(t.samples.iter().all(|&s| s > 0.0 && s < 10.0), "{t}");
    assert!(t.min() <= t.median());
    assert!(t.gflops(plan.flops()) > 0.0);
}

#[test]
fn gpu_random_fill_is_uniform_and_deterministic() {
    let Some(ctx) = common::ctx() else { return };
    for dtype in [DType::F32, DType::F16] {
        if dtype == DType::F16 && !ctx.profile().shader_f16 {
            continue;
        }
        let t = ctx.zeros([1001], dtype).unwrap();
        ctx.fill_random(&t, 7).unwrap();
        let v = t.to_f32_vec_blocking().unwrap();
        assert!(v.iter().all(|x| (-1.0..1.0).contains(x)), "{dtype}");
        let mean = v.iter().map(|&x| f64::from(x)).sum::<f64>() / v.len() as f64;
        assert!(mean.abs() < 0.1, "{dtype}: mean {mean}");
        let distinct = v
            .iter()
            .map(|x| x.to_bits())
            .collect::<std::collections::HashSet<_>>();
        assert!(distinct.len() > 900, "{dtype}: {} distinct", distinct.len());
        let again = ctx.zeros([1001], dtype).unwrap();
        ctx.fill_random(&again, 7).unwrap();
        assert_eq!(again.to_f32_vec_blocking().unwrap(), v);
    }
}

/// `Context::from_wgpu` on a device the test makes (no features: f16 is
/// refused by name), `tensor_from_buffer` on the application's buffer, and
/// the application reading a wgtile tensor's buffer with its own copy.
#[test]
fn from_wgpu_shares_the_applications_device_and_buffers() {
    use wgtile::wgpu;
    let Some(shared) = common::ctx() else { return };
    let instance =
        wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
    let adapter = pollster::block_on(instance.enumerate_adapters(wgpu::Backends::all()))
        .into_iter()
        .find(|a| a.get_info().name == shared.profile().name)
        .expect("the test adapter");
    let (device, queue) =
        pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor::default())).unwrap();
    let ctx = Context::from_wgpu(adapter, device.clone(), queue.clone());
    assert!(
        !ctx.profile().shader_f16,
        "the device was made without SHADER_F16"
    );
    let h = ctx.zeros([4, 4], DType::F16).unwrap();
    let refused = ctx.matmul(&h, &h);
    assert!(
        matches!(refused, Err(wgtile::Error::UnsupportedFeature { .. })),
        "{refused:?}"
    );

    // x [3, 5] in the application's buffer, written by the application.
    let (m, k, n) = (3, 5, 7);
    let xv = common::random(m * k, 1);
    let usage =
        wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST;
    let app = device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("application buffer"),
        size: 64,
        usage,
        mapped_at_creation: false,
    });
    queue.write_buffer(&app, 0, bytemuck::cast_slice(&xv));
    let x = ctx.tensor_from_buffer(&app, [m, k], DType::F32).unwrap();
    let wv = common::random(k * n, 2);
    let w = ctx.tensor(&wv, [k, n]).unwrap();
    let y = ctx.matmul(&x, &w).unwrap();
    let (want, mag) = common::matmul_ref(&xv, &wv, m, n, k, &[(0, 0)]);
    let got = y.to_vec_blocking::<f32>().unwrap();
    common::assert_close("matmul on the application's buffer", &got, &want, |i| {
        common::matmul_tolerance(DType::F32, k, want[i], mag[i])
    });

    // The application copies wgtile's result with its own encoder.
    let readback = device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("application readback"),
        size: (m * n * 4) as u64,
        usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    let mut enc = device.create_command_encoder(&Default::default());
    enc.copy_buffer_to_buffer(y.buffer(), 0, &readback, 0, Some((m * n * 4) as u64));
    queue.submit([enc.finish()]);
    readback.map_async(wgpu::MapMode::Read, .., |r| r.unwrap());
    device.poll(wgpu::PollType::wait_indefinitely()).unwrap();
    let bytes = readback.get_mapped_range(..).unwrap().to_vec();
    assert_eq!(bytemuck::cast_slice::<u8, f32>(&bytes), got.as_slice());

    // Buffers that cannot hold the tensor, or lack a usage, are refused.
    assert!(matches!(
        ctx.tensor_from_buffer(&app, [5, 5], DType::F32),
        Err(wgtile::Error::InvalidArgument(m)) if m.contains("needs 112 bytes")
    ));
    let uniform = device.create_buffer(&wgpu::BufferDescriptor {
        label: None,
        size: 64,
        usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    assert!(matches!(
        ctx.tensor_from_buffer(&uniform, [4], DType::F32),
        Err(wgtile::Error::InvalidArgument(m)) if m.contains("COPY_SRC")
    ));
    // wgtile's tensors of this context are refused by the other one.
    let foreign = shared.zeros([m, k], DType::F32).unwrap();
    assert!(ctx.matmul(&foreign, &w).is_err());
    assert_eq!(
        ctx.matmul(&x, &w)
            .unwrap()
            .to_vec_blocking::<f32>()
            .unwrap(),
        got
    );
}

/// `ctx.write` into an existing tensor, ordered after the work submitted
/// before it; its argument errors; `synchronize`.
#[test]
fn write_lands_in_order_and_checks_its_arguments() {
    let Some(ctx) = common::ctx() else { return };
    let (m, k, n) = (4, 9, 3);
    let (a, b) = (common::random(m * k, 3), common::random(m * k, 4));
    let x = ctx.tensor(&a, [m, k]).unwrap();
    let w = ctx.tensor(&common::random(k * n, 5), [k, n]).unwrap();
    let before = ctx.matmul(&x, &w).unwrap();
    ctx.write(&x, &b).unwrap();
    let after = ctx.matmul(&x, &w).unwrap();
    ctx.synchronize().unwrap();
    assert_eq!(x.to_vec_blocking::<f32>().unwrap(), b);
    let wv = w.to_vec_blocking::<f32>().unwrap();
    for (t, v) in [(&before, &a), (&after, &b)] {
        let (want, mag) = common::matmul_ref(v, &wv, m, n, k, &[(0, 0)]);
        common::assert_close(
            "matmul around a write",
            &t.to_vec_blocking::<f32>().unwrap(),
            &want,
            |i| common::matmul_tolerance(DType::F32, k, want[i], mag[i]),
        );
    }
    // f16, odd length (the last word half written).
    let h: Vec<wgtile::f16> = (0..7)
        .map(|i| wgtile::f16::from_f32(i as f32 - 3.5))
        .collect();
    if ctx.profile().shader_f16 {
        let t = ctx.zeros([7], DType::F16).unwrap();
        ctx.write(&t, &h).unwrap();
        assert_eq!(t.to_vec_blocking::<wgtile::f16>().unwrap(), h);
    }
    assert!(matches!(
        ctx.write(&x, &h[..]),
        Err(wgtile::Error::DTypeMismatch { .. })
    ));
    assert!(matches!(
        ctx.write(&x, &b[1..]),
        Err(wgtile::Error::InvalidArgument(_))
    ));
    let padded = ctx.tensor_padded(&a, [m, k], 16).unwrap();
    assert!(ctx.write(&padded, &b).is_err());
    let other = common::context_without(&ctx, wgtile::wgpu::Features::empty());
    assert!(other.write(&x, &b).is_err());
    // Zero elements: nothing to write.
    ctx.write(&ctx.zeros([0, 3], DType::F32).unwrap(), &[] as &[f32])
        .unwrap();
}

/// `ctx.write_f32` into f32, f16 and bf16 tensors of odd and prime
/// lengths: the bits the host rounding gives (round to nearest even, as
/// `tensor_from_f32`), checked on ties, overflow, subnormals, infinities
/// and NaN; ordered between the work submitted before and after it;
/// integer tensors and wrong lengths refused.
#[test]
fn write_f32_converts_to_the_tensor_dtype() {
    let Some(ctx) = common::ctx() else { return };
    // Ties of both formats (1 + 2^-11 and 1 + 2^-8 + 2^-9 round to even),
    // past f16's range, an f16 subnormal, and the IEEE specials.
    let special = [
        1.0 + 2f32.powi(-11),
        1.0 + 3.0 * 2f32.powi(-11),
        1.0 + 2f32.powi(-8) + 2f32.powi(-9),
        -(1.0 + 2f32.powi(-9)),
        70000.0,
        -1e30,
        3e-6,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        -0.0,
    ];
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        for shape in [vec![13usize], vec![3, 7], vec![2, 3, 5]] {
            let n: usize = shape.iter().product();
            let mut data = common::random(n, n as u64);
            data[..special.len().min(n)].copy_from_slice(&special[..special.len().min(n)]);
            let t = ctx.zeros(&shape, dtype).unwrap();
            ctx.fill(&t, f32::NAN).unwrap();
            ctx.write_f32(&t, &data).unwrap();
            // The same bits as an upload through tensor_from_f32 (and f32 as is).
            let want = ctx.tensor_from_f32(&data, &shape, dtype).unwrap();
            let got = bits_of(&t);
            assert_eq!(got, bits_of(&want), "{dtype} {shape:?}");
            // Against the rounding rule itself on the specials.
            let host: Vec<u32> = data
                .iter()
                .map(|&v| match dtype {
                    DType::F32 => v.to_bits(),
                    DType::F16 => u32::from(wgtile::f16::from_f32(v).to_bits()),
                    _ => u32::from(wgtile::bf16::from_f32(v).to_bits()),
                })
                .collect();
            assert_eq!(got, host, "{dtype} {shape:?}");
        }
    }
    // Ordered as write: a copy made before the write holds the old values,
    // one made after it the new ones.
    let (a, b) = (common::random(31, 1), common::random(31, 2));
    for dtype in [DType::F32, DType::BF16] {
        let x = ctx.tensor_from_f32(&a, [31], dtype).unwrap();
        // x + 0 is a copy (no element is -0), run on the GPU in order.
        let before = ctx.eval(&(x.expr() + 0.0)).unwrap();
        ctx.write_f32(&x, &b).unwrap();
        let after = ctx.eval(&(x.expr() + 0.0)).unwrap();
        let round = |v: &[f32]| v.iter().map(|&x| dtype.round(x)).collect::<Vec<_>>();
        assert_eq!(before.to_f32_vec_blocking().unwrap(), round(&a), "{dtype}");
        assert_eq!(after.to_f32_vec_blocking().unwrap(), round(&b), "{dtype}");
    }
    // Refusals: integer tensors, a wrong length, a padded or foreign tensor.
    for dtype in [DType::I32, DType::U32] {
        let t = ctx.zeros([4], dtype).unwrap();
        assert!(
            matches!(ctx.write_f32(&t, &[1.0; 4]), Err(wgtile::Error::NotFloat { got, .. }) if got == dtype),
            "{dtype}"
        );
    }
    let x = ctx.zeros([3, 4], DType::BF16).unwrap();
    assert!(matches!(
        ctx.write_f32(&x, &a[..11]),
        Err(wgtile::Error::InvalidArgument(_))
    ));
    let padded = ctx.tensor_padded(&a[..12], [3, 4], 8).unwrap();
    assert!(ctx.write_f32(&padded, &a[..12]).is_err());
    let other = common::context_without(&ctx, wgtile::wgpu::Features::empty());
    assert!(other.write_f32(&x, &a[..12]).is_err());
    ctx.write_f32(&ctx.zeros([0, 3], DType::F16).unwrap(), &[])
        .unwrap();
}

/// A batch runs the same kernels as op by op (bit-identical results) in
/// one submission; reads inside it, nesting, an op's error inside it, and
/// timing inside it.
#[test]
fn batch_matches_op_by_op() {
    let Some(shared) = common::ctx() else { return };
    // A context of its own: its submission count is this test's alone.
    let ctx = common::context_without(&shared, wgtile::wgpu::Features::empty());
    let x = ctx.tensor(&common::random(5 * 33, 6), [5, 33]).unwrap();
    let w1 = ctx.tensor(&common::random(33 * 17, 7), [33, 17]).unwrap();
    let w2 = ctx.tensor(&common::random(17 * 33, 8), [17, 33]).unwrap();
    let forward = || -> wgtile::Result<wgtile::Tensor> {
        let h = ctx.matmul_with(&x, &w1, &wgtile::Epilogue::new().relu())?;
        let s = ctx.softmax(&h)?;
        let y = ctx.matmul(&s, &w2)?;
        ctx.eval(&(y.expr() * 2.0 + &x))
    };
    let s0 = ctx.submissions();
    let want = forward().unwrap();
    let op_by_op = ctx.submissions() - s0;
    let want = want.to_vec_blocking::<f32>().unwrap();
    let s0 = ctx.submissions();
    let got = ctx.batch(forward).unwrap();
    assert_eq!(
        ctx.submissions() - s0,
        1,
        "one submission for the batch ({op_by_op} op by op)"
    );
    assert!(op_by_op >= 4, "{op_by_op} submissions op by op");
    assert_eq!(got.to_vec_blocking::<f32>().unwrap(), want);
    // Nested, with a read inside (it submits what was recorded first).
    let (inner, outer) = ctx
        .batch(|| {
            let a = ctx.batch(forward)?;
            let read = a.to_vec_blocking::<f32>()?;
            Ok((read, forward()?))
        })
        .unwrap();
    assert_eq!(inner, want);
    assert_eq!(outer.to_vec_blocking::<f32>().unwrap(), want);
    // An argument error inside comes back from batch; the context works on.
    let err = ctx.batch(|| {
        forward()?;
        ctx.matmul(&x, &x)
    });
    assert!(
        matches!(err, Err(wgtile::Error::ShapeMismatch { .. })),
        "{err:?}"
    );
    let plan = ctx.softmax_plan(&x).unwrap();
    assert!(
        ctx.batch(|| ctx.time(&plan, &TimingOptions::default()))
            .is_err()
    );
    assert_eq!(
        ctx.batch(forward)
            .unwrap()
            .to_vec_blocking::<f32>()
            .unwrap(),
        want
    );
    // The same pass as plans built once, replayed twice in one submission each.
    let opts = wgtile::MatmulOptions::default();
    let h = ctx
        .matmul_plan_with(&x, &w1, None, &opts, &wgtile::Epilogue::new().relu())
        .unwrap();
    let s = ctx.softmax_plan(h.output()).unwrap();
    let y = ctx.matmul_plan(s.output(), &w2, None, &opts).unwrap();
    let e = ctx.eval_plan(&(y.output().expr() * 2.0 + &x)).unwrap();
    for _ in 0..2 {
        ctx.fill(e.output(), f32::NAN).unwrap();
        let s0 = ctx.submissions();
        ctx.run_plans(&[&h, &s, &y, &e]).unwrap();
        assert_eq!(ctx.submissions() - s0, 1);
        assert_eq!(e.output().to_vec_blocking::<f32>().unwrap(), want);
    }
    let foreign = shared
        .softmax_plan(&shared.zeros([2, 2], DType::F32).unwrap())
        .unwrap();
    assert!(ctx.run_plans(&[&foreign]).is_err());
}

/// `matmul_with_options`: a transposed weight with a bias and an activation.
#[test]
fn matmul_with_options_takes_transposes_and_an_epilogue() {
    let Some(ctx) = common::ctx() else { return };
    let (m, k, n) = (6, 11, 5);
    let (xv, wv, bv) = (
        common::random(m * k, 9),
        common::random(n * k, 10),
        common::random(n, 11),
    );
    let x = ctx.tensor(&xv, [m, k]).unwrap();
    let w = ctx.tensor(&wv, [n, k]).unwrap();
    let bias = ctx.tensor(&bv, [n]).unwrap();
    let y = ctx
        .matmul_with_options(
            &x,
            &w,
            &wgtile::MatmulOptions::default().transposed(false, true),
            &wgtile::Epilogue::new().bias(&bias).relu(),
        )
        .unwrap()
        .to_vec_blocking::<f32>()
        .unwrap();
    for i in 0..m {
        for j in 0..n {
            let dot: f64 = (0..k)
                .map(|p| f64::from(xv[i * k + p]) * f64::from(wv[j * k + p]))
                .sum();
            let want = (dot + f64::from(bv[j])).max(0.0);
            assert!(
                (f64::from(y[i * n + j]) - want).abs() <= 1e-5,
                "({i}, {j}): {} vs {want}",
                y[i * n + j]
            );
        }
    }
}

/// i32 and u32 tensors: upload, read back, fills, views; every float op
/// refuses them by name.
#[test]
fn integer_tensors_and_the_ops_that_refuse_them() {
    let Some(ctx) = common::ctx() else { return };
    let iv: Vec<i32> = vec![0, 1, -1, i32::MAX, i32::MIN, 7, -123_456_789];
    let t = ctx.tensor(&iv, [7]).unwrap();
    assert_eq!(t.dtype(), DType::I32);
    assert_eq!(t.to_vec_blocking::<i32>().unwrap(), iv);
    let uv: Vec<u32> = vec![0, 1, u32::MAX, 1 << 31, 12345];
    let u = ctx.tensor(&uv, [5]).unwrap();
    assert_eq!(u.to_vec_blocking::<u32>().unwrap(), uv);
    assert_eq!(
        ctx.full([3], -2.7, DType::I32)
            .unwrap()
            .to_vec_blocking::<i32>()
            .unwrap(),
        vec![-2; 3]
    );
    assert_eq!(
        ctx.full([2], -2.7, DType::U32)
            .unwrap()
            .to_vec_blocking::<u32>()
            .unwrap(),
        vec![0; 2]
    );
    assert_eq!(
        ctx.zeros([2, 2], DType::U32)
            .unwrap()
            .to_vec_blocking::<u32>()
            .unwrap(),
        vec![0; 4]
    );
    assert_eq!(
        t.to_f32_vec_blocking().unwrap(),
        iv.iter().map(|&v| v as f32).collect::<Vec<_>>()
    );
    // A padded integer tensor copied contiguous, and written.
    let grid: Vec<i32> = (0..15).map(|v| v * 1_000_003 - 7).collect();
    let padded = ctx.tensor_padded(&grid, [3, 5], 8).unwrap();
    assert_eq!(
        ctx.contiguous(&padded)
            .unwrap()
            .to_vec_blocking::<i32>()
            .unwrap(),
        grid
    );
    ctx.write(
        &t,
        &iv.iter().map(|v| v.wrapping_mul(3)).collect::<Vec<_>>(),
    )
    .unwrap();
    assert_eq!(
        t.to_vec_blocking::<i32>().unwrap()[6],
        -123_456_789i32.wrapping_mul(3)
    );

    let m = ctx.tensor(&[1i32; 4], [2, 2]).unwrap();
    let f = ctx.zeros([2, 2], DType::F32).unwrap();
    let not_float = |r: wgtile::Result<wgtile::Tensor>, what: &str| {
        assert!(
            matches!(
                r,
                Err(wgtile::Error::NotFloat {
                    got: DType::I32,
                    ..
                })
            ),
            "{what}: {r:?}"
        );
    };
    not_float(ctx.matmul(&m, &m), "matmul");
    not_float(ctx.matmul(&f, &m), "matmul with one integer operand");
    not_float(ctx.softmax(&m), "softmax");
    not_float(ctx.sum(&m, wgtile::Axis::All), "sum");
    not_float(ctx.eval(&(m.expr() + 1.0)), "an expression");
    not_float(
        ctx.matmul_with(&f, &f, &wgtile::Epilogue::new().residual(&m)),
        "a residual",
    );
    not_float(
        ctx.rand_uniform([2], 0.0, 1.0, DType::I32, 1),
        "rand_uniform",
    );
    assert!(matches!(
        ctx.matmul_with_options(
            &f,
            &f,
            &wgtile::MatmulOptions {
                out_dtype: Some(DType::U32),
                ..Default::default()
            },
            &wgtile::Epilogue::new()
        ),
        Err(wgtile::Error::NotFloat {
            got: DType::U32,
            ..
        })
    ));
    assert!(matches!(
        ctx.fill_random(&m, 1),
        Err(wgtile::Error::NotFloat { .. })
    ));
    assert!(matches!(
        ctx.quantize(&m, wgtile::QuantFormat::Int8, wgtile::QuantAxis::Rows),
        Err(wgtile::Error::NotFloat { .. })
    ));
    assert!(matches!(
        wgtile::KvCache::new(&ctx, 1, 1, 4, 4, 8, DType::I32),
        Err(wgtile::Error::NotFloat { .. })
    ));
}

/// Casts between every pair of the five dtypes against Rust's `as` and
/// the `half` crate, on the values where the rules differ.
#[test]
fn casts_to_and_from_integers_follow_rusts_as() {
    let Some(ctx) = common::ctx() else { return };
    let floats: Vec<f32> = vec![
        0.0,
        -0.0,
        0.5,
        -0.5,
        0.99,
        1.0,
        -1.0,
        1.5,
        -1.5,
        2.5,
        3.7,
        -3.7,
        1e-40,
        -1e-40,
        65504.0,
        65520.0,
        16_777_217.0,
        2_147_483_520.0,
        2_147_483_648.0,
        -2_147_483_648.0,
        -2_147_483_904.0,
        4_294_967_040.0,
        4_294_967_296.0,
        1e20,
        -1e20,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
    ];
    let ints: Vec<i32> = vec![
        0,
        1,
        -1,
        7,
        -7,
        2047,
        2049,
        65504,
        65519,
        65520,
        70000,
        16_777_216,
        16_777_217,
        16_777_219,
        33_554_435,
        123_456_789,
        -123_456_789,
        i32::MAX,
        i32::MIN,
        i32::MIN + 1,
    ];
    let uints: Vec<u32> = ints
        .iter()
        .map(|&v| v as u32)
        .chain([u32::MAX, 3_000_000_001])
        .collect();
    let f = ctx.tensor(&floats, [floats.len()]).unwrap();
    let i = ctx.tensor(&ints, [ints.len()]).unwrap();
    let u = ctx.tensor(&uints, [uints.len()]).unwrap();
    // Expected bits of one source value (as f64 for the float sources'
    // exact value) in each target dtype.
    let from_f32 = |v: f32, to: DType| -> u32 {
        match to {
            DType::F32 => v.to_bits(),
            DType::F16 => u32::from(wgtile::f16::from_f32(v).to_bits()),
            DType::BF16 => u32::from(wgtile::bf16::from_f32(v).to_bits()),
            DType::I32 => (v as i32) as u32,
            DType::U32 => v as u32,
            other => panic!("no rule for {other}"),
        }
    };
    for to in [DType::F32, DType::F16, DType::BF16, DType::I32, DType::U32] {
        let want: Vec<u32> = floats.iter().map(|&v| from_f32(v, to)).collect();
        assert_eq!(bits_of(&ctx.cast(&f, to).unwrap()), want, "f32 -> {to}");
        let want: Vec<u32> = ints
            .iter()
            .map(|&v| {
                // Between the integer types the bits stay (`as`).
                if to == DType::U32 || to == DType::I32 {
                    v as u32
                } else {
                    from_f32(v as f32, to)
                }
            })
            .collect();
        assert_eq!(bits_of(&ctx.cast(&i, to).unwrap()), want, "i32 -> {to}");
        let want: Vec<u32> = uints
            .iter()
            .map(|&v| {
                if to == DType::I32 || to == DType::U32 {
                    v
                } else {
                    from_f32(v as f32, to)
                }
            })
            .collect();
        assert_eq!(bits_of(&ctx.cast(&u, to).unwrap()), want, "u32 -> {to}");
        // From f16 and bf16: widened exactly, then as from f32.
        for half in [DType::F16, DType::BF16] {
            let h = ctx.cast(&f, half).unwrap();
            let widened = ctx
                .cast(&h, DType::F32)
                .unwrap()
                .to_vec_blocking::<f32>()
                .unwrap();
            let want: Vec<u32> = widened.iter().map(|&v| from_f32(v, to)).collect();
            assert_eq!(bits_of(&ctx.cast(&h, to).unwrap()), want, "{half} -> {to}");
        }
    }
}

/// gather and index_select on every axis of odd shapes, each table dtype,
/// ids of any shape with some out of range (NaN or zero rows); arange.
#[test]
fn gather_takes_rows_by_integer_ids() {
    let Some(ctx) = common::ctx() else { return };
    let poison = |d: DType| -> u32 {
        match d {
            DType::F32 => 0x7fc0_0000,
            DType::F16 => 0x7e00,
            DType::BF16 => 0x7fc0,
            _ => 0,
        }
    };
    // [3, 5, 8]: rows of whole 16-byte units.
    for shape in [
        vec![7usize, 5],
        vec![3, 4, 6],
        vec![5],
        vec![2, 0, 3],
        vec![3, 5, 8],
    ] {
        let n: usize = shape.iter().product();
        for dtype in [DType::F32, DType::F16, DType::BF16, DType::I32] {
            let words: Vec<u32> = (0..n as u32)
                .map(|v| v.wrapping_mul(2_654_435_761) >> if dtype.size() == 2 { 16 } else { 0 })
                .collect();
            let table = match dtype {
                DType::F32 => ctx.tensor(
                    &words
                        .iter()
                        .map(|&w| f32::from_bits(w & 0x3fff_ffff))
                        .collect::<Vec<_>>(),
                    &shape,
                ),
                DType::F16 => ctx.tensor(
                    &words
                        .iter()
                        .map(|&w| wgtile::f16::from_bits(w as u16 & 0x3fff))
                        .collect::<Vec<_>>(),
                    &shape,
                ),
                DType::BF16 => ctx.tensor(
                    &words
                        .iter()
                        .map(|&w| wgtile::bf16::from_bits(w as u16 & 0x3fff))
                        .collect::<Vec<_>>(),
                    &shape,
                ),
                _ => ctx.tensor(&words.iter().map(|&w| w as i32).collect::<Vec<_>>(), &shape),
            }
            .unwrap();
            let stored: Vec<u32> = match dtype {
                DType::F32 => words.iter().map(|&w| w & 0x3fff_ffff).collect(),
                DType::F16 | DType::BF16 => words.iter().map(|&w| w & 0x3fff).collect(),
                _ => words.clone(),
            };
            for axis in 0..shape.len() {
                let rows = shape[axis] as i32;
                for ids_shape in [vec![4usize], vec![2, 3], vec![0]] {
                    let m: usize = ids_shape.iter().product();
                    let ids: Vec<i32> = (0..m as i32)
                        .map(|j| [j % rows.max(1), -1, rows, rows - 1, 0, rows + 5][j as usize % 6])
                        .collect();
                    let idt = ctx.tensor(&ids, &ids_shape).unwrap();
                    let got = ctx.gather(&table, &idt, axis).unwrap();
                    let mut want_shape = shape[..axis].to_vec();
                    want_shape.extend(&ids_shape);
                    want_shape.extend(&shape[axis + 1..]);
                    assert_eq!(got.shape(), want_shape.as_slice());
                    let outer: usize = shape[..axis].iter().product();
                    let inner: usize = shape[axis + 1..].iter().product();
                    let mut want = Vec::new();
                    for o in 0..outer {
                        for &id in &ids {
                            for c in 0..inner {
                                want.push(if id < 0 || id >= rows {
                                    poison(dtype)
                                } else {
                                    stored[(o * rows as usize + id as usize) * inner + c]
                                });
                            }
                        }
                    }
                    let got_bits: Vec<u32> = match dtype {
                        DType::F32 => got
                            .to_vec_blocking::<f32>()
                            .unwrap()
                            .iter()
                            .map(|v| v.to_bits())
                            .collect(),
                        DType::F16 => got
                            .to_vec_blocking::<wgtile::f16>()
                            .unwrap()
                            .iter()
                            .map(|v| u32::from(v.to_bits()))
                            .collect(),
                        DType::BF16 => got
                            .to_vec_blocking::<wgtile::bf16>()
                            .unwrap()
                            .iter()
                            .map(|v| u32::from(v.to_bits()))
                            .collect(),
                        _ => got
                            .to_vec_blocking::<i32>()
                            .unwrap()
                            .iter()
                            .map(|&v| v as u32)
                            .collect(),
                    };
                    assert_eq!(got_bits, want, "{dtype} {shape:?} axis {axis} ids {ids:?}");
                }
            }
        }
    }
    // u32 ids, index_select, and the errors.
    let table = ctx.tensor(&common::random(12, 3), [4, 3]).unwrap();
    let ids = ctx.tensor(&[3u32, 0, 3], [3]).unwrap();
    let rows = table.to_vec_blocking::<f32>().unwrap();
    let want: Vec<f32> = [3, 0, 3]
        .iter()
        .flat_map(|&r| rows[r * 3..r * 3 + 3].to_vec())
        .collect();
    assert_eq!(
        ctx.index_select(&table, 0, &ids)
            .unwrap()
            .to_vec_blocking::<f32>()
            .unwrap(),
        want
    );
    assert!(
        ctx.index_select(&table, 0, &ctx.tensor(&[0u32; 4], [2, 2]).unwrap())
            .is_err()
    );
    assert!(matches!(
        ctx.gather(&table, &ids, 2),
        Err(wgtile::Error::InvalidArgument(_))
    ));
    assert!(matches!(
        ctx.gather(&table, &table, 0),
        Err(wgtile::Error::DTypeMismatch { .. })
    ));
    // arange.
    assert_eq!(
        ctx.arange(5, DType::I32)
            .unwrap()
            .to_vec_blocking::<i32>()
            .unwrap(),
        vec![0, 1, 2, 3, 4]
    );
    assert_eq!(
        ctx.arange(3, DType::U32)
            .unwrap()
            .to_vec_blocking::<u32>()
            .unwrap(),
        vec![0, 1, 2]
    );
    let big = ctx
        .arange(70_001, DType::F32)
        .unwrap()
        .to_vec_blocking::<f32>()
        .unwrap();
    assert!(big.iter().enumerate().all(|(i, &v)| v == i as f32));
    assert_eq!(ctx.arange(0, DType::I32).unwrap().numel(), 0);
    assert!(ctx.arange(4, DType::F16).is_err());
    assert!(ctx.arange((1 << 24) + 1, DType::F32).is_err());
}

/// Bits of a tensor of any dtype, for exact comparisons of copies.
fn bits_of(t: &wgtile::Tensor) -> Vec<u32> {
    match t.dtype() {
        DType::F32 => t
            .to_vec_blocking::<f32>()
            .unwrap()
            .iter()
            .map(|v| v.to_bits())
            .collect(),
        DType::F16 => t
            .to_vec_blocking::<wgtile::f16>()
            .unwrap()
            .iter()
            .map(|v| u32::from(v.to_bits()))
            .collect(),
        DType::BF16 => t
            .to_vec_blocking::<wgtile::bf16>()
            .unwrap()
            .iter()
            .map(|v| u32::from(v.to_bits()))
            .collect(),
        DType::I32 => t
            .to_vec_blocking::<i32>()
            .unwrap()
            .iter()
            .map(|&v| v as u32)
            .collect(),
        _ => t.to_vec_blocking::<u32>().unwrap(),
    }
}

/// A tensor of `shape` whose elements are distinct bit patterns (finite
/// for the float dtypes), and those patterns.
fn distinct(ctx: &Context, shape: &[usize], dtype: DType, seed: u32) -> (wgtile::Tensor, Vec<u32>) {
    let n: usize = shape.iter().product();
    let raw: Vec<u32> = (0..n as u32)
        .map(|i| (i.wrapping_add(seed)).wrapping_mul(2_654_435_761))
        .collect();
    let t = match dtype {
        DType::F32 => ctx.tensor(
            &raw.iter()
                .map(|&w| f32::from_bits(w & 0x3fff_ffff))
                .collect::<Vec<_>>(),
            shape,
        ),
        DType::F16 => ctx.tensor(
            &raw.iter()
                .map(|&w| wgtile::f16::from_bits((w >> 16) as u16 & 0x3fff))
                .collect::<Vec<_>>(),
            shape,
        ),
        DType::BF16 => ctx.tensor(
            &raw.iter()
                .map(|&w| wgtile::bf16::from_bits((w >> 16) as u16 & 0x3fff))
                .collect::<Vec<_>>(),
            shape,
        ),
        _ => ctx.tensor(&raw.iter().map(|&w| w as i32).collect::<Vec<_>>(), shape),
    }
    .unwrap();
    let held = bits_of(&t);
    (t, held)
}

/// Row-major index of `idx` in `shape`.
fn flat(idx: &[usize], shape: &[usize]) -> usize {
    idx.iter().zip(shape).fold(0, |acc, (&i, &n)| acc * n + i)
}

/// Every index of `shape` in row-major order.
fn indices(shape: &[usize]) -> Vec<Vec<usize>> {
    let n: usize = shape.iter().product();
    (0..n)
        .map(|mut e| {
            let mut idx = vec![0; shape.len()];
            for k in (0..shape.len()).rev() {
                idx[k] = e % shape[k];
                e /= shape[k];
            }
            idx
        })
        .collect()
}

/// permute, transpose, narrow, split and concat: every permutation of odd
/// rank-3 and rank-4 shapes and every axis, in each dtype (2-byte ones
/// through whole words and through half-word writes), padded sources and
/// empty axes, bit for bit against the host; their errors.
#[test]
fn layout_ops_copy_exactly() {
    let Some(ctx) = common::ctx() else { return };
    let perms3: Vec<Vec<usize>> = vec![
        vec![0, 1, 2],
        vec![0, 2, 1],
        vec![1, 0, 2],
        vec![1, 2, 0],
        vec![2, 0, 1],
        vec![2, 1, 0],
    ];
    for dtype in [DType::F32, DType::F16, DType::BF16, DType::I32] {
        for shape in [
            vec![3usize, 5, 7],
            vec![2, 4, 6],
            vec![1, 0, 3],
            vec![4, 1, 9],
            // Rows that divide into 16-byte units.
            vec![3, 2, 16],
        ] {
            let (t, held) = distinct(&ctx, &shape, dtype, 1);
            for p in &perms3 {
                let got = bits_of(&ctx.permute(&t, p).unwrap());
                let out_shape: Vec<usize> = p.iter().map(|&a| shape[a]).collect();
                let want: Vec<u32> = indices(&out_shape)
                    .iter()
                    .map(|o| {
                        let mut src = vec![0; 3];
                        for (j, &a) in p.iter().enumerate() {
                            src[a] = o[j];
                        }
                        held[flat(&src, &shape)]
                    })
                    .collect();
                assert_eq!(got, want, "{dtype} permute {shape:?} by {p:?}");
            }
            for axis in 0..3 {
                let n = shape[axis];
                for (start, len) in [(0, n), (n / 2, n - n / 2), (n.min(1), n.saturating_sub(2))] {
                    if start + len > n {
                        continue;
                    }
                    let got = bits_of(&ctx.narrow(&t, axis, start, len).unwrap());
                    let mut out_shape = shape.clone();
                    out_shape[axis] = len;
                    let want: Vec<u32> = indices(&out_shape)
                        .iter()
                        .map(|o| {
                            let mut src = o.clone();
                            src[axis] += start;
                            held[flat(&src, &shape)]
                        })
                        .collect();
                    assert_eq!(
                        got, want,
                        "{dtype} narrow {shape:?} axis {axis} {start}+{len}"
                    );
                }
                // concat of three pieces, odd sizes, along `axis`; split back.
                let sizes = [1usize, 2, 3];
                let pieces: Vec<(wgtile::Tensor, Vec<u32>)> = sizes
                    .iter()
                    .enumerate()
                    .map(|(k, &s)| {
                        let mut ps = shape.clone();
                        ps[axis] = s;
                        distinct(&ctx, &ps, dtype, 100 * k as u32)
                    })
                    .collect();
                let refs: Vec<&wgtile::Tensor> = pieces.iter().map(|(t, _)| t).collect();
                let joined = ctx.concat(&refs, axis).unwrap();
                let mut out_shape = shape.clone();
                out_shape[axis] = 6;
                let want: Vec<u32> = indices(&out_shape)
                    .iter()
                    .map(|o| {
                        let (mut k, mut i) = (0, o[axis]);
                        while i >= sizes[k] {
                            i -= sizes[k];
                            k += 1;
                        }
                        let mut ps = shape.clone();
                        ps[axis] = sizes[k];
                        let mut src = o.clone();
                        src[axis] = i;
                        pieces[k].1[flat(&src, &ps)]
                    })
                    .collect();
                assert_eq!(
                    bits_of(&joined),
                    want,
                    "{dtype} concat {shape:?} axis {axis}"
                );
                let back = ctx.split(&joined, axis, &sizes).unwrap();
                for (k, b) in back.iter().enumerate() {
                    assert_eq!(
                        bits_of(b),
                        pieces[k].1,
                        "{dtype} split {shape:?} axis {axis} piece {k}"
                    );
                }
            }
        }
    }
    // Rank 4 (the attention layout [B, S, H, D] -> [B, H, S, D]) and a
    // padded source.
    let (t, held) = distinct(&ctx, &[2, 3, 5, 4], DType::F16, 7);
    let got = bits_of(&ctx.permute(&t, &[0, 2, 1, 3]).unwrap());
    let want: Vec<u32> = indices(&[2, 5, 3, 4])
        .iter()
        .map(|o| held[flat(&[o[0], o[2], o[1], o[3]], &[2, 3, 5, 4])])
        .collect();
    assert_eq!(got, want);
    let grid: Vec<f32> = (0..35).map(|v| v as f32).collect();
    let padded = ctx.tensor_padded(&grid, [5, 7], 8).unwrap();
    let tr = ctx
        .transpose(&padded, 0, 1)
        .unwrap()
        .to_vec_blocking::<f32>()
        .unwrap();
    let want: Vec<f32> = (0..35).map(|e| grid[(e % 5) * 7 + e / 5]).collect();
    assert_eq!(tr, want);
    // Errors.
    assert!(ctx.permute(&t, &[0, 1, 1, 3]).is_err());
    assert!(ctx.permute(&t, &[0, 1, 2]).is_err());
    assert!(ctx.transpose(&t, 0, 4).is_err());
    assert!(ctx.narrow(&t, 1, 2, 2).is_err());
    assert!(ctx.narrow(&t, 4, 0, 1).is_err());
    assert!(ctx.split(&t, 1, &[1, 1]).is_err());
    let other = ctx.zeros([2, 3, 5, 4], DType::F32).unwrap();
    assert!(matches!(
        ctx.concat(&[&t, &other], 0),
        Err(wgtile::Error::DTypeMismatch { .. })
    ));
    let wrong = ctx.zeros([2, 3, 4, 4], DType::F16).unwrap();
    assert!(matches!(
        ctx.concat(&[&t, &wrong], 0),
        Err(wgtile::Error::ShapeMismatch { .. })
    ));
    assert!(ctx.concat(&[], 0).is_err());
}

/// A context of its own (the pool's counters are per context) on the
/// suite's adapter, with a pool of `budget` bytes.
fn pooled_context(ctx: &Context, budget: u64) -> Context {
    Context::new_blocking(wgtile::ContextOptions {
        adapter: Some(ctx.profile().name.clone()),
        backends: Some(ctx.profile().backend.into()),
        buffer_pool_bytes: budget,
        ..Default::default()
    })
    .unwrap()
}

/// A dropped tensor's buffer is handed to the next tensor of its size,
/// zeroed: `zeros` after a tensor of random values, and op outputs that
/// read their output's initial zeros, see no trace of what was there.
#[test]
fn pool_reuses_buffers_and_clears_them() {
    let Some(ctx) = common::ctx() else { return };
    let ctx = pooled_context(&ctx, 64 << 20);
    let n = 1021;
    let data = common::random(n, 3);
    let t = ctx.tensor(&data, [n]).unwrap();
    assert_eq!(t.to_vec_blocking::<f32>().unwrap(), data);
    drop(t);
    let before = ctx.buffer_pool_stats();
    assert!(before.free_bytes >= (n * 4) as u64, "{before:?}");
    let z = ctx.zeros([n], DType::F32).unwrap();
    assert_eq!(ctx.buffer_pool_stats().reused, before.reused + 1);
    assert!(
        z.to_vec_blocking::<f32>()
            .unwrap()
            .iter()
            .all(|&v| v == 0.0)
    );
    // Op outputs on reused buffers: the same values as on new ones.
    let x = ctx.tensor(&data, [n]).unwrap();
    let want: Vec<f32> = data.iter().map(|v| v * 2.0 + 1.0).collect();
    for _ in 0..3 {
        let y = ctx.eval(&(x.expr() * 2.0 + 1.0)).unwrap();
        assert_eq!(y.to_vec_blocking::<f32>().unwrap(), want);
    }
    // An upload onto a buffer whose clear was still pending when its
    // tensor went: the clear is dropped, the upload stays.
    drop(z);
    let pending = ctx.zeros([n], DType::F32).unwrap();
    drop(pending);
    let other = common::random(n, 4);
    let u = ctx.tensor(&other, [n]).unwrap();
    assert_eq!(u.to_vec_blocking::<f32>().unwrap(), other);
    // A write into a tensor whose clear is pending lands after the clear.
    drop(u);
    let w = ctx.zeros([n], DType::F32).unwrap();
    ctx.write(&w, &other).unwrap();
    assert_eq!(w.to_vec_blocking::<f32>().unwrap(), other);
    ctx.release_buffer_pool();
    assert_eq!(ctx.buffer_pool_stats().free_bytes, 0);
}

/// Inside a batch, a buffer freed mid-batch is not handed out again until
/// the batch has submitted (its recorded readers still need it), and a
/// buffer reused from before the batch is cleared in order.
#[test]
fn pool_inside_a_batch() {
    let Some(ctx) = common::ctx() else { return };
    let ctx = pooled_context(&ctx, 64 << 20);
    let n = 777;
    let data = common::random(n, 5);
    let x = ctx.tensor(&data, [n]).unwrap();
    // A free buffer of x's size from before the batch.
    drop(ctx.tensor(&common::random(n, 6), [n]).unwrap());
    let other = common::random(n, 7);
    let (z, w, fresh, up) = ctx
        .batch(|| {
            let y = ctx.eval(&(x.expr() * 3.0))?;
            let z = ctx.eval(&(y.expr() + 1.0))?;
            drop(y);
            // Must not take y's buffer: the upload lands before the
            // batch's kernels, and y's kernel would overwrite it.
            let up = ctx.tensor(&other, [n])?;
            let w = ctx.eval(&(x.expr() - 1.0))?;
            let fresh = ctx.zeros([n], DType::F32)?;
            Ok((z, w, fresh, up))
        })
        .unwrap();
    assert_eq!(up.to_vec_blocking::<f32>().unwrap(), other);
    let z = z.to_vec_blocking::<f32>().unwrap();
    let w = w.to_vec_blocking::<f32>().unwrap();
    for i in 0..n {
        assert_eq!(z[i], data[i] * 3.0 + 1.0, "z[{i}]");
        assert_eq!(w[i], data[i] - 1.0, "w[{i}]");
    }
    assert!(
        fresh
            .to_vec_blocking::<f32>()
            .unwrap()
            .iter()
            .all(|&v| v == 0.0)
    );
    // After the batch, y's buffer is free again.
    assert!(ctx.buffer_pool_stats().free_bytes >= (n * 4) as u64);
}

/// A pool of 0 bytes keeps nothing.
#[test]
fn pool_of_zero_bytes_is_off() {
    let Some(ctx) = common::ctx() else { return };
    let ctx = pooled_context(&ctx, 0);
    for _ in 0..3 {
        drop(ctx.zeros([100], DType::F32).unwrap());
    }
    let stats = ctx.buffer_pool_stats();
    assert_eq!((stats.reused, stats.free_bytes), (0, 0), "{stats:?}");
    assert_eq!(stats.created, 3);
}

/// A plan kept for replay keeps what it binds: its input dropped, the
/// input's buffer is not handed to a new tensor while the plan lives (the
/// plan would read the new tensor), and is once the plan is gone.
#[test]
fn pool_never_hands_out_a_buffer_a_plan_binds() {
    let Some(ctx) = common::ctx() else { return };
    let ctx = pooled_context(&ctx, 64 << 20);
    let n = 613;
    let data = common::random(n, 8);
    let x = ctx.tensor(&data, [n]).unwrap();
    let plan = ctx.eval_plan(&(x.expr() * 2.0)).unwrap();
    drop(x);
    let other = ctx.tensor(&common::random(n, 9), [n]).unwrap();
    plan.run().unwrap();
    let want: Vec<f32> = data.iter().map(|v| v * 2.0).collect();
    assert_eq!(plan.output().to_vec_blocking::<f32>().unwrap(), want);
    drop(other);
    drop(plan);
    // Now both buffers of that size are free.
    let reused = ctx.buffer_pool_stats().reused;
    let _a = ctx.zeros([n], DType::F32).unwrap();
    let _b = ctx.zeros([n], DType::F32).unwrap();
    assert_eq!(ctx.buffer_pool_stats().reused, reused + 2);
}
